"""The two namings of a table's columns, and the one mapping between them.

Every table file das writes names its columns the readable way by default: `total`, `cenrace=White`,
`hispanic=Not Hispanic or Latino|numraces=Two races` (query factors and level labels, das.io.tables),
the names of a release's `tables/*.parquet`. The other naming is the 2020 PL 94-171 field names
(`P0010003`), given on request (`das tables --names pl`, `Release.table(name, names="pl")`). A readable
column and a PL field are the same cell when they sum the same histogram cells (the table's `where`
applied to both): cells are never recomputed, only renamed. A column one naming lacks keeps its name in
the other: das's `total` of P5 (every person) is no PL field; the PL's derived "Population of two or
more races" (P0010009) is no das column and is named by its PL label.

>>> from das.model.schema import load_schema
>>> from das.io.tables import load_tables
>>> p1 = load_tables("pl94")[0]
>>> names = pl_fields(p1, load_schema("pl94_persons"))
>>> names["total"], names["cenrace=White"], names["numraces=Two races"]
('P0010001', 'P0010003', 'P0010010')
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from das.core.errors import SpecError
from das.io.pl94171 import PLLayout, load_layout
from das.io.tables import TableSpec, column_names, table_matrix
from das.model.schema import Schema

NAMINGS = ("readable", "pl")  # the default first


def _cell_sets(matrix) -> list[tuple[int, ...]]:
    """The histogram cells each row of a 0/1 table matrix sums, as a sorted tuple (a row's identity)."""
    m = matrix.tocsr()
    m.eliminate_zeros()
    return [tuple(sorted(m.indices[m.indptr[i]:m.indptr[i + 1]].tolist())) for i in range(m.shape[0])]


def _pairs(table: TableSpec, schema: Schema, layout: PLLayout) -> list[tuple[str, str]]:
    """(readable column, PL field) of every cell both namings have, in table order; equal cell sets pair in order
    (P1's `numraces=Six races` with P0010070, the one six-race `cenrace` with P0010071)."""
    if table.name not in layout.tables:
        return []
    pl = layout.tables[table.name]
    waiting: dict[tuple[int, ...], list[str]] = {}
    for name, cells in zip(column_names(schema, table), _cell_sets(table_matrix(schema, table))):
        waiting.setdefault(cells, []).append(name)
    pairs = []
    for field, cells in zip(pl.fields, _cell_sets(pl.matrix(schema))):
        if waiting.get(cells):
            pairs.append((waiting[cells].pop(0), field))
    return pairs


def pl_fields(table: TableSpec, schema: Schema, layout: PLLayout | None = None) -> dict[str, str]:
    """Readable column -> PL field, for every column of das's `table` that a PL 94-171 field counts."""
    return dict(_pairs(table, schema, layout or load_layout()))


def readable_names(table: TableSpec, schema: Schema, layout: PLLayout | None = None) -> dict[str, str]:
    """PL field -> readable column name for every field of the PL table: das's name where das has the cell,
    else the field's PL label (a derived cell, like "Population of two or more races")."""
    layout = layout or load_layout()
    ours = {field: name for name, field in _pairs(table, schema, layout)}
    pl = layout.tables[table.name]
    return {field: ours.get(field, label) for field, (label, _) in zip(pl.fields, pl.cells)}


def renamed(frame: pd.DataFrame, mapping: dict[str, str]) -> pd.DataFrame:
    """`frame` with its columns renamed by `mapping` (the cells untouched); refused if two columns would collide."""
    columns = [mapping.get(c, c) for c in frame.columns]
    if len(set(columns)) != len(columns):
        seen = pd.Index(columns)
        raise SpecError(f"renaming the columns would give two columns the same name: "
                        f"{sorted(set(np.asarray(columns)[seen.duplicated()]))}")
    return frame.set_axis(columns, axis=1)


def check_naming(names: str) -> str:
    if names not in NAMINGS:
        raise SpecError(f"unknown column naming {names!r}; expected one of {', '.join(NAMINGS)}")
    return names
