"""The exact samplers against exact probabilities (chi-square / G tests, moments, rates)."""

from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from das.privacy import sampler
from das.privacy.randomness import SeededRandomSource, SystemRandomSource, make_random_source
from das.privacy.sampler import (
    bernoulli_exp,
    discrete_gaussian,
    discrete_gaussian_pmf,
    discrete_gaussian_reference,
    discrete_gaussian_variance,
    discrete_laplace,
)

ALPHA = 1e-3
SIGMAS = [Fraction(1, 2), Fraction(10), Fraction(484, 25), Fraction(7921), Fraction(10**6),
          Fraction(10**12 + 39, 10**10 + 7)]


def g_test(draws: np.ndarray, pmf, min_expected: float = 20.0) -> float:
    """p-value of a G test of integer draws against pmf(ks), pooling sparse tail bins."""
    lo, hi = int(draws.min()), int(draws.max())
    ks = np.arange(lo, hi + 1)
    observed = np.bincount(draws - lo, minlength=len(ks)).astype(float)
    probs = pmf(ks)
    tails = 1.0 - probs.sum()  # mass outside [lo, hi]: put it into the outer bins
    probs[0] += tails / 2
    probs[-1] += tails / 2
    expected = probs * len(draws)
    # pool bins from the outside in until each has enough expected mass
    obs_pooled, exp_pooled = [], []
    acc_o = acc_e = 0.0
    for o, e in zip(observed, expected):
        acc_o += o
        acc_e += e
        if acc_e >= min_expected:
            obs_pooled.append(acc_o)
            exp_pooled.append(acc_e)
            acc_o = acc_e = 0.0
    obs_pooled[-1] += acc_o
    exp_pooled[-1] += acc_e
    o, e = np.array(obs_pooled), np.array(exp_pooled)
    e *= o.sum() / e.sum()
    return stats.power_divergence(o, e, lambda_="log-likelihood").pvalue


@pytest.mark.parametrize("sigma2", SIGMAS, ids=str)
def test_discrete_gaussian_matches_exact_pmf_and_variance(sigma2):
    n = 1_000_000
    draws = discrete_gaussian(sigma2, n, SeededRandomSource(20260 + int(sigma2)))
    assert draws.dtype == np.int64 and len(draws) == n
    assert g_test(draws, lambda ks: discrete_gaussian_pmf(sigma2, ks)) > ALPHA
    # variance: z-test with the exact 4th moment of the discrete Gaussian
    K = int(12 * (float(sigma2) ** 0.5 + 1)) + 12
    ks = np.arange(-K, K + 1)
    p = discrete_gaussian_pmf(sigma2, ks)
    var = float(np.sum(p * ks.astype(float) ** 2))
    m4 = float(np.sum(p * ks.astype(float) ** 4))
    assert var == pytest.approx(discrete_gaussian_variance(sigma2))
    z = (np.mean(draws.astype(float) ** 2) - var) / np.sqrt((m4 - var**2) / n)
    assert abs(z) < stats.norm.isf(ALPHA / 2)
    assert abs(draws.mean()) < stats.norm.isf(ALPHA / 2) * np.sqrt(var / n)


@pytest.mark.parametrize("sigma2", [Fraction(1, 2), Fraction(484, 25), Fraction(10**12 + 39, 10**10 + 7)], ids=str)
def test_reference_rejection_sampler_matches_exact_pmf(sigma2):
    draws = discrete_gaussian_reference(sigma2, 100_000, SeededRandomSource(5))
    assert g_test(draws, lambda ks: discrete_gaussian_pmf(sigma2, ks)) > ALPHA


@pytest.mark.parametrize("t", [1, 3, 10])
def test_discrete_laplace_matches_exact_pmf(t):
    draws = discrete_laplace(t, 200_000, SeededRandomSource(t))
    q = np.exp(-1.0 / t)

    def pmf(ks):
        return (1 - q) / (1 + q) * q ** np.abs(ks)

    assert g_test(draws, pmf) > ALPHA


@pytest.mark.parametrize("gamma", [Fraction(0), Fraction(1, 3), Fraction(1), Fraction(5, 2), Fraction(7)], ids=str)
def test_bernoulli_exp_rates(gamma):
    n = 200_000
    draws = bernoulli_exp(gamma, n, SeededRandomSource(11))
    p = float(np.exp(-float(gamma)))
    lo, hi = stats.binom.interval(1 - ALPHA, n, p)
    assert lo <= draws.sum() <= hi


def test_seeded_mode_is_reproducible_and_streams_differ():
    a = discrete_gaussian(Fraction(7921), 1000, SeededRandomSource(3))
    b = discrete_gaussian(Fraction(7921), 1000, SeededRandomSource(3))
    c = discrete_gaussian(Fraction(7921), 1000, SeededRandomSource(4))
    d = discrete_gaussian(Fraction(7921), 1000, SeededRandomSource(3).spawn("county"))
    assert np.array_equal(a, b)
    assert not np.array_equal(a, c) and not np.array_equal(a, d)
    assert np.array_equal(d, discrete_gaussian(Fraction(7921), 1000, SeededRandomSource(3).spawn("county")))


def test_production_mode_refuses_a_seed_and_is_private():
    with pytest.raises(ValueError, match="no seed"):
        SystemRandomSource(seed=1)
    assert make_random_source(None).private and not make_random_source(5).private
    draws = discrete_gaussian(Fraction(10), 10_000, SystemRandomSource())
    assert draws.dtype == np.int64 and 5 < draws.var() < 15


def test_floats_are_refused():
    with pytest.raises(TypeError, match="float"):
        discrete_gaussian(19.36, 10, SeededRandomSource(1))
    with pytest.raises(ValueError):
        discrete_gaussian(Fraction(-1), 10, SeededRandomSource(1))


class ScriptedSource(SeededRandomSource):
    """Returns chosen 64-bit words first, then seeded ones: drives U into hard places."""

    def __init__(self, words):
        super().__init__(0)
        self.words = list(words)

    def uint64(self, n):
        head, self.words = self.words[:n], self.words[n:]
        rest = super().uint64(n - len(head))
        return np.concatenate([np.array(head, dtype=np.uint64), rest])


@pytest.mark.parametrize("sigma2", [Fraction(1, 2), Fraction(484, 25)], ids=str)
def test_ambiguous_and_tail_words_are_resolved_exactly(sigma2):
    K, lows, highs = sampler._table(sigma2)
    # a word right at a threshold (ambiguous), the smallest and largest words (far tails)
    mid = len(lows) // 2
    words = [int(lows[mid]), int(highs[mid]), 0, 2**64 - 1]
    draws = discrete_gaussian(sigma2, len(words), ScriptedSource(words))
    # U in [lows[mid], lows[mid]+1)/2^64 sits at F(k_mid): the answer is k_mid or k_mid + 1
    k_mid = mid - K
    assert draws[0] in (k_mid, k_mid + 1) and draws[1] in (k_mid, k_mid + 1)
    # U < 2^-64 <= F(k) wherever L_k >= 1: the draw is at most the first such k (and symmetric)
    first = int(np.argmax(lows >= 1)) - K
    last = len(highs) - 1 - int(np.argmax(highs[::-1] < np.uint64(2**64 - 1))) - K
    assert draws[2] <= first and draws[3] >= last + 1 - 1
    assert draws[2] == -draws[3] or abs(draws[2]) >= abs(first)
