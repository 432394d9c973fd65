"""Noisy measurement file (NMF): every noisy answer with its level, geocode, query, cell and
exact variance, as Parquet, so others can re-run or replace the post-processing.

Layout: `nmf/<release>/<level>.parquet`, one file per level, row groups per (query, chunk of
geounits); within a query, rows run geounit-major then cell. Columns: level, geocode, query
(dictionary strings), cell (int32), noisy (int64), variance_num / variance_den (int64, the
exact rational variance sigma^2). A file is written under a temporary name and renamed when
complete, so a present file is a whole level. While a level is being measured, each (query,
chunk) is committed on its own to `<level>.parquet.parts/` (see das/measure.py) and the level
file is assembled from those parts.
"""

from __future__ import annotations

import os
from fractions import Fraction
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

NMF_SCHEMA = pa.schema([
    ("level", pa.dictionary(pa.int32(), pa.string())),
    ("geocode", pa.dictionary(pa.int32(), pa.string())),
    ("query", pa.dictionary(pa.int32(), pa.string())),
    ("cell", pa.int32()),
    ("noisy", pa.int64()),
    ("variance_num", pa.int64()),
    ("variance_den", pa.int64()),
])
INT64_MAX = 2**63 - 1


def level_path(nmf_dir: Path, release: str, level: str) -> Path:
    return Path(nmf_dir) / release / f"{level}.parquet"


def measurement_batch(
    level: str, geocodes: np.ndarray, query: str, noisy: np.ndarray, variance: Fraction
) -> pa.RecordBatch:
    """Rows for noisy answers (n_units x n_cells) of one query on the given geounits."""
    n_units, n_cells = noisy.shape
    if variance.numerator > INT64_MAX or variance.denominator > INT64_MAX:
        raise OverflowError(f"variance {variance} of {level}/{query} does not fit int64 num/den")
    n = n_units * n_cells
    dictionary = pa.array(np.asarray(geocodes, dtype=str).tolist(), pa.string())

    def constant(value: str) -> pa.DictionaryArray:
        return pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, np.int32)), pa.array([value]))

    return pa.record_batch([
        constant(level),
        pa.DictionaryArray.from_arrays(pa.array(np.repeat(np.arange(n_units, dtype=np.int32), n_cells)), dictionary),
        constant(query),
        pa.array(np.tile(np.arange(n_cells, dtype=np.int32), n_units)),
        pa.array(noisy.reshape(-1).astype(np.int64)),
        pa.array(np.full(n, variance.numerator, dtype=np.int64)),
        pa.array(np.full(n, variance.denominator, dtype=np.int64)),
    ], schema=NMF_SCHEMA)


class LevelWriter:
    """Write one level's NMF file atomically: batches go to `<file>.partial`, renamed on close."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.tmp = self.path.with_name(self.path.name + ".partial")
        self.writer = pq.ParquetWriter(self.tmp, NMF_SCHEMA, compression="zstd")

    def write(self, batch: pa.RecordBatch) -> None:
        self.writer.write_batch(batch)

    def write_table(self, table: pa.Table) -> None:
        self.writer.write_table(table)

    def close(self) -> Path:
        self.writer.close()
        self.tmp.replace(self.path)
        return self.path

    def abort(self) -> None:
        self.writer.close()
        self.tmp.unlink(missing_ok=True)


def write_part(path: Path, batch: pa.RecordBatch) -> None:
    """Commit one chunk of noisy answers: written and synced under `.partial`, then renamed."""
    tmp = path.with_name(path.name + ".partial")
    with open(tmp, "wb") as f:
        pq.write_table(pa.Table.from_batches([batch]), f, compression="zstd")
        f.flush()
        os.fsync(f.fileno())
    tmp.replace(path)


def read_part(path: Path) -> pa.Table:
    return pq.read_table(path, schema=NMF_SCHEMA)


def _query_of_groups(parquet: pq.ParquetFile, path: Path) -> list[str]:
    group_query = []  # each row group holds rows of one query (batches are written per query)
    for g in range(parquet.num_row_groups):
        q = parquet.read_row_group(g, columns=["query"])["query"].unify_dictionaries().combine_chunks()
        names_in_group = set(np.asarray(q.dictionary.to_pylist(), dtype=object)[np.unique(q.indices.to_numpy())])
        if len(names_in_group) != 1:
            raise ValueError(f"{path}: row group {g} mixes queries")
        group_query.append(names_in_group.pop())
    return group_query


class LevelReader:
    """Noisy answers of a range of geounits of one NMF level file, reading only the row groups needed.

    Peak memory is that of the range (the children of a batch of parents), not of the level.
    """

    def __init__(self, path: Path, geocodes: np.ndarray):
        self.path = Path(path)
        self.geocodes = np.asarray(geocodes, dtype=str)
        self.file = pq.ParquetFile(self.path)
        n_units = len(self.geocodes)
        self.queries: dict[str, tuple[list[int], np.ndarray, int]] = {}  # name -> (groups, first rows, width)
        rows = [self.file.metadata.row_group(g).num_rows for g in range(self.file.num_row_groups)]
        order: list[str] = []
        for g, name in enumerate(_query_of_groups(self.file, self.path)):
            if order and order[-1] != name and name in self.queries:
                raise ValueError(f"{self.path}: query {name!r} is not stored contiguously")
            if name not in self.queries:
                order.append(name)
                self.queries[name] = ([], [], 0)
            self.queries[name][0].append(g)
        for name in order:
            groups = self.queries[name][0]
            sizes = np.array([rows[g] for g in groups], dtype=np.int64)
            total = int(sizes.sum())
            if n_units == 0 or total % n_units:
                raise ValueError(f"{self.path}: query {name!r} has {total} rows, not a whole number per geounit "
                                 f"for the expected {n_units} geounits")
            self.queries[name] = (groups, np.r_[0, np.cumsum(sizes)], total // n_units)

    def read(self, lo: int, hi: int) -> dict[str, tuple[np.ndarray, Fraction]]:
        """Query -> (noisy answers (hi - lo) x n_cells, exact variance) for geounits lo..hi-1."""
        result = {}
        for name, (groups, starts, width) in self.queries.items():
            first, last = lo * width, hi * width
            g0 = int(np.searchsorted(starts, first, side="right")) - 1
            g1 = int(np.searchsorted(starts, last, side="left"))
            part = self.file.read_row_groups(groups[g0:g1],
                                             columns=["geocode", "cell", "noisy", "variance_num", "variance_den"])
            part = part.slice(first - int(starts[g0]), last - first)
            n = hi - lo
            cells = part["cell"].to_numpy().reshape(n, width)
            if not (cells == np.arange(width)).all():
                raise ValueError(f"{self.path}: query {name!r} rows are not geounit-major, cell-minor")
            units = part["geocode"].unify_dictionaries().combine_chunks()
            unit_index = units.indices.to_numpy(zero_copy_only=False).reshape(n, width)
            if not (unit_index == unit_index[:, :1]).all():
                raise ValueError(f"{self.path}: query {name!r} mixes geounits within a row block")
            found = np.asarray(units.dictionary.to_pylist(), dtype=str)[unit_index[:, 0]] if n else np.array([], str)
            if not np.array_equal(found, self.geocodes[lo:hi]):
                raise ValueError(f"{self.path}: query {name!r} does not cover the expected geounits in order")
            num, den = part["variance_num"].to_numpy(), part["variance_den"].to_numpy()
            if n and (num.min() != num.max() or den.min() != den.max()):
                raise ValueError(f"{self.path}: query {name!r} has more than one variance")
            variance = Fraction(int(num[0]), int(den[0])) if n else Fraction(1)
            result[name] = (part["noisy"].to_numpy().reshape(n, width), variance)
        return result


def read_level(path: Path, geocodes: np.ndarray | None = None) -> dict[str, tuple[np.ndarray, Fraction]]:
    """Query -> (noisy answers (n_units x n_cells) int64, exact variance) for one NMF level file.

    If `geocodes` is given, the file's geounits must be exactly these, in this order. Works on
    the dictionary indices and contiguous slices, never on a per-row string array (a block-level
    file of a state has tens of millions of rows).
    """
    parquet = pq.ParquetFile(path)
    group_query = []  # each row group holds rows of one query (batches are written per query)
    for g in range(parquet.num_row_groups):
        q = parquet.read_row_group(g, columns=["query"])["query"].unify_dictionaries().combine_chunks()
        names_in_group = set(np.asarray(q.dictionary.to_pylist(), dtype=object)[np.unique(q.indices.to_numpy())])
        if len(names_in_group) != 1:
            raise ValueError(f"{path}: row group {g} mixes queries")
        group_query.append(names_in_group.pop())
    runs: list[tuple[str, list[int]]] = []
    for g, name in enumerate(group_query):
        if runs and runs[-1][0] == name:
            runs[-1][1].append(g)
        else:
            runs.append((name, [g]))
    result: dict[str, tuple[np.ndarray, Fraction]] = {}
    for name, groups in runs:
        if name in result:
            raise ValueError(f"{path}: query {name!r} is not stored contiguously")
        part = parquet.read_row_groups(groups, columns=["geocode", "cell", "noisy", "variance_num", "variance_den"])
        cells = part["cell"].to_numpy()
        n_cells = int(cells.max()) + 1
        if len(cells) % n_cells:
            raise ValueError(f"{path}: query {name!r} rows do not form whole geounits")
        n_units = len(cells) // n_cells
        if not (cells.reshape(n_units, n_cells) == np.arange(n_cells)).all():
            raise ValueError(f"{path}: query {name!r} rows are not geounit-major, cell-minor")
        units = part["geocode"].unify_dictionaries().combine_chunks()
        unit_index = units.indices.to_numpy(zero_copy_only=False).reshape(n_units, n_cells)
        if not (unit_index == unit_index[:, :1]).all():
            raise ValueError(f"{path}: query {name!r} mixes geounits within a row block")
        order_units = np.asarray(units.dictionary.to_pylist(), dtype=str)[unit_index[:, 0]]
        if geocodes is not None and not np.array_equal(order_units, np.asarray(geocodes, dtype=str)):
            raise ValueError(f"{path}: query {name!r} does not cover the expected geounits in order")
        num, den = part["variance_num"].to_numpy(), part["variance_den"].to_numpy()
        if num.min() != num.max() or den.min() != den.max():
            raise ValueError(f"{path}: query {name!r} has more than one variance")
        result[name] = (part["noisy"].to_numpy().reshape(n_units, n_cells), Fraction(int(num[0]), int(den[0])))
        del part, cells, unit_index, num, den
    return result
