"""What an empirical privacy audit can see (das.attack.detection): the detection limit at N trials, the trials
needed to reach a certificate, and a verdict that never says "within the certificate" when no violation could show."""

import math
from fractions import Fraction

import pytest

from das.attack.detection import Detection, detection, detection_limit, event_bound, trials_needed
from das.privacy.accounting import eps_for_delta

ALPHA = 0.05


def by_hand(trials: int, delta: float, alpha: float = ALPHA) -> float:
    """The limit written out: with all n evaluation trials on one side, the one-sided Clopper-Pearson bounds are
    closed forms, P_D' >= (alpha/2)^(1/n) and P_D <= 1 - (alpha/2)^(1/n)."""
    n = trials - trials // 2
    x = (alpha / 2) ** (1 / n)
    return max(0.0, math.log((x - delta) / (1 - x))) if x > delta else 0.0


@pytest.mark.parametrize("trials", [2, 3, 4, 10, 20, 24, 51, 100, 400])
@pytest.mark.parametrize("delta", [0.01, 0.05, 0.1])
def test_the_detection_limit_is_the_clopper_pearson_extreme_computed_by_hand(trials, delta):
    assert detection_limit(trials, delta, ALPHA) == pytest.approx(by_hand(trials, delta), rel=1e-9, abs=1e-12)


def test_the_issue_figures():
    assert detection_limit(20, 0.01, ALPHA) == pytest.approx(0.79259, abs=1e-5)  # the whole-release default
    assert detection_limit(24, 0.01, ALPHA) == pytest.approx(1.00825, abs=1e-5)  # BENCHMARKS.md's release_audit
    assert detection_limit(2, 0.01, ALPHA) == 0.0  # one evaluation trial a side shows nothing
    assert detection_limit(20_000, 0.01, ALPHA) == pytest.approx(7.8948, abs=1e-4)  # the measurement audit's default


def test_the_limit_is_the_largest_bound_any_event_can_show():
    for n in (1, 5, 12, 40):
        extreme = event_bound(0, n, n, n, delta=0.01, alpha=ALPHA)
        assert extreme == detection_limit(2 * n, 0.01, ALPHA)
        assert all(event_bound(k, n, j, n, delta=0.01, alpha=ALPHA) <= extreme
                   for k in range(n + 1) for j in range(n + 1))


def test_the_limit_never_decreases_with_the_trials_and_grows_without_bound():
    limits = [detection_limit(n, 0.01, ALPHA) for n in range(1, 3000)]
    assert all(a <= b for a, b in zip(limits, limits[1:]))
    assert all(a < b for a, b in zip(limits[40::2], limits[42::2]))  # each further evaluation trial raises it
    assert detection_limit(10**9, 0.01, ALPHA) > 18  # any eps is reachable with enough trials


@pytest.mark.parametrize("eps, delta", [(0.5, 0.01), (1.0, 0.01), (2.0, 0.1), (4.3404, 0.01), (3.3736, 0.05),
                                        (2.855, 0.1), (17.14, 1e-10), (0.0, 0.01)])
def test_trials_needed_is_the_smallest_number_whose_limit_reaches_the_target(eps, delta):
    needed = trials_needed(eps, delta, ALPHA)
    assert detection_limit(needed, delta, ALPHA) >= eps
    assert needed == 1 or detection_limit(needed - 1, delta, ALPHA) < eps
    if needed < 5000:  # and a plain scan agrees
        assert needed == next(n for n in range(1, 5001) if detection_limit(n, delta, ALPHA) >= eps)


def test_the_certificate_at_the_audit_budget_needs_575_trials():
    certified = float(eps_for_delta(Fraction(1), Fraction(1, 100)))
    assert certified == pytest.approx(4.3404, abs=1e-4)
    assert trials_needed(certified, 0.01, ALPHA) == 575
    assert trials_needed(math.inf, 0.01, ALPHA) is None  # nothing to reach
    with pytest.raises(ValueError, match="no audit"):
        trials_needed(1e6, 0.01, ALPHA)


def test_the_verdict_is_inconclusive_when_the_limit_is_below_the_certificate():
    blind = detection(20, 4.3404, delta=0.01, alpha=ALPHA)
    assert blind == Detection(20, 0.01, 4.3404, detection_limit(20, 0.01, ALPHA), 575) and not blind.conclusive
    assert blind.verdict([]) == ("inconclusive: at 20 trials the largest bound this audit can show is 0.793 < "
                                 "certificate eps 4.3404 (delta 0.01); 575 trials needed")
    assert "within the certificate" not in blind.verdict([])
    assert blind.verdict(["recoded: deterministic: x"]) == "VIOLATION: recoded: deterministic: x"  # seen, whatever N
    seeing = detection(575, 4.3404, delta=0.01, alpha=ALPHA)
    assert seeing.conclusive and seeing.verdict([]) == "within the certificate"
    assert not detection(574, 4.3404, delta=0.01, alpha=ALPHA).conclusive
    assert detection(2, math.inf, delta=0.01, alpha=ALPHA).verdict([]) == "within the certificate"  # nothing to violate
