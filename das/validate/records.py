"""The MDF records: valid codes and derived columns (`mdf_codes`: the persons MDF by its schema, EPNUM 1..N
without repeats, the housing units by the units schema); the units MDF's record types (`units_mdf`: housing
units vs GQ facilities) and the persons MDF in blocks of the release universe (the units MDF's blocks).

A state's records are checked on its worker; the driver merges the states' findings and adds what only
the whole file shows (EPNUM over all states, the states of a file the manifest does not publish).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial

import numpy as np
import pandas as pd

from das.model.schema import Schema
from das.validate.epnum import Epnums, epnum_problems, reread_epnums
from das.validate.reading import states_in
from das.validate.registry import Check
from das.validate.release import GQ_FACILITY, GQ_TYPES, HOUSING_UNIT, OpenRelease, StateRows
from das.validate.report import Findings, Report, Stop, firsts, merged, ran

UNITS_CODES = "MDF units: valid codes, housing units vs facilities"
PERSONS_CODES = "MDF persons: valid codes, derived columns, unique EPNUM"
PERSONS_CODES_UNREADABLE = "MDF persons: valid codes"
UNITS_LEVELS_UNREADABLE = "MDF units: valid codes of the units schema"
UNIVERSE = "MDF persons: in blocks of the release universe"


def derived_found(mdf: pd.DataFrame, levels: pd.DataFrame, schema: Schema,
                  rows: np.ndarray | None = None) -> list[tuple[str, list[str], int] | None]:
    """Per derived column of the schema: None (the column is missing), or (column, its first 3 rows
    inconsistent with the schema's attributes, `levels` decoded, in words, how many are); `rows`: each
    record's row in the MDF file (0-based), when `mdf` is part of it."""
    found: list[tuple[str, list[str], int] | None] = []
    rows = np.arange(len(mdf)) if rows is None else rows
    for column, attribute, mapping in schema.derived:
        if column not in mdf:
            found.append(None)
            continue
        expected = np.asarray(mapping)[levels[attribute].to_numpy()]
        bad = np.flatnonzero(mdf[column].astype(np.int64).to_numpy() != expected)
        a = schema.attribute(attribute)
        found.append((column, [f"row {rows[i] + 1}: {column} {mdf[column].iloc[i]} with {a.column} "
                               f"{mdf[a.column].iloc[i]} (expected {column} {expected[i]})" for i in bad[:3]], len(bad)))
    return found


def fold_derived(parts: list[list]) -> list:
    """`derived_found` of consecutive parts of an MDF as one part's."""
    out = list(parts[0]) if parts else []
    for part in parts[1:]:
        out = [None if a is None else (a[0], (a[1] + b[1])[:3], a[2] + b[2]) for a, b in zip(out, part)]
    return out


def derived_messages(found: list, schema: Schema) -> list[str]:
    """`derived_found` in words: a missing column, the first 3 rows of a column, how many more."""
    problems = []
    for (column, _, _), f in zip(schema.derived, found):
        if f is None:
            problems.append(f"column {column} is missing")
            continue
        problems += f[1] + ([f"... and {f[2] - 3} more rows with {column} inconsistent"] if f[2] > 3 else [])
    return problems


def derived_problems(mdf: pd.DataFrame, levels: pd.DataFrame, schema: Schema, rows: np.ndarray | None = None) -> list[str]:
    """Derived columns consistent with the schema's attributes (`levels`, decoded); `rows`: each record's
    row in the MDF file (0-based), when `mdf` is part of it."""
    return derived_messages(derived_found(mdf, levels, schema, rows), schema)


def unit_record_problems(units: pd.DataFrame, units_schema: Schema | None,
                         rows: np.ndarray | None = None) -> list[list[str]] | str:
    """Per rule of the units MDF's records, its first 3 rows that break it, in words (a string: a column
    missing); `rows`: each record's row in the MDF file (0-based), when `units` is part of it."""
    rows = np.arange(len(units)) if rows is None else rows
    for column in ("RTYPE", "GQTYPE_PL", "HH_STATUS"):
        if column not in units:
            return f"column {column} is missing"
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
    return [[f"row {rows[i] + 1}: {values[i]} (expected {expected})" for i in np.flatnonzero(bad)[:3]]
            for bad, expected, values in rules]


def unit_record_report(found: list[list[str]] | str, report: Report | Findings) -> None:
    """`unit_record_problems` reported."""
    if isinstance(found, str):
        report.check("MDF units: valid codes", [found])
    else:
        report.check(UNITS_CODES, [p for rule in found for p in rule])


def check_unit_records(units: pd.DataFrame, units_schema: Schema | None, report: Report | Findings,
                       rows: np.ndarray | None = None) -> None:
    """Housing units carry the units schema's derived codes and an HH_STATUS (a release without units: HH_STATUS
    0, their occupancy not released); GQ facilities a GQ type and HH_STATUS 0. `rows`: each record's row in the
    MDF file (0-based), when `units` is part of it."""
    unit_record_report(unit_record_problems(units, units_schema, rows), report)


# ---------------------------------------------------------------------------------------------
# units_mdf: the units MDF's records, and the persons in its blocks


def units_state(rows: StateRows) -> list[list[str]] | str:
    return unit_record_problems(rows.units, rows.units_schema, rows.unit_rows)


def units_merge(release: OpenRelease, parts: list) -> Findings:
    """A state's findings from its shards' `unit_record_problems` (a column missing: said once)."""
    found = Findings()
    missing = next((p for p in parts if isinstance(p, str)), None)
    unit_record_report(missing if missing is not None else firsts(parts, 3), found)
    return found


def units_combine(release: OpenRelease, parts: dict[str, Findings], report: Report, alongside=None) -> None:
    """The states' findings, after the states of the units MDF that the manifest does not publish."""
    unlisted = [f"state {s!r}: units in the MDF, but the manifest publishes no total population for it"
                for s in sorted(set(states_in(release.run.mdf("units"))) - set(release.states))]
    report.check(UNITS_CODES, merged(parts.values(), UNITS_CODES, before=unlisted))


def universe_state(rows: StateRows) -> tuple[int, str]:
    """How many of the shard's persons blocks are outside the release universe, and the first."""
    outside = rows.outside
    return len(outside), str(outside[0]) if len(outside) else ""


def universe_merge(release: OpenRelease, parts: list[tuple[int, str]]) -> tuple[int, str]:
    return sum(n for n, _ in parts), next((first for n, first in parts if n), "")


def universe_combine(release: OpenRelease, parts: dict[str, tuple[int, str]], report: Report, alongside=None) -> None:
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
    """A state's part of `mdf_codes`: its findings and its shards' EPNUM summaries, each with the shard's
    counties (none: no EPNUM column)."""

    findings: Findings
    epnums: list = field(default_factory=list)


@dataclass
class ShardCodes:
    """A shard's part of `mdf_codes`: a code that is not one (persons, or housing units: the first, in
    words), its derived columns (`derived_found`), its EPNUMs' summary."""

    unreadable: str | None = None
    derived: list = field(default_factory=list)
    epnums: tuple | None = None
    units_unreadable: str | None = None


def codes_state(rows: StateRows) -> ShardCodes:
    """The shard's persons by the persons schema (its EPNUMs summarized), and its housing units by the
    units schema; a code that is not one ends the shard's checks (what follows reads the levels)."""
    try:
        levels = rows.levels
    except (ValueError, KeyError) as e:
        raise Stop(ShardCodes(str(e))) from None
    out = ShardCodes(derived=derived_found(rows.persons, levels, rows.persons_schema, rows.person_rows))
    if "EPNUM" in rows.persons:
        out.epnums = (Epnums.of(rows.persons["EPNUM"].astype(np.int64).to_numpy(), rows.person_rows),
                      rows.shard.counties)
    if rows.release.with_units:
        try:
            _ = rows.unit_levels  # decoded here: the checks after read them
        except (ValueError, KeyError) as e:
            out.units_unreadable = str(e)
            raise Stop(out) from None
    return out


def codes_merge(release: OpenRelease, parts: list[ShardCodes]) -> Codes:
    """A state's findings from its shards': the first code that is not one ends them, as in one pass."""
    found = Findings()
    unreadable = next((p.unreadable for p in parts if p.unreadable is not None), None)
    if unreadable is not None:
        found.check(PERSONS_CODES_UNREADABLE, [unreadable])
        return Codes(found)
    found.check(PERSONS_CODES, derived_messages(fold_derived([p.derived for p in parts]), release.schemas()[0]))
    out = Codes(found, [p.epnums for p in parts if p.epnums is not None])
    units = next((p.units_unreadable for p in parts if p.units_unreadable is not None), None)
    if units is not None:
        found.check(UNITS_LEVELS_UNREADABLE, [units])
    return out


def codes_combine(release: OpenRelease, parts: dict[str, Codes], report: Report, alongside=None) -> None:
    """The states' findings, EPNUM over the whole file; codes that are not codes end the report."""
    found = [p.findings for p in parts.values()]
    if ran(found, PERSONS_CODES_UNREADABLE):
        report.check(PERSONS_CODES_UNREADABLE, merged(found, PERSONS_CODES_UNREADABLE))
        raise Stop()
    path = release.run.mdf("persons")
    epnum = ["column EPNUM is missing"] if "EPNUM" not in release.columns["persons"] else epnum_problems(
        [(e, partial(reread_epnums, path, s, counties=counties)) for s, p in parts.items() for e, counties in p.epnums])
    report.check(PERSONS_CODES, merged(found, PERSONS_CODES, after=epnum))
    if ran(found, UNITS_LEVELS_UNREADABLE):
        report.check(UNITS_LEVELS_UNREADABLE, merged(found, UNITS_LEVELS_UNREADABLE))
        raise Stop()


UNITS_CHECK = Check("units_mdf", units_combine, state=units_state, merge=units_merge, needs=("units",))
UNIVERSE_CHECK = Check("persons_in_universe", universe_combine, state=universe_state, merge=universe_merge,
                       claim="units_mdf", needs=("units",))
CODES_CHECK = Check("mdf_codes", codes_combine, state=codes_state, merge=codes_merge, always=True)
