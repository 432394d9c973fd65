"""The schema's constraint kinds, interpreted in one place (DESIGN.md section 5).

A constraint of a schema names a query and a kind. Its kind turns the published facts of each
block (housing units, GQ facilities by type, and for the units the persons release's household
persons) into bounds `lower <= Q x <= upper` on that query's answers. Everything that applies a
rule goes through here: post-processing solves within the bounds (summed up the hierarchy, an
upper bound of 0 stays 0: a structural zero), the input reader flags the records beyond an
upper bound, and the validator compares its own recount of a release with the same bounds.

Teaching das a new rule is one `register` call: the kind's bounds, and what a breach means.

>>> sorted(KINDS)
['facilities', 'household_persons', 'housing_units', 'structural_zero']
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import scipy.sparse as sp

from das.model.geography import Geography
from das.model.levels import NATION, STATE


class Constraint(Protocol):
    """A schema's constraint (das.model.schema.Constraint): a kind of KINDS over one query."""

    kind: str
    query: str
    cells: tuple[tuple[int, ...], ...]


class Query(Protocol):
    """A schema's marginal query (das.model.schema.Query)."""

    name: str
    factors: tuple[str, ...]
    shape: tuple[int, ...]
    matrix: sp.csr_matrix
    size: int


class Schema(Protocol):
    """What the rules read of a schema (das.model.schema.Schema, which checks its kinds against KINDS)."""

    name: str
    universe: str
    constraints: tuple

    def query(self, name: str) -> Query: ...

    def factor_labels(self, name: str) -> tuple[str, ...]: ...

INVARIANT_LEVELS = (NATION, STATE)


@dataclass(frozen=True)
class Invariants:
    """Exactly published facts the output must reproduce (outside the privacy budget), per block."""

    housing_units: np.ndarray      # (n_blocks,) int64
    gq_facilities: np.ndarray      # (n_blocks, n_gq_types) int64, GQ types 1..n
    total_population: dict[str, np.ndarray]  # level -> (n_units,) int64, for INVARIANT_LEVELS
    household_persons: np.ndarray | None = None  # (n_blocks,) int64 of the post-processed persons release

    @classmethod
    def from_inputs(cls, inventory, person_histograms, geography: Geography) -> Invariants:
        """The invariants of validated inputs: the unit inventory's, and the published population totals."""
        return cls(
            housing_units=inventory.housing_units,
            gq_facilities=inventory.gq_facilities,
            total_population={level: np.asarray(geography.aggregate(person_histograms, level).sum(axis=1)).ravel()
                              for level in INVARIANT_LEVELS if level in geography.levels},
        )

    def blocks(self, start: int, stop: int) -> Invariants:
        """The per-block facts of blocks start..stop-1 (no level totals): for one parent's rules."""
        hhp = None if self.household_persons is None else self.household_persons[start:stop]
        return Invariants(self.housing_units[start:stop], self.gq_facilities[start:stop], {}, hhp)


@dataclass(frozen=True)
class Bounds:
    """lower <= answers of `query` <= upper, one row per geounit (n_units x n_query_cells)."""

    query: str
    lower: np.ndarray  # int64
    upper: np.ndarray  # float64, inf = unbounded (counts are far below 2**53, so exact)
    rule: Constraint | None = None  # the schema constraint they come from (None: the total invariant)

    def structural_zeros(self) -> np.ndarray:
        """(n_units x n_query_cells) bool: answer cells forced to 0."""
        return self.upper == 0

    def binding(self) -> np.ndarray:
        """(n_query_cells,) bool: answer cells with a bound other than 0 <= x < inf or == 0."""
        nontrivial = (self.lower > 0) | (np.isfinite(self.upper) & (self.upper > 0))
        return nontrivial.any(axis=0)


@dataclass(frozen=True)
class Kind:
    """One constraint kind: its per-block bounds, and the words for a breach of them.

    bounds(constraint, query, facts, lower=, upper=) fills the (n_blocks x query size) arrays, which
    start at 0 <= x < inf. excess(constraint, schema, cell) says what a record in answer `cell`
    beyond the upper bound lacks (the input check names such records). shortfall(blocks, pairs),
    if given, is the note when the confidential input is below a lower bound (legal: the release
    is raised to it). on_inputs=False: a rule between releases, not checked on the inputs.
    """

    bounds: Callable[..., None]  # (constraint, query, facts, *, lower, upper)
    excess: Callable[[Constraint, Schema, int], str]
    shortfall: Callable[[int, int], str] | None = None
    on_inputs: bool = True


KINDS: dict[str, Kind] = {}


def register(name: str, kind: Kind) -> None:
    """Teach das a constraint kind: schemas may then name it, and every stage honours it."""
    KINDS[name] = kind


def _facilities(c: Constraint, query: Query, facts: Invariants, *, lower: np.ndarray, upper: np.ndarray) -> None:
    """Cell 0 household, cells 1.. GQ types: >= 1 person per type with a facility, none without."""
    if query.size != facts.gq_facilities.shape[1] + 1:
        raise ValueError(f"facilities constraint needs a query with household + {facts.gq_facilities.shape[1]} GQ "
                         f"type cells, got {c.query!r} ({query.size})")
    has = np.column_stack([facts.housing_units > 0, facts.gq_facilities > 0])
    lower[:, 1:] = has[:, 1:]
    upper[~has] = 0


def _facility_excess(c: Constraint, schema: Schema, cell: int) -> str:
    if cell == 0:
        return ("a block with housing units for a household person (the units file has no housing unit in "
                "this block)")
    return ("a block with a group-quarters facility of this type (the units file has none of this type in "
            "this block)")


def _facility_shortfall(blocks: int, pairs: int) -> str:
    return (f"{blocks:,} block(s) have a group-quarters facility with nobody of its type ({pairs:,} block x type "
            f"pairs); the published counts will have at least one person there")


def _structural_zero(c: Constraint, query: Query, facts: Invariants, *, lower: np.ndarray, upper: np.ndarray) -> None:
    for cell in c.cells:
        upper[:, int(np.ravel_multi_index(cell, query.shape))] = 0


def _zero_excess(c: Constraint, schema: Schema, cell: int) -> str:
    cells = " or ".join(" and ".join(f"{f} '{schema.factor_labels(f)[v]}'" for f, v in zip(schema.query(c.query).factors, z))
                        for z in c.cells)
    return f"nobody with {cells} (a structural zero of schema {schema.name})"


def _housing_units(c: Constraint, query: Query, facts: Invariants, *, lower: np.ndarray, upper: np.ndarray) -> None:
    lower[:, 0] = facts.housing_units
    upper[:, 0] = facts.housing_units


def _household_persons(c: Constraint, query: Query, facts: Invariants, *, lower: np.ndarray, upper: np.ndarray) -> None:
    """Cell 0 (occupied): at least 1 where the persons release has household persons, at most as many."""
    if facts.household_persons is None:
        raise ValueError("the household_persons rule needs the persons release's household persons per block "
                         "(post-process persons first)")
    hhp = np.asarray(facts.household_persons, dtype=np.int64)
    lower[:, 0] = hhp > 0
    upper[:, 0] = np.minimum(hhp, facts.housing_units)


register("facilities", Kind(_facilities, _facility_excess, _facility_shortfall))
register("structural_zero", Kind(_structural_zero, _zero_excess))
register("housing_units", Kind(_housing_units, lambda c, s, cell: "as many units as the inventory's housing units"))
register("household_persons", Kind(_household_persons,
                                   lambda c, s, cell: "no more occupied units than household persons",
                                   on_inputs=False))


def describe(schema: Schema, constraint: Constraint, cell: int) -> str:
    """The rule behind one answer cell of a constraint, in words (for violations)."""
    return KINDS[constraint.kind].excess(constraint, schema, cell)


def block_bounds(schema: Schema, facts: Invariants, *, inputs_only: bool = False) -> list[Bounds]:
    """The schema's constraints as per-block bounds, one family per constraint (in schema order)."""
    n_blocks = len(facts.housing_units)
    families = []
    for c in schema.constraints:
        kind = KINDS[c.kind]
        if inputs_only and not kind.on_inputs:
            continue
        query = schema.query(c.query)
        lower = np.zeros((n_blocks, query.size), dtype=np.int64)
        upper = np.full((n_blocks, query.size), np.inf)
        try:
            kind.bounds(c, query, facts, lower=lower, upper=upper)

        except ValueError as e:
            raise ValueError(f"schema {schema.name}, {c.kind} constraint on {c.query!r}: {e}") from None
        families.append(Bounds(c.query, lower, upper, c))
    return families


BLOCK_SLICE = 1 << 16  # blocks per slice when summing block bounds (memory follows the slice)


def unit_bounds(schema: Schema, facts: Invariants, unit_of_block: np.ndarray, n_units: int, *,
                total: np.ndarray | None = None) -> list[Bounds]:
    """Bounds of n_units geounits from their blocks' facts (unit_of_block: 0..n_units-1, sorted),
    summed slice by slice; `total`, where the population invariant binds, adds its equality."""
    n_blocks = len(facts.housing_units)
    sums: list[list[np.ndarray]] | None = None
    made: list[Bounds] = []
    for s0 in range(0, max(n_blocks, 1), BLOCK_SLICE):
        s1 = min(n_blocks, s0 + BLOCK_SLICE)
        families = block_bounds(schema, facts.blocks(s0, s1))
        aggregate = sp.csr_matrix((np.ones(s1 - s0, np.int64), (unit_of_block[s0:s1], np.arange(s1 - s0))),
                                  shape=(n_units, s1 - s0))
        if sums is None:
            made = families
            sums = [[np.zeros((n_units, f.lower.shape[1]), np.int64), np.zeros((n_units, f.upper.shape[1]))]
                    for f in families]
        for acc, f in zip(sums, families):
            acc[0] += aggregate @ f.lower
            acc[1] += aggregate @ f.upper
    result = [Bounds(f.query, lower, upper, f.rule) for f, (lower, upper) in zip(made, sums or [])]
    if total is not None:
        total = np.asarray(total, dtype=np.int64)[:, None]
        result.append(Bounds("total", total, total.astype(float)))
    return result


def block_range(geography: Geography, level: str, lo: int, hi: int) -> tuple[int, int]:
    """The blocks (first, past-last) of the geounits lo..hi-1 of `level`."""
    block_to_unit = geography.block_to_unit(level)
    return int(np.searchsorted(block_to_unit, lo)), int(np.searchsorted(block_to_unit, hi))


def population_total(schema: Schema, facts: Invariants, level: str, *, lo: int, hi: int) -> np.ndarray | None:
    """The published total population of geounits lo..hi-1, where it binds this schema's release."""
    if level in facts.total_population and schema.universe == "persons":
        return facts.total_population[level][lo:hi]
    return None


def level_bounds(schema: Schema, facts: Invariants, geography: Geography, *, level: str,
                 lo: int = 0, hi: int | None = None) -> list[Bounds]:
    """Bounds for the geounits lo..hi-1 (default: all) of `level`: block bounds summed up, plus the total invariant."""
    hi = geography.n_units(level) if hi is None else hi
    b0, b1 = block_range(geography, level, lo, hi)
    return unit_bounds(schema, facts.blocks(b0, b1), geography.block_to_unit(level)[b0:b1] - lo, hi - lo,
                       total=population_total(schema, facts, level, lo=lo, hi=hi))


def household_persons(persons_schema: Schema, block_histograms) -> np.ndarray:
    """Household persons per block of a persons release (hhgq cell 0), for the units' `household_persons` rule."""
    column = np.asarray(persons_schema.query("hhgq").matrix[0].todense()).ravel()
    return np.asarray(block_histograms @ column).ravel().astype(np.int64)


def answer_cells(query: Query) -> np.ndarray:
    """(n_cells,) the answer cell of `query` each histogram cell counts in."""
    return query.matrix.tocsc().indices


def excess_records(bounds: Bounds, block_index: np.ndarray, cells: np.ndarray) -> np.ndarray:
    """bool per record: it is beyond its (block, answer cell)'s upper bound (the first `upper` in
    file order are within it; with an upper bound of 0, every record in the cell is beyond it)."""
    size = bounds.upper.shape[1]
    key = block_index.astype(np.int64) * size + cells
    order = np.argsort(key, kind="stable")
    sorted_key = key[order]
    starts = np.flatnonzero(np.r_[True, sorted_key[1:] != sorted_key[:-1]])
    rank = np.arange(len(key)) - np.repeat(starts, np.diff(np.r_[starts, len(key)]))
    beyond = np.empty(len(key), dtype=bool)
    beyond[order] = rank >= bounds.upper.ravel()[sorted_key]
    return beyond


def breaches(bounds: Bounds, answers: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(below, above): bool (n_units x n_cells) where answers fall outside the bounds."""
    return answers < bounds.lower, answers > bounds.upper


def holds(schema: Schema, bounds: list[Bounds], histograms) -> list[str]:
    """Violations (as text) of `bounds` by histograms (n_units x n_cells), for checks and tests."""
    problems = []
    for b in bounds:
        answers = np.asarray((histograms @ schema.query(b.query).matrix.T).todense()) \
            if hasattr(histograms, "tocsr") else histograms @ schema.query(b.query).matrix.T.toarray()
        for kind, bad in zip(("below its lower bound", "above its upper bound"), breaches(b, answers)):
            if bad.any():
                unit, cell = np.argwhere(bad)[0]
                problems.append(f"{b.query} cell {cell} of geounit #{unit} is {kind} ({int(bad.sum())} cases)")
    return problems
