"""The spine: the units the engine measures and solves at each level, as data (block -> unit).

"standard": every level a geocode prefix. "optimized" (issue 29, after Cumings-Menon et al.,
"Geographic Spines in the 2020 Census Disclosure Avoidance System"): the finest level above the
block (the block group in six levels, the tract in five) is re-cut inside its parent so that each
declared area (places, towns, voting districts) is a union of whole units. The release keeps the
standard geography; only the noisy measurements and the per-parent problems follow the spine.

Only public geography goes in: the block list and the declared area files, never a count.

>>> blocks = ["500010001001000", "500010001001001", "500010001002000", "500010001002001"]
>>> g = optimized(Geography.from_blocks(blocks), {"place": np.array(["A", "", "A", ""])})
>>> g.units("block_group").tolist(), g.labels("block_group").tolist()
(['50001000100.01', '50001000100.02', '50001000100.03'], ['50001000100.01', '50001000100.01', '50001000100.02', '50001000100.03'])
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from das.model.geography import Geography
from das.model.levels import COUNTY, LEVEL_DIGITS

SPINES = ("standard", "optimized")
_NO_AREA = "\x01"  # the key of a block in no declared area (then its standard unit keeps it apart)
_SEP = "\x1f"


def recut_level(levels: tuple[str, ...]) -> str:
    """The level the optimized spine re-cuts: the finest above the block, which must be below the county."""
    level = levels[-2]
    if LEVEL_DIGITS[level] <= LEVEL_DIGITS[COUNTY]:
        raise ValueError(f"an optimized spine re-cuts the level above the block inside the county; these levels "
                         f"{list(levels)} have none below the county")
    return level


def area_keys(geography: Geography, areas: Mapping[str, np.ndarray], level: str) -> np.ndarray:
    """Each block's cell of the declared areas: its area ids of every type together, or (in no area of
    any type) its standard unit at `level`, so blocks outside every area keep their standard units."""
    ids = [np.asarray(areas[t], dtype=object).astype(str) for t in sorted(areas)]
    if not ids:
        return _NO_AREA + geography.labels(level)
    keys = pd.Series(ids[0], dtype=object)
    for more in ids[1:]:
        keys = keys + _SEP + pd.Series(more, dtype=object)
    nowhere = np.logical_and.reduce([i == "" for i in ids])
    return np.where(nowhere, _NO_AREA + geography.labels(level), keys.to_numpy(dtype=str))


def optimized_units(geography: Geography, areas: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The re-cut level's unit of every block (aligned with the standard geography's sorted blocks): inside
    each parent, one unit per cell of the declared areas. A parent no area touches keeps its standard units
    and their codes; a touched parent's units are numbered `PARENT.NN` in the order of their first block."""
    if not geography.standard:
        raise ValueError("the optimized spine is made from the standard geography")
    level = recut_level(geography.levels)
    parent = geography.parent_level(level)
    parents = geography.labels(parent)
    keys = area_keys(geography, areas, level)
    cell, _ = pd.factorize(pd.Series(parents, dtype=object) + _SEP + pd.Series(keys, dtype=object))
    # cells are numbered in order of first appearance and blocks are sorted, so each parent's cells are
    # consecutive numbers: the ordinal inside the parent is the cell less the parent's first cell
    parent_index = geography.block_to_unit(parent)
    first_cell = np.full(geography.n_units(parent), np.iinfo(np.int64).max)
    np.minimum.at(first_cell, parent_index, cell)
    ordinal = cell - first_cell[parent_index] + 1
    touched = np.zeros(geography.n_units(parent), dtype=bool)
    touched[parent_index[~np.char.startswith(keys, _NO_AREA)]] = True
    width = max(2, len(str(int(ordinal.max())))) if len(ordinal) else 2
    numbered = pd.Series(parents, dtype=object) + "." + pd.Series(ordinal.astype(str)).str.zfill(width)
    codes = np.where(touched[parent_index], numbered.to_numpy(dtype=str), geography.labels(level))
    return {level: codes.astype(str)}


def optimized(geography: Geography, areas: Mapping[str, np.ndarray]) -> Geography:
    """The engine's geography under the optimized spine (blocks in the spine's order)."""
    return Geography.from_spine(geography.blocks, geography.levels, optimized_units(geography, areas))


def spine_geography(kind: str, geography: Geography, areas: Mapping[str, np.ndarray] | None) -> Geography:
    """The geography the engine runs on: `geography` itself for the standard spine."""
    if kind not in SPINES:
        raise ValueError(f"unknown spine {kind!r}; known: {list(SPINES)}")
    if kind == "standard":
        return geography
    return optimized(geography, areas or {})


def block_order(spine: Geography, standard: Geography) -> np.ndarray:
    """Positions in the standard (sorted) blocks of the spine's blocks: standard.blocks[order] == spine.blocks."""
    order = np.searchsorted(standard.blocks, spine.blocks)
    if not np.array_equal(standard.blocks[order], spine.blocks):
        raise ValueError("the spine's blocks are not the geography's")
    return order


def spine_table(spine: Geography) -> pd.DataFrame:
    """The spine as published: every block (sorted) and its unit at each level the spine gives."""
    order = np.argsort(spine.blocks, kind="stable")
    return pd.DataFrame({"GEOID": spine.blocks[order], **{lv: spine.spine[lv][order] for lv in spine.levels
                                                            if lv in spine.spine}})


def from_table(table: pd.DataFrame, levels: tuple[str, ...]) -> Geography:
    """The engine's geography from a published spine (`spine_table`'s frame: GEOID and a column per level)."""
    given = [lv for lv in levels if lv in table.columns]
    return Geography.from_spine(table["GEOID"].astype(str).to_numpy(), tuple(levels),
                                {lv: table[lv].astype(str).to_numpy() for lv in given})
