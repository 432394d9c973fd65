"""The L2 set-up: a parent problem's variables (its allowed child x cell pairs, child-major), and the matrices and
weighted terms over them in which the least squares, its certificate and the rounding all state their rows."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from das.topdown import l2
from das.topdown.problem import ChildConstraints, ParentProblem, csr_rows

# ---------------------------------------------------------------------------------------------
# Matrices over the problem's variables (allowed child x cell pairs, child-major)


def variables(problem: ParentProblem) -> np.ndarray:
    return np.flatnonzero(problem.allowed.ravel())


def positions(n_children: int, n_cells: int, columns: np.ndarray) -> np.ndarray:
    """The variable of each child x cell (child-major), -1 where there is none (a structural zero)."""
    position = np.full(n_children * n_cells, -1, dtype=np.int32)
    position[columns] = np.arange(len(columns))
    return position


def entries(matrix: sp.csr_matrix, children: np.ndarray, n_cells: int, position: np.ndarray):
    """The entries of kron(pick(children), matrix) over the variables (`positions`): (values, variables,
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


def per_child(matrix: sp.csr_matrix, n_children: int, columns: np.ndarray) -> sp.csr_matrix:
    """kron(I_children, matrix) restricted to the variable columns."""
    position = positions(n_children, matrix.shape[1], columns)
    values, where, counts = entries(matrix, np.arange(n_children), matrix.shape[1], position)
    return csr_rows(values, where, counts, len(columns))


def parent_sum(problem: ParentProblem, columns: np.ndarray) -> sp.csr_matrix:
    """(n_cells x n_var): per-cell sums over children."""
    cell_of = columns % problem.n_cells
    return csr_rows(np.ones(len(columns)), np.argsort(cell_of, kind="stable"),
                np.bincount(cell_of, minlength=problem.n_cells), len(columns))


def total_matrix(problem: ParentProblem, columns: np.ndarray) -> sp.csr_matrix:
    """(n_children x n_var): each child's total (its variables are consecutive: columns are child-major)."""
    return csr_rows(np.ones(len(columns)), np.arange(len(columns)),
                np.bincount(columns // problem.n_cells, minlength=problem.n_children), len(columns))


def bound_rows(problem: ParentProblem, columns: np.ndarray) -> l2.BoundRows:
    """The children's bound rows over the variables."""
    c: ChildConstraints | None = problem.constraints
    if c is None or c.matrix.shape[0] == 0:
        return l2.NO_BOUNDS
    return l2.BoundRows(per_child(c.matrix, problem.n_children, columns),
                        c.lower.astype(float).ravel(), c.upper.astype(float).ravel())


def queries_in_pass(problem: ParentProblem, names: tuple[str, ...], done: set[str]):
    if names:
        return [q for q in problem.queries if q.name in names]
    return [q for q in problem.queries if q.name not in done]


def scale_of(answers: list[np.ndarray], parent) -> float:
    """A typical magnitude of the answers: variables are solved in units of it, so that interior-point
    feasibility tolerances are relative (Clarabel missed a 322,539 equality by 15 on unscaled counts)."""
    values = [np.abs(y).max(initial=0) for y in answers]
    if parent is not None:
        values.append(np.abs(parent[1]).max(initial=0))
    return max(1.0, float(max(values, default=1.0)))


def query_rows(problem: ParentProblem, q, columns: np.ndarray) -> sp.csr_matrix:
    """The query's answer rows over the problem's variables: every child's, or only `q.rows`' children."""
    if q.rows is None:
        return per_child(q.matrix, problem.n_children, columns)
    values, where, counts = entries(q.matrix, np.asarray(q.rows), problem.n_cells,
                                     positions(problem.n_children, problem.n_cells, columns))
    return csr_rows(values, where, counts, len(columns))


def weighted_terms(problem: ParentProblem, columns: np.ndarray, queries) -> list[tuple[sp.csr_matrix, np.ndarray, float]]:
    """(rows over the variables, noisy answers, weight 1/variance) of each query: the objective in counts.

    Rows without a variable (every cell of it a structural zero) are left out."""
    terms = []
    position = positions(problem.n_children, problem.n_cells, columns)
    every_child = np.arange(problem.n_children)
    for q in queries:
        children = every_child if q.rows is None else np.asarray(q.rows)
        values, where, counts = entries(q.matrix, children, problem.n_cells, position)
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

