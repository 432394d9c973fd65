"""End to end: `das run` on the tiny geography and on real-shaped data, validated."""

import json
import shutil
from fractions import Fraction
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import ROOT

from das.cli import main as das_main
from das.core.errors import OutDirError
from das.driver.run import run
from das.frame.rundir import RunDir
from das.validate import validate_run

FIXTURES = ROOT / "geography_fixtures"


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("runs") / "tiny"
    result = run("tiny", out, seed=7, workers=1, progress=False)
    return result


def test_tiny_run_is_valid_and_labelled_not_private(tiny_run):
    assert tiny_run.valid, tiny_run.manifest.validation
    m = tiny_run.manifest
    assert m.status == "complete" and m.private is False
    assert "NOT private" in m.warning and "NOT private" in tiny_run.summary
    for name in ("mdf_persons.parquet", "mdf_units.parquet", "tables/P1.parquet", "tables/H1.parquet"):
        assert (tiny_run.out_dir / name).exists()
    assert (tiny_run.out_dir / "nmf" / "persons" / "block.parquet").exists()


def test_the_manifest_a_run_writes_reads_back_as_the_same_typed_value(tiny_run):
    written = json.loads((tiny_run.out_dir / "manifest.json").read_text())
    manifest = RunDir(tiny_run.out_dir).read()
    assert manifest == tiny_run.manifest and manifest.to_dict() == written
    assert manifest.extra == {} and manifest.certificate("persons").rho == Fraction(293764, 114921)
    assert set(manifest.holds) >= {"mdf_codes", "units_mdf", "tables_match_mdf", "nmf_matches_certificate", "invariants"}


def test_tiny_run_holds_invariants_against_the_input(tiny_run):
    persons_in = pd.read_csv(FIXTURES / "tiny/persons.csv", dtype=str)
    units_in = pd.read_csv(FIXTURES / "tiny/units.csv", dtype=str)
    mdf = pd.read_parquet(tiny_run.out_dir / "mdf_persons.parquet")
    units = pd.read_parquet(tiny_run.out_dir / "mdf_units.parquet")
    assert len(mdf) == len(persons_in)  # state total is invariant
    assert (units["RTYPE"] == 2).sum() == (units_in["RTYPE"] == "2").sum()
    key = ["TABBLK", "GQTYPE_PL"]
    gq_out = mdf[mdf["GQTYPE_PL"] > 0].groupby(key, observed=True).size()
    fac = units_in[units_in["RTYPE"] == "4"].assign(GQTYPE_PL=lambda f: f["GQTYPE_PL"].astype(int)).groupby(key).size()
    assert set(gq_out.index) == set(fac.index)  # GQ persons exactly where facilities are, >= 1 each
    assert not ((mdf["GQTYPE_PL"] == 3) & (mdf["VOTING_AGE"] == 1)).any()


def test_seeded_replicates_are_bit_identical(tiny_run, tmp_path):
    again = run("tiny", tmp_path / "again", seed=7, workers=1, progress=False)
    assert again.manifest.outputs == tiny_run.manifest.outputs
    assert again.manifest.nmf == tiny_run.manifest.nmf
    other = run("tiny", tmp_path / "other", seed=8, workers=1, progress=False)
    assert other.manifest.nmf != tiny_run.manifest.nmf


def test_validator_catches_a_tampered_output(tiny_run, tmp_path):
    copy = tmp_path / "tampered"
    shutil.copytree(tiny_run.out_dir, copy)
    mdf = pd.read_parquet(copy / "mdf_persons.parquet")
    mdf = mdf.iloc[1:]  # drop one person: totals, tables and the invariant all break
    mdf.to_parquet(copy / "mdf_persons.parquet")
    report = validate_run(copy)
    assert not report.ok
    assert any("population" in v for v in report.violations)
    assert any("MDF recount" in v for v in report.violations)
    assert das_main(["validate", str(copy)]) == 1
    assert das_main(["validate", str(tiny_run.out_dir)]) == 0


def test_validator_catches_a_tampered_table_cell(tiny_run, tmp_path):
    copy = tmp_path / "tampered_table"
    shutil.copytree(tiny_run.out_dir, copy)
    p1 = pd.read_parquet(copy / "tables" / "P1.parquet")
    row = p1.index[(p1["level"] == "block") & (p1["total"] > 0)][0]
    p1.loc[row, "total"] += 1  # one block's count moved: the recount and the tract sum both disagree
    p1.to_parquet(copy / "tables" / "P1.parquet")
    report = validate_run(copy)
    failed = [c for c in report.checks if c.startswith("FAIL")]
    # the file no longer has its listed SHA-256 nor the run's metadata (pandas rewrote it), and its content is wrong
    assert failed == ["FAIL checksums of every output and NMF file",
                      "FAIL privacy mode, certificate and spec digest in every Parquet file",
                      "FAIL table P1 equals the MDF recount", "FAIL table P1 hierarchy sums"], failed
    geocode = p1.loc[row, "geocode"]
    assert any(geocode in v and "'total'" in v for v in report.violations)


def test_output_directory_of_another_run_is_refused(tiny_run):
    with pytest.raises(OutDirError, match="not empty"):
        run("tiny", tiny_run.out_dir, seed=1, progress=False)


def test_measure_refuses_its_own_earlier_output_unless_overwrite_and_keeps_a_users_file(tmp_path, capsys):
    out = tmp_path / "nmf"
    argv = ["measure", "tiny", "--seed", "2", "--out", str(out)]
    assert das_main(argv) == 0
    first = json.loads((out / "manifest.json").read_text())["nmf"]
    assert das_main(argv) == 2 and "not empty (it holds an unfinished run of 'tiny'" in capsys.readouterr().err  # spent once
    assert das_main([*argv, "--overwrite"]) == 0
    assert json.loads((out / "manifest.json").read_text())["nmf"] == first  # seeded: the same draw again
    (out / "nmf" / "notes.txt").write_text("mine")
    assert das_main([*argv, "--overwrite"]) == 2
    assert "nmf/notes.txt" in capsys.readouterr().err and (out / "nmf" / "notes.txt").exists()


def test_cli_privacy_certificate(capsys):
    assert das_main(["privacy", "vt_demo"]) == 0
    out = capsys.readouterr().out
    assert "293764/114921" in out and "17.14" in out
    assert das_main(["privacy", "vt_demo", "--json"]) == 0
    certs = json.loads(capsys.readouterr().out)
    assert round(certs["persons"]["eps"], 2) == 17.14


def _infeasible_inputs(tmp_path) -> Path:
    """More GQ facilities (each needing >= 1 person) than the invariant state population."""
    persons = pd.read_csv(FIXTURES / "tiny/persons.csv", dtype=str).head(3)
    persons["GQTYPE_PL"] = "0"
    persons["RTYPE"] = "3"
    persons["TABBLK"] = "1000"
    units = pd.read_csv(FIXTURES / "tiny/units.csv", dtype=str)
    blocks = units[["TABBLKST", "TABBLKCOU", "TABTRACTCE", "TABBLKGRPCE", "TABBLK"]].drop_duplicates()
    gq = blocks.assign(RTYPE="4", GQTYPE_PL="7", HH_STATUS="0")
    units = pd.concat([units[units["RTYPE"] == "2"], gq])
    persons.to_csv(tmp_path / "persons.csv", index=False)
    units.to_csv(tmp_path / "units.csv", index=False)
    spec = (ROOT / "specs/runs/tiny.toml").read_text()
    spec = spec.replace("../../geography_fixtures/tiny/", "")
    (tmp_path / "spec.toml").write_text(spec)
    return tmp_path / "spec.toml"


def test_engineered_infeasible_input_is_refused_before_any_noise(tmp_path, capsys):
    spec = _infeasible_inputs(tmp_path)
    code = das_main(["run", str(spec), "--out", str(tmp_path / "out"), "--seed", "3", "--workers", "1"])
    assert code == 2
    err = capsys.readouterr().err
    assert "state '44'" in err and "'hhgq' constraint" in err and "published total population is 3" in err
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_vermont_county_end_to_end(tmp_path):
    """A real-shaped county (Vermont's Grand Isle, 50013) through the whole pipeline."""
    src = FIXTURES / "vt"
    for name in ("persons", "units"):
        frame = pd.read_parquet(src / f"{name}.parquet")
        frame[frame["TABBLKCOU"].astype(str) == "013"].to_parquet(tmp_path / f"{name}.parquet")
    spec = (ROOT / "specs/runs/vt_demo.toml").read_text().replace("../../geography_fixtures/vt/", "")
    (tmp_path / "spec.toml").write_text(spec)
    result = run(tmp_path / "spec.toml", tmp_path / "out", seed=11, workers=2, progress=False)
    assert result.valid, result.manifest.validation.violations[:5]
    truth = len(pd.read_parquet(tmp_path / "persons.parquet"))
    assert result.manifest.counts.persons == truth


@pytest.mark.slow
def test_vermont_demo_end_to_end(tmp_path):
    from das.io import nmf

    result = run("vt_demo", tmp_path / "vt", seed=2020, workers=2, progress=False)
    assert result.valid, result.manifest.validation.violations[:5]
    assert result.manifest.counts.persons == 625_741
    p1 = pd.read_parquet(tmp_path / "vt" / "tables" / "P1.parquet", columns=["level", "total"])
    assert p1[p1["level"] == "state"]["total"].iloc[0] == 625_741
    assert (p1["total"] >= 0).all()
    assert np.isclose(p1[p1["level"] == "county"]["total"].sum(), 625_741)
    assert (p1["level"] == "block_group").sum() > 400  # the 2020 spine
    # GQ types at the state within 2 sd of the state's own hhgq measurement: nothing inflated at the top
    published = np.bincount(pd.read_parquet(tmp_path / "vt" / "mdf_persons.parquet", columns=["GQTYPE_PL"])
                            ["GQTYPE_PL"], minlength=8)
    true = np.bincount(pd.read_parquet(FIXTURES / "vt" / "persons.parquet", columns=["GQTYPE_PL"])["GQTYPE_PL"],
                       minlength=8)
    variance = nmf.read_level(tmp_path / "vt" / "nmf" / "persons" / "state.parquet")["hhgq"].variance
    assert (np.abs(published - true) <= 2 * float(variance) ** 0.5).all(), (published, true)
    assert all(r.l2_certificate["uncertified"] == 0 for r in result.manifest.levels_report["persons"])
    assert any("household_persons" in c and c.startswith("ok") for c in result.manifest.validation.checks)


@pytest.mark.slow  # > 10 s (20-40 s on 2 loaded cores)
def test_the_same_engine_runs_the_dhc_schema_on_a_county(tmp_path):
    """Schema-generic: DHC persons (233,856 cells) on Grand Isle County, validated."""
    result = run("vt_grand_isle_dhc", tmp_path / "dhc", seed=3, workers=1, progress=False)
    assert result.valid, result.manifest.validation.violations[:5]
    mdf = pd.read_parquet(tmp_path / "dhc" / "mdf_persons.parquet")
    assert {"QSEX", "QAGE", "GQTYPE_PL", "CENRACE"} <= set(mdf.columns)
    assert len(mdf) == len(pd.read_parquet(FIXTURES / "vt_grand_isle" / "persons.parquet"))
    assert mdf["QAGE"].between(0, 115).all()
    assert (tmp_path / "dhc" / "tables" / "P12.parquet").exists()


def test_process_pool_gives_the_same_release_as_one_process(tiny_run, tmp_path):
    pooled = run("tiny", tmp_path / "pooled", seed=7, workers=2, progress=False)
    assert pooled.manifest.outputs == tiny_run.manifest.outputs


@pytest.mark.slow
def test_delaware_measured_at_every_level_with_the_production_strategy(tmp_path):
    from das.driver.run import measure_only
    from das.frame.rundir import nmf_level_path
    from das.io import nmf

    manifest = measure_only("de_production", tmp_path / "de", seed=5)
    assert manifest.status == "measured"
    levels = ["nation", "state", "county", "tract", "block_group", "block"]
    counts = {"nation": 1, "state": 1, "county": 3, "tract": 218, "block_group": 574}
    for level in levels:
        answers = nmf.read_level(nmf_level_path(tmp_path / "de" / "nmf", "persons", level))
        detailed, variance = answers["detailed"].answers, answers["detailed"].variance
        assert detailed.shape[1] == 2016
        if level in counts:
            assert detailed.shape[0] == counts[level]
        assert variance == manifest.certificate("persons").level(level).queries[-1].sigma2
    cert = manifest.certificate("persons")
    assert cert.rho == Fraction(293764, 114921) and round(cert.eps, 2) == 17.14


def test_bad_input_stops_the_run_before_any_output(tmp_path, capsys):
    persons = pd.read_csv(FIXTURES / "tiny/persons.csv", dtype=str)
    persons.loc[3, "CENRACE"] = "99"
    persons.to_csv(tmp_path / "persons.csv", index=False)
    shutil.copy(FIXTURES / "tiny/units.csv", tmp_path / "units.csv")
    spec = (ROOT / "specs/runs/tiny.toml").read_text().replace("../../geography_fixtures/tiny/", "")
    (tmp_path / "spec.toml").write_text(spec)
    code = das_main(["run", str(tmp_path / "spec.toml"), "--out", str(tmp_path / "out"), "--seed", "1"])
    assert code == 2
    err = capsys.readouterr().err
    assert "persons.csv row 4 (line 5), column CENRACE: '99' is not valid" in err
    assert not (tmp_path / "out").exists()
