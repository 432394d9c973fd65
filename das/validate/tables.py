"""`tables_match_mdf`: every written table equals the table recounted from the MDF, and its child rows sum
to their parents.

Each state recounts its own rows (the state and the levels below it) and compares them with its rows of
the tables; the driver compares the nation's and the states' rows (the nation's recount is the sum of
the states') and merges the states' differences, the first few of each column.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from das.core.errors import SpecError, ValidationError
from das.io.tables import column_names
from das.model.levels import LEVEL_DIGITS, NATION, STATE
from das.model.schema import Schema
from das.validate.reading import columns, read_geocodes
from das.validate.registry import Check
from das.validate.release import OpenRelease, StateRows
from das.validate.report import Report, first


@dataclass(frozen=True)
class Prefixes:
    """Records' geography for recounting: each record's block (its index among the distinct blocks, in
    geocode order) and, per level, each geounit's first block and geocode (a geounit's blocks are
    consecutive in geocode order). Every table of the same records shares it."""

    block: np.ndarray
    blocks: int
    units: dict


def prefix_codes(records: pd.DataFrame, geo_levels) -> Prefixes:
    """The records' `Prefixes` at `geo_levels`, worked out on the distinct blocks."""
    geocodes = records["geocode"]
    if isinstance(geocodes.dtype, pd.CategoricalDtype):
        names = np.asarray(geocodes.cat.categories, dtype=str)
        order = np.argsort(names, kind="stable")
        rank = np.empty(len(order), dtype=np.int64)
        rank[order] = np.arange(len(order))
        names, block = names[order], rank[geocodes.cat.codes.to_numpy()]
    else:
        names, block = np.unique(geocodes.to_numpy(dtype=str), return_inverse=True)
    units = {}
    for geo_level in geo_levels:
        k = LEVEL_DIGITS[geo_level]
        cut = names.astype(f"U{k}") if k else np.full(len(names), "", dtype=str)
        starts = np.flatnonzero(np.r_[True, cut[1:] != cut[:-1]]) if len(cut) else np.zeros(0, np.int64)
        units[geo_level] = (starts, cut[starts])
    return Prefixes(np.asarray(block, dtype=np.int64), len(names), units)


@dataclass(frozen=True)
class Recount:
    """A table recounted: per geographic level, in the order asked, its geounits that have any record (geocodes,
    sorted) and their rows of the table's columns. Arrays, not a frame: a state's block level is 700k rows of
    hundreds of columns, and a frame of it (its geocodes as Python strings) was most of the recount's time."""

    levels: dict  # level -> (geocodes, counts: a row per geocode)

    def frame(self, cols: list[str]) -> pd.DataFrame:
        """The recount as rows (level, geocode, then the columns), level by level."""
        frames = []
        for level, (geocodes, counts) in self.levels.items():
            table = pd.DataFrame(counts, columns=cols)
            table.insert(0, "geocode", geocodes)
            frames.append(table.assign(level=level))
        return (pd.concat(frames, ignore_index=True) if frames
                else pd.DataFrame({c: [] for c in ["geocode", *cols, "level"]}))

    def without(self, level: str) -> Recount:
        return Recount({lv: rows for lv, rows in self.levels.items() if lv != level})


def recount_table(records: pd.DataFrame, levels: pd.DataFrame, schema: Schema, spec, *, geo_levels,
                  prefixes: Prefixes | None = None) -> Recount:
    """A table recounted from records (counts per geounit and cell), every geounit that has any record:
    counted once per block, each level's geounits summing their consecutive blocks."""
    prefixes = prefix_codes(records, geo_levels) if prefixes is None else prefixes
    keep = np.ones(len(records), dtype=bool)
    for factor, level in spec.where:
        keep &= levels[factor].to_numpy() == level
    block, n = prefixes.block[keep], prefixes.blocks
    per_block = [np.bincount(block, minlength=n).reshape(n, 1)]  # records per block, then each query's cells
    for qname in spec.queries:
        q = schema.query(qname)
        key = (np.ravel_multi_index([levels[f].to_numpy()[keep] for f in q.factors], q.shape) if q.factors
               else np.zeros(len(block), dtype=np.int64))
        per_block.append(np.bincount(block * q.size + key, minlength=n * q.size).reshape(n, q.size))
    counts, starts = np.hstack(per_block), np.arange(n)
    found = {}
    for geo_level in sorted(geo_levels, key=lambda lv: -LEVEL_DIGITS[lv]):  # each level from the finer one's sums
        mine, geocodes = prefixes.units[geo_level]
        if len(mine) != len(starts):
            counts = np.add.reduceat(counts, np.searchsorted(starts, mine), axis=0) if n else counts
        starts = mine
        present = np.flatnonzero(counts[:, 0])
        found[geo_level] = (geocodes[present], counts[present, 1:])
    return Recount({lv: found[lv] for lv in geo_levels})


def table_differences(written: pd.DataFrame, recount: Recount, cols: list[str]) -> dict[int, list[tuple]]:
    """Where a table's rows differ from the recount (a geounit missing from either counts as zeros): per
    column (its index in cols), the first 3 differing rows in (level, geocode) order as
    (level, geocode, table value, recount value)."""
    aligned = _aligned_differences(written, recount, cols)
    return aligned if aligned is not None else _merged_differences(written, recount.frame(cols), cols)


def _aligned_differences(written: pd.DataFrame, recount: Recount, cols: list[str]) -> dict[int, list[tuple]] | None:
    """`table_differences` where each level's written rows are its geounits once each, in geocode order, and
    hold every geounit the recount has (a table as das writes it: its blocks without a record too): the values
    compared row by row, a row the recount lacks against zeros. None otherwise (a geounit of the recount
    missing, a row repeated or out of order, a missing key or value): the merge decides."""
    if not len(written) or written[["level", "geocode"]].isna().any().any():
        return None
    values = written[cols].to_numpy()
    if values.dtype.kind not in "iu":
        return None  # a missing or fractional value: compared as the merge compares it
    level = written["level"].astype(str).to_numpy()
    geocode = written["geocode"].astype(str).to_numpy()
    if set(level) - set(recount.levels):
        return None
    found: dict[int, list[tuple]] = {}
    for name in sorted(recount.levels):  # (level, geocode) order: levels by name, geocodes in order within
        theirs, counts = recount.levels[name]
        mine = np.flatnonzero(level == name)
        ours = geocode[mine]
        if len(ours) < len(theirs) or (len(ours) > 1 and not (ours[1:] > ours[:-1]).all()):
            return None
        at = np.searchsorted(ours, theirs)  # the written row of each recounted geounit
        if (at >= len(ours)).any() or not np.array_equal(ours[at], theirs):
            return None
        expected = np.zeros(len(ours), dtype=bool)
        expected[at] = True
        differs = np.zeros((len(ours), len(cols)), dtype=bool)
        differs[at] = values[mine[at]] != counts
        differs[~expected] = values[mine[~expected]] != 0
        recounted = np.zeros(len(ours), dtype=np.int64)
        for j in np.flatnonzero(differs.any(axis=0)):
            rows = found.setdefault(int(j), [])
            recounted[:] = 0
            recounted[at] = counts[:, j]
            rows += [(name, str(ours[i]), values[mine[i], j], recounted[i])
                     for i in np.flatnonzero(differs[:, j])[:3 - len(rows)]]
    return found


def _merged_differences(written: pd.DataFrame, recount: pd.DataFrame, cols: list[str]) -> dict[int, list[tuple]]:
    """`table_differences` by an outer merge on (level, geocode): any rows at all."""
    for key in ("level", "geocode"):  # an empty side (no rows of these levels) reads its keys as floats
        if written[key].dtype != recount[key].dtype:
            written, recount = written.astype({key: object}), recount.astype({key: object})
    merged = written.merge(recount, on=["level", "geocode"], how="outer", suffixes=("", "__recount"))
    table_values = merged[cols].fillna(0).to_numpy()
    recount_values = merged[[c + "__recount" for c in cols]].fillna(0).to_numpy()
    differs = table_values != recount_values
    return {int(j): [(str(merged["level"].iloc[i]), str(merged["geocode"].iloc[i]), table_values[i, j],
                      recount_values[i, j]) for i in np.flatnonzero(differs[:, j])[:3]]
            for j in np.flatnonzero(differs.any(axis=0))}


def difference_messages(parts: list[dict[int, list[tuple]]], cols: list[str]) -> list[str]:
    """The `table_differences` of parts of a table, merged: per column, the first 3 rows of them all."""
    problems = []
    for j in sorted({j for part in parts for j in part}):
        for level, geocode, table, recount in sorted(row for part in parts for row in part.get(j, []))[:3]:
            problems.append(f"{level} {geocode!r} column {cols[j]!r}: table {table:g}, MDF recount {recount:g}")
    return problems


def hierarchy_differences(written: pd.DataFrame, cols: list[str], geo_levels) -> dict[tuple[str, str], list[str]]:
    """Per (parent, child) of consecutive geo_levels: the first 3 parent geocodes whose child rows do
    not sum to them."""
    found = {}
    for parent, child in zip(geo_levels, geo_levels[1:]):
        p = written[written["level"] == parent].set_index("geocode")[cols]
        c = written[written["level"] == child]
        sums = c.groupby(c["geocode"].str.slice(0, LEVEL_DIGITS[parent]))[cols].sum()
        sums = sums.reindex(p.index, fill_value=0)
        diff = (sums.to_numpy() != p.to_numpy()).any(axis=1)
        found[(parent, child)] = [str(g) for g in p.index[diff][:3]]
    return found


def hierarchy_messages(parts: list[dict[tuple[str, str], list[str]]], geo_levels) -> list[str]:
    """The `hierarchy_differences` of parts of a table, merged: per (parent, child), the first 3 of them all."""
    return [f"{child} rows of {parent} {g!r} do not sum to it" for parent, child in zip(geo_levels, geo_levels[1:])
            for g in [g for part in parts for g in part.get((parent, child), [])][:3]]


def recounted_tables(release: OpenRelease, persons_schema: Schema, units_schema: Schema | None):
    """(spec, "persons" or "units", path) of every table of the release recounted from an MDF."""
    try:
        specs = release.manifest.table_set()
    except SpecError as e:
        raise ValidationError(f"{release.run.manifest_path}: tables: {e}") from None
    for spec in specs:
        if spec.schema == persons_schema.name:
            kind = "persons"
        elif units_schema is not None and spec.schema == units_schema.name:
            kind = "units"
        else:
            continue
        yield spec, kind, release.run.table(spec.name)


# ---------------------------------------------------------------------------------------------
# The check: each state's rows, then the nation's and the states' rows on the driver


@dataclass
class Tables:
    """A shard's or a state's part: per table, its own row of the MDF recount at the state (None: no
    records), its differences below the state (table_differences, hierarchy_differences of the levels
    below the state), and the sum of its rows of the first level below the state (the state's children)."""

    recount: dict = field(default_factory=dict)
    differences: dict = field(default_factory=dict)
    child_sums: dict = field(default_factory=dict)


def tables_state(rows: StateRows) -> Tables:
    """The shard's rows of every table below the state (its own row at the state recounted, for the
    state's and the nation's, even when no table has a state level) against the recount of its records."""
    levels = rows.release.manifest.levels
    below = [lv for lv in levels if LEVEL_DIGITS[lv] > LEVEL_DIGITS[STATE]]
    low, high = rows.shard.geocodes
    out, prefixes = Tables(), {}  # prefixes: shared by every table of the same records
    for spec, kind, path in recounted_tables(rows.release, rows.persons_schema, rows.units_schema):
        records, decoded, schema = ((rows.persons, rows.levels, rows.persons_schema) if kind == "persons"
                                    else (rows.housing, rows.unit_levels, rows.units_schema))
        cols = column_names(schema, spec)
        if not path.exists() or not {"level", "geocode", *cols} <= set(columns(path)):
            continue  # the driver says so
        written = (read_geocodes(path, low, high, below) if below
                   else pd.DataFrame({c: [] for c in ["level", "geocode", *cols]}))
        if kind not in prefixes:
            prefixes[kind] = prefix_codes(records, [STATE, *below])
        recount = recount_table(records, decoded, schema, spec, geo_levels=[STATE, *below], prefixes=prefixes[kind])
        own = recount.levels[STATE][1]
        out.recount[spec.name] = own[0].tolist() if len(own) else None
        if below:
            out.child_sums[spec.name] = written.loc[written["level"] == below[0], cols].sum().tolist()
        out.differences[spec.name] = (table_differences(written, recount.without(STATE), cols),
                                      hierarchy_differences(written, cols, below))
    return out


def _sum(rows: list) -> list | None:
    """Rows of counts added up (None: no row)."""
    rows = [r for r in rows if r is not None]
    return np.sum(np.array(rows), axis=0).tolist() if rows else None


def tables_merge(release: OpenRelease, parts: list[Tables]) -> Tables:
    """A state's part from its shards': recounts and child sums added up, differences the first 3 of each
    column (in level, geocode order) and each pair of levels (in geocode order)."""
    out = Tables()
    for name in dict.fromkeys(n for p in parts for n in p.differences):
        mine = [p for p in parts if name in p.differences]
        out.recount[name] = _sum([p.recount.get(name) for p in mine])
        if any(name in p.child_sums for p in mine):
            out.child_sums[name] = _sum([p.child_sums.get(name) for p in mine])
        differences, hierarchy = {}, {}
        for p in mine:
            for j, rows in p.differences[name][0].items():
                differences[j] = sorted(differences.get(j, []) + rows)[:3]
            for pair, geocodes in p.differences[name][1].items():
                hierarchy[pair] = (hierarchy.get(pair, []) + geocodes)[:3]
        out.differences[name] = (differences, hierarchy)
    return out


def _top_recount(parts: dict[str, Tables], table: str, cols: list[str], top: list[str]) -> Recount:
    """A table's recount at the nation (the sum of the states') and, if the table has them, the states."""
    rows = {state: part.recount[table] for state, part in sorted(parts.items()) if part.recount.get(table) is not None}
    states = np.array(list(rows.values()), dtype=np.int64).reshape(len(rows), len(cols))
    nation = states.sum(axis=0, keepdims=True) if rows else states
    found = {NATION: (np.array([""] if rows else [], dtype=str), nation),
             STATE: (np.array(list(rows), dtype=str), states)}
    return Recount({level: found[level] for level in (NATION, STATE) if level in top})


def _top_hierarchy(written: pd.DataFrame, parts: dict[str, Tables], table: str, cols: list[str], *, geo_levels):
    """`hierarchy_differences` of the nation and state rows, and of each state's row against the sum of its
    children's rows (each state's); without a state level, the nation against the sum of its children's."""
    below = [lv for lv in geo_levels if LEVEL_DIGITS[lv] > LEVEL_DIGITS[STATE]]
    sums = {state: p.child_sums[table] for state, p in parts.items() if table in p.child_sums}
    if STATE in geo_levels or len(geo_levels) < 2:
        found = hierarchy_differences(written, cols, [lv for lv in geo_levels if LEVEL_DIGITS[lv] <= LEVEL_DIGITS[STATE]])
        if STATE in geo_levels and below:
            states = written[written["level"] == STATE].drop_duplicates("geocode").set_index("geocode")[cols]
            found[(STATE, below[0])] = [s for s in states.index if s in sums
                                          and (states.loc[s].to_numpy() != np.asarray(sums[s])).any()][:3]
        return found
    total = np.sum(list(sums.values()), axis=0) if sums else 0
    nation = written.loc[written["level"] == NATION, cols].to_numpy()
    return {(geo_levels[0], geo_levels[1]): [""] if len(nation) and (nation[0] != total).any() else []}


def tables_combine(release: OpenRelease, parts: dict[str, Tables], report: Report, alongside=None) -> None:
    """Each table: written, with its columns, equal to the recount and summing up, at every level."""
    levels = release.manifest.levels
    top = [lv for lv in levels if LEVEL_DIGITS[lv] <= LEVEL_DIGITS[STATE]]
    persons_schema, units_schema = release.schemas()
    for spec, kind, path in recounted_tables(release, persons_schema, units_schema):
        if not path.exists():
            report.check(f"table {spec.name} written", [f"{path} is missing"])
            continue
        cols = column_names(persons_schema if kind == "persons" else units_schema, spec)
        names = columns(path)  # once: the footer grows with the table's row groups
        absent = [c for c in ["level", "geocode", *cols] if c not in names]
        if absent:
            report.check(f"table {spec.name} equals the MDF recount", [f"{path.name} has no column {absent[0]!r}"])
            continue
        written = read_geocodes(path, None, None, top)  # batch by batch: the table is not held whole
        below = [part.differences.get(spec.name, ({}, {})) for part in parts.values()]
        report.check(f"table {spec.name} equals the MDF recount", first(difference_messages(
            [table_differences(written, _top_recount(parts, spec.name, cols, top), cols), *(d for d, _ in below)], cols)))
        report.check(f"table {spec.name} hierarchy sums", first(hierarchy_messages(
            [_top_hierarchy(written, parts, spec.name, cols, geo_levels=levels), *(h for _, h in below)], levels)))


TABLES = Check("tables_match_mdf", tables_combine, state=tables_state, merge=tables_merge)
