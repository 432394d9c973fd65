"""Empirical privacy audit (das/attack/privacy.py): the real measurement path on neighbouring
datasets stays within its certificate, and deliberately broken mechanisms are caught."""

from fractions import Fraction

import numpy as np
import pytest

from das.attack import privacy as A
from das.measure import measure_in_memory, plan_for
from das.privacy.randomness import SeededRandomSource
from das.privacy.strategy import strategy_from_dict
from das.schema import load_schema

LEVELS = ("nation", "state", "county", "tract", "block")
TRIALS = 200_000


@pytest.fixture(scope="module")
def setting():
    """An informative audit (docs/privacy.md): rho = 1, delta = 1/100, every level measuring
    `votingage x hispanic`, which a recoded person changes at every level (the full budget)."""
    schema = load_schema("pl94_persons")
    strategy = strategy_from_dict({"schema": schema.name, "levels": {
        lv: {"rho_share": "1/5", "queries": {"votingage x hispanic": "1"}} for lv in LEVELS}})
    geography = A.audit_geography(LEVELS)
    plan, allocation = plan_for(strategy, A.AUDIT_RHO, LEVELS)
    assert allocation.total() == A.AUDIT_RHO
    return geography, A.audit_dataset(schema, geography), schema, plan


def _audit(setting, mechanism, kinds=A.NEIGHBOURS, seed=1):
    geography, data, schema, plan = setting
    return A.audit(geography, data, schema, plan, rng=SeededRandomSource(seed),
                   how=A.Trials(TRIALS, A.AUDIT_DELTA, A.AUDIT_RHO, mechanism), kinds=kinds)


def test_the_real_mechanism_stays_within_its_certificate(setting):
    results = _audit(setting, measure_in_memory)
    assert [r.neighbours for r in results] == list(A.NEIGHBOURS)
    for r in results:
        assert r.eps_certified == pytest.approx(4.3404)
        assert 0 <= r.eps_lower_bound <= r.eps_certified, r
    recoded = results[-1]
    assert recoded.eps_lower_bound > 2.5  # informative: the audit sees most of the loss it can


@pytest.mark.parametrize("broken", sorted(A.BROKEN))
def test_a_broken_mechanism_is_caught(setting, broken):
    (recoded,) = _audit(setting, A.BROKEN[broken], kinds=("recoded",))
    assert recoded.eps_lower_bound > recoded.eps_certified, recoded
    assert not recoded.within_certificate


def test_neighbours_differ_by_one_person(setting):
    geography, data, schema, _ = setting
    for pair in A.neighbour_pairs(data, schema, geography):
        diff = (pair.d_prime - pair.d).toarray()
        assert np.abs(diff).sum() == (1 if pair.name in ("added", "removed") else 2), pair.name
        assert diff.sum() == {"added": 1, "removed": -1}.get(pair.name, 0)
        assert (pair.d_prime.toarray() >= 0).all()


def test_clopper_pearson_bounds_contain_the_rate_and_shrink():
    lo, hi = A.clopper_pearson(30, 1000, 0.05)
    assert lo < 0.03 < hi
    lo2, hi2 = A.clopper_pearson(300, 10000, 0.05)
    assert hi2 - lo2 < hi - lo
    assert A.clopper_pearson(0, 100, 0.05)[0] == 0.0 and A.clopper_pearson(100, 100, 0.05)[1] == 1.0


def test_identical_distributions_give_no_loss():
    rng = np.random.default_rng(0)
    eps, *_ = A.epsilon_bound(rng.normal(size=50_000), rng.normal(size=50_000), delta=0.01)
    assert eps == 0.0 or eps < 0.1


def test_cli_audit_reports_beside_the_certificate(capsys):
    from das.cli import main

    assert main(["audit-privacy", "tiny", "--trials", "400", "--seed", "3"]) == 0
    out = capsys.readouterr().out
    assert "eps certified" in out and "4.3404" in out and "detailed only" in out
    with pytest.raises(SystemExit) as refused:  # an impossible delta is refused while parsing (das.cli.args)
        main(["audit-privacy", "tiny", "--trials", "400", "--delta", "2"])
    assert refused.value.code == 2


def test_cli_audit_writes_its_report_to_a_directory_of_its_own(tmp_path, capsys):
    import json

    from das.cli import main
    from das.outdir import RECORD

    out = tmp_path / "audit"
    argv = ["audit-privacy", "tiny", "--trials", "400", "--seed", "3", "--out", str(out)]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    report = json.loads((out / "audit.json").read_text())
    assert report["spec"] == "tiny" and report["trials"] == 400 and len(report["strategies"]) == 2
    summary = (out / "audit.md").read_text()
    assert "every bound is within the certificate" in summary and printed.strip() in summary
    record = json.loads((out / RECORD).read_text())
    assert record["command"] == "das audit-privacy" and record["confidential"] is False  # synthetic neighbours only
    assert record["files"] == ["audit.json", "audit.md"]
    assert main(argv) == 2 and "pass --overwrite" in capsys.readouterr().err  # hours of trials: not redone unasked
    (out / "audit.json").write_text("{}")
    assert main([*argv, "--overwrite"]) == 0
    assert json.loads((out / "audit.json").read_text()) == report  # seeded: the same audit again


def test_audit_charges_the_plan_through_the_accountant(setting):
    from das.privacy.accounting import BudgetError, PrivacyAccountant

    geography, data, schema, plan = setting
    _, allocation = plan_for(strategy_from_dict({"schema": schema.name, "levels": {
        lv: {"rho_share": "1/5", "queries": {"votingage x hispanic": "1"}} for lv in LEVELS}}), Fraction(1), LEVELS)
    accountant = PrivacyAccountant.for_allocation(allocation)
    measure_in_memory(geography, data, schema, plan, rng=SeededRandomSource(2), trials=3, accountant=accountant)
    assert accountant.spent == Fraction(1)
    doubled = {lv: ms + ms[:1] for lv, ms in plan.items()}
    with pytest.raises(BudgetError, match="already measured"):
        measure_in_memory(geography, data, schema, doubled, rng=SeededRandomSource(2), trials=3,
                          accountant=PrivacyAccountant.for_allocation(allocation))
