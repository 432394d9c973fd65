"""Noisy measurement file (NMF): every noisy answer with its level, geocode, query, cell and
exact variance, as Parquet, so others can re-run or replace the post-processing.

Layout: `nmf/<release>/<level>.parquet`, one file per level (a partitioned run: the levels
below the state as `nmf/<release>/<level>/<state>.parquet`, one file per state; das.frame.rundir.nmf_level_files);
each row group holds whole geounits
of one query (at most ROW_GROUP_ROWS rows unless one geounit has more), with a geocode dictionary
of just those geounits, so a range read decodes little beyond its range; within a query, rows run
geounit-major then cell. Columns: level, geocode, query (dictionary strings), cell (int32), noisy
(int64), variance_num / variance_den (int64, the exact rational variance sigma^2). Row-group
statistics are written for query only (readers find each query's row groups from them).
A file is written under a temporary name and renamed when complete, so a present file is a whole
level. While a level is being measured, each (query, chunk) is committed on its own to
`<level>.parquet.parts/` (the noisy answers in the narrowest integer type that holds them exactly,
zstd; see das/topdown/measure.py) and the level file is assembled from those parts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from das.core import atomic

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
ROW_GROUP_ROWS = 1 << 17  # rows per row group: what a range read decodes beyond its range, per query and end
STATISTICS = ["query"]  # readers find a query's row groups by them; the rest cost a third of the writing, unread


@dataclass(frozen=True)
class NoisyAnswers:
    """One query's noisy answers at one level: a row per geounit, a column per cell of the query, every one
    with noise of the same exact variance. What the NMF holds of that query and those geounits, what
    measurement writes and what the per-parent problem is built from.

    >>> a = NoisyAnswers("total", "county", np.array(["001", "003", "005"]), np.array([[4], [9], [2]]), Fraction(5, 2))
    >>> b = a.rows(1, 3); b.geocodes.tolist(), b.answers.tolist(), b.variance
    (['003', '005'], [[9], [2]], Fraction(5, 2))
    """

    query: str
    level: str
    geocodes: np.ndarray  # (n_units,) the geounits, in row order
    answers: np.ndarray   # (n_units, n_cells) int64; the privacy audit's repeated draws add leading axes (trials)
    variance: Fraction    # sigma^2 of every answer's noise, exact

    @property
    def weight(self) -> float:
        """1 / variance as a float: the least-squares weight, the one float view of the variance."""
        return 1.0 / float(self.variance)

    def rows(self, lo: int, hi: int) -> NoisyAnswers:
        """The answers of geounits lo..hi-1 (one parent's children of a batch)."""
        return NoisyAnswers(self.query, self.level, self.geocodes[lo:hi], self.answers[..., lo:hi, :], self.variance)

    def take(self, which: np.ndarray) -> NoisyAnswers:
        """The answers of the geounits `which` picks (a boolean mask or indices), in that order."""
        return NoisyAnswers(self.query, self.level, self.geocodes[which], self.answers[..., which, :], self.variance)

    def cells(self, keep: np.ndarray) -> NoisyAnswers:
        """Only the cells `keep` picks of every geounit (a parent's problem drops those none of its cells reach)."""
        return NoisyAnswers(self.query, self.level, self.geocodes, self.answers[..., keep], self.variance)

    @staticmethod
    def stacked(parts: Sequence[NoisyAnswers]) -> NoisyAnswers:
        """The geounits of several reads of one query and level, one after the other."""
        first = parts[0]
        if any((p.query, p.level, p.variance) != (first.query, first.level, first.variance) for p in parts):
            raise ValueError(f"{first.level}/{first.query}: answers of other queries, levels or variances cannot be stacked")
        return NoisyAnswers(first.query, first.level, np.concatenate([p.geocodes for p in parts]),
                            np.concatenate([p.answers for p in parts], axis=-2), first.variance)


def measurement_batch(noisy: NoisyAnswers) -> pa.RecordBatch:
    """The NMF rows of noisy answers (n_units x n_cells) of one query on their geounits."""
    level, query, variance = noisy.level, noisy.query, noisy.variance
    n_units, n_cells = noisy.answers.shape
    if variance.numerator > INT64_MAX or variance.denominator > INT64_MAX:
        raise OverflowError(f"variance {variance} of {level}/{query} does not fit int64 num/den")
    n = n_units * n_cells
    dictionary = pa.array(np.asarray(noisy.geocodes, dtype=str).tolist(), pa.string())

    def constant(value: str) -> pa.DictionaryArray:
        return pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, np.int32)), pa.array([value]))

    return pa.record_batch([
        constant(level),
        pa.DictionaryArray.from_arrays(pa.array(np.repeat(np.arange(n_units, dtype=np.int32), n_cells)), dictionary),
        constant(query),
        pa.array(np.tile(np.arange(n_cells, dtype=np.int32), n_units)),
        pa.array(np.ascontiguousarray(noisy.answers, dtype=np.int64).reshape(-1)),  # no copy of int64 rows
        pa.array(np.full(n, variance.numerator, dtype=np.int64)),
        pa.array(np.full(n, variance.denominator, dtype=np.int64)),
    ], schema=NMF_SCHEMA)


class LevelWriter:
    """Write one level's NMF file atomically: batches go to `<file>.partial`, renamed on close."""

    def __init__(self, path: Path, metadata: dict | None = None):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.tmp = atomic.partial(self.path)
        schema = NMF_SCHEMA.with_metadata(metadata) if metadata else NMF_SCHEMA
        self.writer = pq.ParquetWriter(self.tmp, schema, compression="zstd", write_statistics=STATISTICS)

    def write(self, batch: pa.RecordBatch) -> None:
        self.writer.write_batch(batch)

    def write_answers(self, noisy: NoisyAnswers) -> None:
        """Noisy answers (n_units x n_cells) of one query on their geounits, in row groups of whole
        geounits (at most ROW_GROUP_ROWS rows each, or one geounit), each with its own geocodes."""
        units = max(1, ROW_GROUP_ROWS // max(1, noisy.answers.shape[1]))
        for start in range(0, max(1, len(noisy.geocodes)), units):
            batch = measurement_batch(noisy.rows(start, start + units))
            self.writer.write_batch(batch, row_group_size=max(1, batch.num_rows))  # one row group

    def close(self) -> Path:
        self.writer.close()
        self.tmp.replace(self.path)
        return self.path

    def abort(self) -> None:
        self.writer.close()
        self.tmp.unlink(missing_ok=True)


PART_CODEC = "zstd"
PART_TYPES = (np.int8, np.int16, np.int32)  # narrower types a part may be stored in (int64 otherwise)


def _narrowest(values: np.ndarray) -> type:
    if values.size:
        low, high = int(values.min()), int(values.max())
        for kind in PART_TYPES:
            info = np.iinfo(kind)
            if info.min <= low and high <= info.max:
                return kind
    return np.int64


def write_part(path: Path, noisy: np.ndarray) -> None:
    """Commit one chunk of noisy answers (n_units x n_cells int64): stored exactly in the narrowest
    integer type that holds every answer, zstd-compressed, synced under `.partial`, then renamed.
    The other NMF columns follow from the chunk's place in the plan.

    Header: int64 (n_units, n_cells) for int64 data; for a narrower type, int64 (-itemsize,
    n_units, n_cells) (a shape is never negative, so both read back).
    """
    noisy = np.ascontiguousarray(noisy, dtype=np.int64)
    kind = _narrowest(noisy)
    stored = noisy if kind is np.int64 else noisy.astype(kind)
    marker = [] if kind is np.int64 else [-np.dtype(kind).itemsize]
    header = np.asarray([*marker, *noisy.shape], dtype=np.int64).tobytes()
    body = pa.Codec(PART_CODEC, compression_level=1).compress(stored.tobytes(), asbytes=True)
    atomic.write_bytes(path, header + body, sync=True)


def read_part(path: Path) -> np.ndarray:
    """The int64 (n_units x n_cells) noisy answers of a part written by `write_part`."""
    data = Path(path).read_bytes()
    first = int(np.frombuffer(data[:8], dtype=np.int64)[0])
    itemsize, at = (8, 0) if first >= 0 else (-first, 8)
    kind = {8: np.int64, **{np.dtype(k).itemsize: k for k in PART_TYPES}}[itemsize]
    shape = tuple(int(x) for x in np.frombuffer(data[at:at + 16], dtype=np.int64))
    raw = pa.Codec(PART_CODEC).decompress(data[at + 16:], decompressed_size=itemsize * shape[0] * shape[1],
                                          asbytes=True)
    return np.frombuffer(raw, dtype=kind).reshape(shape).astype(np.int64)


def _query_of_groups(parquet: pq.ParquetFile, path: Path) -> list[str]:
    """The query of each row group, from the column statistics when present, else from the data."""
    group_query = []  # each row group holds rows of one query (batches are written per query)
    column = parquet.schema_arrow.get_field_index("query")
    for g in range(parquet.num_row_groups):
        stats = parquet.metadata.row_group(g).column(column).statistics
        if stats is not None and stats.has_min_max and stats.min == stats.max:
            group_query.append(str(stats.min))
            continue
        q = parquet.read_row_group(g, columns=["query"])["query"].unify_dictionaries().combine_chunks()
        names_in_group = set(np.asarray(q.dictionary.to_pylist(), dtype=object)[np.unique(q.indices.to_numpy())])
        if len(names_in_group) != 1:
            raise ValueError(f"{path}: row group {g} mixes queries")
        group_query.append(names_in_group.pop())
    return group_query


def _level_of(parquet: pq.ParquetFile, path: Path) -> str:
    """The level a file's rows are of, from its first row group (a file holds one level; "" if it is empty)."""
    if parquet.num_row_groups == 0:
        return ""
    column = parquet.read_row_group(0, columns=["level"])["level"].unify_dictionaries().combine_chunks()
    names = set(np.asarray(column.dictionary.to_pylist(), dtype=object)[np.unique(column.indices.to_numpy())])
    if len(names) != 1:
        raise ValueError(f"{path}: row group 0 holds {len(names)} levels, expected one")
    return str(names.pop())


def _variance(num: np.ndarray, den: np.ndarray, path, name: str) -> Fraction:
    """The one exact variance of a query's rows (num/den columns); ValueError if they hold several."""
    if not len(num):
        return Fraction(1)
    if num.min() != num.max() or den.min() != den.max():
        raise ValueError(f"{path}: query {name!r} has more than one variance")
    return Fraction(int(num[0]), int(den[0]))


@dataclass(frozen=True)
class LevelIndex:
    """Where each query's rows sit in a level file: (name, row groups, first row of each, cells per geounit).

    Built once per level (from the file's metadata); small, so it travels with the tasks that read ranges.
    """

    path: str
    n_units: int
    queries: tuple[tuple[str, tuple[int, ...], tuple[int, ...], int], ...]
    level: str = ""


def level_index(path: Path, n_units: int) -> LevelIndex:
    parquet = pq.ParquetFile(path)
    rows = [parquet.metadata.row_group(g).num_rows for g in range(parquet.num_row_groups)]
    groups: dict[str, list[int]] = {}
    previous = None
    for g, name in enumerate(_query_of_groups(parquet, Path(path))):
        if name != previous and name in groups:
            raise ValueError(f"{path}: query {name!r} is not stored contiguously")
        groups.setdefault(name, []).append(g)
        previous = name
    queries = []
    for name, gs in groups.items():
        starts = np.r_[0, np.cumsum([rows[g] for g in gs])].astype(np.int64)
        total = int(starts[-1])
        if n_units == 0 or total % n_units:
            raise ValueError(f"{path}: query {name!r} has {total} rows, not a whole number per geounit "
                             f"for the expected {n_units} geounits")
        queries.append((name, tuple(gs), tuple(int(x) for x in starts), total // n_units))
    return LevelIndex(str(path), n_units, tuple(queries), _level_of(parquet, Path(path)))


def read_range(index: LevelIndex, lo: int, hi: int, geocodes: np.ndarray) -> dict[str, NoisyAnswers]:
    """Query -> its noisy answers ((hi - lo) x n_cells, exact variance) of geounits lo..hi-1 (whose geocodes
    must be `geocodes`), in file order, reading only the row groups that hold them."""
    parquet = pq.ParquetFile(index.path)
    geocodes = np.asarray(geocodes, dtype=str)
    n = hi - lo
    result = {}
    for name, groups, starts, width in index.queries:
        first, last = lo * width, hi * width
        g0 = int(np.searchsorted(starts, first, side="right")) - 1
        g1 = int(np.searchsorted(starts, last, side="left"))
        part = parquet.read_row_groups(list(groups[g0:g1]),
                                       columns=["geocode", "cell", "noisy", "variance_num", "variance_den"])
        part = part.slice(first - starts[g0], last - first)
        cells = part["cell"].to_numpy().reshape(n, width)
        if not (cells == np.arange(width)).all():
            raise ValueError(f"{index.path}: query {name!r} rows are not geounit-major, cell-minor")
        units = part["geocode"].unify_dictionaries().combine_chunks()
        unit_index = units.indices.to_numpy(zero_copy_only=False).reshape(n, width)
        if not (unit_index == unit_index[:, :1]).all():
            raise ValueError(f"{index.path}: query {name!r} mixes geounits within a row block")
        found = np.asarray(units.dictionary.to_pylist(), dtype=str)[unit_index[:, 0]] if n else geocodes[:0]
        if not np.array_equal(found, geocodes):
            raise ValueError(f"{index.path}: query {name!r} does not cover the expected geounits in order")
        variance = _variance(part["variance_num"].to_numpy(), part["variance_den"].to_numpy(), index.path, name)
        result[name] = NoisyAnswers(name, index.level, geocodes, part["noisy"].to_numpy().reshape(n, width), variance)
    return result


class LevelReader:
    """Noisy answers of ranges of geounits of one NMF level file (`read_range` over a `level_index`).

    Peak memory is that of the range (the children of a batch of parents), not of the level.
    """

    def __init__(self, path: Path, geocodes: np.ndarray):
        self.geocodes = np.asarray(geocodes, dtype=str)
        self.index = level_index(path, len(self.geocodes))

    def read(self, lo: int, hi: int) -> dict[str, NoisyAnswers]:
        return read_range(self.index, lo, hi, self.geocodes[lo:hi])


def read_level(path: Path, geocodes: np.ndarray | None = None) -> dict[str, NoisyAnswers]:
    """Query -> its noisy answers (n_units x n_cells int64, exact variance) in one NMF level file, in file order.

    If `geocodes` is given, the file's geounits must be exactly these, in this order. Works on
    the dictionary indices and contiguous slices, never on a per-row string array (a block-level
    file of a state has tens of millions of rows).
    """
    parquet = pq.ParquetFile(path)
    level = _level_of(parquet, Path(path))
    group_query = _query_of_groups(parquet, Path(path))
    runs: list[tuple[str, list[int]]] = []
    for g, name in enumerate(group_query):
        if runs and runs[-1][0] == name:
            runs[-1][1].append(g)
        else:
            runs.append((name, [g]))
    result: dict[str, NoisyAnswers] = {}
    expected = None if geocodes is None else np.asarray(geocodes, dtype=str)
    shared = expected
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
        if expected is not None and not np.array_equal(order_units, expected):
            raise ValueError(f"{path}: query {name!r} does not cover the expected geounits in order")
        if shared is not None and np.array_equal(order_units, shared):
            order_units = shared  # one geocode array for every query of the same geounits
        shared = order_units
        variance = _variance(part["variance_num"].to_numpy(), part["variance_den"].to_numpy(), path, name)
        result[name] = NoisyAnswers(name, level, order_units, part["noisy"].to_numpy().reshape(n_units, n_cells),
                                    variance)
        del part, cells, unit_index
    return result
