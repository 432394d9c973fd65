"""The release audit's neighbouring datasets: a handful of blocks of the tiny fixture, and each kind of neighbour
of its persons (added, removed, moved within or across, recoded), written as a run's inputs."""

from __future__ import annotations

import logging
import tomllib
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import pandas as pd
import tomli_w

from das.core.paths import FIXTURES

logger = logging.getLogger(__name__)


FIXTURE = FIXTURES / "tiny"


GEO = ("TABBLKST", "TABBLKCOU", "TABTRACTCE", "TABBLKGRPCE", "TABBLK")


# a handful of blocks of the tiny fixture: two in one block group (a move within it), one in another county
BLOCKS = {"home": "440010001001000", "within": "440010001001002", "across": "440030003002001"}


NEIGHBOURS = ("added", "removed", "moved within", "moved across", "recoded")


COVERED = ("moved within", "moved across", "recoded")  # bounded neighbours keeping every invariant


@dataclass(frozen=True)
class Dataset:
    """A persons and a units file (CSV) and the spec that releases them at the audit's budget."""

    spec: Path
    persons: pd.DataFrame


def base_records() -> tuple[pd.DataFrame, pd.DataFrame]:
    """The persons and units of BLOCKS in the tiny fixture (all its columns, as text)."""
    persons = pd.read_csv(FIXTURE / "persons.csv", dtype=str)
    units = pd.read_csv(FIXTURE / "units.csv", dtype=str)
    keep = set(BLOCKS.values())
    return (persons[_geocode(persons).isin(keep)].reset_index(drop=True),
            units[_geocode(units).isin(keep)].reset_index(drop=True))


def _geocode(frame: pd.DataFrame) -> pd.Series:
    """Each record's 15-digit block geocode (the block group is the block's first digit)."""
    return frame["TABBLKST"] + frame["TABBLKCOU"] + frame["TABTRACTCE"] + frame["TABBLK"]


def neighbour(persons: pd.DataFrame, kind: str) -> pd.DataFrame:
    """D' of `kind` from D: its first household person of the home block added again, removed, moved to
    another block of its block group or of another county, or recoded (race, ethnicity and age)."""
    home = _geocode(persons) == BLOCKS["home"]
    first = persons.index[home & (persons["RTYPE"] == "3")][0]
    out = persons.copy()
    if kind == "added":
        extra = out.loc[[first]].assign(EPNUM=str(int(out["EPNUM"].astype(int).max()) + 1))
        return pd.concat([out, extra], ignore_index=True)
    if kind == "removed":
        return out.drop(index=first).reset_index(drop=True)
    if kind in ("moved within", "moved across"):
        target = BLOCKS[kind.split()[1]]
        for column, (start, stop) in zip(GEO, ((0, 2), (2, 5), (5, 11), (11, 12), (11, 15))):
            out.loc[first, column] = target[start:stop]
        return out
    if kind == "recoded":
        row = out.loc[first]
        out.loc[first, "CENRACE"] = "06" if row["CENRACE"] != "06" else "01"
        out.loc[first, "CENHISP"] = "2" if row["CENHISP"] == "1" else "1"
        out.loc[first, "QAGE"] = "10" if int(row["QAGE"]) >= 18 else "40"
        out.loc[first, "VOTING_AGE"] = "1" if int(row["QAGE"]) >= 18 else "2"
        return out
    raise ValueError(f"unknown neighbour {kind!r}; known: {', '.join(NEIGHBOURS)}")


def write_dataset(folder: Path, spec_path: Path, persons: pd.DataFrame, units: pd.DataFrame, *, rho: Fraction,
                  delta: Fraction) -> Dataset:
    """The dataset's files and a copy of the spec releasing it at budget rho (every release) and `delta`."""
    folder.mkdir(parents=True)
    persons.to_csv(folder / "persons.csv", index=False)
    units.to_csv(folder / "units.csv", index=False)
    spec = tomllib.loads(Path(spec_path).read_text())
    spec["input"] = {"persons": "persons.csv", "units": "units.csv"}
    for release in ("persons", "units"):
        if release in spec:
            spec[release] = {**spec[release], "rho": str(rho)}
    spec["privacy"] = {**spec.get("privacy", {}), "delta": str(delta)}
    spec.get("privacy", {}).pop("seed", None)
    (folder / "spec.toml").write_text(tomli_w.dumps(spec))
    return Dataset(folder / "spec.toml", persons)
