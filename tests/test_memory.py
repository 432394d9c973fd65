"""A process keeps its freed memory for reuse (das.core.memory): a large array freed and allocated again takes no
new page faults, where glibc's default hands it back and faults every page again."""

import subprocess
import sys

import pytest

PROGRAM = """
import resource, sys
import numpy as np
if sys.argv[1] == "keep":
    from das.core.memory import keep_freed_memory
    keep_freed_memory()
np.ones(1 << 25)  # 256 MB, touched, freed
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
np.ones(1 << 25)
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _faults(mode: str) -> int:
    done = subprocess.run([sys.executable, "-c", PROGRAM, mode], capture_output=True, text=True, check=True)
    return int(done.stdout)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_freed_memory_is_reused_without_faulting_its_pages_again():
    default, kept = _faults("default"), _faults("keep")
    assert default >= (1 << 28) // (2 << 20)  # handed back, then faulted in again (at least once per 2 MB page)
    assert kept <= default // 10


def test_handing_memory_back_is_safe_to_call_any_time():
    from das.core.memory import hand_back_memory, keep_freed_memory

    keep_freed_memory()
    hand_back_memory()
