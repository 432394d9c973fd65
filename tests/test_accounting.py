"""zCDP accounting, strategies as specs, the privacy certificate."""

from fractions import Fraction

import pytest

from das.privacy.accounting import (
    BudgetError,
    PrivacyAccountant,
    allocate,
    certificate,
    delta_for_eps,
    eps_for_delta,
    eps_loose,
    render_certificate,
)
from das.privacy.strategy import load_strategy, validate_strategy
from das.schema import SpecError, load_schema

PROD_RHO = Fraction(293764, 114921)
FIVE = ("nation", "state", "county", "tract", "block")
SIX = ("nation", "state", "county", "tract", "block_group", "block")
SHIPPED = [("pl94_production_2020", "pl94_persons", SIX), ("pl94_five_level", "pl94_persons", FIVE),
           ("h1_units", "h1_units", SIX), ("h1_units_five_level", "h1_units", FIVE),
           ("dhc_persons_small", "dhc_persons", FIVE)]


def test_2020_production_budget_certifies_eps_17_14():
    assert round(eps_for_delta(PROD_RHO, 1e-10), 2) == 17.14
    assert round(eps_loose(PROD_RHO, 1e-10), 2) == 17.90


def test_conversions_are_consistent_monotone_and_conservative():
    eps = eps_for_delta(PROD_RHO, 1e-10)
    # eps was rounded up, so at that eps delta is at most the target (up to delta's own rounding up)
    assert delta_for_eps(PROD_RHO, eps) <= 1.0e-10 * 1.01
    assert delta_for_eps(PROD_RHO, eps - 0.01) > 1e-10
    deltas = [delta_for_eps(PROD_RHO, e) for e in (10, 12, 14, 16, 18)]
    assert deltas == sorted(deltas, reverse=True)
    assert eps_for_delta(Fraction(1, 2), 1e-6) < eps_for_delta(Fraction(1), 1e-6) < eps_for_delta(Fraction(2), 1e-6)
    assert eps_for_delta(Fraction(1), 1e-6) < eps_loose(Fraction(1), 1e-6)


@pytest.mark.parametrize("name,schema,levels", SHIPPED)
def test_shipped_strategies_are_exact(name, schema, levels):
    strategy = load_strategy(name)
    validate_strategy(strategy, load_schema(schema), levels)
    allocation = allocate(strategy, strategy.rho)
    assert allocation.total() == strategy.rho  # exact Fraction equality
    for c in allocation.items:
        assert isinstance(c.rho, Fraction) and c.sigma2 == 1 / c.rho


def test_production_shares_match_the_published_table():
    s = load_strategy("pl94_production_2020")
    levels = {lv.level: lv for lv in s.levels}
    assert levels["block"].rho_share == Fraction(165, 4099)
    assert dict(levels["block"].queries)["detailed"] == Fraction(3945, 4097)
    assert dict(levels["tract"].queries)["hispanic x cenrace"] == Fraction(1933, 4102)
    assert "total" not in dict(levels["nation"].queries)


def write(tmp_path, text):
    p = tmp_path / "s.toml"
    p.write_text(text)
    return p


BASE = '''name = "t"
schema = "pl94_persons"
rho = "1"
[levels.nation]
rho_share = "{a}"
queries = {{ "total" = "{q}", "detailed" = "{r}" }}
[levels.state]
rho_share = "{b}"
queries = {{ "{name}" = "1" }}
[levels.county]
rho_share = "0"
queries = {{ "total" = "1" }}
'''


def strategy_text(a="1/2", b="1/2", q="1/2", r="1/2", name="total", drop_county=True):
    text = BASE.format(a=a, b=b, q=q, r=r, name=name)
    return text.split("[levels.county]")[0] if drop_county else text


def test_inexact_and_bad_specs_are_refused(tmp_path):
    schema = load_schema("pl94_persons")
    levels = ("nation", "state")
    validate_strategy(load_strategy(write(tmp_path, strategy_text())), schema, levels)
    with pytest.raises(SpecError, match="sum to 4096/4097, not exactly 1"):
        short = str(Fraction(1, 2) - Fraction(1, 4097))
        validate_strategy(load_strategy(write(tmp_path, strategy_text(q="1/2", r=short))), schema, levels)
    with pytest.raises(SpecError, match="not exactly 1"):
        validate_strategy(load_strategy(write(tmp_path, strategy_text(a="1/2", b="1/3"))), schema, levels)
    with pytest.raises(SpecError, match="must be positive"):
        load_strategy(write(tmp_path, strategy_text(drop_county=False)))
    with pytest.raises(SpecError, match="neither an attribute nor a recode"):
        validate_strategy(load_strategy(write(tmp_path, strategy_text(name="votingage x sex"))), schema, levels)
    with pytest.raises(SpecError, match="not the run's levels"):
        validate_strategy(load_strategy(write(tmp_path, strategy_text())), schema, ("nation", "county"))
    for bad in ("1/0", "abc"):
        with pytest.raises(SpecError, match="not an exact fraction"):
            load_strategy(write(tmp_path, strategy_text(a=bad)))
    with pytest.raises(SpecError, match="floats are not exact"):
        load_strategy(write(tmp_path, strategy_text().replace('rho = "1"', "rho = 0.5")))


def test_accountant_refuses_overspending_and_double_charges():
    acct = PrivacyAccountant(Fraction(1))
    acct.charge("state", "total", Fraction(1, 2))
    with pytest.raises(BudgetError, match="already measured"):
        acct.charge("state", "total", Fraction(1, 4))
    with pytest.raises(BudgetError, match="over the budget"):
        acct.charge("county", "total", Fraction(2, 3))
    acct.charge("county", "total", Fraction(1, 2))
    assert acct.spent == 1
    with pytest.raises(BudgetError):
        allocate(load_strategy("pl94_five_level"), Fraction(0))


def test_certificate_contents():
    s = load_strategy("pl94_five_level")
    cert = certificate(s, s.rho, Fraction(1, 10**10), FIVE, "pl94_persons", randomness_private=False)
    assert cert["rho"] == "293764/114921" and round(cert["eps"], 2) == 17.14
    assert cert["private"] is False and "NOT private" in cert["warning"]
    assert sum(Fraction(lv["rho"]) for lv in cert["by_level"]) == PROD_RHO
    text = render_certificate(cert)
    assert "293764/114921" in text and "WARNING" in text and "detailed" in text
