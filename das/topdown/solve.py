"""Solve one parent: weighted least squares (das.topdown.solvers), certified by its duality gap
(das.topdown.optimality), then integer rounding (das.topdown.rounding) and exact checks; or, with NO_ROUNDING (a
research estimator), the L2 point itself matched to the parent, in float64 (`rounding.unrounded`).

L2 (DESIGN.md section 6): minimise sum_q (1/var_q) ||Q_q x_c - y_c,q||^2 over x >= 0 with the
children summing exactly to the parent and every child bound held; multipass: the first pass
fits the pass-1 queries (`total`), the next pass holds each child's pass-1 answers where the
first pass put them (as equalities) and fits the rest. The problem's matrices are das.topdown.matrices'.

Failsafe: when a problem is infeasible as stated, the smallest total L1 relaxation of the parent
equality (or, at the root, of the bounds) is found by an LP, the problem is solved with that
slack, and a FailsafeEvent records where and how much.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from das.core.errors import SolverError
from das.io.nmf import NoisyAnswers
from das.topdown import l2, optimality
from das.topdown.matrices import bound_rows, parent_sum, queries_in_pass, query_rows, variables, weighted_terms
from das.topdown.problem import DEFAULT_PASSES, ChildAnswers, FailsafeEvent, ParentProblem, ParentSolution, measured, root_problem
from das.topdown.rounding import (
    DEFAULT_ROUNDING,
    NO_ROUNDING,
    check_counts,
    check_fractional,
    match_parent,
    round_l1,
    unrounded,
)
from das.topdown.solvers import DEFAULT_SOLVER, check_solver, highs_lp, least_squares

TIGHT_CLARABEL = l2.TIGHT_SETTINGS  # the retry of a solve whose certificate failed


class SolveError(SolverError):
    """A parent the solver could not answer consistently, even relaxed (the failsafe's last word)."""


def relaxation(problem, columns, parent, bounds, *, relax_bounds: bool):
    """Smallest total L1 relaxation (LP, HiGHS) of the parent equality and, if asked, the bounds.

    Returns (parent slack L1, bound slack L1, bounds widened just enough) or None if infeasible.
    """
    import cvxpy as cp

    x = cp.Variable(len(columns), nonneg=True)
    constraints, objective = [], []
    s_par = None
    if parent is not None:
        s_matrix, counts = parent
        s_par = cp.Variable(len(counts))
        objective.append(cp.norm1(s_par))
        constraints.append(s_matrix @ x - counts == s_par)
    b_matrix, lower, upper = bounds
    s_lo = s_hi = None
    if b_matrix is not None:
        lo = np.where(lower > 0, lower, 0.0)
        finite = np.isfinite(upper)
        hi = np.where(finite, upper, 0.0)
        if relax_bounds:
            s_lo = cp.Variable(len(lower), nonneg=True)
            s_hi = cp.Variable(len(upper), nonneg=True)
            objective += [cp.sum(s_lo), cp.sum(s_hi)]
            constraints.append(b_matrix @ x + s_lo >= lo)
            if finite.any():
                constraints.append(b_matrix[finite] @ x - s_hi[finite] <= hi[finite])
        else:
            constraints.append(b_matrix @ x >= lo)
            if finite.any():
                constraints.append(b_matrix[finite] @ x <= hi[finite])
    prob = cp.Problem(cp.Minimize(cp.sum(objective) if objective else 0), constraints)
    prob.solve(solver="HIGHS")
    if prob.status not in ("optimal", "optimal_inaccurate"):
        return None
    parent_slack = float(np.abs(s_par.value).sum()) if s_par is not None else 0.0
    if s_lo is None:
        return parent_slack, 0.0, bounds
    widen_lo, widen_hi = np.asarray(s_lo.value), np.asarray(s_hi.value)
    new_lower = np.floor(np.where(lower > 0, lower, 0.0) - widen_lo + 1e-9)
    new_upper = np.where(np.isfinite(upper), np.ceil(upper + widen_hi - 1e-9), np.inf)
    return parent_slack, float(widen_lo.sum() + widen_hi.sum()), l2.BoundRows(b_matrix, new_lower, new_upper)


def failsafe(problem, columns, parent, bounds):
    """Relax the parent equality minimally; if that cannot suffice, the bounds too."""
    relaxed = relaxation(problem, columns, parent, bounds, relax_bounds=False) if parent is not None else None
    if relaxed is None:
        relaxed = relaxation(problem, columns, parent, bounds, relax_bounds=True)
    if relaxed is None:
        raise SolveError(f"parent {problem.parent}: even the relaxed problem is infeasible")
    parent_slack, bound_slack, bounds = relaxed
    what = [name for name, amount in (("parent equality", parent_slack), ("child bounds", bound_slack)) if amount > 1e-9]
    event = FailsafeEvent(problem.parent, "l2", " and ".join(what) or "none", parent_slack + bound_slack,
                          f"children sum to the parent within L1 {parent_slack:.6g}; "
                          f"bounds widened by L1 {bound_slack:.6g}")
    budget = parent_slack + 1e-6 if parent is not None else None
    return bounds, budget, event


def certified_pass(problem, columns, stated: l2.Pass, solver: str, *, certificate: dict, index: int = 0,
                   integral: bool = True):
    """Solve pass `index`, check its duality gap, retry at tight tolerances (direct, then cvxpy); None if infeasible.
    After a failsafe the parent sums certified are the solution's own, rounded if the solution will be (`integral`).

    The better of the two solutions is kept; one still above optimality.GAP_TOL is counted as uncertified in
    `certificate`, with its parent, pass, objective and gap (`uncertified_at`; reported per level in the
    manifest, the run's summary and by the validator), never accepted silently.
    """
    terms, fixed, parent, bounds = stated.terms, stated.fixed, stated.parent, stated.bounds
    point = least_squares(columns, stated, solver)
    if point is None:
        return None
    x = point.x
    parent_sums = None
    if parent is not None:
        if stated.slack_budget is None:
            parent_sums = parent[1]
        else:  # failsafe: its own sums
            parent_sums = np.rint(parent[0] @ x) if integral else parent[0] @ x
    value, gap = optimality.certify(problem, columns, terms, x, parent_sums=parent_sums, bounds=bounds, fixed=fixed,
                         answers=point.answers, lower=point.lower)
    if gap > optimality.GAP_TOL * max(value, 1.0):
        certificate["retried"] += 1
        # tight tolerances on the same path; if the direct path is still not certified, the cvxpy path's
        retries = [solver] + (["cvxpy:CLARABEL"] if solver == "CLARABEL" else [])
        for path in retries:
            retry = least_squares(columns, stated, path, tight=True)
            if retry is not None:
                v2, g2 = optimality.certify(problem, columns, terms, retry.x, parent_sums=parent_sums, bounds=bounds,
                                 fixed=fixed, answers=retry.answers, lower=retry.lower)
                if g2 < gap:
                    x, value, gap = retry.x, v2, g2
            if gap <= optimality.GAP_TOL * max(value, 1.0):
                break
        if gap > optimality.GAP_TOL * max(value, 1.0):
            certificate["uncertified"] += 1
            certificate["uncertified_at"].append({"parent": problem.parent, "pass": index, "objective": value,
                                                  "gap": gap})
    certificate["objective"] += optimality.on_grid(value, optimality.OBJECTIVE_GRID)
    certificate["gap"] += optimality.on_grid(gap, optimality.GAP_GRID)
    certificate["max_rel_gap"] = max(certificate["max_rel_gap"], gap / max(value, 1.0))
    return x



def within_rules(x: np.ndarray, *, parent, bounds: l2.BoundRows) -> np.ndarray:
    """x, or where it breaks a bound row or the parent sums by more than rounding, the nearest point in L1 (an LP,
    HiGHS) that meets them: the answers a pass holds for the next must be reachable within the rules.

    The solver meets each row only to its feasibility tolerance: vt_demo's root put a GQ type at 0.99984 persons
    against its bound of at least one (seed 10), and holding that answer made the next pass infeasible as stated
    (the direct path said so, the cvxpy path solved it loosely, the certificate's LP had no solution). Moving the
    held answers by that 1.6e-4 costs nothing; x itself is returned unchanged to the caller."""
    rows, lows, highs = [], [], []
    b_matrix, lower, upper = bounds
    if b_matrix is not None:
        rows.append(b_matrix)
        lows.append(np.where(lower > 0, lower, -np.inf))
        highs.append(np.asarray(upper, dtype=float))
    if parent is not None:
        rows.append(parent[0])
        lows.append(parent[1])
        highs.append(parent[1])
    if not rows:
        return x
    matrix, low, high = sp.vstack(rows).tocsr(), np.concatenate(lows), np.concatenate(highs)
    at = matrix @ x
    if not ((at < low - optimality.slack(low)) | (at > high + optimality.slack(high))).any():
        return x
    # x + up - down with up >= 0, 0 <= down <= x: every row within its bounds, the least L1 movement
    d = highs_lp(np.ones(2 * len(x)), sp.hstack([matrix, -matrix]).tocsr(), low - at, high - at,
                  col_upper=np.r_[np.full(len(x), np.inf), x], integer=False)
    return x if d is None else np.maximum(x + d[:len(x)] - d[len(x):], 0.0)


def solve_l2(problem: ParentProblem, solver: str = DEFAULT_SOLVER, certificate: dict | None = None, *,
             integral: bool = True):
    """Multipass weighted least squares; returns (x* over variables, events, bounds used, columns). `integral`:
    the solution will be rounded (False: NO_ROUNDING; it changes only the parent sums a failsafe's pass certifies).

    `solver`: `CLARABEL` (default: the nested QP straight to Clarabel, das.topdown.l2) or
    `cvxpy:NAME` (the same problem through cvxpy, the reference; measured on the Vermont demo,
    cvxpy:OSQP was slower than Clarabel). Every pass's solution, whichever path found it, is
    certified by its duality gap in original units (`certify`), summed into `certificate`.
    """
    solver = check_solver(solver)
    certificate = optimality.new_certificate() if certificate is None else certificate
    certificate["problems"] += 1
    columns = variables(problem)
    parent = None
    if problem.parent_counts is not None:
        parent = (parent_sum(problem, columns), problem.parent_counts.astype(float))
    bounds = bound_rows(problem, columns)
    events: list[FailsafeEvent] = []
    slack_budget = None
    fixed: list = []
    done: set[str] = set()
    x = None
    for index, names in enumerate(problem.passes):
        queries = queries_in_pass(problem, names, done)
        if not queries:
            continue
        terms = weighted_terms(problem, columns, queries)
        x = certified_pass(problem, columns, l2.Pass(terms, list(fixed), parent, bounds, slack_budget), solver,
                            certificate=certificate, index=index, integral=integral)
        if x is None and not events:
            bounds, slack_budget, event = failsafe(problem, columns, parent, bounds)
            events.append(event)
            x = certified_pass(problem, columns, l2.Pass(terms, list(fixed), parent, bounds, slack_budget), solver,
                                certificate=certificate, index=index, integral=integral)
        if x is None:
            raise SolveError(f"parent {problem.parent or '(root)'}: least squares failed after the failsafe")
        for q in queries:
            done.add(q.name)
        if names:  # hold this pass's answers for the next passes, where a point that meets every rule puts them
            held = within_rules(x, parent=None if slack_budget is not None else parent,
                                 bounds=bounds)
            for q in queries:
                a = query_rows(problem, q, columns)
                fixed.append((a, a @ held))
    if x is None:  # no queries at all: any feasible point
        point = least_squares(columns, l2.Pass([], [], parent, bounds, slack_budget), solver)
        x = None if point is None else point.x
    return x, events, bounds, columns


def trivial_solution(problem: ParentProblem, t0: float, *, fractional: bool = False) -> ParentSolution | None:
    """The solution of a parent that needs no solver, or None: an empty one (nothing to share), or one child with
    every cell allowed, which is the parent itself if that meets the child's bounds (float64 if `fractional`: a
    fractional parent is copied as it is, never truncated). `t0`: when the parent's solve began."""
    shape = (problem.n_children, problem.n_cells)
    nothing = problem.parent_counts is None or problem.parent_counts.sum() == 0
    if (problem.parent_counts is not None and problem.parent_counts.sum() == 0 or problem.n_cells == 0
            or nothing and not problem.allowed.any()):  # e.g. a root whose invariant total is 0: no persons
        return ParentSolution(np.zeros(shape, float if fractional else np.int64), np.zeros(shape), [], {"total": 0.0}, "empty")
    if problem.parent_counts is not None and problem.n_children == 1 and problem.allowed.all():
        counts = problem.parent_counts.reshape(1, -1).astype(float if fractional else np.int64)
        columns = variables(problem)
        check = check_fractional if fractional else check_counts
        if not check(problem, counts.ravel(), columns, bound_rows(problem, columns)):
            return ParentSolution(counts, counts.astype(float), [], {"total": time.perf_counter() - t0}, "copy")
    return None


def solve_parent(problem: ParentProblem, solver: str = DEFAULT_SOLVER, rounding: str = DEFAULT_ROUNDING) -> ParentSolution:
    """L2, rounding, exact checks; trivial parents (empty, one child) without a solver. With NO_ROUNDING the L2
    point matched to the parent is the solution (float64, `unrounded`), neither rounded nor checked as integers."""
    t0 = time.perf_counter()
    fractional = rounding == NO_ROUNDING
    trivial = trivial_solution(problem, t0, fractional=fractional)
    if trivial is not None:
        return trivial
    certificate = optimality.new_certificate()
    x, events, bounds, columns = solve_l2(problem, solver, certificate, integral=not fractional)
    t1 = time.perf_counter()
    parent_target = None
    if events and problem.parent_counts is not None:
        # the children may not sum to the given parent: round to the relaxed sums (without rounding: those sums)
        sums = parent_sum(problem, columns) @ x
        parent_target = sums if fractional else np.rint(sums).astype(np.int64)
    if fractional:
        x = values = unrounded(problem, x, columns, bounds, parent_target=parent_target)
        method = NO_ROUNDING
    else:
        if problem.parent_counts is not None:
            x = match_parent(problem, x, columns, problem.parent_counts if parent_target is None else parent_target)
        values, method = round_l1(problem, x, columns, bounds, parent_target=parent_target, mode=rounding)
        if values is None:
            raise SolveError(f"parent {problem.parent}: rounding infeasible")
        problems = check_counts(problem, values, columns, bounds, parent_target=parent_target)
        if problems:
            raise SolveError(f"parent {problem.parent}: rounded solution fails checks: {problems}")
    counts = np.zeros(problem.n_children * problem.n_cells, dtype=float if fractional else np.int64)
    counts[columns] = values
    l2 = np.zeros(problem.n_children * problem.n_cells)
    l2[columns] = x
    timings = {"l2": t1 - t0, "rounding": time.perf_counter() - t1, "total": time.perf_counter() - t0}
    shape = (problem.n_children, problem.n_cells)
    return ParentSolution(counts.reshape(shape), l2.reshape(shape), events, timings, method, certificate)


@dataclass(frozen=True)
class SolveSettings:
    """How a level's parents are solved: the least-squares solver, the rounding and the L2 passes."""

    solver: str = DEFAULT_SOLVER
    rounding: str = DEFAULT_ROUNDING
    passes: tuple[tuple[str, ...], ...] = DEFAULT_PASSES

    @property
    def counts_dtype(self) -> type:
        """The solutions' (and so the next level's parents') type: float64 without rounding, else int64."""
        return float if self.rounding == NO_ROUNDING else np.int64


def solve_root(schema, answers: list[NoisyAnswers], bounds: list, *, settings: SolveSettings = SolveSettings(),
               descendants: list[ChildAnswers] = ()) -> ParentSolution:
    """The top geounit: its own noisy answers (one geounit each) and its only descendants', its bounds, no
    parent to sum to. The solution's counts are over every cell of the schema."""
    problem = root_problem(schema, measured(answers, descendants), bounds, settings.passes)
    solution = solve_parent(problem, solver=settings.solver, rounding=settings.rounding)
    full = np.zeros(schema.size, dtype=settings.counts_dtype)
    full[problem.cells] = solution.counts[0]
    solution.counts = full
    return solution
