"""`stability`: the stability-based histogram over (block x detailed cell), noise only where nonzero.

Geography is an attribute: the histogram's bins are (block, cell) pairs of the whole input, and only
bins with a nonzero true count get noise, drawn from the exact discrete Laplace P(z) ~ exp(-eps'|z|)
(`discrete_laplace_scaled`, scale 1/eps' = 2/eps_h). A bin is released, with its noisy count, when
that count is at least the threshold T; nothing else is.

Privacy, change one record (it moves from bin a to bin b). Bins nonzero in both datasets: two counts
move by 1, a factor of at most exp(2 eps') = exp(eps_h). A bin nonzero in only one of them (a held a
single person, or b held none) holds 1 there: it is released with probability
P(1 + Z >= T) = a^(T-1) / (1 + a) <= a^(T-1), a = exp(-eps'), and never from the other dataset.
So the histogram is (eps_h, delta_T)-DP with delta_T = exp(-eps' (T - 1)) (Korolova et al. 2009; Bun,
Nissim, Stemmer 2016; the Harvard CS2080 notes in shared/literature). T is the smallest integer with
delta_T <= delta.

Every bin below T is lost, so the released tract totals fall short by hundreds. `TOTAL_SHARE` of eps
measures every tract's total (per block group where a tract exceeds `MAX_DOMAIN_CELLS` cells, as
flat projects) with discrete Laplace noise of scale 2/eps_t (a changed record moves
two tract totals by one: L1 sensitivity 2, eps_t-DP), and post-processing brings each tract to its
noisy total: the persons missing are spread evenly over the tract's blocks (public) in proportion to
the tract's released cell counts, or, when the release holds more than the total, the released bins
are scaled down; integers by largest remainders. Tract and county totals are then unbiased.

Calibration and certificate: the two steps compose to (eps_t + eps_h, delta)-DP (basic composition),
directly, not zCDP, so the mechanism is calibrated to the (eps, delta) its certificate states and
certified at that pair, with no conversion. The target is the (eps, delta) that the budget rho
certifies for any zCDP release at the run's delta (CKS 2020, Cor. 13: the same eps as TopDown's
certificate at that rho, 17.1436 at 1e-10 for the 2020 budget), exact to its 4 certified decimals.
The budget rho only sets that target: the mechanism spends no rho, so its certificate states none
(`Ledger.direct` holds its (eps, delta); each step, `Ledger.laplace`, states its eps, their sum the
certificate's), and its delta part is the threshold's delta. `GUARANTEE` says so in its releases.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import scipy.sparse as sp

from das.mechanisms.base import NEIGHBOURS, DirectGuarantee, Guarantee, Ledger, Plan, Public, Synthesis, SynthesisInput
from das.mechanisms.domain import assemble, geounits
from das.mechanisms.flat import projection_level
from das.mechanisms.rounding import round_by_block
from das.model.levels import BLOCK
from das.privacy.accounting import EPS_DECIMALS, eps_for_delta, stability_threshold
from das.privacy.sampler import discrete_laplace_scaled

TOTAL_SHARE = Fraction(1, 20)  # of eps, for the tract totals
GUARANTEE = Guarantee(
    "(eps, delta)-DP directly at the certificate's eps and delta, not zCDP: no rho is spent (the budget rho only sets "
    "the eps it is calibrated to, the one rho certifies for a zCDP release at that delta)", NEIGHBOURS,
    "Each step adds discrete Laplace noise of scale 2/eps to counts that a changed record moves by 2 in L1 (eps-DP); "
    "the stability histogram releases only the bins whose noisy count reaches a threshold T, which makes it "
    "(eps, delta)-DP with delta = exp(-(eps/2)(T - 1)) (a bin nonzero in one dataset only); the steps compose by basic "
    "composition (their eps and delta add).")


def target_eps(rho: Fraction, delta: Fraction) -> Fraction:
    """The eps that rho-zCDP certifies at delta (CKS 2020, rounded up to the certificate's decimals), exactly."""
    places = 10 ** EPS_DECIMALS
    return Fraction(round(eps_for_delta(rho, delta) * places), places)


def stability_histogram(truth: sp.csr_matrix, eps_half: Fraction, T: int, rng) -> sp.csr_matrix:
    """Discrete Laplace (scale 1/eps_half) on every nonzero bin; the bins whose noisy count reaches T."""
    coo = truth.tocoo()
    keep = coo.data > 0
    rows, cols, counts = coo.row[keep], coo.col[keep], coo.data[keep].astype(np.int64)
    noisy = counts + discrete_laplace_scaled(1 / eps_half, len(counts), rng)
    released = noisy >= T
    return sp.csr_matrix((noisy[released], (rows[released], cols[released])), shape=truth.shape, dtype=np.int64)


def to_total(released: np.ndarray, total: int) -> np.ndarray:
    """A tract's released (blocks x cells) counts brought to `total`: the persons missing spread evenly over its
    blocks in proportion to its released cell counts, or the released counts scaled down; integers by controlled
    rounding (rounding.round_by_block)."""
    have = int(released.sum())
    n_blocks = released.shape[0]
    if total <= have:
        return round_by_block(released.astype(float), n_blocks, total).reshape(released.shape)
    cells = released.sum(axis=0).astype(float)
    cells = cells / cells.sum() if cells.sum() > 0 else np.full(released.shape[1], 1 / released.shape[1])
    extra = np.outer(np.full(n_blocks, 1 / n_blocks), cells)
    return released + round_by_block(extra, n_blocks, total - have).reshape(released.shape)


def plan(public: Public, ledger: Ledger) -> Plan:
    """The (eps, delta) rho certifies at delta, split: TOTAL_SHARE of eps for the totals at `level`, the rest for the
    stability histogram, its threshold T the smallest that delta allows. Schedule: (eps_total, eps_half, T)."""
    eps, delta, level = target_eps(public.budget, public.delta), public.delta, public.level
    eps_total = eps * TOTAL_SHARE
    eps_half = (eps - eps_total) / 2
    T = stability_threshold(eps_half, delta)
    ledger.direct = DirectGuarantee(eps, delta, (
        f"(eps, delta)-DP directly: {level} totals (eps-DP) and a stability histogram (threshold T = {T}) by basic "
        "composition, calibrated to the (eps, delta) the budget rho certifies for a zCDP release at this "
        "delta (CKS 2020, Cor. 13): no conversion"))
    ledger.laplace(level, "totals", eps_total)
    ledger.laplace(BLOCK, "stability histogram (block x detailed)", 2 * eps_half, threshold=T,
                   delta=delta)
    ledger.delta_parts["stability threshold"] = delta
    return Plan((eps_total, eps_half, T), {"eps": str(eps), "eps_totals": str(eps_total), "threshold": T,
                                           "delta_threshold": str(delta), "level": level})


def run(data: SynthesisInput) -> Synthesis:
    level = projection_level(data.geography, data.schema)
    planned = plan(data.public(level), data.ledger)
    eps_total, eps_half, T = planned.schedule
    truth = data.histograms.tocsr()
    released = stability_histogram(truth, eps_half, T, data.rng)
    parts = []
    for _, block_index in geounits(data.geography, level):
        true_total = int(truth[block_index].sum())
        total = max(0, true_total + int(discrete_laplace_scaled(2 / eps_total, 1, data.rng)[0]))
        parts.append((block_index, to_total(released[block_index].toarray(), total).ravel()))
    return Synthesis(assemble(data.geography.n_blocks, truth.shape[1], parts),
                     {**planned.details, "bins_released": int(released.nnz)})


# What each published detail is derived from (das.mechanisms.base.DETAIL_SOURCES). The number of nonzero
# bins noised is a count of the confidential data: never published.
DETAILS = {"eps": "parameter: the eps rho certifies at delta", "eps_totals": "parameter: the totals' share of eps",
           "threshold": "parameter: T from eps and delta", "delta_threshold": "parameter: delta",
           "level": "parameter: the geounits whose totals are measured",
           "bins_released": "selection: the bins whose noisy count reached the threshold"}
