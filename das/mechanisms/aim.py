"""`aim`: AIM (McKenna, Mullins, Sheldon, Miklau 2022) per tract, annealed, with Private-PGM's model.

Geography: one run per tract on its full domain, the block one attribute (das/mechanisms/pgm.py).
Workload: every clique of up to three attributes within `MAX_CELLS` cells; the candidates are its
downward closure with AIM's weights w_r = sum over workload cliques W of |r & W|.

Budget (exact, das's convention): 1/20 measures the tract total (the model's known total); the rest,
B, runs AIM. As in the paper, T = 16 d rounds set the starting noise: a round's share rho_0 = B / T,
of which alpha = 9/10 measures (sigma^2 = 1 / (alpha rho_0)) and the rest selects
(eps = sqrt(8 (1 - alpha) rho_0)). Every one-way marginal is measured first at that sigma^2 (charged
up front). Then each round: select a clique by the exact exponential mechanism with AIM's score
w_r (||M_r(D) - M_r(model)||_1 - sqrt(2/pi) sigma n_r) (Delta = 2 max w for a changed record, half
that for an added or removed one: eps^2/8 per tract, base.Ledger.exponential), among the candidates
whose junction tree stays within `MAX_MODEL_MB` x (budget used / budget) or that the model already
holds; measure it; refit (warm-started, to convergence). Annealing: when the refit moved that
marginal by at most sqrt(2/pi) sigma n_r in L1, sigma is halved and eps doubled (the round costs four
times more). When what is left is less than two rounds, the last round takes all of it
(alpha of it measuring): every tract spends exactly B on its rounds.

Accounting: the number of rounds and their costs depend on earlier noisy outputs, so the rounds are
charged as one step of cost B, an adaptive composition under a privacy filter: each tract's rounds
add up to B whatever the data, and adaptively chosen zCDP costs that never exceed a fixed cap compose
to that cap (Feldman & Zrnic 2021, the Renyi filter at every order; the AIM paper's own privacy
argument). A record moving between tracts costs each of the two tracts at most half of each step
(1/(2 sigma^2) of a Gaussian's 1/sigma^2, (eps/2)^2/8 of a selection's eps^2/8), so B covers it too.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from itertools import combinations

import numpy as np

from das.mechanisms.base import Ledger, Plan, Public, Synthesis, SynthesisInput, check_add_remove, selection_eps
from das.mechanisms.domain import Domain, fit_per_geounit, measure, noisy_total
from das.mechanisms.pgm import FIT_DETAIL, FIT_TOL, SCORE_BITS, Model, l1_units, load_mbi
from das.model.levels import TRACT
from das.privacy.certificate import fraction_text
from das.privacy.exponential import exponential_mechanism, exponential_rho

LEVEL = TRACT
TOTAL_SHARE = Fraction(1, 20)
MAX_CELLS = 100_000  # the workload: cliques of up to three attributes within this many cells
ROUNDS_PER_ATTRIBUTE = 16  # AIM's T = 16 d: the starting noise of a round
ALPHA = Fraction(9, 10)  # a round's share for measuring
MAX_MODEL_MB = 80  # AIM's limit on the junction tree, scaled by the share of the budget used
ADD_REMOVE = Fraction(1, 2)  # an added or removed record moves a score by at most max w = Delta / 2


def candidates(domain: Domain) -> list[tuple[tuple[str, ...], int]]:
    """(clique, weight): the downward closure of all cliques of up to three attributes within the size limit."""
    workload = [c for k in (1, 2, 3) for c in combinations(domain.names, k)
                if np.prod([domain.factor_size(a) for a in c]) <= MAX_CELLS]
    return [(c, sum(len(set(c) & set(w)) for w in workload)) for c in workload]


@dataclass(frozen=True)
class AimSchedule:
    """AIM's budget, the same in every geounit: the total's noise, the one-way marginals', the rounds' budget B_r
    (each tract spends exactly that), the starting round noise and selection eps."""

    sigma2_total: Fraction
    sigma2_one: Fraction
    rounds_budget: Fraction
    sigma2_start: Fraction
    eps_start: Fraction
    budget: Fraction  # the whole AIM budget B (one-way marginals and rounds): the model-size limit's scale


@dataclass(frozen=True)
class Round:
    """One round's noise and selection eps."""

    sigma2: Fraction
    eps: Fraction

    @property
    def rho(self) -> Fraction:
        return 1 / self.sigma2 + exponential_rho(self.eps)


def last_round(remaining: Fraction) -> Round:
    """A round spending exactly `remaining`: alpha of it (up to eps's rounding) measuring."""
    eps = selection_eps((1 - ALPHA) * remaining)
    return Round(1 / (remaining - exponential_rho(eps)), eps)


def scores(counts, domain: Domain, model: Model, options, *, sigma2: Fraction) -> list[int]:
    """AIM's score of every candidate, in integer units of 2^-16 (the model and the penalty are public)."""
    joint = model.joint()
    sigma = math.sqrt(float(sigma2))
    out = []
    for clique, weight in options:
        index, size = domain.marginal(clique)
        truth = np.bincount(index, weights=counts, minlength=size)
        estimate = np.bincount(index, weights=joint, minlength=size)
        penalty = round(math.sqrt(2 / math.pi) * sigma * size * (1 << SCORE_BITS))
        out.append(weight * (l1_units(truth, estimate) - penalty))
    return out


def allowed(options, model: Model, used: Fraction, budget: Fraction) -> list:
    """The candidates AIM may choose: within the model-size limit scaled by the budget used, or already covered."""
    held = [m.clique for m in model.measurements]
    covered = {tuple(c) for h in held for k in range(1, len(h) + 1) for c in combinations(h, k)}
    limit = MAX_MODEL_MB * float(used / budget)
    return [(c, w) for c, w in options if c in covered or model.model_size_mb(held + [c]) <= limit]


def aim_unit(counts, domain: Domain, schedule: AimSchedule, rng) -> tuple[np.ndarray, list]:
    """AIM on one geounit: integer counts over its domain, and its rounds (clique, sigma^2, eps)."""
    model = Model(domain, noisy_total(counts, schedule.sigma2_total, rng))
    for a in domain.names:
        model.add(measure(counts, domain, (a,), sigma2=schedule.sigma2_one, rng=rng))
    model.fit()
    options = candidates(domain)
    max_weight = max(w for _, w in options)
    current, used, rounds, last = Round(schedule.sigma2_start, schedule.eps_start), Fraction(0), [], False
    while not last:
        if schedule.rounds_budget - used < 2 * current.rho:
            current, last = last_round(schedule.rounds_budget - used), True
        used += current.rho
        choice = allowed(options, model, schedule.budget - schedule.rounds_budget + used, schedule.budget)
        clique, _ = choice[exponential_mechanism(scores(counts, domain, model, choice, sigma2=current.sigma2), current.eps,
                                                 2 * max_weight << SCORE_BITS, rng)]
        before = model.marginal(clique)
        model.add(measure(counts, domain, clique, sigma2=current.sigma2, rng=rng))
        model.fit()
        rounds.append({"clique": list(clique), "sigma2": fraction_text(current.sigma2), "eps": fraction_text(current.eps)})
        moved = float(np.abs(model.marginal(clique) - before).sum())
        if not last and moved <= math.sqrt(2 / math.pi) * math.sqrt(float(current.sigma2)) * before.size:
            current = Round(current.sigma2 / 4, current.eps * 2)  # anneal: sigma halved, eps doubled
    model.fit(FIT_TOL / 10)
    return model.counts(), rounds


def plan(public: Public, ledger: Ledger) -> Plan:
    """Charge AIM's steps (total, one-way marginals, the filtered rounds) at `level`; schedule: their noise."""
    level, d = public.level, len(public.schema.names) + 1
    sigma2_total = ledger.gaussian(level, "total", public.budget * TOTAL_SHARE)
    budget = public.budget * (1 - TOTAL_SHARE)
    per_round = budget / (ROUNDS_PER_ATTRIBUTE * d)
    sigma2_start, eps_start = 1 / (ALPHA * per_round), selection_eps((1 - ALPHA) * per_round)
    sigma2_one = ledger.gaussian(level, "one-way marginals", d / sigma2_start) * d  # d marginals at sigma2_start
    rounds_budget = budget - d / sigma2_start
    check_add_remove(ADD_REMOVE, "AIM's selections")
    ledger.charge(level, "adaptive rounds (select and measure, annealed)", rounds_budget,
                  "exponential mechanism and discrete Gaussian, under a privacy filter",
                  sigma2_start=sigma2_start, eps_start=eps_start, alpha=ALPHA, sensitivity="2 max_r w_r (per tract)",
                  cost="the filter's cap: every tract's rounds (each 1/sigma^2 + eps^2/8, annealed as AIM does, the "
                       "last taking what is left) add up to exactly this")
    return Plan(AimSchedule(sigma2_total, sigma2_one, rounds_budget, sigma2_start, eps_start, budget), {
        "level": level, "initial_rounds": ROUNDS_PER_ATTRIBUTE * d, "sigma2_one_way": str(sigma2_one),
        "sigma2_start": str(sigma2_start), "eps_start": str(eps_start), "estimator": FIT_DETAIL, "annealing": True})


def run(data: SynthesisInput, level: str | None = None) -> Synthesis:
    load_mbi()
    return fit_per_geounit(data, plan, aim_unit, preferred=LEVEL, level=level, details=("rounds",))


DETAILS = {"level": "parameter: the geounits fitted", "initial_rounds": "parameter: AIM's T = 16 d (the starting noise)",
           "sigma2_one_way": "parameter: the one-way marginals' variance",
           "sigma2_start": "parameter: the first round's variance", "eps_start": "parameter: the first round's eps",
           "rounds": "selection: each tract's rounds (the clique the exponential mechanism chose, its variance and eps, "
                     "annealed on noisy measurements)",
           "estimator": "parameter: how the model is fitted", "annealing": "parameter: whether the budget anneals"}
