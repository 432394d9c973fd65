"""`invariants`: the published total population holds in the MDF, at every level the manifest publishes it
(the nation and the states from the states' counts, the levels below the state from each state's own)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from das.model.levels import LEVEL_DIGITS, NATION, STATE
from das.validate.registry import Check
from das.validate.release import OpenRelease, StateRows
from das.validate.report import Report

POPULATION = "total population invariant (published)"


@dataclass
class Population:
    """A state's part: its persons records, and its persons in each published geounit below the state."""

    persons: int
    below: dict = field(default_factory=dict)  # (level, geocode) -> persons


def population_state(rows: StateRows) -> Population:
    """The shard's persons, and its persons in each published geounit below the state of its counties
    (counted on the distinct blocks: a state's records share few)."""
    persons = rows.persons
    out = Population(len(persons))
    blocks = persons["geocode"].astype("category") if len(persons) else persons["geocode"]
    names = pd.Series(np.asarray(blocks.cat.categories, dtype=str) if len(persons) else [], dtype=str)
    per_block = np.bincount(blocks.cat.codes.to_numpy(), minlength=len(names)) if len(persons) else np.zeros(0, int)
    for geo_level, totals in rows.release.published.items():
        k = LEVEL_DIGITS[geo_level]
        if k > LEVEL_DIGITS[STATE]:
            counts = pd.Series(per_block).groupby(names.str.slice(0, k).to_numpy()).sum() if len(names) else {}
            mine = [g for g in totals if g.startswith(rows.state)]
            out.below.update({(geo_level, g): int(counts.get(g, 0))
                              for g, held in zip(mine, rows.shard.holds(mine)) if held})
    return out


def population_merge(release: OpenRelease, parts: list[Population]) -> Population:
    """A state's part from its shards': persons added up, each geounit's count from the shard holding it."""
    return Population(sum(p.persons for p in parts), {key: n for p in parts for key, n in p.below.items()})


def population_combine(release: OpenRelease, parts: dict[str, Population], report: Report, alongside=None) -> None:
    """Every published total against the MDF's count of the geounit."""
    problems = []
    for geo_level, totals in release.published.items():
        count = ({"": sum(p.persons for p in parts.values())} if geo_level == NATION else
                 {state: p.persons for state, p in parts.items()} if geo_level == STATE else
                 {g: n for p in parts.values() for (lv, g), n in p.below.items() if lv == geo_level})
        for g, total in totals.items():
            if int(count.get(g, 0)) != int(total):
                problems.append(f"{geo_level} {g!r}: population {int(count.get(g, 0))} differs from the published "
                                f"invariant {total}")
    if not release.published:
        problems.append("the manifest publishes no total-population invariant")
    report.check(POPULATION, problems)


POPULATION_CHECK = Check("invariants", population_combine, state=population_state, merge=population_merge)
