"""`mst`: MST (McKenna, Miklau, Sheldon 2021) per tract, with Private-PGM's model (das/mechanisms/pgm.py).

Geography: one run per tract on its full domain, the block one attribute (as privbayes, privsyn).
Budget (exact): 1/20 for the tract total (the model's known total); the rest in thirds, as the
reference splits it: every one-way marginal (each a d-th of the third); d - 1 pairs forming a maximum
spanning tree, Kruskal-style, each edge chosen by the exact exponential mechanism among the pairs
joining two components (score: the L1 error, in units of 2^-16, of the independent model of the
noisy one-way marginals on that pair; Delta = 2 for a changed record, 1 = Delta/2 for an added or
removed one, so eps^2/8 each per tract, base.Ledger.exponential); the tree's pairs (each a (d-1)-th).
The model is fitted to convergence (pgm.FIT_TOL).

Not done as the reference does: its `compress_domain` merges the values of an attribute whose noisy
count is below 3 sigma into one before selecting and fitting, and its release samples records.
Here the full domain is fitted and the release is the model's expected counts, rounded.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from itertools import combinations

import numpy as np

from das.mechanisms.base import Synthesis, SynthesisInput, selection_eps
from das.mechanisms.domain import Domain, assemble, fitting_level, geounits, unit_counts
from das.mechanisms.pgm import FIT_DETAIL, SCORE_BITS, Model, l1_units, load_mbi, measure, noisy_total
from das.privacy.exponential import exponential_mechanism, exponential_rho

LEVEL = "tract"
TOTAL_SHARE = Fraction(1, 20)
ADD_REMOVE = Fraction(1, 2)  # an added or removed record moves an L1 error by at most 1 = Delta / 2


@dataclass(frozen=True)
class MstSchedule:
    """MST's noise, the same in every geounit: tract total, one-way marginals, each edge's selection, tree pairs."""

    sigma2_total: Fraction
    sigma2_one: Fraction
    eps: Fraction
    sigma2_two: Fraction


def spanning_tree(counts, domain: Domain, one_way: dict, *, total: int, eps: Fraction, rng) -> list[tuple[str, str]]:
    """d - 1 edges, each chosen by the exponential mechanism among the pairs joining two components."""
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
            scores.append(l1_units(truth, total * np.outer(one_way[a], one_way[b]).ravel()))
        a, b = pairs[exponential_mechanism(scores, eps, 2 << SCORE_BITS, rng)]
        component[root(a)] = root(b)
        edges.append((a, b))
    return edges


def mst_unit(counts, domain: Domain, schedule: MstSchedule, rng) -> tuple[np.ndarray, list]:
    """MST on one geounit: integer counts over its domain, and the tree's edges."""
    total = noisy_total(counts, schedule.sigma2_total, rng)
    model = Model(domain, total)
    one_way = {}
    for a in domain.names:
        noisy = measure(counts, domain, (a,), sigma2=schedule.sigma2_one, rng=rng)
        model.add((a,), noisy, schedule.sigma2_one)
        clipped = np.maximum(noisy, 0).astype(float)
        one_way[a] = clipped / clipped.sum() if clipped.sum() > 0 else np.full(len(noisy), 1 / len(noisy))
    edges = spanning_tree(counts, domain, one_way, total=total, eps=schedule.eps, rng=rng)
    for pair in edges:
        model.add(pair, measure(counts, domain, pair, sigma2=schedule.sigma2_two, rng=rng), schedule.sigma2_two)
    model.fit()
    return model.counts(), [list(e) for e in edges]


def run(data: SynthesisInput, level: str | None = None) -> Synthesis:
    load_mbi()
    level = level or fitting_level(data.geography, data.schema, LEVEL)
    ledger, schema = data.ledger, data.schema
    d = len(schema.names) + 1
    sigma2_total = ledger.gaussian(level, "total", data.budget * TOTAL_SHARE)
    third = data.budget * (1 - TOTAL_SHARE) / 3
    sigma2_one = ledger.gaussian(level, "one-way marginals", third) * d  # d marginals, third / d each
    eps = selection_eps(third / (d - 1))
    for i in range(1, d):
        ledger.exponential(level, f"select tree edge {i}", eps, Fraction(2), add_remove=ADD_REMOVE)
    rho_two = 2 * third - (d - 1) * exponential_rho(eps)
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
                      "sigma2_pairs": str(sigma2_two), "trees": trees, "estimator": FIT_DETAIL})


DETAILS = {"level": "parameter: the geounits fitted", "eps_select": "parameter: each selection's eps",
           "sigma2_one_way": "parameter: the one-way marginals' variance",
           "sigma2_pairs": "parameter: the chosen pairs' variance",
           "trees": "selection: the spanning trees the exponential mechanism chose",
           "estimator": "parameter: how the model is fitted"}
