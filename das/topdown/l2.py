"""One least-squares pass as a QP handed straight to Clarabel (no cvxpy): the nested formulation.

The objective sum_q w_q ||A_q x - y_q||^2 has a dense Hessian (A_q'A_q couples every cell of a
child through `total`). Instead each measured answer becomes a variable, defined from the next
finer measured query: a child's `hhgq` answers from its `hhgq x votingage` answers, its `total`
from its `hhgq`, `detailed` is x itself. The objective is then diagonal in those variables and
the definitions are a few sparse equality rows, so the KKT system Clarabel factors stays about
as sparse as x. Answers measured twice (a geounit's only child) add to the same variable's
weight. It is the same problem, solved to the same optimum; `certify` checks it in counts.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

DEFAULT_SETTINGS: dict = {}  # Clarabel's own defaults
TIGHT_SETTINGS = {"tol_gap_abs": 1e-12, "tol_gap_rel": 1e-12, "tol_feas": 1e-12, "tol_ktratio": 1e-10,
                  "max_iter": 500}


@dataclass
class Lifted:
    """x (n_var) followed by answer variables; the objective sum weight v^2 + linear v + constant in counts."""

    n_var: int
    definitions: list[sp.csr_matrix]  # rows over the variables so far, each == 0: answer - (its finer answers)
    weight: np.ndarray
    linear: np.ndarray
    constant: float
    bases: list[tuple[sp.csr_matrix, np.ndarray]]  # partitions over x and the variables holding their answers

    @property
    def n_total(self) -> int:
        return len(self.weight)


def _is_partition(a: sp.csr_matrix) -> bool:
    """0/1 rows over disjoint sets of x (each cell in at most one row), none empty."""
    return (a.data == 1).all() and (a.getnnz(axis=0) <= 1).all() and (a.getnnz(axis=1) > 0).all()


def _grouping(a: sp.csr_matrix, base: sp.csr_matrix) -> sp.csr_matrix | None:
    """G (0/1) with a == G @ base when every row of `a` is a union of rows of the partition `base`; else None."""
    overlap = (a @ base.T).tocoo()
    sizes = base.getnnz(axis=1)
    whole = overlap.data == sizes[overlap.col]
    g = sp.csr_matrix((np.ones(whole.sum()), (overlap.row[whole], overlap.col[whole])), shape=(a.shape[0], base.shape[0]))
    if abs(g @ base - a).sum() > 0:  # binary matrices: exact in floating point
        return None
    return g


def express(lifted: Lifted, a: sp.csr_matrix) -> sp.csr_matrix:
    """Rows over all variables equal to a @ x at every feasible point, using the coarsest measured partition that refines a."""
    a = sp.csr_matrix(a, dtype=float)
    best = None
    if (a.data == 1).all():
        for base, holders in lifted.bases:
            if base.shape[0] >= (best[0].shape[1] if best is not None else np.inf):
                continue
            g = _grouping(a, base)
            if g is not None:
                best = (g, holders)
    if best is None:
        return sp.hstack([a, sp.csr_matrix((a.shape[0], lifted.n_total - lifted.n_var))], format="csr")
    g, holders = best
    g = g.tocoo()
    return sp.csr_matrix((g.data, (g.row, holders[g.col])), shape=(a.shape[0], lifted.n_total))


def lift(terms, n_var: int) -> Lifted:
    """The nested formulation of the terms (rows over x, answers, 1/variance): finest queries first."""
    lifted = Lifted(n_var, [], np.zeros(n_var), np.zeros(n_var), 0.0, [])
    for a, y, w in sorted(terms, key=lambda t: -t[0].shape[0]):
        a = sp.csr_matrix(a, dtype=float)
        e = express(lifted, a)
        single = (e.getnnz(axis=1) == 1).all() and (e.data == 1).all() and len(np.unique(e.indices)) == e.shape[0]
        if single:  # the answers already are variables (x itself, or a query measured again)
            holders = e.indices.copy()
        else:
            start = lifted.n_total
            holders = np.arange(start, start + a.shape[0])
            grow = a.shape[0]
            lifted.weight = np.r_[lifted.weight, np.zeros(grow)]
            lifted.linear = np.r_[lifted.linear, np.zeros(grow)]
            own = sp.csr_matrix((np.ones(grow), (np.arange(grow), holders)), shape=(grow, start + grow))
            lifted.definitions.append((own - _pad(e, start + grow)).tocsr())
        np.add.at(lifted.weight, holders, w)
        np.add.at(lifted.linear, holders, -2.0 * w * y)
        lifted.constant += w * float(y @ y)
        if _is_partition(a) and not any(b.shape == a.shape and abs(b - a).sum() == 0 for b, _ in lifted.bases):
            lifted.bases.append((a, holders))
    return lifted


def _pad(m: sp.csr_matrix, n: int) -> sp.csr_matrix:
    return sp.hstack([m, sp.csr_matrix((m.shape[0], n - m.shape[1]))], format="csr") if m.shape[1] < n else m


def solve(terms, n_var: int, scale: float, parent=None, slack_budget=None, bounds=(None, None, None),
          fixed=(), pass_slack: float = 0.0, tight: bool = False) -> np.ndarray | None:
    """min over x >= 0 of the terms, children summing to the parent, bounds and held answers; x in counts or None.

    Variables are in units of `scale` (feasibility tolerances relative to the counts); the objective
    stays in counts. None when Clarabel does not report the problem solved (infeasible, stalled).
    """
    import clarabel

    lifted = lift(terms, n_var)
    n = lifted.n_total
    eq_rows, eq_rhs, le_rows, le_rhs = [], [], [], []
    for d in lifted.definitions:
        eq_rows.append(d)
        eq_rhs.append(np.zeros(d.shape[0]))
    n_slack = 0
    if parent is not None:
        s_matrix, counts = parent
        s_rows = express(lifted, s_matrix)
        if slack_budget is None:
            eq_rows.append(s_rows)
            eq_rhs.append(counts / scale)
        else:  # |S x - counts|_1 <= budget: S x - p + m = counts, p, m >= 0, sum(p + m) <= budget
            n_slack = 2 * len(counts)
            eq_rows.append(sp.hstack([s_rows, -sp.identity(len(counts)), sp.identity(len(counts))], format="csr"))
            eq_rhs.append(counts / scale)
            le_rows.append(sp.csr_matrix(np.r_[np.zeros(n), np.ones(n_slack)][None, :]))
            le_rhs.append(np.array([slack_budget / scale]))
    width = n + n_slack
    le_rows.append(sp.hstack([-sp.identity(width)], format="csr"))  # every variable >= 0
    le_rhs.append(np.zeros(width))
    b_matrix, lower, upper = bounds
    if b_matrix is not None:
        rows = express(lifted, b_matrix)
        lo, hi = lower > 0, np.isfinite(upper)
        if lo.any():
            le_rows.append(-rows[lo])
            le_rhs.append(-lower[lo] / scale)
        if hi.any():
            le_rows.append(rows[hi])
            le_rhs.append(upper[hi] / scale)
    for matrix, target in fixed:
        rows = express(lifted, matrix)
        le_rows += [rows, -rows]
        le_rhs += [(target + pass_slack) / scale, -(target - pass_slack) / scale]
    a_matrix = sp.vstack([_pad(m, width) for m in eq_rows + le_rows], format="csc")
    b_vector = np.concatenate(eq_rhs + le_rhs)
    n_eq = sum(m.shape[0] for m in eq_rows)
    weight = np.r_[lifted.weight, np.zeros(n_slack)]
    linear = np.r_[lifted.linear, np.zeros(n_slack)]
    # z = e + shift, shift the weighted mean of each answer's measurements: the objective Clarabel sees
    # is then the sum of squared residuals itself, so its relative gap tolerance is relative to f
    shift = np.divide(-linear, 2.0 * weight * scale, out=np.zeros(width), where=weight > 0)
    b_vector = b_vector - a_matrix @ shift
    p_matrix = sp.diags(2.0 * weight * scale**2, format="csc")
    cones = ([clarabel.ZeroConeT(n_eq)] if n_eq else []) + [clarabel.NonnegativeConeT(a_matrix.shape[0] - n_eq)]
    settings = clarabel.DefaultSettings()
    settings.verbose = False
    for key, value in (TIGHT_SETTINGS if tight else DEFAULT_SETTINGS).items():
        setattr(settings, key, value)
    solution = clarabel.DefaultSolver(p_matrix, np.zeros(width), a_matrix, b_vector, cones, settings).solve()
    if str(solution.status) not in ("Solved", "AlmostSolved"):
        return None
    return np.clip((np.asarray(solution.x[:n_var], dtype=float) + shift[:n_var]) * scale, 0, None)
