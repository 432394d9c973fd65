"""Solve one parent: weighted least squares (Clarabel, das.topdown.l2), then integer rounding (HiGHS), then checks.

L2 (DESIGN.md section 6): minimise sum_q (1/var_q) ||Q_q x_c - y_c,q||^2 over x >= 0 with the
children summing exactly to the parent and every child bound held; multipass: the first pass
fits the pass-1 queries (`total`), the next pass holds each child's pass-1 answers where the
first pass put them (as equalities) and fits the rest.

Rounding: x = floor(x*) + b, b in [0, 1]. Controlled rounding: every child bound row and every
child's total is held between the floor and ceiling of its L2 value, the per-cell parent sums
exactly; the objective is the L1 distance of the cells to x*, which is linear in b. The rows
per child (total, then nested groups such as hhgq) and the per-cell parent sums are two laminar
families, so the constraint matrix is totally unimodular and HiGHS's simplex returns an integer
vertex. If it is not integral (non-nested bound rows) HiGHS solves it as a MIP. The result is
checked in exact integer arithmetic before it is accepted.

Failsafe: when a problem is infeasible as stated, the smallest total L1 relaxation of the parent
equality (or, at the root, of the bounds) is found by an LP, the problem is solved with that
slack, and a FailsafeEvent records where and how much.
"""

from __future__ import annotations

import os
import sys
import time
import warnings
from dataclasses import dataclass

import highspy
import numpy as np
import scipy.sparse as sp

from das.errors import SolverError
from das.io.nmf import NoisyAnswers
from das.topdown import l2
from das.topdown.problem import (
    DEFAULT_PASSES,
    ChildAnswers,
    ChildConstraints,
    FailsafeEvent,
    ParentProblem,
    ParentSolution,
    csr_rows,
    measured,
    root_problem,
)

INTEGRAL_TOL = 1e-6
GAP_TOL = 1e-6  # an L2 solution is accepted when its duality gap <= GAP_TOL * max(objective, 1)
TIGHT_CLARABEL = l2.TIGHT_SETTINGS  # the retry of a solve whose certificate failed


class SolveError(SolverError):
    """A parent the solver could not answer consistently, even relaxed (the failsafe's last word)."""


# ---------------------------------------------------------------------------------------------
# Matrices over the problem's variables (allowed child x cell pairs, child-major)


def _variables(problem: ParentProblem) -> np.ndarray:
    return np.flatnonzero(problem.allowed.ravel())


def _positions(n_children: int, n_cells: int, columns: np.ndarray) -> np.ndarray:
    """The variable of each child x cell (child-major), -1 where there is none (a structural zero)."""
    position = np.full(n_children * n_cells, -1, dtype=np.int32)
    position[columns] = np.arange(len(columns))
    return position


def _entries(matrix: sp.csr_matrix, children: np.ndarray, n_cells: int, position: np.ndarray):
    """The entries of kron(pick(children), matrix) over the variables (`_positions`): (values, variables,
    count per row).

    Entries come out child-major, row-major and column-sorted (columns are sorted), i.e. already in CSR order.
    """
    if not (isinstance(matrix, sp.csr_matrix) and matrix.has_sorted_indices):
        matrix = sp.csr_matrix(matrix).sorted_indices()
    row_of = np.repeat(np.arange(matrix.shape[0]), np.diff(matrix.indptr))
    where = position[children[:, None] * n_cells + matrix.indices[None, :]]  # (children, nnz)
    keep = where >= 0
    n_rows = len(children) * matrix.shape[0]
    counts = np.bincount((np.arange(len(children))[:, None] * matrix.shape[0] + row_of[None, :])[keep],
                         minlength=n_rows)
    values = np.broadcast_to(matrix.data.astype(float), where.shape)[keep]
    return values, where[keep], counts


def _per_child(matrix: sp.csr_matrix, n_children: int, columns: np.ndarray) -> sp.csr_matrix:
    """kron(I_children, matrix) restricted to the variable columns."""
    position = _positions(n_children, matrix.shape[1], columns)
    values, where, counts = _entries(matrix, np.arange(n_children), matrix.shape[1], position)
    return csr_rows(values, where, counts, len(columns))


def _parent_sum(problem: ParentProblem, columns: np.ndarray) -> sp.csr_matrix:
    """(n_cells x n_var): per-cell sums over children."""
    cell_of = columns % problem.n_cells
    return csr_rows(np.ones(len(columns)), np.argsort(cell_of, kind="stable"),
                np.bincount(cell_of, minlength=problem.n_cells), len(columns))


def _total_matrix(problem: ParentProblem, columns: np.ndarray) -> sp.csr_matrix:
    """(n_children x n_var): each child's total (its variables are consecutive: columns are child-major)."""
    return csr_rows(np.ones(len(columns)), np.arange(len(columns)),
                np.bincount(columns // problem.n_cells, minlength=problem.n_children), len(columns))


def _bound_rows(problem: ParentProblem, columns: np.ndarray) -> l2.BoundRows:
    """The children's bound rows over the variables."""
    c: ChildConstraints | None = problem.constraints
    if c is None or c.matrix.shape[0] == 0:
        return l2.NO_BOUNDS
    return l2.BoundRows(_per_child(c.matrix, problem.n_children, columns),
                        c.lower.astype(float).ravel(), c.upper.astype(float).ravel())


def _queries_in_pass(problem: ParentProblem, names: tuple[str, ...], done: set[str]):
    if names:
        return [q for q in problem.queries if q.name in names]
    return [q for q in problem.queries if q.name not in done]


# ---------------------------------------------------------------------------------------------
# L2


def _scale_of(answers: list[np.ndarray], parent) -> float:
    """A typical magnitude of the answers: variables are solved in units of it, so that interior-point
    feasibility tolerances are relative (Clarabel missed a 322,539 equality by 15 on unscaled counts)."""
    values = [np.abs(y).max(initial=0) for y in answers]
    if parent is not None:
        values.append(np.abs(parent[1]).max(initial=0))
    return max(1.0, float(max(values, default=1.0)))


def _query_rows(problem: ParentProblem, q, columns: np.ndarray) -> sp.csr_matrix:
    """The query's answer rows over the problem's variables: every child's, or only `q.rows`' children."""
    if q.rows is None:
        return _per_child(q.matrix, problem.n_children, columns)
    values, where, counts = _entries(q.matrix, np.asarray(q.rows), problem.n_cells,
                                     _positions(problem.n_children, problem.n_cells, columns))
    return csr_rows(values, where, counts, len(columns))


def _terms(problem: ParentProblem, columns: np.ndarray, queries) -> list[tuple[sp.csr_matrix, np.ndarray, float]]:
    """(rows over the variables, noisy answers, weight 1/variance) of each query: the objective in counts.

    Rows without a variable (every cell of it a structural zero) are left out."""
    terms = []
    position = _positions(problem.n_children, problem.n_cells, columns)
    every_child = np.arange(problem.n_children)
    for q in queries:
        children = every_child if q.rows is None else np.asarray(q.rows)
        values, where, counts = _entries(q.matrix, children, problem.n_cells, position)
        keep = counts > 0
        if keep.any():
            terms.append((csr_rows(values, where, counts[keep], len(columns)),
                          q.noisy.answers.ravel()[keep].astype(float), q.noisy.weight))
    return terms


def objective(terms, x: np.ndarray) -> tuple[float, np.ndarray]:
    """sum_q ||A_q x - y_q||^2 / var_q in original units (persons^2 / variance), and its gradient.

    A_q' r is summed entry by entry in row order (np.bincount), as scipy's A_q.T @ r does, without building
    the transpose."""
    value, grad = 0.0, np.zeros(len(x))
    for a, y, w in terms:
        r = a @ x - y
        value += w * float(r @ r)
        rows = np.repeat(np.arange(a.shape[0]), np.diff(a.indptr))
        grad += (2.0 * w) * np.bincount(a.indices, weights=a.data * r[rows], minlength=len(x))
    return value, grad


SOLVERS = ("CLARABEL", "cvxpy:<a cvxpy QP solver>, e.g. cvxpy:CLARABEL or cvxpy:OSQP")
DEFAULT_SOLVER = "CLARABEL"  # the nested QP straight to Clarabel (das.topdown.l2)
ROUNDINGS = ("auto", "milp")  # auto: the LP (integral: totally unimodular), MILP only if it is not
DEFAULT_ROUNDING = "auto"


def check_rounding(rounding: str) -> str:
    """The rounding method, or ValueError naming the choices."""
    if rounding not in ROUNDINGS:
        raise ValueError(f"rounding must be one of {list(ROUNDINGS)}, not {rounding!r}")
    return rounding


def check_solver(solver: str) -> str:
    """The solver name as used: `CLARABEL` (direct, nested formulation) or `cvxpy:NAME` (the reference path)."""
    if solver.upper() == "CLARABEL":
        return "CLARABEL"
    if solver.startswith("cvxpy:") and solver[len("cvxpy:"):]:
        import cvxpy as cp

        name = solver[len("cvxpy:"):].upper()
        if name not in cp.installed_solvers():
            raise ValueError(f"solver {solver!r}: cvxpy has no installed solver {name!r} "
                             f"(installed: {', '.join(cp.installed_solvers())})")
        return f"cvxpy:{name}"
    raise ValueError(f"unknown least-squares solver {solver!r}: expected {' or '.join(SOLVERS)}")


def _least_squares(columns, stated: l2.Pass, solver: str, *, tight: bool = False) -> l2.Point | None:
    """One weighted least-squares pass; returns the solution (x in counts, and the direct path's answer
    variables) or None when infeasible.

    Variables are x / scale (feasibility tolerances relative to the counts) but the residuals are
    in counts, weighted 1/sd: the objective is the statistical one, not shrunk by scale^2 below the
    solver's absolute gap tolerance (which stopped Clarabel at an interior point, spreading mass
    over truly empty cells of a state). `CLARABEL` builds the nested QP directly (das.topdown.l2);
    `cvxpy:NAME` states the same problem in cvxpy, the reference (no answer variables: None).
    """
    scale = _scale_of([y for _, y, _ in stated.terms], stated.parent)
    if solver == "CLARABEL":
        try:
            point = l2.solve_point(stated, len(columns), scale, tight)
            if point is not None or not stated.fixed:
                return point
            # "infeasible" with held answers is numerical: the previous pass's solution satisfies them
            # (their equalities repeat the total invariant at a root, Perry County AL seed 11)
        except l2.Stalled:
            pass  # no proof either way (seen on the DHC schema's large roots)
        solver = "cvxpy:CLARABEL"  # the cvxpy path decides
    x = _least_squares_cvxpy(columns, stated, solver[len("cvxpy:"):], tight=tight, scale=scale)
    return None if x is None else l2.Point(x, None)


def _least_squares_cvxpy(columns, stated: l2.Pass, solver: str, *, tight: bool, scale: float):
    """The reference: the pass stated with cvxpy atoms and solved by any cvxpy QP solver."""
    import cvxpy as cp

    terms, fixed, parent, bounds, slack_budget = (stated.terms, stated.fixed, stated.parent, stated.bounds,
                                                  stated.slack_budget)
    n_var = len(columns)
    z = cp.Variable(n_var, nonneg=True)  # x = scale * z
    residuals = [cp.sum_squares((np.sqrt(w) * scale) * (a @ z) - np.sqrt(w) * y) for a, y, w in terms]
    objective_expr = cp.Minimize(cp.sum(residuals) if residuals else 0)
    constraints = []
    if parent is not None:
        s_matrix, counts = parent
        if slack_budget is None:
            constraints.append(s_matrix @ z == counts / scale)
        else:
            slack = cp.Variable(len(counts))
            constraints += [s_matrix @ z - counts / scale == slack, cp.norm1(slack) <= slack_budget / scale]
    b_matrix, lower, upper = bounds
    if b_matrix is not None:
        lo = lower > 0
        hi = np.isfinite(upper)
        if lo.any():
            constraints.append(b_matrix[lo] @ z >= lower[lo] / scale)
        if hi.any():
            constraints.append(b_matrix[hi] @ z <= upper[hi] / scale)
    for matrix, target in fixed:
        constraints.append(matrix @ z == target / scale)
    prob = cp.Problem(objective_expr, constraints)
    with warnings.catch_warnings():
        # "optimal_inaccurate" is accepted here: the certificate (duality gap) decides afterwards
        warnings.simplefilter("ignore", UserWarning)
        try:
            if tight:
                prob.solve(solver="CLARABEL", **l2.TIGHT_SETTINGS)
            else:
                prob.solve(solver=solver)
        except cp.error.SolverError:
            pass
        if prob.status not in ("optimal", "optimal_inaccurate") and (solver != "CLARABEL" or tight):
            # a solver that stopped short (iteration limit) is not proof of infeasibility: ask
            # Clarabel at its defaults before the failsafe is considered
            try:
                prob.solve(solver="CLARABEL")
            except cp.error.SolverError:  # failed at its defaults too (seen at gap 1e-12 on Delaware)
                return None
    if prob.status not in ("optimal", "optimal_inaccurate"):
        return None
    return np.clip(np.asarray(z.value, dtype=float) * scale, 0, None)


def _min_linear(problem, columns, cost, region: Region, *, cap: float | None = None):
    """min cost'y over `region` (y >= 0, the parent sums, the bound rows, the held answers; 1'y <= cap if given);
    None if the LP has no optimum (unbounded, infeasible within HiGHS's tolerances, or a solver failure).

    Without bound rows, held answers or cap the set is a product of per-cell simplices (each cell's parent count
    split over its children) and the minimum is closed-form; otherwise an LP (HiGHS) over the region's rows,
    the parent sums as the band that contains x (`Region`).
    """
    b_matrix, lower, upper = region.bounds
    if region.parent_sums is not None and b_matrix is None and not region.held and cap is None:
        return _min_over_parent_sums(problem, columns, cost, region.parent_sums)
    rows, lows, highs = [], [], []
    if region.parent_sums is not None:
        rows.append(_parent_sum(problem, columns))
        lows.append(region.parent_sums - region.parent_half)
        highs.append(region.parent_sums + region.parent_half)
    if b_matrix is not None:
        rows.append(b_matrix)
        lows.append(lower)
        highs.append(upper)
    for matrix, target, half in region.held:
        rows.append(matrix)
        lows.append(target - half)
        highs.append(target + half)
    if cap is not None:
        rows.append(sp.csr_matrix(np.ones((1, len(columns)))))
        lows.append(np.array([-np.inf]))
        highs.append(np.array([cap]))
    if not rows:
        return None if (cost < 0).any() else 0.0
    y = _highs_lp(cost, sp.vstack(rows).tocsr(), np.concatenate(lows), np.concatenate(highs),
                  col_upper=np.full(len(columns), np.inf), integer=False)
    return None if y is None else float(cost @ y)


def _min_over_parent_sums(problem, columns, cost, parent_sums) -> float | None:
    """min cost'y over y >= 0 with each cell's children summing to its parent count: each cell's count on its
    cheapest child (None if a counted cell has no variable)."""
    cell_of = columns % problem.n_cells
    best = np.full(problem.n_cells, np.inf)
    np.minimum.at(best, cell_of, cost)
    need = parent_sums > 0
    if np.isinf(best[need]).any():
        return None
    return float(parent_sums[need] @ best[need])


def _total_cap(terms, value: float) -> float | None:
    """An upper bound on the total of every optimal x, from a measured partition of the cells.

    If a query's rows partition the cells, 1'A x = 1'x, and at any optimum ||A x* - y||^2 <= var f(x),
    so 1'x* <= 1'y + sqrt(rows var f(x)) (Cauchy-Schwarz). None if no measured query partitions them.
    """
    for a, y, w in terms:
        covered = np.asarray(a.sum(axis=0)).ravel()
        if a.shape[1] and np.array_equal(covered, np.ones(a.shape[1])):
            return float(y.sum() + np.sqrt(a.shape[0] * value / w)) + 1.0
    return None


@dataclass(frozen=True)
class Region:
    """A set a certificate's lower bound is taken over: y >= 0, the parent sums (within `parent_half` of them), the
    bound rows (lower <= B y <= upper) and the held answers of earlier passes (rows, target, half-width)."""

    parent_sums: np.ndarray | None
    parent_half: np.ndarray | None
    bounds: l2.BoundRows
    held: list


def _slack(values: np.ndarray) -> np.ndarray:
    """The margin a row widened to contain x gets beyond x's own violation: 1e-9 relative (for the LP's tolerance)."""
    return 1e-9 * np.maximum(1.0, np.abs(values))


def regions_of(problem, columns, x, *, parent_sums, bounds: l2.BoundRows, fixed) -> tuple[Region, Region]:
    """The feasible set of a pass as stated, then widened to contain x; each bounds the optimum from below.

    Stated: the parent sums and bound rows exact, the held answers (rows, target) within x's own distance of
    their targets (the solver holds them to its feasibility tolerance; a band just wide enough for x makes the
    gap that of x's own face). The solver meets every row only to its tolerance, and answers held from an
    earlier pass can contradict a bound row by that much (a GQ type held at 0.99984 persons against a bound of
    at least 1: vt_demo seed 10), so the stated set can be empty. Widened: every row also within x's own
    violation of it, a superset of the stated set that contains x, so never empty; the minimum over a
    superset is still a lower bound, only a looser one (an active bound widened by d costs its multiplier x d).
    """
    b_matrix, lower, upper = bounds
    exact_sums = None if parent_sums is None else np.asarray(parent_sums, dtype=float)
    held = [(matrix, target, np.abs(matrix @ x - target) + _slack(target)) for matrix, target in fixed]
    stated = Region(exact_sums, None if exact_sums is None else np.zeros_like(exact_sums),
                    l2.BoundRows(b_matrix, None if b_matrix is None else np.where(lower > 0, lower, -np.inf).astype(float),
                                 None if b_matrix is None else np.asarray(upper, dtype=float)), held)
    half, widened_bounds = None, stated.bounds
    if exact_sums is not None:
        half = np.abs(_parent_sum(problem, columns) @ x - exact_sums) + _slack(exact_sums)
    if b_matrix is not None:
        values = b_matrix @ x
        widened_bounds = l2.BoundRows(b_matrix, np.minimum(stated.bounds.lower, values - _slack(values)),
                                      np.maximum(stated.bounds.upper, values + _slack(values)))
    return stated, Region(exact_sums, half, widened_bounds, held)


def certify(problem, columns, terms, x, *, parent_sums, bounds, fixed, answers=None,
            lower: float | None = None) -> tuple[float, float]:
    """(objective, duality gap) of x in original units; the gap bounds objective(x) - optimum from above.

    The gap is objective(x) minus a lower bound on the optimum: the Fenchel dual of the least-squares
    objective, sum_q -|u_q|^2 / (4 w_q) - u_q'y_q + min over the feasible set of (sum_q A_q'u_q)'y, which
    bounds the optimum from below for any u. At u_q = 2 w_q (A_q x - y_q) it is Frank-Wolfe's gap,
    g'x - min g'y with g the gradient at x; with `answers` (the solver's own answer variables v_q) also
    at u_q = 2 w_q (v_q - y_q), first: Frank-Wolfe's is computed too only when that one is above the
    tolerance, and the larger bound is kept. The solver's answers carry its dual
    accuracy, not A x's: x is clipped at zero after the solve and the answer definitions hold only to the
    feasibility tolerance, and either shifts the gradient by a little that the parent counts multiply
    (docs/scale.md). `fixed`: the held answers of earlier passes, (rows, target). `lower`: a lower bound the solver's
    own dual variables give (das.topdown.l2.dual_bound), tried before all of these: it needs no LP, and the
    parent counts do not multiply its error.

    The gap is always finite, at most the objective: the minimum is taken over the feasible set as stated, or
    where that has none, over supersets of it (`_lower_bound`), and the optimum is never below 0.
    """
    residuals = [a @ x - y for a, y, _ in terms]
    value = sum(w * float(r @ r) for (_, _, w), r in zip(terms, residuals))
    gap = value if lower is None else min(value, max(0.0, value - lower))
    if gap <= GAP_TOL * max(value, 1.0):
        return value, gap
    regions = regions_of(problem, columns, x, parent_sums=parent_sums, bounds=bounds, fixed=fixed)
    candidates = [residuals] if answers is None else [[v - y for v, (_, y, _) in zip(answers, terms)], residuals]
    for r in candidates:  # the solver's answers first: Frank-Wolfe's (an LP where bounds bind) only if they fail
        gap = min(gap, _dual_gap(problem, columns, terms, r, value=value, regions=regions, x_total=float(x.sum())))
        if gap <= GAP_TOL * max(value, 1.0):
            break
    return value, gap


def _dual_gap(problem, columns, terms, residuals, *, value: float, regions, x_total: float) -> float:
    """objective(x) - the Fenchel dual bound at u_q = 2 w_q r_q (`certify`), at most objective(x) (the optimum is >= 0)."""
    grad, offset = np.zeros(len(columns)), 0.0
    for (a, y, w), r in zip(terms, residuals):
        rows = np.repeat(np.arange(a.shape[0]), np.diff(a.indptr))
        grad += (2.0 * w) * np.bincount(a.indices, weights=a.data * r[rows], minlength=len(columns))
        offset += w * float(r @ r + 2.0 * (r @ y))  # value - dual = value + sum w (|r|^2 + 2 r'y) - min g'y
    low = _lower_bound(problem, columns, grad, regions, cap=lambda: _total_cap(terms, value), x_total=x_total)
    if low is None or not np.isfinite(low):
        return value
    return float(min(value, max(0.0, value + offset - low)))


def _lower_bound(problem, columns, grad, regions: tuple[Region, ...], *, cap, x_total: float) -> float | None:
    """min grad'y over the first of `regions` (each a superset of the one before) that has a minimum; at a root
    with no total invariant (unbounded), within the optimal solutions' provable total `cap()`; where no LP has an
    answer, over a superset with a closed form: the parent sums alone, or y >= 0 with the total capped. None when
    none of these has a finite minimum."""
    root = regions[0].parent_sums is None
    limit = cap() if root else None
    limit = None if limit is None else max(limit, x_total)
    for total in (None, limit) if limit is not None else (None,):
        for region in regions:
            low = _min_linear(problem, columns, grad, region, cap=total)
            if low is not None:
                return low
    if not root:
        return _min_over_parent_sums(problem, columns, grad, regions[0].parent_sums)
    if limit is not None:  # min over {y >= 0, 1'y <= limit}: all of it on the cheapest variable, if that is negative
        return limit * min(0.0, float(grad.min(initial=0.0)))
    return None


def _relaxation(problem, columns, parent, bounds, *, relax_bounds: bool):
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


def _failsafe(problem, columns, parent, bounds):
    """Relax the parent equality minimally; if that cannot suffice, the bounds too."""
    relaxed = _relaxation(problem, columns, parent, bounds, relax_bounds=False) if parent is not None else None
    if relaxed is None:
        relaxed = _relaxation(problem, columns, parent, bounds, relax_bounds=True)
    if relaxed is None:
        raise SolveError(f"parent {problem.parent}: even the relaxed problem is infeasible")
    parent_slack, bound_slack, bounds = relaxed
    what = [name for name, amount in (("parent equality", parent_slack), ("child bounds", bound_slack)) if amount > 1e-9]
    event = FailsafeEvent(problem.parent, "l2", " and ".join(what) or "none", parent_slack + bound_slack,
                          f"children sum to the parent within L1 {parent_slack:.6g}; "
                          f"bounds widened by L1 {bound_slack:.6g}")
    budget = parent_slack + 1e-6 if parent is not None else None
    return bounds, budget, event


def _certified_pass(problem, columns, stated: l2.Pass, solver: str, *, certificate: dict, index: int = 0):
    """Solve pass `index`, check its duality gap, retry at tight tolerances (direct, then cvxpy); None if infeasible.

    The better of the two solutions is kept; one still above GAP_TOL is counted as uncertified in
    `certificate`, with its parent, pass, objective and gap (`uncertified_at`; reported per level in the
    manifest, the run's summary and by the validator), never accepted silently.
    """
    terms, fixed, parent, bounds = stated.terms, stated.fixed, stated.parent, stated.bounds
    point = _least_squares(columns, stated, solver)
    if point is None:
        return None
    x = point.x
    parent_sums = None
    if parent is not None:
        parent_sums = parent[1] if stated.slack_budget is None else np.rint(parent[0] @ x)  # failsafe: its own sums
    value, gap = certify(problem, columns, terms, x, parent_sums=parent_sums, bounds=bounds, fixed=fixed,
                         answers=point.answers, lower=point.lower)
    if gap > GAP_TOL * max(value, 1.0):
        certificate["retried"] += 1
        # tight tolerances on the same path; if the direct path is still not certified, the cvxpy path's
        retries = [solver] + (["cvxpy:CLARABEL"] if solver == "CLARABEL" else [])
        for path in retries:
            retry = _least_squares(columns, stated, path, tight=True)
            if retry is not None:
                v2, g2 = certify(problem, columns, terms, retry.x, parent_sums=parent_sums, bounds=bounds,
                                 fixed=fixed, answers=retry.answers, lower=retry.lower)
                if g2 < gap:
                    x, value, gap = retry.x, v2, g2
            if gap <= GAP_TOL * max(value, 1.0):
                break
        if gap > GAP_TOL * max(value, 1.0):
            certificate["uncertified"] += 1
            certificate["uncertified_at"].append({"parent": problem.parent, "pass": index, "objective": value,
                                                  "gap": gap})
    certificate["objective"] += on_grid(value, OBJECTIVE_GRID)
    certificate["gap"] += on_grid(gap, GAP_GRID)
    certificate["max_rel_gap"] = max(certificate["max_rel_gap"], gap / max(value, 1.0))
    return x


# A problem's objective and gap enter a certificate on a grid of powers of two, so a level's sums are exact and the
# same however its problems were batched (workers, a resumed run's checkpointed batches): exact while the sums stay
# below 2^37 (objective) and 2^13 (gap); the manifest otherwise differed in the last bits after a resume.
OBJECTIVE_GRID = 2.0 ** -16
GAP_GRID = 2.0 ** -40


def on_grid(value: float, grid: float) -> float:
    """`value` rounded to a multiple of `grid` (a power of two: the product is exact)."""
    return round(value / grid) * grid


def new_certificate() -> dict:
    """Per-problem (or summed per level) record of the L2 duality gaps, in original units; `uncertified_at` lists
    the passes above the tolerance after every retry (parent geocode, pass, objective, gap)."""
    return {"problems": 0, "objective": 0.0, "gap": 0.0, "max_rel_gap": 0.0, "retried": 0, "uncertified": 0,
            "uncertified_at": []}


def merge_certificates(records) -> dict:
    """The records of several problems (or batches) as one, in the order given."""
    total = new_certificate()
    for r in records:
        for k in ("problems", "objective", "gap", "retried", "uncertified"):
            total[k] += r.get(k, 0)
        total["max_rel_gap"] = max(total["max_rel_gap"], r.get("max_rel_gap", 0.0))
        total["uncertified_at"] += list(r.get("uncertified_at", ()))
    return total


def _within_rules(x: np.ndarray, *, parent, bounds: l2.BoundRows) -> np.ndarray:
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
    if not ((at < low - _slack(low)) | (at > high + _slack(high))).any():
        return x
    # x + up - down with up >= 0, 0 <= down <= x: every row within its bounds, the least L1 movement
    d = _highs_lp(np.ones(2 * len(x)), sp.hstack([matrix, -matrix]).tocsr(), low - at, high - at,
                  col_upper=np.r_[np.full(len(x), np.inf), x], integer=False)
    return x if d is None else np.maximum(x + d[:len(x)] - d[len(x):], 0.0)


def solve_l2(problem: ParentProblem, solver: str = DEFAULT_SOLVER, certificate: dict | None = None):
    """Multipass weighted least squares; returns (x* over variables, events, bounds used, columns).

    `solver`: `CLARABEL` (default: the nested QP straight to Clarabel, das.topdown.l2) or
    `cvxpy:NAME` (the same problem through cvxpy, the reference; measured on the Vermont demo,
    cvxpy:OSQP was slower than Clarabel). Every pass's solution, whichever path found it, is
    certified by its duality gap in original units (`certify`), summed into `certificate`.
    """
    solver = check_solver(solver)
    certificate = new_certificate() if certificate is None else certificate
    certificate["problems"] += 1
    columns = _variables(problem)
    parent = None
    if problem.parent_counts is not None:
        parent = (_parent_sum(problem, columns), problem.parent_counts.astype(float))
    bounds = _bound_rows(problem, columns)
    events: list[FailsafeEvent] = []
    slack_budget = None
    fixed: list = []
    done: set[str] = set()
    x = None
    for index, names in enumerate(problem.passes):
        queries = _queries_in_pass(problem, names, done)
        if not queries:
            continue
        terms = _terms(problem, columns, queries)
        x = _certified_pass(problem, columns, l2.Pass(terms, list(fixed), parent, bounds, slack_budget), solver,
                            certificate=certificate, index=index)
        if x is None and not events:
            bounds, slack_budget, event = _failsafe(problem, columns, parent, bounds)
            events.append(event)
            x = _certified_pass(problem, columns, l2.Pass(terms, list(fixed), parent, bounds, slack_budget), solver,
                                certificate=certificate, index=index)
        if x is None:
            raise SolveError(f"parent {problem.parent or '(root)'}: least squares failed after the failsafe")
        for q in queries:
            done.add(q.name)
        if names:  # hold this pass's answers for the next passes, where a point that meets every rule puts them
            held = _within_rules(x, parent=None if slack_budget is not None else parent,
                                 bounds=bounds)
            for q in queries:
                a = _query_rows(problem, q, columns)
                fixed.append((a, a @ held))
    if x is None:  # no queries at all: any feasible point
        point = _least_squares(columns, l2.Pass([], [], parent, bounds, slack_budget), solver)
        x = None if point is None else point.x
    return x, events, bounds, columns


# ---------------------------------------------------------------------------------------------
# Rounding


def _snap(values: np.ndarray) -> np.ndarray:
    near = np.abs(values - np.rint(values)) < INTEGRAL_TOL
    return np.where(near, np.rint(values), values)


_banner_shown = []  # HiGHS prints its banner to the process's stdout once, from the first Highs()


def quiet_highs() -> highspy.Highs:
    """A Highs with no output; the first one of the process is built with stdout closed, so its banner
    does not land in a command's output (the run summary, the attack's report): every HiGHS model of das is built here."""
    if _banner_shown:
        h = highspy.Highs()
    else:
        sys.stdout.flush()
        saved, devnull = os.dup(1), os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, 1)
            h = highspy.Highs()
        finally:
            os.dup2(saved, 1)
            os.close(saved)
            os.close(devnull)
        _banner_shown.append(True)
    h.setOptionValue("output_flag", False)
    return h


def _highs_lp(cost, a_matrix: sp.csr_matrix, row_lower, row_upper, *, col_upper, integer: bool,
              presolve: bool = True):
    """min cost'x over lower <= A x <= upper, 0 <= x <= col_upper (integer: a MIP); x, or None when not optimal."""
    h = quiet_highs()
    h.setOptionValue("threads", 1)
    if not presolve:
        h.setOptionValue("presolve", "off")
    n = len(cost)
    lp = highspy.HighsLp()
    lp.num_col_ = n
    lp.num_row_ = a_matrix.shape[0]
    lp.col_cost_ = np.asarray(cost, dtype=float)
    lp.col_lower_ = np.zeros(n)
    lp.col_upper_ = np.asarray(col_upper, dtype=float)
    lp.row_lower_ = np.asarray(row_lower, dtype=float)
    lp.row_upper_ = np.asarray(row_upper, dtype=float)
    csc = a_matrix.tocsc()
    lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
    lp.a_matrix_.start_ = csc.indptr.astype(np.int32)
    lp.a_matrix_.index_ = csc.indices.astype(np.int32)
    lp.a_matrix_.value_ = csc.data.astype(float)
    if integer:
        lp.integrality_ = [highspy.HighsVarType.kInteger] * n
    h.passModel(lp)
    h.run()
    if h.getModelStatus() != highspy.HighsModelStatus.kOptimal:
        return None
    return np.asarray(h.getSolution().col_value, dtype=float)


def _match_parent(problem: ParentProblem, x: np.ndarray, columns: np.ndarray, target) -> np.ndarray:
    """Scale each cell's children so they sum to the parent exactly (up to float rounding).

    A first-order solver meets the equality only to its tolerance; rounding needs the floors
    of x* not to overshoot the parent, so the small residual is spread proportionally.
    """
    cell_of = columns % problem.n_cells
    sums = np.bincount(cell_of, weights=x, minlength=problem.n_cells)
    counts = np.bincount(cell_of, minlength=problem.n_cells)
    target = np.asarray(target, dtype=float)
    scale = np.divide(target, sums, out=np.zeros_like(sums), where=sums > 0)
    x = x * scale[cell_of]
    empty = (sums <= 0) & (target > 0)  # nothing to scale: share the parent's count evenly
    if empty.any():
        share = np.divide(target, counts, out=np.zeros_like(target), where=counts > 0)
        x = np.where(empty[cell_of], share[cell_of], x)
    return x


def round_l1(problem: ParentProblem, x: np.ndarray, columns: np.ndarray, bounds, *, parent_target=None,
             mode: str = "auto"):
    """Integer x = floor(x*) + b closest in L1 to x*, holding sums and bounds; (values, method)."""
    x = _snap(x)
    base = np.floor(x)
    frac = x - base
    cost = 1.0 - 2.0 * frac  # |base + b - x| = frac + b (1 - 2 frac) for b in {0, 1}
    rows, lows, highs = [], [], []
    if problem.parent_counts is not None:
        s_matrix = _parent_sum(problem, columns)
        target = problem.parent_counts if parent_target is None else parent_target
        r = target - s_matrix @ base
        rows.append(s_matrix)
        lows.append(r)
        highs.append(r)
    # each child's total between floor and ceil of its L2 value
    t_matrix = _total_matrix(problem, columns)
    t_star = _snap(t_matrix @ x)
    t_base = t_matrix @ base
    rows.append(t_matrix)
    lows.append(np.floor(t_star) - t_base)
    highs.append(np.ceil(t_star) - t_base)
    b_matrix, lower, upper = bounds
    if b_matrix is not None:
        v_star = _snap(b_matrix @ x)
        v_base = b_matrix @ base
        lo = np.maximum(np.floor(v_star), np.where(lower > 0, lower, -np.inf))
        hi = np.minimum(np.ceil(v_star), upper)
        rows.append(b_matrix)
        lows.append(lo - v_base)
        highs.append(hi - v_base)
    a_matrix = sp.vstack(rows).tocsr()
    row_lower, row_upper = np.concatenate(lows), np.concatenate(highs)
    ones = np.ones(len(x))
    if mode not in ("auto", "milp"):
        raise ValueError(f"rounding must be 'auto' (LP, MIP if needed) or 'milp', not {mode!r}")
    # the LP without presolve: on Vermont's 1,424 roundings it took half the time (the simplex's vertex is the
    # same kind of point, integral where the constraints are; a fractional one goes to the MIP below)
    b = (_highs_lp(cost, a_matrix, row_lower, row_upper, col_upper=ones, integer=False, presolve=False)
         if mode == "auto" else None)
    method = "lp"
    if b is None or np.abs(b - np.rint(b)).max(initial=0) > INTEGRAL_TOL:
        b = _highs_lp(cost, a_matrix, row_lower, row_upper, col_upper=ones, integer=True)
        method = "milp"
    if b is None:
        # The least-squares point was too inexact for controlled rounding: keep only the hard
        # rules (parent sums, the bounds themselves) and let a MIP move each cell any whole
        # number of units up (d+) or down (d-, at most to 0) from its floor, at L1 cost.
        n = len(x)
        hard_rows = ([rows[0]] if problem.parent_counts is not None else []) + ([b_matrix] if b_matrix is not None else [])
        hard_lower = ([lows[0]] if problem.parent_counts is not None else []) + (
            [np.where(lower > 0, lower, -np.inf) - b_matrix @ base] if b_matrix is not None else [])
        hard_upper = ([highs[0]] if problem.parent_counts is not None else []) + (
            [upper - b_matrix @ base] if b_matrix is not None else [])
        if hard_rows:
            hard = sp.vstack(hard_rows).tocsr()
            both = sp.hstack([hard, -hard]).tocsr()
            col_upper = np.concatenate([np.full(n, np.inf), base])
            d = _highs_lp(np.r_[cost, 2.0 - cost], both, np.concatenate(hard_lower), np.concatenate(hard_upper),
                          col_upper=col_upper, integer=True)
            if d is not None:
                return (base + np.rint(d[:n]) - np.rint(d[n:])).astype(np.int64), "milp-hard-rules"
        return None, "infeasible"
    return (base + np.rint(b)).astype(np.int64), method


def _check(problem: ParentProblem, counts: np.ndarray, columns, bounds: l2.BoundRows, *, parent_target=None) -> list[str]:
    """Exact integer checks of a candidate solution over the variables: non-negative, summing to the parent
    (or `parent_target`), within the bound rows."""
    bounds_matrix, lower, upper = bounds
    problems = []
    if (counts < 0).any():
        problems.append("negative count")
    if problem.parent_counts is not None:
        sums = _parent_sum(problem, columns) @ counts
        target = problem.parent_counts if parent_target is None else parent_target
        if not np.array_equal(np.rint(sums).astype(np.int64), np.asarray(target, dtype=np.int64)):
            problems.append("children do not sum to the parent")
    if bounds_matrix is not None:
        values = bounds_matrix @ counts
        if (values < lower - 1e-9).any() or (values > upper + 1e-9).any():
            problems.append("a child bound is violated")
    return problems


def solve_parent(problem: ParentProblem, solver: str = DEFAULT_SOLVER, rounding: str = DEFAULT_ROUNDING) -> ParentSolution:
    """L2, rounding, exact checks; trivial parents (empty, one child) without a solver."""
    t0 = time.perf_counter()
    shape = (problem.n_children, problem.n_cells)
    nothing = problem.parent_counts is None or problem.parent_counts.sum() == 0
    if (problem.parent_counts is not None and problem.parent_counts.sum() == 0 or problem.n_cells == 0
            or nothing and not problem.allowed.any()):  # e.g. a root whose invariant total is 0: no persons
        return ParentSolution(np.zeros(shape, np.int64), np.zeros(shape), [], {"total": 0.0}, "empty")
    if problem.parent_counts is not None and problem.n_children == 1 and problem.allowed.all():
        counts = problem.parent_counts.reshape(1, -1).astype(np.int64)
        columns = _variables(problem)
        if not _check(problem, counts.ravel(), columns, _bound_rows(problem, columns)):
            return ParentSolution(counts, counts.astype(float), [], {"total": time.perf_counter() - t0}, "copy")
    certificate = new_certificate()
    x, events, bounds, columns = solve_l2(problem, solver, certificate)
    t1 = time.perf_counter()
    parent_target = None
    if events and problem.parent_counts is not None:
        # the children may not sum to the given parent: round to the relaxed sums
        parent_target = np.rint(_parent_sum(problem, columns) @ x).astype(np.int64)
    if problem.parent_counts is not None:
        x = _match_parent(problem, x, columns, problem.parent_counts if parent_target is None else parent_target)
    values, method = round_l1(problem, x, columns, bounds, parent_target=parent_target, mode=rounding)
    if values is None:
        raise SolveError(f"parent {problem.parent}: rounding infeasible")
    problems = _check(problem, values, columns, bounds, parent_target=parent_target)
    if problems:
        raise SolveError(f"parent {problem.parent}: rounded solution fails checks: {problems}")
    counts = np.zeros(problem.n_children * problem.n_cells, dtype=np.int64)
    counts[columns] = values
    l2 = np.zeros(problem.n_children * problem.n_cells)
    l2[columns] = x
    timings = {"l2": t1 - t0, "rounding": time.perf_counter() - t1, "total": time.perf_counter() - t0}
    return ParentSolution(counts.reshape(shape), l2.reshape(shape), events, timings, method, certificate)


@dataclass(frozen=True)
class SolveSettings:
    """How a level's parents are solved: the least-squares solver, the rounding and the L2 passes."""

    solver: str = DEFAULT_SOLVER
    rounding: str = DEFAULT_ROUNDING
    passes: tuple[tuple[str, ...], ...] = DEFAULT_PASSES


def solve_root(schema, answers: list[NoisyAnswers], bounds: list, *, settings: SolveSettings = SolveSettings(),
               descendants: list[ChildAnswers] = ()) -> ParentSolution:
    """The top geounit: its own noisy answers (one geounit each) and its only descendants', its bounds, no
    parent to sum to. The solution's counts are over every cell of the schema."""
    problem = root_problem(schema, measured(answers, descendants), bounds, settings.passes)
    solution = solve_parent(problem, solver=settings.solver, rounding=settings.rounding)
    full = np.zeros(schema.size, dtype=np.int64)
    full[problem.cells] = solution.counts[0]
    solution.counts = full
    return solution
