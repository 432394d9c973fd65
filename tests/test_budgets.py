"""Budgets as people give them (issue 36, item 4): eps and delta as floats or strings, converted exactly; the same
budget options on every command that spends budget (`das replicate --eps --delta`); and a run's total guarantee,
its persons and units releases composed, in the manifest (recomputed by das validate), the summary and
`das privacy`."""

from __future__ import annotations

import json
import shutil
from fractions import Fraction

import pytest

import das
from das.cli import main
from das.core.errors import SpecError
from das.privacy.accounting import eps_for_delta, rho_for_eps
from das.privacy.certificate import fraction_text
from das.validate import validate_run


@pytest.fixture(scope="module")
def release(tmp_path_factory):
    """The issue's example, given as Python floats: the persons budget eps 1 at delta 1e-5."""
    out = tmp_path_factory.mktemp("budgets") / "tiny"
    return das.run("tiny", out=out, seed=1, workers=1, progress=False, eps=1.0, delta=1e-5)


# ---------------------------------------------------------------------------------------------
# Floats and strings, converted exactly


def test_a_float_budget_is_the_decimal_it_prints_as(release):
    cert = release.certificate
    assert cert.delta == Fraction(1, 10**5) and release.certificates["units"].delta == Fraction(1, 10**5)
    assert cert.rho == rho_for_eps(1, Fraction(1, 10**5)) and cert.eps <= 1
    assert 'eps = "1"' in release.manifest.spec_text and 'delta = "1e-5"' in release.manifest.spec_text
    assert release.validate().ok


def test_float_and_string_budgets_give_the_same_certificates():
    by_float = das.certificates("tiny", eps=4.0, delta=1e-10)
    by_text = das.certificates("tiny", eps="4", delta="1e-10")
    assert {k: c.to_dict() for k, c in by_float.items()} == {k: c.to_dict() for k, c in by_text.items()}
    assert by_float["persons"].delta == Fraction(1, 10**10)  # not the binary float 1.0000000000000000364e-10
    assert das.certificates("tiny", rho=0.25)["persons"].rho == Fraction(1, 4)
    assert das.rho_for_eps(4.0, 1e-10) == das.rho_for_eps("4", "1e-10")


@pytest.mark.parametrize("keyword, value", [
    ("eps", float("nan")), ("eps", float("inf")), ("eps", -1.0), ("eps", 0), ("eps", 0.0), ("eps", True),
    ("rho", "nan"), ("rho", -2), ("delta", float("-inf")), ("delta", False), ("rho", Fraction(0)), ("rho", Fraction(-1, 2)),
])
def test_a_budget_that_is_no_positive_number_is_refused_naming_its_keyword(keyword, value):
    with pytest.raises(SpecError, match=keyword):
        das.certificates("tiny", **{keyword: value})


# ---------------------------------------------------------------------------------------------
# The total guarantee: persons and units composed


def test_the_manifest_states_the_total_by_zcdp_composition(release):
    persons, units = release.certificates["persons"], release.certificates["units"]
    total = json.loads((release.path / "manifest.json").read_text())["guarantee"]
    rho = persons.rho + units.rho
    assert total["releases"] == ["persons", "units"] and total["composition"].startswith("zCDP composition")
    assert total["rho"] == fraction_text(rho) and total["delta"] == "1e-5"
    assert total["eps"] == eps_for_delta(rho, Fraction(1, 10**5)) == release.guarantee.eps
    assert units.eps > 1.6 and max(persons.eps, units.eps) < total["eps"] < persons.eps + units.eps
    assert release.guarantee.rho == rho


def test_the_summary_states_the_total_beside_each_release(release):
    lines = release.summary.splitlines()
    persons = next(i for i, line in enumerate(lines) if line.startswith("privacy (persons)"))
    assert lines[persons + 1].startswith("privacy (units)")
    total = lines[persons + 2]
    assert total.startswith(f"privacy (total): rho = {fraction_text(release.guarantee.rho)}")
    assert f"eps = {release.guarantee.eps} at delta = 1e-5" in total and "persons and units together" in total


@pytest.mark.parametrize("edit, named", [
    (lambda g: g.update(eps=g["eps"] - 0.1), "guarantee.eps"),
    (lambda g: g.update(rho="1/100"), "guarantee.rho"),
    (lambda g: g.update(releases=["persons"]), "guarantee.releases"),
    (lambda g: g.update(delta="1e-4"), "guarantee.delta"),
])
def test_a_tampered_total_is_a_violation(release, tmp_path, edit, named):
    copy = tmp_path / "run"
    shutil.copytree(release.path, copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    edit(manifest["guarantee"])
    (copy / "manifest.json").write_text(json.dumps(manifest, indent=2))
    report = validate_run(copy)
    assert not report.ok and any(f"total guarantee is its releases' certificates composed (zCDP: rho adds; recomputed "
                                 f"exactly): {named}" in v for v in report.violations), report.violations


def test_a_missing_total_is_a_violation(release, tmp_path):
    copy = tmp_path / "run"
    shutil.copytree(release.path, copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    del manifest["guarantee"]
    (copy / "manifest.json").write_text(json.dumps(manifest, indent=2))
    assert any("composed (zCDP: rho adds; recomputed exactly): guarantee: missing" in v
               for v in validate_run(copy).violations)


def test_das_privacy_states_the_total(capsys):
    certs = das.certificates("tiny")
    rho = certs["persons"].rho + certs["units"].rho
    assert main(["privacy", "tiny"]) == 0
    text = capsys.readouterr().out
    assert "== total: persons and units together" in text
    assert f"rho {fraction_text(rho)}" in text and f"eps {eps_for_delta(rho, Fraction(1, 10**10))} at delta 1e-10" in text
    assert main(["privacy", "tiny", "--eps", "1", "--delta", "1e-5", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["total"]["rho"] == fraction_text(Fraction(data["persons"]["rho"]) + Fraction(data["units"]["rho"]))
    assert data["total"]["eps"] > data["units"]["eps"] > data["persons"]["eps"] == 1.0


# ---------------------------------------------------------------------------------------------
# Every command that spends budget takes eps at delta


def test_replicate_takes_eps_at_delta(tmp_path, capsys):
    out = tmp_path / "study"
    assert main(["replicate", "tiny", "--runs", "2", "--eps", "1", "--delta", "1e-5", "--out", str(out),
                 "--workers", "1", "--estimators", "noisy"]) == 0
    meta = json.loads((out / "study.json").read_text())
    rho = rho_for_eps(1, Fraction(1, 10**5))
    assert meta["rhos"] == [fraction_text(rho)] and meta["replicates"] == 2
    assert meta["budgets"] == [{"rho": fraction_text(rho), "eps": eps_for_delta(rho, Fraction(1, 10**5)), "delta": "1e-5"}]
    assert "eps 1.0 at delta 1e-5" in capsys.readouterr().out


def test_replicate_sweeps_a_list_of_float_eps(tmp_path):
    study = das.replicate("tiny", out=tmp_path / "sweep", runs=1, eps=[0.5, 2.0], delta=1e-5, estimators=("noisy",))
    delta = Fraction(1, 10**5)
    assert study.meta["rhos"] == [fraction_text(rho_for_eps(e, delta)) for e in (Fraction(1, 2), 2)]
    assert set(study.metrics["rho"]) == set(study.meta["rhos"])
    with pytest.raises(Exception, match="rho= and eps="):
        das.replicate("tiny", out=tmp_path / "both", runs=1, rho=1, eps=1)


def test_compare_takes_eps_at_the_specs_delta(tmp_path):
    from das.api.studies import _compare_rho

    assert _compare_rho("tiny", None, 1.0, None) == str(rho_for_eps(1, Fraction(1, 10**10)))
    assert _compare_rho("tiny", None, "1", 1e-10) == str(rho_for_eps(1, Fraction(1, 10**10)))
    assert _compare_rho("tiny", 0.5, None, None) == "1/2" and _compare_rho("tiny", None, None, None) is None
    with pytest.raises(SpecError, match="delta"):
        _compare_rho("tiny", None, 1, 1e-5)
