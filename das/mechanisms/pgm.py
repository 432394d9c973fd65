"""`mst` and `aim`: select-measure-generate with Private-PGM (`mbi`, McKenna), an optional extra.

Install with `pip install 'das[mbi]'` (mbi 2 on PyPI, which brings JAX). Measurement and selection
use das's exact samplers and accountant; mbi's `MirrorDescent` estimates the graphical model from
the noisy marginals (the "generate" step, not rewritten here), and the release is the model's
distribution over the tract's full domain times the noisy total, rounded to integers with that total.

Geography: one run per tract on its full domain, the block one attribute (as privbayes, privsyn).
Budget (exact): 1/20 for the tract total (the model's known total), then:

- `mst` (McKenna, Miklau, Sheldon 2021): a third of the rest measures every one-way marginal; a
  third picks d - 1 pairs forming a maximum spanning tree, Kruskal-style, each edge chosen by the
  exact exponential mechanism among the pairs joining two components (score: the L1 error, in units
  of 2^-16, of the independent model of the noisy one-way marginals on that pair; Delta = 2 for a
  changed record; 2 x eps^2/8 each, a record moving between tracts); a third measures those pairs.
- `aim` (McKenna, Mullins, Sheldon, Miklau 2022), with a fixed number of rounds instead of AIM's
  budget annealing (so every tract spends the same schedule, charged once by parallel composition):
  a tenth of the rest measures the one-way marginals; each of `AIM_ROUNDS` rounds spends a tenth of
  its share selecting a marginal from the workload's downward closure (all cliques of up to three
  attributes within `AIM_MAX_CELLS`) by the exponential mechanism with AIM's score
  w_r (||M_r(D) - M_r(model)||_1 - sqrt(2/pi) sigma n_r) (weights w_r = sum over workload cliques of
  shared attributes; Delta = 2 max w_r), the rest measuring it; the model is re-estimated each round.
"""

from __future__ import annotations

import importlib.util
import math
from dataclasses import dataclass
from fractions import Fraction
from itertools import combinations

import numpy as np

from das.mechanisms.base import Synthesis, SynthesisInput, eps_below_sqrt, round_to_total
from das.mechanisms.domain import Domain, assemble, fitting_level, geounits, unit_counts
from das.privacy.exponential import exponential_mechanism
from das.privacy.sampler import discrete_gaussian

EXTRA = "mbi"
LEVEL = "tract"
TOTAL_SHARE = Fraction(1, 20)
SCORE_BITS = 16
ESTIMATE_ITERS = 300
AIM_ROUNDS = 5
AIM_MAX_CELLS = 100_000
AIM_ALPHA = Fraction(9, 10)  # AIM's share of a round for measuring


def available() -> bool:
    """Whether the optional extra is installed (mbi and JAX importable)."""
    return importlib.util.find_spec("mbi") is not None and importlib.util.find_spec("jax") is not None


def _mbi():
    if not available():
        from das.mechanisms.base import MechanismError

        raise MechanismError(f"mst and aim need the optional extra {EXTRA!r}: pip install 'das[{EXTRA}]'")
    import jax

    jax.config.update("jax_enable_x64", True)  # mbi warns that float32 can stall its estimation
    jax.config.update("jax_enable_compilation_cache", False)  # mbi: many small programs, the cache only costs
    import mbi

    return mbi


def _measure(counts: np.ndarray, domain: Domain, factors: tuple[str, ...], *, sigma2: Fraction, rng) -> np.ndarray:
    """The marginal of `counts` over `factors`, plus discrete Gaussian noise of variance sigma2."""
    index, size = domain.marginal(factors)
    return np.bincount(index, weights=counts, minlength=size).astype(np.int64) + discrete_gaussian(sigma2, size, rng)


def _l1_units(truth: np.ndarray, estimate: np.ndarray) -> int:
    """sum |truth - estimate| in integer units of 2^-16, the (public) estimate rounded to that grid."""
    scale = 1 << SCORE_BITS
    return int(np.abs(truth.astype(np.int64) * scale - np.rint(estimate * scale).astype(np.int64)).sum())


class _Model:
    """The noisy measurements of one tract and mbi's model of them."""

    def __init__(self, domain: Domain, total: int):
        self.mbi = _mbi()
        self.domain = domain
        self.total = total
        self.space = self.mbi.Domain(domain.names, tuple(domain.factor_size(a) for a in domain.names))
        self.measurements = []
        self.model = None

    def add(self, factors: tuple[str, ...], noisy: np.ndarray, sigma2: Fraction) -> None:
        self.measurements.append(self.mbi.LinearMeasurement(noisy.astype(float), factors,
                                                            stddev=math.sqrt(float(sigma2))))

    def fit(self, iters: int = ESTIMATE_ITERS) -> None:
        estimator = self.mbi.estimation.MirrorDescent()
        self.model = estimator.estimate(self.space, self.measurements, known_total=float(max(self.total, 1)),
                                        iters=iters, warm_start=self.model)

    def joint(self) -> np.ndarray:
        """The model over the whole domain (block-major, as `Domain`), nonnegative."""
        return np.maximum(np.asarray(self.model.project(self.domain.names).datavector(), dtype=float), 0)

    def counts(self) -> np.ndarray:
        joint = self.joint()
        scaled = joint * self.total / joint.sum() if joint.sum() > 0 else joint
        return round_to_total(scaled[None, :], np.array([self.total]))[0]


def _noisy_total(counts: np.ndarray, sigma2: Fraction, rng) -> int:
    return max(0, int(counts.sum()) + int(discrete_gaussian(sigma2, 1, rng)[0]))


# ---------------------------------------------------------------------------------------------
# MST


@dataclass(frozen=True)
class MstSchedule:
    """MST's noise, the same in every geounit: tract total, one-way marginals, each edge's selection, tree pairs."""

    sigma2_total: Fraction
    sigma2_one: Fraction
    eps: Fraction
    sigma2_two: Fraction


def mst_unit(counts, domain: Domain, schedule: MstSchedule, rng) -> tuple[np.ndarray, list]:
    """MST on one geounit: integer counts over its domain, and the tree's edges."""
    sigma2_one, eps, sigma2_two = schedule.sigma2_one, schedule.eps, schedule.sigma2_two
    total = _noisy_total(counts, schedule.sigma2_total, rng)
    model = _Model(domain, total)
    one_way = {}
    for a in domain.names:
        noisy = _measure(counts, domain, (a,), sigma2=sigma2_one, rng=rng)
        model.add((a,), noisy, sigma2_one)
        clipped = np.maximum(noisy, 0).astype(float)
        one_way[a] = clipped / clipped.sum() if clipped.sum() > 0 else np.full(len(noisy), 1 / len(noisy))
    component = {a: a for a in domain.names}

    def root(a):
        while component[a] != a:
            a = component[a]
        return a

    edges = []
    for _ in range(len(domain.names) - 1):
        pairs = [p for p in combinations(domain.names, 2) if root(p[0]) != root(p[1])]
        scores = []
        for a, b in pairs:
            index, size = domain.marginal((a, b))
            truth = np.bincount(index, weights=counts, minlength=size)
            scores.append(_l1_units(truth, total * np.outer(one_way[a], one_way[b]).ravel()))
        a, b = pairs[exponential_mechanism(scores, eps, 2 << SCORE_BITS, rng)]
        component[root(a)] = root(b)
        edges.append((a, b))
    for pair in edges:
        model.add(pair, _measure(counts, domain, pair, sigma2=sigma2_two, rng=rng), sigma2_two)
    model.fit()
    return model.counts(), [list(e) for e in edges]


def run_mst(data: SynthesisInput, level: str | None = None) -> Synthesis:
    _mbi()
    level = level or fitting_level(data.geography, data.schema, LEVEL)
    ledger, schema = data.ledger, data.schema
    d = len(schema.names) + 1
    sigma2_total = ledger.gaussian(level, "total", data.budget * TOTAL_SHARE)
    third = data.budget * (1 - TOTAL_SHARE) / 3
    sigma2_one = ledger.gaussian(level, "one-way marginals", third) * d  # d marginals, third / d each
    eps = eps_below_sqrt(4 * third / (d - 1))
    for i in range(1, d):
        ledger.exponential(level, f"select tree edge {i}", eps, Fraction(2), per_geounit=True)
    rho_two = 2 * third - (d - 1) * eps * eps / 4
    sigma2_two = ledger.gaussian(level, "tree pair marginals", rho_two) * (d - 1)
    schedule = MstSchedule(sigma2_total, sigma2_one, eps, sigma2_two)
    parts, trees = [], {}
    for geocode, block_index in geounits(data.geography, level):
        domain = Domain(schema, len(block_index))
        out, trees[geocode] = mst_unit(unit_counts(data.histograms, block_index), domain, schedule,
                                       data.rng.spawn(geocode))
        parts.append((block_index, out))
    return Synthesis(assemble(data.geography.n_blocks, schema.size, parts),
                     {"level": level, "eps_select": str(eps), "sigma2_one_way": str(sigma2_one),
                      "sigma2_pairs": str(sigma2_two), "trees": trees, "estimator": "mbi MirrorDescent"})


# ---------------------------------------------------------------------------------------------
# AIM (fixed rounds)


def aim_candidates(domain: Domain) -> list[tuple[tuple[str, ...], int]]:
    """(clique, weight): the downward closure of all cliques of up to three attributes within the size limit."""
    workload = [c for k in (1, 2, 3) for c in combinations(domain.names, k)
                if np.prod([domain.factor_size(a) for a in c]) <= AIM_MAX_CELLS]
    return [(c, sum(len(set(c) & set(w)) for w in workload)) for c in workload]


@dataclass(frozen=True)
class AimSchedule:
    """AIM's noise, the same in every geounit: tract total, one-way marginals, each round's selection and measurement."""

    sigma2_total: Fraction
    sigma2_one: Fraction
    eps: Fraction
    sigma2_round: Fraction
    rounds: int


def aim_unit(counts, domain: Domain, schedule: AimSchedule, rng) -> tuple[np.ndarray, list]:
    sigma2_one, eps, sigma2_round = schedule.sigma2_one, schedule.eps, schedule.sigma2_round
    total = _noisy_total(counts, schedule.sigma2_total, rng)
    model = _Model(domain, total)
    for a in domain.names:
        model.add((a,), _measure(counts, domain, (a,), sigma2=sigma2_one, rng=rng), sigma2_one)
    model.fit()
    candidates = aim_candidates(domain)
    max_weight = max(w for _, w in candidates)
    sigma = math.sqrt(float(sigma2_round))
    chosen = []
    for _ in range(schedule.rounds):
        scores = []
        joint = model.joint()
        for clique, weight in candidates:
            index, size = domain.marginal(clique)
            truth = np.bincount(index, weights=counts, minlength=size)
            estimate = np.bincount(index, weights=joint, minlength=size)
            penalty = round(math.sqrt(2 / math.pi) * sigma * size * (1 << SCORE_BITS))  # public, data-free
            scores.append(weight * (_l1_units(truth, estimate) - penalty))
        clique, _ = candidates[exponential_mechanism(scores, eps, 2 * max_weight << SCORE_BITS, rng)]
        model.add(clique, _measure(counts, domain, clique, sigma2=sigma2_round, rng=rng), sigma2_round)

        model.fit(ESTIMATE_ITERS // 3)  # warm-started
        chosen.append(list(clique))
    model.fit()
    return model.counts(), chosen


def run_aim(data: SynthesisInput, level: str | None = None, rounds: int = AIM_ROUNDS) -> Synthesis:
    _mbi()
    level = level or fitting_level(data.geography, data.schema, LEVEL)
    ledger, schema = data.ledger, data.schema
    d = len(schema.names) + 1
    sigma2_total = ledger.gaussian(level, "total", data.budget * TOTAL_SHARE)
    rest = data.budget * (1 - TOTAL_SHARE)
    sigma2_one = ledger.gaussian(level, "one-way marginals", rest / 10) * d
    per_round = rest * Fraction(9, 10) / rounds
    eps = eps_below_sqrt(4 * (1 - AIM_ALPHA) * per_round)
    sigma2_round = None
    for r in range(1, rounds + 1):
        ledger.exponential(level, f"round {r} select", eps, "2 max_r w_r (per tract)", per_geounit=True)
        sigma2_round = ledger.gaussian(level, f"round {r} measure", per_round - eps * eps / 4)
    schedule = AimSchedule(sigma2_total, sigma2_one, eps, sigma2_round, rounds)
    parts, chosen = [], {}
    for geocode, block_index in geounits(data.geography, level):
        domain = Domain(schema, len(block_index))
        out, chosen[geocode] = aim_unit(unit_counts(data.histograms, block_index), domain, schedule,
                                        data.rng.spawn(geocode))
        parts.append((block_index, out))
    return Synthesis(assemble(data.geography.n_blocks, schema.size, parts),
                     {"level": level, "rounds": rounds, "eps_select": str(eps), "sigma2_round": str(sigma2_round),
                      "chosen": chosen, "estimator": "mbi MirrorDescent", "annealing": False})


MST_DETAILS = {"level": "parameter: the geounits fitted", "eps_select": "parameter: each selection's eps",
               "sigma2_one_way": "parameter: the one-way marginals' variance",
               "sigma2_pairs": "parameter: the chosen pairs' variance",
               "trees": "selection: the spanning trees the exponential mechanism chose",
               "estimator": "parameter: how the model is fitted"}
AIM_DETAILS = {"level": "parameter: the geounits fitted", "rounds": "parameter: rounds of the schedule",
               "eps_select": "parameter: each selection's eps", "sigma2_round": "parameter: each round's variance",
               "chosen": "selection: the cliques the exponential mechanism chose", "estimator": MST_DETAILS["estimator"],
               "annealing": "parameter: whether the budget anneals"}
