"""Bias research: 20 replicates of one real county on 2 cores, and the Vermont study's figures."""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from pathlib import Path

import pandas as pd

from benchmarks._harness import Bench

ROOT = Path(__file__).resolve().parents[1]
VT_STUDY = ROOT / "runs" / "bias_vt"  # scripts/bias_study writes it; this bench finishes or reuses it


def _bias_figures(out: Path, levels=("block", "tract", "county")) -> dict:
    """Headline accuracy and bias figures of a finished study (total population)."""
    pooled = pd.read_parquet(out / "metrics.parquet")
    bias = pd.read_parquet(out / "bias.parquet")
    figures = {}
    total = pooled[(pooled["query"] == "total") & (pooled["bin"] == "all")].set_index(["estimator", "level"])
    for estimator in ("topdown", "wls", "noisy"):
        for level in levels:
            if (estimator, level) in total.index:
                figures[f"mae_{level}_{estimator}"] = float(total.loc[(estimator, level), "mae"])
        if (estimator, "block") in total.index:
            figures[f"malpe_block_{estimator}"] = float(total.loc[(estimator, "block"), "malpe"])
    b = bias[(bias["query"] == "total") & (bias["level"] == "block")].set_index(["estimator", "bin"])
    for estimator in ("topdown", "wls"):
        for size, tag in (("0", "0"), ("1-9", "1_9"), ("10-99", "10_99"), ("100-999", "100_999")):
            if (estimator, size) in b.index:
                figures[f"bias_block_{tag}_{estimator}"] = float(b.loc[(estimator, size), "mean_error"])
                figures[f"t_block_{tag}_{estimator}"] = float(b.loc[(estimator, size), "t"])
    return figures


def county_replicates() -> dict:
    from das.research.replicate import Study, replicate_study

    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        meta = replicate_study(Study("al_perry", runs=20, seed=1), Path(tmp) / "perry", workers=2)
        seconds = time.perf_counter() - t0
        figures = _bias_figures(Path(tmp) / "perry", levels=("block", "tract"))
    per_rep = [t["total"] for t in meta["replicate_timings"]]
    return {"seconds": seconds, "seconds_per_replicate": seconds / 20,
            "replicate_cpu_s_median": statistics.median(per_rep), **figures}


def one_release() -> dict:
    """Reference: one whole `das run` of the same county (release files, validation), 2 workers."""
    from das.driver.run import run

    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        run("al_perry", Path(tmp) / "perry", seed=1, workers=2, progress=False)
        seconds = time.perf_counter() - t0
    return {"seconds": seconds * 20, "seconds_per_replicate": seconds}


def vt_study() -> dict:
    """The Vermont study of scripts/bias_study (20 seeded replicates, production budget): run or
    finish it, then report its figures; seconds per replicate are those measured when each ran."""
    from das.research.replicate import Study, replicate_study
    from das.research.report import build_report

    meta = replicate_study(Study("vt_demo", runs=20, seed=2020), VT_STUDY, workers=2)
    build_report(VT_STUDY)
    per_rep = [t["total"] for t in meta["replicate_timings"]]
    study = json.loads((VT_STUDY / "study.json").read_text())
    return {"replicates": float(study["replicates"]), "replicate_s_median": statistics.median(per_rep),
            **_bias_figures(VT_STUDY)}


BENCHES = [
    Bench("research.county_20_replicates",
          "20 seeded replicates of Perry County AL (10,588 persons, 511 blocks; production budget), TopDown + noisy + "
          "WLS scored at every level, 2 workers",
          county_replicates, key="seconds_per_replicate", repeats=3,
          references={"one whole `das run` of the county (x20 for `seconds`)": one_release},
          target="20 replicates of one real county on 2 cores, time per replicate"),
    Bench("research.vt_study",
          "Vermont (vt_demo, 18,660 blocks) at the production budget: 20 seeded replicates, TopDown / noisy / WLS "
          "(scripts/bias_study; report in runs/bias_vt/report)",
          vt_study, key="replicate_s_median", repeats=1,
          target=">= 20 replicates at the production-scale budget, with a report"),
]
