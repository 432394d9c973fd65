"""`mwem`: MWEM (Hardt, Ligett, McSherry 2012) per tract, over a workload of marginals.

Geography: one run per tract (parallel composition), on the tract's full domain (block in the tract
x the schema's attributes, das/mechanisms/domain.py); the workload crosses the block with small
marginals and adds tract-level marginals of one to three attributes. The detailed tract histogram is
not a candidate: MWEM selects by error alone, the detailed histogram always has the largest, and
measured whole it puts noise on every one of its cells (2,016 in the DHC schema: an L1 of about four
times a Grand Isle tract's population at rho 1/4), where the one- and two-way marginals that shape it
(cenrace, hhgq x cenrace, ...) carry little noise (Grand Isle, rho 1/4, 3 seeds rounded block by block:
detailed tract MAE 0.151 with it, 0.123 without it and with cenrace and hhgq x cenrace added).

Budget (rho, exact): 1/20 measures the tract total (discrete Gaussian), which fixes the scale n of
the distribution; the rest is split evenly over `ROUNDS` rounds. In a round, a quarter selects a
marginal with the exponential mechanism (score: the L1 error of the current estimate on that
marginal, Delta = 2 under a change of one record, in integer units of 2^-16 after rounding the public
estimate; an added or removed record moves it by at most 1 = Delta/2, so eps^2/8 per tract, see
base.Ledger.exponential), the rest measures every cell of the chosen marginal with discrete Gaussian
noise. After each measurement, multiplicative weights (A(x) <- A(x) exp(q(x)(m - q(A)) / (2n)),
renormalized to n) sweep over all the measurements so far until the fit converges (`mw_fit`: the
authors' "practical variations", repeated while the measurements and the estimate disagree; rounds
to `FIT_TOL`, the final fit to a tenth of it). Two sweeps, as before, left the block totals twenty
times worse than the converged fit. Output: the final estimate, rounded to integers summing to the
noisy total by controlled rounding (rounding.round_by_block).
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from das.mechanisms.base import Ledger, Plan, Public, RoundSchedule, Synthesis, SynthesisInput, selection_eps
from das.mechanisms.domain import Domain, fit_per_geounit, measure, noisy_total
from das.mechanisms.rounding import round_by_block
from das.model.levels import BLOCK, TRACT
from das.privacy.exponential import exponential_mechanism, exponential_rho

LEVEL = TRACT
ROUNDS = 12
FIT_TOL = 1e-3  # a round's fit is converged when sweeps lower the squared residual by at most this share (final fit: a tenth)
MAX_SWEEPS = 2000  # a safety cap on the sweeps of one fit (convergence stops far earlier)
MIN_STEP = 2.0 ** -10  # no smaller step multiplier is tried: the fit is converged
ADD_REMOVE = Fraction(1, 2)  # one record added or removed moves an L1 error by at most 1 = Delta / 2
TOTAL_SHARE = Fraction(1, 20)
SELECT_SHARE = Fraction(1, 4)
SCORE_BITS = 16  # the estimate is rounded to multiples of 2^-16 before scoring (public post-processing)
BLOCK_FACTORS = ((), ("votingage",), ("hispanic",), ("hhgq",))  # crossed with the block
TRACT_QUERIES = ("hhgq", "cenrace", "votingage x hispanic", "hhgq x cenrace", "hispanic x cenrace",
                 "votingage x cenrace", "votingage x hispanic x cenrace")


def workload(domain: Domain) -> list[tuple[str, tuple[str, ...]]]:
    """(name, factors) of every candidate marginal; those with factors unknown to the schema are left out."""
    known = set(domain.schema.names) | {r.name for r in domain.schema.recodes}
    out = []
    for factors in BLOCK_FACTORS:
        if set(factors) <= known:
            out.append((" x ".join((BLOCK, *factors)), (BLOCK, *factors)))
    for name in TRACT_QUERIES:
        factors = tuple(name.split(" x "))
        if set(factors) <= known:
            out.append((name, factors))
    return out


def _sweep(estimate: np.ndarray, measurements: list, total: float, step: float) -> np.ndarray:
    """One multiplicative-weights sweep over every measurement, the step scaled by `step`."""
    for m in measurements:
        gap = m.values - np.bincount(m.index, weights=estimate, minlength=m.size)
        estimate = estimate * np.exp(np.clip(step * gap / (2 * total), -50, 50)[m.index])
        estimate *= total / estimate.sum()
    return estimate


def _residual(estimate: np.ndarray, measurements: list) -> float:
    """sum over measurements of ||m - q(A)||^2."""
    return sum(float(np.square(m.values - np.bincount(m.index, weights=estimate, minlength=m.size)).sum())
               for m in measurements)


def mw_fit(estimate: np.ndarray, measurements: list, total: float, *, step: float = 1.0, tol: float = FIT_TOL,
           max_sweeps: int = MAX_SWEEPS) -> tuple[np.ndarray, float, int]:
    """Multiplicative weights swept over all measurements (das.mechanisms.domain.Marginal) until the fit converges.

    A sweep applies A(x) <- A(x) exp(s q(x)(m - q(A)) / (2n)) for each measurement in turn, renormalized to
    n = `total` (MWEM's update, s = 1, repeated as its authors' practical variant does). The step s starts at
    `step`, doubles after a sweep that lowers the squared residual sum_q ||m - q(A)||^2 (unless the sweep
    before it failed), and a sweep that raises the residual is undone and s halved: the same fit in far fewer
    sweeps than s = 1, which with n in the thousands moves a cell by a fraction of a percent per sweep.
    Converged: two sweeps in a row lowered the residual by at most `tol` of itself, or no step above
    `MIN_STEP` lowers it (`max_sweeps` is a safety cap). Returns the estimate, the last step and the sweeps.
    """
    if total <= 0:
        return np.zeros_like(estimate), step, 0
    current, grow, small = _residual(estimate, measurements), True, 0
    for sweep in range(1, max_sweeps + 1):
        candidate = _sweep(estimate, measurements, total, step)
        fitted = _residual(candidate, measurements)
        if fitted > current:
            step, grow = step / 2, False
            if step < MIN_STEP:
                return estimate, MIN_STEP, sweep
            continue
        estimate, improvement, current = candidate, current - fitted, fitted
        small = small + 1 if improvement <= tol * current else 0
        if small >= 2:
            return estimate, step, sweep
        step, grow = (step * 2 if grow else step), True
    return estimate, step, max_sweeps


@dataclass(frozen=True)
class Schedule(RoundSchedule):
    """MWEM's schedule: the rounds, and the tolerance of each fit."""

    tol: float = FIT_TOL


def synthesize_unit(counts: np.ndarray, domain: Domain, schedule: Schedule, rng) -> np.ndarray:
    """MWEM on one geounit's domain counts, selecting among the domain's `workload`: integer counts over the domain."""
    queries = workload(domain)
    total = noisy_total(counts, schedule.sigma2_total, rng)
    estimate = np.full(domain.size, total / domain.size, dtype=float)
    maps = [domain.marginal(f) for _, f in queries]
    true_answers = [np.bincount(index, weights=counts, minlength=size).astype(np.int64) for index, size in maps]
    scale = 1 << SCORE_BITS
    measurements, step = [], 1.0
    for _ in range(schedule.rounds):
        scores = []
        for (index, size), truth in zip(maps, true_answers):
            approx = np.rint(np.bincount(index, weights=estimate, minlength=size) * scale).astype(np.int64)
            scores.append(int(np.abs(truth * scale - approx).sum()))
        chosen = exponential_mechanism(scores, schedule.eps, 2 * scale, rng)  # Delta = 2, in units of 2^-16
        measurements.append(measure(counts, domain, queries[chosen][1], sigma2=schedule.sigma2, rng=rng))
        estimate, step, _ = mw_fit(estimate, measurements, float(total), step=step, tol=schedule.tol)
    estimate, _, _ = mw_fit(estimate, measurements, float(total), step=step, tol=schedule.tol / 10)
    return round_by_block(estimate, domain.n_blocks, total)


def plan(public: Public, ledger: Ledger) -> Plan:
    """TOTAL_SHARE for the total at `level`, the rest split evenly over the rounds (`public.rounds`, default ROUNDS),
    each a selection (SELECT_SHARE of the round, eps^2/8) and a measurement (the rest of it)."""
    level, rounds = public.level, public.rounds or ROUNDS
    sigma2_total = ledger.gaussian(level, "total", public.budget * TOTAL_SHARE)
    per_round = public.budget * (1 - TOTAL_SHARE) / rounds
    eps = selection_eps(per_round * SELECT_SHARE)
    sigma2s = []
    for r in range(1, rounds + 1):
        ledger.exponential(level, f"round {r} select", eps, Fraction(2), add_remove=ADD_REMOVE)
        sigma2s.append(ledger.gaussian(level, f"round {r} measure", per_round - exponential_rho(eps)))
    return Plan(Schedule(sigma2_total, eps, sigma2s[0], rounds), {
        "level": level, "rounds": rounds, "eps_select": str(eps), "sigma2_measure": str(sigma2s[0]),
        "workload": [name for name, _ in workload(Domain(public.schema, 1))],
        "fit": f"multiplicative weights to convergence (squared residual falling by at most {FIT_TOL:g} of "
               f"itself over two sweeps; the final fit {FIT_TOL / 10:g})"})


def run(data: SynthesisInput, level: str | None = None, rounds: int = ROUNDS) -> Synthesis:
    return fit_per_geounit(data, plan, synthesize_unit, preferred=LEVEL, level=level, rounds=rounds)


DETAILS = {"level": "parameter: the geounits fitted", "rounds": "parameter: rounds of the schedule",
           "eps_select": "parameter: each selection's eps", "sigma2_measure": "parameter: each measurement's variance",
           "workload": "parameter: the schema's marginals", "fit": "parameter: how the estimate is fitted"}
