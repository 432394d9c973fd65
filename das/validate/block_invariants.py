"""`block_invariants`: a TopDown release publishes its invariants per block (invariants.parquet: every block once,
its housing units and GQ facilities by type), and they are the ones its units MDF holds: per block, as many housing
units and facilities of each type, and no block of the MDF missing from the file. With them and the NMF, anyone can
post-process the release again (das postprocess).

The file is read here with pyarrow directly (not by das.io.outputs' reader): the validator shares no code with
the writer.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import numpy as np
import pandas as pd

from das.core.errors import ValidationError
from das.validate.reading import parquet_frame
from das.validate.registry import Check
from das.validate.release import GQ_FACILITY, OpenRelease, StateRows
from das.validate.report import Findings, Report, merged

BLOCK_INVARIANTS_CHECK = "block invariants: the housing units and GQ facilities per block the units MDF holds"


@lru_cache(maxsize=4)
def _read(path: Path, modified: float) -> pd.DataFrame:
    """The file as a frame indexed by block (GEOID), columns HOUSING_UNITS and each GQ type's count (1..7)."""
    frame = parquet_frame(path, "a TopDown release publishes its invariants per block")
    gq = [c for c in frame.columns if c.startswith("GQ_FACILITIES_")]
    if list(frame.columns[:2]) != ["GEOID", "HOUSING_UNITS"] or not gq:
        raise ValidationError(f"{path}: expected the columns GEOID, HOUSING_UNITS, GQ_FACILITIES_1.., found "
                              f"{list(frame.columns)}")
    blocks = frame["GEOID"].astype(str)
    if blocks.duplicated().any() or (blocks.str.len() != 15).any() or not blocks.is_monotonic_increasing:
        raise ValidationError(f"{path}: GEOID must list every block once, as 15-digit geocodes in order")
    counts = frame[["HOUSING_UNITS", *gq]].astype(np.int64)
    if (counts < 0).any().any():
        raise ValidationError(f"{path}: a count below 0")
    counts.columns = ["HOUSING_UNITS", *(int(c.rsplit("_", 1)[1]) for c in gq)]
    return counts.set_axis(blocks.to_numpy(), axis=0)


def published(release: OpenRelease) -> pd.DataFrame:
    path = release.run.block_invariants
    return _read(path, path.stat().st_mtime if path.exists() else 0.0)


def block_invariants_state(rows: StateRows) -> Findings:
    """The shard's blocks: the file's counts against the units MDF's (the first problems)."""
    found = Findings()
    table = published(rows.release)
    mine = table.loc[rows.shard.holds(table.index.to_numpy())]
    units = rows.units
    facilities = units[units["RTYPE"].astype(int) == GQ_FACILITY]
    housing = rows.housing.groupby("geocode", observed=True).size()
    mdf = pd.DataFrame({"HOUSING_UNITS": pd.Series(housing.to_numpy(), index=housing.index.astype(str))})
    if len(facilities):
        by_type = facilities.groupby(["geocode", facilities["GQTYPE_PL"].astype(int)], observed=True).size()
        by_type = by_type.unstack(fill_value=0)
        by_type.index = by_type.index.astype(str)
        mdf = mdf.join(by_type, how="outer")
    mdf = mdf.fillna(0).astype(np.int64)
    extra = [c for c in mdf.columns if c not in mine.columns]
    mdf = mdf.reindex(columns=mine.columns, fill_value=0)
    theirs, ours = mdf.align(mine, join="outer", fill_value=0)
    differ = theirs.index[(theirs != ours).any(axis=1)]
    found.check(BLOCK_INVARIANTS_CHECK,
                [f"block {g}: the units MDF holds {_said(theirs.loc[g])}, invariants.parquet {_said(ours.loc[g])}"
                 for g in differ] + [f"GQ type {c} in the units MDF has no column in invariants.parquet" for c in extra])
    return found


def _said(counts: pd.Series) -> str:
    gq = ", ".join(f"{n} of GQ type {t}" for t, n in counts.items() if t != "HOUSING_UNITS" and n)
    return f"{counts['HOUSING_UNITS']} housing units" + (f" and facilities {gq}" if gq else "")


def block_invariants_merge(release: OpenRelease, parts: list[Findings]) -> Findings:
    return Findings.fold(parts)


def block_invariants_combine(release: OpenRelease, parts: dict[str, Findings], report: Report, alongside=None) -> None:
    report.check(BLOCK_INVARIANTS_CHECK, merged(parts.values(), BLOCK_INVARIANTS_CHECK))


BLOCK_INVARIANTS = Check("block_invariants", block_invariants_combine, state=block_invariants_state,
                         merge=block_invariants_merge, needs=("units",))
