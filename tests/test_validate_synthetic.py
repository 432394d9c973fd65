"""das validate plans a synthetic release's charges again (das.validate.certificate.synthetic_plan): from the
published spec and the mechanism's public parameters, by the mechanism's own plan (Mechanism.plan, the code
`das synth` ran), compared exactly with the certificate and the mechanism's record. Every release of every
mechanism validates untouched; each tampering of issue 35 fails without a public key, even when the Parquet
metadata, digests and spec digest are rewritten to match; and each release states its own guarantee."""

import hashlib
import json
import shutil
import tomllib
from fractions import Fraction

import pyarrow.parquet as pq
import pytest
import tomli_w
from conftest import mechanism_params

from das.frame.bundle import parquet_metadata
from das.frame.checkpoint import file_sha256
from das.frame.manifest import Manifest
from das.mechanisms import MECHANISMS, synthesize
from das.mechanisms.base import ZCDP
from das.privacy.accounting import eps_for_delta, eps_loose, stability_threshold
from das.privacy.certificate import Certificate, fraction_text
from das.validate import validate_run

PLANNED = ("certificate: the mechanism's charges, rho, (eps, delta) and guarantee, planned again from the published "
           "spec and its public parameters")
TOTAL = "certificate: the run's total guarantee is its releases' certificates composed"


@pytest.fixture(scope="module")
def releases(tmp_path_factory):
    """das synth tiny --mechanism M --seed 1, each made once (on demand)."""
    made = {}

    def release(name):
        if name not in made:
            made[name] = synthesize("tiny", name, tmp_path_factory.mktemp(name) / "r", seed=1)
        return made[name]
    return release


def edited(release, tmp_path, change=None):
    """An unsigned copy of a release (an editor drops the signature; no public key is given), its manifest changed
    by `change`, then every Parquet file's certificate and spec digest and every checksum restamped to match, as a
    careful editor would: what is left to catch it is the plan."""
    out = tmp_path / "edited"
    shutil.copytree(release, out)
    for signed in ("manifest.sig", "release.pub"):
        (out / signed).unlink()
    manifest = json.loads((out / "manifest.json").read_text())
    if change is not None:
        change(manifest)
    manifest["spec_sha256"] = hashlib.sha256(manifest["spec_text"].encode()).hexdigest()
    typed = Manifest.from_dict(manifest)
    stamped = parquet_metadata(typed.private, dict(typed.privacy), typed.spec_sha256, typed.das_version)
    for name in manifest["outputs"]:
        if name.endswith(".parquet"):
            table = pq.read_table(out / name)
            pq.write_table(table.replace_schema_metadata({**table.schema.metadata, **stamped}), out / name)
            manifest["outputs"][name] = file_sha256(out / name)
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2))
    return out


def only_the_plan_fails(out) -> list[str]:
    report = validate_run(out)
    assert not report.ok
    # with one release, the run's stated total is that release's certificate: a changed certificate breaks it too
    assert [v for v in report.violations if not v.startswith((PLANNED, TOTAL))] == [], report.violations
    return report.violations


@pytest.mark.parametrize("name", mechanism_params())
def test_an_untouched_release_of_every_mechanism_validates_and_states_its_own_guarantee(releases, tmp_path, name):
    out = edited(releases(name), tmp_path)
    report = validate_run(out)
    assert report.ok, report.violations
    assert any(c.startswith(f"ok  {PLANNED}") for c in report.checks)
    manifest = json.loads((out / "manifest.json").read_text())
    convention = MECHANISMS[name].guarantee.convention
    assert manifest["privacy"]["persons"]["convention"] == convention
    meta = pq.read_schema(out / "mdf_persons.parquet").metadata
    assert json.loads(meta[b"das.certificate"])["persons"]["convention"] == convention
    assert "keep the invariants" not in convention and "no invariant of the persons is kept" in convention


def test_the_guarantees_are_true_for_each_mechanism():
    """stability is (eps, delta)-DP directly, not zCDP; every other mechanism is zCDP; none keeps invariants."""
    for name, mechanism in MECHANISMS.items():
        definition = mechanism.guarantee.definition
        if name == "stability":
            assert definition.startswith("(eps, delta)-DP directly") and "not zCDP" in definition
        else:
            assert mechanism.guarantee == ZCDP and definition.startswith("rho-zCDP")


def test_stability_states_no_rho_it_does_not_spend(releases):
    manifest = json.loads((releases("stability") / "manifest.json").read_text())
    cert = manifest["privacy"]["persons"]
    assert "rho" not in cert and "rho_decimal" not in cert and cert["budget"] == "293764/114921"
    assert all("rho" not in c and "eps" in c for c in cert["charges"])
    assert sum(Fraction(c["eps"]) for c in cert["charges"]) == Fraction(str(cert["eps"])) == Fraction("17.1436")
    meta = json.loads(pq.read_schema(releases("stability") / "mdf_persons.parquet").metadata[b"das.certificate"])
    assert "rho" not in meta["persons"] and meta["persons"]["convention"].startswith("(eps, delta)-DP directly")


# ---------------------------------------------------------------------------------------------
# The tamperings of issue 35, each caught without a key


def _flat_claims_a_smaller_rho(m):
    """A flat release made at rho 293764/114921 rewritten to claim 1/100: certificate, charge, variance, eps and
    mechanism.budget edited consistently."""
    rho, cert = Fraction(1, 100), m["privacy"]["persons"]
    cert["rho"] = cert["budget"] = cert["charges"][0]["rho"] = m["mechanism"]["budget"] = fraction_text(rho)
    cert["charges"][0]["sigma2"] = m["mechanism"]["details"]["sigma2"] = fraction_text(1 / rho)
    cert["eps"], cert["eps_loose_bound"] = eps_for_delta(rho, Fraction(1, 10**10)), eps_loose(rho, Fraction(1, 10**10))


def _spec_says_another_rho(m):
    """spec_text says rho 1/100, the certificate left at 293764/114921."""
    spec = tomllib.loads(m["spec_text"])
    spec["persons"]["rho"] = "1/100"
    m["spec_text"] = tomli_w.dumps(spec)


def _mwem_without_its_last_two_rounds(m):
    """MWEM's last two rounds removed, their rho folded into the total's (its variance to match), 10 rounds stated."""
    cert = m["privacy"]["persons"]
    dropped = cert["charges"][-4:]
    assert [c["step"] for c in dropped] == ["round 11 select", "round 11 measure", "round 12 select", "round 12 measure"]
    cert["charges"] = cert["charges"][:-4]
    total = cert["charges"][0]
    rho = Fraction(total["rho"]) + sum(Fraction(c["rho"]) for c in dropped)
    total["rho"], total["sigma2"] = fraction_text(rho), fraction_text(1 / rho)
    m["mechanism"]["details"]["rounds"] = 10


def _mwem_relabelled_flat(m):
    flat = MECHANISMS["flat"]
    m["mechanism"].update(name="flat", summary=flat.summary, geography=flat.geography)
    m["privacy"]["persons"].update(mechanism="flat", strategy="mechanism flat")
    m["persons"]["mechanism"] = "flat"


def _stability_claims_eps_1(m):
    """stability rescaled to claim eps 1: every step's eps, scale and threshold, the details and eps edited."""
    cert, details = m["privacy"]["persons"], m["mechanism"]["details"]
    scale = 1 / Fraction(str(cert["eps"]))
    for charge in cert["charges"]:
        eps = Fraction(charge["eps"]) * scale
        charge["eps"], charge["laplace_scale"] = fraction_text(eps), fraction_text(2 / eps)
        if "threshold" in charge:
            charge["threshold"] = details["threshold"] = stability_threshold(eps / 2, Fraction(1, 10**10))
    details["eps"] = "1"
    details["eps_totals"] = cert["charges"][0]["eps"]
    cert["eps"] = cert["eps_loose_bound"] = 1.0


@pytest.mark.parametrize("mechanism, change, named", [
    ("flat", _flat_claims_a_smaller_rho, "privacy.persons.rho: '1/100', expected '293764/114921'"),
    ("flat", _spec_says_another_rho, "privacy.persons.rho: '293764/114921', expected '1/100'"),
    ("mwem", _mwem_without_its_last_two_rounds, "privacy.persons.charges[0].rho:"),
    ("mwem", _mwem_relabelled_flat, "privacy.persons.charges: 25 entries, expected 1"),
    ("stability", _stability_claims_eps_1, "privacy.persons.eps: 1.0, expected 17.1436"),
], ids=["flat-smaller-rho", "spec-text-rho", "mwem-two-rounds-removed", "mwem-relabelled-flat", "stability-eps-1"])
def test_each_tampering_fails_without_a_key(releases, tmp_path, mechanism, change, named):
    violations = only_the_plan_fails(edited(releases(mechanism), tmp_path, change))
    assert any(named in v for v in violations), violations


def test_a_guarantee_other_than_the_mechanisms_own_fails(releases, tmp_path):
    """stability's release rewritten to state the zCDP guarantee (manifest and every Parquet file)."""
    out = edited(releases("stability"), tmp_path,
                 lambda m: m["privacy"]["persons"].update(convention=ZCDP.convention))
    violations = only_the_plan_fails(out)
    assert any("privacy.persons.convention:" in v for v in violations), violations


def test_a_rho_given_to_synthesize_is_stated_in_the_published_spec(tmp_path):
    """The budget the certificate is planned from is the published spec's: synthesize(rho=...) states it there."""
    out = synthesize("tiny", "flat", tmp_path / "r", seed=1, rho=Fraction(1, 3))
    manifest = json.loads((out / "manifest.json").read_text())
    assert tomllib.loads(manifest["spec_text"])["persons"]["rho"] == "1/3"
    assert Certificate.from_dict(manifest["privacy"]["persons"]).rho == Fraction(1, 3)
    assert validate_run(out).ok
