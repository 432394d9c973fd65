"""`flat`: a noisy block histogram, no hierarchy.

Every cell of every block's detailed histogram gets discrete Gaussian noise of variance 1/rho (the
whole budget at the block: blocks are disjoint, so one change costs rho once; squared L2
sensitivity 2). Post-processing (no extra budget) per tract, a public unit (per block group where a
tract would exceed `MAX_DOMAIN_CELLS` cells, as for the full-domain mechanisms): the Euclidean projection
of the tract's noisy cells (all its blocks together) onto {x >= 0, sum x = N}, N = max(0, round(sum of
those cells)), an unbiased estimate of the tract total, then integers with the same sum by controlled
rounding (rounding.round_by_block). One projection threshold for the whole tract: projecting each block onto its own noisy
total instead clips every small block's total at zero (sd sqrt(cells / rho), 28 persons at the 2020
budget), which biases tract and county totals up by hundreds.
"""

from __future__ import annotations

import numpy as np

from das.mechanisms.base import Ledger, MechanismError, Plan, Public, Synthesis, SynthesisInput
from das.mechanisms.domain import assemble, fitting_level, geounits, unit_counts
from das.mechanisms.rounding import round_by_block
from das.model.levels import BLOCK, TRACT
from das.privacy.sampler import discrete_gaussian


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


def projection_level(geography, schema) -> str:
    """The public unit the noisy histograms are projected over: the tract, or the block group where some tract
    has more than MAX_DOMAIN_CELLS cells (decided from the public geography), else the block."""
    try:
        return fitting_level(geography, schema, TRACT)
    except MechanismError:
        return BLOCK


def plan(public: Public, ledger: Ledger) -> Plan:
    """The whole budget on every block's detailed cells (blocks are disjoint): sigma^2 = 1/rho."""
    sigma2 = ledger.gaussian(BLOCK, "detailed", public.budget)
    return Plan(sigma2, {"sigma2": str(sigma2), "level": public.level,
                         "postprocessing": f"simplex projection of each {public.level}'s noisy cells to its rounded "
                                           "noisy total, integers by largest remainders, block totals first"})


def run(data: SynthesisInput) -> Synthesis:
    n_blocks, n_cells = data.histograms.shape
    level = projection_level(data.geography, data.schema)
    planned = plan(data.public(level), data.ledger)
    sigma2 = planned.schedule
    truth = data.histograms.tocsr()
    parts = []
    for _, block_index in geounits(data.geography, level):
        noisy = unit_counts(truth, block_index) + discrete_gaussian(sigma2, len(block_index) * n_cells, data.rng)
        total = max(0, int(np.rint(noisy.sum())))
        parts.append((block_index, round_by_block(project_simplex(noisy[None, :], np.array([total]))[0],
                                                  len(block_index), total)))
    return Synthesis(assemble(n_blocks, n_cells, parts), dict(planned.details))


DETAILS = {"sigma2": "parameter: 1/rho", "level": "parameter: the public unit projected over",
           "postprocessing": "parameter: what is done to the noisy histograms"}
