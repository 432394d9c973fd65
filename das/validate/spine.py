"""`spine`: a release measured on a spine other than the standard one publishes it (spine.parquet), and it
is one nesting hierarchy over exactly the release's blocks, of the kind the manifest records. The NMF check
reads the geounits of every level from it (das.validate.nmf), in the spine's order.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import numpy as np

from das.core.errors import ValidationError
from das.model.geography import Geography
from das.model.levels import BLOCK, LEVEL_DIGITS, STATE
from das.model.spine import from_table
from das.validate.reading import parquet_frame
from das.validate.registry import Check
from das.validate.release import OpenRelease, StateRows
from das.validate.report import Report, first

SPINE_CHECK = "spine: every block of the release on one nesting hierarchy"


@lru_cache(maxsize=4)
def _read(path: Path, levels: tuple[str, ...], modified: float) -> Geography:
    table = parquet_frame(path, "the manifest records a spine")
    given = [lv for lv in levels if lv in table.columns]
    expected = [lv for lv in levels if LEVEL_DIGITS[STATE] < LEVEL_DIGITS[lv] < LEVEL_DIGITS[BLOCK]]
    if "GEOID" not in table.columns or not given or set(given) - set(expected):
        raise ValidationError(f"{path}: expected the columns GEOID and some of {expected}, found {list(table.columns)}")
    try:
        return from_table(table, levels)
    except ValueError as e:
        raise ValidationError(f"{path}: {e}") from None


def release_spine(release: OpenRelease) -> Geography | None:
    """The spine a release was measured on, read from its spine file (None: the standard spine)."""
    if release.manifest.spine is None:
        return None
    path = release.run.spine
    return _read(path, tuple(release.manifest.levels), path.stat().st_mtime if path.exists() else 0.0)


def state_spine(release: OpenRelease, state: str) -> Geography | None:
    """One state's part of the spine (its blocks, in the spine's order)."""
    spine = release_spine(release)
    if spine is None:
        return None
    keep = np.char.startswith(spine.blocks, state)
    return Geography(spine.blocks[keep], spine.levels, {lv: codes[keep] for lv, codes in spine.spine.items()})


def spine_state(rows: StateRows) -> tuple[list[str], list[str]] | None:
    """The shard's blocks in the spine against its blocks of the release universe: (the first 3 missing from
    the spine, the first 3 of the spine not of the release; None: no spine)."""
    spine = state_spine(rows.release, rows.state)
    if spine is None:
        return None
    universe = np.unique(np.asarray(rows.universe, dtype=str))
    found = np.sort(spine.blocks[rows.shard.holds(spine.blocks)])
    if np.array_equal(found, universe):
        return [], []
    return [str(b) for b in np.setdiff1d(universe, found)[:3]], [str(b) for b in np.setdiff1d(found, universe)[:3]]


def spine_merge(release: OpenRelease, parts: list) -> tuple[list[str], list[str]] | None:
    """The state's blocks that differ from its shards' (the first 3 of each kind of them all)."""
    parts = [p for p in parts if p is not None]
    if not parts:
        return None
    return [b for p in parts for b in p[0]][:3], [b for p in parts for b in p[1]][:3]


def spine_combine(release: OpenRelease, parts: dict[str, tuple | None], report: Report, alongside) -> None:
    problems = [f"state {state}: the spine's blocks differ from the release's" + (f" (missing {missing})" if missing
                else "") + (f" (not of the release {extra})" if extra else "")
                for state, part in parts.items() if part is not None for missing, extra in [part] if missing or extra]
    spine = release_spine(release)
    if spine is None:
        problems.insert(0, "the release claims a spine and its manifest records none")
    elif release.manifest.spine.kind == "standard":
        problems.insert(0, "the manifest records the standard spine beside a spine file")
    report.check(SPINE_CHECK, first(problems))


SPINE = Check("spine", spine_combine, state=spine_state, merge=spine_merge)
