"""The benchmark contract: a `Bench` names module-level functions that scripts/bench runs.

Each function takes no arguments, does one repetition of the work and returns a dict of named
figures (floats), e.g. {"seconds": 1.9} or {"samples_per_s": 4.1e6}. scripts/bench runs every
repetition in a fresh subprocess (so peak memory is measured per repetition), takes the median
of each figure over `repeats` runs, runs each reference the same way in the same session, and
writes BENCHMARKS.md with the machine, the command, the medians and ours/reference ratios.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE_KB = os.sysconf("SC_PAGE_SIZE") // 1024


def _children(pid: int) -> list[int] | None:
    """The child processes of `pid` (each of its threads' /proc children list), or None when the kernel has no such
    list (then every process's parent must be read)."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    found = []
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                found += [int(c) for c in f.read().split()]
        except FileNotFoundError:
            if not os.path.exists(f"/proc/{pid}/task/{tid}"):
                continue  # the thread ended
            return None
        except OSError:
            continue
    return found


def _parents() -> dict[int, int]:
    """pid -> parent pid of every process /proc lets us read."""
    parent = {}
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/stat") as f:
                    parent[int(pid)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
    return parent


def process_tree(root: int) -> set[int]:
    """Every process below `root` (children, their children, ...): walked down from it through /proc's children
    lists, reading a few files, not every process's on the machine (a poller at 20 Hz did, 5% of a core); where the
    kernel keeps no such lists, from every process's parent."""
    tree, frontier, parents = set(), [root], None
    while frontier:
        pid = frontier.pop()
        kids = _children(pid) if parents is None else None
        if kids is None:
            parents = parents or _parents()
            kids = [c for c, p in parents.items() if p == pid]
        for child in kids:
            if child not in tree:
                tree.add(child)
                frontier.append(child)
    return tree


def rss_kb(pid: int) -> int:
    """A process's resident memory now (KB; 0 once it has ended)."""
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * PAGE_KB
    except (OSError, ValueError, IndexError):
        return 0


def tree_rss_kb(root: int | None = None) -> int:
    """Resident memory of `root` (this process) and every process below it (pool workers, subprocess runs), KB."""
    root = os.getpid() if root is None else root
    return sum(rss_kb(pid) for pid in {root, *process_tree(root)})

Figures = dict[str, float]


@dataclass(frozen=True)
class Bench:
    name: str                      # unique, e.g. "sampler.dg_19.36"
    description: str               # one line: what is measured, on what input
    run: Callable[[], Figures]     # ours, one repetition
    key: str                       # the headline figure, e.g. "samples_per_s" or "seconds"
    higher_is_better: bool = False
    repeats: int = 5
    references: dict[str, Callable[[], Figures]] = field(default_factory=dict)  # label -> run
    target: str = ""               # the target, in words, e.g. "< 10 s, < 2 GB"
    default: bool = True           # run by a bare `scripts/bench`; False: only when named (hours-long studies)


@contextmanager
def code_at(commit: str) -> Iterator[Path]:
    """das as it was at `commit` (package, specs, fixtures), extracted into a temporary directory: a
    reference run puts it first on PYTHONPATH. das/specs links to its own specs, as the wheel ships
    them, since the venv's editable install would map das.specs to the current checkout's."""
    with tempfile.TemporaryDirectory() as tmp:
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", commit, "das", "specs", "geography_fixtures"],
                                 check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
        (Path(tmp) / "das" / "specs").symlink_to("../specs")
        yield Path(tmp)
