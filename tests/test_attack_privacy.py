"""Empirical privacy audit (das/attack/privacy.py): the real measurement path on neighbouring
datasets stays within its certificate, and deliberately broken mechanisms are caught."""

import json
from fractions import Fraction

import numpy as np
import pytest

from das.attack import privacy as A
from das.attack.detection import clopper_pearson, detection_limit
from das.model.schema import load_schema
from das.privacy.accounting import Allocation, allocate
from das.privacy.randomness import SeededRandomSource
from das.privacy.strategy import strategy_from_dict
from das.topdown.measure import measure_in_memory

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
    allocation = allocate(strategy, A.AUDIT_RHO)
    assert allocation.total() == A.AUDIT_RHO
    return geography, A.audit_dataset(schema, geography), schema, allocation


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
    lo, hi = clopper_pearson(30, 1000, 0.05)
    assert lo < 0.03 < hi
    lo2, hi2 = clopper_pearson(300, 10000, 0.05)
    assert hi2 - lo2 < hi - lo
    assert clopper_pearson(0, 100, 0.05)[0] == 0.0 and clopper_pearson(100, 100, 0.05)[1] == 1.0


def test_every_evaluation_trial_on_its_side_reaches_the_detection_limit_and_nothing_goes_further():
    half = 30  # D' chooses its event on its first half (a threshold above that half's median) ...
    d_prime = np.concatenate([np.arange(half, dtype=float), 1000 + np.arange(half, dtype=float)])
    eps, threshold, p, q = A.epsilon_bound(np.zeros(2 * half), d_prime, delta=0.01)
    assert (p, q) == (0.0, 1.0) and eps == detection_limit(2 * half, 0.01, 0.05)  # ... which all its second half passes
    rng = np.random.default_rng(4)
    for shift in (1.0, 3.0, 10.0):
        eps, *_ = A.epsilon_bound(rng.normal(size=2 * half), rng.normal(shift, 1, size=2 * half), delta=0.01)
        assert eps <= detection_limit(2 * half, 0.01, 0.05)


def test_identical_distributions_give_no_loss():
    rng = np.random.default_rng(0)
    eps, *_ = A.epsilon_bound(rng.normal(size=50_000), rng.normal(size=50_000), delta=0.01)
    assert eps == 0.0 or eps < 0.1


def test_cli_audit_reports_beside_the_certificate(capsys):
    from das.cli import main

    assert main(["audit-privacy", "tiny", "--trials", "400", "--seed", "3"]) == 0
    out = capsys.readouterr().out
    assert "eps certified" in out and "4.3404" in out and "detailed only" in out
    # 400 trials can show at most 3.974 < 4.3404: no violation found, and the verdict says none could show
    assert "detection limit" in out and "trials needed" in out and "within the certificate" not in out
    assert ("verdict: inconclusive: at 400 trials the largest bound this audit can show is 3.974 < certificate eps "
            "4.3404 (delta 0.01); 575 trials needed") in out
    assert main(["audit-privacy", "tiny", "--trials", "1200", "--seed", "3", "--json"]) == 0  # limit 5.08: enough
    report = json.loads(capsys.readouterr().out)
    assert report["verdict"] == "within the certificate" and report["detection"]["conclusive"]
    assert report["detection"]["detection_limit_eps"] == detection_limit(1200, 0.01, 0.05) > 4.3404
    for rows in report["strategies"].values():
        assert all(r["detection_limit_eps"] == report["detection"]["detection_limit_eps"] for r in rows)
        assert all(r["trials_needed"] == 575 for r in rows)
    with pytest.raises(SystemExit) as refused:  # an impossible delta is refused while parsing (das.cli.args)
        main(["audit-privacy", "tiny", "--trials", "400", "--delta", "2"])
    assert refused.value.code == 2


def test_cli_audit_writes_its_report_to_a_directory_of_its_own(tmp_path, capsys):
    from das.cli import main
    from das.frame.outdir import RECORD

    out = tmp_path / "audit"
    argv = ["audit-privacy", "tiny", "--trials", "400", "--seed", "3", "--out", str(out)]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    report = json.loads((out / "audit.json").read_text())
    assert report["spec"] == "tiny" and report["trials"] == 400 and len(report["strategies"]) == 2
    summary = (out / "audit.md").read_text()
    assert report["verdict"].startswith("inconclusive: at 400 trials") and report["detection"]["trials_needed"] == 575
    assert report["verdict"] in summary and "within the certificate" not in summary and printed.strip() in summary
    record = json.loads((out / RECORD).read_text())
    assert record["command"] == "das audit-privacy" and record["confidential"] is False  # synthetic neighbours only
    assert record["files"] == ["audit.json", "audit.md"]
    assert main(argv) == 2 and "pass --overwrite" in capsys.readouterr().err  # hours of trials: not redone unasked
    (out / "audit.json").write_text("{}")
    assert main([*argv, "--overwrite"]) == 0
    assert json.loads((out / "audit.json").read_text()) == report  # seeded: the same audit again


def test_audit_charges_the_plan_through_the_accountant(setting):
    from das.core.errors import BudgetError
    from das.privacy.accounting import PrivacyAccountant

    geography, data, schema, allocation = setting
    accountant = PrivacyAccountant.for_allocation(allocation)
    measure_in_memory(geography, data, schema, allocation, rng=SeededRandomSource(2), trials=3, accountant=accountant)
    assert accountant.spent == Fraction(1)
    doubled = Allocation(allocation.rho, allocation.items + allocation.items[:1])
    with pytest.raises(BudgetError, match="already measured"):
        measure_in_memory(geography, data, schema, doubled, rng=SeededRandomSource(2), trials=3,
                          accountant=PrivacyAccountant.for_allocation(allocation))
