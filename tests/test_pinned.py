"""The published spec pins every spec it names (das.frame.pinned): a release is validated from its own bytes,
whatever the files it was made from say later, on a machine that never had them."""

import json
import sys
import tomllib

import pytest
from conftest import ROOT, TINY

import das.model.schema
from das.core.errors import SpecError
from das.frame import bundle, pinned
from das.frame.rundir import RunDir
from das.validate import validate_run


def _spec_naming(tmp_path, strategy: str) -> str:
    """tiny's run spec, its inputs by absolute path and its persons strategy `strategy`."""
    text = (ROOT / "specs/runs/tiny.toml").read_text().replace("../../geography_fixtures/tiny", TINY.as_posix())
    return text.replace('strategy = "pl94_six_level"', f'strategy = "{strategy}"')


@pytest.fixture(scope="module")
def release_by_path(tmp_path_factory):
    """A seeded tiny release whose persons strategy was a file in a directory of its own (a copy of a shipped one)."""
    import das

    home = tmp_path_factory.mktemp("home")
    strategy = home / "my_strategy.toml"
    strategy.write_text((ROOT / "specs/strategies/pl94_six_level.toml").read_text()
                        .replace('name = "pl94_six_level"', "# named by its file"))
    spec = home / "spec.toml"
    spec.write_text(_spec_naming(home, strategy.as_posix()))
    release = das.run(spec, out=tmp_path_factory.mktemp("out") / "run", seed=1, progress=False)
    assert release.valid
    return release.path, home, strategy


def _public_bytes(run: RunDir) -> bytes:
    manifest = run.read()
    names = ["manifest.json", *manifest.listed(), *(p.name for p in run.signature_files())]
    return b"".join((run.path / name).read_bytes() for name in names)


def test_a_strategy_given_by_path_is_pinned_by_name_and_no_path_is_published(release_by_path):
    out, home, strategy = release_by_path
    run = RunDir(out)
    manifest = run.read()
    assert home.as_posix().encode() not in _public_bytes(run)
    assert manifest.persons.strategy == "my_strategy"  # the file's stem: the strategy has no name of its own
    spec = tomllib.loads(manifest.spec_text)
    assert spec["persons"]["strategy"] == "my_strategy"
    entry = spec[pinned.SECTION]["strategies"]["my_strategy"]
    assert entry["sha256"] == pinned.digest(entry["text"])
    assert tomllib.loads(entry["text"]) == tomllib.loads(strategy.read_text())  # its canonical text: no comment
    assert "#" not in entry["text"]


def test_the_release_validates_after_its_strategy_file_is_edited_then_deleted(release_by_path):
    out, _, strategy = release_by_path
    original = strategy.read_text()
    try:
        strategy.write_text(original.replace("[levels.nation]", "[levels.nowhere]"))  # another strategy now
        assert validate_run(out, use_operator=False).ok
        strategy.unlink()
        report = validate_run(out, use_operator=False)
        assert report.ok, report.violations
    finally:
        strategy.write_text(original)


def test_the_validator_reads_no_spec_file_at_all(release_by_path, monkeypatch):
    """On a machine without the files (not even das's shipped specs) the certificate is recomputed."""
    def nowhere(name_or_path, kind):
        raise SpecError(f"no {kind} spec {name_or_path!r} on this machine")

    original = das.model.schema.resolve_spec
    for module in [m for name, m in list(sys.modules.items())
                   if name.startswith("das") and getattr(m, "resolve_spec", None) is original]:
        monkeypatch.setattr(module, "resolve_spec", nowhere)  # every module that finds spec files by name or path
    pinned.schema.cache_clear(), pinned.strategy.cache_clear(), pinned.tables.cache_clear()
    das.model.schema._load_schema.cache_clear()
    report = validate_run(release_by_path[0], use_operator=False)
    assert report.ok, report.violations
    assert any("recomputed from its spec" in line for line in report.checks)


def _tampered(out, tmp_path, change) -> RunDir:
    """A copy of the release whose pinned persons strategy is changed by `change` (text -> text)."""
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(out, copy, ignore=shutil.ignore_patterns("operator"))
    data = json.loads((copy / "manifest.json").read_text())
    spec = tomllib.loads(data["spec_text"])
    entry = spec[pinned.SECTION]["strategies"]["my_strategy"]
    entry["text"], entry["sha256"] = change(entry)
    data["spec_text"] = bundle.tomli_w.dumps(spec, multiline_strings=True)
    (copy / "manifest.json").write_text(json.dumps(data, indent=2))
    return RunDir(copy)


def test_a_pinned_strategy_changed_without_its_digest_is_named(release_by_path, tmp_path):
    copy = _tampered(release_by_path[0], tmp_path, lambda e: (e["text"].replace("104/4099", "105/4099"), e["sha256"]))
    with pytest.raises(SpecError, match=r"specs\.strategies\.my_strategy.*SHA-256"):
        copy.read().strategy_of("persons")


def test_a_pinned_strategy_changed_with_its_digest_fails_the_certificate(release_by_path, tmp_path):
    def other(entry):
        data = tomllib.loads(entry["text"])
        first, second = list(data["levels"])[:2]
        data["levels"][first]["rho_share"], data["levels"][second]["rho_share"] = (
            data["levels"][second]["rho_share"], data["levels"][first]["rho_share"])
        text = pinned.canonical_text(data)
        return text, pinned.digest(text)

    copy = _tampered(release_by_path[0], tmp_path, other)
    report = validate_run(copy.path, use_operator=False)
    assert not report.ok
    assert any("recomputed from its spec" in v for v in report.violations)


def test_shipped_names_are_pinned_too_and_two_specs_of_one_name_are_refused(tmp_path):
    parsed = tomllib.loads(bundle.public_spec_text(_spec_naming(tmp_path, "pl94_six_level")))
    shipped = (ROOT / "specs/strategies/pl94_six_level.toml")
    assert parsed[pinned.SECTION]["strategies"]["pl94_six_level"]["text"] == \
        pinned.canonical_text(tomllib.loads(shipped.read_text()))
    assert sorted(parsed[pinned.SECTION]["schemas"]) == ["h1_units", "pl94_persons"]
    assert sorted(parsed[pinned.SECTION]["tables"]) == ["pl94"]  # the default table set, named by no key
    other = tmp_path / "elsewhere" / "pl94_six_level.toml"
    other.parent.mkdir()
    other.write_text(shipped.read_text().replace("104/4099", "103/4099").replace("447/4099", "448/4099"))
    text = _spec_naming(tmp_path, "pl94_six_level").replace('strategy = "h1_units"', f'strategy = "{other}"')
    with pytest.raises(SpecError, match="give them different names"):
        bundle.public_spec(text)
