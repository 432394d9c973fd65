"""Exact discrete Gaussian noise, vectorized. No floating point decides any output.

N_Z(0, s) for rational s = sigma^2 = a/b has P(X = k) = w_k / Z with w_k = exp(-k^2 x), x = 1/(2s),
Z = sum_k w_k; F(k) = P(X <= k) is its CDF.

`discrete_gaussian` (production) samples by inversion of one uniform real U in [0, 1) whose
binary digits are the random bits drawn; it returns the unique k with F(k-1) <= U < F(k), which
has probability F(k) - F(k-1) = P(X = k): exactly the discrete Gaussian, whatever the rest of the
code does, provided every comparison between U and an F(k) is decided correctly. They are:

Bounds. `_cdf_bounds(s, bits, K)` returns integers L_k <= F(k) 2^bits <= H_k for |k| <= K. They
are computed in integer fixed point with directed rounding (every product is floored for a lower
bound and ceiled for an upper one): exp(-x) by alternating Taylor partial sums of exp(-x/n),
which bracket it (terms decrease for x/n <= 1/2), raised to the n-th power; w_{k+1} = w_k g_k,
g_k = exp(-(2k+1)x) = g_{k-1} exp(-2x); tail sums T(m) = sum_{j >= m} w_j up to a point M with a
rigorous bound for the rest, sum_{j > M} w_j <= w_M max(2, 1/((M+1)x)) (from
j^2 >= J^2 + 2J(j - J) and 1 - e^{-t} >= min(t, 1)/2); Z = 1 + 2 T(1), F(-m) = T(m)/Z and
F(k) = 1 - T(k+1)/Z for k >= 0, divided with rounding outward. Running maxima of H and running
minima (from the right) of L keep both sorted without loosening their validity.

Decision. If U's first `bits` bits form the integer u, then U lies in [u, u+1) / 2^bits, so
H_k <= u implies F(k) <= U, and L_k >= u + 1 implies U < F(k). With j the number of table
entries with H_k <= u, if j >= 1 and L_j >= u + 1 the output is certainly k_j (the j-th entry).

Stages, all applying this rule to the same U. (1) The first 16 bits c of U: a precomputed table
of the 2^16 possible values gives the output wherever one k is certain for the whole interval
[c, c+1) / 2^16 (all but a few per cent of draws). (2) Otherwise 48 more bits make a 64-bit u,
decided by `np.searchsorted` against the cached table at bits = 64 for |k| <= K = 10 sigma + 10.
(3) Otherwise (U within one unit of a threshold, or beyond the table: probability about 2^-60),
`_resolve` appends 64 more random bits to U at a time and recomputes the bounds at that precision
over a window reaching where F is below 2^-bits, until the rule decides. Each round decides
unless U is within about 2^-bits of some F(k) (or of 0 or 1), so it ends with probability 1.
Bits that are drawn are never discarded after being looked at, so U is uniform and independent of
everything else; the output is the inverse CDF at U. Hence the output is exactly N_Z(0, s).
Running time depends on the value drawn only through these rare stages (the rejection sampler's
loop count, by contrast, depends on the output).

`discrete_gaussian_reference` is the rejection sampler of Canonne, Kamath and Steinke (2020),
in integer and rational arithmetic only, vectorized over the still-pending draws (Python
integers where int64 could overflow); it is the independent check of the fast sampler.
"""

from __future__ import annotations

import bisect
import functools
from dataclasses import dataclass
from fractions import Fraction
from math import isqrt

import numpy as np

from das.privacy.randomness import RandomSource

PREFIX_BITS = 16  # stage 1: a table over the first 16 bits of U
TABLE_BITS = 64  # stage 2: thresholds times 2^64
# |k| <= K = 10 sigma + 10 in the cached table: sigma2 up to ~1.6e9 (2 s, 0.2 GB to build); beyond: the reference sampler
MAX_TABLE_K = 400_000
_UNDECIDED = np.iinfo(np.int32).min


def _as_fraction(sigma2) -> Fraction:
    if isinstance(sigma2, (float, bool, np.floating, np.bool_)):
        raise TypeError(f"sigma^2 must be an exact int or Fraction, not {type(sigma2).__name__} ({sigma2!r})")
    try:
        value = Fraction(sigma2)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"sigma^2 must be an exact int or Fraction, got {sigma2!r}") from exc
    if value <= 0:
        raise ValueError(f"sigma^2 must be positive, got {value}")
    return value


def _count(n) -> int:
    if isinstance(n, (float, bool, np.floating)) or int(n) != n:
        raise TypeError(f"number of draws must be an int, got {n!r}")
    n = int(n)
    if n < 0:
        raise ValueError(f"number of draws must be >= 0, got {n}")
    return n


def _sigma_ceil(sigma2: Fraction) -> int:
    """An integer >= sigma (exact)."""
    return isqrt(-(-sigma2.numerator // sigma2.denominator)) + 1


def _table_k(sigma2: Fraction) -> int:
    return 10 * _sigma_ceil(sigma2) + 10


# ---------------------------------------------------------------------------------------------
# Rigorous integer bounds of the CDF (fixed point with directed rounding)


def _mul_down(x: int, y: int, p: int) -> int:
    return (x * y) >> p


def _mul_up(x: int, y: int, p: int) -> int:
    return -((-(x * y)) >> p)


def _exp_neg_bounds(x: Fraction, p: int) -> tuple[int, int]:
    """(lo, hi) with lo <= exp(-x) 2^p <= hi, for rational x >= 0."""
    n = max(1, -(-2 * x.numerator // x.denominator))  # n >= 2x, so y = x / n <= 1/2
    y = x / n
    p2 = p + n.bit_length() + 8  # guard bits for the n-th power
    # alternating series with decreasing terms: consecutive partial sums bracket exp(-y)
    term, total, i = Fraction(1), Fraction(1), 0
    eps = Fraction(1, 1 << (p2 + 4))
    while True:
        i += 1
        term = -term * y / i
        previous, total = total, total + term
        if abs(term) < eps:
            break
    lo_f, hi_f = min(previous, total), max(previous, total)
    lo = (lo_f.numerator << p2) // lo_f.denominator
    hi = -((-(hi_f.numerator << p2)) // hi_f.denominator)
    # power n by squaring, each product rounded outward
    result_lo, result_hi = 1 << p2, 1 << p2
    base_lo, base_hi = lo, hi
    while n:
        if n & 1:
            result_lo, result_hi = _mul_down(result_lo, base_lo, p2), _mul_up(result_hi, base_hi, p2)
        n >>= 1
        if n:
            base_lo, base_hi = _mul_down(base_lo, base_lo, p2), _mul_up(base_hi, base_hi, p2)
    shift = p2 - p
    return result_lo >> shift, -((-result_hi) >> shift)


def _cdf_bounds(sigma2: Fraction, bits: int, K: int | None = None) -> tuple[int, list[int], list[int]]:
    """(K, L, H): Python ints L[i] <= F(i - K) 2^bits <= H[i] for i = 0..2K, both sorted.

    With K None, K is where the weights fall below 2^-(bits+16), so that F(-K) and 1 - F(K) are
    about 2^-bits or less.
    """
    a, b = sigma2.numerator, sigma2.denominator
    x = Fraction(b, 2 * a)
    m_estimate = isqrt(2 * (-(-a // b)) * (bits + 24)) + (K or 0) + 4  # >= the M reached below
    p = bits + 32 + 2 * m_estimate.bit_length()  # guard bits for M products and sums
    one = 1 << p
    r_lo, r_hi = _exp_neg_bounds(x, p)
    q_lo, q_hi = _exp_neg_bounds(2 * x, p)
    negligible = 1 << max(0, p - bits - 16)
    w_lo, w_hi = [one], [one]  # w_0 = 1
    g_lo, g_hi = r_lo, r_hi  # g_k = exp(-(2k+1)x) = w_{k+1} / w_k
    need = 0 if K is None else K + 1  # T(K+1) must be covered
    while len(w_lo) <= need or w_hi[-1] > negligible:
        w_lo.append(_mul_down(w_lo[-1], g_lo, p))
        w_hi.append(_mul_up(w_hi[-1], g_hi, p))
        g_lo, g_hi = _mul_down(g_lo, q_lo, p), _mul_up(g_hi, q_hi, p)
    M = len(w_lo) - 1
    if K is None:
        K = M  # F(-M) and 1 - F(M-1) are at most about 2^-bits; every answer in [-M+1, M] is decidable
    # sum_{j > M} w_j <= w_M max(2, 1/((M+1)x)) = w_M max(2, 2a / (b (M+1)))
    factor = max(2, -(-2 * a // (b * (M + 1))))
    t_lo, t_hi = [0] * (M + 2), [0] * (M + 2)  # T(m) = sum_{j >= m} w_j for m = 0..M+1
    t_hi[M + 1] = w_hi[M] * factor
    for m in range(M, -1, -1):
        t_lo[m] = t_lo[m + 1] + w_lo[m]
        t_hi[m] = t_hi[m + 1] + w_hi[m]
    z_lo, z_hi = one + 2 * t_lo[1], one + 2 * t_hi[1]
    scale = 1 << bits
    lows, highs = [], []
    for k in range(-K, K + 1):
        if k < 0:  # F(k) = T(-k) / Z
            lows.append((t_lo[-k] << bits) // z_hi)
            highs.append(-((-(t_hi[-k] << bits)) // z_lo))
        else:  # F(k) = 1 - T(k+1) / Z
            lows.append(scale - (-((-(t_hi[k + 1] << bits)) // z_lo)))
            highs.append(scale - ((t_lo[k + 1] << bits) // z_hi))
    for i in range(1, len(highs)):  # running max of upper bounds: still upper bounds, now sorted
        if highs[i] < highs[i - 1]:
            highs[i] = highs[i - 1]
    for i in range(len(lows) - 2, -1, -1):  # running min from the right of lower bounds
        if lows[i] > lows[i + 1]:
            lows[i] = lows[i + 1]
    return K, lows, highs


def _decide(lows: list[int], highs: list[int], u: int) -> int | None:
    """Table index certainly holding F^{-1}(U) for U in [u, u+1) / 2^bits, or None."""
    j = bisect.bisect_right(highs, u)  # entries with H_k <= u, i.e. certainly F(k) <= U
    if 1 <= j < len(lows) and int(lows[j]) >= u + 1:
        return j
    return None


@dataclass(frozen=True)
class _Table:
    K: int
    lows: np.ndarray  # uint64, L_k <= F(k) 2^64, capped at 2^64 - 1
    highs: np.ndarray  # uint64, H_k >= F(k) 2^64, capped at 2^64 - 1 (a capped H is never <= u unless u = 2^64 - 1,
    #                    and then j = 2K + 1: undecided)
    prefix: np.ndarray  # int32 per 16-bit prefix c: the output when certain on [c, c+1) / 2^16, else _UNDECIDED


@functools.lru_cache(maxsize=32)
def _table(sigma2: Fraction) -> _Table:
    K, lows, highs = _cdf_bounds(sigma2, TABLE_BITS, _table_k(sigma2))
    cap = (1 << TABLE_BITS) - 1
    lows_arr = np.array([min(v, cap) for v in lows], dtype=np.uint64)
    highs_arr = np.array([min(v, cap) for v in highs], dtype=np.uint64)
    shift = TABLE_BITS - PREFIX_BITS
    c = np.arange(1 << PREFIX_BITS, dtype=np.uint64)
    # the whole interval [c, c+1) 2^-16 gives index j when H_{j-1} <= c 2^48 and L_j >= (c+1) 2^48
    j = np.searchsorted(highs_arr, c << np.uint64(shift), side="right")
    valid = (j >= 1) & (j < len(lows_arr))
    certain = np.zeros(len(c), dtype=bool)
    certain[valid] = (lows_arr[j[valid]] >> np.uint64(shift)) > c[valid]  # L_j >= (c+1) 2^48
    prefix = np.full(len(c), _UNDECIDED, dtype=np.int32)
    prefix[certain] = (j[certain].astype(np.int64) - K).astype(np.int32)
    return _Table(K, lows_arr, highs_arr, prefix)


def _resolve(sigma2: Fraction, u: int, bits: int, rng: RandomSource) -> int:
    """Finish one draw exactly: U starts with the `bits` bits u; add 64 bits at a time until decided."""
    while True:
        u = (u << 64) | int(rng.uint64(1)[0])
        bits += 64
        K, lows, highs = _cdf_bounds(sigma2, bits)
        j = _decide(lows, highs, u)
        if j is not None:
            return j - K


def discrete_gaussian(sigma2, n: int, rng: RandomSource) -> np.ndarray:
    """n exact draws of N_Z(0, sigma2) as int64: inversion of a uniform U decided by integer bounds.

    sigma2 must be a positive int or Fraction (a float is refused). The table for sigma2 is built
    once per process (about 0.6 s at sigma2 = 10^8, 2 s at 10^9); above sigma2 of about 1.6 * 10^9 the
    rejection sampler `discrete_gaussian_reference` is used instead.
    """
    sigma2 = _as_fraction(sigma2)
    n = _count(n)
    if _table_k(sigma2) > MAX_TABLE_K:
        return discrete_gaussian_reference(sigma2, n, rng)
    table = _table(sigma2)
    c = rng.uint16(n)
    out = table.prefix[c].astype(np.int64)  # stage 1: the first 16 bits of U
    open1 = np.flatnonzero(out == _UNDECIDED)
    if open1.size:  # stage 2: 48 more bits, 64-bit thresholds
        shift = np.uint64(TABLE_BITS - PREFIX_BITS)
        u = (c[open1].astype(np.uint64) << shift) | (rng.uint64(open1.size) >> np.uint64(PREFIX_BITS))
        j = np.searchsorted(table.highs, u, side="right")
        certain = (j >= 1) & (j < len(table.lows))
        certain[certain] = u[certain] < table.lows[j[certain]]  # u + 1 <= L_j
        out[open1[certain]] = j[certain].astype(np.int64) - table.K
        for i, ui in zip(open1[~certain], u[~certain]):  # stage 3: about 2^-60 of the draws
            out[i] = _resolve(sigma2, int(ui), TABLE_BITS, rng)
    return out


# ---------------------------------------------------------------------------------------------
# The reference: Canonne-Kamath-Steinke rejection sampling, integer arithmetic only

_INT64_SAFE = 1 << 56  # int64 arrays are used only while every value stays below this


def _uniform_below_each(q: np.ndarray, rng: RandomSource) -> np.ndarray:
    """One exact uniform draw from [0, q_i) for each entry (q_i >= 1; int64 or Python-int objects)."""
    if q.dtype == object:
        return np.array([rng.uniform_below_big(int(qi)) for qi in q], dtype=object)
    out = np.empty(len(q), dtype=np.int64)
    pending = np.arange(len(q))
    while pending.size:
        qs = q[pending].astype(np.uint64)
        words = rng.uint64(pending.size) >> np.uint64(1)  # uniform on [0, 2^63)
        ok = words < (np.uint64(1 << 63) // qs) * qs  # a whole number of copies of [0, q_i)
        out[pending[ok]] = (words[ok] % qs[ok]).astype(np.int64)
        pending = pending[~ok]
    return out


def _to_int_arrays(num, den) -> tuple[np.ndarray, np.ndarray]:
    """int64 arrays when every value fits comfortably, else object arrays of Python ints."""
    num, den = np.asarray(num), np.asarray(den)
    if num.dtype != object and den.dtype != object:
        if num.size == 0 or (np.abs(num).max() < _INT64_SAFE and den.max() < _INT64_SAFE):
            return num.astype(np.int64), den.astype(np.int64)
        return num.astype(object), den.astype(object)
    num, den = num.astype(object), den.astype(object)
    if all(abs(int(v)) < _INT64_SAFE for v in num) and all(int(v) < _INT64_SAFE for v in den):
        return num.astype(np.int64), den.astype(np.int64)
    return num, den


def _bernoulli_exp_le1(num: np.ndarray, den: np.ndarray, rng: RandomSource) -> np.ndarray:
    """Bernoulli(exp(-num_i/den_i)) for 0 <= num_i/den_i <= 1: draw Bernoulli(gamma/k), k = 1, 2, ...
    until one fails; the result is 1 iff that k is odd (CKS 2020, Algorithm 1)."""
    n = len(num)
    result = np.zeros(n, dtype=bool)
    k = np.ones(n, dtype=num.dtype)
    pending = np.arange(n)
    while pending.size:
        if k.dtype != object and int(k[pending].max()) * int(den[pending].max()) >= _INT64_SAFE:
            num, den, k = num.astype(object), den.astype(object), k.astype(object)  # den * k could overflow
        success = np.asarray(_uniform_below_each(den[pending] * k[pending], rng) < num[pending], dtype=bool)
        done = pending[~success]
        result[done] = (k[done] % 2) == 1
        k[pending[success]] += 1
        pending = pending[success]
    return result


def bernoulli_exp_many(num, den, rng: RandomSource) -> np.ndarray:
    """Bernoulli(exp(-num_i/den_i)) for nonnegative rationals num_i/den_i, exactly (vectorized)."""
    num, den = _to_int_arrays(num, den)
    n = len(num)
    result = np.ones(n, dtype=bool)
    whole = num // den
    frac = num - whole * den
    # exp(-gamma) = exp(-1)^floor(gamma) * exp(-frac(gamma)): every factor must succeed
    remaining = whole.copy()
    active = np.flatnonzero(remaining > 0)
    while active.size:
        ones = np.ones(active.size, dtype=np.int64)
        ok = _bernoulli_exp_le1(ones, ones, rng)
        result[active[~ok]] = False
        remaining[active[~ok]] = 0
        remaining[active[ok]] -= 1
        active = active[ok][remaining[active[ok]] > 0]
    alive = np.flatnonzero(result)
    if alive.size:
        result[alive] = _bernoulli_exp_le1(frac[alive], den[alive], rng)
    return result


def bernoulli_exp(gamma, n: int, rng: RandomSource) -> np.ndarray:
    """n exact draws of Bernoulli(exp(-gamma)) for rational gamma >= 0 (int or Fraction)."""
    if isinstance(gamma, (float, np.floating)):
        raise TypeError(f"gamma must be an exact int or Fraction, not float ({gamma!r})")
    gamma = Fraction(gamma)
    if gamma < 0:
        raise ValueError(f"gamma must be >= 0, got {gamma}")
    n = _count(n)
    return bernoulli_exp_many(np.full(n, gamma.numerator, dtype=object),
                              np.full(n, gamma.denominator, dtype=object), rng)


def discrete_laplace(t: int, n: int, rng: RandomSource) -> np.ndarray:
    """n exact draws with P(x) proportional to exp(-|x|/t), integer scale t >= 1 (CKS Algorithm 2)."""
    if isinstance(t, (float, bool, np.floating)) or int(t) != t or int(t) < 1:
        raise ValueError(f"scale t must be a positive integer, got {t!r}")
    t = int(t)
    n = _count(n)
    out = np.zeros(n, dtype=np.int64)
    pending = np.arange(n)
    while pending.size:
        m = pending.size
        scale = np.full(m, t, dtype=object if t >= _INT64_SAFE else np.int64)
        u = _uniform_below_each(scale, rng)
        keep = bernoulli_exp_many(u, scale, rng)  # U uniform on [0, t) kept w.p. exp(-U/t)
        v = np.zeros(m, dtype=np.int64)
        counting = np.flatnonzero(keep)
        while counting.size:  # V ~ Geometric(1 - exp(-1)): count successes of Bernoulli(exp(-1))
            ones = np.ones(counting.size, np.int64)
            ok = bernoulli_exp_many(ones, ones, rng)
            v[counting[ok]] += 1
            counting = counting[ok]
        x = u.astype(np.int64) + t * v
        negative = (rng.uint64(m) & np.uint64(1)).astype(bool)
        accept = keep & ~(negative & (x == 0))
        out[pending[accept]] = np.where(negative[accept], -x[accept], x[accept])
        pending = pending[~accept]
    return out


def discrete_gaussian_reference(sigma2, n: int, rng: RandomSource) -> np.ndarray:
    """n exact draws of N_Z(0, sigma2) by CKS rejection from the discrete Laplace (t = floor(sigma)+1)."""
    sigma2 = _as_fraction(sigma2)
    n = _count(n)
    a, b = sigma2.numerator, sigma2.denominator
    t = isqrt(a // b) + 1
    out = np.zeros(n, dtype=np.int64)
    pending = np.arange(n)
    while pending.size:
        y = discrete_laplace(t, pending.size, rng)
        # accept with prob exp(-(|y| - sigma2/t)^2 / (2 sigma2)) = exp(-(b t |y| - a)^2 / (2 a b t^2))
        y_max = int(np.abs(y).max())
        den_value = 2 * a * b * t * t
        if (b * t * y_max + a) ** 2 < _INT64_SAFE and den_value < _INT64_SAFE:
            num = (b * t * np.abs(y) - a) ** 2
            den = np.full(len(y), den_value, dtype=np.int64)
        else:
            num = np.array([(b * t * abs(int(v)) - a) ** 2 for v in y], dtype=object)
            den = np.full(len(y), den_value, dtype=object)
        accept = bernoulli_exp_many(num, den, rng)
        out[pending[accept]] = y[accept]
        pending = pending[~accept]
    return out


# ---------------------------------------------------------------------------------------------
# Exact probabilities, for tests


def discrete_gaussian_pmf(sigma2, ks, bits: int = 96) -> np.ndarray:
    """P(X = k) for each k as float64, from rigorous integer bounds at `bits` bits (exact to double)."""
    sigma2 = _as_fraction(sigma2)
    ks = np.asarray(ks, dtype=np.int64)
    if ks.size == 0:
        return np.zeros(0)
    reach = int(np.abs(ks).max()) + 1
    K, lows, highs = _cdf_bounds(sigma2, bits, max(reach, _table_k(sigma2)))
    out = np.empty(len(ks))
    for i, k in enumerate(ks.tolist()):
        # P(X = k) = F(k) - F(k-1): bracketed by [L_k - H_{k-1}, H_k - L_{k-1}]
        lo = lows[k + K] - highs[k - 1 + K]
        hi = highs[k + K] - lows[k - 1 + K]
        out[i] = float(Fraction(lo + hi, 2 << bits)) if hi > 0 else 0.0
    return np.maximum(out, 0.0)


def discrete_gaussian_variance(sigma2, bits: int = 96) -> float:
    """E[X^2] of N_Z(0, sigma2) (slightly below sigma2 for small sigma2), to double precision."""
    sigma2 = _as_fraction(sigma2)
    K = 12 * _sigma_ceil(sigma2) + 12
    ks = np.arange(-K, K + 1)
    p = discrete_gaussian_pmf(sigma2, ks, bits)
    return float(np.sum(p * ks.astype(float) ** 2))


# ---------------------------------------------------------------------------------------------
# The discrete Laplace (two-sided geometric) with a rational scale, for pure eps-DP


def discrete_laplace_scaled(scale, n: int, rng: RandomSource) -> np.ndarray:
    """n exact draws with P(y) proportional to exp(-|y| / scale), rational scale = t/s > 0 (CKS Algorithm 2).

    Exactness: U uniform on {0..t-1} kept with probability exp(-U/t), plus t V with V ~ Geometric(1 - e^-1),
    gives X with P(X = x) proportional to exp(-x/t) on x >= 0; Y = floor(X/s) then has P(Y = y) proportional
    to exp(-y s/t); a fair sign with (-, 0) rejected makes it two-sided. Integer arithmetic only. With noise
    of scale Delta_1 / eps on a query of L1 sensitivity Delta_1 this is eps-DP (the two-sided geometric
    mechanism, Ghosh, Roughgarden, Sundararajan 2009).
    """
    if isinstance(scale, (float, bool, np.floating)):
        raise TypeError(f"scale must be an exact int or Fraction, not {type(scale).__name__} ({scale!r})")
    scale = Fraction(scale)
    if scale <= 0:
        raise ValueError(f"scale must be positive, got {scale}")
    t, s = scale.numerator, scale.denominator
    n = _count(n)
    out = np.zeros(n, dtype=np.int64)
    pending = np.arange(n)
    big = t >= _INT64_SAFE
    while pending.size:
        m = pending.size
        t_arr = np.full(m, t, dtype=object if big else np.int64)
        u = _uniform_below_each(t_arr, rng)
        keep = bernoulli_exp_many(u, t_arr, rng)  # U kept w.p. exp(-U/t)
        v = np.zeros(m, dtype=np.int64)
        counting = np.flatnonzero(keep)
        while counting.size:  # V ~ Geometric(1 - exp(-1)): successes of Bernoulli(exp(-1)) before the first failure
            ones = np.ones(counting.size, np.int64)
            ok = bernoulli_exp_many(ones, ones, rng)
            v[counting[ok]] += 1
            counting = counting[ok]
        if big:
            y = np.array([(int(ui) + t * int(vi)) // s for ui, vi in zip(u, v)], dtype=np.int64)
        else:
            y = (u.astype(np.int64) + t * v) // s
        negative = (rng.uint64(m) & np.uint64(1)).astype(bool)
        accept = keep & ~(negative & (y == 0))
        out[pending[accept]] = np.where(negative[accept], -y[accept], y[accept])
        pending = pending[~accept]
    return out


def discrete_laplace_pmf(scale, ks) -> np.ndarray:
    """P(Y = k) of `discrete_laplace_scaled` as float64 (for tests): (1 - a)/(1 + a) a^|k|, a = exp(-1/scale)."""
    a = float(np.exp(-1 / float(Fraction(scale))))
    ks = np.abs(np.asarray(ks, dtype=np.int64)).astype(float)
    return (1 - a) / (1 + a) * a ** ks
