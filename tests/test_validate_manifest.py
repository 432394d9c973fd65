"""The manifest held to das/frame/published.py (das.validate.manifest): a field it does not declare, at any depth, or of
another type than declared, and a count the published files contradict, each fail `das validate` without a key
(rc 1), naming the field; the untouched releases of `das run` and `das synth` pass."""

import io
import json
import shutil

import pytest

from das.cli import main as das_main
from das.driver.run import run
from das.mechanisms import synthesize
from das.validate import main, validate_run
from das.validate.manifest import COUNTS_CHECK, FIELDS_CHECK


@pytest.fixture(scope="module")
def topdown(tmp_path_factory):
    """`das run tiny --seed 1`."""
    return run("tiny", tmp_path_factory.mktemp("run") / "run", seed=1, workers=1, progress=False).out_dir


@pytest.fixture(scope="module")
def flat(tmp_path_factory):
    """`das synth tiny --mechanism flat --seed 1`."""
    return synthesize("tiny", "flat", tmp_path_factory.mktemp("synth") / "flat", seed=1)


def edited(release, tmp_path, change):
    """An unsigned copy of a release (a signature would not verify: the point is what holds without a key) with
    its manifest changed by `change`."""
    out = tmp_path / "edited"
    shutil.copytree(release, out)
    for signed in ("manifest.sig", "release.pub"):
        (out / signed).unlink()
    manifest = json.loads((out / "manifest.json").read_text())
    change(manifest)
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2))
    return out


def refused(out, check: str, named: str) -> None:
    """`das validate OUT` (no key) exits 1, the check failing with the field named."""
    printed = io.StringIO()
    assert main(str(out), out=printed) == 1
    assert f"FAIL {check}" in printed.getvalue()
    assert f"{check}: {named}" in printed.getvalue(), printed.getvalue()


@pytest.mark.parametrize("command", ["run", "synth"])
def test_the_untouched_releases_pass(topdown, flat, capsys, command):
    out = topdown if command == "run" else flat
    assert das_main(["validate", str(out)]) == 0
    printed = capsys.readouterr().out
    assert f"ok  {FIELDS_CHECK}" in printed and f"ok  {COUNTS_CHECK}" in printed


@pytest.mark.parametrize("change, named", [
    (lambda m: m.update(operator="alice"), "operator: a field das/frame/published.py does not declare"),
    (lambda m: m["levels_report"]["persons"][3].update(extra=1),
     "levels_report.persons[3].extra: a field das/frame/published.py does not declare"),
    (lambda m: m["counts"].update(nonzero_bins=1322), "counts.nonzero_bins: a field das/frame/published.py does not declare"),
    (lambda m: m["privacy"]["persons"]["by_level"][1]["queries"][0].update(seconds=0.1),
     "privacy.persons.by_level[1].queries[0].seconds: a field das/frame/published.py does not declare"),
    (lambda m: m["levels_report"]["persons"][0]["l2_certificate"].update(objective="3832"),
     "levels_report.persons[0].l2_certificate.objective: expected a finite number, got \"3832\""),
    (lambda m: m["engine"].update(workers=-2), "engine.workers: expected an integer >= 0, got -2"),
    (lambda m: m["outputs"].update({"mdf_persons.parquet": "not a digest"}),
     "outputs.mdf_persons.parquet: expected a SHA-256 (64 hex digits)"),
])
def test_an_undeclared_field_or_one_of_the_wrong_type_fails_naming_it(topdown, tmp_path, change, named):
    refused(edited(topdown, tmp_path, change), FIELDS_CHECK, named)


def test_an_extra_field_of_a_synthetic_release_fails_too(flat, tmp_path):
    out = edited(flat, tmp_path, lambda m: m["mechanism"].update(bins_noised=1322))
    refused(out, FIELDS_CHECK, "mechanism.bins_noised: a field das/frame/published.py does not declare")


@pytest.mark.parametrize("change, named", [
    (lambda m: m["counts"].update(persons=m["counts"]["persons"] + 1), "counts.persons: 146, the persons MDF has 145 rows"),
    (lambda m: m["counts"].update(persons=m["counts"]["persons"] - 1), "counts.persons: 144, the persons MDF has 145 rows"),
    (lambda m: m["counts"].update(blocks=m["counts"]["blocks"] + 1), "counts.blocks: 13, the units MDF has 12 blocks"),
    (lambda m: m["levels_report"]["units"][4].update(parents=4),
     "levels_report.units[4].parents: 4, the tract level has 3 geounits"),
    (lambda m: m["levels_report"]["persons"][0].update(parents=2),
     "levels_report.persons[0].parents: 2, the first level has 1 parent"),
    (lambda m: m["levels_report"]["persons"][5].update(failsafe_events=1),
     "levels_report.persons[5].failsafe_events: 1, failsafe_events lists 0 at persons/block"),
])
def test_a_count_the_files_contradict_fails_naming_it(topdown, tmp_path, change, named):
    refused(edited(topdown, tmp_path, change), COUNTS_CHECK, named)


def test_a_synthetic_releases_persons_are_its_mdfs_rows(flat, tmp_path):
    persons = json.loads((flat / "manifest.json").read_text())["counts"]["persons"]
    out = edited(flat, tmp_path, lambda m: m["counts"].update(persons=persons + 1))
    refused(out, COUNTS_CHECK, f"counts.persons: {persons + 1}, the persons MDF has {persons} rows")
    out = edited(flat, tmp_path / "blocks", lambda m: m["counts"].update(blocks=0))
    assert any(v.startswith(f"{COUNTS_CHECK}: counts.blocks: 0, fewer than the") for v in validate_run(out).violations)


def test_a_validation_record_that_contradicts_itself_fails(topdown, tmp_path):
    def change(m):
        m["validation"]["violations"] = ["table P1 equals the MDF recount: a cell differs"]
    refused(edited(topdown, tmp_path, change), COUNTS_CHECK, "validation.valid: true, with 1 violation(s)")
