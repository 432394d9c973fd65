"""State partitions of a partitioned run: inputs given as directories of one file per state.

A run whose `[input] persons` and `units` are directories is partitioned: each directory holds
one Parquet or CSV file per state, whose name ends in that state's 2-digit FIPS code
(`persons_50.parquet`, `50.csv`). Everything below the state level (reading, measuring, solving,
writing, validating) is done per state on the workers; the driver holds only the nation and
the states (das/driver/partitioned.py). The NMF of a level below the state is then one file per state
(das.frame.rundir.nmf_level_files).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from das.core.errors import DasError
from das.io.tabular import InMemory

INPUT_SUFFIXES = (".parquet", ".csv")
_STATE_AT_END = re.compile(r"(?<![0-9])([0-9]{2})$")  # exactly two ASCII digits at the end: persons_150 is no state


class PartitionError(DasError, ValueError):
    """The input directories of a partitioned run do not pair up into one persons and one units file per state."""


@dataclass(frozen=True)
class StateInputs:
    """One state's confidential input files."""

    state: str
    persons: Path
    units: Path


def is_partitioned(persons: Path, units: Path | None) -> bool:
    """A run is partitioned when its inputs are directories (both, or neither: anything else is refused)."""
    persons_dir, units_dir = _is_dir(persons), _is_dir(units)
    if persons_dir != units_dir:
        raise PartitionError(f"[input] persons {persons} and units {units}: one is a directory and the other is not; "
                             "a partitioned run gives both as directories of one file per state")
    return persons_dir


def _is_dir(given) -> bool:
    return given is not None and not isinstance(given, InMemory) and Path(given).is_dir()


def _by_state(directory: Path, what: str) -> dict[str, Path]:
    files: dict[str, Path] = {}
    for path in sorted(Path(directory).iterdir()):
        if path.name.startswith("."):
            continue
        if path.is_symlink() and not path.exists():
            raise PartitionError(f"{path}: a symbolic link that reaches no file (a loop, or its target does not exist); "
                                 f"the {what} directory of a partitioned run holds one Parquet or CSV file per state")
        if not path.is_file():
            continue
        if path.suffix.lower() not in INPUT_SUFFIXES:
            raise PartitionError(f"{path}: not a Parquet or CSV file; the {what} directory of a partitioned run "
                                 "holds only one input file per state")
        match = _STATE_AT_END.search(path.stem)
        if match is None:
            raise PartitionError(f"{path}: the file name must end in the state's 2-digit FIPS code "
                                 f"(e.g. {what}_50{path.suffix})")
        state = match.group(1)
        if state in files:
            raise PartitionError(f"{path} and {files[state]}: two {what} files for state {state}")
        files[state] = path
    if not files:
        raise PartitionError(f"{directory}: no {what} input file (expected one Parquet or CSV file per state)")
    return files


def state_inputs(persons_dir: Path, units_dir: Path) -> list[StateInputs]:
    """The states of a partitioned run, sorted by FIPS code, each with its persons and units file.
    (That a file holds only its state is checked when it is read.)"""
    persons, units = _by_state(Path(persons_dir), "persons"), _by_state(Path(units_dir), "units")
    unpaired = sorted(set(persons) ^ set(units))
    if unpaired:
        s = unpaired[0]
        have, lacks = ("persons", "units") if s in persons else ("units", "persons")
        raise PartitionError(f"state {s} has a {have} file ({(persons if s in persons else units)[s]}) but no "
                             f"{lacks} file in {units_dir if lacks == 'units' else persons_dir}")
    return [StateInputs(s, persons[s], units[s]) for s in sorted(persons)]
