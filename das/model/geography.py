"""Geographic hierarchy: levels as geocode prefixes, the parent/child index, aggregation.

A block geocode has 15 digits: state 2 + county 3 + tract 6 + block 4 (the block group is the
block's first digit). A level is a prefix length, so with blocks sorted by geocode every
geounit's blocks, and every parent's children, are contiguous ranges. A spine (das.model.spine) may
give the units of the levels below the county as data instead: the blocks are then ordered by
those units (`Geography.from_spine`), so the ranges stay contiguous.

>>> g = Geography.from_blocks(["440010001001000", "440010001001001", "440030002002000"])
>>> g.units("county").tolist(), g.children_of("county", 0).tolist()
(['44001', '44003'], ['44001000100'])
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import scipy.sparse as sp

from das.model.levels import BLOCK, DEFAULT_LEVELS, LEVEL_DIGITS, NATION, STATE

GEOCODE_WIDTH = 15
# The block geocode as record columns (the MDF and the inputs): name and width, in geocode order.
GEOCODE_COLUMNS = (("TABBLKST", 2), ("TABBLKCOU", 3), ("TABTRACTCE", 6), ("TABBLK", 4))
BLOCK_GROUP_COLUMN = "TABBLKGRPCE"  # the first digit of TABBLK: written to the MDF, never needed on input


def level_digits(levels: tuple[str, ...]) -> tuple[int, ...]:
    """Prefix length of each level; levels must start at nation, end at block, and nest."""
    if isinstance(levels, str) or not levels:
        raise ValueError(f"expected a list of levels from nation to block, e.g. {list(DEFAULT_LEVELS)}")
    unknown = [lv for lv in levels if lv not in LEVEL_DIGITS]
    if unknown:
        raise ValueError(f"unknown geography level(s) {unknown}; known: {list(LEVEL_DIGITS)}")
    digits = tuple(LEVEL_DIGITS[lv] for lv in levels)
    if levels[0] != NATION or levels[-1] != BLOCK or list(digits) != sorted(set(digits)):
        raise ValueError(f"levels must run from nation to block, coarse to fine, without repeats: {levels}")
    return digits


@dataclass(frozen=True, eq=False)
class Geography:
    """The blocks of a run (sorted 15-digit geocodes) and the levels above them."""

    blocks: np.ndarray  # (n_blocks,) str, unique; sorted, or in the spine's order
    levels: tuple[str, ...] = DEFAULT_LEVELS
    spine: dict[str, np.ndarray] = field(default_factory=dict)  # level -> each block's unit, where not a prefix
    _unit_index: dict = field(default_factory=dict, repr=False)  # level -> (geocodes, block->unit)

    @classmethod
    def from_blocks(cls, blocks, levels: tuple[str, ...] = DEFAULT_LEVELS) -> Geography:
        level_digits(tuple(levels))
        blocks = np.asarray(blocks, dtype=f"U{GEOCODE_WIDTH}")
        bad = np.char.str_len(blocks) != GEOCODE_WIDTH
        if bad.any():
            raise ValueError(f"block geocode {blocks[bad][0]!r} is not {GEOCODE_WIDTH} digits")
        order = np.argsort(blocks, kind="stable")
        blocks = blocks[order]
        if len(blocks) > 1 and (blocks[1:] == blocks[:-1]).any():
            raise ValueError("block geocodes repeat")
        return cls(blocks=blocks, levels=tuple(levels))

    @classmethod
    def from_spine(cls, blocks, levels: tuple[str, ...], units: dict[str, np.ndarray]) -> Geography:
        """The blocks ordered by a spine: `units` gives, aligned with `blocks`, each block's unit (a code) at
        levels below the state; the other levels stay geocode prefixes. Units must nest in their parents."""
        standard = cls.from_blocks(blocks, levels)
        if not units:
            return standard
        wrong = [lv for lv in units if lv not in levels or LEVEL_DIGITS[lv] <= LEVEL_DIGITS[STATE] or lv == BLOCK]
        if wrong:
            raise ValueError(f"a spine gives the units of levels between the state and the block, not {wrong}")
        given = np.asarray(blocks, dtype=f"U{GEOCODE_WIDTH}")
        position = np.argsort(given, kind="stable")  # given[position] == standard.blocks
        codes = {lv: np.asarray(units[lv], dtype=str)[position] for lv in units}
        labels = [codes[lv] if lv in codes else standard.labels(lv) for lv in levels[1:-1]]
        order = np.lexsort((standard.blocks, *reversed(labels)))
        geography = cls(standard.blocks[order], tuple(levels), {lv: c[order] for lv, c in codes.items()})
        for parent, level in zip(levels[1:-2], levels[2:-1]):
            above, here = geography.labels(parent), geography.labels(level)
            crossing = (above[1:] != above[:-1]) & (here[1:] == here[:-1])  # a unit that runs on into the next parent
            found = geography.units(level)
            if crossing.any() or len(np.unique(found)) != len(found):
                raise ValueError(f"the spine's {level} units do not nest in the levels above (a unit in two parents)")
        return geography

    @property
    def n_blocks(self) -> int:
        return len(self.blocks)

    @property
    def standard(self) -> bool:
        """Whether every level is a geocode prefix (the blocks sorted by geocode)."""
        return not self.spine

    def labels(self, level: str) -> np.ndarray:
        """Each block's unit code at `level`: the spine's, or the geocode prefix."""
        if level in self.spine:
            return self.spine[level]
        return pd.Series(self.blocks).str.slice(0, LEVEL_DIGITS[level]).to_numpy(dtype=str)

    def _index(self, level: str) -> tuple[np.ndarray, np.ndarray]:
        if level not in self._unit_index:
            if level not in self.levels:
                raise KeyError(f"level {level!r} is not in this geography's levels {self.levels}")
            prefixes = self.labels(level)
            # Blocks in order give each unit's blocks together: a unit starts wherever the code changes.
            changes = prefixes[1:] != prefixes[:-1]
            starts = np.flatnonzero(np.r_[True, changes]) if len(prefixes) else np.array([], dtype=np.int64)
            block_to_unit = np.cumsum(np.r_[0, changes.astype(np.int64)]) if len(prefixes) else np.array([], dtype=np.int64)
            self._unit_index[level] = (prefixes[starts], block_to_unit.astype(np.int64))
        return self._unit_index[level]

    def units(self, level: str) -> np.ndarray:
        """Geocodes of the geounits at `level` (sorted; a spine's in its order)."""
        return self._index(level)[0]

    def n_units(self, level: str) -> int:
        return len(self.units(level))

    def block_to_unit(self, level: str) -> np.ndarray:
        """For each block, the index of its geounit at `level`."""
        return self._index(level)[1]

    def parent_level(self, level: str) -> str | None:
        i = self.levels.index(level)
        return self.levels[i - 1] if i > 0 else None

    def child_level(self, level: str) -> str | None:
        i = self.levels.index(level)
        return self.levels[i + 1] if i + 1 < len(self.levels) else None

    def parent_index(self, level: str) -> np.ndarray:
        """For each geounit at `level`, the index of its parent at the level above."""
        parent = self.parent_level(level)
        if parent is None:
            raise ValueError("the nation has no parent")
        first_block = np.searchsorted(self.block_to_unit(level), np.arange(self.n_units(level)))
        return self.block_to_unit(parent)[first_block]

    def child_ranges(self, level: str) -> np.ndarray:
        """Offsets (n_units + 1,): the children of unit i at the next level are [o[i], o[i+1])."""
        child = self.child_level(level)
        if child is None:
            raise ValueError("blocks have no children")
        return np.searchsorted(self.parent_index(child), np.arange(self.n_units(level) + 1))

    def children_of(self, level: str, unit: int) -> np.ndarray:
        """Geocodes of the children of geounit number `unit` at `level`."""
        o = self.child_ranges(level)
        return self.units(self.child_level(level))[o[unit] : o[unit + 1]]

    def aggregation_matrix(self, level: str) -> sp.csr_matrix:
        """(n_units x n_blocks) 0/1 matrix: row u sums the blocks of geounit u."""
        n = self.n_blocks
        return sp.csr_matrix(
            (np.ones(n, dtype=np.int64), (self.block_to_unit(level), np.arange(n))),
            shape=(self.n_units(level), n),
        )

    def aggregate(self, block_values, level: str):
        """Sum per-block rows (sparse or dense, n_blocks x k) to the geounits of `level`."""
        if level == BLOCK:
            return block_values
        result = self.aggregation_matrix(level) @ block_values
        return result.tocsr() if sp.issparse(result) else result


def block_geocodes(state, county, tract, block) -> np.ndarray:
    """Concatenate zero-padded geography columns into 15-digit block geocodes."""
    parts = [pd.Series(np.asarray(x), dtype="string") for x in (state, county, tract, block)]
    return (parts[0] + parts[1] + parts[2] + parts[3]).to_numpy(dtype=f"U{GEOCODE_WIDTH}")
