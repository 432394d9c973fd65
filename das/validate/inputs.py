"""The invariants against the operator's confidential inputs (part of the `invariants` claim, when the run's
operator files, or inputs given to `das validate`, are at hand): the population of the nation and the
states, housing units and GQ facilities per block.

Each state reads its own rows of the inputs (its own files in a partitioned run); the driver counts the
persons of the inputs' states that the release does not have.
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from das.core.errors import ValidationError
from das.frame.bundle import BundleError, input_paths
from das.frame.rundir import RunDir
from das.io import partitions
from das.io.tabular import InMemory, Source, source
from das.model.levels import NATION, STATE
from das.validate.reading import ANY, GEO, Counties, county_filters, geocode, states_in
from das.validate.registry import Check
from das.validate.release import GQ_FACILITY, HOUSING_UNIT, Inputs, OpenRelease, StateRows
from das.validate.report import Findings, Report, merged

POPULATION = "total population invariant against the inputs (nation, state)"
HOUSING_CHECK = "housing units per block invariant"
FACILITIES_CHECK = "GQ facilities per block invariant"


def _read(path: Source, names: list[str], state: str | None = None, counties: Counties = ANY) -> pd.DataFrame:
    """The named columns of a confidential input file (CSV as text, or Parquet), only the state's rows (of its
    counties [low, high), das.validate.shards) if given."""
    shard = counties != ANY
    read = [*names, *(c for c in ("TABBLKST", "TABBLKCOU") if shard and c not in names)]
    if isinstance(path, InMemory) or path.suffix == ".csv":
        text = io.BytesIO(path.csv) if isinstance(path, InMemory) else path
        frame = pd.read_csv(text, dtype=str, keep_default_na=False, usecols=read)
    else:
        frame = pd.read_parquet(path, columns=read, filters=county_filters(state, counties) if state else None)
    if not state:
        return frame
    mine = _in_state(frame, state, counties)
    return frame.loc[mine, names].reset_index(drop=True)


def _in_state(frame: pd.DataFrame, state: str, counties: Counties = ANY) -> np.ndarray:
    """Which records are of the state (their TABBLKST) and of its counties [low, high) (TABBLKCOU), comparing
    only the distinct values."""
    def among(column, keep):
        codes, uniques = pd.factorize(frame[column], use_na_sentinel=False)
        values = pd.Series(uniques, dtype=object).astype(str).to_numpy()
        return np.array([keep(v) for v in values], dtype=bool)[codes] if len(codes) else codes == 0

    mine = among("TABBLKST", lambda v: v == state)
    low, high = counties
    if counties != ANY:
        mine &= among("TABBLKCOU", lambda v: (low is None or v >= low) and (high is None or v < high))
    return mine


def _per_state(column: pd.Series) -> dict[str, int]:
    """Records per TABBLKST value, as text (counted on the column's values, then their texts added up)."""
    counts = column.value_counts(dropna=False)
    texts = pd.Series(counts.to_numpy(), index=counts.index.astype(str)).groupby(level=0).sum()
    return {k: int(n) for k, n in texts.items() if n}


def _by_geocode(counts):
    """Counts grouped by a `geocode` column (its index categorical), indexed by the geocode strings."""
    counts.index = counts.index.astype(str)
    return counts


def _facilities(units: pd.DataFrame) -> pd.DataFrame:
    gq = units[units["RTYPE"].astype(int) == GQ_FACILITY]
    counts = gq.assign(GQTYPE_PL=gq["GQTYPE_PL"].astype(int)).groupby(["geocode", "GQTYPE_PL"], observed=True).size()
    return _by_geocode(counts.unstack(fill_value=0))


def check_against_inputs(mdf_units: pd.DataFrame, units_in: pd.DataFrame, report: Report | Findings) -> None:
    """Housing units and GQ facilities per block equal the inputs' (both with their `geocode`)."""
    def housing(units):
        return _by_geocode(units[units["RTYPE"].astype(int) == HOUSING_UNIT].groupby("geocode", observed=True).size())

    hu_in, hu_out = housing(units_in).align(housing(mdf_units), fill_value=0)
    report.check(HOUSING_CHECK, [f"block {g}: {hu_out[g]} housing units, input has {hu_in[g]}"
                                 for g in hu_in.index[hu_in != hu_out]])
    fac_in, fac_out = _facilities(units_in).stack(), _facilities(mdf_units).stack()
    fac_in, fac_out = fac_in.align(fac_out, fill_value=0)
    report.check(FACILITIES_CHECK, [f"block {g} type {t}: {fac_out[(g, t)]} facilities, input has {fac_in[(g, t)]}"
                                    for g, t in fac_in.index[fac_in != fac_out]])


def operator_inputs(run: RunDir) -> tuple[Path, Path] | None:
    """The run's operator inputs (two files, or two directories of one file per state), if present."""
    try:
        paths = input_paths(run.path)
    except BundleError:
        return None
    persons, units = Path(paths.get("persons", "")), Path(paths.get("units", ""))
    both = persons.is_file() and units.is_file() or persons.is_dir() and units.is_dir()
    return (persons, units) if both else None


def by_state(inputs: tuple[Source, Source]) -> Inputs:
    """Each state's own input files in a partitioned run (the inputs are directories), else the two files (or
    inputs held in memory)."""
    persons, units = (source(p) for p in inputs)
    if isinstance(persons, InMemory) or not persons.is_dir():
        return persons, units
    try:
        return {s.state: (s.persons, s.units) for s in partitions.state_inputs(persons, units)}
    except partitions.PartitionError as e:
        raise ValidationError(str(e)) from None


def _other_states(inputs: Inputs, states: set[str]) -> pd.Series:
    """Persons per state in the inputs of the states other than `states` (each state counts its own): the
    files of other states, or in one persons file its records of other states (a Parquet file's states
    from its row-group statistics where they give one state, see das.validate.reading.states_in; a CSV
    file's TABBLKST column)."""
    if isinstance(inputs, dict):
        files = [(p, None) for s, (p, _) in sorted(inputs.items()) if s not in states]
    else:
        persons = inputs[0]
        others = (states_in(persons) if isinstance(persons, Path) and persons.suffix != ".csv"
                  else _read(persons, ["TABBLKST"])["TABBLKST"].astype(str).unique())
        files = [(persons, s) for s in sorted(set(others) - states)]
    counts = [_read(p, ["TABBLKST"], s)["TABBLKST"].astype(str).value_counts() for p, s in files]
    return pd.concat(counts).groupby(level=0).sum().astype(np.int64) if counts else pd.Series([], dtype=np.int64)


@dataclass
class Compared:
    """A state's part: its persons records in the MDF, its inputs' persons per TABBLKST (its own file's,
    each under its TABBLKST; or its rows of the one persons file), and the per-block findings."""

    persons: int
    input_persons: dict = field(default_factory=dict)
    findings: Findings = field(default_factory=Findings)


def inputs_state(rows: StateRows) -> Compared | None:
    """The shard's MDF against its inputs (None: the release is not compared with its inputs)."""
    inputs, state, shard = rows.release.inputs, rows.state, rows.shard
    if inputs is None:
        return None
    out = Compared(len(rows.persons))
    own = inputs.get(state) if isinstance(inputs, dict) else inputs
    if own is not None and isinstance(inputs, dict) and shard.index == 0:  # its own file: every record, once
        out.input_persons = _per_state(_read(own[0], ["TABBLKST"])["TABBLKST"])
    elif own is not None and not isinstance(inputs, dict):
        out.input_persons = _per_state(_read(own[0], ["TABBLKST"], state, shard.counties)["TABBLKST"])
    names = [*GEO, "RTYPE", "GQTYPE_PL"]
    units_in = (_read(own[1], names, state, shard.counties) if own is not None
                else pd.DataFrame({c: pd.Series([], dtype=str) for c in names}))
    units_in["geocode"] = geocode(units_in)
    check_against_inputs(rows.units, units_in, out.findings)
    return out


def inputs_merge(release: OpenRelease, parts: list[Compared | None]) -> Compared | None:
    """A state's part from its shards': persons added up, findings in geocode order."""
    parts = [p for p in parts if p is not None]
    if not parts:
        return None
    persons: dict = {}
    for part in parts:
        for state, n in part.input_persons.items():
            persons[state] = persons.get(state, 0) + n
    return Compared(sum(p.persons for p in parts), persons, Findings.fold(p.findings for p in parts))


def inputs_combine(release: OpenRelease, parts: dict[str, Compared], report: Report, alongside=None) -> None:
    """The nation's and the states' population against the inputs', then the states' per-block findings."""
    if release.inputs is None:
        return
    truth = pd.concat([pd.Series(p.input_persons, dtype=np.int64) for p in parts.values()]
                      + [_other_states(release.inputs, set(release.states))]).groupby(level=0).sum()
    mdf = {NATION: pd.Series({"": sum(p.persons for p in parts.values())}),
           STATE: pd.Series({s: p.persons for s, p in parts.items()}, dtype=np.int64)}
    problems = []
    for geo_level, out in mdf.items():
        if geo_level not in release.manifest.levels:
            continue
        expected = pd.Series({"": int(truth.sum())}) if geo_level == NATION else truth
        expected, out = expected.align(out, fill_value=0)
        for g in sorted(expected.index[expected != out]):
            problems.append(f"{geo_level} {g!r}: population {out[g]} differs from the input")
    report.check(POPULATION, problems, operator=True)
    for name in (HOUSING_CHECK, FACILITIES_CHECK):
        report.check(name, merged((p.findings for p in parts.values()), name), operator=True)


INPUTS = Check("matches_inputs", inputs_combine, state=inputs_state, merge=inputs_merge, claim="invariants",
               needs=("units", "inputs"))
