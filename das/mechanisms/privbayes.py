"""`privbayes`: PrivBayes (Zhang, Cormode, Procopiuc, Srivastava, Xiao 2017) per tract.

Geography: one run per tract on its full domain, the block as the first attribute of the network
(fixed first, so its distribution is a measured marginal: block totals). Then, greedily, each
remaining attribute X with a parent set P of up to `DEGREE` attributes already in the network is
chosen by the exact exponential mechanism among all (X, P) whose joint table has at most
`MAX_CLIQUE` cells (a public rule on domain sizes). Score: the L1 distance of the pair from
independence, u(X, P) = (1/2) sum |c(x,p) - c(x) c(p) / n| (exact rational). Its sensitivity is 3
under a change of one record (n fixed: the counts term moves by 2, the product term by at most 4,
halved) and below 2 under adding or removing one (docs/mechanisms.md); Delta = 3. (PrivBayes's own
score, mutual information, has a sensitivity that depends on n, which is private here.)

Then every clique (X, P) is measured with discrete Gaussian noise (noisy conditionals): negative
counts clipped, normalized per parent value (a parent value with no mass takes X's noisy marginal).
The release is the network's joint distribution times the noisy tract total, rounded to integers
with that total (largest remainders): no sampling.

Budget (exact): 1/20 for the tract total; of the rest, `STRUCTURE_SHARE` for the d - 1 selections
(each eps^2/8: adding or removing a record moves the score by less than 2 = 2/3 x Delta, so a record
moving between tracts is covered, base.Ledger.exponential), the remainder split evenly over the
d clique measurements.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from itertools import combinations

import numpy as np

from das.mechanisms.base import Ledger, Plan, Public, Synthesis, SynthesisInput, selection_eps
from das.mechanisms.domain import Domain, fit_per_geounit, measure, noisy_total
from das.mechanisms.rounding import round_by_block
from das.model.levels import BLOCK, TRACT
from das.privacy.exponential import exponential_mechanism, exponential_rho

LEVEL = TRACT
DEGREE = 2
MAX_CLIQUE = 4096
TOTAL_SHARE = Fraction(1, 20)
STRUCTURE_SHARE = Fraction(3, 10)
SENSITIVITY = Fraction(3)
ADD_REMOVE = Fraction(2, 3)  # adding or removing a record moves the score by less than 2 = 2/3 x Delta


def independence_score(counts: np.ndarray, domain: Domain, child: str, parents: tuple[str, ...]) -> Fraction:
    """u = (1/2) sum_{x,p} |c(x,p) - c(x) c(p) / n|, exactly."""
    n = int(counts.sum())
    if n == 0 or not parents:
        return Fraction(0)
    index, size = domain.marginal((child, *parents))
    joint = np.bincount(index, weights=counts, minlength=size).astype(np.int64).reshape(domain.factor_size(child), -1)
    c_x, c_p = joint.sum(axis=1), joint.sum(axis=0)
    return Fraction(int(np.abs(n * joint - np.outer(c_x, c_p)).sum()), 2 * n)


def candidates(domain: Domain, chosen: list[str]) -> list[tuple[str, tuple[str, ...]]]:
    """(child, parents) pairs: child not yet in the network, parents a largest-possible subset of it."""
    out = []
    for child in domain.names:
        if child in chosen:
            continue
        for k in range(min(DEGREE, len(chosen)), -1, -1):
            sets = [p for p in combinations(chosen, k)
                    if domain.factor_size(child) * int(np.prod([domain.factor_size(a) for a in p])) <= MAX_CLIQUE]
            if sets:
                out += [(child, p) for p in sets]
                break
    return out


def conditional(noisy: np.ndarray, child_size: int) -> np.ndarray:
    """P(child | parents) from noisy joint counts (child-major), clipped; empty parent values take the marginal."""
    joint = np.maximum(noisy.reshape(child_size, -1).astype(float), 0.0)
    marginal = joint.sum(axis=1)
    marginal = marginal / marginal.sum() if marginal.sum() > 0 else np.full(child_size, 1 / child_size)
    mass = joint.sum(axis=0)
    cond = np.where(mass > 0, joint / np.where(mass > 0, mass, 1), marginal[:, None])
    return cond.ravel()


@dataclass(frozen=True)
class Schedule:
    """PrivBayes's noise, the same in every geounit: the total, each selection, each clique's measurement."""

    sigma2_total: Fraction
    eps: Fraction  # of each selection of an attribute and its parents
    sigma2s: tuple[Fraction, ...]  # of each clique's cells, in network order


def synthesize_unit(counts: np.ndarray, domain: Domain, schedule: Schedule, rng) -> tuple[np.ndarray, list]:
    """PrivBayes on one geounit: integer counts over its domain, and the network chosen."""
    eps, sigma2s = schedule.eps, schedule.sigma2s
    total = noisy_total(counts, schedule.sigma2_total, rng)
    network = [(BLOCK, ())]
    chosen = [BLOCK]
    while len(chosen) < len(domain.names):
        pairs = candidates(domain, chosen)
        scores = [independence_score(counts, domain, child, parents) for child, parents in pairs]
        child, parents = pairs[exponential_mechanism(scores, eps, SENSITIVITY, rng)]
        network.append((child, parents))
        chosen.append(child)
    probability = np.ones(domain.size)
    for (child, parents), sigma2 in zip(network, sigma2s):
        measured = measure(counts, domain, (child, *parents), sigma2=sigma2, rng=rng)
        probability *= conditional(measured.noisy, domain.factor_size(child))[measured.index]
    out = round_by_block(probability, domain.n_blocks, total)
    return out, [[child, list(parents)] for child, parents in network]


def plan(public: Public, ledger: Ledger) -> Plan:
    """TOTAL_SHARE for the total at `level`; of the rest, STRUCTURE_SHARE for the d - 1 selections, the remainder
    evenly over the d clique measurements (d: the schema's attributes and the block)."""
    level, d = public.level, len(public.schema.names) + 1
    sigma2_total = ledger.gaussian(level, "total", public.budget * TOTAL_SHARE)
    rest = public.budget * (1 - TOTAL_SHARE)
    eps = selection_eps(rest * STRUCTURE_SHARE / (d - 1))  # (d - 1) x eps^2/8 <= the structure's share
    for i in range(2, d + 1):
        ledger.exponential(level, f"select attribute {i} and its parents", eps, SENSITIVITY, add_remove=ADD_REMOVE)
    per_clique = (rest - (d - 1) * exponential_rho(eps)) / d
    sigma2s = [ledger.gaussian(level, f"measure clique {i}", per_clique) for i in range(1, d + 1)]
    return Plan(Schedule(sigma2_total, eps, tuple(sigma2s)), {
        "level": level, "degree": DEGREE, "max_clique": MAX_CLIQUE, "eps_select": str(eps),
        "sigma2_clique": str(sigma2s[0])})


def run(data: SynthesisInput, level: str | None = None) -> Synthesis:
    return fit_per_geounit(data, plan, synthesize_unit, preferred=LEVEL, level=level, details=("networks",))


DETAILS = {"level": "parameter: the geounits fitted", "degree": "parameter: the network's degree",
           "max_clique": "parameter: the largest clique", "eps_select": "parameter: each selection's eps",
           "sigma2_clique": "parameter: each conditional's variance",
           "networks": "selection: the networks the exponential mechanism chose"}
