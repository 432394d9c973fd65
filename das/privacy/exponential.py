"""The exponential mechanism, sampled exactly, and a DP median built on it.

`exponential_mechanism(utilities, eps, sensitivity, rng)` returns index i with probability
proportional to exp(eps u_i / (2 Delta)) (McSherry & Talwar 2007), for rational utilities, eps and
Delta. Exactness: with gamma_i = eps (u_max - u_i) / (2 Delta) >= 0 (rational), the weights are
exp(-gamma_i) <= 1, the best being 1. Rejection: propose i uniformly, accept with an exact
Bernoulli(exp(-gamma_i)) (Canonne, Kamath, Steinke 2020, Algorithm 1: `bernoulli_exp_many`);
the first accepted proposal has P(i) = exp(-gamma_i) / sum_j exp(-gamma_j). Proposals are made in
batches of m and the first accepted in batch order is taken, which is the same sequence of
independent trials. Acceptance per trial is at least 1/m, so a batch of m accepts with probability
at least 1 - (1 - 1/m)^m > 0.63. No floating point decides anything.

Privacy: with |u(D, i) - u(D', i)| <= Delta for neighbours, the mechanism is eps-DP and
eps-bounded-range (Durfee & Rogers 2019), hence (eps^2 / 8)-zCDP (Cesar & Rogers 2021, Lemma 3.2,
tighter than the eps^2 / 2 of any eps-DP mechanism, Bun & Steinke 2016 Prop. 1.4). `exponential_rho`
gives that cost; das charges it exactly.

The running time depends on the utilities (the number of batches drawn), so the timing of a
draw can reveal something about the data: the same caveat as the rejection samplers of CKS.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from das.privacy.randomness import RandomSource
from das.privacy.sampler import _INT64_SAFE, _to_int_arrays, bernoulli_exp_many


def _exact(value, name: str) -> Fraction:
    if isinstance(value, (float, bool, np.floating, np.bool_)):
        raise TypeError(f"{name} must be an exact int or Fraction, not {type(value).__name__} ({value!r})")
    try:
        return Fraction(value)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{name} must be an exact int or Fraction, got {value!r}") from exc


def _gammas(utilities, eps, sensitivity) -> tuple[np.ndarray | list[int], int]:
    """(numerators, common denominator) of gamma_i = eps (u_max - u_i) / (2 Delta), all exact."""
    eps, sensitivity = _exact(eps, "eps"), _exact(sensitivity, "sensitivity")
    if eps <= 0 or sensitivity <= 0:
        raise ValueError(f"eps and sensitivity must be positive, got {eps} and {sensitivity}")
    integers = isinstance(utilities, np.ndarray) and utilities.dtype.kind in "iu"
    if integers and utilities.size == 0 or not integers and len(utilities) == 0:
        raise ValueError("the exponential mechanism needs at least one candidate")
    scale = eps / (2 * sensitivity)
    if integers:  # gamma_i = p d_i / q, d_i = best - u_i: in lowest common terms q / g, g = gcd(q, every d_i)
        return _integer_gammas(utilities, scale)
    u = [_exact(x, "a utility") for x in utilities]
    best = max(u)
    gammas = [scale * (best - x) for x in u]
    den = math.lcm(*(g.denominator for g in gammas))
    return [int(g * den) for g in gammas], den


def _integer_gammas(utilities: np.ndarray, scale: Fraction) -> tuple[np.ndarray | list[int], int]:
    """`_gammas` of integer utilities, the same numbers: an int64 array while they fit (numpy arithmetic), else
    Python ints."""
    p, q = scale.numerator, scale.denominator
    if utilities.dtype.kind == "i" or int(utilities.max()) < 1 << 62:
        u = utilities.astype(np.int64)
        best, low = int(u.max()), int(u.min())
        if best - low < 1 << 62:
            diffs = best - u
            g = math.gcd(q, int(np.gcd.reduce(diffs)))
            if p < _INT64_SAFE and p * ((best - low) // g) < _INT64_SAFE:
                return (diffs // g) * p, q // g
    diffs = [int(utilities.max()) - x for x in utilities.tolist()]
    g = math.gcd(q, math.gcd(*diffs))
    return [p * d // g for d in diffs], q // g


def exponential_mechanism(utilities, eps, sensitivity, rng: RandomSource) -> int:
    """Index i drawn exactly with probability proportional to exp(eps u_i / (2 sensitivity)).

    Utilities are ints or Fractions (an int64 array is fine), eps and sensitivity exact and positive.
    """
    nums, den = _gammas(utilities, eps, sensitivity)
    m = len(nums)
    # int64 once for all batches when every value fits (the sampler's own test), else Python ints
    num_arr, den_arr = _to_int_arrays(np.asarray(nums, dtype=np.int64 if isinstance(nums, np.ndarray) else object),
                                      np.full(m, den, dtype=np.int64 if den < _INT64_SAFE else object))
    while True:
        proposals = rng.uniform_below(m, m)
        accepted = bernoulli_exp_many(num_arr[proposals], den_arr, rng)
        hits = np.flatnonzero(accepted)
        if hits.size:
            return int(proposals[hits[0]])


def exponential_probabilities(utilities, eps, sensitivity) -> np.ndarray:
    """The exact selection probabilities as float64 (for tests and documentation)."""
    nums, den = _gammas(utilities, eps, sensitivity)
    logs = -np.array([float(Fraction(int(n), den)) for n in nums])
    w = np.exp(logs - logs.max())
    return w / w.sum()


def exponential_rho(eps) -> Fraction:
    """zCDP cost of one eps exponential-mechanism selection: eps^2 / 8 (bounded range; Cesar & Rogers 2021)."""
    eps = _exact(eps, "eps")
    return eps * eps / 8


def median_utilities(counts: np.ndarray) -> np.ndarray:
    """u(m) = min(#{x <= m}, #{x >= m}) for each candidate m, from counts per candidate value.

    Changing one record moves each of the two counts by at most 1, so Delta = 1 (also for adding or
    removing one); u is largest at a median.

    >>> median_utilities(np.array([1, 0, 2, 1])).tolist()
    [1, 1, 3, 1]
    """
    counts = np.asarray(counts, dtype=np.int64)
    at_most = np.cumsum(counts)
    at_least = np.cumsum(counts[::-1])[::-1]
    return np.minimum(at_most, at_least)


def dp_median(counts: np.ndarray, eps, rng: RandomSource) -> int:
    """An eps-DP median: index of a candidate value, given the counts of the data at each candidate.

    The candidate range (for example ages 0..115) is public; utility `median_utilities`, Delta = 1.
    """
    return exponential_mechanism(median_utilities(counts), eps, 1, rng)
