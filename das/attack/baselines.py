"""Baselines: rank records by their frequency in a reference population, without the release.

The reference is the rest of the tract, county or state around the attacked geounit (the
geounit itself left out) or a disjoint holdout file. An attack is only interesting where its
Match-Rate@k beats these: they measure what is guessable from the population in general.
"""

from __future__ import annotations

import numpy as np

from das.attack.data import GEOCODE_DIGITS, AttackError, PersonRecords
from das.attack.rank import Candidates, rank_by
from das.core.errors import option
from das.model.levels import COUNTY, STATE, TRACT

SCOPES = (TRACT, COUNTY, STATE, "holdout")


def reference_levels(truth: PersonRecords, level: str, geocode: str, scope: str, *,
                     holdout: PersonRecords | None = None) -> np.ndarray:

    """The reference records (n x n_attributes) of `scope` for the geounit `geocode` of `level`."""
    if scope == "holdout":
        if holdout is None:
            raise AttackError(f"baseline 'holdout' needs a holdout persons file ({option('holdout', 'PATH')})")
        return holdout.levels
    if scope not in SCOPES:
        raise AttackError(f"baseline {scope!r}: expected one of {SCOPES}")
    if GEOCODE_DIGITS[scope] >= GEOCODE_DIGITS[level]:
        raise AttackError(f"baseline {scope!r} does not contain a {level}: use a larger scope")
    inside = truth.within(level, geocode)
    container = truth.within(scope, geocode[:GEOCODE_DIGITS[scope]])
    return truth.levels[container & ~inside]


def frequency_ranking(reference: np.ndarray) -> Candidates:
    """Distinct reference records, most frequent first; equal frequencies form a tie group."""
    reference = np.asarray(reference, dtype=np.int64)
    if len(reference) == 0:
        return Candidates(np.zeros((0, reference.shape[1]), np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64), 1,
                          tie=np.zeros(0, np.int64))
    distinct, counts = np.unique(reference, axis=0, return_counts=True)
    order, tie = rank_by(counts)
    return Candidates(distinct[order], counts[order], np.ones(len(order), np.int64), 1, tie=tie)


def spread_over_blocks(ranking: Candidates, block_totals: np.ndarray, limit: int | None = None) -> Candidates:
    """Tract attacks: (block, record) candidates scored by record frequency x the block's
    published population, equal scores a tie group; the first `limit` of them, extended to the
    end of the tie group the limit falls in (so expected hits over ties stay exact)."""
    block_totals = np.asarray(block_totals, dtype=float)
    n_blocks, n = len(block_totals), len(ranking)
    score = np.outer(block_totals, ranking.count.astype(float)).reshape(-1)
    records = np.column_stack([np.repeat(np.arange(n_blocks), n), np.tile(ranking.records, (n_blocks, 1))]) \
        if n else np.zeros((0, ranking.records.shape[1] + 1), np.int64)
    keep = np.flatnonzero(score > 0)
    ranked, tie = rank_by(score[keep])
    if limit is not None and limit < len(ranked):
        end = int(np.searchsorted(tie, tie[limit - 1], side="right")) if limit > 0 else 0
        ranked, tie = ranked[:end], tie[:end]
    order = keep[ranked]
    count = np.rint(score[order]).astype(np.int64)
    return Candidates(records[order], count, np.ones(len(order), np.int64), 1, tie=tie)
