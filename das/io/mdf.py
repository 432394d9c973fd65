"""Microdata detail file (MDF): one row per person or unit, expanded from block histograms.

Columns follow the PPMF/MDF conventions: the five geography columns, EPNUM (persons) and the
schema's attribute columns with their input codes, plus derived columns (RTYPE ...). Written as
Parquet (dictionary-encoded strings) or, optionally, in a pipe-delimited text layout.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor, wait
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import scipy.sparse as sp

from das.core import atomic
from das.model.geography import BLOCK_GROUP_COLUMN, GEOCODE_COLUMNS
from das.model.schema import Schema, load_schema

KINDS = ("persons", "units")

_STARTS = np.cumsum([0] + [width for _, width in GEOCODE_COLUMNS])
# (column, start, stop) within the 15-digit block geocode; the block group is TABBLK's first digit
GEOGRAPHY_COLUMNS = tuple((name, int(a), int(b)) for (name, _), a, b in zip(GEOCODE_COLUMNS, _STARTS, _STARTS[1:]))
GEOGRAPHY_COLUMNS = GEOGRAPHY_COLUMNS[:3] + ((BLOCK_GROUP_COLUMN, 11, 12),) + GEOGRAPHY_COLUMNS[3:]


def expand(histograms: sp.csr_matrix) -> tuple[np.ndarray, np.ndarray]:
    """Block index and cell index of every record in (n_blocks x n_cells) count histograms."""
    h = histograms.tocsr()
    h.sum_duplicates()
    counts = h.data.astype(np.int64)
    if (counts < 0).any():
        raise ValueError("histograms hold negative counts; cannot expand to records")
    rows = np.repeat(np.arange(h.shape[0]), np.diff(h.indptr))
    return np.repeat(rows, counts), np.repeat(h.indices.astype(np.int64), counts)


def _code_array(codes: tuple, levels: np.ndarray) -> pa.Array:
    if isinstance(codes[0], str):
        return pa.DictionaryArray.from_arrays(pa.array(levels.astype(np.int32)), pa.array(list(codes)))
    all_values = np.asarray(codes, dtype=np.int64)
    small = np.int8 if all_values.min() >= -128 and all_values.max() < 128 else np.int16  # the codes', not the data's
    return pa.array(all_values[levels].astype(small))


def geography_arrays(blocks: np.ndarray, block_index: np.ndarray) -> dict[str, pa.Array]:
    """The five geography columns, dictionary-encoded over the blocks actually present."""
    present, inverse = np.unique(block_index, return_inverse=True)
    columns = {}
    for name, start, stop in GEOGRAPHY_COLUMNS:
        parts = pd.Series(blocks[present], dtype="string").str.slice(start, stop).to_numpy(dtype=str)
        uniq, part_index = np.unique(parts, return_inverse=True)
        columns[name] = pa.DictionaryArray.from_arrays(
            pa.array(part_index[inverse].astype(np.int32)), pa.array(uniq.tolist(), pa.string())
        )
    return columns


def records_table(
    schema: Schema, blocks: np.ndarray, block_index: np.ndarray, cells: np.ndarray, *,
    with_epnum: bool = True, first: int = 1,
) -> pa.Table:
    """Arrow table of records (block, cell) in the schema's input columns (EPNUM from `first`)."""
    columns = geography_arrays(blocks, block_index)
    if with_epnum:
        columns["EPNUM"] = pa.array(np.arange(first, first + len(cells), dtype=np.int64))
    levels = schema.cell_levels(cells)
    for column, attribute, mapping in schema.derived:
        base = levels[schema.names.index(attribute)]
        columns[column] = _code_array(tuple(mapping), base)
    for a, lv in zip(schema.attributes, levels):
        columns[a.column] = _code_array(a.codes, np.asarray(lv))
    return pa.table(columns)


def person_mdf(schema: Schema, blocks: np.ndarray, histograms: sp.csr_matrix, *, first: int = 1) -> pa.Table:
    block_index, cells = expand(histograms)
    return records_table(schema, blocks, block_index, cells, first=first)


def unit_mdf(
    schema: Schema, blocks: np.ndarray, histograms: sp.csr_matrix | None, gq_facilities: np.ndarray, *,
    housing_units: np.ndarray | None = None,
) -> pa.Table:
    """Every housing unit, then every GQ facility (an invariant), block by block.

    The housing units are the unit histograms' records; in a release without units (`histograms` None)
    they are the invariant's, one record per housing unit of `housing_units` (per block) with HH_STATUS 0:
    its count is published exactly (docs/privacy.md), its occupancy is not released. So the units MDF of
    every TopDown release lists the block universe and its invariants, which the validator reads.
    """
    if histograms is not None:
        unit_blocks, cells = expand(histograms)
        housing = records_table(schema, blocks, unit_blocks, cells, with_epnum=False)
    elif housing_units is not None:
        unit_blocks = np.repeat(np.arange(len(blocks)), np.asarray(housing_units, dtype=np.int64))
        housing = _invariant_records(blocks, unit_blocks, rtype=2, gq_types=np.zeros(len(unit_blocks), np.int64))
    else:
        raise ValueError("a units MDF without a units release lists the invariant's housing units: give housing_units")
    rows, types = np.nonzero(gq_facilities)
    counts = gq_facilities[rows, types].astype(np.int64)
    gq_blocks = np.repeat(rows, counts)
    gq = _invariant_records(blocks, gq_blocks, rtype=4, gq_types=np.repeat(types + 1, counts))
    table = pa.concat_tables([housing, gq.select(housing.column_names).cast(housing.schema)]).combine_chunks()
    order = np.lexsort([table["RTYPE"].to_numpy(), np.concatenate([unit_blocks, gq_blocks])])
    return table.take(order)


def _invariant_records(blocks: np.ndarray, block_index: np.ndarray, *, rtype: int, gq_types: np.ndarray) -> pa.Table:
    """Units MDF records of an invariant (housing units or GQ facilities): no occupancy, HH_STATUS 0."""
    columns = geography_arrays(blocks, block_index)
    columns["RTYPE"] = pa.array(np.full(len(block_index), rtype, dtype=np.int8))
    columns["GQTYPE_PL"] = pa.array(np.asarray(gq_types).astype(np.int8))
    columns["HH_STATUS"] = pa.array(np.zeros(len(block_index), dtype=np.int8))
    return pa.table(columns)


def release_mdf(kind: str, schemas: dict[str, Schema], blocks: np.ndarray, solved: dict[str, sp.csr_matrix], *,
                gq_facilities: np.ndarray, housing_units: np.ndarray | None = None) -> pa.Table:
    """The MDF of `kind` ("persons" or "units") from a run's solved block histograms (keyed by release);
    without a units release the units MDF lists the invariants alone: `housing_units` and `gq_facilities`."""
    if kind == "persons":
        return person_mdf(schemas["persons"], blocks, solved["persons"])
    return unit_mdf(schemas.get("units") or load_schema("h1_units"), blocks, solved.get("units"), gq_facilities,
                    housing_units=housing_units)


SLICE_RECORDS = 1 << 20  # records an MDF is built at a time (a block range): memory follows this, not the state


def block_slices(records: np.ndarray, limit: int = SLICE_RECORDS) -> list[tuple[int, int]]:
    """Consecutive block ranges (lo, hi) holding at most `limit` records each (`records`: per block; a block
    with more is a range of its own), covering every block: the unit in which an MDF is built and written."""
    ends = np.cumsum(np.asarray(records, dtype=np.int64))
    cuts, lo, done = [], 0, 0
    while lo < len(ends):
        hi = max(lo + 1, int(np.searchsorted(ends, done + limit, side="right")))
        cuts.append((lo, hi))
        done, lo = int(ends[hi - 1]), hi
    return cuts or [(0, 0)]


def mdf_slices(kind: str, schemas: dict[str, Schema], blocks: np.ndarray, solved: dict[str, sp.csr_matrix], *,
               gq_facilities: np.ndarray, housing_units: np.ndarray | None = None,
               limit: int = SLICE_RECORDS) -> Iterator[pa.Table]:
    """`release_mdf`'s records, a block range of at most `limit` records at a time (EPNUM running on over
    them): the same rows in the same order, so a writer holds one slice, not the state's records."""
    if kind == "persons":
        h = solved["persons"].tocsr()
        per_block = np.asarray(h.sum(axis=1)).ravel()
    else:
        units = solved.get("units")
        housing = (np.asarray(units.sum(axis=1)).ravel() if units is not None
                   else np.asarray(housing_units if housing_units is not None else np.zeros(len(blocks)), np.int64))
        per_block = housing + np.asarray(gq_facilities, np.int64).sum(axis=1)
    first = 1
    for lo, hi in block_slices(per_block, limit):
        if kind == "persons":
            table = person_mdf(schemas["persons"], blocks[lo:hi], h[lo:hi], first=first)
            first += table.num_rows
        else:
            table = release_mdf(kind, schemas, blocks[lo:hi], {k: v[lo:hi] for k, v in solved.items()},
                                gq_facilities=gq_facilities[lo:hi],
                                housing_units=None if housing_units is None else housing_units[lo:hi])
        yield table


STREAM_ROWS = 1 << 17  # records read and written at a time when an MDF is copied (a few MB, whatever the state)


def row_groups(path: Path, rows: int = STREAM_ROWS) -> Iterator[pa.Table]:
    """A Parquet file's records `rows` at a time: memory holds one such slice, not the file (nor a
    whole row group: a state's part is one row group of up to a million records)."""
    for batch in pq.ParquetFile(path).iter_batches(rows):
        yield pa.Table.from_batches([batch])


def plain(table: pa.Table) -> pa.Table:
    """Dictionary-encoded columns decoded to their values (the text layout writes values)."""
    return pa.table({n: c.cast(c.type.value_type) if pa.types.is_dictionary(c.type) else c
                     for n, c in zip(table.column_names, table.columns)})


def write_batches(tables: Iterable[pa.Table], schema: pa.Schema, path: Path, *, layout: str = "parquet",
                  metadata: dict | None = None, compression: str = "zstd", whole: bool = False) -> Path:
    """Write `tables` (all of `schema`) one after another as one file, holding one at a time; to a
    temporary name then renamed, so a partial file never looks complete. Parquet files carry
    `metadata` (privacy mode, certificate, spec digest, code version: das/frame/bundle.py); with `whole`,
    each table is one row group however long (otherwise row groups of at most STREAM_ROWS records, so
    that a reader, or the assembly of a partitioned run, holds a few MB at a time)."""
    if layout not in ("parquet", "pipe"):
        raise ValueError(f"unknown MDF layout {layout!r}: expected 'parquet' or 'pipe'")
    path = Path(path)
    with atomic.replacing(path) as tmp:
        if layout == "parquet":
            schema = schema.with_metadata({**(schema.metadata or {}), **(metadata or {})})
            with pq.ParquetWriter(tmp, schema, compression=compression) as writer:
                for table in tables:
                    writer.write_table(table, row_group_size=max(table.num_rows, 1) if whole else STREAM_ROWS)
        else:
            plain_schema = plain(schema.empty_table()).schema
            options = pacsv.WriteOptions(delimiter="|", quoting_style="none", quoting_header="none")
            with pacsv.CSVWriter(tmp, plain_schema, write_options=options) as writer:
                for table in tables:
                    writer.write_table(plain(table))
    return path


def side_by_side(fn: Callable, items: Iterable) -> list:
    """fn over items in threads of this process (at most its CPUs), results in order: files written side by side
    (Arrow reads, encodes and writes outside the GIL). Every call ends before the first error (in the items'
    order) is raised, so no file is still being written after it."""
    items = list(items)
    if len(items) <= 1:
        return [fn(item) for item in items]
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    with ThreadPoolExecutor(min(len(items), cpus)) as threads:
        futures = [threads.submit(fn, item) for item in items]
        wait(futures)
    return [future.result() for future in futures]


def write_slices(slices: Iterator[pa.Table], path: Path, **options) -> Path:
    """`write_batches` of slices built one at a time (the first gives the schema): the one way das writes a
    file of Arrow tables, whole or in a state's part, MDF or table (`options`: write_batches')."""
    head = next(slices)
    return write_batches(itertools.chain([head], slices), head.schema, path, **options)


def pipe_copy(parquet_path: Path, path: Path) -> Path:
    """The pipe-delimited layout of an MDF Parquet file, streamed row group by row group."""
    return write_batches(row_groups(parquet_path), pq.read_schema(parquet_path), path, layout="pipe")


def write_table(table: pa.Table, path: Path, layout: str = "parquet", metadata: dict | None = None) -> Path:
    """One table as a file (`write_batches`): Parquet (zstd) or the pipe-delimited layout."""
    return write_batches([table], table.schema, path, layout=layout, metadata=metadata)

