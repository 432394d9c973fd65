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

from dataclasses import dataclass, field
from typing import NamedTuple

import clarabel
import numpy as np
import scipy.sparse as sp

from das.topdown.problem import csr_rows

# Clarabel's defaults but no iterative refinement of each KKT solve: the same iterations in less time (Vermont's
# 1,425 problems 31% less; a county of 1,000 tracts 29%), and every optimum is certified in counts anyway: the few
# a certificate fails (61 of 1,800 stress roots, 10 with refinement) are solved again at TIGHT_SETTINGS, refined
DEFAULT_SETTINGS: dict = {"iterative_refinement_enable": False}
TIGHT_SETTINGS = {"iterative_refinement_enable": True, "tol_gap_abs": 1e-12, "tol_gap_rel": 1e-12, "tol_feas": 1e-12,
                  "tol_ktratio": 1e-10, "max_iter": 500}


class Stalled(RuntimeError):
    """Clarabel stopped short (iteration limit, insufficient progress): no proof of a solution nor of infeasibility."""


@dataclass
class Base:
    """A measured partition of x (row label of each variable, -1 if in none) and the variables holding its answers."""

    labels: np.ndarray
    holders: np.ndarray


@dataclass
class Lifted:
    """x (n_var) followed by answer variables; the objective sum weight v^2 + linear v + constant in counts."""

    n_var: int
    definitions: list[sp.csr_matrix]  # rows over the variables so far, each == 0: answer - (its finer answers)
    weight: np.ndarray
    linear: np.ndarray
    constant: float
    bases: list[Base]  # coarsest first
    holders: list[np.ndarray] = field(default_factory=list)  # per term, in the order given: its answers' variables

    @property
    def n_total(self) -> int:
        return len(self.weight)


def partition_labels(a: sp.csr_matrix) -> np.ndarray | None:
    """The row of each column when `a` is 0/1 with disjoint, nonempty rows (a partition of some of x); else None."""
    counts = np.diff(a.indptr)
    if not (a.data == 1).all() or (counts == 0).any() or np.bincount(a.indices, minlength=1).max(initial=0) > 1:
        return None
    labels = np.full(a.shape[1], -1)
    labels[a.indices] = np.repeat(np.arange(a.shape[0]), counts)
    return labels


def _union_of(labels: np.ndarray, base: Base) -> tuple[np.ndarray, np.ndarray] | None:
    """(row of a, base row) of each base row inside the partition a, in order, when each row of a is a union of
    base rows (a == G @ base with G 0/1 holding these pairs)."""
    covered = base.labels >= 0
    if (labels[~covered] >= 0).any():
        return None
    parent_of = np.full(len(base.holders), -1)
    parent_of[base.labels[covered]] = labels[covered]
    if (parent_of[base.labels[covered]] != labels[covered]).any():  # a base row split between rows of a
        return None
    inside = np.flatnonzero(parent_of >= 0)
    return parent_of[inside], inside


def _rows_union_of(a: sp.csr_matrix, base: Base) -> tuple[np.ndarray, np.ndarray] | None:
    """As _union_of for any 0/1 rows (overlapping ones, e.g. a child's total and its hhgq bounds)."""
    rows = np.repeat(np.arange(a.shape[0]), np.diff(a.indptr))
    lab = base.labels[a.indices]
    if (lab < 0).any():
        return None
    pairs = np.unique(rows * len(base.holders) + lab)
    row, col = pairs // len(base.holders), pairs % len(base.holders)
    sizes = np.bincount(base.labels[base.labels >= 0], minlength=len(base.holders))
    if not np.array_equal(np.bincount(row, weights=sizes[col], minlength=a.shape[0]), np.diff(a.indptr)):
        return None  # some base row only partly inside a row of a
    return row, col


class Entries(NamedTuple):
    """Rows as the arrays of a CSR matrix: the count of entries in each row, their columns and values."""

    counts: np.ndarray
    indices: np.ndarray
    data: np.ndarray


def express(lifted: Lifted, a: sp.csr_matrix) -> sp.csr_matrix:
    """Rows over all variables equal to a @ x at every feasible point, from the coarsest measured partition that refines a."""
    rows = _express(lifted, sp.csr_matrix(a, dtype=float))[0]
    return csr_rows(rows.data, rows.indices, rows.counts, lifted.n_total)


def _express(lifted: Lifted, a: sp.csr_matrix, labels: np.ndarray | None = None) -> tuple[Entries, bool]:
    """`express` as entries, and whether a was written over answer variables; `labels`: partition_labels(a), if known."""
    if (a.data == 1).all():
        labels = partition_labels(a) if labels is None else labels
        for base in lifted.bases:
            if labels is not None and len(base.holders) < a.shape[0]:
                continue  # a partition's every row holds a base row of its own: too few base rows
            pairs = _union_of(labels, base) if labels is not None else _rows_union_of(a, base)
            if pairs is not None:
                return _ones_at(pairs[0], base.holders[pairs[1]], a.shape[0], lifted.n_total), True
    return Entries(np.diff(a.indptr), a.indices, a.data), False


def _ones_at(row: np.ndarray, column: np.ndarray, n_rows: int, n_columns: int) -> Entries:
    """The 0/1 rows with ones at distinct (row, column) pairs, in canonical CSR order."""
    order = np.argsort(row * n_columns + column, kind="stable")
    return Entries(np.bincount(row, minlength=n_rows), column[order], np.ones(len(row)))


def lift(terms, n_var: int) -> Lifted:
    """The nested formulation of the terms (rows over x, answers, 1/variance): finest queries first."""
    lifted = Lifted(n_var, [], np.zeros(n_var), np.zeros(n_var), 0.0, [], [np.zeros(0, np.int64)] * len(terms))
    for i in sorted(range(len(terms)), key=lambda t: -terms[t][0].shape[0]):
        a, y, w = terms[i]
        if not (isinstance(a, sp.csr_matrix) and a.dtype == float):
            a = sp.csr_matrix(a, dtype=float)
        labels = partition_labels(a)
        e, nested = _express(lifted, a, labels)
        single = ((e.counts == 1).all() and (e.data == 1).all()
                  and np.bincount(e.indices, minlength=1).max(initial=0) <= 1)
        if single:  # the answers already are variables (x itself, or a query measured again)
            holders = np.array(e.indices, dtype=np.int64)
        else:
            start = lifted.n_total
            grow = a.shape[0]
            holders = np.arange(start, start + grow)
            lifted.weight = np.concatenate([lifted.weight, np.zeros(grow)])
            lifted.linear = np.concatenate([lifted.linear, np.zeros(grow)])
            lifted.definitions.append(_defined(e, start))
        lifted.holders[i] = holders
        lifted.weight[holders] += w  # holders are distinct: one addition each, as np.add.at
        lifted.linear[holders] += -2.0 * w * y
        lifted.constant += w * float(y @ y)
        if labels is not None and not (single and nested):  # not a measurement again of a partition already held
            lifted.bases.append(Base(labels, holders))
            lifted.bases.sort(key=lambda b: len(b.holders))
    return lifted


def _defined(e: Entries, start: int) -> sp.csr_matrix:
    """Rows `answer_i - e_i v = 0` with answer i the new variable start + i (after every column of e)."""
    rows = len(e.counts)
    counts = e.counts + 1
    last = np.cumsum(counts) - 1
    indices, data = np.empty(int(counts.sum()), dtype=np.int32), np.empty(int(counts.sum()))
    others = np.ones(len(data), dtype=bool)
    others[last] = False
    indices[others], data[others] = e.indices, -e.data
    indices[last], data[last] = start + np.arange(rows), 1.0
    return csr_rows(data, indices, counts, start + rows)


def _pad(m: sp.csr_matrix, n: int) -> sp.csr_matrix:
    """The same rows over n columns (new variables appended on the right)."""
    if not isinstance(m, sp.csr_matrix):
        m = sp.csr_matrix(m)
    return sp.csr_matrix((m.data, m.indices, m.indptr), shape=(m.shape[0], n)) if m.shape[1] < n else m


def _stacked(blocks: list[sp.csr_matrix], n: int) -> sp.csr_matrix:
    """sp.vstack of CSR blocks over at most n columns, widened to n: their arrays concatenated."""
    counts = np.concatenate([np.diff(b.indptr) for b in blocks])
    return csr_rows(np.concatenate([b.data for b in blocks]), np.concatenate([b.indices for b in blocks]), counts, n)


def _picked(m: sp.csr_matrix, rows: np.ndarray, sign: float = 1.0) -> sp.csr_matrix:
    """sign * m[rows] for a boolean mask `rows`, without scipy's fancy indexing."""
    counts = np.diff(m.indptr)
    keep = np.repeat(rows, counts)
    return csr_rows(sign * m.data[keep], m.indices[keep], counts[rows], m.shape[1])


class BoundRows(NamedTuple):
    """lower <= matrix @ x <= upper over the variables (inf: unbounded); all None when nothing binds."""

    matrix: sp.csr_matrix | None
    lower: np.ndarray | None
    upper: np.ndarray | None


NO_BOUNDS = BoundRows(None, None, None)


@dataclass(frozen=True)
class Pass:
    """One least-squares pass as stated: the fitted terms (A, y, w), the held answers of earlier
    passes (rows, target), the parent's sums (S, counts) or None at a root, the bound rows
    (B, lower, upper), and the failsafe's L1 slack on the parent sums (None: exact)."""

    terms: list
    fixed: list = field(default_factory=list)
    parent: tuple | None = None
    bounds: BoundRows = NO_BOUNDS
    slack_budget: float | None = None


class Point(NamedTuple):
    """A solution in counts: x clipped at zero, the solver's own answer variables of every term (unclipped, in the
    terms' order), and the Lagrangian lower bound on the optimum that the solver's dual variables give (`dual_bound`;
    None where there is none): what the certificate is built from (das.topdown.optimality.certify)."""

    x: np.ndarray
    answers: list[np.ndarray]
    lower: float | None = None


def solve(stated: Pass, n_var: int, scale: float, tight: bool = False) -> np.ndarray | None:
    """min over x >= 0 of the terms, children summing to the parent, bounds and held answers; x in counts or None.

    Variables are in units of `scale` (feasibility tolerances relative to the counts); the objective
    stays in counts. None when Clarabel proves the problem infeasible; `Stalled` when it stops short.
    """
    point = solve_point(stated, n_var, scale, tight)
    return None if point is None else point.x


def solve_point(stated: Pass, n_var: int, scale: float, tight: bool = False) -> Point | None:
    """`solve`, with the solver's answer variables of every term and its dual bound (the `Point`)."""
    qp = system_of(stated, n_var, scale)
    system = qp.system
    width = len(system.diagonal)
    held = np.flatnonzero(system.diagonal)  # as sp.diags(diagonal, format="csc"): no stored zeros
    starts = np.zeros(width + 1, dtype=np.int32)
    np.cumsum(system.diagonal != 0, out=starts[1:])
    p_matrix = sp.csc_matrix((system.diagonal[held], held.astype(np.int32), starts), shape=(width, width))
    n_rows = system.a_matrix.shape[0]
    cones = ([clarabel.ZeroConeT(system.n_eq)] if system.n_eq else []) + [clarabel.NonnegativeConeT(n_rows - system.n_eq)]
    settings = clarabel.DefaultSettings()
    settings.verbose = False
    for key, value in (TIGHT_SETTINGS if tight else DEFAULT_SETTINGS).items():
        setattr(settings, key, value)
    solution = clarabel.DefaultSolver(p_matrix, np.zeros(width), system.a_matrix, system.b_vector, cones, settings).solve()
    status = str(solution.status)
    if status in ("PrimalInfeasible", "AlmostPrimalInfeasible"):
        return None
    if status not in ("Solved", "AlmostSolved"):
        raise Stalled(f"Clarabel stopped with status {status} after {solution.iterations} iterations")
    primal = np.asarray(solution.x, dtype=float)
    values = qp.counts(primal)
    # the failsafe's pass is certified against the sums it settled on (das.topdown.solve), not this relaxed QP's
    bound = dual_bound(system, primal, np.asarray(solution.z, dtype=float)) if stated.slack_budget is None else None
    return Point(np.clip(values[:n_var], 0, None), [values[h] for h in qp.lifted.holders],
                 None if bound is None else bound + qp.constant)


def _independent(equalities: list[tuple[sp.csr_matrix, np.ndarray]]) -> list[tuple[sp.csr_matrix, np.ndarray]]:
    """Equalities over x (held answers, fixed bound rows) without the queries that others imply, finest first: a query
    each of whose rows is a union of rows of a partition kept before it (hhinstlevels held beside hhgq; the total
    invariant beside either) repeats what that partition says, and a row without a variable says 0 = 0. Dependent
    equalities left Clarabel short of progress at Hawaii's root (stress.roots, issue 41)."""
    kept, bases = [], []
    for matrix, target in sorted(equalities, key=lambda e: -e[0].shape[0]):
        a = sp.csr_matrix(matrix, dtype=float)
        rows = np.diff(a.indptr) > 0
        a, target = _picked(a, rows), np.asarray(target)[rows]
        if not a.shape[0] or (a.data == 1).all() and any(_rows_union_of(a, base) is not None for base in bases):
            continue
        labels = partition_labels(a)
        if labels is not None:
            bases.append(Base(labels, np.arange(a.shape[0])))
        kept.append((a, target))
    return kept


class System(NamedTuple):
    """The QP as Clarabel takes it: min 1/2 e'diag(P)e s.t. A e + s = b, s in {0}^n_eq x R+^rest; `sign_rows[i]` is
    the row -e_i <= b_i of variable i's nonnegativity (-1: none, a free variable)."""

    diagonal: np.ndarray
    a_matrix: sp.csc_matrix
    b_vector: np.ndarray
    n_eq: int
    sign_rows: np.ndarray


@dataclass(frozen=True)
class StatedQP:
    """A pass as the QP Clarabel solves (`system`), and how its variables e map back: counts = (e + shift) * scale,
    and the objective in counts is 1/2 e'Pe + `constant` wherever the answers are x's (das.topdown.matrices.objective)."""

    system: System
    lifted: Lifted
    shift: np.ndarray
    scale: float
    constant: float

    def counts(self, primal: np.ndarray) -> np.ndarray:
        return (primal + self.shift) * self.scale


def system_of(stated: Pass, n_var: int, scale: float) -> StatedQP:
    """The pass as a QP over x / scale and its answer variables (`lift`): equalities first (the answers' definitions,
    the parent sums, the held answers), then inequalities (the failsafe's slack budget, x >= 0, the bound rows)."""
    terms, parent, slack_budget, bounds, fixed = (stated.terms, stated.parent, stated.slack_budget, stated.bounds,
                                                  stated.fixed)
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
    b_matrix, lower, upper = bounds
    equalities = list(fixed)  # held answers of earlier passes
    if b_matrix is not None:  # a bound row whose lower and upper meet is an equality (an IPM needs an interior)
        fixed_rows = (lower > 0) & (lower == upper)
        if fixed_rows.any():
            equalities.append((_picked(sp.csr_matrix(b_matrix), fixed_rows), lower[fixed_rows]))
    for matrix, target in _independent(equalities):
        eq_rows.append(express(lifted, matrix))
        eq_rhs.append(target / scale)
    width = n + n_slack
    # x >= 0 and the slacks >= 0; answer variables are defined from x (sums: nonneg by themselves)
    signed = np.r_[np.arange(n_var), np.arange(n, width)]
    n_eq = sum(m.shape[0] for m in eq_rows)
    sign_rows = np.full(width, -1)
    sign_rows[signed] = n_eq + sum(m.shape[0] for m in le_rows) + np.arange(len(signed))
    le_rows.append(csr_rows(-np.ones(len(signed)), signed, np.ones(len(signed), dtype=np.int32), width))
    le_rhs.append(np.zeros(len(signed)))
    if b_matrix is not None:
        bound_rows = express(lifted, b_matrix)
        lo, hi = (lower > 0) & ~fixed_rows, np.isfinite(upper) & ~fixed_rows
        if lo.any():
            le_rows.append(_picked(bound_rows, lo, -1.0))
            le_rhs.append(-lower[lo] / scale)
        if hi.any():
            le_rows.append(_picked(bound_rows, hi))
            le_rhs.append(upper[hi] / scale)
    a_matrix = _stacked(eq_rows + le_rows, width).tocsc()
    b_vector = np.concatenate(eq_rhs + le_rhs)
    weight = np.r_[lifted.weight, np.zeros(n_slack)]
    linear = np.r_[lifted.linear, np.zeros(n_slack)]
    # z = e + shift, shift the weighted mean of each answer's measurements: the objective Clarabel sees
    # is then the sum of squared residuals itself, so its relative gap tolerance is relative to f
    shift = np.divide(-linear, 2.0 * weight * scale, out=np.zeros(width), where=weight > 0)
    b_vector = b_vector - a_matrix @ shift
    system = System(2.0 * weight * scale**2, a_matrix, b_vector, n_eq, sign_rows)
    return StatedQP(system, lifted, shift, scale, _constant(lifted, terms))


def dual_bound(system: System, primal: np.ndarray, dual: np.ndarray) -> float | None:
    """A lower bound on min 1/2 e'Pe over the system's set widened to contain `primal`, from any dual point.

    Weak duality: for z with z >= 0 on the inequality rows, every e of the set has 1/2 e'Pe >= g(z) = -b'z +
    min_e (1/2 e'Pe + (A'z)'e) = -b'z - sum (A'z)_i^2 / 2P_i, provided (A'z)_i = 0 wherever P_i = 0. The set is
    widened to contain the solver's own point (each equality within |A_i e - b_i| of b_i, each inequality moved by
    its violation), which costs |z_i| times that: the bound then holds for a set the solution is in, so it is
    never vacuous, even when the rows as stated contradict each other within the solver's tolerance. Dual
    feasibility is restored first: the inequality duals clipped at 0, and (A'z)_i moved into the multiplier of
    e_i >= 0 where P_i = 0 (possible when that multiplier stays >= 0; else None). Its accuracy is second order in
    the dual's error where P_i > 0 (no parent count multiplies a gradient error, as in Frank-Wolfe's gap), first
    order in the primal residuals.
    """
    z = dual.copy()
    z[system.n_eq:] = np.maximum(z[system.n_eq:], 0.0)
    c = system.a_matrix.T @ z
    free = np.flatnonzero(system.diagonal == 0)
    if len(free):
        rows = system.sign_rows[free]
        if (rows < 0).any():  # a weightless variable without a sign: (A'z)_i must be 0 exactly, which no repair gives
            return None
        z[rows] += c[free]  # the row is -e_i: its multiplier's increase lowers (A'z)_i by as much
        if (z[rows] < 0).any():
            return None
        c[free] = 0.0
    residual = system.a_matrix @ primal - system.b_vector
    widened = (np.abs(z[:system.n_eq]) @ np.abs(residual[:system.n_eq])
               + z[system.n_eq:] @ np.maximum(residual[system.n_eq:], 0.0))
    held = system.diagonal > 0
    value = -(system.b_vector @ z) - widened - float(np.sum(c[held] ** 2 / (2.0 * system.diagonal[held])))
    return float(value) if np.isfinite(value) else None


def _constant(lifted: Lifted, terms) -> float:
    """The objective in counts less what Clarabel sees (1/2 e'Pe): each measurement's squared distance to the weighted
    mean of its answer's measurements, summed directly (not as a difference of large sums)."""
    mean = np.divide(-lifted.linear, 2.0 * lifted.weight, out=np.zeros_like(lifted.weight), where=lifted.weight > 0)
    return float(sum(w * float(np.sum((y - mean[h]) ** 2)) for (_, y, w), h in zip(terms, lifted.holders)))
