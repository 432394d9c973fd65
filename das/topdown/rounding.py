"""Controlled rounding of a least-squares point, and the exact checks of the integers it gives.

x = floor(x*) + b, b in [0, 1]. Every child bound row and every child's total is held between the floor and
ceiling of its L2 value, the per-cell parent sums exactly; the objective is the L1 distance of the cells to x*,
which is linear in b. The rows per child (total, then nested groups such as hhgq) and the per-cell parent sums are
two laminar families, so the constraint matrix is totally unimodular and HiGHS's simplex returns an integer
vertex. If it is not integral (non-nested bound rows) HiGHS solves it as a MIP. The result is checked in exact
integer arithmetic before it is accepted (`check_counts`).

NO_ROUNDING is the engine's other mode, never a run spec's: the L2 point itself, cleaned of the solver's residue and
matched to the parent and to the equality rows (`unrounded`), carried down as the next level's parents (nonnegative
least squares without rounding: a research estimator of the same NMF, not a release).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from das.topdown import l2
from das.topdown.matrices import parent_sum, total_matrix
from das.topdown.problem import ParentProblem
from das.topdown.solvers import highs_lp

INTEGRAL_TOL = 1e-6
ROUNDINGS = ("auto", "milp")  # auto: the LP (integral: totally unimodular), MILP only if it is not
DEFAULT_ROUNDING = "auto"
NO_ROUNDING = "none"  # the engine's fractional mode (research); a run spec can never ask for it (check_rounding)
ZERO_TOL = INTEGRAL_TOL  # below it, a fractional cell is the solver's residue (an interior point leaves ~1e-9 per cell)
MATCH_ROUNDS = 16  # most alternations of equality rows and parent sums in `unrounded` (two agree to float precision)


def check_rounding(rounding: str) -> str:
    """The rounding method, or ValueError naming the choices."""
    if rounding not in ROUNDINGS:
        raise ValueError(f"rounding must be one of {list(ROUNDINGS)}, not {rounding!r}")
    return rounding


def check_engine_rounding(rounding: str) -> str:
    """The engine's rounding: a run spec's (`check_rounding`) or NO_ROUNDING, which only a caller of the engine
    itself can ask for (fractional levels are an estimator to compare, never a release)."""
    return rounding if rounding == NO_ROUNDING else check_rounding(rounding)



def snap(values: np.ndarray) -> np.ndarray:
    near = np.abs(values - np.rint(values)) < INTEGRAL_TOL
    return np.where(near, np.rint(values), values)



def match_parent(problem: ParentProblem, x: np.ndarray, columns: np.ndarray, target) -> np.ndarray:
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
    x = snap(x)
    base = np.floor(x)
    frac = x - base
    cost = 1.0 - 2.0 * frac  # |base + b - x| = frac + b (1 - 2 frac) for b in {0, 1}
    rows, lows, highs = [], [], []
    if problem.parent_counts is not None:
        s_matrix = parent_sum(problem, columns)
        target = problem.parent_counts if parent_target is None else parent_target
        r = target - s_matrix @ base
        rows.append(s_matrix)
        lows.append(r)
        highs.append(r)
    # each child's total between floor and ceil of its L2 value
    t_matrix = total_matrix(problem, columns)
    t_star = snap(t_matrix @ x)
    t_base = t_matrix @ base
    rows.append(t_matrix)
    lows.append(np.floor(t_star) - t_base)
    highs.append(np.ceil(t_star) - t_base)
    b_matrix, lower, upper = bounds
    if b_matrix is not None:
        v_star = snap(b_matrix @ x)
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
    b = (highs_lp(cost, a_matrix, row_lower, row_upper, col_upper=ones, integer=False, presolve=False)
         if mode == "auto" else None)
    method = "lp"
    if b is None or np.abs(b - np.rint(b)).max(initial=0) > INTEGRAL_TOL:
        b = highs_lp(cost, a_matrix, row_lower, row_upper, col_upper=ones, integer=True)
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
            d = highs_lp(np.r_[cost, 2.0 - cost], both, np.concatenate(hard_lower), np.concatenate(hard_upper),
                          col_upper=col_upper, integer=True)
            if d is not None:
                return (base + np.rint(d[:n]) - np.rint(d[n:])).astype(np.int64), "milp-hard-rules"
        return None, "infeasible"
    return (base + np.rint(b)).astype(np.int64), method


def check_counts(problem: ParentProblem, counts: np.ndarray, columns, bounds: l2.BoundRows, *, parent_target=None) -> list[str]:
    """Exact integer checks of a candidate solution over the variables: non-negative, summing to the parent
    (or `parent_target`), within the bound rows."""
    bounds_matrix, lower, upper = bounds
    problems = []
    if (counts < 0).any():
        problems.append("negative count")
    if problem.parent_counts is not None:
        sums = parent_sum(problem, columns) @ counts
        target = problem.parent_counts if parent_target is None else parent_target
        if not np.array_equal(np.rint(sums).astype(np.int64), np.asarray(target, dtype=np.int64)):
            problems.append("children do not sum to the parent")
    if bounds_matrix is not None:
        values = bounds_matrix @ counts
        if (values < lower - 1e-9).any() or (values > upper + 1e-9).any():
            problems.append("a child bound is violated")
    return problems


def equality_rows(bounds: l2.BoundRows) -> tuple[sp.csr_matrix, np.ndarray] | None:
    """The bound rows with lower == upper > 0 (a child's total invariant) and their values; None if there are none."""
    b_matrix, lower, upper = bounds
    if b_matrix is None:
        return None
    equal = np.flatnonzero((lower == upper) & (upper > 0))
    return (b_matrix[equal], upper[equal]) if len(equal) else None


def match_rows(x: np.ndarray, rows: sp.csr_matrix, targets: np.ndarray) -> np.ndarray:
    """Scale the variables of each of `rows` (nonnegative) so that it sums to its target to float precision; the
    solver meets an equality only to its feasibility tolerance. Rows that share a variable are matched one after
    the other (the shipped schemas' do not: one total per child)."""
    n_rows = rows.shape[0]
    disjoint = np.bincount(rows.indices, minlength=1).max() <= 1
    for group in [np.arange(n_rows)] if disjoint else [np.array([r]) for r in range(n_rows)]:
        part = rows[group]
        sums = part @ x
        factor = np.divide(targets[group], sums, out=np.ones(len(group)), where=sums > 0)
        scale = np.ones(len(x))
        scale[part.indices] = np.repeat(factor, np.diff(part.indptr))
        x = x * scale
    return x


def unrounded(problem: ParentProblem, x: np.ndarray, columns: np.ndarray, bounds: l2.BoundRows, *,
              parent_target=None) -> np.ndarray:
    """The L2 point as a fractional solution (NO_ROUNDING): cells below ZERO_TOL zeroed (carried down, the solver's
    residue would make every cell of the schema a variable of every problem below), then the equality bound rows
    and the per-cell parent sums (`parent_target`, default the parent's counts) matched in turn, the parent last:
    children sum to the parent up to float error, each equality row to float precision once the two agree."""
    x = np.where(x < ZERO_TOL, 0.0, x)
    equal = equality_rows(bounds)
    if problem.parent_counts is None:
        return x if equal is None else match_rows(x, *equal)
    target = problem.parent_counts if parent_target is None else parent_target
    for _ in range(MATCH_ROUNDS):
        x = match_parent(problem, x if equal is None else match_rows(x, *equal), columns, target)
        if equal is None or np.allclose(equal[0] @ x, equal[1], rtol=1e-12, atol=0.0):
            break
    return x


def check_fractional(problem: ParentProblem, values: np.ndarray, columns, bounds: l2.BoundRows, *,
                     tolerance: float = INTEGRAL_TOL) -> list[str]:
    """`check_counts` for a fractional candidate: nonnegative, summing to the parent and within the bound rows,
    each up to `tolerance` relative to the row's size (a float solution meets them to its solver's accuracy)."""
    b_matrix, lower, upper = bounds
    problems = []
    if (values < 0).any():
        problems.append("negative count")
    if problem.parent_counts is not None:
        target = np.asarray(problem.parent_counts, dtype=float)
        if (np.abs(parent_sum(problem, columns) @ values - target) > tolerance * np.maximum(1.0, target)).any():
            problems.append("children do not sum to the parent")
    if b_matrix is not None:
        at = b_matrix @ values
        margin = tolerance * np.maximum(1.0, np.abs(at))
        if (at < lower - margin).any() or (at > upper + margin).any():
            problems.append("a child bound is violated")
    return problems
