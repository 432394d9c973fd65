"""The run directory: the manifest's named fields round-trip, and one reader says what is wrong."""

import json

import pytest

from das.core import atomic
from das.frame.manifest import Manifest
from das.frame.records import RunDirError, ValidationRecord
from das.frame.rundir import RunDir
from das.privacy.accounting import allocate, certificate
from das.privacy.strategy import load_strategy

FIVE = ("nation", "state", "county", "tract", "block")
STRATEGY = load_strategy("pl94_five_level")
CERTIFICATE = certificate(STRATEGY, allocate(STRATEGY), None, FIVE, schema_name="pl94_persons",
                          randomness_private=False).to_dict()
MINIMAL = {"spec_name": "tiny", "status": "running", "levels": list(FIVE),
           "persons": {"schema": "pl94_persons", "strategy": "pl94_five_level"}, "privacy": {"persons": CERTIFICATE}}


def test_a_manifest_round_trips_with_keys_this_version_does_not_know(tmp_path):
    data = {**MINIMAL, "das_version": "0.x", "validation": {"valid": True, "checks": ["ok x"], "violations": []},
            "a_future_key": [1, 2]}
    manifest = Manifest.from_dict(data)
    assert manifest.validation == ValidationRecord(True, ("ok x",), ()) and manifest.extra == {"a_future_key": [1, 2]}
    assert manifest.certificate("persons").to_dict() == CERTIFICATE
    assert manifest.schema("persons") == "pl94_persons" and manifest.releases() == ["persons"]
    run_dir = RunDir(tmp_path)
    run_dir.write(manifest)
    again = run_dir.read()
    assert again.to_dict() == manifest.to_dict()
    written = json.loads(run_dir.manifest_path.read_text())
    assert all(written[k] == v for k, v in data.items()) and written["kind"] == "das run"
    assert "error" not in again.to_dict()  # fields not set yet are left out
    assert [p.name for p in tmp_path.iterdir()] == ["manifest.json"]  # no .partial left behind


@pytest.mark.parametrize("content, expected", [
    (None, "no manifest.json"),
    ("{not json", "is not readable JSON"),
    ("[1, 2]", "not a JSON object"),
    (json.dumps({"spec_name": "x"}), "no status, levels, persons, privacy"),
])
def test_the_reader_says_what_is_wrong(tmp_path, content, expected):
    if content is not None:
        (tmp_path / "manifest.json").write_text(content)
    with pytest.raises(RunDirError, match=expected):
        RunDir(tmp_path).read()


@pytest.mark.parametrize(("field", "value", "message"), [
    ("status", "bogus", "field status: 'bogus' is not one of"),
    ("holds", 5, "field holds: expected a list"),
    ("holds", ["x", 1], "field holds: expected a list of strings"),
    ("counts", {"persons": "many", "blocks": 1}, "counts: field persons: expected an integer"),
    ("levels", "nation", "field levels: expected a list"),
    ("seed", 1.5, "field seed: expected an integer"),
    ("private", "no", "field private: expected true or false"),
    ("persons", {"strategy": "x"}, "persons: field schema is missing"),
    ("privacy", {"persons": {**CERTIFICATE, "rho": 0.5}}, "privacy.persons.rho: expected an exact value"),
    ("outputs", {"mdf_persons.parquet": 7}, "field outputs.mdf_persons.parquet: expected a string"),
    ("validation", {"valid": "yes", "checks": [], "violations": []}, "validation: field valid: expected true or false"),
    ("invariants", {"total_population": {"state": {"44": 1.5}}}, "total_population.state: expected geocode -> integer"),
])
def test_an_edited_field_is_refused_naming_it(field, value, message):
    with pytest.raises(RunDirError, match=message):
        Manifest.from_dict({**MINIMAL, field: value})


def test_a_missing_directory_and_an_unfinished_run_are_refused_where_a_finished_one_is_needed(tmp_path):
    with pytest.raises(RunDirError, match="it does not exist"):
        RunDir(tmp_path / "absent").read()
    RunDir(tmp_path).write(Manifest.from_dict(MINIMAL))
    with pytest.raises(RunDirError, match="not complete .*'running'"):
        RunDir(tmp_path).read_complete()
    assert RunDir(tmp_path).is_das_run()


def test_a_failed_write_leaves_the_previous_file_whole(tmp_path):
    path = tmp_path / "a.txt"
    atomic.write_text(path, "old")
    with pytest.raises(RuntimeError), atomic.replacing(path) as tmp:
        tmp.write_text("half of the new")
        raise RuntimeError("disk trouble")
    assert path.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["a.txt"]


def test_a_directory_is_replaced_whole(tmp_path):
    target = tmp_path / "tables"
    target.mkdir()
    (target / "stale.parquet").write_text("x")
    with atomic.replacing(target, directory=True) as tmp:
        (tmp / "P1.parquet").write_text("y")
        assert not (target / "P1.parquet").exists()  # nothing of the new directory shows before it is complete
    assert sorted(p.name for p in target.iterdir()) == ["P1.parquet"]
