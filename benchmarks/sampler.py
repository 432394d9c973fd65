"""Exact discrete Gaussian throughput: das (production randomness) vs OpenDP vs pure Python."""

from __future__ import annotations

import secrets
import time
from fractions import Fraction
from math import isqrt

from benchmarks._harness import Bench

N = 10_000_000


def _ours(sigma2: Fraction, seeded: bool = False) -> dict:
    from das.privacy.randomness import SeededRandomSource, SystemRandomSource
    from das.privacy.sampler import discrete_gaussian

    rng = SeededRandomSource(1) if seeded else SystemRandomSource()
    discrete_gaussian(sigma2, N, rng)  # warm-up: the table (cached per sigma^2) and memory pages
    t0 = time.perf_counter()
    discrete_gaussian(sigma2, N, rng)
    return {"samples_per_s": N / (time.perf_counter() - t0)}


def _reference(sigma2: Fraction) -> dict:
    from das.privacy.randomness import SystemRandomSource
    from das.privacy.sampler import discrete_gaussian_reference

    rng = SystemRandomSource()
    n = 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < 2.0:
        discrete_gaussian_reference(sigma2, 200_000, rng)
        n += 200_000
    return {"samples_per_s": n / (time.perf_counter() - t0)}


def _opendp(sigma2: Fraction) -> dict:
    """OpenDP's exact integer Gaussian (make_gaussian on a vector of ints: sampler of CKS 2020 in Rust)."""
    try:
        import opendp.prelude as dp
    except ImportError as exc:
        raise RuntimeError("opendp is not installed: `pip install -e .[bench]` to measure this reference") from exc

    dp.enable_features("contrib")
    # OpenDP takes the scale sigma as a float; sqrt(19.36) = 4.4 and sqrt(7921) = 89 (4.4 is rounded to a double)
    sigma = isqrt(sigma2.numerator) / isqrt(sigma2.denominator)
    m = dp.m.make_gaussian(dp.vector_domain(dp.atom_domain(T=int)), dp.l2_distance(T=int), scale=sigma)
    batch = [0] * 50_000
    n = 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < 2.0:
        m(batch)
        n += len(batch)
    return {"samples_per_s": n / (time.perf_counter() - t0)}


# One draw at a time, in pure Python integers and Fractions (CKS 2020, Algorithms 1-3).
def _bern_exp(gamma: Fraction) -> bool:
    while gamma > 1:
        if not _bern_exp(Fraction(1)):
            return False
        gamma -= 1
    k = 1
    while secrets.randbelow(gamma.denominator * k) < gamma.numerator:
        k += 1
    return k % 2 == 1


def _laplace(t: int) -> int:
    while True:
        u = secrets.randbelow(t)
        if not _bern_exp(Fraction(u, t)):
            continue
        v = 0
        while _bern_exp(Fraction(1)):
            v += 1
        x = u + t * v
        negative = secrets.randbelow(2) == 1
        if negative and x == 0:
            continue
        return -x if negative else x


def _gauss(sigma2: Fraction) -> int:
    t = isqrt(sigma2.numerator // sigma2.denominator) + 1
    while True:
        y = _laplace(t)
        if _bern_exp((abs(y) - sigma2 / t) ** 2 / (2 * sigma2)):
            return y


def _pure_python(sigma2: Fraction) -> dict:
    n = 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < 2.0:
        _gauss(sigma2)
        n += 1
    return {"samples_per_s": n / (time.perf_counter() - t0)}


S1, S2 = Fraction(484, 25), Fraction(7921)


def ours_19_36():
    return _ours(S1)


def ours_7921():
    return _ours(S2)


def seeded_19_36():
    return _ours(S1, seeded=True)


def reference_19_36():
    return _reference(S1)


def reference_7921():
    return _reference(S2)


def opendp_19_36():
    return _opendp(S1)


def opendp_7921():
    return _opendp(S2)


def python_19_36():
    return _pure_python(S1)


def python_7921():
    return _pure_python(S2)


BENCHES = [
    Bench("sampler.dg_19.36", "exact discrete Gaussian, sigma^2 = 19.36, 10^7 draws, OS CSPRNG "
          "(das: table inversion; one core)", ours_19_36, key="samples_per_s", higher_is_better=True,
          references={"OpenDP make_gaussian (int vector)": opendp_19_36,
                      "das CKS rejection reference (vectorized)": reference_19_36,
                      "pure-Python one-at-a-time CKS": python_19_36,
                      "das, seeded PCG64 source": seeded_19_36},
          target=">= 100x OpenDP"),
    Bench("sampler.dg_7921", "exact discrete Gaussian, sigma^2 = 7921, 10^7 draws, OS CSPRNG",
          ours_7921, key="samples_per_s", higher_is_better=True,
          references={"OpenDP make_gaussian (int vector)": opendp_7921,
                      "das CKS rejection reference (vectorized)": reference_7921,
                      "pure-Python one-at-a-time CKS": python_7921},
          target=">= 100x OpenDP"),
]
