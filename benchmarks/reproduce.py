"""`das postprocess` of a published Vermont release (issue 39): its NMF post-processed again from the bundle's
public files alone, in a new process, beside the `das run` that made it (measurement, post-processing, outputs,
validation), both seeded and on the same workers: what reproducing a release costs against making it; and the other
estimators of the same NMF (`--estimator wls|nnls`) beside that reproduction."""

from __future__ import annotations

import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks._harness import Bench

ROOT = Path(__file__).resolve().parents[1]
SEED = 1
WORKERS = "2"


def _das(*args: str) -> dict:
    """A das command in a new process: wall and CPU seconds of its process tree."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", "import sys; from das.cli import main; sys.exit(main())", *args],
                          cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise RuntimeError(f"das {args[0]} exited {proc.returncode}: {proc.stderr.strip()[-300:]}")
    return {"seconds": seconds, "cpu_seconds": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)}


def _bundle() -> Path:
    """A seeded vt_demo release, published once and kept for the runs (made here, not timed)."""
    home = Path(tempfile.gettempdir()) / "das_bench_reproduce"
    bundle = home / f"vt_demo_seed{SEED}_bundle"
    if not (bundle / "manifest.sig").is_file():
        shutil.rmtree(home, ignore_errors=True)
        _das("run", "vt_demo", "--seed", str(SEED), "--out", str(home / "run"), "--workers", WORKERS, "-q")
        _das("publish", str(home / "run"), "--to", str(bundle), "-q")
    return bundle


def reproduce_vt() -> dict:
    bundle = _bundle()
    with tempfile.TemporaryDirectory() as tmp:
        return _das("postprocess", str(bundle), "--out", str(Path(tmp) / "again"), "--workers", WORKERS, "-q")


def _estimate_vt(estimator: str) -> dict:
    bundle = _bundle()
    with tempfile.TemporaryDirectory() as tmp:
        return _das("postprocess", str(bundle), "--out", str(Path(tmp) / estimator), "--estimator", estimator,
                    "--workers", WORKERS, "-q")


def estimate_vt_wls() -> dict:
    return _estimate_vt("wls")


def estimate_vt_nnls() -> dict:
    return _estimate_vt("nnls")


def run_vt() -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        return _das("run", "vt_demo", "--seed", str(SEED), "--out", str(Path(tmp) / "vt"), "--workers", WORKERS, "-q")


BENCHES = [
    Bench("reproduce.vt", "das postprocess of a published vt_demo release (Vermont, 626k persons, 18.7k blocks): its "
          "NMF post-processed again from the bundle's public files, outputs written and validated, in a new process, "
          "2 workers", reproduce_vt, key="seconds", repeats=3,
          references={"das run vt_demo (the release it reproduces: measured, post-processed, validated)": run_vt},
          target="below the das run that made the release (no measurement, no input read)"),
    Bench("estimate.vt.wls", "das postprocess --estimator wls of the published vt_demo release: the unconstrained WLS "
          "of its persons NMF, level by level, written as an estimate directory (block histograms, tables), "
          "2 workers", estimate_vt_wls, key="seconds", repeats=3,
          references={"das postprocess of the same bundle (TopDown, both releases)": reproduce_vt},
          target="a research estimate: measured, no target"),
    Bench("estimate.vt.nnls", "das postprocess --estimator nnls of the published vt_demo release: TopDown's per-parent "
          "least squares of its persons NMF without rounding, written as an estimate directory, 2 workers",
          estimate_vt_nnls, key="seconds", repeats=3,
          references={"das postprocess of the same bundle (TopDown, both releases)": reproduce_vt},
          target="a research estimate: measured, no target"),
]
