"""Runs one reference implementation on one tract, inside the reference's own virtual environment.

Called by benchmarks/references.py as `<venv>/bin/python _reference_driver.py JOB.json`; it imports nothing
from das (the references' environments do not hold das). The job names the mechanism, the tract's records
(block, hhgq, votingage, hispanic, cenrace as integer codes) and its domain sizes, the guarantee given to the
reference in its own terms (an add/remove rho-zCDP budget, a pure eps, or the RAP reference's rho by its own
accounting and its noisy count's), the seed, the workload, and where to write the synthetic records (an .npy
array of the same five columns) and what was run (a .json).

Each reference is used as published, through its public entry point: Private-PGM's `mechanisms/mst.py`
`MST(data, epsilon, delta)` and `mechanisms/aim.py` `AIM(epsilon, delta).run(data, workload)`; SmartNoise
Synth's `MSTSynthesizer`, `AIMSynthesizer` and `MWEMSynthesizer` with a table transformer fitted on the public
domain (every code of every column), so no bound is read from the data; the RAP reference's `RAPpp` as its
main.py builds it for `--algorithm RAP`, on explicit marginal queries and at a noisy count (`amazon_rap`).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

ATTRS = ("block", "hhgq", "votingage", "hispanic", "cenrace")


def eps_for_rho(cdp_rho, rho: float, delta: float) -> float:
    """The largest eps whose rho by the reference's own conversion (`cdp_rho`) is at most `rho` (bisection)."""
    lo, hi = 1e-9, 1.0
    while cdp_rho(hi, delta) <= rho:
        hi *= 2
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if cdp_rho(mid, delta) <= rho else (lo, mid)
    return lo


def private_pgm(job: dict, frame: pd.DataFrame, sizes: list[int]) -> tuple[np.ndarray, dict]:
    sys.path.insert(0, str(Path(job["private_pgm"]) / "mechanisms"))
    from cdp2adp import cdp_rho
    from mbi import Dataset, Domain

    data = Dataset(frame, Domain(ATTRS, sizes))
    if job["mechanism"] == "private_pgm_mst":
        import mst

        eps = eps_for_rho(cdp_rho, job["rho"], job["delta"])
        synth = mst.MST(data, eps, job["delta"])
        used = {"epsilon": eps, "rho": cdp_rho(eps, job["delta"])}
    else:
        import aim

        eps = eps_for_rho(cdp_rho, job["rho"], job["delta"])
        mechanism = aim.AIM(eps, job["delta"])
        _, synth = mechanism.run(data, [(tuple(c), 1.0) for c in job["workload"]])
        used = {"epsilon": eps, "rho": mechanism.rho}
    return synth.df[list(ATTRS)].to_numpy(dtype=np.int64), used


def public_domain_mwem(sizes: list[int]):
    """SmartNoise's `MWEMSynthesizer` with two changes, neither to what it computes from the data's measurements.

    1. Its histogram spans the public domain (codes 0..size-1 of every column). As published, `fit` sizes the
       histogram from each column's smallest and largest value in the data (`_histogram_from_data_attributes`),
       a bound read outside its privacy accounting: on Grand Isle every person has hhgq 0, so it models 248 and
       192 of a tract's 2,016 detailed cells and releases exact zeros in the rest.
    2. Its multiplicative-weights step multiplies only the measured slice and keeps the histogram's scale as a
       factor, where the published loop builds a full-size mask and renormalizes the whole array for every
       slice: the same update (cells outside the slice are multiplied by exp(0) = 1, an underflow to 0 is
       treated as 1 as there), O(slice) instead of O(domain), without which the public domain takes hours a
       tract.
    """
    from snsynth.mwem import Histogram, MWEMSynthesizer

    class PublicDomainMWEM(MWEMSynthesizer):
        def _histogram_from_data_attributes(self, data, splits=()):
            out = []
            for split in splits:
                dims = [sizes[i] for i in split]
                for i in split:
                    self.mins_maxes[str(i)] = (0, sizes[i] - 1)
                    self.scale[str(i)] = 1
                histogram, bins = np.histogramdd(data[:, split], bins=dims, range=[(0, d) for d in dims])
                out.append(Histogram(histogram, dims, bins, split))
            return out

        def _multiplicative_weights(self, synth_hist, queries, m, hist, iterate):
            sum_a = np.sum(synth_hist)
            raw, raw_total = synth_hist.astype(float), float(np.sum(synth_hist))
            for _ in range(iterate):
                for qi in m:
                    for measurement, query in zip(m[qi], queries[qi].queries):
                        index = tuple(query.query)
                        part = raw.T[index]
                        inside = float(np.sum(part))
                        error = measurement - inside * (sum_a / raw_total)
                        multiplier = np.exp(error / (2.0 * sum_a))
                        multiplier = 1.0 if multiplier == 0.0 else multiplier
                        raw.T[index] = part * multiplier
                        raw_total += inside * (multiplier - 1.0)
                    raw *= sum_a / np.sum(raw)  # after each query: no drift of the total, no under- or overflow
                    raw_total = float(sum_a)
            return raw  # sums to sum_a, as the published step's result

    return PublicDomainMWEM


def smartnoise(job: dict, frame: pd.DataFrame, sizes: list[int]) -> tuple[np.ndarray, dict]:
    from snsynth.transform.label import LabelTransformer
    from snsynth.transform.table import TableTransformer
    from snsynth.utils import cdp_rho

    longest = max(sizes)
    public = pd.DataFrame({a: [v % s for v in range(longest)] for a, s in zip(ATTRS, sizes)})
    transformer = TableTransformer([LabelTransformer(nullable=False) for _ in ATTRS])
    transformer.fit(public)  # the public domain: every code of every column, nothing from the data
    name = job["mechanism"]
    if name == "smartnoise_mwem":
        synth = public_domain_mwem(sizes)(epsilon=job["epsilon"], iterations=job["iterations"])
        used = {"epsilon": job["epsilon"], "iterations": job["iterations"], "domain": "public"}
    else:
        eps = eps_for_rho(cdp_rho, job["rho"], job["delta"])
        if name == "smartnoise_mst":
            from snsynth.mst import MSTSynthesizer

            synth = MSTSynthesizer(epsilon=eps, delta=job["delta"])
        else:
            from snsynth.aim import AIMSynthesizer

            synth = AIMSynthesizer(epsilon=eps, delta=job["delta"], degree=3, max_cells=job["max_cells"])
        used = {"epsilon": eps, "rho": cdp_rho(eps, job["delta"])}
    synth.fit(frame.copy(), transformer=transformer, categorical_columns=list(ATTRS))
    records = synth.sample(len(frame)) if name == "smartnoise_mwem" else synth.sample()
    return np.asarray(pd.DataFrame(records).to_numpy(), dtype=np.int64).reshape(-1, len(ATTRS)), used


ONE, ZERO = -1, -2  # feature indices past the data's in the RAP reference's queries: a constant 1, a constant 0


def amazon_rap(job: dict, frame: pd.DataFrame, sizes: list[int]) -> tuple[np.ndarray, dict]:
    """The RAP reference (Amazon Science's relaxed-adaptive-projection, `--algorithm RAP`) on one tract.

    As its main.py builds RAP: `RAPpp` with one marginal-query module, `RAPppConfiguration` with its RAP settings
    (Adam, learning rate 0.003, iterations [1], sigmoid doublings [0]), num_generated_points relaxed rows; here
    `top_q` = K queries a round and `get_dp_select_epochs` = T rounds (its adaptive rounds: each selects top_q
    queries by report-noisy-max and measures with the Gaussian mechanism, then projects), given eps, its own
    conversion to rho at its delta 1/n^2. What differs from a published run, none of it in its privacy steps:

    1. The queries are das's tables (job["tables"], benchmarks/references.py `rap_tables`), each a marginal cut
       into slices: one query per value of the table's `each` attributes, its cells the `cells` attributes crossed,
       `where` fixed. Its `MarginalStatistics` builds every K-way marginal of the domain from its constructor, so
       `ExplicitMarginals` is a subclass whose constructor lays the given queries out as its own does (a query
       a padded array of one-hot feature indices, factor by cell, a cell the product of its factors), with one
       addition: the queries have one to four factors and its layout wants as many in all, so a missing factor
       is a column of ones appended beside its column of zeros (`compute_stat`).
    2. Its n, which it reads from the data and treats as public (every answer normalised by it, sensitivity 1/n,
       delta 1/n^2, as many records sampled), is n^: the count with Gaussian noise from its own
       `privacy_util.gaussian_mechanism` (sensitivity 1, job["total_rho"]), rounded (at least 1): `initialize`
       rescales its normalised answers from n to n^ and sets its n to n^.
    3. Records: its own sampling of the relaxed rows (`get_upsampled_dataset_from_relaxed`, run.py's 40 records
       a row, more if n^ needs them), of which n^ are drawn uniformly without replacement.
    """
    import itertools

    sys.path.insert(0, job["amazon_rap"])
    import jax
    import jax.numpy as jnp
    from dataloading.dataloading_util import get_upsampled_dataset_from_relaxed
    from dataloading.dataset import Dataset
    from dataloading.domain import Domain
    from mechanisms.rap_pp import RAPpp, RAPppConfiguration
    from modules.base_statistics import BaseQueryClass, Statistics
    from modules.marginal_queries import MarginalStatistics
    from privacy_budget_tracking import privacy_util

    seed, rounds, per_round = job["seed"], job["rounds"], job["per_round"]
    count = jnp.array([float(len(frame))])
    noisy = privacy_util.gaussian_mechanism(jax.random.fold_in(jax.random.PRNGKey(seed), 1), count, job["total_rho"], 1.0)
    n_hat = max(1, int(round(float(noisy[0]))))

    domain = Domain(ATTRS, sizes, [])
    features = domain.get_feature_indices_map()
    queries, labels = [], []
    for table in job["tables"]:
        for fixed in itertools.product(*(range(domain[a]) for a in table["each"])):
            factors = ([[features[a][v]] for a, v in zip(table["each"], fixed)]
                       + [[features[a][v]] for a, v in table["where"].items()] + [features[a] for a in table["cells"]])
            queries.append(list(itertools.product(*factors)))
            labels.append(table["name"] + "".join(f" {a}={v}" for a, v in zip(table["each"], fixed)))
    if len(queries) < rounds * per_round:  # fewer: its top-q would pick answered queries again
        raise ValueError(f"{len(queries)} queries, fewer than T K = {rounds * per_round}")
    if min(sizes) < 2:  # it takes an attribute of one value for a continuous one
        raise ValueError(f"domain sizes {sizes}: each must be at least 2")

    class ExplicitMarginals(MarginalStatistics):
        def __init__(self, domain, max_number_rows=1000):  # its chunks of rows: memory only
            Statistics.__init__(self)
            self.domain, self.max_number_rows = domain, max_number_rows
            self.K = max(len(q[0]) for q in queries)
            max_size = max(len(q) for q in queries)
            layout = np.full((len(queries) + 1, self.K, max_size), ZERO, dtype=np.int64)  # the last: its padding query
            for i, cells in enumerate(queries):
                layout[i, :, :len(cells)] = np.array([list(c) + [ONE] * (self.K - len(c)) for c in cells]).T
            self.marginal_size = np.array([len(q) for q in queries])
            self.mask_matrix = jnp.asarray(np.arange(max_size)[None, :] < np.append(self.marginal_size, 0)[:, None],
                                           dtype=int)
            self.queries = jnp.asarray(layout, dtype=int)
            self.workload = labels

        def compute_stat(self, D_zeroes, query_index):
            ones = jnp.ones((D_zeroes.shape[0], 1), dtype=D_zeroes.dtype)
            return super().compute_stat(jnp.hstack([D_zeroes, ones]), query_index)

    class Explicit(BaseQueryClass):
        def get_statistics(self, domain, seed=0):
            return ExplicitMarginals(domain)

    class AtNoisyCount(RAPpp):
        def initialize(self, dataset, seed):
            super().initialize(dataset, seed)
            for stat in self.STAT.values():
                stat.true_D_stats = stat.true_D_stats * (self.num_points / n_hat)
            self.num_points = n_hat

    config = RAPppConfiguration(iterations=[1], sigmoid_doubles=[0], optimizer_learning_rate=[0.003], top_q=per_round,
                                get_dp_select_epochs=lambda domain: rounds,
                                get_privacy_budget_weight=lambda domain: len(domain.get_cat_cols()), debug=False)
    rap = AtNoisyCount([config], [Explicit()], num_generated_points=job["relaxed"], name="RAP")
    delta = 1 / n_hat ** 2  # as its _train sets it
    eps = eps_for_rho(privacy_util.get_zcdp_parameter, job["rho"], delta)
    rap.initialize(Dataset(frame, domain), seed)
    rap.train(epsilon=eps, seed=seed)
    relaxed = rap.get_dprime()
    oversample = max(40, -(-n_hat // relaxed.shape[0]))
    sampled = get_upsampled_dataset_from_relaxed(relaxed, domain, oversample=oversample, seed=seed).df
    rows = sampled[list(ATTRS)].to_numpy(dtype=np.int64)
    records = rows[np.random.default_rng(seed).choice(len(rows), size=n_hat, replace=n_hat > len(rows))]
    return records, {"epsilon": eps, "rho": privacy_util.get_zcdp_parameter(eps, delta), "delta": delta,
                     "noisy_n": n_hat, "queries": len(queries), "max_cells": int(max(len(q) for q in queries)),
                     "selected": int((np.asarray(rap.private_selected_queries_idx[0]) >= 0).sum()),
                     "oversample": oversample}


def main(path: str) -> None:
    job = json.loads(Path(path).read_text())
    np.random.seed(job["seed"])
    import random

    random.seed(job["seed"])
    frame = pd.DataFrame(np.load(job["records"]), columns=list(ATTRS))
    t0 = time.perf_counter()
    run = (private_pgm if job["mechanism"].startswith("private_pgm") else amazon_rap
           if job["mechanism"].startswith("amazon_rap") else smartnoise)
    records, used = run(job, frame, job["sizes"])
    np.save(job["out"], records)
    Path(job["out"]).with_suffix(".run.json").write_text(json.dumps({"seconds": time.perf_counter() - t0, **used}))


if __name__ == "__main__":
    main(sys.argv[1])
