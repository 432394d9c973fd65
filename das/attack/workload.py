"""The published-statistics workload of a geounit: every cell of its tables as a product query.

A cell of a marginal table counts the people whose level of each attribute lies in a set: it is
a product over attributes of a 0/1 mask over that attribute's levels. A `Workload` keeps, per
attribute, the distinct masks once (row 0 is "any level") and, per query, the index of its mask
in each attribute, so relaxed answers need each distinct mask evaluated once (see `rap`).

Tables are data (`specs/attack/<schema>.toml`): `[block.X]` tables are published for every
block, `[tract.X]` for every tract. A tract workload carries a leading `block` attribute (the
tract's blocks): block tables restricted to one block, tract tables over all of them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from pydantic import Field

from das.core.errors import SpecError
from das.model import specfile
from das.model.levels import BLOCK, TRACT
from das.model.schema import Schema, parse_query_name, resolve_spec
from das.model.specfile import Section

TABLE_LEVELS = (BLOCK, TRACT)


@dataclass(frozen=True)
class AttackTable:
    """One published table: schema queries, optionally restricted to factor levels (`where`)."""

    name: str
    title: str
    level: str  # "block" | "tract"
    queries: tuple[str, ...]
    where: tuple[tuple[str, tuple[int, ...]], ...] = ()


@dataclass(frozen=True)
class Workload:
    """Product queries over `attributes` (names, sizes): `masks[a]` (m_a x d_a bool, row 0 all
    True), `index` (Q x n_attributes) mask row of each query, and a label per query."""

    attributes: tuple[str, ...]
    sizes: tuple[int, ...]
    masks: tuple[np.ndarray, ...]
    index: np.ndarray
    labels: tuple[str, ...]

    @property
    def n_queries(self) -> int:
        return self.index.shape[0]

    def answers(self, records: np.ndarray) -> np.ndarray:
        """Exact count of every query over records (n x n_attributes levels)."""
        records = np.asarray(records, dtype=np.int64).reshape(-1, len(self.attributes))
        if records.shape[0] == 0:
            return np.zeros(self.n_queries)
        distinct, counts = np.unique(records, axis=0, return_counts=True)
        inside = np.ones((self.n_queries, len(distinct)), dtype=bool)
        for a, masks in enumerate(self.masks):
            used = self.index[:, a]
            if not used.any():
                continue
            inside &= masks[:, distinct[:, a]][used]
        return inside.astype(float) @ counts.astype(float)


class TableSection(Section):
    title: str | None = None
    queries: list[str] = Field(min_length=1, description="a nonempty list of query names")
    where: dict[str, list[int]] = Field({}, description="factor = [level index, ...]")


class WorkloadFile(Section):
    """An attack workload spec as written (specs/attack/*.toml): tables published per block and per tract."""

    block: dict[str, TableSection] = Field({}, description="[block.NAME] tables, published for every block")
    tract: dict[str, TableSection] = Field({}, description="[tract.NAME] tables, published for every tract")


def load_attack_tables(name_or_path: str | Path) -> tuple[AttackTable, ...]:
    """The tables of `specs/attack/<name>.toml` (by schema name) or of a path."""
    path = resolve_spec(name_or_path, "attack")
    raw = specfile.load_toml(path)
    specfile.check(raw, WorkloadFile, str(path))
    tables = []
    for level, group in raw.items():
        if level not in TABLE_LEVELS or not isinstance(group, dict):
            raise SpecError(f"{path}: top-level key {level!r}: expected one of {TABLE_LEVELS} (a group of tables)")
        for name, t in group.items():
            if not isinstance(t, dict) or not isinstance(t.get("queries"), list) or not t["queries"]:
                raise SpecError(f"{path}: table {level}.{name}: expected `queries`, a nonempty list of query names")
            where = []
            for factor, levels in t.get("where", {}).items():
                if not isinstance(levels, list) or not all(isinstance(v, int) for v in levels):
                    raise SpecError(f"{path}: table {level}.{name}: where.{factor} must be a list of level indices")
                where.append((str(factor), tuple(levels)))
            tables.append(AttackTable(name, str(t.get("title", name)), level, tuple(t["queries"]), tuple(where)))
    return tuple(tables)


def _factor_map(schema: Schema, factor: str) -> tuple[int, np.ndarray]:
    """(attribute position, level of the factor for each attribute level) of an attribute or recode."""
    for r in schema.recodes:
        if r.name == factor:
            return schema.names.index(r.attribute), np.asarray(r.mapping)
    a = schema.names.index(schema.attribute(factor).name)
    return a, np.arange(schema.shape[a])


def table_cells(schema: Schema, table: AttackTable) -> tuple[list[tuple[np.ndarray, ...]], list[str]]:
    """Per nonempty cell of `table`: one mask per schema attribute, and the cell's label."""
    base = [np.ones(d, dtype=bool) for d in schema.shape]
    for factor, levels in table.where:
        try:
            a, mapping = _factor_map(schema, factor)
        except (KeyError, ValueError):
            raise SpecError(f"table {table.name}: where names {factor!r}, not an attribute or recode of "
                            f"schema {schema.name!r}") from None
        bad = [v for v in levels if not 0 <= v < int(mapping.max()) + 1]
        if bad:
            raise SpecError(f"table {table.name}: where.{factor} level(s) {bad} out of range 0..{int(mapping.max())}")
        base[a] = base[a] & np.isin(mapping, levels)
    cells, labels = [], []
    for qname in table.queries:
        factors = parse_query_name(schema, qname)
        maps = [_factor_map(schema, f) for f in factors]
        for combo in np.ndindex(*[int(m.max()) + 1 for _, m in maps]):
            masks = list(base)
            for (a, mapping), level in zip(maps, combo):
                masks[a] = masks[a] & (mapping == level)
            if all(m.any() for m in masks):
                cells.append(tuple(masks))
                label = "|".join(f"{f}={schema.factor_labels(f)[i]}" for f, i in zip(factors, combo))
                labels.append(f"{table.name}:{label or 'total'}")
    return cells, labels


def build_workload(schema: Schema, tables: tuple[AttackTable, ...], n_blocks: int | None = None) -> Workload:
    """Block workload (`n_blocks` None: block tables only) or tract workload over `n_blocks` blocks
    (a leading `block` attribute; block tables once per block, then the tract tables)."""
    block_cells, block_labels, tract_cells, tract_labels = [], [], [], []
    for t in tables:
        cells, labels = table_cells(schema, t)
        if t.level == BLOCK:
            block_cells += cells
            block_labels += labels
        else:
            tract_cells += cells
            tract_labels += labels
    if n_blocks is None:
        rows, labels = block_cells, block_labels
        attributes, sizes = schema.names, schema.shape
    else:
        rows, labels = [], []
        for b in range(n_blocks):
            one = np.zeros(n_blocks, dtype=bool)
            one[b] = True
            rows += [(one, *c) for c in block_cells]
            labels += [f"block{b}:{lab}" for lab in block_labels]
        everywhere = np.ones(n_blocks, dtype=bool)
        rows += [(everywhere, *c) for c in tract_cells]
        labels += tract_labels
        attributes, sizes = (BLOCK, *schema.names), (n_blocks, *schema.shape)
    if not rows:
        raise SpecError(f"the workload has no {BLOCK if n_blocks is None else f'{BLOCK} or {TRACT}'} tables")
    masks, index = [], np.zeros((len(rows), len(sizes)), dtype=np.int32)
    for a, d in enumerate(sizes):
        distinct = {np.ones(d, dtype=bool).tobytes(): 0}
        for q, row in enumerate(rows):
            index[q, a] = distinct.setdefault(row[a].tobytes(), len(distinct))
        masks.append(np.array([np.frombuffer(k, dtype=bool) for k in distinct]).reshape(len(distinct), d))
    return Workload(tuple(attributes), tuple(int(d) for d in sizes), tuple(masks), index, tuple(labels))
