"""The exact exponential mechanism (das/privacy/exponential.py) and the DP median built on it."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from das.privacy.exponential import (
    dp_median,
    exponential_mechanism,
    exponential_probabilities,
    exponential_rho,
    median_utilities,
)
from das.privacy.randomness import SeededRandomSource


def draws(utilities, eps, sensitivity, n, seed=0):
    rng = SeededRandomSource(seed)
    return np.array([exponential_mechanism(utilities, eps, sensitivity, rng) for _ in range(n)])


def test_selection_frequencies_match_the_exact_probabilities():
    utilities = [0, 3, Fraction(7, 2), 6, 2]
    eps, sensitivity = Fraction(1, 2), Fraction(1)
    n = 6000
    observed = np.bincount(draws(utilities, eps, sensitivity, n, seed=1), minlength=5)
    expected = exponential_probabilities(utilities, eps, sensitivity) * n
    assert stats.chisquare(observed, expected).pvalue > 1e-3
    # and the probabilities are exp(eps u / (2 Delta)) normalized
    w = np.exp([float(eps) * float(u) / 2 for u in utilities])
    assert np.allclose(exponential_probabilities(utilities, eps, sensitivity), w / w.sum())


def test_the_best_is_picked_with_its_exact_probability():
    utilities = np.array([10, 12, 15, 9], dtype=np.int64)
    eps, sensitivity = Fraction(2, 3), Fraction(2)
    p_best = 1 / sum(np.exp(float(eps) * (u - 15) / (2 * float(sensitivity))) for u in utilities)
    n = 4000
    hits = (draws(utilities, eps, sensitivity, n, seed=2) == 2).sum()
    assert abs(hits / n - p_best) < 4 * np.sqrt(p_best * (1 - p_best) / n)


def test_a_distinct_winner_at_a_large_eps_is_certain_and_inputs_must_be_exact():
    assert set(draws([1, 2, 50, 3], 10, 1, 50, seed=3)) == {2}
    rng = SeededRandomSource(0)
    with pytest.raises(TypeError):
        exponential_mechanism([1, 2], 0.5, 1, rng)
    with pytest.raises(TypeError):
        exponential_mechanism([1.5, 2], 1, 1, rng)
    with pytest.raises(ValueError):
        exponential_mechanism([], 1, 1, rng)
    assert exponential_rho(Fraction(1, 2)) == Fraction(1, 32)


def test_median_utilities_peak_at_the_median():
    counts = np.array([0, 3, 0, 1, 5, 0, 2])  # 11 values, median at index 4
    u = median_utilities(counts)
    assert int(np.argmax(u)) == 4
    assert u.tolist() == [min(counts[: m + 1].sum(), counts[m:].sum()) for m in range(len(counts))]


def test_dp_median_distribution_and_accuracy():
    counts = np.zeros(116, dtype=np.int64)
    counts[[20, 35, 36, 40, 41, 41 + 1, 70]] = [5, 10, 10, 3, 3, 3, 5]
    rng = SeededRandomSource(4)
    picks = np.array([dp_median(counts, Fraction(1, 2), rng) for _ in range(3000)])
    p = exponential_probabilities(median_utilities(counts), Fraction(1, 2), 1)
    support = p > 1e-3
    observed = np.bincount(picks, minlength=116)
    expected = p * len(picks)
    assert observed[~support].sum() <= 20
    assert stats.chisquare(observed[support], expected[support] * observed[support].sum() / expected[support].sum()
                           ).pvalue > 1e-3
    true_median = 36
    assert set(dp_median(counts, 20, rng) for _ in range(20)) == {true_median}
