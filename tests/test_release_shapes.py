"""Every shape of release a run spec may ask for is valid by its own validator, or refused before any draw
(issue 41): persons only (no [units]) with six and five levels, on tiny and Grand Isle, with declared areas,
partitioned, and through `das run`, `das measure`, `das synth` and the API; units only is refused.

A release without units publishes the invariants its persons release is post-processed with, as a release
with units does: its units MDF lists every housing unit (HH_STATUS 0: its occupancy is not released) and GQ
facility of every block (das.io.mdf.unit_mdf). That is its block universe: the NMF, the facility rules and
the invariants against the inputs are checked on it."""

import json
import re
from pathlib import Path

import pandas as pd
import pytest
from conftest import FIXTURES, ROOT, TINY, cli_refused

import das.topdown.measure
from das.cli import main as das_main
from das.core.errors import SpecError
from das.driver.run import run
from das.validate import validate_run
from das.validate.records import UNITS_CODES, check_unit_records
from das.validate.report import Findings

SEED = 5
SIX = ["nation", "state", "county", "tract", "block_group", "block"]
FIVE = ["nation", "state", "county", "tract", "block"]
UNITS_SECTION = '[units]\nschema = "h1_units"\nstrategy = "h1_units"\n'
EVERY_CHECK = ("NMF: exactly the certified measurements", "MDF persons: in blocks of the release universe",
               "housing units per block invariant", "GQ facilities per block invariant")


def persons_only(folder: Path, name: str = "tiny", *, levels=SIX, extra: str = "") -> Path:
    """A shipped spec without its [units] section (levels: six, or five with the five-level strategy)."""
    text = (ROOT / "specs" / "runs" / f"{name}.toml").read_text()
    assert UNITS_SECTION in text
    text = text.replace(UNITS_SECTION, "").replace("../../geography_fixtures", str(FIXTURES))
    if levels == FIVE:
        text = text.replace(f"levels = {json.dumps(SIX)}", f"levels = {json.dumps(FIVE)}")
        text = text.replace('strategy = "pl94_six_level"', 'strategy = "pl94_five_level"')
    assert f"levels = {json.dumps(levels)}" in text
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}_persons_only.toml"
    path.write_text(text + extra)
    return path


def _input_units(path: Path) -> pd.DataFrame:
    units = pd.read_csv(path, dtype=str) if path.suffix == ".csv" else pd.read_parquet(path).astype(str)
    return units.assign(geocode=units.TABBLKST + units.TABBLKCOU + units.TABTRACTCE + units.TABBLK)


def assert_valid_persons_only(out: Path, units_inputs: list[Path]) -> None:
    """The release passed its own validation (as recorded, and again now, with the operator's inputs), holds
    no units release, and its units MDF lists exactly the inputs' housing units and facilities, block by block."""
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["validation"]["valid"], manifest["validation"]["violations"]
    assert manifest["units"] is None and set(manifest["privacy"]) == {"persons"}
    report = validate_run(out)
    assert report.ok, report.violations
    for check in EVERY_CHECK:  # what a persons-only release is checked for, and passes
        assert f"ok  {check}" in report.checks, report.checks
    assert not (out / "nmf" / "units").exists() and not (out / "tables" / "H1.parquet").exists()
    mdf = pd.read_parquet(out / "mdf_units.parquet").astype({"RTYPE": int, "GQTYPE_PL": int, "HH_STATUS": int})
    assert (mdf.HH_STATUS == 0).all()  # no occupancy released
    mdf["geocode"] = mdf.TABBLKST.astype(str) + mdf.TABBLKCOU.astype(str) + mdf.TABTRACTCE.astype(str) + \
        mdf.TABBLK.astype(str)
    given = pd.concat([_input_units(p) for p in units_inputs]).astype({"RTYPE": int, "GQTYPE_PL": int})
    pairs = [f[["geocode", "RTYPE", "GQTYPE_PL"]].sort_values(["geocode", "RTYPE", "GQTYPE_PL"]).reset_index(drop=True)
             for f in (mdf, given)]
    assert pairs[0].equals(pairs[1])


# ---------------------------------------------------------------------------------------------
# Persons only: each shape on the shipped fixtures


@pytest.mark.parametrize("levels", [SIX, FIVE], ids=["six_levels", "five_levels"])
def test_a_persons_only_release_of_tiny_is_valid(levels, tmp_path, capsys):
    spec = persons_only(tmp_path, levels=levels)
    out = tmp_path / "run"
    assert das_main(["run", str(spec), "--seed", str(SEED), "--workers", "1", "--out", str(out)]) == 0
    printed = capsys.readouterr()
    assert "validation: PASSED" in printed.out and "against the inputs (operator only): PASSED" in printed.out
    assert json.loads((out / "manifest.json").read_text())["levels"] == levels
    assert_valid_persons_only(out, [TINY / "units.csv"])
    assert das_main(["validate", str(out)]) == 0  # anyone's das validate, from the published files alone


def test_a_persons_only_release_of_grand_isle_is_valid(tmp_path):
    """Grand Isle has no group quarters: the units MDF of the old code was empty, 0 geounits at every level."""
    result = run(persons_only(tmp_path, "vt_grand_isle"), tmp_path / "run", seed=SEED, workers=1, progress=False)
    assert result.valid, result.manifest.validation.violations
    assert_valid_persons_only(result.out_dir, [FIXTURES / "vt_grand_isle" / "units.parquet"])


def test_a_persons_only_release_with_declared_areas_is_valid(tmp_path):
    from test_spine import _area_frames, _blocks

    for name, frame in _area_frames(_blocks()).items():
        frame.to_csv(tmp_path / f"{name}.csv", index=False)
    areas = '\n[geography]\nareas = { place = "place.csv", town = "town.csv" }\nspine = "optimized"\n'
    result = run(persons_only(tmp_path, "vt_grand_isle", extra=areas), tmp_path / "run", seed=SEED, workers=1,
                 progress=False)
    assert result.valid, result.manifest.validation.violations
    assert result.manifest.spine is not None and (result.out_dir / "spine.parquet").is_file()
    assert_valid_persons_only(result.out_dir, [FIXTURES / "vt_grand_isle" / "units.parquet"])


def test_a_persons_only_partitioned_release_is_valid(tmp_path):
    """One file per state (the partitioned driver): each state's part lists its invariants, assembled."""
    from test_partitioned import FIXTURES as STATE_FIXTURES
    from test_partitioned import STATES, two_states

    spec = two_states(tmp_path / "inputs")
    text = spec.read_text().replace(UNITS_SECTION, "").replace("\n[output]\npl94171 = true\n", "\n")
    assert "[units]" not in text and "pl94171" not in text  # PL 94-171 files need a units release (H1)
    spec.write_text(text)
    result = run(spec, tmp_path / "run", seed=SEED, workers=1, progress=False)
    assert result.valid, result.manifest.validation.violations
    assert_valid_persons_only(result.out_dir, [STATE_FIXTURES / f / "units.parquet" for f in STATES.values()])


def test_the_api_makes_a_valid_persons_only_release_from_a_dict_spec(tmp_path):
    import das
    from das.model.specfile import load_toml

    data = load_toml(ROOT / "specs" / "runs" / "tiny.toml")
    del data["units"]
    data["input"] = {k: str(TINY / f"{k}.csv") for k in ("persons", "units")}
    release = das.run(data, out=tmp_path / "run", seed=SEED, workers=1, progress=False)
    assert release.validate().ok and set(release.tables) == {"P1", "P2", "P3", "P4", "P5"}
    assert_valid_persons_only(tmp_path / "run", [TINY / "units.csv"])


def test_das_measure_and_das_synth_take_a_persons_only_spec(tmp_path, capsys):
    spec = persons_only(tmp_path)
    assert das_main(["measure", str(spec), "--seed", str(SEED), "--out", str(tmp_path / "m")]) == 0
    manifest = json.loads((tmp_path / "m" / "manifest.json").read_text())
    assert manifest["status"] == "measured" and manifest["units"] is None
    assert manifest["nmf"] and all(n.startswith("nmf/persons/") for n in manifest["nmf"])
    assert das_main(["synth", str(spec), "--mechanism", "flat", "--rho", "1", "--seed", str(SEED),
                     "--out", str(tmp_path / "s")]) == 0
    assert das_main(["validate", str(tmp_path / "s")]) == 0


def test_das_tables_refuses_pl94171_files_of_a_release_without_units(tmp_path, capsys):
    """The PL 94-171 files carry H1; a persons-only release publishes no occupancy: refused, saying so."""
    out = run(persons_only(tmp_path), tmp_path / "run", seed=SEED, workers=1, progress=False).out_dir
    for fmt in ("pl94171", "parquet"):
        printed = cli_refused(["tables", str(out), "--format", fmt, "--out", str(tmp_path / fmt)], capsys)
        assert f"{out} has no units release" in printed and "table H1" in printed
        assert not (tmp_path / fmt).exists()


def test_the_validator_holds_a_persons_only_releases_housing_units_to_hh_status_0():
    """With no units schema, a housing unit's HH_STATUS is 0 (occupancy not released): 1 or 2 would be one."""
    units = pd.DataFrame({"RTYPE": [2, 2, 4], "GQTYPE_PL": [0, 0, 3], "HH_STATUS": [0, 1, 0]})
    found = Findings()
    check_unit_records(units, None, found)
    listed, count = found.problems[UNITS_CODES]
    assert count == 1 and listed == ["row 2: 1 (expected HH_STATUS 0 for a housing unit of a release without units "
                                     "(its occupancy is not released))"]


# ---------------------------------------------------------------------------------------------
# Units only: refused before anything is read or drawn


@pytest.fixture
def units_only(tmp_path, monkeypatch) -> Path:
    """tiny's spec without its [persons] section; drawing noise fails the test."""
    def draw(*args, **kwargs):
        raise AssertionError("noise drawn for a spec that must be refused")

    monkeypatch.setattr(das.topdown.measure, "discrete_gaussian", draw)
    text = (ROOT / "specs" / "runs" / "tiny.toml").read_text().replace("../../geography_fixtures", str(FIXTURES))
    text, found = re.subn(r'(?m)^\[persons\]\nschema = "pl94_persons"\nstrategy = "pl94_six_level".*\n', "", text)
    assert found == 1 and UNITS_SECTION in text
    (tmp_path / "units_only.toml").write_text(text)
    return tmp_path / "units_only.toml"


@pytest.mark.parametrize("command", [["run", "--seed", "1"], ["measure", "--seed", "1"],
                                     ["synth", "--mechanism", "flat", "--seed", "1"]])
def test_a_units_only_spec_is_refused_before_any_draw(units_only, command, capsys):
    out = units_only.parent / "out"
    printed = cli_refused([command[0], str(units_only), *command[1:], "--out", str(out)], capsys)
    assert f"{units_only}: missing section [persons]" in printed and "no units-only release" in printed
    assert not out.exists()


def test_the_api_refuses_a_units_only_spec(units_only):
    import das

    with pytest.raises(SpecError, match=re.escape("missing section [persons]")):
        das.run(units_only, out=units_only.parent / "out", seed=1, progress=False)
    assert not (units_only.parent / "out").exists()


def test_the_units_mdf_of_a_release_without_units_keeps_the_row_order_of_one_with_units():
    """Block-major, a block's housing units then its facilities: a reader of either sees the same records."""
    from das.io import mdf as mdf_io
    from das.io.microdata import read_inputs
    from das.model.schema import load_schema

    h1 = load_schema("h1_units")
    inputs = read_inputs(TINY / "persons.csv", TINY / "units.csv", load_schema("pl94_persons"), h1)
    blocks, inventory = inputs.inventory.blocks, inputs.inventory
    both = mdf_io.unit_mdf(h1, blocks, inputs.unit_histograms, inventory.gq_facilities).to_pandas()
    alone = mdf_io.unit_mdf(h1, blocks, None, inventory.gq_facilities, housing_units=inventory.housing_units).to_pandas()
    columns = ["TABBLKST", "TABBLKCOU", "TABTRACTCE", "TABBLKGRPCE", "TABBLK", "RTYPE", "GQTYPE_PL"]
    assert alone[columns].astype(str).equals(both[columns].astype(str))
    assert set(both.HH_STATUS[both.RTYPE == 2]) == {1, 2} and (alone.HH_STATUS == 0).all()
    assert (alone.RTYPE == 2).sum() == inventory.housing_units.sum() > 0
