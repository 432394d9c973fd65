"""`privsyn`: PrivSyn (Zhang, Wang, Li, He, Chen 2021): DenseMarg selection, noisy marginals, GUM.

Geography: one run per tract on its full domain, the block one attribute among five (so block x
attribute pairs are candidates like any other).

Budget (exact), per tract: 1/20 for the tract total; of the rest, `SELECT_SHARE` measures the
dependency of every attribute pair, `InDif(a, b) = floor(sum |c(a,b) - c(a) c(b) / n|)` (integer),
with discrete Gaussian noise. One changed record moves each InDif by at most 6 (the counts term by
2, the product term by 4, the floor adds less than 1); removing or adding one, by at most 4. So the
m values together have squared L2 sensitivity 36 m within a tract, and a record moving between two
tracts costs 2 x 16 m / (2 sigma^2) < 36 m / (2 sigma^2): sigma^2 = 18 m / rho_select.
DenseMarg then picks pairs greedily (Algorithm 1 of the paper, as in Li's survey): add the pair
that most lowers E = the expected L1 noise error of every measured marginal (the one-way marginals,
which share the budget, and the chosen pairs), c_j sqrt(2 / (pi rho_j)) under das's sigma^2 = 1/rho_j
(the paper's sqrt(1 / (pi rho_j)) is for its sigma^2 = 1/(2 rho_j)), with the error-minimizing
allocation rho_j proportional to c_j^(2/3) (c_j cells), plus the noisy InDif of every pair not
chosen; stop when E no longer falls. That uses only noisy values (post-processing).
The chosen pairs and every one-way marginal are measured with discrete Gaussian noise, the rest of
the budget allocated in proportion to c_j^(2/3) (rounded to exact fractions that sum to it).
Post-processing: negative counts clipped, every marginal scaled to the noisy total; GUM (gradual
update) on the records: start from records drawn from the one-way marginals, then in each round
and for each marginal, move a share `alpha` of the excess of every over-full marginal cell to the
under-full ones (the moved records keep their other attributes), alpha decaying by rounds. Before
measuring, the chosen pairs are combined into larger cliques (Algorithm 2): the cliques of their
graph, largest first, each kept when it shares at most two attributes with those kept before and
has at most `COMBINE_CELLS` cells; a chosen pair inside a kept clique is measured through it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from itertools import combinations

import numpy as np

from das.mechanisms.base import Ledger, Plan, Public, Synthesis, SynthesisInput
from das.mechanisms.domain import Domain, fit_per_geounit, measure, noisy_total
from das.model.levels import TRACT
from das.privacy.sampler import discrete_gaussian

LEVEL = TRACT
TOTAL_SHARE = Fraction(1, 20)
SELECT_SHARE = Fraction(1, 10)
GUM_ROUNDS = 30
COMBINE_CELLS = 5000  # Algorithm 2's gamma: the largest combined clique (cells)
WEIGHT_GRID = 1000  # c^(2/3) weights rounded to multiples of 1/1000 (exact allocation after that)


def indif(counts: np.ndarray, domain: Domain, pair: tuple[str, str]) -> int:
    """floor(sum |c(a,b) - c(a) c(b) / n|), exactly (0 for an empty geounit)."""
    n = int(counts.sum())
    if n == 0:
        return 0
    index, size = domain.marginal(pair)
    joint = np.bincount(index, weights=counts, minlength=size).astype(np.int64).reshape(domain.factor_size(pair[0]), -1)
    return int(np.abs(n * joint - np.outer(joint.sum(axis=1), joint.sum(axis=0))).sum()) // n


def noise_error(weights: float, rho: float) -> float:
    """Expected L1 noise of marginals sharing `rho` in proportion to cells^(2/3) (weights = their sum of c_j^(2/3)).

    Marginal j gets rho_j = rho c_j^(2/3) / W, so under das's convention (sigma_j^2 = 1 / rho_j) its c_j cells
    err by c_j sqrt(2 / (pi rho_j)) in expectation; summed, W^(3/2) sqrt(2 / (pi rho)).
    """
    return weights ** 1.5 * math.sqrt(2 / (math.pi * rho)) if weights > 0 else 0.0


def dense_marg(noisy_indif: np.ndarray, cells: np.ndarray, rho: float, one_way: float = 0.0) -> list[int]:
    """Greedy DenseMarg (Algorithm 1): indices of the pairs chosen from noisy dependencies and sizes.

    The expected error of a choice is the noise of every measured marginal (the one-way marginals, whose
    cells^(2/3) sum to `one_way`, and the chosen pairs, all sharing `rho`) plus the noisy InDif of each
    pair left out; a pair is added while it lowers that.
    """
    chosen: list[int] = []
    remaining = set(range(len(cells)))
    weights = np.asarray(cells, dtype=float) ** (2 / 3)
    left_out = np.maximum(noisy_indif, 0).astype(float)

    def error(selection: list[int]) -> float:
        kept = np.ones(len(cells), dtype=bool)
        kept[selection] = False
        return noise_error(one_way + float(weights[selection].sum()), rho) + float(left_out[kept].sum())

    best = error([])
    while remaining:
        trials = {i: error(chosen + [i]) for i in sorted(remaining)}
        i = min(trials, key=trials.get)
        if trials[i] >= best:
            break
        best = trials[i]
        chosen.append(i)
        remaining.discard(i)
    return chosen


def combine(pairs: list[tuple[str, str]], domain: Domain, limit: int = COMBINE_CELLS) -> list[tuple[str, ...]]:
    """Algorithm 2: cliques (3+ attributes) of the chosen pairs' graph, largest first, each kept when it
    shares at most 2 attributes with those kept and fits `limit` cells; then the pairs not inside one."""
    edges = {frozenset(p) for p in pairs}
    nodes = [a for a in domain.names if any(a in p for p in pairs)]
    kept, covered = [], set()
    for size in range(len(nodes), 2, -1):
        for clique in combinations(nodes, size):
            if not all(frozenset(p) in edges for p in combinations(clique, 2)):
                continue
            if len(covered & set(clique)) <= 2 and np.prod([domain.factor_size(a) for a in clique]) <= limit:
                kept.append(clique)
                covered |= set(clique)
    inside = [p for p in pairs if any(set(p) <= set(c) for c in kept)]
    return kept + [p for p in pairs if p not in inside]


def allocate(rho: Fraction, sizes: list[int]) -> list[Fraction]:
    """rho split in proportion to size^(2/3), each weight rounded to the grid; exact, summing to rho."""
    weights = [Fraction(max(1, round(s ** (2 / 3) * WEIGHT_GRID)), WEIGHT_GRID) for s in sizes]
    total = sum(weights, Fraction(0))
    return [rho * w / total for w in weights]


def gum(targets: list[tuple[tuple[str, ...], np.ndarray]], domain: Domain, total: int, generator, *,
        rounds: int = GUM_ROUNDS) -> np.ndarray:
    """Gradual update: integer counts over the domain (records by cell) fitted to marginal targets
    (factors, target counts); the targets must include every one-way marginal."""
    shape = (domain.n_blocks, *domain.schema.shape)
    one_way = {factors[0]: target for factors, target in targets if len(factors) == 1}
    levels = [generator.choice(domain.factor_size(a), size=total, p=_probabilities(one_way[a])) for a in domain.names]
    records = np.ravel_multi_index(tuple(levels), shape).astype(np.int64)
    for r in range(rounds):
        alpha = 1.0 / (1 + r / 3)
        for factors, target in targets:
            index, size = domain.marginal(factors)
            current = np.bincount(index[records], minlength=size)
            excess = np.maximum(current - target, 0)
            move = np.floor(alpha * excess + 0.5).astype(np.int64)
            deficit = np.maximum(target - current, 0)
            n_move = int(min(move.sum(), np.floor(deficit.sum())))
            if n_move <= 0:
                continue
            # which records leave: in each over-full cell, `move` of its records at random
            order = generator.permutation(len(records))
            cell_of = index[records[order]]
            rank = _rank_within(cell_of)
            leaving = order[rank < move[cell_of]][:n_move]
            destination = generator.choice(size, size=len(leaving), p=deficit / deficit.sum())
            records[leaving] = _replace(records[leaving], destination, factors, domain)
    return np.bincount(records, minlength=domain.size).astype(np.int64)


def _probabilities(target: np.ndarray) -> np.ndarray | None:
    p = np.maximum(np.asarray(target, dtype=float), 0)
    return p / p.sum() if p.sum() > 0 else None


def _rank_within(groups: np.ndarray) -> np.ndarray:
    """Rank of each element among the elements of its group, in order of appearance."""
    order = np.argsort(groups, kind="stable")
    sorted_groups = groups[order]
    starts = np.r_[0, np.flatnonzero(np.diff(sorted_groups)) + 1]
    ranks_sorted = np.arange(len(groups)) - np.repeat(starts, np.diff(np.r_[starts, len(groups)]))
    ranks = np.empty(len(groups), dtype=np.int64)
    ranks[order] = ranks_sorted
    return ranks


def _replace(cells: np.ndarray, destination: np.ndarray, factors: tuple[str, ...], domain: Domain) -> np.ndarray:
    """Records `cells` with the attributes in `factors` set to marginal cell `destination` (others kept)."""
    shape = (domain.n_blocks, *domain.schema.shape)
    levels = list(np.unravel_index(cells, shape))
    new = np.unravel_index(destination, tuple(domain.factor_size(f) for f in factors))
    for f, value in zip(factors, new):
        levels[domain.names.index(f)] = value
    return np.ravel_multi_index(tuple(levels), shape)


@dataclass(frozen=True)
class Schedule:
    """PrivSyn's noise, the same in every geounit: the total, the InDif scores, the budget of the marginals."""

    sigma2_total: Fraction
    sigma2_select: Fraction  # of each pair's InDif score
    rho_measure: Fraction  # of the one-way and chosen marginals, allocated per geounit


def synthesize_unit(counts: np.ndarray, domain: Domain, schedule: Schedule, rng) -> tuple[np.ndarray, list]:
    """PrivSyn on one geounit: integer counts over its domain, and the pairs chosen."""
    rho_measure = schedule.rho_measure
    total = noisy_total(counts, schedule.sigma2_total, rng)
    pairs = list(combinations(domain.names, 2))
    noisy = np.array([indif(counts, domain, p) for p in pairs]) + discrete_gaussian(schedule.sigma2_select, len(pairs), rng)
    cells = np.array([domain.factor_size(a) * domain.factor_size(b) for a, b in pairs])
    one_way = sum(domain.factor_size(a) ** (2 / 3) for a in domain.names)
    chosen = [pairs[i] for i in dense_marg(noisy.astype(float), cells, float(rho_measure), one_way)]
    marginals = [(a,) for a in domain.names] + combine(chosen, domain)
    shares = allocate(rho_measure, [int(np.prod([domain.factor_size(f) for f in m])) for m in marginals])
    targets = []
    for factors, rho_j in zip(marginals, shares):
        measured = measure(counts, domain, factors, sigma2=1 / rho_j, rng=rng)
        clipped = np.maximum(measured.noisy, 0).astype(float)
        target = clipped * total / clipped.sum() if clipped.sum() > 0 else np.full(measured.size, total / measured.size)
        targets.append((factors, target))
    generator = np.random.default_rng(rng.uint64(4).tolist())  # post-processing randomness, from the same source
    return gum(targets, domain, total, generator), [list(m) for m in marginals[len(domain.names):]]


def plan(public: Public, ledger: Ledger) -> Plan:
    """TOTAL_SHARE for the total at `level`; of the rest, SELECT_SHARE for the m InDif scores (sigma^2 = 18 m /
    their rho), the remainder for the one-way and chosen marginals (allocated per geounit by cells^(2/3))."""
    level, m = public.level, math.comb(len(public.schema.names) + 1, 2)
    sigma2_total = ledger.gaussian(level, "total", public.budget * TOTAL_SHARE)
    rest = public.budget * (1 - TOTAL_SHARE)
    rho_select = rest * SELECT_SHARE
    sigma2_select = 18 * m / rho_select
    ledger.charge(level, "InDif of every attribute pair", rho_select, "discrete Gaussian", sigma2=sigma2_select,
                  cost="18 m / sigma^2: m values of squared sensitivity 36 each (docstring)")
    rho_measure = rest - rho_select
    ledger.charge(level, "one-way and chosen pair marginals", rho_measure, "discrete Gaussian",
                  allocation="proportional to cells^(2/3), per tract")
    return Plan(Schedule(sigma2_total, sigma2_select, rho_measure), {
        "level": level, "sigma2_indif": str(sigma2_select), "gum_rounds": GUM_ROUNDS, "combine_cells": COMBINE_CELLS})


def run(data: SynthesisInput, level: str | None = None) -> Synthesis:
    return fit_per_geounit(data, plan, synthesize_unit, preferred=LEVEL, level=level, details=("marginals",))


DETAILS = {"level": "parameter: the geounits fitted", "sigma2_indif": "parameter: the InDif scores' variance",
           "marginals": "selection: the pairs DenseMarg chose from noisy InDif scores",
           "gum_rounds": "parameter: GUM's rounds", "combine_cells": "parameter: the cell limit of a combined pair"}
