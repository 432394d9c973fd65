"""The exact samplers against exact probabilities (G tests, moments, rates) and forced hard cases."""

import bisect
from fractions import Fraction

import mpmath
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
    """p-value of a G test of integer draws against pmf(ks), pooling sparse bins from the left."""
    lo, hi = int(draws.min()), int(draws.max())
    ks = np.arange(lo, hi + 1)
    observed = np.bincount(draws - lo, minlength=len(ks)).astype(float)
    probs = pmf(ks)
    tails = 1.0 - probs.sum()  # mass outside [lo, hi]: into the outer bins
    probs[0] += tails / 2
    probs[-1] += tails / 2
    expected = probs * len(draws)
    obs_pooled, exp_pooled = [], []
    acc_o = acc_e = 0.0
    for o, e in zip(observed, expected):
        acc_o += o
        acc_e += e
        if acc_e >= min_expected:
            obs_pooled.append(acc_o)
            exp_pooled.append(acc_e)
            acc_o = acc_e = 0.0
    obs_pooled[-1] += acc_o  # the sparse right tail joins the last full bin
    exp_pooled[-1] += acc_e
    o, e = np.array(obs_pooled), np.array(exp_pooled)
    assert len(o) >= 2
    e *= o.sum() / e.sum()
    return stats.power_divergence(o, e, lambda_="log-likelihood").pvalue


def to_fraction(x: mpmath.mpf) -> Fraction:
    man, exp = x.man_exp
    return Fraction(int(man)) * Fraction(2) ** int(exp)


def exact_cdf(sigma2: Fraction, ks, prec: int = 400) -> list[Fraction]:
    """F(k) by direct high-precision sums (error ~2^-390), independent of the sampler's bounds."""
    with mpmath.workprec(prec):
        x = mpmath.mpf(sigma2.denominator) / (2 * sigma2.numerator)
        reach = max(abs(k) for k in ks) + 40 * (int(sigma2) + 1) ** 0.5 + 60
        w = [mpmath.exp(-j * j * x) for j in range(int(reach) + 1)]
        total = w[0] + 2 * mpmath.fsum(w[1:])
        out = []
        for k in ks:
            below = mpmath.fsum(w[-k:]) if k < 0 else total - mpmath.fsum(w[k + 1:])
            out.append(to_fraction(below / total))
        return out


@pytest.mark.parametrize("sigma2", SIGMAS, ids=str)
def test_discrete_gaussian_matches_exact_pmf_and_variance(sigma2):
    n = 1_000_000
    draws = discrete_gaussian(sigma2, n, SeededRandomSource(20260 + int(sigma2)))
    assert draws.dtype == np.int64 and len(draws) == n
    assert g_test(draws, lambda ks: discrete_gaussian_pmf(sigma2, ks)) > ALPHA
    # second moment: z-test whose standard error comes from the exact fourth moment
    K = 12 * (int(sigma2) + 2) ** 0.5 + 12
    ks = np.arange(-int(K), int(K) + 1)
    p = discrete_gaussian_pmf(sigma2, ks)
    var = float(np.sum(p * ks.astype(float) ** 2))
    m4 = float(np.sum(p * ks.astype(float) ** 4))
    assert var == pytest.approx(discrete_gaussian_variance(sigma2), rel=1e-12)
    z = (np.mean(draws.astype(float) ** 2) - var) / np.sqrt((m4 - var**2) / n)
    assert abs(z) < stats.norm.isf(ALPHA / 2)
    assert abs(draws.mean()) < stats.norm.isf(ALPHA / 2) * np.sqrt(var / n)


def test_exact_variance_helper():
    # large sigma2: the discrete Gaussian's variance is sigma2 up to O(e^{-2 pi^2 sigma2}); small: below it
    assert discrete_gaussian_variance(Fraction(7921)) == pytest.approx(7921, rel=1e-12)
    p1 = np.exp(-1.0)  # sigma2 = 1/2: P(k) proportional to e^{-k^2}
    series = sum(k * k * p1 ** (k * k) for k in range(1, 20)) * 2 / (1 + 2 * sum(p1 ** (k * k) for k in range(1, 20)))
    assert discrete_gaussian_variance(Fraction(1, 2)) == pytest.approx(series, rel=1e-12)


@pytest.mark.parametrize("sigma2", [Fraction(1, 2), Fraction(7921), Fraction(10**12 + 39, 10**10 + 7), Fraction(3, 1000)],
                         ids=str)
def test_cdf_bounds_enclose_the_exact_cdf(sigma2):
    K, lows, highs = sampler._cdf_bounds(sigma2, 64, sampler._table_k(sigma2))
    ks = list(range(-K, K + 1, max(1, K // 40))) + [-1, 0, 1]
    for k, f in zip(ks, exact_cdf(sigma2, ks)):
        assert lows[k + K] <= f * 2**64 <= highs[k + K]
        assert highs[k + K] - lows[k + K] <= 2
    assert lows == sorted(lows) and highs == sorted(highs)


@pytest.mark.parametrize("x", [Fraction(0), Fraction(1, 3), Fraction(5, 2), Fraction(10**9 + 7, 3), Fraction(1, 10**15)],
                         ids=str)
def test_exp_bounds(x):
    lo, hi = sampler._exp_neg_bounds(x, 200)
    with mpmath.workprec(600):
        exact = mpmath.exp(-mpmath.mpf(x.numerator) / x.denominator) * mpmath.mpf(2) ** 200
    assert lo <= exact <= hi and hi - lo <= 2 ** 12


@pytest.mark.parametrize("sigma2", [Fraction(1, 2), Fraction(484, 25), Fraction(10**12 + 39, 10**10 + 7)], ids=str)
def test_reference_rejection_sampler_matches_exact_pmf(sigma2):
    draws = discrete_gaussian_reference(sigma2, 100_000, SeededRandomSource(5))
    assert draws.dtype == np.int64
    assert g_test(draws, lambda ks: discrete_gaussian_pmf(sigma2, ks)) > ALPHA


@pytest.mark.parametrize("t", [1, 3, 10])
def test_discrete_laplace_matches_exact_pmf(t):
    draws = discrete_laplace(t, 200_000, SeededRandomSource(t))
    q = np.exp(-1.0 / t)

    def pmf(ks):
        return (1 - q) / (1 + q) * q ** np.abs(ks)

    assert g_test(draws, pmf) > ALPHA


@pytest.mark.parametrize("gamma", [Fraction(0), Fraction(1, 3), Fraction(1), Fraction(5, 2), Fraction(7),
                                   Fraction(10**20 + 1, 10**20)], ids=str)
def test_bernoulli_exp_rates(gamma):
    n = 200_000
    draws = bernoulli_exp(gamma, n, SeededRandomSource(11))
    p = float(mpmath.exp(-mpmath.mpf(gamma.numerator) / gamma.denominator))
    lo, hi = stats.binom.interval(1 - ALPHA, n, p)
    assert lo <= draws.sum() <= hi


def test_uniform_below_is_uniform_and_in_range():
    rng = SeededRandomSource(8)
    for q in (1, 3, 7, 2**62 + 1, 2**63):
        draws = rng.uniform_below(q, 50_000)
        assert draws.dtype == np.int64 and draws.min() >= 0 and int(draws.max()) < q
    draws = rng.uniform_below(6, 120_000)
    assert stats.chisquare(np.bincount(draws, minlength=6)).pvalue > ALPHA
    # q just above 2^62: rejection happens half the time; top half of the range must be hit as often as the bottom
    q = 2**62 + 2**61
    top = rng.uniform_below(q, 60_000) >= q // 2
    lo, hi = stats.binom.interval(1 - ALPHA, 60_000, 0.5)
    assert lo <= top.sum() <= hi
    with pytest.raises(ValueError):
        rng.uniform_below(0, 1)
    with pytest.raises(ValueError):
        rng.uniform_below(2**63 + 1, 1)


def test_seeded_mode_is_reproducible_and_streams_differ():
    a = discrete_gaussian(Fraction(7921), 1000, SeededRandomSource(3))
    b = discrete_gaussian(Fraction(7921), 1000, SeededRandomSource(3))
    c = discrete_gaussian(Fraction(7921), 1000, SeededRandomSource(4))
    d = discrete_gaussian(Fraction(7921), 1000, SeededRandomSource(3).spawn("county"))
    assert np.array_equal(a, b)
    assert not np.array_equal(a, c) and not np.array_equal(a, d)
    assert np.array_equal(d, discrete_gaussian(Fraction(7921), 1000, SeededRandomSource(3).spawn("county")))
    assert not np.array_equal(d, discrete_gaussian(Fraction(7921), 1000, SeededRandomSource(3).spawn("tract")))


def test_production_mode_refuses_a_seed_and_is_private():
    with pytest.raises(ValueError, match="no seed"):
        SystemRandomSource(seed=1)
    with pytest.raises(ValueError, match="no seed"):
        SystemRandomSource(1)
    assert make_random_source(None).private and not make_random_source(5).private
    assert isinstance(make_random_source(None).spawn("x"), SystemRandomSource)
    draws = discrete_gaussian(Fraction(10), 10_000, SystemRandomSource())
    assert draws.dtype == np.int64 and 5 < draws.var() < 15


def test_inputs_are_validated_and_floats_refused():
    rng = SeededRandomSource(1)
    with pytest.raises(TypeError, match="float"):
        discrete_gaussian(19.36, 10, rng)
    with pytest.raises(TypeError, match="float"):
        discrete_gaussian_reference(np.float64(19.36), 10, rng)
    with pytest.raises(ValueError, match="positive"):
        discrete_gaussian(Fraction(-1), 10, rng)
    with pytest.raises(ValueError, match="positive"):
        discrete_gaussian(0, 10, rng)
    with pytest.raises(ValueError, match=">= 0"):
        discrete_gaussian(Fraction(2), -1, rng)
    with pytest.raises(ValueError):
        bernoulli_exp(Fraction(-1, 2), 3, rng)
    with pytest.raises(ValueError):
        discrete_laplace(0, 3, rng)
    assert discrete_gaussian(Fraction(2), 0, rng).dtype == np.int64
    out = discrete_gaussian(7, 5, rng)  # an int sigma2 is exact too
    assert out.dtype == np.int64 and out.shape == (5,)


class ScriptedSource(SeededRandomSource):
    """Gives chosen 16-bit and 64-bit words first, then seeded ones: drives U into hard places."""

    def __init__(self, prefixes, words):
        super().__init__(0)
        self.prefixes, self.words = list(prefixes), list(words)

    def uint16(self, n):
        head, self.prefixes = self.prefixes[:n], self.prefixes[n:]
        return np.concatenate([np.array(head, dtype=np.uint16), super().uint16(n - len(head))])

    def uint64(self, n):
        head, self.words = self.words[:n], self.words[n:]
        return np.concatenate([np.array(head, dtype=np.uint64), super().uint64(n - len(head))])


@pytest.mark.parametrize("sigma2", [Fraction(1, 2), Fraction(484, 25), Fraction(10**12 + 39, 10**10 + 7)], ids=str)
def test_ambiguous_and_tail_words_are_resolved_exactly(sigma2, monkeypatch):
    table = sampler._table(sigma2)
    mid = len(table.lows) // 2 + 1
    # 64-bit prefixes of U: exactly on a lower bound (ambiguous), 0 and 2^64 - 1 (beyond the table's reach)
    prefixes64 = [int(table.lows[mid]), 0, 2**64 - 1, int(table.lows[mid - 2])]
    extensions = [0x9E3779B97F4A7C15, 0x5851F42D4C957F2D, 0x2545F4914F6CDD1D, 0x14057B7EF767814F]
    words = [(u & (2**48 - 1)) << 16 for u in prefixes64] + [e for e in extensions for _ in range(1)]
    resolved = []
    real_resolve = sampler._resolve
    monkeypatch.setattr(sampler, "_resolve", lambda *a: resolved.append(a[1]) or real_resolve(*a))
    draws = discrete_gaussian(sigma2, 4, ScriptedSource([u >> 48 for u in prefixes64], words))
    assert resolved == prefixes64  # every one went to the exact resolution
    # U lies in [(u 2^64 + e) / 2^128, (u 2^64 + e + 1) / 2^128): the answer is the first k with F(k) > U
    for draw, u, e in zip(draws, prefixes64, extensions):
        U = Fraction(u * 2**64 + e, 2**128)
        ks = list(range(draw - 1, draw + 1))
        f_before, f_at = exact_cdf(sigma2, ks)
        assert f_before <= U < f_at, (draw, u)


def test_large_sigma_uses_a_table_and_huge_sigma_the_reference(monkeypatch):
    called = []
    monkeypatch.setattr(sampler, "discrete_gaussian_reference", lambda s, n, r: called.append(s) or np.zeros(n, np.int64))
    discrete_gaussian(Fraction(10**14), 3, SeededRandomSource(1))
    assert called == [Fraction(10**14)]


def test_prefix_table_agrees_with_the_exact_cdf():
    sigma2 = Fraction(484, 25)
    table = sampler._table(sigma2)
    ks = list(range(-table.K, table.K + 1))
    scaled = [f * 2**16 for f in exact_cdf(sigma2, ks)]  # F(k) 2^16
    decided = np.flatnonzero(table.prefix != sampler._UNDECIDED)
    assert len(decided) > 0.99 * 2**16
    for c in decided.tolist():
        # every U in [c, c+1) / 2^16 has F(k-1) <= U < F(k) for the same k = prefix[c]
        first = bisect.bisect_right(scaled, c)  # index of the first F(k) > c / 2^16
        assert ks[first] == table.prefix[c] and scaled[first] >= c + 1, c


@pytest.mark.parametrize("sigma2", [Fraction(1, 10**6), Fraction(3, 1000)], ids=str)
def test_tiny_sigma_is_almost_surely_zero_even_at_the_extremes(sigma2):
    # U forced to [0, 2^-64) and [1 - 2^-64, 1): P(X != 0) is about e^{-1/(2 sigma2)}, so the answer is 0
    rng = ScriptedSource([0, 2**16 - 1], [0, 2**64 - 1, 2**63, 2**63])
    assert discrete_gaussian(sigma2, 2, rng).tolist() == [0, 0]
    assert not discrete_gaussian(sigma2, 100_000, SeededRandomSource(2)).any()


# ---------------------------------------------------------------------------------------------
# discrete_laplace_scaled: the two-sided geometric with a rational scale


@pytest.mark.parametrize("scale", [Fraction(1, 3), Fraction(5, 2), 4])
def test_discrete_laplace_scaled_matches_its_pmf(scale):
    from das.privacy.sampler import discrete_laplace_pmf, discrete_laplace_scaled

    x = discrete_laplace_scaled(scale, 40_000, SeededRandomSource(7))
    k = np.arange(-12, 13)
    p = discrete_laplace_pmf(scale, k)
    observed = np.array([(x == v).sum() for v in k])
    keep = p * len(x) > 5
    expected = p[keep] / p[keep].sum() * observed[keep].sum()
    assert stats.chisquare(observed[keep], expected).pvalue > 1e-3
    assert abs(np.mean(x)) < 5 * np.sqrt(np.sum(p * k**2) / len(x)) + 1e-9


def test_discrete_laplace_scaled_refuses_floats():
    from das.privacy.sampler import discrete_laplace_scaled

    with pytest.raises(TypeError):
        discrete_laplace_scaled(0.5, 3, SeededRandomSource(0))
    with pytest.raises(ValueError):
        discrete_laplace_scaled(Fraction(0), 3, SeededRandomSource(0))
