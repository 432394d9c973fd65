"""das as a library (issue 36): what a user's mistake costs before das says so, and what the report's
figures cost now that each is fitted to its text, beside main just before issue 36."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks._harness import Bench, code_at

ROOT = Path(__file__).resolve().parents[1]
BEFORE = "5f61c7f"  # main just before issue 36
MISTAKES = (  # a refused command each: rc 2 before anything is read or drawn
    ["run", "tiny", "--rho", "-1/2"], ["run", "tiny", "--workers", "0"], ["run", "nope"],
    ["replicate", "tiny", "--out", "{tmp}/s", "--runs", "0"], ["metrics", "{tmp}/missing"],
    ["synth", "tiny", "--mechanism", "nope"],
)
STUDY = ["replicate", "vt_grand_isle", "--runs", "3", "--seed", "1", "--workers", "1", "-q", "--out"]


def _das(argv: list[str], tree: Path, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "das.cli", *argv], cwd=cwd, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(tree)})


def _refusals(tree: Path) -> dict:
    """Wall seconds from start to rc 2 of each mistake in a new process (median), and of `import das`."""
    with tempfile.TemporaryDirectory() as tmp:
        seconds = []
        for argv in MISTAKES:
            t0 = time.perf_counter()
            done = _das([a.format(tmp=tmp) for a in argv], tree, tree)
            seconds.append(time.perf_counter() - t0)
            if done.returncode != 2 or "Traceback" in done.stderr:
                raise RuntimeError(f"das {' '.join(argv)}: rc {done.returncode}: {done.stderr[-300:]}")
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import das"], cwd=tree, check=True, env={**os.environ, "PYTHONPATH": str(tree)})
    return {"refusal_median_s": sorted(seconds)[len(seconds) // 2], "refusal_max_s": max(seconds),
            "import_das_s": time.perf_counter() - t0}


def _report(tree: Path) -> dict:
    """A Grand Isle study (3 replicates, TopDown / noisy / WLS), then `das report` of it: the report's seconds."""
    with tempfile.TemporaryDirectory() as tmp:
        study = Path(tmp) / "study"
        made = _das([*STUDY, str(study)], tree, tree)
        if made.returncode != 0:
            raise RuntimeError(f"das replicate: rc {made.returncode}: {made.stderr[-300:]}")
        t0 = time.perf_counter()
        drawn = _das(["report", str(study)], tree, tree)
        seconds = time.perf_counter() - t0
        if drawn.returncode != 0:
            raise RuntimeError(f"das report: rc {drawn.returncode}: {drawn.stderr[-300:]}")
        figures = len(list((study / "report").glob("*.png")))
    return {"seconds": seconds, "figures": figures}


def refusals() -> dict:
    return _refusals(ROOT)


def refusals_before() -> dict:
    with code_at(BEFORE) as tree:
        return _refusals(tree)


def report() -> dict:
    return _report(ROOT)


def report_before() -> dict:
    with code_at(BEFORE) as tree:
        return _report(tree)


BENCHES = [
    Bench("library.refusals", f"{len(MISTAKES)} refused commands (a negative --rho, --workers 0, an unknown spec, "
          "--runs 0, a missing run directory, an unknown mechanism), each a new process: wall seconds to rc 2 "
          "(median, largest) and of `import das`", refusals, key="refusal_median_s", repeats=3,
          references={f"main at {BEFORE}, before issue 36": refusals_before},
          target="a refusal as quick as before (the door checks and the error hierarchy import nothing heavy)"),
    Bench("library.report", "das report of a Grand Isle study (3 seeded replicates, TopDown, noisy, WLS): wall "
          "seconds to draw every figure, each now fitted to its text (wrapped titles, untangled ticks)", report,
          key="seconds", repeats=3, references={f"main at {BEFORE}, before issue 36": report_before},
          target="within 1.5x of before"),
]
