"""RAP-Rank (Dick et al., PNAS 2023): many RAP runs, records sampled from each, ranked by frequency.

Run r fits the relaxation with its own seed and samples N records (N = the published total).
Distinct records are ranked by how often they were sampled over all runs; a record's
confidence is the share of runs that sampled it, and `min_confidence` drops the rarely seen.
Match-Rate@k is the share of the top k candidates found in the true data. Candidates with equal
scores form a tie group; the rate is the expected value over uniformly random orders within
tie groups, computed exactly (`expected_hits`), so it depends on the scores alone.
"""

from __future__ import annotations

from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

import numpy as np

from das.attack.rap import RapConfig, fit, mask_operators, sample_records
from das.attack.workload import Workload


@dataclass(frozen=True)
class Candidates:
    """Distinct reconstructed records, best first: levels (u x n_attributes), how often sampled
    over all runs, in how many runs, (multiset) the copy number each row stands for, and the tie
    group of each row (equal ids: equal scores, rank order among them arbitrary)."""

    records: np.ndarray
    count: np.ndarray
    runs: np.ndarray
    n_runs: int
    copy: np.ndarray | None = None
    tie: np.ndarray | None = None

    @property
    def confidence(self) -> np.ndarray:
        return self.runs / max(self.n_runs, 1)

    def __len__(self) -> int:
        return len(self.count)


def _one_run(task) -> tuple[np.ndarray, float]:
    workload, targets, n_records, config, seed = task
    rng = np.random.default_rng(seed)
    probs, rmse = fit(workload, targets, config, rng, operators=mask_operators(workload, config.dtype))
    return sample_records(probs, n_records, rng).astype(np.int16), rmse


def rap_runs(workload: Workload, targets: np.ndarray, n_records: int, *, runs: int, config: RapConfig,
             seed: int, workers: int = 1) -> tuple[list[np.ndarray], list[float]]:

    """`runs` independent fits (seeds from `seed`), N sampled records each; parallel over a
    spawn pool of `workers` single-threaded processes."""
    seeds = np.random.SeedSequence(seed).spawn(runs)
    tasks = [(workload, targets, n_records, config, s) for s in seeds]
    if workers <= 1 or runs == 1:
        results = [_one_run(t) for t in tasks]
    else:
        import multiprocessing

        from das.core.executors import limit_threads

        with ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"),
                                 initializer=limit_threads) as pool:
            results = list(pool.map(_one_run, tasks))
    return [r[0] for r in results], [r[1] for r in results]


def rank_by(*keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Indices by decreasing keys (the first key most significant), equal keys in input order,
    and the tie group of each ranked position (0, 1, ...; a new id wherever some key changes).

    >>> order, tie = rank_by(np.array([1, 3, 1, 2]))
    >>> order.tolist(), tie.tolist()
    ([1, 3, 0, 2], [0, 1, 2, 2])
    """
    columns = [np.asarray(k, dtype=float) for k in keys]
    order = np.lexsort(tuple(-c for c in reversed(columns)))
    if len(order) == 0:
        return order, np.zeros(0, dtype=np.int64)
    changed = np.zeros(len(order), dtype=bool)
    for c in columns:
        ranked = c[order]
        changed[1:] |= ranked[1:] != ranked[:-1]
    return order, np.cumsum(changed)


def rank_samples(samples: list[np.ndarray], min_confidence: float = 0.0, multiset: bool = False) -> Candidates:
    """Distinct records of all runs ranked by frequency, equal frequencies one tie group. Multiset:
    a candidate is (record, j) "at least j copies", scored by the runs with at least j copies of
    the record (the lower copy number first among equals)."""
    n_runs = len(samples)
    n_attr = samples[0].shape[1] if samples else 0
    nonempty = [s for s in samples if len(s)]
    if not nonempty:
        return Candidates(np.zeros((0, n_attr), np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64), n_runs)
    per_run = [np.unique(s, axis=0, return_counts=True) for s in nonempty]
    stacked = np.concatenate([d for d, _ in per_run])
    copies = np.concatenate([c for _, c in per_run])
    distinct, inverse = np.unique(stacked, axis=0, return_inverse=True)
    inverse = inverse.reshape(-1)
    count = np.bincount(inverse, weights=copies, minlength=len(distinct)).astype(np.int64)
    runs = np.bincount(inverse, minlength=len(distinct)).astype(np.int64)
    keep = runs / n_runs >= min_confidence
    if not multiset:
        idx = np.flatnonzero(keep)
        ranked, tie = rank_by(count[idx])
        order = idx[ranked]
        return Candidates(distinct[order].astype(np.int64), count[order], runs[order], n_runs, tie=tie)
    # (record, j): runs with >= j copies, for j = 1 .. the most copies any run drew
    max_copies = np.zeros(len(distinct), dtype=np.int64)
    np.maximum.at(max_copies, inverse, copies)
    start = np.cumsum(max_copies) - max_copies
    rec = np.repeat(np.arange(len(distinct)), max_copies)
    j = np.arange(len(rec)) - start[rec] + 1
    offsets = np.arange(int(copies.sum())) - np.repeat(np.cumsum(copies) - copies, copies)
    pair_runs = np.bincount(np.repeat(start[inverse], copies) + offsets, minlength=len(rec)).astype(np.int64)
    idx = np.flatnonzero(keep[rec])
    # more runs first; among equals the lower copy number first
    ranked, tie = rank_by(pair_runs[idx], -j[idx])
    order = idx[ranked]
    return Candidates(distinct[rec[order]].astype(np.int64), pair_runs[order], pair_runs[order], n_runs,
                      copy=j[order], tie=tie)


def matches(candidates: Candidates, truth: np.ndarray) -> np.ndarray:
    """Per candidate, True when it is in the true records (multiset: at least `copy` copies)."""
    truth = np.asarray(truth, dtype=np.int64).reshape(-1, candidates.records.shape[1])
    if len(candidates) == 0:
        return np.zeros(0, dtype=bool)
    if len(truth) == 0:
        return np.zeros(len(candidates), dtype=bool)
    distinct, multiplicity = np.unique(truth, axis=0, return_counts=True)
    both = np.concatenate([distinct, candidates.records])
    _, inv = np.unique(both, axis=0, return_inverse=True)
    inv = inv.reshape(-1)
    lookup = np.zeros(inv.max() + 1, dtype=np.int64)
    lookup[inv[:len(distinct)]] = multiplicity
    found = lookup[inv[len(distinct):]]
    need = 1 if candidates.copy is None else candidates.copy
    return found >= need


def expected_hits(hits: np.ndarray, tie: np.ndarray | None) -> np.ndarray:
    """Per ranked position, the probability that it holds a hit when each tie group is ordered
    uniformly at random: the share of hits in its group. Summed over the top k this is the exact
    expected number of hits, hits_in_group x slots_taken / group_size for the group straddling k.

    >>> expected_hits(np.array([True, True, False, False, True]), np.array([0, 1, 1, 1, 2])).tolist()
    [1.0, 0.3333333333333333, 0.3333333333333333, 0.3333333333333333, 1.0]
    """
    hits = np.asarray(hits, dtype=float)
    if tie is None or len(hits) == 0:
        return hits
    tie = np.asarray(tie)
    group_hits = np.bincount(tie, weights=hits)
    group_size = np.bincount(tie)
    return group_hits[tie] / group_size[tie]


def match_rate_curve(hits: np.ndarray) -> np.ndarray:
    """Match-Rate@k for k = 1..len(hits): the share of the top k candidates that match (hits may be
    expected hits, see `expected_hits`)."""
    hits = np.asarray(hits, dtype=float)
    return np.cumsum(hits) / np.arange(1, len(hits) + 1) if len(hits) else np.zeros(0)


def match_rate_at(hits: np.ndarray, k: int) -> float:
    """Match-Rate@k; with fewer than k candidates, the missing ones count as misses."""
    hits = np.asarray(hits, dtype=float)
    return float(hits[:k].sum() / k) if k > 0 else float("nan")
