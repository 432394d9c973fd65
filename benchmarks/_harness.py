"""The benchmark contract: a `Bench` names module-level functions that scripts/bench runs.

Each function takes no arguments, does one repetition of the work and returns a dict of named
figures (floats), e.g. {"seconds": 1.9} or {"samples_per_s": 4.1e6}. scripts/bench runs every
repetition in a fresh subprocess (so peak memory is measured per repetition), takes the median
of each figure over `repeats` runs, runs each reference the same way in the same session, and
writes BENCHMARKS.md with the machine, the command, the medians and ours/reference ratios.
"""

from __future__ import annotations

import subprocess
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

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
