"""`das measure`'s output is an NMF release: signed like `das run`'s (--signing-key, or a key of its own), and
validated for what it holds (its certificate, its NMF files and their checksums, its manifest, its signature),
never asked for an MDF or a table; `das validate` says it is an NMF release."""

import json
import shutil

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from das.cli import main as das_main
from das.driver.run import resume_run
from das.frame.checkpoint import file_sha256
from das.frame.rundir import RunDir
from das.frame.signing import keygen
from das.validate import NMF_HOLDS, validate_run
from das.validate.signature import CONSISTENCY_ONLY

NMF_RELEASE = "an NMF release (das measure)"


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    folder = tmp_path_factory.mktemp("keys")
    keygen(folder / "k")
    keygen(folder / "other")
    return folder


@pytest.fixture(scope="module")
def measured(keys, tmp_path_factory):
    """`das measure tiny --seed 1 --signing-key K`."""
    out = tmp_path_factory.mktemp("measure") / "m"
    assert das_main(["measure", "tiny", "--seed", "1", "--out", str(out), "--signing-key", str(keys / "k")]) == 0
    return out


def copy(release, tmp_path, name="copy"):
    shutil.copytree(release, tmp_path / name)
    return tmp_path / name


def validate(out, capsys, *args) -> tuple[int, str]:
    code = das_main(["validate", str(out), *args])
    return code, capsys.readouterr().out


def test_a_signed_nmf_release_validates_with_its_key_and_says_what_it_is(measured, keys, capsys):
    manifest = RunDir(measured).read()
    assert manifest.status == "measured" and manifest.holds == NMF_HOLDS and manifest.validation.valid
    assert not (measured / "mdf_persons.parquet").exists() and not (measured / "tables").exists()
    code, printed = validate(measured, capsys, "--public-key", str(keys / "k.pub"))
    assert code == 0, printed
    assert f"NOTE {NMF_RELEASE}" in printed and f"{measured}: an NMF release, valid, and signed by the given public key" \
        in printed
    for line in ("ok  signature: manifest.json is signed by the given public key", "ok  checksums of every output and NMF",
                 "ok  manifest: every field declared", "ok  certificate: what the release's strategy",
                 "ok  NMF: exactly the certified measurements"):
        assert line in printed
    checks = [line for line in printed.splitlines() if line.startswith(("ok ", "FAIL "))]
    assert not [line for line in checks if "MDF" in line or "table" in line]  # nothing of what it does not have


def test_a_changed_noisy_answer_fails(measured, keys, tmp_path, capsys):
    """One noisy answer changed: its checksum fails without a key; its digest rewritten in the manifest too, the
    signature fails with the operator's key."""
    out = copy(measured, tmp_path)
    county = out / "nmf" / "persons" / "county.parquet"
    table = pq.read_table(county)
    column = table.schema.get_field_index("noisy")
    noisy = table["noisy"].to_numpy().copy()
    noisy[0] += 1
    pq.write_table(table.set_column(column, "noisy", pa.array(noisy)), county)
    code, printed = validate(out, capsys)
    assert code == 1 and "nmf/persons/county.parquet: SHA-256 differs from the manifest's" in printed
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["nmf"]["nmf/persons/county.parquet"] = file_sha256(county)
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2))
    code, printed = validate(out, capsys, "--public-key", str(keys / "k.pub"))
    assert code == 1 and "FAIL signature: manifest.json is signed by the given public key" in printed


def test_a_missing_geounit_fails(measured, tmp_path, capsys):
    """A tract's rows of a query removed (its digest recomputed: no key): the NMF check names the query."""
    out = copy(measured, tmp_path)
    for name in ("manifest.sig", "release.pub"):
        (out / name).unlink()
    tract = out / "nmf" / "persons" / "tract.parquet"
    table = pq.read_table(tract)
    pq.write_table(table.slice(1), tract)
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["nmf"]["nmf/persons/tract.parquet"] = file_sha256(tract)
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2))
    code, printed = validate(out, capsys)
    assert code == 1 and "FAIL NMF: exactly the certified measurements" in printed


def test_another_key_fails(measured, keys, capsys):
    code, printed = validate(measured, capsys, "--public-key", str(keys / "other.pub"))
    assert code == 1
    assert "manifest.sig is not the given key's signature of manifest.json" in printed


def test_an_unsigned_nmf_release_validates_without_a_key_saying_so(measured, keys, tmp_path, capsys):
    """As an unsigned `das run` release: valid without a key, the report saying its origin is not proved; with a
    key, refused as not signed."""
    out = copy(measured, tmp_path)
    for name in ("manifest.sig", "release.pub"):
        (out / name).unlink()
    code, printed = validate(out, capsys)
    assert code == 0 and f"NOTE {CONSISTENCY_ONLY}" in printed
    assert "an NMF release, valid: internally consistent (no --public-key: its origin is not proved)" in printed
    code, printed = validate(out, capsys, "--public-key", str(keys / "k.pub"))
    assert code == 1 and "the release is not signed: no manifest.sig" in printed


def test_an_nmf_release_claiming_what_only_an_mdf_shows_fails(measured, tmp_path):
    out = copy(measured, tmp_path)
    for name in ("manifest.sig", "release.pub"):
        (out / name).unlink()
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["holds"] = [*manifest["holds"], "mdf_codes"]
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2))
    report = validate_run(out)
    claims = report.checks[0].split(" ", 1)[1].strip()
    assert report.violations == [f"{claims}: claims 'mdf_codes', which an NMF release (no MDF, no tables) cannot hold"]


def test_without_a_key_das_measure_signs_with_one_of_its_own(tmp_path, capsys):
    out = tmp_path / "m"
    assert das_main(["measure", "tiny", "--seed", "1", "--out", str(out)]) == 0
    assert RunDir(out).signing_key_file.is_file()
    code, printed = validate(out, capsys, "--public-key", str(out / "release.pub"))
    assert code == 0, printed


def test_das_run_resumes_a_measured_nmf_into_a_signed_release(measured, keys, tmp_path):
    """The NMF release continued by `das run --resume`: its measurements reused, the release complete, valid,
    claiming what a whole release holds and signed with the key it was measured with."""
    out = copy(measured, tmp_path)
    result = resume_run(out, workers=1, progress=False)
    assert result.valid and result.manifest.complete and "mdf_codes" in result.manifest.holds
    assert result.manifest.nmf == RunDir(measured).read().nmf
    assert validate_run(out, public_key=keys / "k.pub").ok
