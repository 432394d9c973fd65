"""The per-parent problem of TopDown, as arrays: the unit of parallel work.

Variables are the children x the cells that are nonzero in the solved parent, minus each
child's structural zeros (`allowed`). Everything a solver needs is here; nothing refers back
to files or to the rest of the run.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp


@dataclass(frozen=True)
class QueryAnswers:
    """One query of the strategy, for all children of the parent."""

    name: str
    matrix: sp.csr_matrix  # (n_query_cells, n_cells): a child's histogram -> query answers
    noisy: np.ndarray      # (n_children, n_query_cells) noisy answers (or one row per `rows` entry)
    variance: float        # noise variance, the same for every child and cell
    rows: np.ndarray | None = None  # the children these answers are of (None: all, in order)


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
    parent_counts: np.ndarray | None  # (n_cells,) int64 the children must sum to; None at the root
    allowed: np.ndarray            # (n_children, n_cells) bool; False = structural zero
    queries: tuple[QueryAnswers, ...]
    constraints: ChildConstraints | None
    passes: tuple[tuple[str, ...], ...] = (("total",), ())  # query names per pass; () = the rest

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


@dataclass
class ParentSolution:
    counts: np.ndarray                # (n_children, n_cells) int64
    l2: np.ndarray                    # (n_children, n_cells) float64
    events: list[FailsafeEvent] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    rounding_method: str = ""
    certificate: dict = field(default_factory=dict)  # L2 duality gaps (das.topdown.solve.new_certificate)
