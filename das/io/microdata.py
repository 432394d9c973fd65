"""Reading confidential microdata (Parquet or CSV) into block histograms and invariants.

Every problem found is reported with the file, row, column, bad value and what was expected,
and never with a whole row (rows are confidential). Column names and codes come from the
schema spec, so the same reader serves PL94, DHC and the units schema; the consistency of
persons with the units file comes from the schema's constraints (facilities, structural zeros).

Columns are read as Arrow dictionary arrays: every check and every conversion runs on the
distinct values of a column, then is broadcast to the rows by index (no per-row Python).

>>> from das.model.schema import load_schema
>>> inputs = read_inputs("geography_fixtures/tiny/persons.csv", "geography_fixtures/tiny/units.csv",
...                      load_schema("pl94_persons"))
>>> inputs.person_histograms.shape, int(inputs.person_histograms.sum())
((12, 2016), 145)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow as pa
import scipy.sparse as sp

from das.core.errors import InputError
from das.io.problems import Collector, Problem
from das.io.tabular import Source, load_table, source
from das.model import rules
from das.model.geography import BLOCK_GROUP_COLUMN, GEOCODE_COLUMNS, block_geocodes
from das.model.histogram import block_histograms
from das.model.schema import Schema

GEOGRAPHY = GEOCODE_COLUMNS
BLOCK_GROUP = BLOCK_GROUP_COLUMN  # optional; the first digit of TABBLK
EPNUM = "EPNUM"  # optional person number; unique when present
GEOCODE = "geocode (TABBLKST+TABBLKCOU+TABTRACTCE+TABBLK)"
# The units file's own columns (the unit inventory is fixed by the format, not by a schema).
HOUSING_UNIT, GQ_FACILITY = 2, 4  # RTYPE
OCCUPIED = 1  # HH_STATUS
N_GQ_TYPES = 7


@dataclass(frozen=True)
class UnitInventory:
    """Per block of the universe (the blocks of the units file), in sorted geocode order."""

    blocks: np.ndarray  # (n_blocks,) str 15-digit geocodes, sorted unique
    housing_units: np.ndarray  # (n_blocks,) int64
    occupied: np.ndarray  # (n_blocks,) int64
    gq_facilities: np.ndarray  # (n_blocks, 7) int64: facilities of GQ types 1..7


@dataclass(frozen=True)
class Records:
    """One entry per counted input row."""

    block_index: np.ndarray  # (n,) int64 index into the universe's blocks
    cells: np.ndarray  # (n,) int64 cell index in the schema


@dataclass(frozen=True)
class Inputs:
    inventory: UnitInventory
    person_histograms: sp.csr_matrix  # (n_blocks x schema cells) int64
    unit_histograms: sp.csr_matrix | None  # with a units schema


# ---------------------------------------------------------------------------------------------
# Collecting problems


# ---------------------------------------------------------------------------------------------
# Loading a file as an Arrow table


# ---------------------------------------------------------------------------------------------
# Columns


@dataclass(frozen=True)
class _Encoded:
    """A text column as its distinct values and one index per row (Arrow dictionary encoding):
    checks and conversions run on the distinct values, not on every row."""

    values: np.ndarray  # (n_distinct,) str
    indices: np.ndarray  # (n_rows,) int64

    def rows(self, bad_values: np.ndarray) -> np.ndarray:
        return np.flatnonzero(bad_values[self.indices])

    def at(self, rows: np.ndarray) -> np.ndarray:
        return self.values[self.indices[rows]]

    def take(self, rows: np.ndarray) -> _Encoded:
        return _Encoded(self.values, self.indices[rows])

    def fullmatch(self, pattern: str) -> np.ndarray:
        """Per distinct value: does it match the regular expression?"""
        return pd.Series(self.values, dtype=object).str.fullmatch(pattern).to_numpy(dtype=bool)


def _encode(arr: pa.Array) -> _Encoded:
    if not pa.types.is_dictionary(arr.type):
        arr = arr.cast(pa.string()).dictionary_encode()
    # as bytes: a corrupt file's string column may hold bytes that are not UTF-8; shown escaped, they
    # fail the column's check like any other bad value (with its row), instead of raising here
    raw = arr.dictionary.cast(pa.binary()).to_pylist()
    values = np.asarray([b.decode("utf-8", "backslashreplace") if b is not None else "None" for b in raw], dtype=str)
    indices = arr.indices.to_numpy(zero_copy_only=False)  # int32 as Arrow keeps them (4 bytes a row, not 8)
    return _Encoded(values, indices if indices.dtype.kind == "i" and indices.itemsize >= 4 else indices.astype(np.int32))


def _shown(values, rows: np.ndarray) -> np.ndarray:
    """The values of a column (int64 array or _Encoded) at some rows, for messages."""
    return values.at(rows) if isinstance(values, _Encoded) else np.asarray(values)[rows]


def _column(table: pa.Table, name: str, kind: str, col: Collector, *, needed_for: str):
    """A column as int64 values (kind "int") or an _Encoded text column (kind "text"), after
    checking that it exists, has no nulls and has the right type; None after a problem."""
    if name not in table.column_names:
        near = [c for c in table.column_names if c.strip().lower() == name.lower()]
        hint = f"; found {near[0]!r}: names are case- and space-sensitive" if near else ""
        col.add(f"missing column {name} (needed for {needed_for}{hint})", column=name)
        return None
    try:
        arr = table[name].combine_chunks()
    except (pa.ArrowException, OSError, UnicodeDecodeError) as e:
        if not any(p.unreadable for p in col.problems):
            col.add(f"the Parquet data could not be read ({str(e).splitlines()[0]})", unreadable=True)
        return None
    if arr.null_count:
        rows = np.flatnonzero(arr.is_null().to_numpy(zero_copy_only=False))
        col.add("a value; the cell is " + ("empty" if col.csv else "null"), column=name,
                rows=rows, values=["" if col.csv else "null"] * len(rows))
        return None
    value_type = arr.type.value_type if pa.types.is_dictionary(arr.type) else arr.type
    is_text = pa.types.is_string(value_type) or pa.types.is_large_string(value_type) \
        or pa.types.is_string_view(value_type)
    if kind == "int":
        if pa.types.is_integer(value_type):
            if pa.types.is_dictionary(arr.type):
                arr = arr.cast(value_type)
            values = arr.to_numpy(zero_copy_only=False)
            if values.dtype == np.uint64 and (values > np.uint64(2**63 - 1)).any():
                rows = np.flatnonzero(values > np.uint64(2**63 - 1))
                col.add("an integer below 2^63", column=name, rows=rows, values=[str(int(v)) for v in values[rows]])
                return None
            return values if values.dtype.kind == "i" else values.astype(np.int64)  # int8 codes stay a byte a row
        if not (col.csv and is_text):
            col.add(f"column {name} has type {value_type}, expected an integer type (int8..int64)",
                    column=name)
            return None
        try:  # Arrow's strict cast: fast, and all we need when every value is an integer
            return arr.cast(pa.int64()).to_numpy(zero_copy_only=False)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            pass
        enc = _encode(arr)
        ok = enc.fullmatch(r"-?[0-9]{1,18}")  # ASCII digits: \d would take fullwidth and Arabic-Indic ones
        if not ok.all():
            rows = enc.rows(~ok)
            col.add("an integer", column=name, rows=rows, values=enc.at(rows))
            return None
        return enc.values.astype(np.int64)[enc.indices]
    if not is_text:
        col.add(f"column {name} has type {value_type}, expected string (zero-padded digits)", column=name)
        return None
    return _encode(arr)


def _show_codes(codes) -> str:
    codes = list(codes)
    if len(codes) > 8:
        return f"one of {codes[0]!r}..{codes[-1]!r}"
    return "one of " + ", ".join(map(repr, codes))


def _levels(values, codes, name: str, col: Collector, *, row_of=None) -> np.ndarray | None:
    """Level index of each value given the codes of the levels (values: int64 array or _Encoded);
    `row_of` maps value positions to file rows (when only some rows are counted)."""
    lookup = pd.Index(list(codes))
    if isinstance(values, _Encoded):
        distinct_levels = lookup.get_indexer(values.values)
        levels = distinct_levels[values.indices]
    else:
        levels = lookup.get_indexer(values)
    bad = np.flatnonzero(levels < 0)
    if len(bad):
        shown = _shown(values, bad)
        negative = not isinstance(values, _Encoded) and (shown < 0).any()
        col.add(("a nonnegative code, " if negative else "") + _show_codes(codes), column=name,
                rows=bad if row_of is None else row_of[bad], values=shown)
        return None
    return levels.astype(np.int16 if len(lookup) < 2**15 else np.int64)  # np.ravel_multi_index takes any width


# ---------------------------------------------------------------------------------------------
# Geography


def _geocodes(table: pa.Table, col: Collector, what: str) -> tuple[np.ndarray, np.ndarray] | None:
    """(distinct 15-digit geocodes, index of each row's geocode), or None after reporting problems."""
    parts = []
    for name, width in GEOGRAPHY:
        enc = _column(table, name, "text", col, needed_for=f"the block geocode of every {what}")
        if enc is not None:
            bad = ~enc.fullmatch(rf"[0-9]{{{width}}}")  # ASCII digits only (\d takes any Unicode digit)
            if bad.any():
                rows = enc.rows(bad)
                col.add(f"{width} ASCII digits 0-9, zero-padded", column=name, rows=rows, values=enc.at(rows))
                enc = None
        parts.append(enc)
    block = parts[-1]
    if BLOCK_GROUP in table.column_names and block is not None:
        group = _column(table, BLOCK_GROUP, "text", col, needed_for="the block group")
        if group is not None:
            first_digit = np.asarray([v[:1] for v in block.values], dtype=str)
            wrong = group.values[group.indices] != first_digit[block.indices]
            if wrong.any():
                rows = np.flatnonzero(wrong)
                col.add("the first digit of TABBLK", column=BLOCK_GROUP, rows=rows, values=group.at(rows))
    if any(p is None for p in parts):
        return None
    for (name, _), enc in zip(GEOGRAPHY, parts):  # a damaged file can decode a column short
        if len(enc.indices) != table.num_rows:
            col.add(f"{table.num_rows} values, one a row (it decoded {len(enc.indices)}: the file is damaged)",
                    column=name, unreadable=True)
            return None
    key = np.zeros(len(block.indices), dtype=np.int64)  # the row's distinct values, one number
    for enc in parts:
        key *= len(enc.values)
        key += enc.indices
    row_geocode, keys = pd.factorize(key)  # hashed: memory of the distinct blocks, not a sort of every row
    del key
    indices = []
    for enc in reversed(parts):  # each part's index back from the key, the last part first
        keys, index = np.divmod(keys, len(enc.values))
        indices.append(index)
    geocodes = block_geocodes(*(enc.values[index] for enc, index in zip(parts, reversed(indices))))
    return geocodes, row_geocode.astype(np.int64, copy=False)


# ---------------------------------------------------------------------------------------------
# The units file: the block universe and its invariants


@dataclass(frozen=True)
class _Units:
    inventory: UnitInventory
    table: pa.Table
    block_index: np.ndarray  # (n_rows,) each row's block


def _read_units(path: Source, col: Collector) -> _Units | None:
    table = load_table(path, col)
    if table is None:
        return None
    if table.num_rows == 0:
        col.add("the units file has no rows: it defines the blocks of the run, so at least one "
                "housing unit or group-quarters facility is needed")
        return None
    geo = _geocodes(table, col, "unit")
    columns = {name: _column(table, name, "int", col, needed_for="the unit inventory")
               for name in ("RTYPE", "GQTYPE_PL", "HH_STATUS")}
    if geo is None or any(v is None for v in columns.values()):
        return None
    rtype, gqtype, status = columns["RTYPE"], columns["GQTYPE_PL"], columns["HH_STATUS"]
    for name, codes in (("RTYPE", (HOUSING_UNIT, GQ_FACILITY)), ("GQTYPE_PL", range(N_GQ_TYPES + 1)),
                        ("HH_STATUS", (0, 1, 2))):
        _levels(columns[name], codes, name, col)
    if col.problems:
        return None
    housing = rtype == HOUSING_UNIT
    for rows, column, values, expected in (
        (housing & (gqtype != 0), "GQTYPE_PL", gqtype, "GQTYPE_PL 0 for a housing unit (RTYPE 2)"),
        (~housing & (gqtype == 0), "GQTYPE_PL", gqtype, "GQTYPE_PL 1..7 for a group-quarters facility (RTYPE 4)"),
        (housing & (status == 0), "HH_STATUS", status,
         "HH_STATUS 1 (occupied) or 2 (vacant) for a housing unit (RTYPE 2)"),
        (~housing & (status != 0), "HH_STATUS", status, "HH_STATUS 0 for a group-quarters facility (RTYPE 4)"),
    ):
        bad = np.flatnonzero(rows)
        if len(bad):
            col.add(expected, column=column, rows=bad, values=values[bad])
    if col.problems:
        return None
    distinct, row_geocode = geo
    order = np.argsort(distinct)
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(len(order))
    block_index = rank[row_geocode]
    n = len(distinct)
    facilities = np.zeros((n, N_GQ_TYPES + 1), dtype=np.int64)
    np.add.at(facilities, (block_index[~housing], gqtype[~housing]), 1)
    inventory = UnitInventory(
        blocks=distinct[order],
        housing_units=np.bincount(block_index[housing], minlength=n).astype(np.int64),
        occupied=np.bincount(block_index[housing & (status == OCCUPIED)], minlength=n).astype(np.int64),
        gq_facilities=facilities[:, 1:].copy(),
    )
    return _Units(inventory, table, block_index)


def read_units(path) -> UnitInventory:
    """The block universe and its invariants from a units file; InputError lists every problem."""
    path = source(path)
    col = Collector(path)
    units = _read_units(path, col)
    if col.problems:
        raise InputError(col.problems)
    return units.inventory


# ---------------------------------------------------------------------------------------------
# Records of a schema


@dataclass(frozen=True)
class _Read:
    records: Records
    rows: np.ndarray  # (n,) 0-based file row of each record
    columns: dict  # column name -> int64 values or _Encoded, over all file rows
    levels: dict  # attribute name -> (n,) level of each record


def _records(table: pa.Table, schema: Schema, blocks: np.ndarray | None, col: Collector, *,
             block_index: np.ndarray | None = None) -> _Read | None:
    """The records a schema counts in a table, or None after reporting problems. `blocks`: the
    universe (None: the units file is unusable; check this file alone); `block_index`: each
    row's block when already known (the units file itself)."""
    what = "person" if schema.universe == "persons" else "unit"
    if block_index is None:
        geo = _geocodes(table, col, what)
        if geo is not None and blocks is not None:
            distinct, row_geocode = geo
            found = np.minimum(np.searchsorted(blocks, distinct), max(len(blocks) - 1, 0))
            absent = blocks[found] != distinct if len(blocks) else np.ones(len(distinct), bool)
            if absent.any():
                rows = np.flatnonzero(absent[row_geocode])
                col.add("a block that appears in the units file (the units file defines the blocks "
                        "of the run)", column=GEOCODE, rows=rows, values=distinct[row_geocode[rows]])
            else:
                block_index = found[row_geocode]
    if EPNUM in table.column_names:
        person_numbers = _column(table, EPNUM, "int", col, needed_for="the person number")
        if person_numbers is not None:
            repeated = np.flatnonzero(pd.Series(person_numbers).duplicated().to_numpy())
            if len(repeated):
                col.add("a unique EPNUM (this one is on an earlier row too)", column=EPNUM,
                        rows=repeated, values=person_numbers[repeated])
    rows = np.arange(table.num_rows)
    if schema.record_filter is not None:
        column, value = schema.record_filter
        values = _column(table, column, "int", col, needed_for=f"choosing the rows schema {schema.name} counts")
        if values is None:
            return None
        rows = np.flatnonzero(values == value)
    columns, levels = {}, []
    for a in schema.attributes:
        kind = "text" if isinstance(a.codes[0], str) else "int"
        values = _column(table, a.column, kind, col, needed_for=f"attribute {a.name} of schema {schema.name}")

        if values is None:
            levels.append(None)
            continue
        columns[a.column] = values
        counted = values if len(rows) == table.num_rows else (
            values.take(rows) if kind == "text" else values[rows])
        levels.append(_levels(counted, a.codes, a.column, col, row_of=rows))
    for column, attribute, mapping in schema.derived:
        values = _column(table, column, "int", col, needed_for=f"checking attribute {attribute} of schema {schema.name}")
        level = levels[schema.names.index(attribute)]
        if values is None or level is None:
            continue
        bad = np.flatnonzero(values[rows] != np.asarray(mapping)[level])
        if len(bad):
            a = schema.attribute(attribute)
            rule = ", ".join(f"{code} -> {m}" for code, m in zip(a.codes, mapping))
            col.add(f"{column} consistent with {a.column} ({a.column} {rule})", column=column,
                    rows=rows[bad], values=values[rows[bad]])
    if col.problems or block_index is None:
        return None
    cells = np.asarray(schema.cell_index(tuple(levels)), dtype=np.int64).reshape(-1)
    return _Read(Records(block_index[rows].astype(np.int64), cells), rows, columns, dict(zip(schema.names, levels)))


def read_person_levels(path, schema: Schema) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A persons file read alone (no units file): (its blocks, sorted; each record's block index;
    each record's level per schema attribute), or InputError listing every problem."""
    path = source(path)
    col = Collector(path)
    table = load_table(path, col)
    geo = None if table is None else _geocodes(table, col, "person")
    read = None
    if geo is not None:
        blocks = np.unique(geo[0])
        read = _records(table, schema, blocks, col)
    if col.problems or read is None:
        raise InputError(col.problems)
    levels = np.column_stack([np.asarray(read.levels[n], dtype=np.int64) for n in schema.names]) \
        if len(read.records.cells) else np.zeros((0, len(schema.names)), dtype=np.int64)
    return blocks, read.records.block_index, levels


def read_records(path, schema: Schema, blocks: np.ndarray) -> Records:
    """The records of one file that `schema` counts (persons with a persons schema, units with
    a units schema), located in the universe `blocks`; InputError lists every problem."""
    path = source(path)
    col = Collector(path)
    table = load_table(path, col)
    read = None if table is None else _records(table, schema, np.asarray(blocks), col)
    if col.problems:
        raise InputError(col.problems)
    return read.records


# ---------------------------------------------------------------------------------------------
# Persons against the units file


def _rule_checks(read: _Read, inventory: UnitInventory, schema: Schema, col: Collector) -> None:
    """The schema's rules hold in the input (das.model.rules): every record beyond its block's upper bound
    for its answer cell is named, e.g. a person where the units file has no facility of their type
    (or no housing unit for a household person), or anyone in a structural-zero cell."""
    records = read.records
    facts = rules.Invariants(inventory.housing_units, inventory.gq_facilities, {})
    for bounds in rules.block_bounds(schema, facts, inputs_only=True):
        query = schema.query(bounds.query)
        cells = rules.answer_cells(query)[records.cells]
        beyond = np.flatnonzero(rules.excess_records(bounds, records.block_index, cells))
        if not len(beyond):
            continue
        column = _attribute_of(schema, query.factors[-1]).column if query.factors else None
        said: dict[str, list[np.ndarray]] = {}
        for cell in np.unique(cells[beyond]):
            said.setdefault(rules.describe(schema, bounds.rule, int(cell)), []).append(beyond[cells[beyond] == cell])
        for expected, parts in said.items():
            rows = read.rows[np.sort(np.concatenate(parts))]
            col.add(expected, column=column, rows=rows,
                    values=None if column is None else _shown(read.columns[column], rows))


def _attribute_of(schema: Schema, factor: str):
    """The attribute behind a factor (an attribute, or the attribute a recode coarsens)."""
    for r in schema.recodes:
        if r.name == factor:
            return schema.attribute(r.attribute)
    return schema.attribute(factor)


# ---------------------------------------------------------------------------------------------
# Both files


def collect_problems(persons_path, units_path, schema: Schema,
                     units_schema: Schema | None = None) -> tuple[list[Problem], Inputs | None]:
    """Every problem in the two files (each check runs, none stops the others), and the inputs
    when there are none."""
    units_path, persons_path = source(units_path), source(persons_path)
    ucol, pcol = Collector(units_path), Collector(persons_path)
    units = _read_units(units_path, ucol)
    table = load_table(persons_path, pcol)
    persons = None
    if table is not None:
        persons = _records(table, schema, None if units is None else units.inventory.blocks, pcol)
        if persons is not None and units is not None:
            _rule_checks(persons, units.inventory, schema, pcol)
    unit_records = None
    if units is not None and units_schema is not None:
        unit_records = _records(units.table, units_schema, units.inventory.blocks, ucol,
                                block_index=units.block_index)
    problems = ucol.problems + pcol.problems
    if problems:
        return problems, None
    n_blocks = len(units.inventory.blocks)
    return [], Inputs(
        units.inventory,
        block_histograms(persons.records, n_blocks, schema.size),
        None if unit_records is None else block_histograms(unit_records.records, n_blocks, units_schema.size),
    )


def read_inputs(persons_path, units_path, schema: Schema, units_schema: Schema | None = None) -> Inputs:
    """Validated inputs: the unit inventory and block histograms; InputError lists every problem."""
    problems, inputs = collect_problems(persons_path, units_path, schema, units_schema)
    if problems:
        raise InputError(problems)
    return inputs
