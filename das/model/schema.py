"""Schemas as data: the attributes of a histogram, its cells, and marginal queries over it.

A `Schema` is a small frozen value loaded from a spec (`specs/schemas/*.toml`); PL94 is an
instance, not a subclass. Cells are numbered in row-major (C) order over the attributes as
listed, so a cell index and an attribute-level tuple convert with numpy's ravel/unravel.

>>> s = load_schema("pl94_persons")
>>> s.size, s.shape
(2016, (8, 2, 2, 63))
>>> s.query("votingage x hispanic").matrix.shape
(4, 2016)
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from importlib import resources
from itertools import combinations
from pathlib import Path
from typing import Annotated, Literal

import numpy as np
import scipy.sparse as sp
from pydantic import Field, PlainValidator

from das.core.errors import SpecError
from das.model import rules, specfile
from das.model.specfile import Section, load_toml

__all__ = ["Attribute", "Constraint", "Query", "Recode", "Schema", "load_schema",
           "parse_query_name", "resolve_spec", "schema_from_dict", "specs_root"]

QUERY_SEPARATOR = " x "


@dataclass(frozen=True)
class Attribute:
    """One dimension of the histogram: its levels, the input column and code of each level."""

    name: str
    column: str
    codes: tuple  # input code of each level (int or str), in level order
    labels: tuple[str, ...]

    @property
    def size(self) -> int:
        return len(self.codes)


@dataclass(frozen=True)
class Recode:
    """A coarsening of one attribute: level i of `attribute` maps to level `mapping[i]`."""

    name: str
    attribute: str
    mapping: tuple[int, ...]
    labels: tuple[str, ...]

    @property
    def size(self) -> int:
        return len(self.labels)


@dataclass(frozen=True)
class Constraint:
    """A rule every output holds: `kind` names how bounds come from the published facts (das.model.rules)."""

    kind: str  # a key of das.model.rules.KINDS
    query: str
    cells: tuple[tuple[int, ...], ...] = ()  # structural_zero: answer cells (factor levels)


@dataclass(frozen=True)
class Query:
    """A marginal query: `matrix` (answer cells x histogram cells, 0/1) and its answer labels."""

    name: str
    factors: tuple[str, ...]  # attribute or recode names; () is the total
    shape: tuple[int, ...]
    matrix: sp.csr_matrix

    @property
    def size(self) -> int:
        return self.matrix.shape[0]


@dataclass(frozen=True)
class Schema:
    """Attributes (in cell order), recodes, derived record columns, and an optional row filter."""

    name: str
    description: str
    universe: str
    attributes: tuple[Attribute, ...]
    recodes: tuple[Recode, ...] = ()
    derived: tuple[tuple[str, str, tuple[int, ...]], ...] = ()  # (column, attribute, map)
    record_filter: tuple[str, int] | None = None  # (column, value) rows this schema counts
    constraints: tuple[Constraint, ...] = ()

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(a.size for a in self.attributes)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape))

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(a.name for a in self.attributes)

    def attribute(self, name: str) -> Attribute:
        for a in self.attributes:
            if a.name == name:
                return a
        raise KeyError(f"schema {self.name!r} has no attribute {name!r}; it has {self.names}")

    def factor_size(self, name: str) -> int:
        """Number of levels of an attribute or recode."""
        for r in self.recodes:
            if r.name == name:
                return r.size
        return self.attribute(name).size

    def factor_labels(self, name: str) -> tuple[str, ...]:
        for r in self.recodes:
            if r.name == name:
                return r.labels
        return self.attribute(name).labels

    def cell_index(self, levels) -> np.ndarray | int:
        """Attribute-level tuple (scalars or arrays, one per attribute) -> cell index.

        >>> int(load_schema("pl94_persons").cell_index((0, 1, 0, 0)))
        126
        """
        return np.ravel_multi_index(tuple(levels), self.shape)

    def cell_levels(self, cells) -> tuple:
        """Cell index (scalar or array) -> tuple of attribute levels."""
        return np.unravel_index(cells, self.shape)

    def levels_of(self, name: str, cells) -> np.ndarray:
        """Level of attribute or recode `name` for each cell index."""
        cells = np.asarray(cells)
        for r in self.recodes:
            if r.name == name:
                base = self.cell_levels(cells)[self.names.index(r.attribute)]
                return np.asarray(r.mapping, dtype=np.int64)[base]
        return np.asarray(self.cell_levels(cells)[self.names.index(self.attribute(name).name)])

    def query(self, name: str) -> Query:
        """A named marginal: "total", "detailed", or factors joined by " x " ("votingage x hispanic")."""
        return _query(self, name)

    def marginal_cells(self, factors: tuple[str, ...], cells) -> np.ndarray:
        """Index of each cell's answer cell in the marginal over `factors`."""
        cells = np.asarray(cells)
        if not factors:
            return np.zeros(cells.shape, dtype=np.int64)
        levels = tuple(self.levels_of(f, cells) for f in factors)
        return np.ravel_multi_index(levels, tuple(self.factor_size(f) for f in factors))


def parse_query_name(schema: Schema, name: str) -> tuple[str, ...]:
    """Factors of a query name; "total" is (), "detailed" is every attribute."""
    name = name.strip()
    if name == "total":
        return ()
    if name == "detailed":
        return schema.names
    factors = tuple(part.strip() for part in " ".join(name.split()).split(QUERY_SEPARATOR))
    known = set(schema.names) | {r.name for r in schema.recodes}
    for f in factors:
        if f not in known:
            raise SpecError(
                f"query {name!r}: {f!r} is neither an attribute nor a recode of schema "
                f"{schema.name!r} (known: {sorted(known)})"
            )
    if len(set(factors)) != len(factors):
        raise SpecError(f"query {name!r} names a factor twice")
    return factors


@functools.lru_cache(maxsize=256)
def _query(schema: Schema, name: str) -> Query:
    factors = parse_query_name(schema, name)
    cells = np.arange(schema.size)
    rows = schema.marginal_cells(factors, cells)
    shape = tuple(schema.factor_size(f) for f in factors)
    n_rows = int(np.prod(shape)) if shape else 1
    matrix = sp.csr_matrix(
        (np.ones(schema.size, dtype=np.int64), (rows, cells)), shape=(n_rows, schema.size)
    )
    return Query(name=name, factors=factors, shape=shape, matrix=matrix)


# ---------------------------------------------------------------------------------------------
# CENRACE: the 63 combinations of six race flags


def race_combinations(n_races: int = 6) -> list[tuple[int, ...]]:
    """Race-flag positions of each CENRACE level: by number of races, then lexicographic.

    >>> race_combinations()[:7]
    [(0,), (1,), (2,), (3,), (4,), (5,), (0, 1)]
    """
    return [c for r in range(1, n_races + 1) for c in combinations(range(n_races), r)]


def cenrace_to_flags(level: int, n_races: int = 6) -> tuple[bool, ...]:
    """CENRACE level (0-based; code "01" is level 0) -> tuple of race flags."""
    chosen = race_combinations(n_races)[level]
    return tuple(i in chosen for i in range(n_races))


def flags_to_cenrace(flags: tuple[bool, ...]) -> int:
    """Tuple of race flags (at least one set) -> CENRACE level (0-based)."""
    chosen = tuple(i for i, f in enumerate(flags) if f)
    if not chosen:
        raise ValueError("at least one race flag must be set")
    return race_combinations(len(flags)).index(chosen)


# ---------------------------------------------------------------------------------------------
# Loading specs


def specs_root() -> Path:
    """The directory holding schemas/, strategies/ and runs/ (shipped as the das.specs package)."""
    return Path(str(resources.files("das.specs")))


def resolve_spec(name_or_path: str | Path, kind: str) -> Path:
    """A spec path as given, or the shipped spec `specs/<kind>/<name>.toml`."""
    path = Path(name_or_path)
    if path.suffix == ".toml" and os.path.lexists(path):  # a loop or an unreadable file: load_toml says which
        return path
    shipped = specs_root() / kind / f"{name_or_path}.toml"
    if shipped.exists():
        return shipped
    available = sorted(p.stem for p in (specs_root() / kind).glob("*.toml"))
    singular = {"strategies": "strategy", "schemas": "schema", "runs": "run", "tables": "tables"}.get(kind, kind)
    raise SpecError(f"no {singular} spec {str(name_or_path)!r}: not a file, and not one of {available}")


def load_schema(name_or_path: str | Path) -> Schema:
    """Load a schema spec by shipped name ("pl94_persons") or by path."""
    path = resolve_spec(name_or_path, "schemas")
    return _load_schema(str(path.resolve()))


@functools.lru_cache(maxsize=32)
def _load_schema(path: str) -> Schema:
    return schema_from_dict(load_toml(Path(path)), source=path)


def _codes(value) -> list:
    """An attribute's input codes: a non-empty list of integers or of strings of ASCII digits."""
    if not isinstance(value, list) or not value:
        raise ValueError(f"expected a non-empty list of codes, not {specfile.shown(value)}")
    for code in value:
        ok = (isinstance(code, int) and not isinstance(code, bool)) or \
            (isinstance(code, str) and code.isascii() and code.isdigit())
        if not ok:
            raise ValueError(f"code {specfile.shown(code)} is neither an integer nor a string of ASCII digits")
    return value


class AttributeSection(Section):
    name: str = Field(min_length=1, description="the attribute's name")
    column: str = Field(min_length=1, description="the input column it is read from")
    codes: Annotated[list, PlainValidator(_codes)] | None = None
    code_range: list[int] | None = Field(None, min_length=2, max_length=2, description="[first, last] code")
    labels: list[str] | None = Field(None, description="one label per code")
    race_flags: list[str] | None = Field(None, description="the names of the race flags (CENRACE)")


class RecodeSection(Section):
    attribute: str = Field(description="the attribute recoded")
    bins: list[int] | None = Field(None, min_length=1, description="the first level of each bin, from 0")
    map: list[int] | None = Field(None, min_length=1, description="the new level of each level")
    labels: list[str] | None = None


class DerivedSection(Section):
    attribute: str = Field(description="the attribute it is derived from")
    map: list[int] = Field(description="one value per level of the attribute")


class RecordFilterSection(Section):
    column: str
    equals: int


class ConstraintSection(Section):
    kind: str = Field(description=f"a kind of das.model.rules: {', '.join(rules.KINDS)}")
    query: str = Field(description="a query of the schema")
    cells: list[list[int]] = []


class SchemaFile(Section):
    """A schema spec as written (specs/schemas/*.toml)."""

    name: str = Field(min_length=1, description="the schema's name")
    description: str = ""
    universe: Literal["persons", "units"] = Field("persons", description="'persons' or 'units'")
    attributes: list[AttributeSection] = Field(min_length=1, description="[[attributes]] tables")
    recodes: dict[str, RecodeSection] = {}
    derived: dict[str, DerivedSection] = {}
    record_filter: RecordFilterSection | None = None
    constraints: list[ConstraintSection] = []


def schema_from_dict(spec: dict, source: str = "<dict>") -> Schema:
    """The Schema a parsed schema spec describes: its shape checked whole (SchemaFile), then its meaning;
    every error names `source` and the part at fault."""
    specfile.check(spec, SchemaFile, source)
    attributes = tuple(_attribute(i, a, source) for i, a in enumerate(_need(spec, "attributes", "the schema", source)))
    by_name = {a.name: a for a in attributes}
    if len(by_name) != len(attributes):
        raise SpecError(f"{source}: two attributes share a name")
    recodes = tuple(_recode(name, r, by_name, source) for name, r in spec.get("recodes", {}).items())
    derived = tuple(_derived(column, d, by_name, source) for column, d in spec.get("derived", {}).items())
    record_filter = None
    if "record_filter" in spec:
        f = spec["record_filter"]
        record_filter = (str(_need(f, "column", "record_filter", source)), int(_need(f, "equals", "record_filter", source)))
    constraints = tuple(_constraint(i, c, source) for i, c in enumerate(spec.get("constraints", [])))
    schema = Schema(
        name=_need(spec, "name", "the schema", source),
        description=spec.get("description", ""),
        universe=spec.get("universe", "persons"),
        attributes=attributes,
        recodes=recodes,
        derived=derived,
        record_filter=record_filter,
        constraints=constraints,
    )
    for c in schema.constraints:
        query = schema.query(c.query)  # raises SpecError for an unknown factor
        for cell in c.cells:
            if len(cell) != len(query.shape) or any(not 0 <= v < n for v, n in zip(cell, query.shape)):
                raise SpecError(f"{source}: constraint cell {list(cell)} is outside query {c.query!r}")
    return schema


def _need(d: dict, key: str, where: str, source: str):
    """d[key], or a SpecError naming the file and the part that lacks it."""
    if key not in d:
        raise SpecError(f"{source}: {where} is missing {key!r}")
    return d[key]


def _attribute(i: int, a: dict, source: str) -> Attribute:
    """Attribute #i+1 of a schema spec: its codes (a list or a code_range) and their labels."""
    name = _need(a, "name", f"attribute #{i + 1}", source)
    if "code_range" in a:
        lo, hi = a["code_range"]
        codes = tuple(range(int(lo), int(hi) + 1))
    else:
        codes = tuple(_need(a, "codes", f"attribute {name!r}", source))
    labels = tuple(a.get("labels", [str(c) for c in codes]))
    if len(labels) != len(codes):
        raise SpecError(f"{source}: attribute {name!r} has {len(codes)} codes but {len(labels)} labels")
    if len(set(codes)) != len(codes):
        raise SpecError(f"{source}: attribute {name!r} repeats a code")
    return Attribute(name, _need(a, "column", f"attribute {name!r}", source), codes, labels)


def _recode(name: str, r: dict, by_name: dict[str, Attribute], source: str) -> Recode:
    """A recode of one attribute's levels, by bins (age groups) or by an explicit map."""
    base = by_name.get(_need(r, "attribute", f"recode {name!r}", source))
    if base is None:
        raise SpecError(f"{source}: recode {name!r} refers to unknown attribute {r['attribute']!r}")
    if "bins" in r:
        edges = list(r["bins"])
        if edges[0] != 0 or edges != sorted(edges):
            raise SpecError(f"{source}: recode {name!r}: bins must start at 0 and increase")
        mapping = tuple(int(np.searchsorted(edges, i, side="right") - 1) for i in range(base.size))
        default_labels = [
            f"{base.codes[lo]}-{base.codes[hi - 1]}" if hi - 1 > lo else f"{base.codes[lo]}"
            for lo, hi in zip(edges, edges[1:] + [base.size])
        ]
    else:
        mapping = tuple(int(m) for m in _need(r, "map", f"recode {name!r}", source))
        default_labels = [str(i) for i in range(max(mapping) + 1)]
    if len(mapping) != base.size:
        raise SpecError(f"{source}: recode {name!r} maps {len(mapping)} levels, attribute has {base.size}")
    labels = tuple(r.get("labels", default_labels))
    if sorted(set(mapping)) != list(range(len(labels))):
        raise SpecError(f"{source}: recode {name!r} must map onto levels 0..{len(labels) - 1}")
    if name in by_name:
        raise SpecError(f"{source}: recode {name!r} has the name of an attribute")
    return Recode(name, base.name, mapping, labels)


def _derived(column: str, d: dict, by_name: dict[str, Attribute], source: str) -> tuple[str, str, tuple[int, ...]]:
    """A derived input column: one value per level of an attribute."""
    base = by_name.get(_need(d, "attribute", f"derived column {column!r}", source))
    if base is None or len(d.get("map", [])) != base.size:
        raise SpecError(f"{source}: derived column {column!r} needs an attribute and one value per level")
    return column, base.name, tuple(int(v) for v in d["map"])


def _constraint(i: int, c: dict, source: str) -> Constraint:
    """Constraint #i+1: a kind of das.model.rules and the query (and cells) it applies to."""
    kind = _need(c, "kind", f"constraint #{i + 1}", source)
    if kind not in rules.KINDS:
        raise SpecError(f"{source}: constraint #{i + 1} kind {kind!r} is not one of {tuple(rules.KINDS)}")
    return Constraint(kind, _need(c, "query", f"constraint #{i + 1}", source),
                      tuple(tuple(int(v) for v in cell) for cell in c.get("cells", [])))
