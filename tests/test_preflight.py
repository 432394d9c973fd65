"""Preflight: every bad spec, command line, output directory or infeasible input is refused with
exit code 2 and one precise message, before any noise is drawn (the accountant is never charged,
the sampler never called, the output directory never created)."""

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
from conftest import ROOT

import das.privacy.accounting
import das.topdown.measure
from das.cli import main as das_main
from das.driver.run import run

FIXTURES = ROOT / "geography_fixtures"


@pytest.fixture
def spec_dir(tmp_path):
    for name in ("persons", "units"):
        shutil.copy(FIXTURES / "tiny" / f"{name}.csv", tmp_path / f"{name}.csv")
    (tmp_path / "spec.toml").write_text((ROOT / "specs/runs/tiny.toml").read_text()
                                        .replace("../../geography_fixtures/tiny/", ""))
    return tmp_path


@pytest.fixture
def no_noise(monkeypatch):
    """Record every accountant charge and every noise draw: a refusal must leave both empty."""
    calls = []
    original = das.privacy.accounting.PrivacyAccountant.charge

    def charge(self, *args, **kwargs):
        calls.append(("charge", args))
        return original(self, *args, **kwargs)

    def draw(*args, **kwargs):
        calls.append(("draw", args))
        raise AssertionError("noise drawn before the preflight passed")

    monkeypatch.setattr(das.privacy.accounting.PrivacyAccountant, "charge", charge)
    monkeypatch.setattr(das.topdown.measure, "discrete_gaussian", draw)
    return calls


def _spec(spec_dir: Path, old: str = "", new: str = "", extra: str = "") -> Path:
    text = (spec_dir / "spec.toml").read_text()
    if old:
        assert old in text
        text = text.replace(old, new)
    path = spec_dir / "bad.toml"
    path.write_text(text + extra)
    return path


def _refused(capsys, no_noise, argv, *expected) -> str:
    code = das_main(argv)
    err = capsys.readouterr().err
    assert code == 2, err
    for text in expected:
        assert text in err, err
    assert "Traceback" not in err
    assert no_noise == [], "the accountant was charged or noise drawn before the refusal"
    return err


STRATEGY_LINE = 'strategy = "pl94_six_level"'
CASES = {
    "rounding": dict(extra='\n[postprocess]\nrounding = "bogus"\n', expected=["rounding must be one of", "'bogus'"]),
    "solver": dict(extra='\n[postprocess]\nsolver = "NOSUCHSOLVER"\n',
                   expected=["unknown least-squares solver 'NOSUCHSOLVER'", "CLARABEL"]),
    "passes": dict(extra='\n[postprocess]\npasses = [["nosuchquery"]]\n', expected=["passes", "'nosuchquery'"]),
    "rho tiny": dict(old=STRATEGY_LINE, new=STRATEGY_LINE + '\nrho = "1e-40"',
                     expected=["[persons] rho = 1e-40", "noise variance"]),
    "rho 1e-18": dict(old=STRATEGY_LINE, new=STRATEGY_LINE + '\nrho = "1e-18"', expected=["[persons] rho = 1e-18", "raise rho"]),
    "rho huge": dict(old=STRATEGY_LINE, new=STRATEGY_LINE + '\nrho = "1e12"',
                     expected=["rho = 1e+12 is above 10", "--allow-large-rho"]),
    "rho inexact": dict(old=STRATEGY_LINE, new=STRATEGY_LINE + '\nrho = "0.12345678901234567890123"',
                        expected=["does not fit the NMF's int64 columns"]),
    "delta 2": dict(old='delta = "1e-10"', new='delta = "2"', expected=["delta must be strictly between 0 and 1"]),
    "area file missing": dict(extra='\n[geography]\nareas = { place = "places.parquet", town = "../towns.csv" }\n',
                              expected=["[geography] areas.place = 'places.parquet': no such file",
                                        "[geography] areas.town = '../towns.csv': no such file", "relative to the spec"]),
    "area file a directory": dict(extra='\n[geography]\nareas = { place = "." }\n',
                                  expected=["[geography] areas.place = '.': not a file"]),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_spec_is_refused_before_any_input_is_read(spec_dir, capsys, no_noise, monkeypatch, case):
    import das.driver.inputs

    def no_read(*args, **kwargs):
        raise AssertionError("an input file was read before the spec preflight passed")

    monkeypatch.setattr(das.driver.inputs, "read_inputs", no_read)
    c = CASES[case]
    spec = _spec(spec_dir, c.get("old", ""), c.get("new", ""), c.get("extra", ""))
    err = _refused(capsys, no_noise, ["run", str(spec), "--out", str(spec_dir / "out"), "--seed", "1"], *c["expected"])
    assert str(spec) in err  # where: the spec file
    assert not (spec_dir / "out").exists()


def test_an_area_file_that_is_a_symlink_loop_is_refused_as_one(spec_dir, capsys, no_noise):
    (spec_dir / "places.csv").symlink_to("places.csv")
    spec = _spec(spec_dir, extra='\n[geography]\nareas = { place = "places.csv" }\nspine = "optimized"\n')
    _refused(capsys, no_noise, ["run", str(spec), "--out", str(spec_dir / "out"), "--seed", "1"],
             "[geography] areas.place = 'places.csv': a symbolic link that reaches no file (a loop, or its target "
             "does not exist): expected a .parquet or .csv file")
    assert not (spec_dir / "out").exists()


def test_large_rho_runs_when_acknowledged(spec_dir):
    from das.driver.pipeline import Pipeline

    spec = _spec(spec_dir, STRATEGY_LINE, STRATEGY_LINE + '\nrho = "1000"')
    prep = Pipeline.prepare(spec, seed=1, allow_large_rho=True)
    assert prep.certificates["persons"].rho == 1000


@pytest.mark.parametrize("workers", ["0", "-3"])
def test_workers_must_be_positive(spec_dir, capsys, no_noise, workers):
    from das.core.errors import ArgumentError

    with pytest.raises(ArgumentError, match=f"workers= must be an integer of at least 1, got {int(workers)}"):
        run(spec_dir / "spec.toml", spec_dir / "out", seed=1, workers=int(workers), progress=False)
    assert no_noise == [] and not (spec_dir / "out").exists()
    with pytest.raises(SystemExit) as stopped:  # the command line refuses it while parsing
        das_main(["run", str(spec_dir / "spec.toml"), "--out", str(spec_dir / "out"), "--workers", workers])
    assert stopped.value.code == 2 and "argument --workers: expected an integer of at least 1" in capsys.readouterr().err


def test_unwritable_output_directory_is_refused_before_reading(spec_dir, capsys, no_noise):
    blocker = spec_dir / "a_file"
    blocker.write_text("not a directory")
    _refused(capsys, no_noise, ["run", str(spec_dir / "spec.toml"), "--out", str(blocker / "out"), "--seed", "1"],
             f"{blocker} is a file")
    _refused(capsys, no_noise, ["run", str(spec_dir / "spec.toml"), "--out", str(blocker), "--seed", "1"],
             f"output directory {blocker} is a file")


def test_two_persons_with_six_facilities_are_refused_before_measuring(spec_dir, capsys, no_noise):
    persons = pd.read_csv(spec_dir / "persons.csv", dtype=str)
    units = pd.read_csv(spec_dir / "units.csv", dtype=str)
    gq_blocks = units[units["RTYPE"] == "4"][["TABBLK", "GQTYPE_PL"]].values.tolist()
    keep = []
    for block, gqtype in gq_blocks[:2]:  # two GQ persons, each where a facility of their type is
        row = persons[(persons["TABBLK"] == block) & (persons["GQTYPE_PL"] == gqtype)].head(1)
        keep.append(row)
    pd.concat(keep).to_csv(spec_dir / "persons.csv", index=False)
    units.loc[units["RTYPE"] == "2", "HH_STATUS"] = "2"  # vacant: no household persons needed
    units.to_csv(spec_dir / "units.csv", index=False)
    n_pairs = len(units[units["RTYPE"] == "4"].drop_duplicates(["TABBLK", "GQTYPE_PL"]))
    _refused(capsys, no_noise, ["run", str(spec_dir / "spec.toml"), "--out", str(spec_dir / "out"), "--seed", "1"],
             f"state '44': {n_pairs} person(s) are needed to satisfy the 'hhgq' constraint",
             "published total population is 2", "before any noise")
    assert not (spec_dir / "out").exists()


def test_household_persons_against_occupied_units(spec_dir, capsys, no_noise):
    units = pd.read_csv(spec_dir / "units.csv", dtype=str)
    housing = units.index[units["RTYPE"] == "2"]
    units.loc[housing, "HH_STATUS"] = "1"  # every unit occupied: more than the block's household persons somewhere
    units.to_csv(spec_dir / "units.csv", index=False)
    _refused(capsys, no_noise, ["run", str(spec_dir / "spec.toml"), "--out", str(spec_dir / "out"), "--seed", "1"],
             "occupied housing unit(s) but")


def _empty_persons(spec_dir):
    header = (spec_dir / "persons.csv").read_text().splitlines()[0]
    (spec_dir / "persons.csv").write_text(header + "\n")


def test_an_empty_persons_file_with_facilities_is_refused_saying_which_rule(spec_dir, capsys, no_noise):
    _empty_persons(spec_dir)
    err = _refused(capsys, no_noise, ["run", str(spec_dir / "spec.toml"), "--out", str(spec_dir / "out"), "--seed", "1"])
    assert "facilit" in err or "household person" in err


def test_an_empty_persons_file_is_a_release_with_nobody(spec_dir):
    """Legal input: with vacant housing units only, a valid release of 0 persons."""
    import pandas as pd

    from das.driver.run import run

    _empty_persons(spec_dir)
    units = pd.read_csv(spec_dir / "units.csv", dtype=str)
    units[units["RTYPE"] == "2"].assign(HH_STATUS="2").to_csv(spec_dir / "units.csv", index=False)
    result = run(spec_dir / "spec.toml", spec_dir / "empty", seed=1, workers=1, progress=False)
    assert result.valid, result.manifest.validation.violations[:5]
    assert result.manifest.counts.persons == 0
    assert len(pd.read_parquet(spec_dir / "empty" / "mdf_persons.parquet")) == 0


def test_not_enough_disk_space_is_refused(spec_dir, capsys, no_noise, monkeypatch):
    import das.driver.preflight

    monkeypatch.setattr(das.driver.preflight, "BYTES_PER_ANSWER", 10**15)
    _refused(capsys, no_noise, ["run", str(spec_dir / "spec.toml"), "--out", str(spec_dir / "out"), "--seed", "1"],
             "not enough free space", "GB free")


def test_resume_of_a_complete_run_with_another_spec_is_refused(spec_dir, capsys):
    out = spec_dir / "out"
    assert run(spec_dir / "spec.toml", out, seed=1, progress=False).valid
    other = _spec(spec_dir, 'delta = "1e-10"', 'delta = "1e-9"')
    code = das_main(["run", str(other), "--resume", str(out)])
    assert code == 2 and "belongs to another run: the run spec differs" in capsys.readouterr().err
    assert das_main(["run", "--resume", str(out)]) == 0  # its own spec: nothing to do


def test_the_pool_starts_only_after_the_inputs_are_read(spec_dir, monkeypatch):
    import das.driver.inputs
    from das.driver import run as run_module
    order = []
    original_read, original_pool = das.driver.inputs.read_inputs, run_module.make_executor
    monkeypatch.setattr(das.driver.inputs, "read_inputs", lambda *a, **k: order.append("read") or original_read(*a, **k))
    monkeypatch.setattr(run_module, "make_executor", lambda *a, **k: order.append("pool") or original_pool(*a, **k))
    run(spec_dir / "spec.toml", spec_dir / "out", seed=1, progress=False)
    assert order == ["read", "pool"]
    manifest = json.loads((spec_dir / "out" / "manifest.json").read_text())
    assert manifest["status"] == "complete"


# ---------------------------------------------------------------------------------------------
# issue 24: the disk estimate counts every file a run writes


def test_a_disk_too_small_for_the_whole_release_is_refused_before_any_noise(spec_dir, capsys, no_noise, monkeypatch):
    import das.driver.preflight

    real = shutil.disk_usage

    def small(path):  # a 256 KiB file system: the probe, where the NMF and MDF alone fitted
        return real(path)._replace(free=256 * 1024)

    monkeypatch.setattr(das.driver.preflight.shutil, "disk_usage", small)
    _refused(capsys, no_noise, ["run", str(spec_dir / "spec.toml"), "--out", str(spec_dir / "out"), "--seed", "1"],
             "not enough free space", "(NMF, MDF, tables, manifest, checkpoints)", "has 0.26 MB free")
    assert not (spec_dir / "out").exists()


def test_the_disk_estimate_covers_every_file_a_run_writes_with_its_checkpoints(spec_dir, monkeypatch):
    import das.driver.preflight
    import das.frame.checkpoint

    estimates, peak = [], [0]
    original_estimate, original_remove = das.driver.preflight.estimate_space, shutil.rmtree

    def recorded(*args, **kwargs):
        estimates.append(original_estimate(*args, **kwargs))
        return estimates[-1]

    def removing(path, *args, **kwargs):  # the checkpoints go when the run completes: the peak is just before
        peak[0] = max(peak[0], sum(f.stat().st_size for f in (spec_dir / "out").rglob("*") if f.is_file()))
        return original_remove(path, *args, **kwargs)

    monkeypatch.setattr(das.driver.preflight, "estimate_space", recorded)
    monkeypatch.setattr(das.frame.checkpoint.shutil, "rmtree", removing)
    spec = _spec(spec_dir, extra="\n[output]\npl94171 = true\n")
    assert run(spec, spec_dir / "out", seed=1, workers=1, progress=False).valid
    written = sum(f.stat().st_size for f in (spec_dir / "out").rglob("*") if f.is_file())
    assert (spec_dir / "out" / "pl94171").is_dir() and written > 400_000
    assert len(estimates) == 1 and max(written, peak[0]) <= estimates[0].needed <= 6 * max(written, peak[0])
