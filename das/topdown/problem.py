"""The per-parent problem of TopDown, as arrays: the unit of parallel work.

Variables are the children x the cells that are nonzero in the solved parent, minus each
child's structural zeros (`allowed`). Everything a solver needs is here; nothing refers back
to files or to the rest of the run.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

import numpy as np
import scipy.sparse as sp

from das.io.nmf import NoisyAnswers
from das.model.rules import Bounds
from das.model.schema import Schema

DEFAULT_PASSES: tuple[tuple[str, ...], ...] = ((),)  # one pass over every query (a spec's [postprocess] passes)


@dataclass(frozen=True)
class ChildAnswers:
    """Noisy answers for some of a parent's children: `answers` holds a row per child in order (rows None),
    or a row per geounit that is the only descendant of child `rows[i]` (the same persons measured again
    at a finer level)."""

    answers: NoisyAnswers
    rows: np.ndarray | None = None

    @property
    def query(self) -> str:
        return self.answers.query

    def within(self, c0: int, c1: int) -> ChildAnswers:
        """Those of children c0..c1-1, numbered from c0 (one parent's share of a batch's answers)."""
        if self.rows is None:
            return ChildAnswers(self.answers.rows(c0, c1))
        mine = (self.rows >= c0) & (self.rows < c1)
        return ChildAnswers(self.answers.take(mine), self.rows[mine] - c0)


@dataclass(frozen=True)
class QueryAnswers:
    """One query of the strategy in a parent's problem: its matrix over the parent's cells, and the children's
    (or `rows`') noisy answers on the matrix's rows (the query's cells that reach one of the parent's)."""

    matrix: sp.csr_matrix  # (n_query_rows, n_cells): a child's histogram -> its answers
    noisy: NoisyAnswers    # (n_children, n_query_rows), or one row per `rows` entry; the exact variance
    rows: np.ndarray | None = None  # the children these answers are of (None: all, in order)

    @property
    def name(self) -> str:
        return self.noisy.query


@dataclass(frozen=True)
class ChildConstraints:
    """lower <= matrix @ x_c <= upper for every child c (inf = unbounded)."""

    matrix: sp.csr_matrix  # (n_rows, n_cells)
    lower: np.ndarray      # (n_children, n_rows) int64
    upper: np.ndarray      # (n_children, n_rows) float64 (inf allowed)


@dataclass(frozen=True)
class ParentProblem:
    parent: str                    # geocode
    children: tuple[str, ...]      # child geocodes
    cells: np.ndarray              # (n_cells,) indices into the schema's cells
    parent_counts: np.ndarray | None  # (n_cells,) int64 the children must sum to (float64 without rounding); None at the root
    allowed: np.ndarray            # (n_children, n_cells) bool; False = structural zero
    queries: tuple[QueryAnswers, ...]
    constraints: ChildConstraints | None
    passes: tuple[tuple[str, ...], ...] = DEFAULT_PASSES  # query names per pass; () = the rest

    @property
    def n_children(self) -> int:
        return len(self.children)

    @property
    def n_cells(self) -> int:
        return len(self.cells)


@dataclass(frozen=True)
class FailsafeEvent:
    """A problem that was infeasible as stated and was solved with a minimal L1 relaxation."""

    parent: str
    stage: str            # "l2" or "rounding"
    relaxed: str          # "parent equality" or "child bounds"
    slack: float          # total L1 slack that was needed
    detail: str = ""

    def record(self) -> dict:
        """As a plain record (checkpoints and reports store these)."""
        return asdict(self)

    @classmethod
    def of_record(cls, record: dict) -> FailsafeEvent:
        return cls(**record)


@dataclass
class ParentSolution:
    counts: np.ndarray                # (n_children, n_cells) int64 (float64 without rounding: the matched L2 point)
    l2: np.ndarray                    # (n_children, n_cells) float64
    events: list[FailsafeEvent] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    rounding_method: str = ""
    certificate: dict = field(default_factory=dict)  # L2 duality gaps (das.topdown.optimality.new_certificate)


# ---------------------------------------------------------------------------------------------
# Building a problem


def measured(own: Sequence[NoisyAnswers], descendants: Sequence[ChildAnswers] = ()) -> list[ChildAnswers]:
    """The children's own noisy answers (a row per child, in order), then their only descendants': the same
    geounits measured again at a finer level."""
    return [ChildAnswers(a) for a in own] + list(descendants)


def parent_problem(schema: Schema, parent: str, children: np.ndarray, parent_counts: np.ndarray, *,
                   answers: list[ChildAnswers], bounds: list[Bounds], passes: tuple = DEFAULT_PASSES,
                   dtype: type = np.int64) -> ParentProblem:
    """One parent's problem: variables are children x the parent's nonzero cells; `answers` from `measured`.
    `dtype`: the parent counts' type (float64 for a fractional parent, which int64 would truncate)."""
    cells = np.flatnonzero(parent_counts)
    position = np.full(schema.size, -1, dtype=np.int32)
    position[cells] = np.arange(len(cells))
    n_children = len(children)
    allowed = np.ones((n_children, len(cells)), dtype=bool)
    rows, lower, upper = [], [], []
    for b in bounds:
        zeros = b.structural_zeros()
        if zeros.any():
            q, _ = _on_cells(schema, b.query, cells, position, rows=np.ones(zeros.shape[1], dtype=bool))
            allowed &= ~(zeros.astype(np.int64) @ q > 0)
        binding = b.binding()
        if binding.any():
            rows.append(_on_cells(schema, b.query, cells, position, rows=binding)[0])
            lower.append(b.lower[:, binding])
            upper.append(b.upper[:, binding])
    constraints = None
    if rows:
        constraints = ChildConstraints(
            matrix=rows[0] if len(rows) == 1 else sp.vstack(rows).tocsr(),
            lower=np.hstack(lower).astype(np.int64),
            upper=np.hstack(upper).astype(float),
        )
    queries = []
    for a in answers:
        if a.rows is not None and not len(a.rows):
            continue
        matrix, keep = _on_cells(schema, a.query, cells, position)
        queries.append(QueryAnswers(matrix=matrix, noisy=a.answers.cells(keep), rows=a.rows))
    own = {a.query for a in answers if a.rows is None}
    passes = tuple(tuple(q for q in names if q in own) for names in passes)
    passes = tuple(names for names in passes if names or names == ()) or ((),)
    return ParentProblem(
        parent=parent, children=tuple(str(c) for c in children), cells=cells,
        parent_counts=parent_counts[cells].astype(dtype), allowed=allowed,
        queries=tuple(queries), constraints=constraints, passes=passes,
    )


def matrix_rows(matrix: sp.csr_matrix) -> np.ndarray:
    """The row of each stored entry of a CSR matrix."""
    return np.repeat(np.arange(matrix.shape[0]), np.diff(matrix.indptr))


def _on_cells(schema: Schema, name: str, cells: np.ndarray, position: np.ndarray, *,
              rows: np.ndarray | None = None) -> tuple[sp.csr_matrix, np.ndarray]:
    """Query `name` over `cells` (`position[c]`: the column of cell c, -1 if not one), its rows `rows` (a boolean
    mask; None: the rows that have one of the cells), and that mask. A marginal is built from its cells' rows."""
    matrix, labels = _marginal(schema, name)
    if labels is None:
        if rows is None:
            rows = np.bincount(matrix_rows(matrix)[position[matrix.indices] >= 0], minlength=matrix.shape[0]) > 0
        return restricted(matrix, position, len(cells), rows), rows
    row = labels[cells]
    counts = np.bincount(row, minlength=matrix.shape[0])
    if rows is None:
        rows = counts > 0
    order = np.argsort(row, kind="stable")  # row-major, and each row's cells in order
    order = order[rows[row[order]]]
    return csr_rows(np.ones(len(order), dtype=matrix.dtype), order, counts[rows], len(cells)), rows


@functools.lru_cache(maxsize=256)
def _marginal(schema: Schema, name: str) -> tuple[sp.csr_matrix, np.ndarray | None]:
    """Query `name`'s matrix and, if it is a marginal (each cell in exactly one row, weight 1), every cell's row."""
    matrix = schema.query(name).matrix
    if matrix.nnz != matrix.shape[1] or not (matrix.data == 1).all():
        return matrix, None
    if np.bincount(matrix.indices, minlength=matrix.shape[1]).min(initial=1) != 1:
        return matrix, None
    labels = np.empty(matrix.shape[1], dtype=np.int64)
    labels[matrix.indices] = matrix_rows(matrix)
    return matrix, labels


def csr_rows(values: np.ndarray, indices: np.ndarray, counts: np.ndarray, n_columns: int) -> sp.csr_matrix:
    """The CSR matrix of entries already in CSR order (row-major, columns sorted) and the count of each row.

    Built with int32 indices where they fit: scipy checks the contents of int64 ones on every construction,
    which for the small matrices of a parent costs as much as all the arithmetic on them."""
    dtype = np.int32 if max(len(values), n_columns) < 2**31 - 1 else np.int64
    indptr = np.zeros(len(counts) + 1, dtype=dtype)
    np.cumsum(counts, out=indptr[1:])
    return sp.csr_matrix((values, indices.astype(dtype, copy=False), indptr), shape=(len(counts), n_columns))


def restricted(matrix: sp.csr_matrix, position: np.ndarray, n_columns: int, rows: np.ndarray | None = None) -> sp.csr_matrix:
    """matrix[rows][:, cells] for a CSR matrix with sorted indices, `position[c]` the column of cell c (-1: dropped)
    and `rows` a boolean mask (None: all). The same matrix as scipy's fancy indexing, built directly: that
    costs about 100 us a call, the bulk of building a small parent's problem."""
    column = position[matrix.indices]
    row_of = matrix_rows(matrix)
    keep = column >= 0
    if rows is not None:
        keep &= rows[row_of]
    counts = np.bincount(row_of[keep], minlength=matrix.shape[0])
    return csr_rows(matrix.data[keep], column[keep], counts if rows is None else counts[rows], n_columns)


def root_problem(schema: Schema, answers: list[ChildAnswers], bounds: list[Bounds],
                 passes: tuple = DEFAULT_PASSES) -> ParentProblem:
    """The top geounit as a problem of one child with no parent to sum to; every cell a candidate."""
    counts = np.ones(schema.size, dtype=np.int64)
    one = [Bounds(b.query, b.lower[:1], b.upper[:1], b.rule) for b in bounds]
    p = parent_problem(schema, "root", np.array([""]), counts, answers=answers, bounds=one, passes=passes)
    return ParentProblem(parent="", children=("",), cells=p.cells, parent_counts=None, allowed=p.allowed,
                         queries=p.queries, constraints=p.constraints, passes=p.passes)
