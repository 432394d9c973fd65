"""Wall time, CPU time and peak memory of a child process and every process it starts.

A release made by a process pool spends most of its memory in the workers, so the peak counted
here is of the whole tree: the resident memory of the child and all its descendants, summed and
polled from /proc (Linux) every `interval` seconds (a peak shorter than that can be missed).
CPU time is the child's and its waited-for descendants' (os.wait4).
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class Measured:
    """How a command ran: exit code, wall and CPU seconds, peak resident MB of its tree, stderr tail."""

    returncode: int
    seconds: float
    cpu_seconds: float
    peak_tree_mb: float
    stderr: str


def _parents_and_rss() -> tuple[dict[int, int], dict[int, int]]:
    """(pid -> parent pid, pid -> resident kB) of every process readable in /proc."""
    parent, rss = {}, {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        pid = int(name)
        try:
            with open(f"/proc/{pid}/stat") as f:
                parent[pid] = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{pid}/status") as f:
                rss[pid] = next((int(line.split()[1]) for line in f if line.startswith("VmRSS:")), 0)
        except (OSError, ValueError, IndexError):
            continue
    return parent, rss


def tree_rss_kb(root: int) -> int:
    """Resident memory (kB) of process `root` and all its descendants now (0 if it is gone)."""
    parent, rss = _parents_and_rss()
    children: dict[int, list[int]] = {}
    for pid, ppid in parent.items():
        children.setdefault(ppid, []).append(pid)
    tree, frontier = set(), [root] if root in parent else []
    while frontier:
        pid = frontier.pop()
        if pid not in tree:
            tree.add(pid)
            frontier.extend(children.get(pid, []))
    return sum(rss.get(pid, 0) for pid in tree)


def run_measured(command: list[str], interval: float = 0.05, env: dict | None = None, cwd=None) -> Measured:
    """Run `command` to completion, polling its process tree's memory; stdout is discarded."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, cwd=cwd)
    peak = [0]
    done = threading.Event()

    def poll():
        while not done.is_set():
            peak[0] = max(peak[0], tree_rss_kb(proc.pid))
            done.wait(interval)

    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    stderr: list[bytes] = []
    reader = threading.Thread(target=lambda: stderr.append(proc.stderr.read()), daemon=True)
    reader.start()
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - t0
    done.set()
    poller.join()
    reader.join()
    proc.returncode = os.waitstatus_to_exitcode(status)
    # Not floored by the child's ru_maxrss: on Linux a child started by fork/vfork + exec inherits
    # the parent's high-water mark in it, so it would report this (large) process's peak.
    tail = b"".join(stderr).decode(errors="replace").strip().splitlines()[-5:]
    return Measured(proc.returncode, seconds, usage.ru_utime + usage.ru_stime, peak[0] / 1024, "\n".join(tail))
