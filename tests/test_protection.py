"""What users of OpenDP and Tumult expect of a release (issue 36): a stated unit of protection, and a budget
object that says what was given, what was spent and what is left, replayed from the certificate's charges."""

from dataclasses import replace
from fractions import Fraction

import pytest

import das
from das.cli import main
from das.privacy.accounting import ledger, protects


@pytest.fixture(scope="module")
def tiny_release(tmp_path_factory):
    return das.run("tiny", out=tmp_path_factory.mktemp("p") / "r", seed=3, progress=False, rho="1/3")


def test_a_topdown_release_spends_its_whole_budget_and_says_so(tiny_release):
    budget = tiny_release.budget
    cert = tiny_release.certificate
    assert budget.budget == cert.rho == Fraction(1, 3) and budget.spent == cert.rho and budget.remaining == 0
    assert len(budget.charges) == sum(len(lv.queries) for lv in cert.by_level)
    assert sum(budget.charges.values()) == cert.rho  # every (level, query) charge, exactly
    units = ledger(tiny_release.certificates["units"])
    assert units.spent == tiny_release.certificates["units"].rho and units.remaining == 0


def test_a_certificate_whose_charges_overspend_is_refused_when_replayed(tiny_release):
    cert = tiny_release.certificate
    level = cert.by_level[0]
    doubled = replace(level, queries=(replace(level.queries[0], rho=cert.rho),) + level.queries[1:])
    with pytest.raises(das.BudgetError, match="over the budget"):
        ledger(replace(cert, by_level=(doubled, *cert.by_level[1:])))


def test_a_synthetic_release_states_its_budget_and_a_direct_one_has_none(tmp_path):
    flat = das.synth("tiny", mechanism="flat", out=tmp_path / "flat", seed=1, rho="1/2")
    assert flat.budget.budget == flat.certificate.budget == Fraction(1, 2)
    assert 0 < flat.budget.spent <= flat.budget.budget and flat.budget.remaining == flat.budget.budget - flat.budget.spent
    stability = das.synth("tiny", mechanism="stability", out=tmp_path / "stability", seed=1)
    assert stability.certificate.rho is None and stability.budget is None  # (eps, delta)-DP directly: no rho spent


def test_the_unit_of_protection_is_stated_in_the_summary_das_privacy_and_the_api(tiny_release, capsys):
    assert tiny_release.protects == protects("persons") == "one person's record"
    assert ("protects: one person's record (persons); one housing unit's record (a unit or a group-quarters "
            "facility) (units), changed, the invariants kept") in tiny_release.summary
    assert main(["privacy", "tiny"]) == 0
    out = capsys.readouterr().out
    assert "protects     one person's record, changed" in out and "protects     one housing unit's record" in out
