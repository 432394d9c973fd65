"""zCDP accounting: exact allocation, the accountant's refusals, (eps, delta) conversions, the certificate."""

import json
import math
from fractions import Fraction

import mpmath
import pytest

from das.core.errors import BudgetError, SpecError
from das.privacy.accounting import (
    CONVENTION,
    PrivacyAccountant,
    allocate,
    certificate,
    delta_for_eps,
    eps_for_delta,
    eps_loose,
    render_certificate,
)
from das.privacy.certificate import Certificate, CertificateError
from das.privacy.strategy import LevelShare, Strategy, load_strategy

PROD_RHO = Fraction(293764, 114921)
DELTA = Fraction(1, 10**10)
FIVE = ("nation", "state", "county", "tract", "block")


# ---------------------------------------------------------------------------------------------
# rho -> (eps, delta)


def test_2020_production_budget_certifies_eps_17_14_and_loose_17_90():
    assert eps_for_delta(PROD_RHO, DELTA) == 17.1436  # 17.14355074... rounded up
    assert round(eps_for_delta(PROD_RHO, DELTA), 2) == 17.14
    assert eps_loose(PROD_RHO, DELTA) == 17.9002  # 17.90018454... rounded up
    assert round(eps_loose(PROD_RHO, DELTA), 2) == 17.90
    assert eps_for_delta(PROD_RHO, 1e-10) == eps_for_delta(PROD_RHO, "1e-10") == 17.1436


def brute_force_eps(rho: Fraction, delta: Fraction) -> mpmath.mpf:
    """Independent check: minimise eps(alpha) on a fine grid (any alpha is a valid bound)."""
    with mpmath.workdps(40):
        r, log_inv = mpmath.mpf(rho.numerator) / rho.denominator, -mpmath.log(mpmath.mpf(delta.numerator) / delta.denominator)
        best = mpmath.inf
        for i in range(1, 20000):
            a = 1 + mpmath.mpf(i) / 1000
            best = min(best, a * r + (log_inv - mpmath.log(a - 1) + a * mpmath.log(1 - 1 / a)) / (a - 1))
        return best


@pytest.mark.parametrize("rho,delta", [(PROD_RHO, DELTA), (Fraction(1, 10), Fraction(1, 10**6)),
                                       (Fraction(11417641, 152349649), DELTA), (Fraction(2), Fraction(1, 1000))])
def test_eps_is_the_minimum_over_alpha_rounded_up(rho, delta):
    eps = eps_for_delta(rho, delta)
    exact = eps_for_delta(rho, delta, decimals=12)
    assert exact <= brute_force_eps(rho, delta) + 1e-11  # at least as good as a fine grid over alpha
    assert exact <= eps < exact + 1e-4  # rounding goes up, by less than one step


def test_conversions_are_inverse_consistent():
    for rho in (PROD_RHO, Fraction(1, 10), Fraction(5)):
        for delta in (Fraction(1, 10**10), Fraction(1, 10**5)):
            eps = eps_for_delta(rho, delta)
            # eps rounded up => delta at that eps is at most the target (delta itself rounded up to 4 digits)
            assert delta_for_eps(rho, eps) <= float(delta) * 1.001
            # one rounding step lower, delta exceeds the target
            assert delta_for_eps(rho, eps - 1e-4) > float(delta)
    # exact (unrounded) round trip at 12 decimals
    eps = eps_for_delta(PROD_RHO, DELTA, decimals=12)
    assert abs(delta_for_eps(PROD_RHO, eps, digits=10) / 1e-10 - 1) < 1e-8


def test_conversions_are_monotone():
    deltas = [delta_for_eps(PROD_RHO, e) for e in (8, 10, 12, 14, 16, 18, 20)]
    assert deltas == sorted(deltas, reverse=True) and len(set(deltas)) == len(deltas)
    epss = [eps_for_delta(PROD_RHO, Fraction(1, 10**k)) for k in (3, 5, 7, 9, 11, 13)]
    assert epss == sorted(epss) and len(set(epss)) == len(epss)
    by_rho = [eps_for_delta(Fraction(r, 4), Fraction(1, 10**6)) for r in (1, 2, 4, 8, 16)]
    assert by_rho == sorted(by_rho)
    for r in (Fraction(1, 100), Fraction(1), PROD_RHO, Fraction(20)):
        assert eps_for_delta(r, DELTA) < eps_loose(r, DELTA)  # the tight bound is tighter


def test_rounding_direction_is_conservative():
    # the exact value 17.14355074... must be reported as 17.1436, never 17.1435
    assert eps_for_delta(PROD_RHO, DELTA, decimals=4) == 17.1436
    assert eps_for_delta(PROD_RHO, DELTA, decimals=2) == 17.15
    assert eps_for_delta(PROD_RHO, DELTA, decimals=0) == 18
    exact = delta_for_eps(PROD_RHO, "17.1436", digits=15)
    assert delta_for_eps(PROD_RHO, "17.1436") >= exact
    assert delta_for_eps(PROD_RHO, "17.1436") == 9.999e-11
    assert eps_loose(PROD_RHO, DELTA, decimals=1) == 18.0


def test_conversion_arguments_are_checked():
    with pytest.raises(ValueError, match="delta must be in"):
        eps_for_delta(PROD_RHO, 1)
    with pytest.raises(ValueError, match="rho must be positive"):
        eps_for_delta(Fraction(0), DELTA)
    with pytest.raises(ValueError, match="eps must be >= 0"):
        delta_for_eps(PROD_RHO, -1)
    assert delta_for_eps(PROD_RHO, 0) <= 1.0


# ---------------------------------------------------------------------------------------------
# allocation and the accountant


def strategy(levels, rho=Fraction(1)) -> Strategy:
    return Strategy("t", "pl94_persons", "", rho, DELTA,
                    tuple(LevelShare(name, Fraction(s), tuple((q, Fraction(v)) for q, v in qs)) for name, s, qs in levels),
                    "t.toml")


def test_allocation_is_exact():
    s = strategy([("nation", "1/3", [("total", "1/7"), ("detailed", "6/7")]), ("state", "2/3", [("total", "1")])],
                 rho=Fraction(293764, 114921))
    a = allocate(s)
    assert a.get("nation", "total").rho == Fraction(293764, 114921) / 21
    assert a.get("nation", "total").sigma2 == Fraction(21 * 114921, 293764)
    assert a.total() == s.rho
    assert allocate(s, Fraction(5)).total() == 5 and allocate(s, 5).total() == 5


@pytest.mark.parametrize("levels,message", [
    ([("nation", "1/2", [("total", "1")]), ("state", "1/2", [("total", "4096/4097")])],
     "query shares of level state sum to 4096/4097, not exactly 1"),
    ([("nation", "1/2", [("total", "1")])], "level rho_shares sum to 1/2, not exactly 1"),
    ([("nation", "1", [("total", "1"), ("detailed", "0")])], "must be a positive Fraction"),
    ([("nation", "1", [("total", "3/2"), ("detailed", "-1/2")])], "must be a positive Fraction"),
    ([("nation", "1", [])], "measures no query"),
])
def test_allocate_refuses_inexact_or_nonpositive_shares(levels, message):
    with pytest.raises(BudgetError, match=message):
        allocate(strategy(levels))


def test_allocate_refuses_a_bad_budget():
    s = strategy([("nation", "1", [("total", "1")])])
    for bad in (Fraction(0), Fraction(-1), 0.5, "1"):
        with pytest.raises(BudgetError, match="rho must be a positive Fraction"):
            allocate(s, bad)
    with pytest.raises(BudgetError, match="no budget"):
        allocate(strategy([("nation", "1", [("total", "1")])], rho=None))
    assert issubclass(BudgetError, SpecError)  # callers catching spec errors see budget errors too


def test_accountant_refuses_overspending_and_double_charges():
    acct = PrivacyAccountant(Fraction(1))
    acct.charge("state", "total", Fraction(1, 2))
    with pytest.raises(BudgetError, match="already measured"):
        acct.charge("state", "total", Fraction(1, 4))
    with pytest.raises(BudgetError, match="over the budget 1"):
        acct.charge("county", "total", Fraction(1, 2) + Fraction(1, 4097))
    with pytest.raises(BudgetError, match="exact Fraction"):
        acct.charge("county", "total", 0.5)
    with pytest.raises(BudgetError, match="positive"):
        acct.charge("county", "total", Fraction(0))
    assert acct.spent == Fraction(1, 2)  # refused charges cost nothing
    acct.charge("county", "total", Fraction(1, 2))
    assert acct.spent == 1 and acct.remaining == 0
    with pytest.raises(BudgetError, match="over the budget"):
        acct.charge("tract", "total", Fraction(1, 10**30))
    with pytest.raises(BudgetError, match="positive Fraction"):
        PrivacyAccountant(Fraction(0))


def test_accountant_with_a_plan_accepts_exactly_the_plan():
    s = load_strategy("pl94_five_level")
    plan = allocate(s)
    acct = PrivacyAccountant.for_allocation(plan)
    first = plan.items[0]
    with pytest.raises(BudgetError, match="the plan allocates"):
        acct.charge(first.level, first.query, first.rho / 2)
    with pytest.raises(BudgetError, match="not in the plan"):
        acct.charge("nation", "total", Fraction(1, 10**6))  # production measures no nation total
    for item in plan.items:
        acct.charge(item.level, item.query, 1 / item.sigma2)  # as the measurement step charges
    assert acct.spent == s.rho and acct.remaining == 0
    with pytest.raises(BudgetError, match="plan allocates rho"):
        PrivacyAccountant(Fraction(1), plan=plan)


# ---------------------------------------------------------------------------------------------
# the certificate


def test_certificate_contents_and_exactness():
    s = load_strategy("pl94_production_2020")
    cert = certificate(s, allocate(s, s.rho), DELTA, s.level_names, schema_name="pl94_persons", randomness_private=True)
    assert cert.rho == PROD_RHO and cert.eps == 17.1436 and cert.eps_loose_bound == 17.9002
    assert cert.delta == Fraction(1, 10**10) and cert.private is True and cert.warning is None
    assert cert.convention == CONVENTION and "1/sigma^2" in CONVENTION and "sensitivity 2" in CONVENTION
    assert "keep the invariants" in CONVENTION and "not covered" in CONVENTION  # which neighbours it covers
    assert sum(lv.rho for lv in cert.by_level) == PROD_RHO
    assert sum(q.rho for lv in cert.by_level for q in lv.queries) == PROD_RHO
    block = cert.level("block")
    assert block.rho_share == Fraction(165, 4099)
    detailed = block.queries[-1]
    assert detailed.query == "detailed" and detailed.share == Fraction(3945, 4097)
    assert detailed.sigma2 == 1 / (PROD_RHO * Fraction(165, 4099) * Fraction(3945, 4097)) == 1 / detailed.rho
    # the JSON form: exact values as text, decimals beside them for people
    data = cert.to_dict()
    assert json.loads(json.dumps(data)) == data
    assert data["rho"] == "293764/114921" and data["delta"] == "1e-10" and "warning" not in data
    shown = data["by_level"][-1]["queries"][-1]
    assert Fraction(shown["sigma2"]) == detailed.sigma2 and math.isclose(shown["sigma"] ** 2, shown["sigma2_decimal"])


def test_certificate_round_trips_through_its_json_form_exactly():
    s = load_strategy("pl94_production_2020")
    cert = certificate(s, allocate(s, s.rho), DELTA, s.level_names, schema_name="pl94_persons", randomness_private=False)
    again = Certificate.from_dict(json.loads(json.dumps(cert.to_dict())))
    assert again == cert and again.to_dict() == cert.to_dict()


@pytest.mark.parametrize(("field", "value", "message"), [
    ("rho", 0.5, "rho: expected an exact value"), ("rho", "1/0", "rho: expected an exact value"),
    ("private", "yes", "private: expected true or false"), ("by_level", {}, "by_level: expected a list"),
    ("levels", None, "levels: expected a list"), ("eps", "17", "eps: expected a number"),
])
def test_a_certificate_with_a_bad_field_is_refused_naming_it(field, value, message):
    s = load_strategy("pl94_five_level")
    data = certificate(s, allocate(s), None, FIVE, schema_name="pl94_persons", randomness_private=True).to_dict()
    data[field] = value
    with pytest.raises(CertificateError, match=message):
        Certificate.from_dict(data)
    del data[field]
    with pytest.raises(CertificateError, match=f"field '{field}' is missing"):
        Certificate.from_dict(data)


def test_seeded_certificate_says_not_private_and_renders():
    s = load_strategy("pl94_five_level")
    cert = certificate(s, allocate(s), None, FIVE, schema_name="pl94_persons", randomness_private=False)
    assert cert.rho == PROD_RHO and cert.private is False and "NOT private" in cert.warning
    assert cert.randomness.startswith("seeded")
    text = render_certificate(cert)
    for needle in ("293764/114921", "17.1436", "17.9002", "WARNING", "NOT private", "votingage x hispanic x cenrace",
                   "block", "detailed"):
        assert needle in text
    assert "WARNING" not in render_certificate(certificate(s, allocate(s), None, FIVE, schema_name="pl94_persons",
                                                           randomness_private=True))


def test_certificate_refuses_other_levels_or_schema():
    s = load_strategy("pl94_five_level")
    with pytest.raises(SpecError, match="not"):
        certificate(s, allocate(s), None, FIVE[:-1], schema_name="pl94_persons", randomness_private=True)
    with pytest.raises(SpecError, match="is for schema"):
        certificate(s, allocate(s), None, FIVE, schema_name="dhc_persons", randomness_private=True)
    other = load_strategy("h1_units")
    with pytest.raises(SpecError, match="the allocation measures"):
        certificate(s, allocate(other), None, FIVE, schema_name="pl94_persons", randomness_private=True)


# ---------------------------------------------------------------------------------------------
# A budget by what people mean: eps at delta -> the largest exact rho within it


@pytest.mark.parametrize("eps, delta", [("17.1436", "1e-10"), ("1", "1e-10"), ("0.01", "1e-10"), ("100", "1e-6"),
                                        ("1", "1/2"), ("3.5", "1/100000")])
def test_rho_for_eps_is_the_largest_grid_rho_whose_certificate_is_within(eps, delta):
    from das.privacy.accounting import RHO_DIGITS, rho_for_eps

    rho = rho_for_eps(eps, delta)
    assert isinstance(rho, Fraction) and rho > 0
    assert Fraction(repr(eps_for_delta(rho, delta))) <= Fraction(eps)  # its certificate is within (eps, delta)
    step = Fraction(10) ** (math.floor(math.log10(rho)) - RHO_DIGITS + 1)
    assert Fraction(repr(eps_for_delta(rho + step, delta))) > Fraction(eps)  # one grid step more is not
    assert delta_for_eps(rho, eps) <= float(Fraction(delta)) * (1 + 1e-3)  # and the other direction agrees


def test_rho_for_eps_refuses_what_is_not_a_budget():
    from das.privacy.accounting import rho_for_eps

    with pytest.raises(BudgetError, match="eps must be positive"):
        rho_for_eps("0", "1e-10")
    with pytest.raises(BudgetError, match="delta must be strictly between 0 and 1"):
        rho_for_eps("1", "1")
