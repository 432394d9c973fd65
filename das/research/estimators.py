"""Estimators of the same noisy measurements, for bias research.

- `topdown`: the product (nonnegative, integral, consistent) from block histograms.
- `noisy`: the raw noisy answer of a query where it was measured at that level (or the sum of
  the noisy detailed cells when only the detailed query was): unbiased, inconsistent, can be < 0.
- `wls`: the unconstrained weighted least-squares estimate, top-down per parent, under only the
  equalities every geounit shares (published totals, structural zeros): consistent, unbiased,
  fractional and possibly negative. It is the reference that isolates what nonnegativity and
  integrality add.

WLS per parent p with children c: minimize sum_c sum_q w_q ||Q_q x_c - y_cq||^2 subject to
C x_c = d_c and sum_c x_c = x_p, with w_q = 1/variance. Every child of a level shares the normal
matrix M = sum_q w_q Q_q' Q_q and the constraint rows C, which gives a closed form: the unconstrained
child solutions x^_c = M^-1 b_c, corrected to C x_c = d_c along M^-1 C', then shifted by an equal
share of the parent discrepancy (that shift lies in the null space of C, since C x_p = sum_c d_c).
Both corrections are linear in the noise, so unbiasedness carries down from the root.

Each is one `Estimator` in `ESTIMATORS` (`register` adds one): what it makes of a level, top-down, from
the level's noisy answers, the released blocks and what it carried from the level above; what it
needs (the NMF); why it cannot run on a plan; and how reports and figures name it. `das replicate`,
`das metrics`, `das compare` and `das report` read them from there.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import scipy.linalg as la
import scipy.sparse as sp

from das.core.errors import option
from das.model.geography import Geography
from das.model.rules import Invariants, level_bounds
from das.model.schema import Schema

MAX_DENSE_CELLS = 20_000  # without `detailed`, M^-1 is formed densely (n x n floats)


def query_matrix(schema: Schema, name: str) -> sp.csr_matrix:
    if name == "detailed":
        return sp.identity(schema.size, format="csr", dtype=np.float64)
    return schema.query(name).matrix.astype(np.float64)


def answers(schema: Schema, histograms, name: str) -> np.ndarray:
    """(n_units x n_query_cells) answers of a query for histograms (sparse or dense, n_units x n_cells)."""
    q = query_matrix(schema, name)
    result = histograms @ q.T
    return result.toarray() if sp.issparse(result) else np.asarray(result)


def noisy_answers(schema: Schema, noisy: dict, name: str) -> np.ndarray | None:
    """The raw noisy estimate of `name` at a level (None if neither it nor `detailed` was measured)."""
    if name in noisy:
        return noisy[name].answers.astype(np.float64)
    if "detailed" in noisy:
        return answers(schema, noisy["detailed"].answers.astype(np.float64), name)
    return None


def wls_unsupported(schema: Schema, queries_by_level: dict[str, list[str]]) -> str | None:
    """Why WLS cannot run on this schema and plan (None if it can): checked before any work."""
    for level, queries in queries_by_level.items():
        if not queries:
            return f"nothing is measured at level {level!r}; the WLS estimate needs a measurement at every level"
        if "detailed" not in queries and schema.size > MAX_DENSE_CELLS:
            return (f"level {level!r} does not measure `detailed`, so the WLS reference would form M^-1 densely; "
                    f"that supports schemas up to {MAX_DENSE_CELLS:,} cells and {schema.name!r} has {schema.size:,}")
    return None


def _equalities(schema: Schema, geography: Geography, invariants: Invariants, level: str):
    """(C, D): rows of equalities every geounit at `level` holds, and their (n_units x k) values."""
    rows, values = [], []
    for b in level_bounds(schema, invariants, geography, level=level):
        fixed = np.isfinite(b.upper) & (b.lower == b.upper)
        columns = np.flatnonzero(fixed.all(axis=0))
        if columns.size:
            rows.append(query_matrix(schema, b.query)[columns])
            values.append(b.lower[:, columns].astype(np.float64))
    if not rows:
        return None, None
    c = sp.vstack(rows).toarray()
    d = np.hstack(values)
    _, keep = np.unique(c, axis=0, return_index=True)  # the same row from two families
    keep = np.sort(keep)
    return c[keep], d[:, keep]


class _LevelSystem:
    """M^-1 (applied, never formed when `detailed` is measured) and the constraint correction of
    one level, shared by all its geounits."""

    def __init__(self, schema: Schema, noisy: dict, c: np.ndarray | None):
        n = schema.size
        self.weights = {name: (query_matrix(schema, name), a.weight) for name, a in noisy.items()}
        if "detailed" in noisy:
            # Woodbury: M = a I + U W U' with U the stacked marginal matrices (n x r, r << n), so
            # M^-1 = (I - U (a W^-1 + U'U)^-1 U') / a and only an r x r system is factored.
            self.a = self.weights["detailed"][1]
            marginals = [(q, w) for name, (q, w) in self.weights.items() if name != "detailed"]
            if marginals:
                self.u = sp.vstack([q for q, _ in marginals]).T.tocsc()
                w_inv = np.concatenate([np.full(q.shape[0], 1.0 / w) for q, w in marginals])
                inner = np.diag(self.a * w_inv) + (self.u.T @ self.u).toarray()
                self.inner = la.cho_factor(inner)
            else:
                self.u = None
        else:
            if n > MAX_DENSE_CELLS:
                raise ValueError(f"without a `detailed` measurement the WLS reference holds M^-1 densely and "
                                 f"supports schemas up to {MAX_DENSE_CELLS:,} cells; {schema.name!r} has {n:,}")
            m = np.zeros((n, n))
            for q, w in self.weights.values():
                m += w * (q.T @ q).toarray()
            # singular when the queries do not identify every cell: the minimum-norm solution,
            # still unbiased for every query the measurements identify
            self.m_inv = la.pinvh(m)
            self.a = None
        self.c = c
        if c is not None:
            m_inv_ct = self.apply_inverse(c).T  # (n x k)
            self.g = m_inv_ct @ la.pinvh(c @ m_inv_ct)  # M^-1 C' (C M^-1 C')^-1

    def apply_inverse(self, b: np.ndarray) -> np.ndarray:
        """Rows of b times M^-1 (M is symmetric)."""
        if self.a is None:
            return b @ self.m_inv
        if self.u is None:
            return b / self.a
        bu = np.asarray((self.u.T @ b.T).T)
        return (b - np.asarray((self.u @ la.cho_solve(self.inner, bu.T)).T)) / self.a

    def solve(self, noisy: dict, d: np.ndarray | None) -> np.ndarray:
        """Each geounit's WLS histogram under its own equalities (n_units x n)."""
        b = None
        for name, (q, w) in self.weights.items():
            part = np.asarray((q.T @ (w * noisy[name].answers.astype(np.float64).T)).T)
            b = part if b is None else b + part
        x = self.apply_inverse(b)
        if self.c is not None:
            x += (d - x @ self.c.T) @ self.g.T
        return x


def wls_level(schema, geography, invariants, level, *, noisy, parent=None) -> np.ndarray:

    """WLS histograms (n_units x n_cells) of one level given its noisy answers and the parents' WLS."""
    if not noisy:
        raise ValueError(f"{level}: nothing measured; the WLS estimate needs a measurement at every level")
    c, d = _equalities(schema, geography, invariants, level)
    x = _LevelSystem(schema, noisy, c).solve(noisy, d)
    if parent is not None:
        x = distribute(x, parent, geography.child_ranges(geography.parent_level(level)))
    return x


def distribute(children: np.ndarray, parents: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Shift each parent's children by an equal share of (sum of children - parent)."""
    counts = np.diff(offsets)
    if (counts <= 0).any():
        raise ValueError("every parent needs at least one child")
    sums = np.add.reduceat(children, offsets[:-1], axis=0)
    shift = (sums - parents) / counts[:, None]
    return children - np.repeat(shift, counts, axis=0)


# ---------------------------------------------------------------------------------------------
# The registry


@dataclass(frozen=True)
class LevelInput:
    """What an estimator sees of one level: its noisy answers (query -> das.io.nmf.NoisyAnswers; None when the
    scoring reads no NMF) and the released block histograms (None when not given)."""

    schema: Schema
    geography: Geography
    invariants: Invariants
    level: str
    noisy: dict | None
    released: sp.csr_matrix | None


Answers = Callable[[str], "np.ndarray | None"]  # a query's (n_units x n_cells) estimate at the level, or None


@dataclass(frozen=True)
class Estimator:
    """One estimator of a release's counts: `estimate(level, carried) -> (answers, carried)` runs top-down, each
    level given what it carried from the one above (None at the top); `reads_nmf` says it needs the noisy
    measurements; `unsupported(schema, queries by level)` says why a plan is beyond it (None: it is not)."""

    name: str
    label: str  # its name in figures and tables
    color: str
    about: str  # what it is, in a report's sentence
    estimate: Callable[[LevelInput, object], tuple[Answers, object]]
    reads_nmf: bool = True
    unsupported: Callable[[Schema, dict[str, list[str]]], str | None] = lambda schema, measured: None


def _histogram_answers(schema: Schema, histograms) -> Answers:
    return lambda query: answers(schema, histograms, query)


def _topdown(data: LevelInput, carried) -> tuple[Answers, object]:
    return _histogram_answers(data.schema, data.geography.aggregate(data.released, data.level)), None


def _noisy(data: LevelInput, carried) -> tuple[Answers, object]:
    return (lambda query: noisy_answers(data.schema, data.noisy, query)), None


def _wls(data: LevelInput, parent) -> tuple[Answers, object]:
    level = wls_level(data.schema, data.geography, data.invariants, data.level, noisy=data.noisy, parent=parent)
    return _histogram_answers(data.schema, level), level


ESTIMATORS: dict[str, Estimator] = {}


def register(estimator: Estimator) -> Estimator:
    """Add an estimator (a name already taken is refused: an estimator is replaced by nothing silently)."""
    if estimator.name in ESTIMATORS:
        raise ValueError(f"an estimator named {estimator.name!r} is already registered")
    ESTIMATORS[estimator.name] = estimator
    return estimator


register(Estimator("topdown", "TopDown (released)", "#BE0032",
                   "TopDown is the released product (nonnegative, integral, consistent)", _topdown, reads_nmf=False))
register(Estimator("noisy", "raw noisy measurement", "#848482",
                   "the raw noisy measurement is unbiased but inconsistent and can be negative", _noisy))
register(Estimator("wls", "unconstrained WLS", "#0067A5",
                   "the unconstrained weighted least-squares (WLS) estimate is consistent and unbiased but fractional "
                   "and can be negative", _wls, unsupported=wls_unsupported))
DEFAULT_ESTIMATORS = ("topdown", "noisy", "wls")


def unknown_estimators(names) -> str | None:
    """Why `names` are not estimators to score (None: they are): unknown ones, or none at all."""
    unknown = [e for e in names if e not in ESTIMATORS]
    if unknown or not names:
        return f"unknown estimator(s) {unknown}; choose from {', '.join(ESTIMATORS)}"
    return None


def estimator_problem(names, schema: Schema, measured: dict[str, list[str]]) -> str | None:
    """The first reason one of `names` cannot estimate from this plan (None: all can), said of the estimator."""
    for name in names:
        reason = ESTIMATORS[name].unsupported(schema, measured)
        if reason:
            return f"estimator {name}: {reason}; leave {name} out of {option('estimators')}"
    return None


def from_nmf(names) -> tuple[str, ...]:
    """The estimators among `names` that read the noisy measurements (a release's NMF)."""
    return tuple(name for name in names if ESTIMATORS[name].reads_nmf)
