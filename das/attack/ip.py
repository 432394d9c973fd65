"""Integer-programming reconstruction (HiGHS): histograms x >= 0, integer, with A x = published counts.

Variables are the cells no published zero rules out (a zero count empties every cell of its
query). A record is certain when min x_i over every feasible solution is >= 1. The solution
is unique exactly when, for each cell of one solution x*, min x_i = x*_i: with the total
published, any other solution must take some mass away from a cell of x*.
"""

from __future__ import annotations

from dataclasses import dataclass

import highspy
import numpy as np
import scipy.sparse as sp

from das.attack.workload import Workload
from das.topdown.solvers import quiet_highs


@dataclass(frozen=True)
class IpProblem:
    """Cells that may be nonzero (V x n_attributes levels), the query matrix (Q x V), the counts."""

    cells: np.ndarray
    matrix: sp.csr_matrix
    counts: np.ndarray


@dataclass(frozen=True)
class Variability:
    """How determined a block is: one solution's distinct cells, how many records every
    solution shares (sum of min x_i over them), and whether the solution is unique."""

    n_variables: int
    support: int
    certain_records: int
    unique: bool | None  # None: a solve hit its time limit


def build_problem(workload: Workload, counts: np.ndarray) -> IpProblem:
    """The integer program of one block's published counts (schema domains up to a few million cells)."""
    counts = np.rint(np.asarray(counts, dtype=float)).astype(np.int64)
    alive = np.ones(workload.sizes, dtype=bool)
    for q in np.flatnonzero(counts <= 0):
        levels = [np.flatnonzero(workload.masks[a][workload.index[q, a]]) for a in range(len(workload.sizes))]
        alive[np.ix_(*levels)] = False
    cells = np.argwhere(alive)
    inside = np.ones((workload.n_queries, len(cells)), dtype=bool)
    for a, masks in enumerate(workload.masks):
        if workload.index[:, a].any():
            inside &= masks[:, cells[:, a]][workload.index[:, a]]
    return IpProblem(cells, sp.csr_matrix(inside.astype(np.float64)), counts)


class Solver:
    """One HiGHS model of a problem; solve for a feasible x or for min x_i."""

    def __init__(self, problem: IpProblem, time_limit: float = 30.0):
        self.problem = problem
        n = len(problem.cells)
        self.highs = quiet_highs()  # no banner on stdout
        self.highs.setOptionValue("threads", 1)
        self.highs.setOptionValue("time_limit", float(time_limit))
        lp = highspy.HighsLp()
        lp.num_col_ = n
        lp.num_row_ = problem.matrix.shape[0]
        lp.col_cost_ = np.zeros(n)
        lp.col_lower_ = np.zeros(n)
        lp.col_upper_ = np.full(n, float(max(problem.counts.max(initial=0), 0)))
        lp.row_lower_ = problem.counts.astype(float)
        lp.row_upper_ = problem.counts.astype(float)
        csc = problem.matrix.tocsc()
        lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
        lp.a_matrix_.start_ = csc.indptr.astype(np.int32)
        lp.a_matrix_.index_ = csc.indices.astype(np.int32)
        lp.a_matrix_.value_ = csc.data.astype(float)
        lp.integrality_ = [highspy.HighsVarType.kInteger] * n
        self.highs.passModel(lp)

    def _run(self, cell: int | None) -> np.ndarray | None:
        n = len(self.problem.cells)
        if cell is not None:
            self.highs.changeColCost(int(cell), 1.0)
        self.highs.run()
        ok = self.highs.getModelStatus() == highspy.HighsModelStatus.kOptimal
        x = np.rint(np.asarray(self.highs.getSolution().col_value, dtype=float)).astype(np.int64) if ok else None
        if cell is not None:
            self.highs.changeColCost(int(cell), 0.0)
        return x if x is None or len(x) == n else None

    def feasible(self) -> np.ndarray | None:
        """One integer solution, or None (infeasible or out of time)."""
        if len(self.problem.cells) == 0:
            return np.zeros(0, np.int64) if not self.problem.counts.any() else None
        return self._run(None)

    def minimum(self, cell: int) -> tuple[int | None, np.ndarray | None]:
        """(min x_cell over feasible solutions, a minimizing solution); None when not proven."""
        x = self._run(cell)
        return (None, None) if x is None else (int(x[cell]), x)


def cell_of(problem: IpProblem, records: np.ndarray) -> np.ndarray:
    """Index of each record's cell among the problem's variables, -1 when ruled out."""
    records = np.asarray(records, dtype=np.int64).reshape(-1, problem.cells.shape[1])
    if len(problem.cells) == 0:
        return np.full(len(records), -1)
    both = np.concatenate([problem.cells, records])
    _, inv = np.unique(both, axis=0, return_inverse=True)
    inv = inv.reshape(-1)
    lookup = np.full(inv.max() + 1, -1)
    lookup[inv[:len(problem.cells)]] = np.arange(len(problem.cells))
    return lookup[inv[len(problem.cells):]]


def certainty(solver: Solver, records: np.ndarray, first: np.ndarray) -> np.ndarray:
    """min x_i over feasible solutions for each record (0: absent from some solution; -1: unproven).
    `first` is a feasible solution; every solution found on the way rules out more cells."""
    cells = cell_of(solver.problem, records)
    seen_zero = first == 0
    minimum = {}
    out = np.zeros(len(cells), dtype=np.int64)
    for i, c in enumerate(cells):
        if c < 0 or seen_zero[c]:
            continue
        if c not in minimum:
            value, x = solver.minimum(c)
            minimum[c] = -1 if value is None else value
            if x is not None:
                seen_zero |= x == 0
        out[i] = minimum[c]
    return out


def variability(solver: Solver, first: np.ndarray) -> Variability:
    """Unique solution or not, and the records shared by every solution (min over x*'s cells)."""
    support = np.flatnonzero(first > 0)
    mins = certainty(solver, solver.problem.cells[support], first)
    unique = None if (mins < 0).any() else bool((mins == first[support]).all())
    return Variability(len(solver.problem.cells), len(support), int(mins[mins > 0].sum()), unique)
