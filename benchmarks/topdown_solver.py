"""One tract-sized parent (110 blocks x 300 cells) and a 60 x 150 parent: das vs a naive cvxpy way."""

from __future__ import annotations

import time

import cvxpy as cp
import numpy as np
import scipy.sparse as sp

from benchmarks._harness import Bench

TIME_LIMIT = 120.0  # seconds for the naive MILP rounding (it can run for many minutes)


def problem(n_children: int, n_cells: int, seed: int = 0):
    from fractions import Fraction

    from das.io.nmf import NoisyAnswers
    from das.topdown.problem import ParentProblem, QueryAnswers

    rng = np.random.default_rng(seed)
    truth = rng.poisson(1.5, size=(n_children, n_cells)) * (rng.random((n_children, n_cells)) < 0.3)
    truth[:, truth.sum(axis=0) == 0] += 0
    truth[0, truth.sum(axis=0) == 0] = 1
    n = n_cells
    g1 = rng.integers(0, 8, n)
    g2 = rng.integers(0, 63, n)
    queries = []
    children = np.array([str(i) for i in range(n_children)])
    for name, m, var in (("total", sp.csr_matrix(np.ones((1, n))), 400),
                         ("hhgq", sp.csr_matrix((np.ones(n), (g1, np.arange(n))), shape=(8, n)), 50),
                         ("cenrace", sp.csr_matrix((np.ones(n), (g2, np.arange(n))), shape=(63, n)), 20),
                         ("detailed", sp.identity(n, format="csr"), 2)):
        answers = truth @ m.T.toarray()
        noisy = answers + rng.normal(0, np.sqrt(var), answers.shape)  # real-valued: any answers the solver may get
        queries.append(QueryAnswers(m, NoisyAnswers(name, "tract", children, noisy, Fraction(var))))
    return ParentProblem("p", tuple(str(i) for i in range(n_children)), np.arange(n),
                         truth.sum(axis=0).astype(np.int64), np.ones((n_children, n), bool),
                         tuple(queries), None, passes=((),))


def tight_objective(p) -> float:
    """The least-squares optimum by an independent formulation (per-child atoms, counts, Clarabel at gap 1e-12)."""
    from das.topdown import matrices, solve

    xs = [cp.Variable(p.n_cells, nonneg=True) for _ in range(p.n_children)]
    obj = sum(cp.sum_squares(q.matrix @ xs[c] - q.noisy.answers[c]) / float(q.noisy.variance)
              for c in range(p.n_children) for q in p.queries)
    cp.Problem(cp.Minimize(obj), [sum(xs) == p.parent_counts]).solve(solver="CLARABEL", **solve.TIGHT_CLARABEL)
    columns = matrices.variables(p)
    x = np.clip(np.concatenate([v.value for v in xs]), 0, None)[columns]
    return matrices.objective(matrices.weighted_terms(p, columns, p.queries), x)[0]


def _ours(n_children, n_cells) -> dict:
    from das.topdown import matrices, solve

    p = problem(n_children, n_cells)
    solve.solve_parent(problem(5, 20))  # import and solver warm-up
    t0 = time.perf_counter()
    solution = solve.solve_parent(p)
    seconds = time.perf_counter() - t0
    columns = matrices.variables(p)
    ours = matrices.objective(matrices.weighted_terms(p, columns, p.queries), solution.l2.ravel()[columns])[0]
    tight = tight_objective(p)
    return {"seconds": seconds, "l2_s": solution.timings["l2"], "rounding_s": solution.timings["rounding"],
            "l2_objective": ours, "l2_rel_excess_over_tight": (ours - tight) / tight,
            "l2_certified_rel_gap": solution.certificate["max_rel_gap"]}


def _naive(n_children, n_cells) -> dict:
    """One cvxpy expression per child and query; rounding as a cvxpy MILP (HiGHS)."""
    p = problem(n_children, n_cells)
    t0 = time.perf_counter()
    xs = [cp.Variable(n_cells, nonneg=True) for _ in range(n_children)]
    obj = sum(cp.sum_squares(q.matrix @ xs[c] - q.noisy.answers[c]) / float(q.noisy.variance)
              for c in range(n_children) for q in p.queries)
    cp.Problem(cp.Minimize(obj), [sum(xs) == p.parent_counts]).solve(solver="CLARABEL")
    t1 = time.perf_counter()
    l2 = [np.clip(x.value, 0, None) for x in xs]
    bs = [cp.Variable(n_cells, boolean=True) for _ in range(n_children)]
    floors = [np.floor(v) for v in l2]
    err = sum(cp.sum(cp.abs(q.matrix @ (floors[c] + bs[c]) - q.matrix @ l2[c]))
              for c in range(n_children) for q in p.queries)
    milp = cp.Problem(cp.Minimize(err), [sum(f + b for f, b in zip(floors, bs)) == p.parent_counts])
    milp.solve(solver="HIGHS", time_limit=TIME_LIMIT)
    return {"seconds": time.perf_counter() - t0, "l2_s": t1 - t0, "rounding_s": time.perf_counter() - t1,
            "rounding_hit_time_limit": float(time.perf_counter() - t1 >= TIME_LIMIT)}


def tract_ours():
    return _ours(110, 300)


def tract_naive():
    return _naive(110, 300)


def small_ours():
    return _ours(60, 150)


def small_naive():
    return _naive(60, 150)


BENCHES = [
    Bench("solver.tract_110x300", "one parent: 110 children x 300 cells, queries total + hhgq-like (8) + "
          "cenrace-like (63) + detailed; least squares (certified) + rounding; the L2 objective against an "
          "independent tight solve", tract_ours, key="seconds",
          references={"naive cvxpy (per-child atoms, MILP rounding)": tract_naive}),
    Bench("solver.parent_60x150", "one parent: 60 children x 150 cells, same queries", small_ours, key="seconds",
          references={"naive cvxpy (per-child atoms, MILP rounding)": small_naive}),
]
