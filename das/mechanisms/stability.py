"""`stability`: the stability-based histogram over (block x detailed cell), noise only where nonzero.

Geography is an attribute: the histogram's bins are (block, cell) pairs of the whole input, and only
bins with a nonzero true count get noise, drawn from the exact discrete Laplace P(z) ~ exp(-eps'|z|)
(`discrete_laplace_scaled`, scale 1/eps' = 2/eps). A bin is released, with its noisy count, when that
count is at least the threshold T; nothing else is.

Privacy, change one record (it moves from bin a to bin b). Bins nonzero in both datasets: two counts
move by 1, a factor of at most exp(2 eps') = exp(eps). A bin nonzero in only one of them (a held a
single person, or b held none) holds 1 there: it is released with probability
P(1 + Z >= T) = a^(T-1) / (1 + a) <= a^(T-1), a = exp(-eps'), and never from the other dataset.
So the mechanism is (eps, delta_T)-DP with delta_T = exp(-eps' (T - 1)) (Korolova et al. 2009; Bun,
Nissim, Stemmer 2016; the Harvard CS2080 notes in shared/literature). T is the smallest integer with
delta_T <= delta_s.

Accounting: an (eps, delta_s)-DP step is delta_s-approximate (eps^2 / 2)-zCDP (Bun & Steinke 2016,
Sec. 8). das charges rho = eps^2 / 2 with eps the largest multiple of 2^-20 with eps^2 / 2 <= rho
(exact), takes delta_s = delta / 2 out of the run's delta, and converts the zCDP part at the other
half: the certificate's (eps, delta) then holds for the whole release (its `delta_parts`).
"""

from __future__ import annotations

from fractions import Fraction

import mpmath
import numpy as np
import scipy.sparse as sp

from das.mechanisms.base import Synthesis, SynthesisInput, eps_below_sqrt
from das.privacy.sampler import discrete_laplace_scaled


def threshold(eps_half: Fraction, delta: Fraction) -> int:
    """The smallest T with exp(-eps_half (T - 1)) <= delta (rigorous: a margin above the computed ratio)."""
    with mpmath.workdps(60):
        ratio = mpmath.log(mpmath.mpf(delta.denominator) / delta.numerator) * eps_half.denominator / eps_half.numerator
        steps = int(mpmath.ceil(ratio * (1 - mpmath.mpf(10) ** -40)))
        if mpmath.mpf(steps) < ratio * (1 + mpmath.mpf(10) ** -40):  # too close to call: one more step
            steps += 1
    return 1 + max(0, steps)


def run(data: SynthesisInput) -> Synthesis:
    eps = eps_below_sqrt(2 * data.budget)
    if eps <= 0:
        raise ValueError(f"stability: budget rho = {data.budget} is too small for eps >= 2^-20")
    delta_s = data.delta / 2
    eps_half = eps / 2
    T = threshold(eps_half, delta_s)
    data.ledger.charge("block", "stability histogram (block x detailed)", eps * eps / 2, "discrete Laplace",
                       eps=eps, laplace_scale=1 / eps_half, threshold=T, delta=delta_s,
                       cost="(eps, delta)-DP: delta-approximate eps^2/2-zCDP")
    data.ledger.delta_parts["stability threshold"] = delta_s
    truth = data.histograms.tocoo()
    keep = truth.data > 0
    rows, cols, counts = truth.row[keep], truth.col[keep], truth.data[keep].astype(np.int64)
    noisy = counts + discrete_laplace_scaled(1 / eps_half, len(counts), data.rng)
    released = noisy >= T
    histograms = sp.csr_matrix((noisy[released], (rows[released], cols[released])), shape=truth.shape, dtype=np.int64)
    return Synthesis(histograms, {"eps": str(eps), "threshold": T, "delta_threshold": str(delta_s),
                                  "bins_released": int(released.sum())})


# What each published detail is derived from (das.mechanisms.base.DETAIL_SOURCES). The number of nonzero
# bins noised is a count of the confidential data: never published.
DETAILS = {"eps": "parameter: the largest eps with eps^2/2 <= rho", "threshold": "parameter: T from eps and delta",
           "delta_threshold": "parameter: delta / 2", "bins_released": "release: the released bins"}
