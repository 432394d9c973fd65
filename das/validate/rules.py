"""`schema_constraints`: every rule of each schema holds at every block, das.model.rules giving the bounds from
the facts counted in the MDFs (housing units, GQ facilities, household persons). Every level's answers
and bounds are sums of the blocks', so the blocks holding them is every level holding them."""

from __future__ import annotations

import numpy as np
import pandas as pd

from das.model import rules
from das.model.schema import Schema
from das.validate.reading import blocks_in
from das.validate.registry import Check
from das.validate.release import GQ_FACILITY, GQ_TYPES, HOUSING_UNIT, OpenRelease, StateRows
from das.validate.report import Findings, Report, firsts, merged


def block_facts(mdf: pd.DataFrame, levels: pd.DataFrame, persons_schema: Schema, mdf_units: pd.DataFrame, *,
                universe: np.ndarray) -> rules.Invariants:
    """The published facts per block of the universe, counted from the two MDFs: housing units,
    GQ facilities by type, and the persons release's household persons (its `hhgq` cell 0)."""
    block = blocks_in(universe, mdf_units["geocode"])
    rtype = mdf_units["RTYPE"].astype(np.int64).to_numpy()
    gq = mdf_units["GQTYPE_PL"].astype(np.int64).to_numpy()
    n = len(universe)
    housing = np.bincount(block[rtype == HOUSING_UNIT], minlength=n)
    facility = (rtype == GQ_FACILITY) & (gq >= 1) & (gq <= GQ_TYPES)
    facilities = np.bincount(block[facility] * GQ_TYPES + gq[facility] - 1, minlength=n * GQ_TYPES).reshape(n, GQ_TYPES)
    household = None
    if "hhgq" in [r.name for r in persons_schema.recodes] + list(persons_schema.names):
        in_household = levels["hhgq"].to_numpy() == 0
        household = np.bincount(blocks_in(universe, mdf["geocode"])[in_household], minlength=n)
    return rules.Invariants(housing, facilities, {}, household)


def _breaches(schema: Schema, bounds: rules.Bounds, counts: np.ndarray, universe: np.ndarray) -> list[list[str]]:
    """The first blocks whose counts of a rule's query are below, and those above, its bounds, in words."""
    problems = []
    query = schema.query(bounds.query)
    for side, bad in zip(("below", "above"), rules.breaches(bounds, counts)):
        problems.append([])
        for b, c in np.argwhere(bad)[:5]:
            shown = " and ".join(f"{f} {schema.factor_labels(f)[v]!r}"
                                 for f, v in zip(query.factors, np.unravel_index(c, query.shape))) or "total"
            low, high = bounds.lower[b, c], bounds.upper[b, c]
            allowed = f"{low}..{high:g}" if np.isfinite(high) else f"at least {low}"
            problems[-1].append(f"block {universe[b]}: {shown} is {counts[b, c]}, {side} the {bounds.rule.kind} "
                                f"rule's {allowed} ({rules.describe(schema, bounds.rule, int(c))})")
    return problems


def rule_problems(release: str, records: pd.DataFrame, levels: pd.DataFrame, schema: Schema, *,
                  facts: rules.Invariants, universe: np.ndarray) -> tuple[str, list[list[str]] | str]:
    """Every rule of the schema (das.model.rules gives the bounds per block) against the release's own recount
    per block: (the check's name, per rule family and side its first 5 blocks out of bounds, in words; or
    why the bounds cannot be given)."""
    try:
        families = rules.block_bounds(schema, facts)
    except ValueError as e:
        return f"rules of schema {schema.name} ({release})", str(e)
    block = blocks_in(universe, records["geocode"])
    problems = []
    for bounds in families:
        query = schema.query(bounds.query)
        cell = (np.ravel_multi_index([levels[f].to_numpy() for f in query.factors], query.shape) if query.factors
                else np.zeros(len(records), dtype=np.int64))
        counts = np.bincount(block * query.size + cell, minlength=len(universe) * query.size)
        problems += _breaches(schema, bounds, counts.reshape(len(universe), query.size), universe)
    kinds = ", ".join(dict.fromkeys(c.kind for c in schema.constraints))
    return f"rules of schema {schema.name} ({release}: {kinds})", problems


def rules_state(rows: StateRows) -> list[tuple[str, list[list[str]] | str]]:
    """Every rule of both schemas at the shard's blocks (persons outside the universe are reported apart)."""
    inside = ~rows.persons["geocode"].isin(rows.outside).to_numpy()
    persons, levels = rows.persons[inside], rows.levels[inside]
    facts = block_facts(persons, levels, rows.persons_schema, rows.units, universe=rows.universe)
    found = [rule_problems("persons", persons, levels, rows.persons_schema, facts=facts, universe=rows.universe)]
    if rows.units_schema is not None:
        found.append(rule_problems("units", rows.housing, rows.unit_levels, rows.units_schema, facts=facts,
                                   universe=rows.universe))
    return found


def rules_merge(release: OpenRelease, parts: list[list[tuple[str, list[list[str]] | str]]]) -> Findings:
    """A state's findings from its shards': per schema, the first shard's reason the bounds cannot be given,
    else per rule family and side the first 5 blocks of them all (in geocode order)."""
    found = Findings()
    for i in range(len(parts[0])):
        mine = [part[i] for part in parts]
        reason = next((m for m in mine if isinstance(m[1], str)), None)
        if reason is not None:
            found.check(reason[0], [reason[1]])
        else:
            found.check(mine[0][0], [p for kind in firsts([m[1] for m in mine], 5) for p in kind])
    return found


def rules_combine(release: OpenRelease, parts: dict[str, Findings], report: Report, alongside=None) -> None:
    """Each rule family's line, as the states first name them, their problems merged in state order."""
    for name in dict.fromkeys(n for part in parts.values() for n in part.problems):
        report.check(name, merged(parts.values(), name))


RULES = Check("schema_constraints", rules_combine, state=rules_state, merge=rules_merge, needs=("units",))
