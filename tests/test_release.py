"""The release bundle: what may be published, what --overwrite may delete, and a validator that
proves a release from its files (each tampering named in issue 12 is caught, a test for each)."""

import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest
from conftest import ROOT

from das.cli import main as das_main
from das.core.errors import RunError
from das.driver.run import run
from das.validate import validate_run

FIXTURES = ROOT / "geography_fixtures"


def _inputs(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("persons", "units"):
        shutil.copy(FIXTURES / "tiny" / f"{name}.csv", folder / f"{name}.csv")
    spec = folder / "spec.toml"
    spec.write_text((ROOT / "specs/runs/tiny.toml").read_text().replace("../../geography_fixtures/tiny/", ""))
    return spec


@pytest.fixture(scope="module")
def release(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("release")
    spec = _inputs(tmp / "inputs")
    result = run(spec, tmp / "run", seed=7, workers=1, progress=False)
    assert result.valid, result.manifest.validation
    return result


def _copy(release, tmp_path, name="copy", operator=True) -> Path:
    copy = tmp_path / name
    shutil.copytree(release.out_dir, copy, ignore=None if operator else shutil.ignore_patterns("operator"))
    return copy


def _fails(report) -> list[str]:
    return [c for c in report.checks if c.startswith("FAIL")]


# --- what leaves the building ----------------------------------------------------------------


def test_no_confidential_input_digest_or_path_in_any_publishable_file(release):
    inputs = release.out_dir.parent / "inputs"
    secrets = [str(inputs), str(inputs.resolve())]
    for name in ("persons.csv", "units.csv"):
        data = (inputs / name).read_bytes()
        secrets += [hashlib.sha256(data).hexdigest(), hashlib.md5(data).hexdigest(), name]
    published = [p for p in release.out_dir.rglob("*") if p.is_file() and "operator" not in p.parts]
    assert {p.name for p in published} >= {"manifest.json", "mdf_persons.parquet", "P1.parquet", "block.parquet"}
    for path in published:
        data = path.read_bytes()
        for secret in secrets:
            assert secret.encode() not in data, f"{secret!r} found in the publishable file {path}"
    operator = json.loads((release.out_dir / "operator" / "operator.json").read_text())
    assert operator["inputs"]["persons"].endswith("persons.csv")  # the operator keeps them, keyed
    digest = hashlib.sha256((inputs / "persons.csv").read_bytes()).hexdigest()
    assert digest not in json.dumps(operator)  # HMAC, not a plain digest
    assert oct((release.out_dir / "operator" / "fingerprint.key").stat().st_mode & 0o777) == "0o600"


def test_every_parquet_output_says_not_private_in_its_own_metadata(release):
    manifest = release.manifest.to_dict()
    files = [p for p in release.out_dir.rglob("*.parquet") if "operator" not in p.parts]
    assert len(files) == len(manifest["outputs"]) + len(manifest["nmf"])
    for path in files:
        meta = pq.read_schema(path).metadata
        assert meta[b"das.privacy"].startswith(b"NOT PRIVATE"), path
        assert meta[b"das.spec_sha256"].decode() == manifest["spec_sha256"]
        assert meta[b"das.version"].decode() == manifest["das_version"]
        cert = json.loads(meta[b"das.certificate"])
        assert cert["persons"]["rho"] == manifest["privacy"]["persons"]["rho"]


def test_the_bundle_alone_validates_without_the_operator_files(release, tmp_path):
    bundle = _copy(release, tmp_path, operator=False)
    report = validate_run(bundle)
    assert report.ok, report.violations
    assert not any("against the inputs" in c for c in report.checks)
    with_inputs = validate_run(release.out_dir)
    assert any("against the inputs" in c for c in with_inputs.checks) and with_inputs.ok


# --- --overwrite -------------------------------------------------------------------------------


def test_overwrite_refuses_a_directory_that_is_not_a_das_run(release, tmp_path, capsys):
    spec = release.out_dir.parent / "inputs" / "spec.toml"
    victim = tmp_path / "mine"
    victim.mkdir()
    (victim / "README").write_text("precious")
    code = das_main(["run", str(spec), "--out", str(victim), "--overwrite", "--seed", "1"])
    assert code == 2 and "not a das run directory" in capsys.readouterr().err
    assert (victim / "README").read_text() == "precious"


def test_overwrite_refuses_the_directory_holding_the_spec_and_inputs(release, tmp_path, capsys):
    inputs = tmp_path / "inputs"
    spec = _inputs(inputs)
    before = sorted(p.name for p in inputs.iterdir())
    code = das_main(["run", str(spec), "--out", str(inputs), "--overwrite", "--seed", "1"])
    assert code == 2 and "an input or the spec of this run" in capsys.readouterr().err
    assert sorted(p.name for p in inputs.iterdir()) == before


def test_overwrite_refuses_a_das_run_that_also_holds_other_files(release, tmp_path, capsys):
    copy = _copy(release, tmp_path)
    (copy / "README").write_text("notes")
    (copy / "tables" / "mine.parquet").write_bytes(b"not ours")
    spec = release.out_dir.parent / "inputs" / "spec.toml"
    code = das_main(["run", str(spec), "--out", str(copy), "--overwrite", "--seed", "1"])
    err = capsys.readouterr().err
    assert code == 2 and "files a das run does not write" in err and "README" in err and "mine.parquet" in err
    assert (copy / "README").exists() and (copy / "mdf_persons.parquet").exists()


def test_overwrite_replaces_a_das_run(release, tmp_path):
    copy = _copy(release, tmp_path)
    spec = release.out_dir.parent / "inputs" / "spec.toml"
    again = run(spec, copy, seed=8, overwrite=True, progress=False)
    assert again.valid and again.manifest.seed == 8


def test_refusal_leaves_a_symlinked_file_alone(release, tmp_path, capsys):
    copy = _copy(release, tmp_path)
    outside = tmp_path / "outside.parquet"
    outside.write_bytes(b"elsewhere")
    (copy / "tables" / "P1.parquet").unlink()
    os.symlink(outside, copy / "tables" / "P1.parquet")
    spec = release.out_dir.parent / "inputs" / "spec.toml"
    assert das_main(["run", str(spec), "--out", str(copy), "--overwrite", "--seed", "1"]) == 2
    assert outside.read_bytes() == b"elsewhere"


def test_demo_script_overwrites_only_its_own_directory():
    text = (ROOT / "scripts" / "demo").read_text()
    assert 'das run vt_demo "$@"' in text  # --out given: passed through, no --overwrite added
    result = subprocess.run(["bash", "-n", str(ROOT / "scripts" / "demo")], capture_output=True)
    assert result.returncode == 0


# --- tampering ---------------------------------------------------------------------------------


def _rewrite(path: Path, frame: pd.DataFrame) -> None:
    frame.to_parquet(path, index=False)


def test_changed_mdf_with_tables_re_derived_is_caught_by_its_checksums(release, tmp_path):
    from das.io.microdata import read_records
    from das.io.tables import compute_table, load_tables
    from das.model.geography import Geography
    from das.model.histogram import block_histograms
    from das.model.schema import load_schema

    copy = _copy(release, tmp_path)
    mdf = pd.read_parquet(copy / "mdf_persons.parquet")
    mdf["CENRACE"] = mdf["CENRACE"].astype(str)
    household = mdf.index[mdf["RTYPE"] == 3][0]
    mdf.loc[household, "CENRACE"] = "02" if mdf.loc[household, "CENRACE"] != "02" else "01"
    _rewrite(copy / "mdf_persons.parquet", mdf)
    schema = load_schema("pl94_persons")
    units = pd.read_parquet(copy / "mdf_units.parquet")
    blocks = sorted(set(units["TABBLKST"].astype(str) + units["TABBLKCOU"].astype(str)
                         + units["TABTRACTCE"].astype(str) + units["TABBLK"].astype(str)))
    geography = Geography.from_blocks(blocks, tuple(release.manifest.levels))
    records = read_records(copy / "mdf_persons.parquet", schema, geography.blocks)
    histograms = block_histograms(records, geography.n_blocks, schema.size)
    for spec in load_tables("pl94"):
        if spec.schema == schema.name:
            _rewrite(copy / "tables" / f"{spec.name}.parquet", compute_table(schema, spec, geography, histograms))
    report = validate_run(copy)
    assert _fails(report)[0] == "FAIL checksums of every output and NMF file"
    assert not any("recount" in f for f in _fails(report))  # the content is consistent: only checksums tell
    assert any("mdf_persons.parquet: SHA-256 differs" in v for v in report.violations)


def test_nmf_value_plus_1000_is_caught(release, tmp_path):
    copy = _copy(release, tmp_path)
    path = copy / "nmf" / "persons" / "block.parquet"
    table = pq.read_table(path)
    frame = table.to_pandas()
    frame.loc[0, "noisy"] += 1000
    import pyarrow as pa

    pq.write_table(pa.Table.from_pandas(frame, schema=table.schema, preserve_index=False), path)
    report = validate_run(copy)
    assert "nmf/persons/block.parquet: SHA-256 differs from the manifest's (the file was changed after the run)" in \
        " ".join(report.violations)
    assert das_main(["validate", str(copy)]) == 1


def test_household_person_recoded_to_group_quarters_rtype_is_caught(release, tmp_path):
    copy = _copy(release, tmp_path)
    mdf = pd.read_parquet(copy / "mdf_persons.parquet")
    row = mdf.index[mdf["RTYPE"] == 3][0]
    mdf.loc[row, "RTYPE"] = 5
    _rewrite(copy / "mdf_persons.parquet", mdf)
    report = validate_run(copy)
    assert any(f"row {row + 1}: RTYPE 5 with GQTYPE_PL 0 (expected RTYPE 3)" in v for v in report.violations)


def test_duplicated_epnum_is_caught(release, tmp_path):
    copy = _copy(release, tmp_path)
    mdf = pd.read_parquet(copy / "mdf_persons.parquet")
    mdf.loc[5, "EPNUM"] = mdf.loc[2, "EPNUM"]
    _rewrite(copy / "mdf_persons.parquet", mdf)
    report = validate_run(copy)
    assert any("row 6: EPNUM 3 appears on an earlier row too" in v for v in report.violations)


def test_person_moved_between_blocks_is_caught(release, tmp_path):
    copy = _copy(release, tmp_path)
    mdf = pd.read_parquet(copy / "mdf_persons.parquet")
    for column in ("TABBLK", "TABBLKGRPCE"):
        mdf[column] = mdf[column].astype(str)
    blocks = mdf["TABBLK"].unique()
    row = mdf.index[mdf["TABBLK"] == blocks[0]][0]
    other = mdf[mdf["TABBLK"] != blocks[0]].iloc[0]
    for column in ("TABBLKST", "TABBLKCOU", "TABTRACTCE", "TABBLKGRPCE", "TABBLK"):
        mdf.loc[row, column] = str(other[column])
    _rewrite(copy / "mdf_persons.parquet", mdf)
    assert any("equals the MDF recount" in f for f in _fails(validate_run(copy)))


def test_code_changed_to_an_invalid_code_is_caught(release, tmp_path):
    copy = _copy(release, tmp_path)
    mdf = pd.read_parquet(copy / "mdf_persons.parquet")
    mdf["CENRACE"] = mdf["CENRACE"].astype(str)
    mdf.loc[0, "CENRACE"] = "99"
    _rewrite(copy / "mdf_persons.parquet", mdf)
    report = validate_run(copy)
    assert any("column CENRACE holds '99'" in v for v in report.violations)


def test_row_deleted_is_caught(release, tmp_path):
    copy = _copy(release, tmp_path)
    _rewrite(copy / "mdf_persons.parquet", pd.read_parquet(copy / "mdf_persons.parquet").iloc[1:])
    report = validate_run(copy)
    assert any("differs from the published invariant" in v for v in report.violations)


def test_checksum_edited_in_the_manifest_is_caught(release, tmp_path):
    copy = _copy(release, tmp_path)
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest["outputs"]["tables/P1.parquet"] = "0" * 64
    (copy / "manifest.json").write_text(json.dumps(manifest))
    report = validate_run(copy)
    assert report.violations == ["signature: manifest.sig verifies with the release.pub beside it (not a proof of origin): "
                                 "the signature does not verify: manifest.json was changed after it was signed",
                                 "checksums of every output and NMF file: tables/P1.parquet: SHA-256 differs from "
                                 "the manifest's (the file was changed after the run)"]


def test_unlisted_file_in_the_bundle_is_caught(release, tmp_path):
    copy = _copy(release, tmp_path)
    shutil.copy(copy / "tables" / "P1.parquet", copy / "tables" / "P9.parquet")
    assert any("tables/P9.parquet: not listed" in v for v in validate_run(copy).violations)


def test_deleted_mdf_gives_rc_2_and_the_full_path(release, tmp_path, capsys):
    copy = _copy(release, tmp_path)
    (copy / "mdf_persons.parquet").unlink()
    assert das_main(["validate", str(copy)]) == 2
    err = capsys.readouterr().err
    assert f"{copy / 'mdf_persons.parquet'} is missing" in err and "None" not in err


@pytest.mark.parametrize("content", [b"{not json", b"[1, 2]", b""])
def test_corrupt_manifest_gives_rc_2(release, tmp_path, capsys, content):
    copy = _copy(release, tmp_path)
    (copy / "manifest.json").write_bytes(content)
    assert das_main(["validate", str(copy)]) == 2
    err = capsys.readouterr().err
    assert "manifest.json" in err and "Traceback" not in err


def test_corrupt_parquet_gives_rc_2(release, tmp_path, capsys):
    copy = _copy(release, tmp_path)
    manifest = json.loads((copy / "manifest.json").read_text())
    (copy / "mdf_units.parquet").write_bytes(b"PAR1 garbage")
    manifest["outputs"]["mdf_units.parquet"] = hashlib.sha256(b"PAR1 garbage").hexdigest()
    (copy / "manifest.json").write_text(json.dumps(manifest))
    assert das_main(["validate", str(copy)]) == 2
    assert "mdf_units.parquet is not a readable Parquet file" in capsys.readouterr().err


def test_structural_zero_rule_is_read_from_the_schema(release, tmp_path):
    """A child moved into a nursing facility (GQ type 3, under 18): the schema's structural zero."""
    copy = _copy(release, tmp_path)
    mdf = pd.read_parquet(copy / "mdf_persons.parquet")
    nursing = mdf.index[mdf["GQTYPE_PL"] == 3]
    if not len(nursing):
        pytest.fail("the tiny fixture has a nursing facility with residents")
    mdf.loc[nursing[0], "VOTING_AGE"] = 1
    _rewrite(copy / "mdf_persons.parquet", mdf)
    report = validate_run(copy)
    assert any("hhgq 'Nursing facilities/Skilled-nursing facilities' and votingage 'Under 18 years'" in v
               and "structural zero of schema pl94_persons" in v for v in report.violations)


def test_resume_refuses_a_run_without_its_operator_files(release, tmp_path):
    from das.driver.run import resume_run

    copy = _copy(release, tmp_path, operator=False)
    with pytest.raises(RunError, match="operator files are missing"):
        resume_run(copy, progress=False)


def _rewrite_nmf_and_its_checksum(copy: Path, change) -> None:
    import pyarrow as pa

    path = copy / "nmf" / "persons" / "block.parquet"
    table = pq.read_table(path)
    frame = change(table.to_pandas())
    pq.write_table(pa.Table.from_pandas(frame, schema=table.schema, preserve_index=False), path)
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest["nmf"]["nmf/persons/block.parquet"] = hashlib.sha256(path.read_bytes()).hexdigest()
    (copy / "manifest.json").write_text(json.dumps(manifest))


def test_nmf_variance_other_than_certified_is_caught_even_with_the_checksum_redone(release, tmp_path):
    copy = _copy(release, tmp_path)

    def halve(frame):
        frame.loc[frame["query"] == "detailed", "variance_den"] *= 2
        return frame

    _rewrite_nmf_and_its_checksum(copy, halve)
    report = validate_run(copy)
    assert any("nmf/persons/block.parquet detailed: a variance differs from the certified" in v
               for v in report.violations)


def test_nmf_measurement_repeated_or_missing_is_caught(release, tmp_path):
    copy = _copy(release, tmp_path)
    _rewrite_nmf_and_its_checksum(copy, lambda f: pd.concat([f, f.iloc[:1]], ignore_index=True))
    assert any("more rows than" in v or "not each (geocode, cell)" in v for v in validate_run(copy).violations)
    copy2 = _copy(release, tmp_path, "copy2")
    _rewrite_nmf_and_its_checksum(copy2, lambda f: f.iloc[1:])
    violations = validate_run(copy2).violations
    assert any("not each (geocode, cell) of the level once" in v for v in violations)
    assert any("rows, expected" in v for v in violations)
