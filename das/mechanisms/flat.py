"""`flat`: a noisy block histogram, no hierarchy.

Every cell of every block's detailed histogram gets discrete Gaussian noise of variance 1/rho (the
whole budget at the block: blocks are disjoint, so one change costs rho once; squared L2
sensitivity 2). Post-processing per block: the Euclidean projection of the noisy vector onto
{x >= 0, sum x = N} with N = max(0, round(sum of the noisy cells)) (an unbiased estimate of the block
total before clipping), then integers with the same sum by largest remainders.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from das.mechanisms.base import Synthesis, SynthesisInput, round_to_total
from das.privacy.sampler import discrete_gaussian

CHUNK_CELLS = 1 << 21  # cells per vectorized batch of blocks (float64: 16 MB)


def project_simplex(rows: np.ndarray, totals: np.ndarray) -> np.ndarray:
    """Euclidean projection of each row onto {x >= 0, sum x = total} (sort-based, vectorized).

    >>> project_simplex(np.array([[3.0, -1.0, 1.0]]), np.array([2])).tolist()
    [[2.0, 0.0, 0.0]]
    """
    rows = np.asarray(rows, dtype=float)
    totals = np.asarray(totals, dtype=float)
    d = rows.shape[1]
    ordered = -np.sort(-rows, axis=1)
    partial = np.cumsum(ordered, axis=1) - totals[:, None]
    index = np.arange(1, d + 1)
    positive = ordered - partial / index > 0
    last = d - 1 - np.argmax(positive[:, ::-1], axis=1)  # last index where positive (index 0 always is)
    theta = partial[np.arange(len(rows)), last] / (last + 1)
    out = np.maximum(rows - theta[:, None], 0.0)
    out[totals <= 0] = 0.0
    return out


def nonnegative_integer_projection(noisy: np.ndarray) -> np.ndarray:
    """Per row: nonnegative integers summing to max(0, round(row sum)), closest (L2) before rounding."""
    totals = np.maximum(0, np.rint(noisy.sum(axis=1))).astype(np.int64)
    return round_to_total(project_simplex(noisy, totals), totals)


def run(data: SynthesisInput) -> Synthesis:
    n_blocks, n_cells = data.histograms.shape
    sigma2 = data.ledger.gaussian("block", "detailed", data.budget)
    truth = data.histograms.tocsr()
    parts, chunk = [], max(1, CHUNK_CELLS // n_cells)
    for start in range(0, n_blocks, chunk):
        stop = min(n_blocks, start + chunk)
        noisy = truth[start:stop].toarray() + discrete_gaussian(sigma2, (stop - start) * n_cells,
                                                                 data.rng).reshape(stop - start, n_cells)
        parts.append(sp.csr_matrix(nonnegative_integer_projection(noisy)))
    histograms = sp.vstack(parts).tocsr() if parts else sp.csr_matrix((0, n_cells), dtype=np.int64)
    return Synthesis(histograms.astype(np.int64), {"sigma2": str(sigma2),
                                                   "postprocessing": "simplex projection to the noisy block total, "
                                                                     "largest-remainder integers"})


DETAILS = {"sigma2": "parameter: 1/rho", "postprocessing": "parameter: what is done to the noisy histograms"}
