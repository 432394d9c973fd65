"""Persons post-processing of Vermont and Delaware from a seeded NMF: the direct nested Clarabel
least squares against the cvxpy reference path, CPU seconds side by side, and the L2 optima of
every parent compared between the two."""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

from benchmarks._harness import Bench, code_at

ROOT = Path(__file__).resolve().parents[1]
SEED = 1
REFERENCE = "cvxpy:CLARABEL"
BEFORE = "5c5631d"  # main just before issue 14: cvxpy on the hot path


def _nmf_dir(spec: str) -> Path:
    return Path(tempfile.gettempdir()) / "das_bench_postprocess" / f"{spec}_seed{SEED}" / "nmf"


def _inputs(spec: str):
    """(persons schema, geography, invariants, NMF directory, passes) of a seeded run; the NMF is measured once and kept."""
    from das.driver.pipeline import Pipeline
    from das.driver.run import measure_only

    out = _nmf_dir(spec).parent
    manifest = out / "manifest.json"
    if not manifest.is_file() or json.loads(manifest.read_text()).get("status") != "measured":
        measure_only(ROOT / f"specs/runs/{spec}.toml", out, seed=SEED, overwrite=True)
    pipe = Pipeline.prepare(ROOT / f"specs/runs/{spec}.toml", SEED)
    confidential = pipe.read_inputs()
    return pipe.schemas["persons"], confidential.geography, confidential.invariants, out / "nmf", pipe.spec.passes


def _postprocess(spec: str, solver: str) -> dict:
    """CPU and wall seconds of the persons post-processing in one process (no pool), and its certificate."""
    from das.topdown.engine import EngineOptions, postprocess
    from das.topdown.optimality import merge_certificates

    schema, geography, invariants, nmf_dir, passes = _inputs(spec)
    options = EngineOptions(workers=1, solver=solver, progress=False, passes=passes)
    c0, t0 = time.process_time(), time.perf_counter()
    solved, reports = postprocess("persons", schema, geography, invariants, nmf_dir=nmf_dir, options=options)
    figures = {"cpu_seconds": time.process_time() - c0, "seconds": time.perf_counter() - t0}
    certificate = merge_certificates(r.certificate for r in reports)
    figures.update({"l2_problems": certificate["problems"], "l2_max_rel_gap": certificate["max_rel_gap"],
                    "l2_retried": certificate["retried"], "l2_uncertified": certificate["uncertified"],
                    "persons": float(solved.sum())})
    for r in reports:
        figures[f"{r.level}_s"] = r.seconds
    return figures


def _tight_reference(problem) -> dict:
    """The cvxpy path with every pass retried at Clarabel's gap 1e-12 (GAP_TOL 0 forces the retry): the reference optimum."""
    from das.topdown import optimality, solve

    certificate, saved = optimality.new_certificate(), optimality.GAP_TOL
    optimality.GAP_TOL = 0.0
    try:
        solve.solve_l2(problem, REFERENCE, certificate)
    finally:
        optimality.GAP_TOL = saved
    return certificate


def _before(spec: str) -> dict:
    """The same persons post-processing with the package as it was at BEFORE (git archive), in a fresh interpreter."""
    import subprocess
    import sys

    _inputs(spec)  # the cached NMF, measured by this checkout (the NMF format did not change)
    with code_at(BEFORE) as tree:
        tmp = str(tree)
        code = f"""
import json, sys, time
sys.path.insert(0, {tmp!r})
import das
assert das.__file__.startswith({tmp!r})
from pathlib import Path
from das.run import prepare, read_confidential
from das.topdown.engine import EngineOptions, postprocess
prep = prepare(Path({str(tree / f"specs/runs/{spec}.toml")!r}), {SEED})
geography, invariants, _ = read_confidential(prep, {{}}, lambda *a, **k: None)
options = EngineOptions(workers=1, solver="CLARABEL", progress=False, passes=prep.spec.passes)
c0, t0 = time.process_time(), time.perf_counter()
solved, reports = postprocess("persons", prep.releases[0][2], geography, invariants,
                              Path({str(_nmf_dir(spec))!r}), options)
print("@@" + json.dumps({{"cpu_seconds": time.process_time() - c0, "seconds": time.perf_counter() - t0,
                          "persons": float(solved.sum()),
                          "l2_uncertified": sum(r.certificate.get("uncertified", 0) for r in reports)}}))
"""
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=tmp).stdout
    return json.loads(next(line[2:] for line in out.splitlines() if line.startswith("@@")))


def _agreement(spec: str) -> dict:
    """Every parent's L2 problem solved by both paths on the same input: the largest relative objective difference.

    The run follows the direct path; each parent it solves is also handed to the cvxpy path at tight
    tolerances (`_tight_reference`). The L2 CPU of the direct path is summed beside it.
    """
    from das.topdown import engine, optimality, solve

    schema, geography, invariants, nmf_dir, passes = _inputs(spec)
    found = {"max_rel_diff": 0.0, "parents_compared": 0, "direct_l2_cpu": 0.0, "direct_max_rel_gap": 0.0,
             "reference_max_rel_gap": 0.0}

    def compared(problem, **kwargs):
        c0 = time.process_time()
        mine = optimality.new_certificate()
        solve.solve_l2(problem, "CLARABEL", mine)
        found["direct_l2_cpu"] += time.process_time() - c0
        reference = _tight_reference(problem)
        diff = abs(mine["objective"] - reference["objective"]) / max(reference["objective"], 1.0)
        found["max_rel_diff"] = max(found["max_rel_diff"], diff)
        found["direct_max_rel_gap"] = max(found["direct_max_rel_gap"], mine["max_rel_gap"])
        found["reference_max_rel_gap"] = max(found["reference_max_rel_gap"], reference["max_rel_gap"])
        found["parents_compared"] += 1
        return original(problem, **kwargs)

    original = engine.solve_parent

    def maybe_compared(problem, **kwargs):
        trivial = (problem.parent_counts is not None and (problem.parent_counts.sum() == 0 or problem.n_children == 1)
                   or problem.n_cells == 0)
        return original(problem, **kwargs) if trivial else compared(problem, **kwargs)

    engine.solve_parent = solve.solve_parent = maybe_compared  # the root is solved through solve.solve_root
    try:
        options = engine.EngineOptions(workers=1, solver="CLARABEL", progress=False, passes=passes)
        engine.postprocess("persons", schema, geography, invariants, nmf_dir=nmf_dir, options=options)
    finally:
        engine.solve_parent = solve.solve_parent = original
    return {k: float(v) for k, v in found.items()}


def vt_direct():
    return _postprocess("vt_demo", "CLARABEL")


def vt_reference():
    return _postprocess("vt_demo", REFERENCE)


def vt_before():
    return _before("vt_demo")


def de_before():
    return _before("de")


def de_direct():
    return _postprocess("de", "CLARABEL")


def de_reference():
    return _postprocess("de", REFERENCE)


def vt_agreement():
    return _agreement("vt_demo")


def de_agreement():
    return _agreement("de")


REFERENCE_LABEL = "cvxpy:CLARABEL (same problem through cvxpy, this branch's problem building)"
BEFORE_LABEL = f"main at {BEFORE}, before issue 14 (today)"
TARGET = "persons post-processing CPU at most 1/2.5 of today's, L2 optima within 1e-6 relative"
BENCHES = [
    Bench("postprocess.vt_persons", f"persons post-processing of vt_demo (seed {SEED}, NMF measured once), one "
          "process: CPU seconds with the direct nested Clarabel least squares against the cvxpy path",
          vt_direct, key="cpu_seconds", repeats=3, references={REFERENCE_LABEL: vt_reference,
                                                          BEFORE_LABEL: vt_before},
          target=TARGET),
    Bench("postprocess.de_persons", f"persons post-processing of de (seed {SEED}), as postprocess.vt_persons",
          de_direct, key="cpu_seconds", repeats=3, references={REFERENCE_LABEL: de_reference,
                                                          BEFORE_LABEL: de_before},
          target=TARGET),
    Bench("postprocess.vt_l2_agreement", "every non-trivial parent of the vt_demo persons run (and its root) solved "
          "by the direct path and by the cvxpy path at gap 1e-12 on the same input: max relative L2 objective difference",
          vt_agreement,
          key="max_rel_diff", repeats=1, target="max_rel_diff <= 1e-6"),
    Bench("postprocess.de_l2_agreement", "as postprocess.vt_l2_agreement, on de", de_agreement,
          key="max_rel_diff", repeats=1, target="max_rel_diff <= 1e-6"),
]

if __name__ == "__main__":
    import sys

    print(json.dumps(globals()[sys.argv[1]](), indent=1))
