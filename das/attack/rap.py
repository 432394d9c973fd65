"""RAP: relaxed adaptive projection of a workload onto K relaxed records (numpy only).

Each relaxed record holds, per attribute, a probability vector over its levels: the softmax of
a column of logits (attribute logits are d_a x K). A product query's relaxed answer is the mean
over records of the product over attributes of (mask . probabilities), as a fraction of the
population. Each distinct mask is evaluated once per step for all records: by a sparse 0/1
product, or, for an attribute with many masks, an interval of levels (age groups, single years) as a
difference of cumulative sums and any other mask by a sparse product. Loss: squared error
against the published answers (fractions of N) on a minibatch of queries drawn in proportion
to their current error; Adam on the logits. Gradients are written by hand: leave-one-out
products over attributes, the scatter of each query's share onto its masks, the adjoint of the
mask map (a transpose; for intervals a reverse cumulative sum), then the softmax Jacobian.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from das.attack.workload import Workload


@dataclass(frozen=True)
class RapConfig:
    """Optimizer settings (DESIGN.md section 8: K about 1000, Adam lr about 0.1, about 1000 steps)."""

    n_relaxed: int = 1000  # K relaxed records
    steps: int = 1000
    learning_rate: float = 0.1
    batch_size: int = 128  # queries per step, drawn in proportion to current error
    refresh: int = 50  # steps between full re-evaluations of every query's error
    dtype: str = "float32"


# A sparse 0/1 product beats numpy's cumulative sum along levels until an attribute has this many
# distinct masks (measured: 45 age masks x 116 ages x K = 1000, a fit about 30% faster). The
# sparse product is single-threaded, unlike BLAS, which oversubscribes a busy machine.
INTERVAL_MIN_MASKS = 128


@dataclass(frozen=True)
class MaskOperator:
    """One attribute's distinct masks as a linear map of its probabilities (d x K) to (m x K):
    a dense 0/1 product, or interval masks on cumulative sums plus a sparse product for the rest."""

    intervals: sp.csr_matrix | None  # m x (d+1): +1 at hi, -1 at lo (interval masks, on cumulative sums)
    general: sp.csr_matrix | None  # m x d: the other masks as rows of 0/1
    dense: np.ndarray | None = None  # m x d: every mask (when not using intervals)

    @classmethod
    def from_masks(cls, masks: np.ndarray, dtype, method: str = "auto") -> MaskOperator:
        """method: "sparse", "dense", "intervals", or "auto" (intervals for attributes with many masks)."""
        m, d = masks.shape
        if method == "auto":
            method = "intervals" if m >= INTERVAL_MIN_MASKS else "sparse"
        if method == "sparse":  # every mask a sparse 0/1 row: no BLAS threads, cost = mask sizes x K
            rows, cols = np.nonzero(masks[1:])
            general = sp.csr_matrix((np.ones(len(rows), dtype=dtype), (rows + 1, cols)), shape=(m, d))
            return cls(None, general)
        if method == "dense":
            dense = masks.astype(dtype)
            dense[0] = 0.0  # row 0 ("any level") is the constant 1
            return cls(None, None, dense)
        rows_i, cols_i, vals_i, rows_g, cols_g = [], [], [], [], []
        for r in range(1, m):
            on = np.flatnonzero(masks[r])
            if len(on) and on[-1] - on[0] + 1 == len(on):
                rows_i += [r, r]
                cols_i += [on[-1] + 1, on[0]]
                vals_i += [1.0, -1.0]
            else:
                rows_g += [r] * len(on)
                cols_g += list(on)
        intervals = sp.csr_matrix((np.asarray(vals_i, dtype=dtype), (rows_i, cols_i)), shape=(m, d + 1))
        general = sp.csr_matrix((np.ones(len(rows_g), dtype=dtype), (rows_g, cols_g)), shape=(m, d))
        return cls(intervals if intervals.nnz else None, general if general.nnz else None)

    def apply(self, probs: np.ndarray) -> np.ndarray:
        """(m x K) mask totals; row 0 is exactly 1."""
        if self.dense is not None:
            values = self.dense @ probs
        else:
            m = (self.intervals if self.intervals is not None else self.general).shape[0]
            values = np.zeros((m, probs.shape[1]), dtype=probs.dtype)
            if self.intervals is not None:
                cumulative = np.zeros((probs.shape[0] + 1, probs.shape[1]), dtype=probs.dtype)
                np.cumsum(probs, axis=0, out=cumulative[1:])
                values += self.intervals @ cumulative
            if self.general is not None:
                values += self.general @ probs
        values[0] = 1.0
        return values

    def adjoint(self, grad_values: np.ndarray) -> np.ndarray:
        """Gradient wrt probabilities (d x K) from the gradient wrt mask totals (m x K)."""
        if self.dense is not None:
            return self.dense.T @ grad_values  # row 0 of dense is zero: the constant has no gradient
        grad_values[0] = 0.0
        d = (self.general.shape[1] if self.general is not None else self.intervals.shape[1] - 1)
        grad = np.zeros((d, grad_values.shape[1]), dtype=grad_values.dtype)
        if self.intervals is not None:
            grad_cumulative = np.asarray(self.intervals.T @ grad_values)
            grad += np.cumsum(grad_cumulative[::-1], axis=0)[-2::-1]  # dP_j = sum over i > j of dC_i
        if self.general is not None:
            grad += self.general.T @ grad_values
        return grad


def softmax(logits: np.ndarray) -> np.ndarray:
    """Column-wise softmax of (d x K) logits."""
    z = np.exp(logits - logits.max(axis=0, keepdims=True))
    return z / z.sum(axis=0, keepdims=True)


def mask_operators(workload: Workload, dtype="float32", method: str = "auto") -> tuple[MaskOperator, ...]:
    return tuple(MaskOperator.from_masks(m, np.dtype(dtype), method) for m in workload.masks)


def relaxed_answers(workload: Workload, operators, probs, *, queries: np.ndarray | None = None,
                    chunk: int = 4096) -> np.ndarray:
    """Relaxed answers (fractions) of `queries` (default all) for probabilities (d_a x K each)."""
    values = [op.apply(p) for op, p in zip(operators, probs)]
    queries = np.arange(workload.n_queries) if queries is None else np.asarray(queries)
    out = np.empty(len(queries), dtype=np.float64)
    for start in range(0, len(queries), chunk):
        idx = workload.index[queries[start:start + chunk]]
        product = None
        for a, v in enumerate(values):
            if idx[:, a].any():
                product = v[idx[:, a]] if product is None else product * v[idx[:, a]]
        out[start:start + chunk] = 1.0 if product is None else product.mean(axis=1)
    return out


def loss_and_gradient(workload: Workload, operators, logits, targets: np.ndarray, *,
                      batch: np.ndarray) -> tuple[float, list[np.ndarray]]:
    """Sum of squared errors of the `batch` queries and its gradient wrt every attribute's logits."""
    probs = [softmax(z) for z in logits]
    values = [op.apply(p) for op, p in zip(operators, probs)]
    idx = workload.index[batch]
    active = [a for a in range(len(values)) if idx[:, a].any()]
    factors = [values[a][idx[:, a]] for a in active]
    n_relaxed = probs[0].shape[1]
    # prefix[i] = product of factors[:i], suffix[i] = product of factors[i:]
    prefix = [None]
    for f in factors[:-1]:
        prefix.append(f if prefix[-1] is None else prefix[-1] * f)
    suffix = [None] * (len(factors) + 1)
    for i in range(len(factors) - 1, -1, -1):
        suffix[i] = factors[i] if suffix[i + 1] is None else suffix[i + 1] * factors[i]
    if factors:
        answers = suffix[0].mean(axis=1, dtype=np.float64)
    else:
        answers = np.ones(len(batch))
    residual = answers - targets[batch]
    loss = float(residual @ residual)
    weight = (2.0 * residual / n_relaxed).astype(probs[0].dtype)[:, None]
    grads = [np.zeros_like(z) for z in logits]
    for i, a in enumerate(active):
        leave_one_out = weight
        if prefix[i] is not None:
            leave_one_out = leave_one_out * prefix[i]
        if suffix[i + 1] is not None:
            leave_one_out = leave_one_out * suffix[i + 1]
        leave_one_out = np.broadcast_to(leave_one_out, (len(batch), n_relaxed))
        grad_probs = operators[a].adjoint(_scatter_rows(idx[:, a], leave_one_out, values[a].shape[0]))
        p = probs[a]
        grads[a] = p * (grad_probs - (p * grad_probs).sum(axis=0, keepdims=True))
    return loss, grads


def _scatter_rows(rows: np.ndarray, values: np.ndarray, n_rows: int) -> np.ndarray:
    """out[r] = sum of values[i] over i with rows[i] == r (sorted, then summed per run of rows)."""
    order = np.argsort(rows, kind="stable")
    sorted_rows = rows[order]
    starts = np.flatnonzero(np.r_[True, sorted_rows[1:] != sorted_rows[:-1]])
    out = np.zeros((n_rows, values.shape[1]), dtype=values.dtype)
    out[sorted_rows[starts]] = np.add.reduceat(values[order], starts, axis=0)
    return out


def _weighted_sample(weights: np.ndarray, size: int, rng: np.random.Generator) -> np.ndarray:
    """`size` distinct indices drawn with probability in proportion to `weights` (Efraimidis-Spirakis)."""
    if size >= len(weights):
        return np.arange(len(weights))
    keys = np.log(rng.random(len(weights))) / weights
    return np.argpartition(-keys, size - 1)[:size]


def fit(workload: Workload, targets: np.ndarray, config: RapConfig, rng: np.random.Generator, *,
        operators=None) -> tuple[list[np.ndarray], float]:
    """Relaxed records fit to `targets` (answers as fractions of N) from a random start: (probabilities per
    attribute, d_a x K each) and the final root-mean-square error over all queries."""
    dtype = np.dtype(config.dtype)
    operators = operators or mask_operators(workload, dtype)
    targets = np.asarray(targets, dtype=np.float64)
    logits = project(workload, operators, initial_logits(workload, config, rng), targets, config=config, rng=rng)
    probs = [softmax(z) for z in logits]
    residual = relaxed_answers(workload, operators, probs) - targets
    return probs, float(np.sqrt(np.mean(residual ** 2)))


def initial_logits(workload: Workload, config: RapConfig, rng: np.random.Generator) -> list[np.ndarray]:
    """A random start: standard normal logits (d_a x K) for every attribute."""
    return [rng.standard_normal((d, config.n_relaxed)).astype(np.dtype(config.dtype)) for d in workload.sizes]


def project(workload: Workload, operators, logits: list[np.ndarray], targets: np.ndarray, *, config: RapConfig,
            rng: np.random.Generator, queries: np.ndarray | None = None) -> list[np.ndarray]:
    """The relaxed projection: `config.steps` Adam steps on `logits` (changed in place and returned) towards
    `targets` of `queries` (default all; `targets` indexed by query), each on a minibatch drawn in proportion to
    the queries' current errors: the attack's reconstruction (all queries, exact answers) and the RAP mechanism's
    projection of its measured queries (noisy answers, from the previous round's records) alike."""
    queries = np.arange(workload.n_queries) if queries is None else np.asarray(queries)
    targets = np.asarray(targets, dtype=np.float64)
    first = [np.zeros_like(z) for z in logits]
    second = [np.zeros_like(z) for z in logits]
    beta1, beta2, eps = 0.9, 0.999, 1e-7

    def errors() -> np.ndarray:
        found = relaxed_answers(workload, operators, [softmax(z) for z in logits], queries=queries)
        return np.abs(found - targets[queries])

    current = errors()
    for step in range(1, config.steps + 1):
        if step % config.refresh == 0:
            current = errors()
        batch = queries[_weighted_sample(current + 1e-9, config.batch_size, rng)]
        _, grads = loss_and_gradient(workload, operators, logits, targets, batch=batch)
        lr = float(config.learning_rate * np.sqrt(1 - beta2 ** step) / (1 - beta1 ** step))
        for z, g, m, v in zip(logits, grads, first, second):
            m *= beta1
            m += (1 - beta1) * g
            v *= beta2
            g *= g
            g *= 1 - beta2
            v += g
            np.sqrt(v, out=g)
            g += eps
            np.divide(m, g, out=g)
            g *= lr
            z -= g
    return logits


def sample_records(probs: list[np.ndarray], n: int, rng: np.random.Generator) -> np.ndarray:
    """n records (n x n_attributes levels): a relaxed record uniformly, then each attribute from it."""
    n_relaxed = probs[0].shape[1]
    rows = rng.integers(0, n_relaxed, size=n)
    out = np.empty((n, len(probs)), dtype=np.int64)
    for a, p in enumerate(probs):
        cumulative = np.cumsum(p[:, rows].astype(np.float64), axis=0)
        u = rng.random(n) * cumulative[-1]
        out[:, a] = np.minimum((cumulative < u).sum(axis=0), p.shape[0] - 1)
    return out
