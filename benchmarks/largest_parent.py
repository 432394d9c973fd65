"""The largest county's tract problem alone (issue 26; docs/scale.md): built with das's own functions from a
big state written by scripts/make_big_state, solved and certified, with its time, memory and certificate.

    python -m benchmarks.largest_parent INPUT_DIR CHILDREN [--seed N]

INPUT_DIR holds a make_big_state output (spec.toml, persons/, units/). The problem is the county with the
most tracts, its first CHILDREN tracts as the children (the parent's counts their true sum: a run's parent
is the solved county, of about the same support), their tract-level noisy answers drawn with the spec's
variances, their bounds from their blocks' facts, one L2 pass. Printed (JSON): the problem's size, the
direct path's solve (seconds, CPU, the process's peak RSS over its baseline), the certificate of that
solution three ways, each as gap / (GAP_TOL x objective), above 1 failing: Frank-Wolfe's at the clipped
x (what das certified before issue 26), at the unclipped x, and the Fenchel dual at the solver's own
answer variables (what `certify` adds), and the Lagrangian bound at the solver's dual variables (what `certify`
tries first); then `solve_parent` whole (L2, rounding, checks) with its
certificate. Run each size in its own process, so the peak is the problem's.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np

from das.core.options import ExactParser


def _status_mb(name: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(name + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


def county_problem(input_dir: Path, children: int, seed: int = 2020):
    """The tract problem of the county with the most tracts, its first `children` tracts (see the module)."""
    from das.driver.pipeline import Pipeline
    from das.io.microdata import read_inputs
    from das.io.nmf import NoisyAnswers
    from das.model.geography import Geography
    from das.model.rules import Invariants, level_bounds
    from das.privacy.randomness import make_random_source
    from das.topdown.measure import noisy_answers, true_answers
    from das.topdown.problem import measured, parent_problem

    pipe = Pipeline.prepare(input_dir / "spec.toml", seed)
    schema = pipe.schemas["persons"]
    state = next((input_dir / "persons").glob("*.parquet"))
    inputs = read_inputs(state, next((input_dir / "units").glob("*.parquet")), schema, pipe.schemas.get("units"))
    geography = Geography.from_blocks(inputs.inventory.blocks, pipe.spec.levels)
    invariants = Invariants.from_inputs(inputs.inventory, inputs.person_histograms, geography)
    offsets = geography.child_ranges("county")
    county = int(np.argmax(np.diff(offsets)))
    lo = int(offsets[county])
    hi = lo + min(children, int(offsets[county + 1]) - lo)
    tracts = geography.aggregate(inputs.person_histograms, "tract")[lo:hi]
    geocodes = geography.units("tract")[lo:hi]
    rng = make_random_source(seed)
    answers = [NoisyAnswers(m.query, "tract", geocodes,
                            noisy_answers(true_answers(tracts, schema, m.query), m.sigma2,
                                          rng.spawn(f"persons/tract/{m.query}/0")), m.sigma2)
               for m in pipe.releases["persons"].allocation.level("tract")]
    bounds = level_bounds(schema, invariants, geography, level="tract", lo=lo, hi=hi)
    parent = np.asarray(tracts.sum(axis=0)).ravel().astype(np.int64)
    return parent_problem(schema, geography.units("county")[county], geocodes, parent, answers=measured(answers),
                          bounds=bounds, passes=pipe.spec.passes)


def _certificates(problem) -> dict:
    """The direct path's one pass, timed, and its certificate three ways (the module's docstring)."""
    from das.topdown import l2, matrices, optimality

    columns = matrices.variables(problem)
    terms = matrices.weighted_terms(problem, columns, problem.queries)
    parent = (matrices.parent_sum(problem, columns), problem.parent_counts.astype(float))
    bounds = matrices.bound_rows(problem, columns)
    stated = l2.Pass(terms, [], parent, bounds)
    base = _status_mb("VmRSS")
    t0, c0 = time.perf_counter(), time.process_time()
    point = l2.solve_point(stated, len(columns), matrices.scale_of([y for _, y, _ in terms], parent))
    figures = {"l2_seconds": time.perf_counter() - t0, "l2_cpu_seconds": time.process_time() - c0,
               "l2_peak_over_base_mb": _status_mb("VmHWM") - base, "variables": len(columns)}
    unclipped = point.answers[next(i for i, (a, _, _) in enumerate(terms) if a.shape[0] == len(columns)
                                   and (np.diff(a.indptr) == 1).all())] if terms else point.x
    cases = {"frank_wolfe_clipped": (point.x, None), "frank_wolfe_unclipped": (unclipped, None),
             "dual_at_answers": (point.x, point.answers)}
    for name, (x, answers) in cases.items():
        value, gap = optimality.certify(problem, columns, terms, x, parent_sums=parent[1], bounds=bounds, fixed=[],
                                   answers=answers)
        if answers is not None:  # the dual bound alone (certify keeps the better of it and Frank-Wolfe's)
            regions = optimality.regions_of(problem, columns, x, parent_sums=parent[1], bounds=bounds, fixed=[])
            value, gap = value, optimality.dual_gap(problem, columns, terms, [v - y for v, (_, y, _) in zip(answers, terms)],
                                                value=value, regions=regions, x_total=float(x.sum()))
        figures[f"{name}_gap"], figures[f"{name}_ratio"] = gap, gap / (optimality.GAP_TOL * max(value, 1.0))
    if point.lower is not None:  # the Lagrangian bound at the solver's own dual variables (tried first by certify)
        gap = max(0.0, value - point.lower)
        figures["lagrangian_gap"], figures["lagrangian_ratio"] = gap, gap / (optimality.GAP_TOL * max(value, 1.0))
    figures["objective"] = value
    figures["negative_answers"] = int((unclipped < 0).sum())
    return figures


def run(input_dir: Path, children: int, seed: int = 2020) -> dict:
    from das.topdown.solve import solve_parent

    t0 = time.perf_counter()
    problem = county_problem(input_dir, children, seed)
    figures = {"children": problem.n_children, "cells": problem.n_cells, "parent_persons": int(problem.parent_counts.sum()),

               "build_seconds": time.perf_counter() - t0}
    figures.update(_certificates(problem))
    base = _status_mb("VmRSS")
    t0, c0 = time.perf_counter(), time.process_time()
    solution = solve_parent(problem)
    figures.update({"solve_parent_seconds": time.perf_counter() - t0, "solve_parent_cpu_seconds": time.process_time() - c0,
                    "peak_rss_mb": _status_mb("VmHWM"), "solve_parent_base_mb": base,
                    **{f"certificate_{k}": v for k, v in solution.certificate.items()}})
    return figures


if __name__ == "__main__":
    parser = ExactParser()
    parser.add_argument("input", type=Path)
    parser.add_argument("children", type=int)
    parser.add_argument("--seed", type=int, default=2020)
    args = parser.parse_args()
    print(json.dumps(run(args.input, args.children, args.seed), sort_keys=True))
