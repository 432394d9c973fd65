"""Reading confidential microdata (Parquet or CSV) into block histograms and invariants.

Every problem found is reported with the file, row, column, bad value and what was expected,
and never with a whole row (rows are confidential). Column names and codes come from the
schema spec, so the same reader serves PL94, DHC and the units schema.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import scipy.sparse as sp

from das.histogram import block_histograms
from das.schema import Schema

GEOGRAPHY = (("TABBLKST", 2), ("TABBLKCOU", 3), ("TABTRACTCE", 6), ("TABBLK", 4))
OPTIONAL_GEOGRAPHY = ("TABBLKGRPCE", 1)
UNIT_COLUMNS = ("RTYPE", "GQTYPE_PL", "HH_STATUS")
MAX_ROWS_LISTED = 5
MAX_PROBLEMS = 200


@dataclass(frozen=True)
class Problem:
    file: str
    row: int | None       # 1-based data row
    column: str | None
    value: str | None
    expected: str
    csv: bool = False

    def __str__(self) -> str:
        where = Path(self.file).name
        if self.row is not None:
            where += f" row {self.row}" + (f" (line {self.row + 1})" if self.csv else "")
        if self.column is not None:
            where += f", column {self.column}"
        if self.value is not None:
            return f"{where}: {self.value!r} is not valid: expected {self.expected}"
        return f"{where}: {self.expected}"


class InputError(Exception):
    """Input files that cannot be used, with every problem found."""

    def __init__(self, problems: list[Problem]):
        self.problems = problems
        listed = "\n".join(f"  - {p}" for p in problems[:20])
        more = f"\n  ... and {len(problems) - 20} more problems" if len(problems) > 20 else ""
        super().__init__(f"{len(problems)} problem(s) in the input:\n{listed}{more}")


@dataclass(frozen=True)
class UnitInventory:
    blocks: np.ndarray          # (n_blocks,) sorted 15-digit geocodes: the block universe
    housing_units: np.ndarray   # (n_blocks,) int64
    occupied: np.ndarray        # (n_blocks,) int64
    gq_facilities: np.ndarray   # (n_blocks, 7) int64, GQ types 1..7


@dataclass(frozen=True)
class Records:
    block_index: np.ndarray     # (n,) int64 into the universe's blocks
    cells: np.ndarray           # (n,) int64 schema cells


@dataclass(frozen=True)
class Inputs:
    inventory: UnitInventory
    person_histograms: sp.csr_matrix
    unit_histograms: sp.csr_matrix | None


class _Collector:
    def __init__(self, path: Path, csv: bool):
        self.path, self.csv, self.problems = str(path), csv, []

    def add(self, expected: str, column=None, rows=None, values=None):
        """One problem per offending row (first few), then a count of the rest."""
        if rows is None:
            self.problems.append(Problem(self.path, None, column, None, expected, self.csv))
            return
        rows = np.asarray(rows)
        for i, r in enumerate(rows[:MAX_ROWS_LISTED]):
            v = None if values is None else str(values[i])
            self.problems.append(Problem(self.path, int(r) + 1, column, v, expected, self.csv))
        if len(rows) > MAX_ROWS_LISTED:
            self.problems.append(Problem(self.path, None, column, None,
                                         f"{len(rows) - MAX_ROWS_LISTED} more rows with the same problem", self.csv))


def _load(path: Path, col: _Collector) -> pa.Table | None:
    """Read a Parquet or CSV file as an Arrow table; CSV columns are all read as text."""
    if not path.exists():
        col.add("file not found")
        return None
    if path.stat().st_size == 0:
        col.add("the file is empty (0 bytes): expected a header and rows")
        return None
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        try:
            schema = pq.read_schema(path)
            names = schema.names
            dupes = sorted({n for n in names if names.count(n) > 1})
            if dupes:
                col.add(f"duplicate column name(s) {dupes}: every column must appear once")
                return None
            return pq.read_table(path)
        except (pa.ArrowInvalid, OSError) as e:
            col.add(f"not a readable Parquet file ({str(e).splitlines()[0]})")
            return None
    if suffix == ".csv":
        with open(path, errors="replace") as f:
            header = f.readline().rstrip("\r\n")
        names = header.split(",")
        if len(names) == 1 and any(d in header for d in "|;\t"):
            delim = next(d for d in "|;\t" if d in header)
            col.add(f"the header has one column containing {delim!r}: the file looks {delim!r}-delimited, "
                    f"expected comma-separated values", rows=[-1])
            return None
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            col.add(f"duplicate column name(s) {dupes} in the header: every column must appear once")
            return None
        try:
            return pacsv.read_csv(path, convert_options=pacsv.ConvertOptions(
                column_types={n: pa.string() for n in names}, strings_can_be_null=False))
        except pa.ArrowInvalid as e:
            col.add(f"not a readable CSV file ({str(e).splitlines()[0]})")
            return None
    col.add(f"unknown file type {path.suffix!r}: expected .parquet or .csv")
    return None


@dataclass(frozen=True)
class _Encoded:
    """A text column as its distinct values and one index per row (Arrow dictionary encoding):
    checks and conversions run on the distinct values, not on every row."""

    values: np.ndarray   # (n_distinct,) str
    indices: np.ndarray  # (n_rows,) int64

    def rows(self, bad_values: np.ndarray) -> np.ndarray:
        return np.flatnonzero(bad_values[self.indices])

    def at(self, rows: np.ndarray) -> np.ndarray:
        return self.values[self.indices[rows]]


def _column(table: pa.Table, name: str, kind: str, col: _Collector, csv: bool):
    """kind 'int': int64 numpy values; kind 'text': an _Encoded column. Checks type and nulls."""
    if name not in table.column_names:
        col.add(f"missing column {name} (expected columns include {name})", column=name)
        return None
    arr = table[name].combine_chunks()
    if arr.null_count:
        rows = np.flatnonzero(arr.is_null().to_numpy(zero_copy_only=False))
        col.add("a value (the cell is empty/null)", column=name, rows=rows, values=["null"] * len(rows))
        return None
    value_type = arr.type.value_type if pa.types.is_dictionary(arr.type) else arr.type
    if kind == "int":
        if pa.types.is_integer(value_type):
            if pa.types.is_dictionary(arr.type):
                arr = arr.cast(value_type)
            return arr.to_numpy().astype(np.int64)
        if not csv:
            col.add(f"column {name} has type {value_type}, expected an integer type", column=name)
            return None
        enc = _encode(arr)
        ok = pd.Series(enc.values, dtype=str).str.fullmatch(r"-?\d+").to_numpy()
        if not ok.all():
            rows = enc.rows(~ok)
            col.add("an integer", column=name, rows=rows, values=enc.at(rows))
            return None
        return enc.values.astype(np.int64)[enc.indices]
    if not (pa.types.is_string(value_type) or pa.types.is_large_string(value_type)):
        col.add(f"column {name} has type {value_type}, expected a string of digits (zero-padded)", column=name)
        return None
    return _encode(arr)


def _encode(arr: pa.Array) -> _Encoded:
    if not pa.types.is_dictionary(arr.type):
        arr = arr.dictionary_encode()
    values = np.asarray(arr.dictionary.to_pylist(), dtype=str)
    return _Encoded(values, arr.indices.to_numpy(zero_copy_only=False).astype(np.int64))


def _geocodes(table: pa.Table, col: _Collector, csv: bool) -> tuple[np.ndarray, np.ndarray] | None:
    """(distinct 15-digit geocodes, index of each row's geocode), or None after reporting problems."""
    parts = []
    for name, width in GEOGRAPHY:
        enc = _column(table, name, "text", col, csv)
        if enc is None:
            parts.append(None)
            continue
        bad = ~pd.Series(enc.values, dtype=str).str.fullmatch(rf"\d{{{width}}}").to_numpy()
        if bad.any():
            rows = enc.rows(bad)
            col.add(f"{width} digits (zero-padded)", column=name, rows=rows, values=enc.at(rows))
            parts.append(None)
        else:
            parts.append(enc)
    if OPTIONAL_GEOGRAPHY[0] in table.column_names and parts[3] is not None:
        bg = _column(table, OPTIONAL_GEOGRAPHY[0], "text", col, csv)
        if bg is not None:
            first = np.asarray([v[:1] for v in parts[3].values], dtype=str)
            pair = bg.indices * len(parts[3].values) + parts[3].indices
            distinct, first_row = np.unique(pair, return_index=True)
            wrong = bg.values[distinct // len(parts[3].values)] != first[distinct % len(parts[3].values)]
            if wrong.any():
                rows = np.flatnonzero(np.isin(pair, distinct[wrong]))
                col.add("the first digit of TABBLK", column="TABBLKGRPCE", rows=rows, values=bg.at(rows))
    if any(p is None for p in parts):
        return None
    key = np.zeros(len(parts[0].indices), dtype=np.int64)
    for enc in parts:
        key = key * len(enc.values) + enc.indices
    distinct, first_row, inverse = np.unique(key, return_index=True, return_inverse=True)
    geocodes = np.asarray([
        "".join(enc.values[enc.indices[r]] for enc in parts) for r in first_row
    ], dtype="U15")
    return geocodes, inverse.astype(np.int64)


def _codes(values, allowed, name: str, col: _Collector) -> np.ndarray | None:
    """Level index of each row given the allowed codes (values: int64 array or _Encoded)."""
    allowed = list(allowed)
    lookup = pd.Index(allowed)
    shown = f"{allowed[0]!r}..{allowed[-1]!r}" if len(allowed) > 8 else ", ".join(map(repr, allowed))
    if isinstance(values, _Encoded):
        levels = lookup.get_indexer(values.values)
        if (levels < 0).any():
            rows = values.rows(levels < 0)
            col.add("one of " + shown, column=name, rows=rows, values=values.at(rows))
            return None
        return levels.astype(np.int64)[values.indices]
    levels = lookup.get_indexer(values)
    bad = np.flatnonzero(levels < 0)
    if len(bad):
        negative = (np.asarray(values)[bad] < 0).any()
        col.add(("a nonnegative code, one of " if negative else "one of ") + shown, column=name,
                rows=bad, values=np.asarray(values)[bad])
        return None
    return levels.astype(np.int64)


def _read_units_table(path: Path) -> tuple[UnitInventory | None, pa.Table | None, np.ndarray | None, _Collector]:
    path = Path(path)
    col = _Collector(path, path.suffix.lower() == ".csv")
    table = _load(path, col)
    if table is None:
        return None, None, None, col
    if table.num_rows == 0:
        col.add("the units file has no rows: it defines the block universe, at least one unit is needed")
        return None, None, None, col
    csv = col.csv
    geo = _geocodes(table, col, csv)
    values = {c: _column(table, c, "int", col, csv) for c in UNIT_COLUMNS}
    if geo is None or any(v is None for v in values.values()):
        return None, None, None, col
    rtype, gq, status = values["RTYPE"], values["GQTYPE_PL"], values["HH_STATUS"]
    if _codes(rtype, [2, 4], "RTYPE", col) is None or _codes(gq, range(8), "GQTYPE_PL", col) is None \
            or _codes(status, [0, 1, 2], "HH_STATUS", col) is None:
        return None, None, None, col
    hu = rtype == 2
    bad = np.flatnonzero(hu & (gq != 0))
    if len(bad):
        col.add("GQTYPE_PL 0 for a housing unit (RTYPE 2)", column="GQTYPE_PL", rows=bad, values=gq[bad])
    bad = np.flatnonzero(~hu & (gq == 0))
    if len(bad):
        col.add("GQTYPE_PL 1..7 for a group-quarters facility (RTYPE 4)", column="GQTYPE_PL", rows=bad, values=gq[bad])
    bad = np.flatnonzero(hu & (status == 0))
    if len(bad):
        col.add("HH_STATUS 1 (occupied) or 2 (vacant) for a housing unit (RTYPE 2)", column="HH_STATUS",
                rows=bad, values=status[bad])
    bad = np.flatnonzero(~hu & (status != 0))
    if len(bad):
        col.add("HH_STATUS 0 for a group-quarters facility (RTYPE 4)", column="HH_STATUS", rows=bad, values=status[bad])
    if col.problems:
        return None, None, None, col
    distinct, row_geocode = geo
    order = np.argsort(distinct)
    blocks = distinct[order]
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(len(order))
    block_index = rank[row_geocode]
    n = len(blocks)
    inventory = UnitInventory(
        blocks=blocks,
        housing_units=np.bincount(block_index[hu], minlength=n).astype(np.int64),
        occupied=np.bincount(block_index[hu & (status == 1)], minlength=n).astype(np.int64),
        gq_facilities=np.stack([np.bincount(block_index[gq == t], minlength=n) for t in range(1, 8)], axis=1).astype(np.int64),
    )
    return inventory, table, block_index, col


def read_units(path) -> UnitInventory:
    inventory, _, _, col = _read_units_table(Path(path))
    if col.problems:
        raise InputError(col.problems)
    return inventory


def _records(table: pa.Table, schema: Schema, blocks: np.ndarray, col: _Collector,
             block_index: np.ndarray | None = None) -> tuple[Records | None, dict]:
    csv = col.csv
    if block_index is None:
        geo = _geocodes(table, col, csv)
        if geo is None:
            return None, {}
        distinct, row_geocode = geo
        if blocks is None:
            block_index = np.zeros(len(row_geocode), dtype=np.int64)
        else:
            found = np.minimum(np.searchsorted(blocks, distinct), len(blocks) - 1)
            missing = blocks[found] != distinct
            if missing.any():
                absent = np.flatnonzero(missing[row_geocode])
                col.add("a block present in the units file (every person's block must have a housing unit "
                        "or GQ facility there)", column="TABBLK (geocode)", rows=absent,
                        values=distinct[row_geocode[absent]])
                return None, {}
            block_index = found[row_geocode]
    keep = np.ones(table.num_rows, dtype=bool)
    if schema.record_filter is not None:
        fcol, fval = schema.record_filter
        values = _column(table, fcol, "int", col, csv)
        if values is None:
            return None, {}
        keep = values == fval
    levels, raw = [], {}
    for a in schema.attributes:
        kind = "text" if isinstance(a.codes[0], str) else "int"
        values = _column(table, a.column, kind, col, csv)
        if values is None:
            levels.append(None)
            continue
        raw[a.column] = values
        if not keep.all():
            values = _Encoded(values.values, values.indices[keep]) if kind == "text" else values[keep]
        levels.append(_codes(values, a.codes, a.column, col))
    for column, attribute, mapping in schema.derived:
        values = _column(table, column, "int", col, csv)
        lv = levels[schema.names.index(attribute)]
        if values is None or lv is None:
            continue
        expected = np.asarray(mapping)[lv]
        bad = np.flatnonzero(values[keep] != expected)
        if len(bad):
            rows = np.flatnonzero(keep)[bad]
            col.add(f"{column} consistent with {schema.attribute(attribute).column} "
                    f"({', '.join(f'{c} -> {m}' for c, m in zip(schema.attribute(attribute).codes, mapping))})",
                    column=column, rows=rows, values=values[rows])
    if any(lv is None for lv in levels) or col.problems:
        return None, raw
    cells = schema.cell_index(tuple(levels)).astype(np.int64)
    return Records(block_index[keep].astype(np.int64), cells), raw


def read_records(path, schema: Schema, blocks: np.ndarray) -> Records:
    path = Path(path)
    col = _Collector(path, path.suffix.lower() == ".csv")
    table = _load(path, col)
    records = None
    if table is not None:
        records, _ = _records(table, schema, blocks, col)
    if col.problems:
        raise InputError(col.problems)
    return records


def _cross_checks(records: Records, raw: dict, inventory: UnitInventory, schema: Schema, col: _Collector) -> None:
    """Persons against the units file: GQ persons need a facility of their type, household persons
    a housing unit; nobody under 18 in a nursing facility."""
    if "GQTYPE_PL" not in raw:
        return
    gq = raw["GQTYPE_PL"]
    b = records.block_index
    gq_rows = np.flatnonzero(gq > 0)
    no_facility = gq_rows[inventory.gq_facilities[b[gq_rows], gq[gq_rows] - 1] == 0]
    if len(no_facility):
        col.add("a GQ facility of this type (GQTYPE_PL) in the person's block per the units file",
                column="GQTYPE_PL", rows=no_facility, values=gq[no_facility])
    hh_rows = np.flatnonzero(gq == 0)
    no_housing = hh_rows[inventory.housing_units[b[hh_rows]] == 0]
    if len(no_housing):
        col.add("a housing unit in the person's block for a household person (the block has none in the units file)",
                column="GQTYPE_PL", rows=no_housing, values=gq[no_housing])
    if "votingage" in schema.names or any(r.name == "votingage" for r in schema.recodes):
        minors = schema.levels_of("votingage", records.cells) == 0
        bad = np.flatnonzero(minors & (gq == 3))
        if len(bad):
            col.add("nobody under 18 in a nursing facility (GQTYPE_PL 3)", column="GQTYPE_PL", rows=bad, values=gq[bad])


def collect_problems(persons_path, units_path, schema: Schema, units_schema: Schema | None = None):
    """(problems, Inputs or None): every check, without stopping at the first."""
    inventory, unit_table, unit_blocks, ucol = _read_units_table(Path(units_path))
    problems = list(ucol.problems)
    persons_path = Path(persons_path)
    pcol = _Collector(persons_path, persons_path.suffix.lower() == ".csv")
    table = _load(persons_path, pcol)
    records = raw = None
    if table is not None and "EPNUM" in table.column_names:
        ep = _column(table, "EPNUM", "int", pcol, pcol.csv)
        if ep is not None:
            dup = np.flatnonzero(pd.Series(ep).duplicated().to_numpy())
            if len(dup):
                pcol.add("a unique person number (EPNUM repeats)", column="EPNUM", rows=dup, values=ep[dup])
    if table is not None and inventory is not None:
        records, raw = _records(table, schema, inventory.blocks, pcol)
        if records is not None:
            _cross_checks(records, raw, inventory, schema, pcol)
    elif table is not None:  # the units file is unusable: still check the persons file alone
        _records(table, schema, None, pcol)
    problems += pcol.problems
    if problems or records is None:
        return problems[:MAX_PROBLEMS], None
    person_histograms = block_histograms(records, len(inventory.blocks), schema.size)
    unit_histograms = None
    if units_schema is not None:
        ucol2 = _Collector(Path(units_path), ucol.csv)
        unit_records, _ = _records(unit_table, units_schema, inventory.blocks, ucol2, block_index=unit_blocks)
        if ucol2.problems:
            return ucol2.problems, None
        unit_histograms = block_histograms(unit_records, len(inventory.blocks), units_schema.size)
    return [], Inputs(inventory, person_histograms, unit_histograms)


def read_inputs(persons_path, units_path, schema: Schema, units_schema: Schema | None = None) -> Inputs:
    """Validated inputs: the unit inventory and block histograms; InputError lists every problem."""
    problems, inputs = collect_problems(persons_path, units_path, schema, units_schema)
    if problems:
        raise InputError(problems)
    return inputs
