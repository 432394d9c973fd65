"""What an empirical privacy audit can show: the bound one event gives, and the largest bound any event can give.

Both audits (das.attack.privacy, of the measurement; das.attack.release_audit, of whole releases) choose
an event on the first half of each dataset's trials and bound eps on the second half from below,

    eps >= ln((P_D' - delta) / P_D),

P_D' bounded below and P_D above by one-sided Clopper-Pearson intervals at alpha/2 each (`event_bound`).
The bound is largest when the event holds in every evaluation trial on D' and in none on D: that is the
audit's detection limit at its number of trials (`detection_limit`, event_bound itself at that extreme). An
audit whose limit is below the certificate's eps cannot show a violation of the certificate however the
mechanism behaves, so its verdict is "inconclusive", never "within the certificate"; `trials_needed` is the
fewest trials per dataset whose limit reaches the certificate.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from scipy.stats import beta

MOST_TRIALS = 1 << 50  # trials_needed gives up beyond this (a delta of almost 1 or an eps of hundreds)


def clopper_pearson(k: int, n: int, alpha: float) -> tuple[float, float]:
    """One-sided (1 - alpha) Clopper-Pearson bounds for a binomial proportion: (lower, upper).

    >>> lo, hi = clopper_pearson(50, 100, 0.05); round(lo, 3), round(hi, 3)
    (0.414, 0.586)
    """
    lower = 0.0 if k == 0 else float(beta.ppf(alpha, k, n - k + 1))
    upper = 1.0 if k == n else float(beta.ppf(1 - alpha, k + 1, n - k))
    return lower, upper


def event_bound(in_d: int, trials_d: int, in_d_prime: int, trials_d_prime: int, *, delta: float,
                alpha: float) -> float:
    """The lower bound on eps (0 when none) that an event seen in `in_d` of `trials_d` trials on D and in
    `in_d_prime` of `trials_d_prime` on D' shows with probability >= 1 - alpha: ln((P_D' - delta) / P_D),
    P_D' at its lower and P_D at its upper Clopper-Pearson bound (alpha/2 each)."""
    _, p_high = clopper_pearson(in_d, trials_d, alpha / 2)
    q_low, _ = clopper_pearson(in_d_prime, trials_d_prime, alpha / 2)
    return max(0.0, math.log((q_low - delta) / p_high)) if q_low > delta else 0.0


def evaluation_trials(trials: int) -> int:
    """Of `trials` per dataset, those that evaluate the chosen event: the second half (the first chooses it)."""
    return trials - trials // 2


def detection_limit(trials: int, delta: float, alpha: float) -> float:
    """The largest bound an audit of `trials` trials per dataset can show at all: `event_bound` of an event
    seen in every evaluation trial on D' and in none on D.

    >>> round(detection_limit(20, 0.01, 0.05), 3)  # the whole-release audit's default: 10 evaluation trials
    0.793
    """
    n = evaluation_trials(trials)
    return event_bound(0, n, n, n, delta=delta, alpha=alpha)


def trials_needed(eps: float, delta: float, alpha: float) -> int | None:
    """The fewest trials per dataset whose detection limit reaches `eps`: doubling, then bisection over
    `detection_limit` (which never decreases with the trials); None for an infinite eps (nothing to reach)."""
    if not math.isfinite(eps):
        return None
    if detection_limit(1, delta, alpha) >= eps:
        return 1
    low, high = 1, 2  # detection_limit(low) < eps <= detection_limit(high) once the doubling stops
    while detection_limit(high, delta, alpha) < eps:
        if high > MOST_TRIALS:
            raise ValueError(f"no audit of at most {MOST_TRIALS:,} trials can show eps {eps} at delta {delta}")
        low, high = high, 2 * high
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (low, middle) if detection_limit(middle, delta, alpha) >= eps else (middle, high)
    return high


@dataclass(frozen=True)
class Detection:
    """What an audit of `trials` trials per dataset can see against a certificate's eps at `delta`: the largest
    bound it can show and the fewest trials that would reach the certificate."""

    trials: int
    delta: float
    eps_certified: float
    detection_limit_eps: float
    trials_needed: int | None

    @property
    def conclusive(self) -> bool:
        """Whether a violation of the certificate could show: the limit reaches it (an infinite eps: none exists)."""
        return self.trials_needed is None or self.detection_limit_eps >= self.eps_certified

    def inconclusive(self) -> str:
        """The verdict of an audit that found no violation but could not have shown one."""
        return (f"inconclusive: at {self.trials:,} trials the largest bound this audit can show is "
                f"{self.detection_limit_eps:.3f} < certificate eps {self.eps_certified:.4f} (delta {self.delta:g}); "
                f"{self.trials_needed:,} trials needed")

    def verdict(self, violations: list[str]) -> str:
        """The verdict: the violations found, else inconclusive when none could show, else within the certificate."""
        if violations:
            return "VIOLATION: " + "; ".join(violations)
        return "within the certificate" if self.conclusive else self.inconclusive()


def detection(trials: int, eps_certified: float, *, delta: float, alpha: float) -> Detection:
    """What `trials` trials per dataset can see against `eps_certified` at `delta`, confidence 1 - alpha."""
    return Detection(trials, float(delta), float(eps_certified), detection_limit(trials, float(delta), alpha),
                     trials_needed(float(eps_certified), float(delta), alpha))
