"""`manifest` (every release): the manifest is held to das/frame/published.py, and its counts to the files.

Fields: every key path of manifest.json is one das/frame/published.py declares (`MANIFEST`), and each declared
field's value is of its declared type (`TYPES`); a field that is not, or an extra one at any depth, is named
by its key path (`levels_report.persons[3].extra`). The manifest is read as JSON here, not through
das.frame.manifest.Manifest, which keeps only the fields it knows. A mechanism's own details are taken as its
manifest lists them: their declarations are the mechanism's (das.mechanisms), which the validator does not
import. Counts: what the manifest states about the published files is recounted from them and compared
exactly: `counts.persons` is the persons MDF's rows; `counts.blocks` the release universe's blocks (the
units MDF's; a synthetic release publishes no universe, so it is held to at least its MDF's blocks); each
level's `parents` in `levels_report` the geounits of the level above; each level's `failsafe_events` the
events listed for it; `validation.valid` its own checks and violations.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import pyarrow.parquet as pq

from das.core.errors import ValidationError
from das.frame import published
from das.frame.rundir import RunDir
from das.model.levels import LEVEL_DIGITS, NATION, STATE
from das.validate.reading import present, unreadable
from das.validate.registry import Check
from das.validate.release import OpenRelease, StateRows
from das.validate.report import Report, first
from das.validate.spine import state_spine

FIELDS_CHECK = "manifest: every field declared in das/frame/published.py, of its declared type"
COUNTS_CHECK = "manifest: its counts are the published files' (persons, blocks, parents per level)"


def field_problems(data: object) -> list[str]:
    """The fields of a manifest's JSON that das/frame/published.py does not declare, or of another type than declared."""
    if not isinstance(data, dict):
        return ["the manifest is not a JSON object"]
    mechanism = data.get("mechanism")
    details = mechanism.get("details") if isinstance(mechanism, dict) else None
    context = {"details": tuple(details) if isinstance(details, dict) else ()}
    return published.problems(data, context=context)


def read_problems(run: RunDir) -> list[str]:
    """`field_problems` of a run's manifest.json as it is on disk (none: not readable as a JSON object, which
    das validate cannot read at all)."""
    try:
        data = json.loads(run.manifest_path.read_bytes())
    except (OSError, ValueError):
        return []
    return field_problems(data) if isinstance(data, dict) else []


@dataclass(frozen=True)
class StateCounts:
    """One state's counts: its blocks (of the release universe, or with a synthetic MDF's persons), and its
    geounits at each level below the state (None: no release universe is read)."""

    blocks: int
    geounits: dict[str, int] | None = field(default=None)


def counts_state(rows: StateRows) -> StateCounts:
    """The shard's blocks and geounits per level below the state (geocode prefixes of its blocks, or, once a
    state, by its first shard: its spine's units)."""
    release = rows.release
    if release.nmf_only:  # an NMF release: no MDF, no counts
        return StateCounts(0)
    if not release.with_units:  # a synthetic release: the blocks its persons are in
        return StateCounts(len(present(rows.persons["geocode"])))
    universe = np.asarray(rows.universe, dtype=str)
    spine = state_spine(release, rows.state)
    below = [lv for lv in release.manifest.levels if LEVEL_DIGITS[lv] > LEVEL_DIGITS[STATE]]
    if spine is not None:  # the spine's units are the state's, not its records': counted once
        return StateCounts(len(universe), {lv: len(spine.units(lv)) for lv in below} if rows.shard.index == 0 else {})
    return StateCounts(len(universe), {lv: len(np.unique(universe.astype(f"U{LEVEL_DIGITS[lv]}"))) for lv in below})


def counts_merge(release: OpenRelease, parts: list[StateCounts]) -> StateCounts:
    """A state's counts from its shards' (of disjoint counties, so of disjoint blocks and geounits below the state)."""
    if all(p.geounits is None for p in parts):
        return StateCounts(sum(p.blocks for p in parts))
    geounits: dict[str, int] = {}
    for part in parts:
        for level, n in (part.geounits or {}).items():
            geounits[level] = geounits.get(level, 0) + n
    return StateCounts(sum(p.blocks for p in parts), geounits)


def _mdf_rows(release: OpenRelease) -> int | None:
    """The persons MDF's rows (None: the release lists no persons MDF)."""
    run = release.run
    path = run.mdf("persons")
    if run.relative(path) not in (release.manifest.outputs or {}):
        return None
    try:
        return pq.ParquetFile(path).metadata.num_rows
    except FileNotFoundError:
        raise ValidationError(f"{path} is missing") from None
    except Exception as e:
        raise unreadable(path, e) from None


def _parents_problems(release: OpenRelease, parts: dict[str, StateCounts]) -> list[str]:
    """Each level's `parents` in levels_report: the geounits of the level above (the first level's: 1)."""
    levels, reports = release.manifest.levels, release.manifest.levels_report or {}
    geounits = {NATION: 1, STATE: sum(1 for p in parts.values() if p.blocks)}
    for part in parts.values():
        for level, n in (part.geounits or {}).items():
            geounits[level] = geounits.get(level, 0) + n
    problems = []
    for name, records in reports.items():
        for i, record in enumerate(records):
            if record.level not in levels:
                continue  # the certificate check names a level that is not the release's
            above = levels.index(record.level) - 1
            want = 1 if above < 0 else geounits.get(levels[above])
            if want is not None and record.parents != want:
                problems.append(f"levels_report.{name}[{i}].parents: {record.parents}, the {levels[above]} level has "
                                f"{want} geounits" if above >= 0 else f"levels_report.{name}[{i}].parents: "
                                f"{record.parents}, the first level has 1 parent")
    return problems


def _record_problems(release: OpenRelease) -> list[str]:
    """The manifest's counts of its own lists: failsafe events per level, and whether its validation was valid."""
    manifest, problems = release.manifest, []
    if manifest.failsafe_events is not None:
        listed = Counter((e.release, e.level) for e in manifest.failsafe_events)
        for name, records in (manifest.levels_report or {}).items():
            for i, record in enumerate(records):
                if record.failsafe_events != listed[(name, record.level)]:
                    problems.append(f"levels_report.{name}[{i}].failsafe_events: {record.failsafe_events}, "
                                    f"failsafe_events lists {listed[(name, record.level)]} at {name}/{record.level}")
    v = manifest.validation
    if v is not None and v.valid != (not v.violations and all(c.startswith("ok") for c in v.checks)):
        problems.append(f"validation.valid: {str(v.valid).lower()}, with {len(v.violations)} violation(s) and "
                        f"{sum(not c.startswith('ok') for c in v.checks)} failed check(s) listed")
    return problems


def counts_problems(release: OpenRelease, parts: dict[str, StateCounts]) -> list[str]:
    """What the manifest counts of the published files, recounted from them."""
    counts, problems = release.manifest.counts, []
    universe = release.with_units and not release.nmf_only  # the units MDF's blocks were counted
    if counts is not None:
        rows = _mdf_rows(release)
        if rows is None:
            problems.append(f"counts.persons: {counts.persons}, but the release lists no persons MDF")
        elif counts.persons != rows:
            problems.append(f"counts.persons: {counts.persons}, the persons MDF has {rows} rows")
        blocks = sum(p.blocks for p in parts.values())
        if universe and counts.blocks != blocks:
            problems.append(f"counts.blocks: {counts.blocks}, the units MDF has {blocks} blocks")
        elif not universe and parts and counts.blocks < blocks:
            problems.append(f"counts.blocks: {counts.blocks}, fewer than the {blocks} blocks of the persons MDF")
    if universe:
        problems += _parents_problems(release, parts)
    return problems + _record_problems(release)


def manifest_combine(release: OpenRelease, parts: dict[str, StateCounts], report: Report, alongside=None) -> None:
    """The manifest's fields against das/frame/published.py, then its counts against the files."""
    report.check(FIELDS_CHECK, first(read_problems(release.run)))
    report.check(COUNTS_CHECK, first(counts_problems(release, parts)))


MANIFEST = Check("manifest", manifest_combine, state=counts_state, merge=counts_merge, claim=None, always=True,
                 nmf=True)
