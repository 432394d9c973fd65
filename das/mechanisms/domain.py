"""The full domain of one geounit: (block within the geounit) x the schema's attributes.

Mechanisms that model a joint distribution (mwem, privbayes, privsyn) run once per geounit (a tract
by default) on this domain, with the block as one more attribute. Domain cells are numbered
block-major: cell = local_block * schema.size + schema cell.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import scipy.sparse as sp

from das.core.progress import bar
from das.mechanisms.base import Synthesis
from das.model.geography import Geography
from das.model.levels import BLOCK, BLOCK_GROUP, TRACT
from das.model.schema import Schema
from das.privacy.sampler import discrete_gaussian

MAX_DOMAIN_CELLS = 4_000_000  # per geounit: its domain as float64 is 32 MB


@dataclass(frozen=True)
class Domain:
    """Attributes ("block", then the schema's), their sizes, and marginal maps over the domain's cells."""

    schema: Schema
    n_blocks: int

    @property
    def names(self) -> tuple[str, ...]:
        return (BLOCK, *self.schema.names)

    @property
    def size(self) -> int:
        return self.n_blocks * self.schema.size

    def factor_size(self, name: str) -> int:
        return self.n_blocks if name == BLOCK else self.schema.factor_size(name)

    def levels(self, name: str) -> np.ndarray:
        """Level of attribute (or recode) `name` at every domain cell."""
        return _levels(self.schema, self.n_blocks, name)

    def marginal(self, factors: tuple[str, ...]) -> tuple[np.ndarray, int]:
        """(answer cell of every domain cell, number of answer cells) of the marginal over `factors`."""
        return _marginal(self.schema, self.n_blocks, tuple(factors))

    def expand(self, joint: np.ndarray) -> np.ndarray:
        """The joint over this domain's own cells (nothing merged: as it is)."""
        return joint


@functools.lru_cache(maxsize=32)
def _levels(schema: Schema, n_blocks: int, name: str) -> np.ndarray:
    cells = np.arange(schema.size)
    if name == BLOCK:
        return np.repeat(np.arange(n_blocks), schema.size)
    return np.tile(schema.levels_of(name, cells), n_blocks)


@functools.lru_cache(maxsize=32)
def _marginal(schema: Schema, n_blocks: int, factors: tuple[str, ...]) -> tuple[np.ndarray, int]:
    if not factors:
        return np.zeros(n_blocks * schema.size, dtype=np.int64), 1
    domain = Domain(schema, n_blocks)
    sizes = tuple(domain.factor_size(f) for f in factors)
    index = np.ravel_multi_index(tuple(_levels(schema, n_blocks, f) for f in factors), sizes)
    return index.astype(np.int64), int(np.prod(sizes))


@dataclass(frozen=True)
class Marginal:
    """One marginal of a geounit's domain measured with discrete Gaussian noise: its attributes, the map of the
    domain's cells onto its cells, its noisy answers (exact integers) and their variance. What mwem, privbayes,
    privsyn, mst and aim measure and fit (mst and aim hand it to mbi as its `LinearMeasurement`)."""

    factors: tuple[str, ...]
    index: np.ndarray
    size: int
    noisy: np.ndarray  # int64
    sigma2: Fraction

    @functools.cached_property
    def values(self) -> np.ndarray:
        """The noisy answers as floats (what a fit computes with)."""
        return self.noisy.astype(float)


def measure(counts: np.ndarray, domain, factors: tuple[str, ...], *, sigma2: Fraction, rng) -> Marginal:
    """The marginal of `counts` over `factors` (of a `Domain`, or one whose values are merged), plus discrete
    Gaussian noise of variance sigma2 on each of its cells."""
    index, size = domain.marginal(factors)
    truth = np.bincount(index, weights=counts, minlength=size).astype(np.int64)
    return Marginal(tuple(factors), index, size, truth + discrete_gaussian(sigma2, size, rng), sigma2)


def noisy_total(counts: np.ndarray, sigma2: Fraction, rng) -> int:
    """The geounit's total plus discrete Gaussian noise, clipped at zero: the scale every model-based mechanism fits."""
    return max(0, int(counts.sum()) + int(discrete_gaussian(sigma2, 1, rng)[0]))


def fitting_level(geography: Geography, schema: Schema, preferred: str = TRACT) -> str:
    """The geounit level a full-domain mechanism runs at: `preferred` (tract) when every geounit's
    domain fits in MAX_DOMAIN_CELLS, else the block group. Decided from public geography only."""
    from das.mechanisms.base import MechanismError

    tried = []
    for level in (preferred, BLOCK_GROUP):
        if level not in geography.levels or level in tried:
            continue
        tried.append(level)
        largest = int(np.bincount(geography.block_to_unit(level)).max()) if geography.n_blocks else 0
        if largest * schema.size <= MAX_DOMAIN_CELLS:
            return level
    raise MechanismError(f"no geounit level among {tried or [preferred, BLOCK_GROUP]} of this run keeps every "
                         f"domain (blocks x {schema.size} cells) within {MAX_DOMAIN_CELLS:,} cells")


def geounits(geography: Geography, level: str):
    """(geocode, its block indices) of every geounit at `level`, blocks in geocode order: a mechanism's loop over
    its geounits, counted by a progress bar on a terminal (das.core.progress)."""
    unit_of_block = geography.block_to_unit(level)
    order = np.argsort(unit_of_block, kind="stable")
    bounds = np.searchsorted(unit_of_block[order], np.arange(geography.n_units(level) + 1))
    codes = geography.units(level)
    units = [(str(codes[u]), order[bounds[u]:bounds[u + 1]]) for u in range(geography.n_units(level))]
    return bar(units, desc=f"synthesizing {level.replace('_', ' ')}s", unit=level.replace("_", " "), leave=False)


def unit_counts(histograms: sp.csr_matrix, block_index: np.ndarray) -> np.ndarray:
    """The geounit's true counts over its domain (flattened, block-major), int64."""
    return np.asarray(histograms[block_index].toarray(), dtype=np.int64).ravel()


def assemble(n_blocks: int, n_cells: int, parts: list[tuple[np.ndarray, np.ndarray]]) -> sp.csr_matrix:
    """Block histograms from per-geounit (block indices, flattened domain counts)."""
    rows, cols, vals = [], [], []
    for block_index, counts in parts:
        nz = np.flatnonzero(counts)
        rows.append(block_index[nz // n_cells])
        cols.append(nz % n_cells)
        vals.append(counts[nz])
    if not rows:
        return sp.csr_matrix((n_blocks, n_cells), dtype=np.int64)
    return sp.csr_matrix((np.concatenate(vals).astype(np.int64), (np.concatenate(rows), np.concatenate(cols))),
                         shape=(n_blocks, n_cells), dtype=np.int64)


@dataclass(frozen=True)
class Merged:
    """A geounit's domain with some attributes' values merged (MST's `compress_domain`): `mapping[a][v]` is the
    merged value of value v of attribute a. Marginal maps still index the original domain's cells, so the true
    counts need no recoding; `expand` spreads a joint over the merged domain evenly back over the original cells."""

    domain: Domain
    mapping: tuple[tuple[str, np.ndarray], ...]

    @property
    def names(self) -> tuple[str, ...]:
        return self.domain.names

    @property
    def n_blocks(self) -> int:
        return self.domain.n_blocks

    @property
    def size(self) -> int:
        return int(np.prod([self.factor_size(a) for a in self.names]))

    def factor_size(self, name: str) -> int:
        merged = dict(self.mapping)
        return int(merged[name].max()) + 1 if name in merged else self.domain.factor_size(name)

    def marginal(self, factors: tuple[str, ...]) -> tuple[np.ndarray, int]:
        """(merged answer cell of every original domain cell, number of merged answer cells)."""
        if not factors:
            return np.zeros(self.domain.size, dtype=np.int64), 1
        merged = dict(self.mapping)
        levels = [merged[f][self.domain.levels(f)] if f in merged else self.domain.levels(f) for f in factors]
        sizes = tuple(self.factor_size(f) for f in factors)
        return np.ravel_multi_index(tuple(levels), sizes).astype(np.int64), int(np.prod(sizes))

    def expand(self, joint: np.ndarray) -> np.ndarray:
        """A joint over the merged domain (as `marginal(names)` numbers it) spread evenly over the original cells."""
        index, size = self.marginal(self.names)
        multiplicity = np.bincount(index, minlength=size)
        return joint[index] / multiplicity[index]


def fit_per_geounit(data, plan: Callable, unit: Callable, *, preferred: str, level: str | None = None,
                    rounds: int | None = None, details: tuple[str, ...] = ()) -> Synthesis:
    """A mechanism that fits each geounit on its own (mwem, privbayes, privsyn, mst, aim, rap): its plan charged at
    `level` (default: the finest of `preferred`'s that fits, `fitting_level`), then `unit(counts, domain, schedule,
    rng)` on each geounit's true counts over its Domain with its own random stream (named by its geocode), the
    blocks' histograms assembled. With `details`, `unit` gives (counts, one value per name) and each name is
    published by geocode beside the plan's details. `data` is the SynthesisInput."""
    level = level or fitting_level(data.geography, data.schema, preferred)
    planned = plan(data.public(level, rounds), data.ledger)
    parts, found = [], {name: {} for name in details}
    for geocode, block_index in geounits(data.geography, level):
        got = unit(unit_counts(data.histograms, block_index), Domain(data.schema, len(block_index)), planned.schedule,
                   data.rng.spawn(geocode))
        out, *extra = got if details else (got,)
        parts.append((block_index, out))
        for name, value in zip(details, extra, strict=True):
            found[name][geocode] = value
    return Synthesis(assemble(data.geography.n_blocks, data.schema.size, parts), {**planned.details, **found})
