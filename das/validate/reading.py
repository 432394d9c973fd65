"""The validator's reads of a release's Parquet files: their columns, a table's rows of a geocode range, batch by
batch, one state's records of an MDF (with each record's row in the file), the states an MDF holds; and the
records' geocodes and attribute levels, worked out on the distinct values (a state's records share few of
them).

Every read says which file could not be read as a ValidationError (exit code 2), never a traceback.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from das.core.errors import ValidationError
from das.model.geography import GEOCODE_COLUMNS
from das.model.schema import Schema

GEO = [name for name, _ in GEOCODE_COLUMNS]
Counties = tuple[str | None, str | None]  # TABBLKCOU from low to before high (None: unbounded)
ANY: Counties = (None, None)


def unreadable(path: Path, e: Exception) -> ValidationError:
    return ValidationError(f"{path} is not a readable Parquet file ({str(e).splitlines()[0][:200]})")


def parquet_frame(path: Path, why: str) -> pd.DataFrame:
    """A Parquet file of the release as a frame, or ValidationError naming it: missing (`why` it should be there), or
    not readable."""
    if not path.is_file():
        raise ValidationError(f"{path} is missing ({why})")
    try:
        return pq.read_table(path).to_pandas()
    except Exception as e:
        raise unreadable(path, e) from None


def columns(path: Path) -> list[str]:
    """The column names of a Parquet file of the release, or ValidationError naming it."""
    if not path.is_file():
        raise ValidationError(f"{path} is missing")
    try:
        return pq.read_schema(path).names
    except Exception as e:
        raise unreadable(path, e) from None


def read_geocodes(path: Path, low: str | None, high: str | None, levels: list[str]) -> pd.DataFrame:
    """The rows of a table of the release at `levels` whose geocode is in [low, high) (a state's or a run of
    counties' rows below it; None: any geocode): row groups whose geocode statistics exclude them are
    skipped, the others read batch by batch, so memory follows the rows kept, not the table."""
    if not path.is_file():
        raise ValidationError(f"{path} is missing")
    try:
        parquet = pq.ParquetFile(path)
        column = parquet.schema_arrow.get_field_index("geocode")
        kept, wanted = [], pa.array(levels, pa.string())
        for g in range(parquet.metadata.num_row_groups):
            stats = parquet.metadata.row_group(g).column(column).statistics
            if low is not None and stats is not None and stats.has_min_max and (str(stats.max) < low
                                                                                 or str(stats.min) >= high):
                continue
            for batch in parquet.iter_batches(batch_size=1 << 16, row_groups=[g]):
                mine = pc.is_in(batch.column("level").cast(pa.string()), wanted)
                if low is not None:
                    geocode = batch.column("geocode").cast(pa.string())
                    mine = pc.and_(mine, pc.and_(pc.greater_equal(geocode, low), pc.less(geocode, high)))
                kept.append(batch.filter(pc.fill_null(mine, False)))
        table = pa.Table.from_batches(kept, schema=parquet.schema_arrow)
    except Exception as e:
        raise unreadable(path, e) from None
    return table.to_pandas()


def _state_groups(parquet: pq.ParquetFile, state: str | None, counties: Counties = ANY) -> list[tuple[int, int]]:
    """(row group, its first row) of every row group that may hold the state's records of the counties
    (TABBLKST and TABBLKCOU statistics; a row group of several states is kept)."""
    meta, groups, first = parquet.metadata, [], 0
    column = parquet.schema_arrow.get_field_index("TABBLKST")
    county = parquet.schema_arrow.get_field_index("TABBLKCOU")
    for g in range(meta.num_row_groups):
        stats = meta.row_group(g).column(column).statistics
        if state is None or stats is None or not stats.has_min_max or str(stats.min) <= state <= str(stats.max):
            if stats is None or counties == ANY or str(stats.min) != str(stats.max) or _meets(
                    meta.row_group(g).column(county).statistics, counties):
                groups.append((g, first))
        first += meta.row_group(g).num_rows
    return groups


def _meets(stats, counties: Counties) -> bool:
    """Whether a row group's TABBLKCOU statistics may hold a county of [low, high)."""
    if stats is None or not stats.has_min_max:
        return True
    low, high = counties
    return (low is None or str(stats.max) >= low) and (high is None or str(stats.min) < high)


def county_filters(state: str, counties: Counties = ANY) -> list[tuple]:
    """Parquet filters of a state's records of the counties [low, high) (None: unbounded)."""
    low, high = counties
    return ([("TABBLKST", "==", state)] + ([("TABBLKCOU", ">=", low)] if low is not None else [])
            + ([("TABBLKCOU", "<", high)] if high is not None else []))


def read_state(path: Path, state: str, names: list[str] | None = None, *,
               counties: Counties = ANY) -> tuple[pd.DataFrame, np.ndarray]:
    """One state's records of an MDF file (of its counties [low, high): a shard, das.validate.shards), with
    their `geocode`, and each one's row in the file (0-based). A filtered read (row groups whose TABBLKST
    and TABBLKCOU statistics exclude them are skipped, the rest are filtered batch by batch); the rows come
    from the TABBLKST (and TABBLKCOU) columns of the row groups read."""
    if not path.is_file():
        raise ValidationError(f"{path} is missing")
    try:
        parquet = pq.ParquetFile(path)
        rows, geo = [], ["TABBLKST"] if counties == ANY else ["TABBLKST", "TABBLKCOU"]
        for g, first in _state_groups(parquet, state, counties):
            group = parquet.read_row_group(g, columns=geo)
            mine = [_equal(chunk, state) for chunk in group.column(0).chunks]
            mine = np.concatenate(mine) if mine else np.zeros(0, bool)
            if counties != ANY:
                mine &= np.concatenate([_between(chunk, counties) for chunk in group.column(1).chunks] or [mine])
            rows.append(first + np.flatnonzero(mine))
        table = pq.read_table(path, columns=names, filters=county_filters(state, counties))
    except Exception as e:
        raise unreadable(path, e) from None
    rows = np.concatenate(rows) if rows else np.zeros(0, np.int64)
    if len(rows) != table.num_rows:
        raise ValidationError(f"{path}: {table.num_rows} records of state {state} read, {len(rows)} counted")
    frame = table.to_pandas()
    frame["geocode"] = geocode(frame)
    return frame, rows


def _between(chunk: pa.Array, counties: Counties) -> np.ndarray:
    """low <= chunk < high as a numpy mask (None: unbounded; a missing value is in no range), comparing only
    the dictionary of a dictionary-encoded chunk."""
    low, high = counties
    if pa.types.is_dictionary(chunk.type):
        values = np.asarray(chunk.dictionary.cast(pa.string()).to_pylist(), dtype=object)
        lookup = np.array([(low is None or v >= low) and (high is None or v < high) for v in values], dtype=bool)
        return np.r_[lookup, False][chunk.indices.fill_null(len(lookup)).to_numpy(zero_copy_only=False)]
    text = chunk.cast(pa.string())
    mask = pc.is_valid(text)
    if low is not None:
        mask = pc.and_(mask, pc.greater_equal(text, low))
    if high is not None:
        mask = pc.and_(mask, pc.less(text, high))
    return pc.fill_null(mask, False).to_numpy(zero_copy_only=False)


def _equal(chunk: pa.Array, value: str) -> np.ndarray:
    """chunk == value as a numpy mask, comparing only the dictionary of a dictionary-encoded chunk."""
    if pa.types.is_dictionary(chunk.type):
        lookup = np.asarray(chunk.dictionary.cast(pa.string()).to_pylist(), dtype=object) == value
        return np.r_[lookup, False][chunk.indices.fill_null(len(lookup)).to_numpy(zero_copy_only=False)]
    return pc.fill_null(pc.equal(chunk.cast(pa.string()), value), False).to_numpy(zero_copy_only=False)


def states_in(path: Path) -> list[str]:
    """The states (TABBLKST) of an MDF file: from the row-group statistics where a row group holds one
    state, else from reading that row group's TABBLKST, batch by batch."""
    try:
        parquet = pq.ParquetFile(path)
        column = parquet.schema_arrow.get_field_index("TABBLKST")
        states: set[str] = set()
        for g in range(parquet.metadata.num_row_groups):
            stats = parquet.metadata.row_group(g).column(column).statistics
            if stats is not None and stats.has_min_max and stats.min == stats.max:
                states.add(str(stats.min))
            else:
                for batch in parquet.iter_batches(batch_size=1 << 20, row_groups=[g], columns=["TABBLKST"]):
                    states.update(str(v) for v in pc.unique(batch.column(0).cast(pa.string())).to_pylist())
    except Exception as e:
        raise unreadable(path, e) from None
    return sorted(states)


# ---------------------------------------------------------------------------------------------
# Geocodes and levels, on the distinct values


def distinct(column: pd.Series) -> tuple[np.ndarray, pd.Index]:
    """(each row's code, the values coded) as pd.factorize(column, use_na_sentinel=False) gives them (a missing value
    coded too), from a categorical's own codes where it is one (a Parquet dictionary column, as das writes the
    MDF): no hash of every row. The values may then hold some that no row has."""
    if not isinstance(column.dtype, pd.CategoricalDtype):
        return pd.factorize(column, use_na_sentinel=False)
    codes, categories = column.cat.codes.to_numpy(), column.cat.categories
    if len(codes) and codes.min() < 0:  # missing: the code after the categories
        return np.where(codes < 0, len(categories), codes), pd.Index([*categories, np.nan], dtype=object)
    return codes, categories


def geocode(frame: pd.DataFrame) -> pd.Series:
    """Each record's block geocode (the first four geography columns joined), as a categorical whose
    categories are the distinct geocodes, sorted: the columns' distinct values are joined, not every row's."""
    if not len(frame):
        return pd.Series([], dtype=str)
    key, parts = np.zeros(len(frame), dtype=np.int64), []
    for c in GEO:
        codes, uniques = distinct(frame[c])
        if len(parts) and key.max(initial=0) >= (1 << 62) // max(1, len(uniques)):  # too many combinations
            texts = [frame[c].astype(str) for c in GEO]
            return pd.Series((texts[0] + texts[1] + texts[2] + texts[3]).to_numpy(dtype=str), index=frame.index,
                             dtype="category")
        key = key * len(uniques) + codes
        texts = pd.Series(uniques).astype(str)
        parts.append((texts.fillna("").to_numpy(dtype=object), texts.isna().to_numpy()))
    row_combination, combinations = pd.factorize(key)  # hashed, not a sort of every record (unordered: sorted below)
    names = np.full(len(combinations), "", dtype=object)
    missing = np.zeros(len(combinations), dtype=bool)
    for values, absent in reversed(parts):
        combinations, digit = np.divmod(combinations, len(values))
        names, missing = values[digit] + names, missing | absent[digit]
    names[missing] = "nan"  # a missing part makes the joined geocode missing: "nan" as a string, as per row
    categories, combination_category = np.unique(names.astype(str), return_inverse=True)  # joins may coincide
    return pd.Series(pd.Categorical.from_codes(combination_category[row_combination], categories=categories),
                     index=frame.index)


def present(geocodes: pd.Series) -> np.ndarray:
    """The distinct geocodes of a `geocode` column, sorted."""
    if isinstance(geocodes.dtype, pd.CategoricalDtype):
        return np.asarray(geocodes.cat.categories, dtype=str)[np.unique(geocodes.cat.codes.to_numpy())]
    return np.unique(geocodes.to_numpy(dtype=str))


def blocks_in(universe: np.ndarray, geocodes: pd.Series) -> np.ndarray:
    """np.searchsorted(universe, geocodes) of every record, searching only the distinct geocodes."""
    if isinstance(geocodes.dtype, pd.CategoricalDtype):
        where = np.searchsorted(universe, np.asarray(geocodes.cat.categories, dtype=str))
        return where[geocodes.cat.codes.to_numpy()]
    return np.searchsorted(universe, geocodes.to_numpy(dtype=str))


def decode(frame: pd.DataFrame, schema: Schema) -> pd.DataFrame:
    """Decode input/MDF code columns to attribute levels (and recode levels), by lookup of each distinct
    value; ValueError (KeyError: a column missing) naming the first code that is not one of its attribute."""
    out = {}
    for a in schema.attributes:
        col = frame[a.column]
        lookup = {str(code): i for i, code in enumerate(a.codes)}
        codes, uniques = distinct(col)
        levels = pd.Series(uniques).astype(str).map(lookup).to_numpy(dtype=float)[codes]
        if np.isnan(levels).any():
            bad = col.iloc[int(np.flatnonzero(np.isnan(levels))[0])]
            raise ValueError(f"column {a.column} holds {bad!r}, not a code of {a.name}")
        out[a.name] = levels.astype(np.int64)
    for r in schema.recodes:
        out[r.name] = np.asarray(r.mapping)[out[r.attribute]]
    return pd.DataFrame(out, copy=False)  # a column an array: not copied into one block (a second of a state's shard)
