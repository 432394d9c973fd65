"""Exact discrete Gaussian noise, vectorized. No floating point decides any output.

Two exact samplers of N_Z(0, sigma^2) for rational sigma^2:

`discrete_gaussian` (production) samples by inversion. Let F be the discrete Gaussian CDF and U
a uniform real in [0, 1) whose binary digits are the random words drawn. The output is the k
with F(k-1) <= U < F(k), which has probability F(k) - F(k-1) = P(X = k): exactly the discrete
Gaussian. The comparisons are decided without floating point: for a table of k in [-K, K] we
hold integers L_k <= F(k) * 2^64 <= H_k, computed once per sigma^2 from rigorous interval
arithmetic (mpmath's `iv`, outward rounding; the normalising sum's tail is enclosed by a
geometric bound). With u the first 64 bits of U, U lies in [u, u+1) / 2^64, so if j is the
number of k with H_k <= u (all those F(k) <= U) and u + 1 <= L_{-K+j} (so U < F(-K+j)), the
output is certainly -K+j. Otherwise (U within one unit of a threshold, or in a tail beyond the
table: probability about 2^-60) the same element is finished by `_resolve`, which appends 64
more random bits to U at a time and recomputes the enclosures of F at higher precision until the
comparison is decided. Every output is therefore the exact inverse CDF of one uniform real, and
the running time does not depend on the value drawn except in those rare cases.

`discrete_gaussian_reference` is the rejection sampler of Canonne, Kamath and Steinke (2020),
in integer and rational arithmetic only, vectorized over the still-pending draws; it is the
independent check of the fast sampler in the tests.
"""

from __future__ import annotations

import contextlib
import functools
from fractions import Fraction
from math import isqrt

import numpy as np
from mpmath import iv, mpf

from das.privacy.randomness import RandomSource

TABLE_BITS = 64
MAX_TABLE = 4_000_001  # entries; beyond this the reference sampler is used


def _as_fraction(sigma2) -> Fraction:
    if isinstance(sigma2, float) or isinstance(sigma2, bool):
        raise TypeError("sigma^2 must be an exact int or Fraction, not a float")
    value = Fraction(sigma2)
    if value <= 0:
        raise ValueError(f"sigma^2 must be positive, got {value}")
    return value


def _count(n) -> int:
    n = int(n)
    if n < 0:
        raise ValueError(f"number of draws must be >= 0, got {n}")
    return n


# ---------------------------------------------------------------------------------------------
# Rigorous enclosures of the CDF


@contextlib.contextmanager
def _precision(prec: int):
    """Set mpmath's interval precision (bits) for a block, restoring it after."""
    saved = iv.prec
    iv.prec = prec
    try:
        yield
    finally:
        iv.prec = saved


def _bounds(x) -> tuple[Fraction, Fraction]:
    """Exact rational endpoints of an mpmath interval."""
    lo, hi = x._mpi_
    return _mpf_fraction(lo), _mpf_fraction(hi)


def _mpf_fraction(raw) -> Fraction:
    sign, man, exp, _ = raw
    value = Fraction(int(man)) * (Fraction(2) ** exp)
    return -value if sign else value


def _weights_tail(sigma2: Fraction, start: int, prec: int):
    """Enclosure of sum_{j >= start} exp(-j^2 / (2 sigma^2)) for start >= 0."""
    with _precision(prec):
        two_s2 = iv.mpf(2 * sigma2.numerator) / sigma2.denominator
        total = iv.mpf(0)
        j = start
        stop_mag = Fraction(1, 2 ** (prec + 8))
        while True:
            w = iv.exp(-iv.mpf(j * j) / two_s2)
            total += w
            j += 1
            if j * j > 2 * sigma2 and _bounds(w)[1] < stop_mag:
                break
        # sum_{m >= j} e^{-m^2/2s2} <= e^{-j^2/2s2} / (1 - e^{-j/s2})  (since m^2 >= j^2 + 2j(m-j))
        first = iv.exp(-iv.mpf(j * j) / two_s2)
        ratio = iv.exp(-iv.mpf(2 * j) / two_s2)
        tail_hi = _bounds(first / (1 - ratio))[1]
        return total + iv.mpf([0, mpf(tail_hi.numerator) / tail_hi.denominator])


def _cdf_enclosures(sigma2: Fraction, ks: range, prec: int) -> list[tuple[Fraction, Fraction]]:
    """Rigorous [lo, hi] of F(k) = P(X <= k) for consecutive ks."""
    with _precision(prec):
        two_s2 = iv.mpf(2 * sigma2.numerator) / sigma2.denominator
        positive_tail = _weights_tail(sigma2, 1, prec)
        total = 1 + 2 * positive_tail
        k0 = ks[0]
        # P(X <= k0) = sum_{j >= -k0} w_j for k0 < 0; = total - sum_{j >= k0+1} w_j otherwise
        running = _weights_tail(sigma2, -k0, prec) if k0 < 0 else total - _weights_tail(sigma2, k0 + 1, prec)
        out = [_bounds(running / total)]
        for k in ks[1:]:
            running = running + iv.exp(-iv.mpf(k * k) / two_s2)
            out.append(_bounds(running / total))
        return out


@functools.lru_cache(maxsize=64)
def _table(sigma2: Fraction) -> tuple[int, np.ndarray, np.ndarray]:
    """(K, L, H): uint64 L_k <= F(k) 2^64 <= H_k for k = -K..K (H capped at 2^64 - 1 = undecidable)."""
    sigma_ceil = isqrt(int(sigma2) + 1) + 1
    K = 10 * sigma_ceil + 10  # tail mass beyond is below e^{-50}: the resolver handles it exactly
    scale = 2**TABLE_BITS
    lows, highs = [], []
    for lo, hi in _cdf_enclosures(sigma2, range(-K, K + 1), prec=TABLE_BITS + 64):
        lo_int = (lo.numerator * scale) // lo.denominator
        hi_int = -((-hi.numerator * scale) // hi.denominator)
        lows.append(min(lo_int, scale - 1))
        highs.append(min(hi_int, scale - 1))
    return K, np.array(lows, dtype=np.uint64), np.array(highs, dtype=np.uint64)


def _resolve(sigma2: Fraction, u: int, rng: RandomSource) -> int:
    """Finish one draw exactly: U starts with the 64 bits u; extend U until F(k-1) <= U < F(k) is decided."""
    bits = TABLE_BITS
    while True:
        bits += 64
        u = (u << 64) | int(rng.uint64(1)[0])
        u_lo, u_hi = Fraction(u, 2**bits), Fraction(u + 1, 2**bits)
        prec = bits + 32
        # a window of candidates around the float estimate; widened if it does not contain U
        sigma = float(sigma2) ** 0.5
        center = 0
        width = int(12 * sigma) + 12
        while True:
            ks = range(center - width, center + width + 1)
            enclosures = _cdf_enclosures(sigma2, ks, prec)
            if enclosures[0][1] > u_lo:  # U might be left of the window
                width *= 2
                continue
            if enclosures[-1][0] <= u_hi:  # U might be right of the window
                width *= 2
                continue
            break
        # first k whose F(k) might exceed u_lo
        index = next(i for i, (_, hi) in enumerate(enclosures) if hi > u_lo)
        previous_hi = enclosures[index - 1][1] if index > 0 else Fraction(0)
        lo, hi = enclosures[index]
        if previous_hi <= u_lo and u_hi <= lo:
            return ks[index]
        # undecided at this precision: more bits of U


def discrete_gaussian(sigma2, n: int, rng: RandomSource) -> np.ndarray:
    """n exact draws of N_Z(0, sigma2) (int64), by table inversion with exact resolution."""
    sigma2 = _as_fraction(sigma2)
    n = _count(n)
    K = 10 * (isqrt(int(sigma2) + 1) + 1) + 10
    if 2 * K + 1 > MAX_TABLE:
        return discrete_gaussian_reference(sigma2, n, rng)
    K, lows, highs = _table(sigma2)
    u = rng.uint64(n)
    j = np.searchsorted(highs, u, side="right")
    inside = (j > 0) & (j < len(lows))
    decided = inside.copy()
    decided[inside] = u[inside] < lows[j[inside]]
    out = j.astype(np.int64) - K
    for i in np.flatnonzero(~decided):
        out[i] = _resolve(sigma2, int(u[i]), rng)
    return out


# ---------------------------------------------------------------------------------------------
# The reference: Canonne-Kamath-Steinke rejection sampling, integer arithmetic only


def _uniform_below_each(q: np.ndarray, rng: RandomSource) -> np.ndarray:
    """One exact uniform draw from [0, q_i) for each entry (q_i >= 1; int64 or Python-int objects)."""
    out = np.empty(len(q), dtype=object if q.dtype == object else np.int64)
    if q.dtype != object:
        pending = np.arange(len(q))
        while pending.size:
            qs = q[pending].astype(np.uint64)
            words = rng.uint64(pending.size) >> np.uint64(1)  # uniform on [0, 2^63)
            limit = (np.uint64(1 << 63) // qs) * qs
            ok = words < limit
            out[pending[ok]] = (words[ok] % qs[ok]).astype(np.int64)
            pending = pending[~ok]
        return out
    for i, qi in enumerate(q):
        out[i] = rng.uniform_below_big(int(qi))
    return out


def _bernoulli_fraction(num: np.ndarray, den: np.ndarray, rng: RandomSource) -> np.ndarray:
    """Bernoulli(num_i / den_i) for 0 <= num_i <= den_i, exactly."""
    if len(num) == 0:
        return np.zeros(0, dtype=bool)
    return np.asarray(_uniform_below_each(den, rng) < num, dtype=bool)


def _to_int_arrays(num, den):
    """int64 arrays when every value (and den * 64) fits comfortably, else object arrays."""
    num = np.asarray(num, dtype=object)
    den = np.asarray(den, dtype=object)
    limit = 1 << 56
    if all(abs(int(x)) < limit for x in num.ravel()) and all(int(x) < limit for x in den.ravel()):
        return num.astype(np.int64), den.astype(np.int64)
    return num, den


def _bernoulli_exp_le1(num: np.ndarray, den: np.ndarray, rng: RandomSource) -> np.ndarray:
    """Bernoulli(exp(-num/den)) for 0 <= num/den <= 1: draw Bernoulli(gamma/k), k = 1, 2, ...
    until one fails; the result is 1 iff the number of successes before it (k - 1) is even."""
    n = len(num)
    result = np.zeros(n, dtype=bool)
    k = np.ones(n, dtype=num.dtype if num.dtype != object else object)
    pending = np.arange(n)
    while pending.size:
        success = _bernoulli_fraction(num[pending], den[pending] * k[pending], rng)
        done = ~success
        result[pending[done]] = (k[pending[done]] % 2) == 1
        k[pending[success]] += 1
        pending = pending[success]
    return result


def bernoulli_exp_many(num, den, rng: RandomSource) -> np.ndarray:
    """Bernoulli(exp(-num_i/den_i)) for nonnegative rationals, exactly (vectorized)."""
    num, den = _to_int_arrays(num, den)
    n = len(num)
    result = np.ones(n, dtype=bool)
    whole = num // den
    frac = num - whole * den
    # exp(-gamma) = exp(-1)^floor(gamma) * exp(-frac(gamma)): all factors must succeed
    pending = np.arange(n)
    remaining = whole.copy()
    while True:
        active = pending[remaining[pending] > 0]
        if active.size == 0:
            break
        ones = np.ones(active.size, dtype=num.dtype)
        ok = _bernoulli_exp_le1(ones, ones, rng)
        result[active[~ok]] = False
        remaining[active[~ok]] = 0
        remaining[active[ok]] -= 1
    alive = np.flatnonzero(result)
    if alive.size:
        result[alive] = _bernoulli_exp_le1(frac[alive], den[alive], rng)
    return result


def bernoulli_exp(gamma, n: int, rng: RandomSource) -> np.ndarray:
    """n exact draws of Bernoulli(exp(-gamma)) for rational gamma >= 0."""
    gamma = Fraction(gamma)
    if gamma < 0:
        raise ValueError("gamma must be >= 0")
    n = _count(n)
    return bernoulli_exp_many(np.full(n, gamma.numerator, dtype=object),
                              np.full(n, gamma.denominator, dtype=object), rng)


def discrete_laplace(t: int, n: int, rng: RandomSource) -> np.ndarray:
    """n exact draws of the discrete Laplace with scale t (P(x) proportional to exp(-|x|/t))."""
    t = int(t)
    if t < 1:
        raise ValueError("scale t must be a positive integer")
    n = _count(n)
    out = np.zeros(n, dtype=np.int64)
    pending = np.arange(n)
    while pending.size:
        m = pending.size
        u = _uniform_below_each(np.full(m, t, dtype=np.int64), rng)
        keep = bernoulli_exp_many(u, np.full(m, t, dtype=np.int64), rng)
        v = np.zeros(m, dtype=np.int64)
        counting = np.flatnonzero(keep)
        while counting.size:  # V ~ Geometric: count successes of Bernoulli(exp(-1))
            ok = bernoulli_exp_many(np.ones(counting.size, np.int64), np.ones(counting.size, np.int64), rng)
            v[counting[ok]] += 1
            counting = counting[ok]
        x = u + t * v
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
        num = [(b * t * abs(int(v)) - a) ** 2 for v in y]
        den = [2 * a * b * t * t] * len(y)
        accept = bernoulli_exp_many(num, den, rng)
        out[pending[accept]] = y[accept]
        pending = pending[~accept]
    return out


def discrete_gaussian_pmf(sigma2, ks, prec: int = 96) -> np.ndarray:
    """P(X = k) for each k (float64 from rigorous high-precision enclosures), for tests."""
    sigma2 = _as_fraction(sigma2)
    ks = [int(k) for k in ks]
    out = []
    with _precision(prec):
        total = 1 + 2 * _weights_tail(sigma2, 1, prec)
        two_s2 = iv.mpf(2 * sigma2.numerator) / sigma2.denominator
        for k in ks:
            lo, hi = _bounds(iv.exp(-iv.mpf(k * k) / two_s2) / total)
            out.append(float((lo + hi) / 2))
    return np.array(out)


def discrete_gaussian_variance(sigma2, prec: int = 96) -> float:
    """Exact-to-double variance of N_Z(0, sigma2) (slightly below sigma2 for small sigma2)."""
    sigma2 = _as_fraction(sigma2)
    K = 12 * (isqrt(int(sigma2) + 1) + 1) + 12
    ks = np.arange(-K, K + 1)
    p = discrete_gaussian_pmf(sigma2, ks, prec)
    return float(np.sum(p * ks.astype(float) ** 2))
