"""The MDF records: valid codes and derived columns (`mdf_codes`: the persons MDF by its schema, EPNUM 1..N
without repeats, the housing units by the units schema); the units MDF's record types (`units_mdf`: housing
units vs GQ facilities) and the persons MDF in blocks of the release universe (the units MDF's blocks).

A state's records are checked on its worker; the driver merges the states' findings and adds what only
the whole file shows (EPNUM over all states, the states of a file the manifest does not publish).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import numpy as np
import pandas as pd

from das.schema import Schema
from das.validate.epnum import Epnums, epnum_problems, reread_epnums
from das.validate.reading import states_in
from das.validate.registry import Check
from das.validate.release import GQ_FACILITY, GQ_TYPES, HOUSING_UNIT, Release, StateRows
from das.validate.report import Findings, Report, Stop, merged, ran

UNITS_CODES = "MDF units: valid codes, housing units vs facilities"
PERSONS_CODES = "MDF persons: valid codes, derived columns, unique EPNUM"
PERSONS_CODES_UNREADABLE = "MDF persons: valid codes"
UNITS_LEVELS_UNREADABLE = "MDF units: valid codes of the units schema"
UNIVERSE = "MDF persons: in blocks of the release universe"


def derived_problems(mdf: pd.DataFrame, levels: pd.DataFrame, schema: Schema, rows: np.ndarray | None = None) -> list[str]:
    """Derived columns consistent with the schema's attributes (`levels`, decoded); `rows`: each record's
    row in the MDF file (0-based), when `mdf` is part of it."""
    problems = []
    rows = np.arange(len(mdf)) if rows is None else rows
    for column, attribute, mapping in schema.derived:
        if column not in mdf:
            problems.append(f"column {column} is missing")
            continue
        expected = np.asarray(mapping)[levels[attribute].to_numpy()]
        bad = np.flatnonzero(mdf[column].astype(np.int64).to_numpy() != expected)
        for i in bad[:3]:
            a = schema.attribute(attribute)
            problems.append(f"row {rows[i] + 1}: {column} {mdf[column].iloc[i]} with {a.column} "
                            f"{mdf[a.column].iloc[i]} (expected {column} {expected[i]})")
        if len(bad) > 3:
            problems.append(f"... and {len(bad) - 3} more rows with {column} inconsistent")
    return problems


def check_unit_records(units: pd.DataFrame, units_schema: Schema | None, report: Report | Findings,
                       rows: np.ndarray | None = None) -> None:
    """Housing units carry the units schema's derived codes and an HH_STATUS (a release without units: HH_STATUS
    0, their occupancy not released); GQ facilities a GQ type and HH_STATUS 0. `rows`: each record's row in the
    MDF file (0-based), when `units` is part of it."""
    problems = []
    rows = np.arange(len(units)) if rows is None else rows
    for column in ("RTYPE", "GQTYPE_PL", "HH_STATUS"):
        if column not in units:
            report.check("MDF units: valid codes", [f"column {column} is missing"])
            return
    rtype, gq, status = (units[c].astype(np.int64).to_numpy() for c in ("RTYPE", "GQTYPE_PL", "HH_STATUS"))
    housing, facility = rtype == HOUSING_UNIT, rtype == GQ_FACILITY
    rules = [(~(housing | facility), "RTYPE 2 (housing unit) or 4 (GQ facility)", rtype),
             (housing & (gq != 0), "GQTYPE_PL 0 for a housing unit", gq),
             (facility & ((gq < 1) | (gq > GQ_TYPES)), f"GQTYPE_PL 1..{GQ_TYPES} for a GQ facility", gq),
             (facility & (status != 0), "HH_STATUS 0 for a GQ facility", status)]
    if units_schema is not None:
        attribute = units_schema.attributes[0]
        rules.append((housing & ~np.isin(status, np.asarray(attribute.codes, dtype=np.int64)),
                      f"HH_STATUS one of {list(attribute.codes)} for a housing unit", status))
    else:
        rules.append((housing & (status != 0), "HH_STATUS 0 for a housing unit of a release without units (its "
                      "occupancy is not released)", status))
    for bad, expected, values in rules:
        for i in np.flatnonzero(bad)[:3]:
            problems.append(f"row {rows[i] + 1}: {values[i]} (expected {expected})")
    report.check(UNITS_CODES, problems)


# ---------------------------------------------------------------------------------------------
# units_mdf: the units MDF's records, and the persons in its blocks


def units_state(rows: StateRows) -> Findings:
    found = Findings()
    check_unit_records(rows.units, rows.units_schema, found, rows.unit_rows)
    return found


def units_combine(release: Release, parts: dict[str, Findings], report: Report, alongside=None) -> None:
    """The states' findings, after the states of the units MDF that the manifest does not publish."""
    unlisted = [f"state {s!r}: units in the MDF, but the manifest publishes no total population for it"
                for s in sorted(set(states_in(release.run.mdf("units"))) - set(release.states))]
    report.check(UNITS_CODES, merged(parts.values(), UNITS_CODES, before=unlisted))


def universe_state(rows: StateRows) -> tuple[int, str]:
    """How many of the state's persons blocks are outside the release universe, and the first."""
    outside = rows.outside
    return len(outside), str(outside[0]) if len(outside) else ""


def universe_combine(release: Release, parts: dict[str, tuple[int, str]], report: Report, alongside=None) -> None:
    outside = sum(n for n, _ in parts.values())
    example = next((first for n, first in parts.values() if n), "")
    report.check(UNIVERSE, ([f"{outside} MDF blocks have no housing unit or facility in the units MDF, e.g. {example}"]
                            if outside else [])
                 + [f"state {s!r}: persons in the MDF, but no units and no published total population"
                    for s in sorted(set(states_in(release.run.mdf("persons"))) - set(release.states))])


# ---------------------------------------------------------------------------------------------
# mdf_codes: the codes of every record, EPNUM


@dataclass
class Codes:
    """A state's part of `mdf_codes`: its findings and its EPNUMs' summary (None: no EPNUM column)."""

    findings: Findings
    epnums: Epnums | None = None


def codes_state(rows: StateRows) -> Codes:
    """The state's persons by the persons schema (its EPNUMs summarized), and its housing units by the
    units schema; a code that is not one ends the state's checks (what follows reads the levels)."""
    found = Findings()
    try:
        levels = rows.levels
    except (ValueError, KeyError) as e:
        found.check(PERSONS_CODES_UNREADABLE, [str(e)])
        raise Stop(Codes(found)) from None
    found.check(PERSONS_CODES, derived_problems(rows.persons, levels, rows.persons_schema, rows.person_rows))
    out = Codes(found)
    if "EPNUM" in rows.persons:
        out.epnums = Epnums.of(rows.persons["EPNUM"].astype(np.int64).to_numpy(), rows.person_rows)
    if rows.release.with_units:
        try:
            _ = rows.unit_levels  # decoded here: the checks after read them
        except (ValueError, KeyError) as e:
            found.check(UNITS_LEVELS_UNREADABLE, [str(e)])
            raise Stop(out) from None
    return out


def codes_combine(release: Release, parts: dict[str, Codes], report: Report, alongside=None) -> None:
    """The states' findings, EPNUM over the whole file; codes that are not codes end the report."""
    found = [p.findings for p in parts.values()]
    if ran(found, PERSONS_CODES_UNREADABLE):
        report.check(PERSONS_CODES_UNREADABLE, merged(found, PERSONS_CODES_UNREADABLE))
        raise Stop()
    path = release.run.mdf("persons")
    epnum = ["column EPNUM is missing"] if "EPNUM" not in release.columns["persons"] else epnum_problems(
        [(p.epnums, partial(reread_epnums, path, s)) for s, p in parts.items() if p.epnums is not None])
    report.check(PERSONS_CODES, merged(found, PERSONS_CODES, after=epnum))
    if ran(found, UNITS_LEVELS_UNREADABLE):
        report.check(UNITS_LEVELS_UNREADABLE, merged(found, UNITS_LEVELS_UNREADABLE))
        raise Stop()


UNITS_CHECK = Check("units_mdf", units_combine, state=units_state, needs=("units",))
UNIVERSE_CHECK = Check("persons_in_universe", universe_combine, state=universe_state, claim="units_mdf", needs=("units",))
CODES_CHECK = Check("mdf_codes", codes_combine, state=codes_state, always=True)
