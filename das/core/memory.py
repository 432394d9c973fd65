"""What a process does with the memory it frees: keep it for the next allocation while a run works, hand it
back to the system when a long-lived worker ends a task. glibc only (elsewhere both are no-ops)."""

from __future__ import annotations

import ctypes
import gc

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters
KEPT_HEAP_BYTES = 2**31 - 1  # freed heap kept for reuse up to this much (mallopt takes an int)
MMAP_BYTES = 2**30  # allocations below this come from the heap, so their pages are reused when freed


def _libc():
    try:
        return ctypes.CDLL("libc.so.6")
    except OSError:
        return None


def keep_freed_memory() -> None:
    """Make glibc keep freed memory for the next allocation instead of handing it back at once: a run
    allocates and frees arrays of hundreds of MB per chunk and per batch, and on a virtual machine each page
    handed back and touched again is a fault taken through the host (on 2 shared cores, 45 of a
    California-size read's 70 CPU seconds were the system's). The peak is not added to: what is kept is
    reused."""
    libc = _libc()
    if libc is not None and hasattr(libc, "mallopt"):
        libc.mallopt(M_MMAP_THRESHOLD, ctypes.c_int(MMAP_BYTES))
        libc.mallopt(M_TRIM_THRESHOLD, ctypes.c_int(KEPT_HEAP_BYTES))


def hand_back_memory() -> None:
    """Collect garbage and hand the freed heap back to the system (glibc's malloc_trim): a long-lived worker
    then holds its live objects, not the peak of the tasks it ran."""
    gc.collect()
    libc = _libc()
    if libc is not None and hasattr(libc, "malloc_trim"):
        libc.malloc_trim(0)
