"""EPNUM is 1..N without repeats over the whole persons MDF, checked from each state's summary of its
own EPNUMs (a few runs of consecutive values), reading a state's records again only when its EPNUMs
meet an earlier state's."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from das.validate.reading import ANY, GEO, Counties, read_state


@dataclass
class Epnums:
    """A part's EPNUMs, summarized for the whole-file check: how many, the range, the first repeats
    within the part as (row, EPNUM), and its distinct values as runs [starts[i], ends[i]]."""

    count: int
    low: int
    high: int
    repeats: list[tuple[int, int]]
    starts: np.ndarray
    ends: np.ndarray

    @classmethod
    def of(cls, epnum: np.ndarray, rows: np.ndarray) -> Epnums:
        if (np.diff(epnum) > 0).all():  # increasing, as written: distinct already (no sort, no hashing)
            repeated, distinct = np.zeros(0, np.int64), epnum
        else:
            repeated = np.flatnonzero(pd.Series(epnum).duplicated().to_numpy())[:3]
            distinct = np.unique(epnum)
        breaks = np.flatnonzero(np.diff(distinct) != 1)
        starts, ends = (distinct[np.r_[0, breaks + 1]], distinct[np.r_[breaks, len(distinct) - 1]]) if len(distinct) \
            else (distinct, distinct)
        return cls(len(epnum), int(distinct[0]) if len(distinct) else 0, int(distinct[-1]) if len(distinct) else 0,
                   [(int(rows[i]), int(epnum[i])) for i in repeated], starts, ends)


def _covered(starts: np.ndarray, ends: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Which values lie in one of the disjoint runs [starts[i], ends[i]] (sorted)."""
    run = np.searchsorted(starts, values, side="right") - 1
    return (run >= 0) & (ends[np.maximum(run, 0)] >= values)


def _union(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Runs merged into disjoint sorted runs."""
    order = np.argsort(starts, kind="stable")
    starts, ends = starts[order], np.maximum.accumulate(ends[order]) if len(ends) else ends
    new = np.r_[True, starts[1:] > ends[:-1] + 1] if len(starts) else np.zeros(0, bool)
    last = np.r_[np.flatnonzero(new)[1:] - 1, len(starts) - 1] if len(starts) else np.zeros(0, np.int64)
    return starts[new], ends[last]


def epnum_problems(parts: list[tuple[Epnums, Callable[[], tuple[np.ndarray, np.ndarray]]]]) -> list[str]:
    """EPNUM is 1..N without repeats over the whole MDF, from each part's summary (in file order); a
    part whose EPNUMs meet an earlier part's is read again (`reread`: its EPNUMs and rows) to name
    the rows that repeat one."""
    repeats: list[tuple[int, int]] = []
    starts, ends = np.zeros(0, np.int64), np.zeros(0, np.int64)
    count, low, high = 0, None, None
    for summary, reread in parts:
        if not summary.count:
            continue
        mine = summary.repeats
        latest = np.searchsorted(starts, summary.ends, side="right") - 1  # the last earlier run starting before each end
        if len(starts) and ((latest >= 0) & (ends[np.maximum(latest, 0)] >= summary.starts)).any():
            epnum, rows = reread()
            repeated = pd.Series(epnum).duplicated().to_numpy() | _covered(starts, ends, epnum)
            mine = [(int(rows[i]), int(epnum[i])) for i in np.flatnonzero(repeated)[:3]]
        repeats += mine
        starts, ends = _union(np.r_[starts, summary.starts], np.r_[ends, summary.ends])
        count += summary.count
        low = summary.low if low is None else min(low, summary.low)
        high = summary.high if high is None else max(high, summary.high)
    problems = [f"row {row + 1}: EPNUM {e} appears on an earlier row too" for row, e in repeats[:3]]
    if not repeats and count and (low != 1 or high != count):
        problems.append(f"EPNUM runs {low}..{high}, expected 1..{count}")
    return problems


def reread_epnums(path: Path, state: str, *, counties: Counties = ANY) -> tuple[np.ndarray, np.ndarray]:
    """A state's EPNUMs (of its counties [low, high)) in the persons MDF at `path`, and their rows."""
    frame, rows = read_state(path, state, [*GEO, "EPNUM"], counties=counties)
    return frame["EPNUM"].astype(np.int64).to_numpy(), rows
