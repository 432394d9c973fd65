"""The optimality certificate of a least-squares solution: its duality gap in original units (objective(x) minus
a lower bound on the optimum, from the Fenchel dual and an LP over the feasible set), and the per-level record the
gaps are summed into. An optimum is checked here, never assumed from a solver's status."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from das.topdown import l2
from das.topdown.matrices import parent_sum
from das.topdown.solvers import highs_lp

GAP_TOL = 1e-6  # an L2 solution is accepted when its duality gap <= GAP_TOL * max(objective, 1)


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


@dataclass(frozen=True)
class Region:
    """A set a certificate's lower bound is taken over: y >= 0, the parent sums (within `parent_half` of them), the
    bound rows (lower <= B y <= upper) and the held answers of earlier passes (rows, target, half-width)."""

    parent_sums: np.ndarray | None
    parent_half: np.ndarray | None
    bounds: l2.BoundRows
    held: list


def slack(values: np.ndarray) -> np.ndarray:
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
    held = [(matrix, target, np.abs(matrix @ x - target) + slack(target)) for matrix, target in fixed]
    stated = Region(exact_sums, None if exact_sums is None else np.zeros_like(exact_sums),
                    l2.BoundRows(b_matrix, None if b_matrix is None else np.where(lower > 0, lower, -np.inf).astype(float),
                                 None if b_matrix is None else np.asarray(upper, dtype=float)), held)
    half, widened_bounds = None, stated.bounds
    if exact_sums is not None:
        half = np.abs(parent_sum(problem, columns) @ x - exact_sums) + slack(exact_sums)
    if b_matrix is not None:
        values = b_matrix @ x
        widened_bounds = l2.BoundRows(b_matrix, np.minimum(stated.bounds.lower, values - slack(values)),
                                      np.maximum(stated.bounds.upper, values + slack(values)))
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
    where that has none, over supersets of it (`lower_bound`), and the optimum is never below 0.
    """
    residuals = [a @ x - y for a, y, _ in terms]
    value = sum(w * float(r @ r) for (_, _, w), r in zip(terms, residuals))
    gap = value if lower is None else min(value, max(0.0, value - lower))
    if gap <= GAP_TOL * max(value, 1.0):
        return value, gap
    regions = regions_of(problem, columns, x, parent_sums=parent_sums, bounds=bounds, fixed=fixed)
    candidates = [residuals] if answers is None else [[v - y for v, (_, y, _) in zip(answers, terms)], residuals]
    for r in candidates:  # the solver's answers first: Frank-Wolfe's (an LP where bounds bind) only if they fail
        gap = min(gap, dual_gap(problem, columns, terms, r, value=value, regions=regions, x_total=float(x.sum())))
        if gap <= GAP_TOL * max(value, 1.0):
            break
    return value, gap


def dual_gap(problem, columns, terms, residuals, *, value: float, regions, x_total: float) -> float:
    """objective(x) - the Fenchel dual bound at u_q = 2 w_q r_q (`certify`), at most objective(x) (the optimum is >= 0)."""
    grad, offset = np.zeros(len(columns)), 0.0
    for (a, y, w), r in zip(terms, residuals):
        rows = np.repeat(np.arange(a.shape[0]), np.diff(a.indptr))
        grad += (2.0 * w) * np.bincount(a.indices, weights=a.data * r[rows], minlength=len(columns))
        offset += w * float(r @ r + 2.0 * (r @ y))  # value - dual = value + sum w (|r|^2 + 2 r'y) - min g'y
    low = lower_bound(problem, columns, grad, regions, cap=lambda: total_cap(terms, value), x_total=x_total)
    if low is None or not np.isfinite(low):
        return value
    return float(min(value, max(0.0, value + offset - low)))


def lower_bound(problem, columns, grad, regions: tuple[Region, ...], *, cap, x_total: float) -> float | None:
    """min grad'y over the first of `regions` (each a superset of the one before) that has a minimum; at a root
    with no total invariant (unbounded), within the optimal solutions' provable total `cap()`; where no LP has an
    answer, over a superset with a closed form: the parent sums alone, or y >= 0 with the total capped. None when
    none of these has a finite minimum."""
    root = regions[0].parent_sums is None
    limit = cap() if root else None
    limit = None if limit is None else max(limit, x_total)
    for total in (None, limit) if limit is not None else (None,):
        for region in regions:
            low = min_linear(problem, columns, grad, region, cap=total)
            if low is not None:
                return low
    if not root:
        return min_over_parent_sums(problem, columns, grad, regions[0].parent_sums)
    if limit is not None:  # min over {y >= 0, 1'y <= limit}: all of it on the cheapest variable, if that is negative
        return limit * min(0.0, float(grad.min(initial=0.0)))
    return None



def min_linear(problem, columns, cost, region: Region, *, cap: float | None = None):
    """min cost'y over `region` (y >= 0, the parent sums, the bound rows, the held answers; 1'y <= cap if given);
    None if the LP has no optimum (unbounded, infeasible within HiGHS's tolerances, or a solver failure).

    Without bound rows, held answers or cap the set is a product of per-cell simplices (each cell's parent count
    split over its children) and the minimum is closed-form; otherwise an LP (HiGHS) over the region's rows,
    the parent sums as the band that contains x (`Region`).
    """
    b_matrix, lower, upper = region.bounds
    if region.parent_sums is not None and b_matrix is None and not region.held and cap is None:
        return min_over_parent_sums(problem, columns, cost, region.parent_sums)
    rows, lows, highs = [], [], []
    if region.parent_sums is not None:
        rows.append(parent_sum(problem, columns))
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
    y = highs_lp(cost, sp.vstack(rows).tocsr(), np.concatenate(lows), np.concatenate(highs),
                  col_upper=np.full(len(columns), np.inf), integer=False)
    return None if y is None else float(cost @ y)


def min_over_parent_sums(problem, columns, cost, parent_sums) -> float | None:
    """min cost'y over y >= 0 with each cell's children summing to its parent count: each cell's count on its
    cheapest child (None if a counted cell has no variable)."""
    cell_of = columns % problem.n_cells
    best = np.full(problem.n_cells, np.inf)
    np.minimum.at(best, cell_of, cost)
    need = parent_sums > 0
    if np.isinf(best[need]).any():
        return None
    return float(parent_sums[need] @ best[need])


def total_cap(terms, value: float) -> float | None:
    """An upper bound on the total of every optimal x, from a measured partition of the cells.

    If a query's rows partition the cells, 1'A x = 1'x, and at any optimum ||A x* - y||^2 <= var f(x),
    so 1'x* <= 1'y + sqrt(rows var f(x)) (Cauchy-Schwarz). None if no measured query partitions them.
    """
    for a, y, w in terms:
        covered = np.asarray(a.sum(axis=0)).ravel()
        if a.shape[1] and np.array_equal(covered, np.ones(a.shape[1])):
            return float(y.sum() + np.sqrt(a.shape[0] * value / w)) + 1.0
    return None


