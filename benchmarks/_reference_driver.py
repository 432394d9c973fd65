"""Runs one reference implementation on one tract, inside the reference's own virtual environment.

Called by benchmarks/references.py as `<venv>/bin/python _reference_driver.py JOB.json`; it imports nothing
from das (the references' environments do not hold das). The job names the mechanism, the tract's records
(block, hhgq, votingage, hispanic, cenrace as integer codes) and its domain sizes, the guarantee given to the
reference in its own terms (an add/remove rho-zCDP budget, or a pure eps), the seed, the workload, and where
to write the synthetic records (an .npy array of the same five columns) and what was run (a .json).

Each reference is used as published, through its public entry point: Private-PGM's `mechanisms/mst.py`
`MST(data, epsilon, delta)` and `mechanisms/aim.py` `AIM(epsilon, delta).run(data, workload)`; SmartNoise
Synth's `MSTSynthesizer`, `AIMSynthesizer` and `MWEMSynthesizer` with a table transformer fitted on the public
domain (every code of every column), so no bound is read from the data.
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


def main(path: str) -> None:
    job = json.loads(Path(path).read_text())
    np.random.seed(job["seed"])
    import random

    random.seed(job["seed"])
    frame = pd.DataFrame(np.load(job["records"]), columns=list(ATTRS))
    t0 = time.perf_counter()
    run = private_pgm if job["mechanism"].startswith("private_pgm") else smartnoise
    records, used = run(job, frame, job["sizes"])
    np.save(job["out"], records)
    Path(job["out"]).with_suffix(".run.json").write_text(json.dumps({"seconds": time.perf_counter() - t0, **used}))


if __name__ == "__main__":
    main(sys.argv[1])
