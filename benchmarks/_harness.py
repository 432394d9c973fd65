"""The benchmark contract: a `Bench` names module-level functions that scripts/bench runs.

Each function takes no arguments, does one repetition of the work and returns a dict of named
figures (floats), e.g. {"seconds": 1.9} or {"samples_per_s": 4.1e6}. scripts/bench runs every
repetition in a fresh subprocess (so peak memory is measured per repetition), takes the median
of each figure over `repeats` runs, runs each reference the same way in the same session, and
writes BENCHMARKS.md with the machine, the command, the medians and ours/reference ratios.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

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
