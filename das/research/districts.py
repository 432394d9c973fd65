"""Synthetic districts: areas off the geographic spine, for scoring a release where no area files are given.

A district is a run of adjacent blocks. Within each county (geocode digits 1-5), blocks are taken in geocode
order and cut into consecutive runs of about `size` persons: a run closes at the first block that brings its
population to `size` or more; the county's last run, when under half of `size`, joins the run before it (a
county of fewer than `size` / 2 persons is one district). Runs are not reset at tract or block-group
boundaries, so districts cut across tracts, as school districts, places and voting districts do. Every block
of a county is in exactly one district; a district never crosses a county. The construction reads only the
block list and the block populations it is given: a study passes the true ones (it is confidential anyway),
a benchmark can pass published counts. District ids are `<county>-<n>` (n from 1 within the county).

>>> blocks = ["440010001001000", "440010001001001", "440010002001000", "440030001001000"]
>>> district_index(blocks, [600, 500, 700, 40], size=1000).tolist()
[0, 0, 1, 2]
"""

from __future__ import annotations

import numpy as np

COUNTY_DIGITS = 5
DISTRICT_SIZES = {"district_1k": 1000, "district_5k": 5000}  # the default area types of das metrics and replicate


def district_index(blocks, population, *, size: int) -> np.ndarray:
    """Per block, the index (0, 1, ... in geocode order) of its district of about `size` persons."""
    blocks = np.asarray(blocks, dtype=str)
    population = np.asarray(population, dtype=np.int64).reshape(-1)
    if blocks.shape != population.shape:
        raise ValueError(f"{blocks.size} blocks but {population.size} populations")
    if size < 1 or (population.size and population.min() < 0):
        raise ValueError("district size must be positive and populations nonnegative")
    order = np.argsort(blocks, kind="stable")
    index = np.empty(blocks.size, dtype=np.int64)
    next_id, start = 0, 0
    for county_end in _county_ends(blocks[order]):
        runs = _runs(population[order[start:county_end]], size)
        index[order[start:county_end]] = next_id + runs
        next_id += int(runs[-1]) + 1 if runs.size else 0
        start = county_end
    return index


def _county_ends(sorted_blocks: np.ndarray) -> list[int]:
    """Where each county's blocks end in a geocode-sorted block list (exclusive)."""
    counties = np.array([b[:COUNTY_DIGITS] for b in sorted_blocks])
    if not counties.size:
        return []
    changes = np.flatnonzero(counties[1:] != counties[:-1]) + 1
    return [*changes.tolist(), counties.size]


def _runs(population: np.ndarray, size: int) -> np.ndarray:
    """Per block of one county (in order), its run: a run closes once it holds `size` persons; a last run under
    size / 2 joins the one before."""
    runs = np.empty(population.size, dtype=np.int64)
    run, held = 0, 0
    for i, persons in enumerate(population.tolist()):
        if held >= size:
            run, held = run + 1, 0
        runs[i] = run
        held += persons
    if run > 0 and held < size / 2:
        runs[runs == run] = run - 1
    return runs


def district_ids(blocks, index: np.ndarray) -> np.ndarray:
    """Per block, its district's id `<county>-<n>`, n counted from 1 within the county (in geocode order)."""
    blocks = np.asarray(blocks, dtype=str)
    counties = np.array([b[:COUNTY_DIGITS] for b in blocks])
    first = {}
    for county, district in sorted(zip(counties.tolist(), np.asarray(index).tolist())):
        first.setdefault(county, district)
    return np.array([f"{c}-{d - first[c] + 1}" for c, d in zip(counties.tolist(), np.asarray(index).tolist())])


def synthetic_districts(blocks, population) -> dict[str, np.ndarray]:
    """The default area types (DISTRICT_SIZES): type -> per-block district index."""
    return {name: district_index(blocks, population, size=size) for name, size in DISTRICT_SIZES.items()}
