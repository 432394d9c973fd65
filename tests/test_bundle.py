"""The release bundle apart from the operator's files: nothing from the inputs is published (what
--overwrite may delete is das.frame.outdir's: tests/test_outdir.py)."""

import json
import os
import stat
import tomllib

import pytest
from conftest import ROOT, TINY, cli_refused

from das.core.errors import SpecError
from das.frame import bundle
from das.frame.pinned import SECTION as SPECS
from das.frame.rundir import RunDir
from das.mechanisms import synthesize

SECRET = "/secret/cef/persons.parquet"
REST = '[persons]\nschema = "pl94_persons"\nstrategy = "pl94_six_level"  # a comment outside [input]\n'
# every way TOML can write an [input] table (and a comment inside it): none may publish a path or a comment
INPUT_FORMS = {
    "header": f'[input]\npersons = "{SECRET}"\nunits = "u/units.csv"\n\n{REST}',
    "inline table": f'input = {{ persons = "{SECRET}", units = "u/units.csv" }}\n{REST}',
    "dotted keys": f'input.persons = "{SECRET}"\ninput.units = "u/units.csv"\n{REST}',
    "quoted header": f'["input"]\npersons = "{SECRET}"\nunits = "u/units.csv"\n{REST}',
    "literal quoted header": f"[ 'input' ]\npersons = '{SECRET}'\nunits = 'u/units.csv'\n{REST}",
    "quoted keys": f'[input]\n"persons" = "{SECRET}"\n\'units\' = "u/units.csv"\n{REST}',
    "comment inside": f'[input]\n# the extract is at /secure/cef_2020/\npersons = "{SECRET}"  # {SECRET}\n'
                      f'units = "u/units.csv"\n{REST}',
    "multi-line string": f'[input]\npersons = """\n{SECRET}"""\nunits = \'\'\'u/units.csv\'\'\'\n{REST}',
    "sub-table": f'[input]\npersons = "{SECRET}"\nunits = "u/units.csv"\n[input.more]\nold = "/secure/old.csv"\n{REST}',
    "after the other tables": f'{REST}\n[input]\npersons = "{SECRET}"\nunits = "u/units.csv"\n',
    "array of tables and unicode keys": f'[[notes]]\n"clé ünïcode" = "Perry – AL"\n[[notes]]\nx = 1\n'
                                        f'[input]\npersons = "{SECRET}"\nunits = "u/units.csv"\n{REST}',
}


@pytest.mark.parametrize("form", sorted(INPUT_FORMS))
def test_the_published_spec_has_no_input_path_and_no_comment_whatever_its_form(form):
    text = INPUT_FORMS[form]
    public = bundle.public_spec_text(text)
    assert "secret" not in public and "secure" not in public and "u/units.csv" not in public and "#" not in public
    assert public.count(bundle.REDACTED) == 2
    parsed, original = tomllib.loads(public), tomllib.loads(text)
    assert parsed["input"] == {"persons": bundle.REDACTED, "units": bundle.REDACTED}
    assert {k: v for k, v in parsed.items() if k not in ("input", SPECS)} == {k: v for k, v in original.items() if k != "input"}
    assert sorted(parsed[SPECS]) == ["schemas", "strategies", "tables"]  # the specs it names, pinned (tests/test_pinned.py)
    assert bundle.public_spec_text(public) == public  # canonical: publishing the published text changes nothing


@pytest.mark.parametrize("text", [
    f'input = "{SECRET}"\n{REST}',  # [input] not a table
    f'description = "from {SECRET}"\n[input]\npersons = "{SECRET}"\n{REST}',  # the path also outside [input]
    f'[input]\npersons = "{SECRET}"\n[notes]\n"{SECRET}" = 1\n{REST}',  # ... or as a key
    '[input\npersons = "x"\n',  # not TOML
])
def test_a_spec_that_cannot_be_redacted_is_refused(text):
    with pytest.raises(SpecError, match="redacted"):
        bundle.public_spec(text)


AREAS = '[geography]\nareas = { place = "/secret/geo/places.parquet", town = "towns.csv" }  # from /secret\nspine = "optimized"\n'


@pytest.mark.parametrize("where", ["after", "before"])
def test_the_published_spec_keeps_the_area_types_and_spine_but_not_the_area_paths(where):
    text = INPUT_FORMS["header"] + AREAS if where == "after" else AREAS + INPUT_FORMS["header"]
    public = bundle.public_spec_text(text)
    assert "secret" not in public and "towns.csv" not in public and "#" not in public
    parsed = tomllib.loads(public)
    assert parsed["geography"] == {"areas": {"place": bundle.REDACTED, "town": bundle.REDACTED}, "spine": "optimized"}
    assert parsed["input"] == {"persons": bundle.REDACTED, "units": bundle.REDACTED}
    assert bundle.public_spec_text(public) == public


def test_a_published_spec_with_areas_is_still_a_run_spec():
    from das.driver.runspec import RunSpecFile
    from das.model.specfile import check

    text = (ROOT / "specs/runs/tiny.toml").read_text() + "\n" + AREAS
    parsed = tomllib.loads(bundle.public_spec_text(text))
    published = check({k: v for k, v in parsed.items() if k != SPECS}, RunSpecFile, "published")  # its pinned specs aside
    assert sorted(published.geography.areas) == ["place", "town"] and published.geography.spine == "optimized"


@pytest.mark.parametrize("text", [
    f'{REST}[geography]\nareas = "/secret/places.csv"\n',  # areas not a table
    f'description = "places from /secret/geo/places.parquet"\n{REST}{AREAS}',  # an area path also elsewhere
])
def test_a_spec_whose_area_paths_cannot_be_redacted_is_refused(text):
    with pytest.raises(SpecError, match="redacted"):
        bundle.public_spec(text)


def test_das_run_refuses_an_unredactable_spec_before_anything_is_read_or_written(tmp_path, capsys):
    spec = tmp_path / "spec.toml"
    persons = (TINY / "persons.csv").as_posix()
    text = (ROOT / "specs/runs/tiny.toml").read_text().replace("../../geography_fixtures/tiny/persons.csv", persons)
    spec.write_text(text.replace('name = "tiny"', f'name = "tiny"\ndescription = "read from {persons}"', 1)
                    .replace('\ndescription = "Tiny', '\n# description = "Tiny', 1))
    message = cli_refused(["run", str(spec), "--out", str(tmp_path / "out"), "--seed", "1"], capsys)
    assert "cannot be redacted" in message and not (tmp_path / "out").exists()


def test_a_release_publishes_the_redacted_canonical_spec(tmp_path):
    spec = tmp_path / "spec.toml"
    text = (ROOT / "specs/runs/tiny.toml").read_text()
    folder = (TINY).as_posix()
    start, end = text.index("[input]"), text.index("[persons]")
    inline = f'input = {{ persons = "{folder}/persons.csv", units = "{folder}/units.csv" }}  # from {folder}\n'
    spec.write_text(inline + text[:start] + text[end:])
    out = synthesize(spec, "flat", tmp_path / "out", seed=1)
    manifest = json.loads((out / "manifest.json").read_text())
    published = (out / "manifest.json").read_text() + (out / "mdf_persons.parquet").read_bytes().decode("latin-1")
    assert folder not in published and "#" not in manifest["spec_text"]
    assert manifest["spec_text"] == bundle.public_spec_text(spec.read_text())
    assert manifest["spec_sha256"] == bundle.spec_digest(manifest["spec_text"])


def test_keyed_fingerprints_match_only_the_same_bytes_under_the_same_key(tmp_path):
    path = tmp_path / "persons.csv"
    path.write_bytes(b"EPNUM\n1\n")
    key, other = bundle.new_key(), bundle.new_key()
    first = bundle.keyed_fingerprint(key, path)
    assert bundle.keyed_fingerprint(key, path) == first
    assert bundle.keyed_fingerprint(other, path) != first  # a published digest could confirm a guess; a keyed one cannot
    path.write_bytes(b"EPNUM\n2\n")
    assert bundle.keyed_fingerprint(key, path) != first
    assert bundle.keyed_fingerprint(key, tmp_path / "absent.csv") == {"": "missing"}


def test_the_key_is_readable_by_its_owner_only(tmp_path):
    bundle.write_operator(tmp_path, {"spec_path": "s.toml", "fingerprint": {}}, bundle.new_key())
    mode = stat.S_IMODE(os.stat(RunDir(tmp_path).key_file).st_mode)
    assert mode == 0o600
    record, key = bundle.read_operator(tmp_path)
    assert record["spec_path"] == "s.toml" and len(key) == 32
