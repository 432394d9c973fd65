"""A release's signature (das.frame.signing, das.validate.signature): every release command signs its manifest
last, with the operator's key (das keygen, --signing-key) or one of the release's own; `das validate
--public-key` proves origin and content, refuses a consistent forgery, and without a key says it proves
internal consistency only."""

import json
import os
import shutil
import stat
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import cli_refused

from das.cli import main as das_main
from das.driver.run import resume_run, run
from das.frame import signing
from das.frame.checkpoint import file_sha256
from das.frame.rundir import RunDir
from das.frame.signing import SigningError
from das.io.tables import load_tables, table_matrix
from das.mechanisms import synthesize
from das.mechanisms.registry import ENTRIES as MECHANISM_NAMES
from das.model.schema import load_schema
from das.validate import validate_run
from das.validate.files import RUN_DIRECTORY
from das.validate.signature import CONSISTENCY_ONLY


@pytest.fixture(scope="module")
def key(tmp_path_factory):
    """An operator's key pair (das keygen): (private, public)."""
    private, public, _ = signing.keygen(tmp_path_factory.mktemp("keys") / "agency")
    return private, public


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, key):
    """das run tiny, signed with the operator's key."""
    return run("tiny", tmp_path_factory.mktemp("tiny") / "run", seed=3, workers=1, progress=False,
               signing_key=key[0]).out_dir


def test_keygen_writes_a_private_key_only_its_owner_reads_and_never_replaces_one(tmp_path, capsys):
    old = os.umask(0)  # whatever the umask
    try:
        assert das_main(["keygen", str(tmp_path / "k")]) == 0
    finally:
        os.umask(old)
    printed = capsys.readouterr().out
    assert stat.S_IMODE(os.stat(tmp_path / "k").st_mode) == 0o600
    pem = (tmp_path / "k.pub").read_bytes()
    assert pem.startswith(b"-----BEGIN PUBLIC KEY-----") and signing.fingerprint(pem) in printed
    assert signing.public_key_pem(signing.read_private_key(tmp_path / "k")) == pem
    before = (tmp_path / "k").read_bytes()
    assert "exists; das never replaces a key" in cli_refused(["keygen", str(tmp_path / "k")], capsys)
    (tmp_path / "k2.pub").write_text("mine")
    assert "k2.pub exists" in cli_refused(["keygen", str(tmp_path / "k2")], capsys)
    assert (tmp_path / "k").read_bytes() == before and not (tmp_path / "k2").exists()
    assert (tmp_path / "k2.pub").read_text() == "mine"


@pytest.mark.parametrize("content, expected", [
    (None, "cannot read it"), (b"not a key", "not an unencrypted PEM private key"),
])
def test_a_bad_signing_key_is_refused_before_anything_is_written(tmp_path, capsys, content, expected):
    bad = tmp_path / "bad.key"
    if content is not None:
        bad.write_bytes(content)
    for argv in (["run", "tiny", "--seed", "1"], ["synth", "tiny", "--mechanism", "flat", "--seed", "1"]):
        out = tmp_path / argv[0]
        assert expected in cli_refused([*argv, "--out", str(out), "--signing-key", str(bad)], capsys)
        assert not out.exists()


def test_a_release_signed_with_the_operators_key_is_proved_theirs(tiny, key, capsys):
    run_dir = RunDir(tiny)
    assert run_dir.public_key_file.read_bytes() == key[1].read_bytes()
    assert not run_dir.signing_key_file.exists()  # the operator's key stays where the operator keeps it
    assert json.loads(run_dir.operator_file.read_text())["signing_key"] == str(key[0].resolve())
    report = validate_run(tiny, public_key=key[1])
    assert report.ok and report.checks[1].startswith("ok  signature: manifest.json is signed by the given public key")
    assert report.notes == [RUN_DIRECTORY]  # nothing unproved; it says what it checked (a run directory)
    assert das_main(["validate", str(tiny), "--public-key", str(key[1])]) == 0
    assert "valid, and signed by the given public key" in capsys.readouterr().out


def test_without_a_key_the_report_says_it_proves_internal_consistency_only(tiny, capsys):
    report = validate_run(tiny)
    assert report.ok and report.notes == [CONSISTENCY_ONLY, RUN_DIRECTORY]
    assert das_main(["validate", str(tiny)]) == 0
    printed = capsys.readouterr().out
    assert f"NOTE {CONSISTENCY_ONLY}" in printed and "internally consistent (no --public-key" in printed


def test_a_signature_that_does_not_verify_is_a_violation(tiny, key, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(tiny, copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest["spec_name"] = "renamed"  # any change to the manifest's bytes
    (copy / "manifest.json").write_text(json.dumps(manifest, indent=2))
    assert any("is not the given key's signature of manifest.json" in v
               for v in validate_run(copy, public_key=key[1]).violations)
    assert any("manifest.json was changed after it was signed" in v for v in validate_run(copy).violations)
    (copy / "manifest.sig").unlink()
    assert any("the release is not signed" in v for v in validate_run(copy, public_key=key[1]).violations)
    other, other_public, _ = signing.keygen(tmp_path / "other")
    assert not validate_run(tiny, public_key=other_public).ok  # another operator's key: not theirs


def test_a_public_key_that_is_not_one_is_an_error(tiny, tmp_path, capsys):
    (tmp_path / "k.pub").write_text("no key here")
    assert das_main(["validate", str(tiny), "--public-key", str(tmp_path / "k.pub")]) == 2
    assert "is not a PEM public key" in capsys.readouterr().err
    with pytest.raises(SigningError):
        signing.read_public_key(tmp_path / "missing.pub")


def _forge_race(release, out):
    """A consistent forgery of `release` in `out`: one person's race changed in the MDF and in P1-P4 at
    every level, the manifest's digests recomputed, signed with the forger's own key."""
    shutil.copytree(release, out)
    schema = load_schema("pl94_persons")
    race = schema.attribute("cenrace")
    mdf = pq.read_table(out / "mdf_persons.parquet")
    frame = mdf.to_pandas()
    levels = np.stack([frame[a.column].astype(str).map({str(c): i for i, c in enumerate(a.codes)}).to_numpy()
                       for a in schema.attributes], axis=1)
    tables = {spec.name: table_matrix(schema, spec).toarray() for spec in load_tables("pl94") if spec.schema == schema.name}

    def shifts(row: int) -> dict:
        moved = levels[row].copy()
        moved[-1] = (moved[-1] + 1) % race.size
        return {name: m[:, schema.cell_index(moved)] - m[:, schema.cell_index(levels[row])] for name, m in tables.items()}

    person = next(i for i in range(len(frame)) if sum(s.any() for s in shifts(i).values()) == 4)  # in P1-P4
    races = mdf.column("CENRACE").to_pylist()
    races[person] = race.codes[(levels[person, -1] + 1) % race.size]
    column = mdf.schema.get_field_index("CENRACE")
    pq.write_table(mdf.set_column(column, mdf.schema.field(column), pa.array(races).cast(mdf.schema.field(column).type)),
                   out / "mdf_persons.parquet")
    block = "".join(frame.loc[person, c] for c in ("TABBLKST", "TABBLKCOU", "TABTRACTCE", "TABBLK"))
    for name, shift in shifts(person).items():
        if not shift.any():
            continue
        table = pq.read_table(out / "tables" / f"{name}.parquet")
        rows = table.to_pandas()
        rows.iloc[np.flatnonzero([block.startswith(g) for g in rows["geocode"]]), 2:] += shift  # every level
        pq.write_table(pa.Table.from_pandas(rows, preserve_index=False).replace_schema_metadata(table.schema.metadata),
                       out / "tables" / f"{name}.parquet")
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["outputs"] = {name: file_sha256(out / name) for name in manifest["outputs"]}
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2))
    forger, _, _ = signing.keygen(out.parent / f"{out.name}_forger")
    signing.sign_release(RunDir(out), forger)
    return out


def test_a_consistent_forgery_passes_without_the_key_and_is_refused_with_it(tiny, key, tmp_path):
    forged = _forge_race(tiny, tmp_path / "forged")
    assert file_sha256(forged / "mdf_persons.parquet") != file_sha256(tiny / "mdf_persons.parquet")
    assert validate_run(forged).ok  # every recount, digest and signature beside it agrees: consistency is all
    refused = validate_run(forged, public_key=key[1])
    assert [v.split(":")[0] for v in refused.violations] == ["signature"]
    assert "is not the given key's signature of manifest.json" in refused.violations[0]


def test_an_output_directory_holding_the_signing_key_is_refused_before_anything_is_drawn(tmp_path, capsys, monkeypatch):
    import das.mechanisms.release

    out = synthesize("tiny", "flat", tmp_path / "r", seed=4)
    monkeypatch.setattr(das.mechanisms.release, "read_inputs", lambda *a, **k: pytest.fail("inputs read"))
    key = out / "operator" / "signing.key"
    for argv in (["run", "tiny"], ["synth", "tiny", "--mechanism", "flat"]):
        refused = cli_refused([*argv, "--out", str(out), "--overwrite", "--seed", "1", "--signing-key", str(key)], capsys)
        assert "signing.key, an input or the spec of this run" in refused
    assert key.is_file() and validate_run(out, public_key=out / "release.pub").ok


def test_a_release_without_a_key_of_the_operators_gets_its_own(tmp_path):
    out = synthesize("tiny", "flat", tmp_path / "r", seed=4)
    run_dir = RunDir(out)
    assert stat.S_IMODE(os.stat(run_dir.signing_key_file).st_mode) == 0o600
    assert run_dir.public_key_file.read_bytes() == signing.public_key_pem(signing.read_private_key(run_dir.signing_key_file))
    assert validate_run(out, public_key=run_dir.public_key_file).ok
    shutil.copy(run_dir.public_key_file, tmp_path / "published.pub")  # --overwrite replaces the release's own key
    synthesize("tiny", "flat", out, seed=4, overwrite=True)
    assert not validate_run(out, public_key=tmp_path / "published.pub").ok


@pytest.mark.parametrize("mechanism", [pytest.param(m, marks=pytest.mark.slow) if m in ("mst", "aim") else m
                                       for m in MECHANISM_NAMES])
def test_every_mechanisms_release_is_signed_and_accepted_with_the_key(mechanism, key, tmp_path):
    if mechanism in ("mst", "aim"):
        pytest.importorskip("mbi")
    out = synthesize("tiny", mechanism, tmp_path / "r", seed=4, signing_key=key[0])
    report = validate_run(out, public_key=key[1])
    assert report.ok, report.violations
    assert [c for c in report.checks if c.startswith("ok  signature:")]


def test_a_resumed_run_is_signed_with_the_key_it_started_with(key, tmp_path):
    out = tmp_path / "run"
    env = {**os.environ, "DAS_TEST_CRASH_AT": "outputs"}
    stopped = subprocess.run([sys.executable, "-m", "das.cli", "run", "tiny", "--out", str(out), "--seed", "3",
                              "--workers", "1", "--no-progress", "--signing-key", str(key[0])], env=env,
                             capture_output=True, text=True)
    assert stopped.returncode != 0 and not (out / "manifest.sig").exists()
    result = resume_run(out, workers=1, progress=False)
    assert result.valid and validate_run(out, public_key=key[1]).ok
