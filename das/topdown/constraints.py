"""Constraints and invariants as bounds on query answers, per block, summed up the hierarchy.

Every rule of DESIGN.md section 5 is a family of rows `lower <= Q x <= upper` over one schema
query: written once per block from the invariants (housing units, GQ facilities by type), the
same rows bound every parent by summing the block bounds (an upper bound of 0 stays 0: a
structural zero; `inf` stays unbounded). The total-population invariant binds only the levels
where it is published (nation and state).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from das.geography import Geography
from das.schema import Schema

INVARIANT_LEVELS = ("nation", "state")


@dataclass(frozen=True)
class Bounds:
    """lower <= answers of `query` <= upper, one row per geounit (n_units x n_query_cells)."""

    query: str
    lower: np.ndarray  # int64
    upper: np.ndarray  # float64, inf = unbounded (counts are far below 2**53, so exact)

    def structural_zeros(self) -> np.ndarray:
        """(n_units x n_query_cells) bool: answer cells forced to 0."""
        return self.upper == 0

    def binding(self) -> np.ndarray:
        """(n_query_cells,) bool: answer cells with a bound other than 0 <= x < inf or == 0."""
        nontrivial = (self.lower > 0) | (np.isfinite(self.upper) & (self.upper > 0))
        return nontrivial.any(axis=0)


@dataclass(frozen=True)
class Invariants:
    """Exactly published facts the output must reproduce (outside the privacy budget)."""

    housing_units: np.ndarray      # (n_blocks,) int64
    gq_facilities: np.ndarray      # (n_blocks, 7) int64, GQ types 1..7
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


def household_persons(persons_schema: Schema, block_histograms) -> np.ndarray:
    """Household persons per block of a persons release (hhgq cell 0), for the units' `household_persons` rule."""
    column = np.asarray(persons_schema.query("hhgq").matrix[0].todense()).ravel()
    return np.asarray(block_histograms @ column).ravel().astype(np.int64)


def block_bounds(schema: Schema, invariants: Invariants) -> list[Bounds]:
    """The schema's constraint families as per-block bounds."""
    n_blocks = len(invariants.housing_units)
    families = []
    for c in schema.constraints:
        size = schema.query(c.query).size
        lower = np.zeros((n_blocks, size), dtype=np.int64)
        upper = np.full((n_blocks, size), np.inf)
        if c.kind == "facilities":
            if size != 8:
                raise ValueError(f"facilities constraint needs an 8-level hhgq query, got {c.query!r} ({size})")
            has = np.column_stack([invariants.housing_units > 0, invariants.gq_facilities > 0])
            lower[:, 1:] = has[:, 1:]
            upper[~has] = 0
        elif c.kind == "structural_zero":
            q = schema.query(c.query)
            for cell in c.cells:
                upper[:, int(np.ravel_multi_index(cell, q.shape))] = 0
        elif c.kind == "housing_units":
            lower[:, 0] = invariants.housing_units
            upper[:, 0] = invariants.housing_units
        elif c.kind == "household_persons":  # cell 0 of the units' detailed query: occupied
            if invariants.household_persons is None:
                raise ValueError(f"schema {schema.name}: the household_persons rule needs the persons release's "
                                 "household persons per block (post-process persons first)")
            hhp = np.asarray(invariants.household_persons, dtype=np.int64)
            lower[:, 0] = hhp > 0
            upper[:, 0] = np.minimum(hhp, invariants.housing_units)
        families.append(Bounds(c.query, lower, upper))
    return families


def level_bounds(
    schema: Schema, invariants: Invariants, geography: Geography, level: str,
    families: list[Bounds] | None = None,
) -> list[Bounds]:
    """Bounds for every geounit of `level`: block bounds summed up, plus the total invariant."""
    families = block_bounds(schema, invariants) if families is None else families
    result = []
    for f in families:
        lower = geography.aggregate(f.lower, level)
        with np.errstate(invalid="ignore"):
            upper = geography.aggregate(f.upper, level)
        result.append(Bounds(f.query, np.asarray(lower, dtype=np.int64), np.asarray(upper, dtype=float)))
    if level in invariants.total_population and schema.universe == "persons":
        total = invariants.total_population[level].astype(np.int64)[:, None]
        result.append(Bounds("total", total, total.astype(float)))
    return result


def holds(schema: Schema, bounds: list[Bounds], histograms) -> list[str]:
    """Violations (as text) of `bounds` by histograms (n_units x n_cells), for checks and tests."""
    problems = []
    for b in bounds:
        answers = np.asarray((histograms @ schema.query(b.query).matrix.T).todense()) \
            if hasattr(histograms, "tocsr") else histograms @ schema.query(b.query).matrix.T.toarray()
        low = answers < b.lower
        high = answers > b.upper
        for kind, bad in (("below its lower bound", low), ("above its upper bound", high)):
            if bad.any():
                unit, cell = np.argwhere(bad)[0]
                problems.append(f"{b.query} cell {cell} of geounit #{unit} is {kind} ({int(bad.sum())} cases)")
    return problems
