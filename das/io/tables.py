"""Published tables (P1-P5, H1) as marginal queries of histograms, at every geographic level.

Table definitions are data (`specs/tables/*.toml`): a table is a list of schema queries, with an
optional `where` restricting the histogram first (P3/P4 count only people 18 and over). One
Parquet file per table: a row per geounit at every level, a column per answer cell.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import scipy.sparse as sp

from das.core.errors import SpecError
from das.io.mdf import write_slices
from das.model.geography import Geography
from das.model.schema import Schema, resolve_spec
from das.model.specfile import load_toml


@dataclass(frozen=True)
class TableSpec:
    """One table of a table set: its name and title, the schema it counts, its queries (the columns, in order) and
    the cells its histogram keeps first (`where`: attribute -> value)."""

    name: str
    title: str
    schema: str
    queries: tuple[str, ...]
    where: tuple[tuple[str, int], ...] = ()


TABLE_ROWS = 1 << 14  # rows of a table file's row group (and of a partitioned run's parts): P2's is 10 MB
TABLE_COMPRESSION = "snappy"  # every table file, whole, a state's part or assembled
DEFAULT_TABLES = "pl94"  # the table set of a run spec that names none ([output] tables)


def load_tables(name_or_path: str | Path = DEFAULT_TABLES) -> tuple[TableSpec, ...]:
    """The table set of a shipped name (specs/tables) or a path."""
    path = resolve_spec(name_or_path, "tables")
    return tables_from_dict(load_toml(path), source=str(path))


def tables_from_dict(spec: dict, source: str = "<dict>") -> tuple[TableSpec, ...]:
    """The tables a parsed table-set spec describes, in its order."""
    tables = []
    for name, t in spec.items():
        if not isinstance(t, dict) or "queries" not in t or "schema" not in t:
            raise SpecError(f"{source}: table {name!r} needs `schema` and `queries`")
        where = tuple((str(k), int(v)) for k, v in t.get("where", {}).items())
        tables.append(TableSpec(name, t.get("title", name), t["schema"], tuple(t["queries"]), where))
    return tuple(tables)


def column_names(schema: Schema, spec: TableSpec) -> list[str]:
    """Readable column names: "total", "hispanic=Hispanic or Latino", "votingage=..|cenrace=..."."""
    names = []
    for qname in spec.queries:
        q = schema.query(qname)
        if not q.factors:
            names.append("total")
            continue
        for idx in np.ndindex(*q.shape):
            names.append("|".join(f"{f}={schema.factor_labels(f)[i]}" for f, i in zip(q.factors, idx)))
    return names


def table_widths(tables: tuple[TableSpec, ...], schemas: dict) -> tuple[int, ...]:
    """The number of columns of each table a release with these schemas (name -> Schema, any keys) writes."""
    by_name = {schema.name: schema for schema in schemas.values()}
    return tuple(len(column_names(by_name[t.schema], t)) for t in tables if t.schema in by_name)


def table_matrix(schema: Schema, spec: TableSpec) -> sp.csr_matrix:
    """(n_columns x n_cells): the table's answers as one stacked query matrix, `where` applied."""
    stacked = sp.vstack([schema.query(q).matrix for q in spec.queries]).tocsr()
    if spec.where:
        keep = np.ones(schema.size, dtype=bool)
        for factor, level in spec.where:
            keep &= schema.levels_of(factor, np.arange(schema.size)) == level
        stacked = (stacked @ sp.diags(keep.astype(np.int64), dtype=np.int64)).tocsr()
    return stacked


def table_answers(schema: Schema, spec: TableSpec, histograms: sp.spmatrix) -> np.ndarray:
    """(n_rows x n_columns): the table's answers for each row of (n_rows x n_cells) histograms, int64 (a research
    estimate's fractional histograms give float64 answers: das.research.estimates)."""
    answers = (histograms @ table_matrix(schema, spec).T.tocsc()).toarray()
    return answers if np.issubdtype(histograms.dtype, np.floating) else answers.astype(np.int64)


def level_rows(schema: Schema, spec: TableSpec, level: str, geocodes: np.ndarray, *,
               answers: np.ndarray) -> pd.DataFrame:
    """The rows of one level: level, geocode, then a column per answer cell (`column_names`)."""
    frame = pd.DataFrame(answers, columns=column_names(schema, spec))
    frame.insert(0, "geocode", geocodes)
    frame.insert(0, "level", level)
    return frame


def level_frames(
    schema: Schema, spec: TableSpec, geography: Geography, block_histograms: sp.csr_matrix, *,
    levels: tuple[str, ...] | None = None,
) -> list[pd.DataFrame]:
    """The table's rows level by level (`levels`, default all of `geography`'s), each sorted by geocode."""
    return [level_rows(schema, spec, level, geography.units(level),
                       answers=table_answers(schema, spec, geography.aggregate(block_histograms, level)))
            for level in levels or geography.levels]


def table_slices(
    schema: Schema, spec: TableSpec, geography: Geography, block_histograms: sp.csr_matrix, *,
    levels: tuple[str, ...] | None = None, rows: int = TABLE_ROWS,
) -> Iterator[pa.Table]:
    """`level_frames` as Arrow tables of at most `rows` rows, each level starting a table (an empty one for a level
    without rows): a writer holds one slice, and the block level's dense answers are computed a slice at a time."""
    matrix = table_matrix(schema, spec).T.tocsc()
    for level in levels or geography.levels:
        units = geography.units(level)
        histograms = geography.aggregate(block_histograms, level)
        for lo in range(0, max(len(units), 1), rows):
            answers = (histograms[lo:lo + rows] @ matrix).toarray().astype(np.int64)
            yield arrow_table(level_rows(schema, spec, level, units[lo:lo + rows], answers=answers))


def compute_table(
    schema: Schema, spec: TableSpec, geography: Geography, block_histograms: sp.csr_matrix
) -> pd.DataFrame:
    """The table for every geounit at every level of `geography` (level-major, then by geocode)."""
    return pd.concat(level_frames(schema, spec, geography, block_histograms), ignore_index=True)


def arrow_table(frame: pd.DataFrame, metadata: dict | None = None) -> pa.Table:
    """A table's rows as Arrow, carrying `metadata` alone in its key-value metadata, as every table file does
    (not pandas' description of the frame: a public file holds only declared metadata, das.frame.published)."""
    return pa.Table.from_pandas(frame, preserve_index=False).replace_schema_metadata(metadata or None)


def write_tables(
    out_dir: Path,
    geography: Geography,
    histograms: dict[str, sp.csr_matrix],
    schemas: dict[str, Schema],
    *,
    tables: tuple[TableSpec, ...],
    metadata: dict | None = None,
) -> list[Path]:
    """Write each table whose schema has histograms; `histograms`/`schemas` are keyed by schema name.
    Each file carries `metadata` in its Parquet key-value metadata; it is written a slice (a row group of at
    most TABLE_ROWS rows) at a time (`table_slices`)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for spec in tables:
        if spec.schema not in histograms:
            continue
        path = out_dir / f"{spec.name}.parquet"
        slices = table_slices(schemas[spec.schema], spec, geography, histograms[spec.schema])
        written.append(write_slices(slices, path, metadata=metadata, compression=TABLE_COMPRESSION, whole=True))
    return written
