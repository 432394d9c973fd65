"""das validate proves the privacy claim from the files (das.validate.certificate, das.validate.files): each
edited certificate field is refused, whatever else is edited to match; a TopDown release is checked for
everything TopDown holds whatever its manifest claims; no edited field gives a traceback. The releases
here are unsigned copies (an editor drops the signature; without a key that proves nothing either way),
so each refusal comes from the privacy checks themselves."""

import io
import json
import shutil
import tomllib
from fractions import Fraction

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from das.driver.run import run
from das.driver.runspec import Budget
from das.frame.checkpoint import file_sha256
from das.mechanisms import synthesize
from das.privacy.accounting import eps_for_delta, eps_loose
from das.privacy.certificate import fraction_text
from das.validate import SYNTHETIC_HOLDS, main, validate_run

RECOMPUTED = "certificate: what the release's strategy, budget and delta give (recomputed from its spec)"
ADDS_UP = "certificate: rho per level and per query sums exactly to the total"
METADATA = "privacy mode, certificate and spec digest in every Parquet file"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return run("tiny", tmp_path_factory.mktemp("tiny") / "run", seed=3, workers=1, progress=False).out_dir


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    """das synth tiny with an exponential-mechanism selection among its charges (mwem)."""
    return synthesize("tiny", "mwem", tmp_path_factory.mktemp("mwem") / "r", seed=4)


def edited(release, tmp_path, change=None, name="edited"):
    """An unsigned copy of a release with its manifest (a JSON object) changed by `change`."""
    out = tmp_path / name
    shutil.copytree(release, out)
    for signed in ("manifest.sig", "release.pub"):
        (out / signed).unlink()
    if change is not None:
        manifest = json.loads((out / "manifest.json").read_text())
        change(manifest)
        (out / "manifest.json").write_text(json.dumps(manifest, indent=2))
    return out


def failed(report) -> set[str]:
    """The names of the checks that failed."""
    return {c.removeprefix("FAIL ") for c in report.checks if c.startswith("FAIL")}


def test_untouched_releases_are_valid(tiny, synthetic, tmp_path):
    for release in (tiny, synthetic):
        report = validate_run(edited(release, tmp_path, name=release.name))
        assert report.ok, report.violations


def _eps(value):
    return lambda m: m["privacy"]["persons"].update(eps=value)


def _rho(value):
    return lambda m: m["privacy"]["persons"].update(rho=value)


def _delta(value, *, consistent=False):
    def change(m):
        cert = m["privacy"]["persons"]
        cert["delta"] = value
        if consistent:  # eps and its loose bound re-derived at the new delta: only the spec's delta tells
            cert["eps"], cert["eps_loose_bound"] = (eps_for_delta(Fraction(cert["rho"]), value),
                                                    eps_loose(Fraction(cert["rho"]), value))
    return change


def _nation_share(m):
    m["privacy"]["persons"]["by_level"][0]["rho_share"] = "1/2"


def _scaled(m):
    """Every rho of the certificate doubled and every variance halved, eps re-derived: it adds up, but it is not
    what the strategy and budget give, nor what the NMF was drawn with."""
    cert = m["privacy"]["persons"]
    double = lambda text: fraction_text(2 * Fraction(text))  # noqa: E731
    cert["rho"] = double(cert["rho"])
    for level in cert["by_level"]:
        level["rho"] = double(level["rho"])
        for q in level["queries"]:
            q["rho"], q["sigma2"] = double(q["rho"]), fraction_text(Fraction(q["sigma2"]) / 2)
    rho, delta = Fraction(cert["rho"]), Fraction(cert["delta"])
    cert["eps"], cert["eps_loose_bound"] = eps_for_delta(rho, delta), eps_loose(rho, delta)


def _variance(m):
    m["privacy"]["persons"]["by_level"][-1]["queries"][0]["sigma2"] = "1"


def _private(m):
    m["private"] = True


@pytest.mark.parametrize("change, expected", [
    (_eps(1.0), {ADDS_UP, RECOMPUTED, METADATA}),
    (_rho("1/100"), {ADDS_UP, RECOMPUTED, METADATA}),
    (_delta("1e-3"), {ADDS_UP, RECOMPUTED, METADATA}),
    (_delta("1e-3", consistent=True), {RECOMPUTED, METADATA}),
    (_nation_share, {ADDS_UP, RECOMPUTED}),
    (_scaled, {RECOMPUTED, METADATA, "NMF: exactly the certified measurements"}),
    (_variance, {ADDS_UP, RECOMPUTED, "NMF: exactly the certified measurements"}),
    (_private, {RECOMPUTED, METADATA}),
], ids=["eps", "rho", "delta", "delta-and-eps", "rho_share", "every-rho-scaled", "a-variance", "private"])
def test_each_edited_certificate_field_is_refused(tiny, tmp_path, change, expected):
    failures = failed(validate_run(edited(tiny, tmp_path, change)))
    assert {e for e in expected if any(name.startswith(e) for name in failures)} == expected, failures


def test_the_certificate_differences_are_named(tiny, tmp_path):
    cert = json.loads((tiny / "manifest.json").read_text())["privacy"]["persons"]
    violations = validate_run(edited(tiny, tmp_path, _eps(1.0))).violations
    assert f"{ADDS_UP}, each variance is exactly 1/its rho, eps is re-derived from rho and delta: persons: eps is 1.0; " \
           f"rho {cert['rho']} at delta {cert['delta']} gives {cert['eps']}" in violations
    assert f"{RECOMPUTED}: privacy.persons.eps: 1.0, expected {cert['eps']}" in violations


def _rewrite_metadata(path, key: bytes, change) -> None:
    table = pq.read_table(path)
    meta = dict(table.schema.metadata)
    meta[key] = change(meta[key])
    pq.write_table(table.replace_schema_metadata(meta), path)


def test_a_parquet_file_whose_certificate_metadata_was_edited_is_refused(tiny, tmp_path):
    """The das.certificate metadata inside a Parquet file says eps 0.5 (its digest in the manifest updated)."""
    out = edited(tiny, tmp_path)

    def half(data: bytes) -> bytes:
        certificates = json.loads(data)
        certificates["persons"]["eps"] = 0.5
        return json.dumps(certificates, sort_keys=True).encode()

    _rewrite_metadata(out / "tables" / "P1.parquet", b"das.certificate", half)
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["outputs"]["tables/P1.parquet"] = file_sha256(out / "tables" / "P1.parquet")
    (out / "manifest.json").write_text(json.dumps(manifest))
    report = validate_run(out)
    assert report.violations == [f"{METADATA}: tables/P1.parquet: das.certificate is not the manifest's certificate"]


def _change_a_record(out) -> None:
    """One person's race changed in the MDF, its digest in the manifest updated (the tables left as they are)."""
    mdf = pq.read_table(out / "mdf_persons.parquet")
    races = mdf.column("CENRACE").to_pylist()
    races[0] = "02" if races[0] != "02" else "01"
    column = mdf.schema.get_field_index("CENRACE")
    field = mdf.schema.field(column)
    pq.write_table(mdf.set_column(column, field, pa.array(races).cast(field.type)), out / "mdf_persons.parquet")
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["outputs"]["mdf_persons.parquet"] = file_sha256(out / "mdf_persons.parquet")
    (out / "manifest.json").write_text(json.dumps(manifest))


def _fewer_holds(m):
    m["holds"] = [h for h in m["holds"] if h not in ("tables_match_mdf", "nmf_matches_certificate")]


def _claims_synthetic(m):
    m["holds"] = list(SYNTHETIC_HOLDS)
    m["mechanism"] = {"name": "flat", "summary": "claimed", "geography": "block", "budget": m["privacy"]["persons"]["rho"]}


@pytest.mark.parametrize("change", [_fewer_holds, _claims_synthetic, lambda m: m.update(holds=[])],
                         ids=["fewer-holds", "claims-to-be-synthetic", "holds-empty"])
def test_a_topdown_release_is_held_to_every_topdown_claim_whatever_its_manifest_says(tiny, tmp_path, change):
    """Claiming fewer holds, none, or to be a synthetic release (an NMF and charges by level mean TopDown):
    every TopDown check still runs, and a changed MDF is still caught by the tables' recount."""
    out = edited(tiny, tmp_path, change)
    untouched = [c for c in validate_run(tiny).checks if " signature: " not in c]
    checks = [c.split(" ", 1)[1].strip() for c in validate_run(out).checks]
    assert all(c.split(" ", 1)[1].strip() in checks for c in untouched[1:])
    _change_a_record(out)
    assert "table P1 equals the MDF recount" in failed(validate_run(out))


def test_a_synthetic_release_is_held_to_its_claims_whatever_its_manifest_says(synthetic, tmp_path):
    out = edited(synthetic, tmp_path, lambda m: m.update(holds=[]))
    assert validate_run(out).ok
    _change_a_record(out)
    assert "table P1 equals the MDF recount" in failed(validate_run(out))


def _charge(index, **values):
    return lambda m: m["privacy"]["persons"]["charges"][index].update(values)


def _both(*changes):
    def change(m):
        for c in changes:
            c(m)
    return change


def _rho_moved(m):
    """rho moved from the first charge to the second: the sum still holds, the parameters do not."""
    charges = m["privacy"]["persons"]["charges"]
    moved = Fraction(charges[0]["rho"]) / 2
    charges[0]["rho"] = fraction_text(Fraction(charges[0]["rho"]) - moved)
    charges[1]["rho"] = fraction_text(Fraction(charges[1]["rho"]) + moved)


@pytest.mark.parametrize("change, expected", [
    (_charge(0, sigma2="1"), "privacy.persons.charges[0].sigma2: '1'"),  # a discrete Gaussian's variance
    (_charge(1, eps="1/2"), "privacy.persons.charges[1].eps: '1/2'"),  # an exponential selection's eps
    (_rho_moved, "privacy.persons.charges[0].rho"),
    (_eps(1.0), "privacy.persons.eps: 1.0"),
    (_delta("1e-3"), "privacy.persons.delta: '1e-3', expected '1e-10'"),
    (lambda m: m["privacy"]["persons"]["delta_parts"].update({"zCDP conversion": "1e-3"}),
     "privacy.persons.delta_parts.zCDP conversion: '1/1000'"),
    (_both(_rho("1/100"), lambda m: m["mechanism"].update(budget="1/100")), "privacy.persons.rho: '1/100'"),
    (_charge(0, sigma2="x"), "privacy.persons.charges[0].sigma2: 'x'"),
])
def test_each_edited_synthetic_certificate_field_is_refused(synthetic, tmp_path, change, expected):
    violations = validate_run(edited(synthetic, tmp_path, change)).violations
    assert any(expected in v for v in violations), violations


@pytest.mark.parametrize("path, value, named", [
    (("holds",), [1], "holds[0]: expected a string"), (("holds",), "mdf_codes", "holds: expected a list"),
    (("levels",), "nation", "levels: expected a list"), (("privacy",), [], "privacy: expected an object"),
    (("privacy", "persons", "rho"), 0.5, "privacy.persons.rho: expected an exact value"),
    (("privacy", "persons", "by_level"), {}, "privacy.persons.by_level: expected a list"),
    (("privacy", "persons", "by_level", 0, "queries", 0, "sigma2"), "1/0",
     "privacy.persons.by_level[0].queries[0].sigma2: expected an exact value"),
    (("outputs",), ["x"], "outputs: expected an object"), (("mechanism",), "flat", "mechanism: expected an object"),
    (("private",), "yes", "private: expected true or false"), (("levels",), ["x"], "levels[0]: expected a geography level"),
    (("counts", "persons"), 145.0, "counts.persons: expected an integer >= 0"),
])
def test_a_manifest_field_of_the_wrong_type_is_a_violation_naming_it(tiny, tmp_path, capsys, path, value, named):
    """A field of another type than das/frame/published.py declares: a violation naming its key path (rc 1), not a
    manifest das validate cannot read."""
    out = edited(tiny, tmp_path, lambda m: _set_field(m, path, value))
    printed = io.StringIO()
    assert main(str(out), out=printed) == 1
    assert f"manifest: every field declared in das/frame/published.py, of its declared type: {named}" in printed.getvalue()
    assert "Traceback" not in capsys.readouterr().err


@pytest.mark.parametrize("path, value", [(("units",), None), (("tables",), "0")])
def test_a_manifest_field_of_its_type_that_says_nothing_readable_is_a_clear_error(tiny, tmp_path, capsys, path, value):
    """A certificate of no release, an unknown table set: a manifest das validate cannot read (rc 2), named."""
    out = edited(tiny, tmp_path, lambda m: _set_field(m, path, value))
    assert main(str(out), out=io.StringIO()) == 2
    err = capsys.readouterr().err
    assert err.startswith("das validate: ") and "Traceback" not in err
    assert str(path[0]) in err


def _set_field(manifest: dict, path: tuple, value) -> None:
    target = manifest
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value


def test_a_query_renamed_in_the_certificate_is_a_violation(tiny, tmp_path):
    out = edited(tiny, tmp_path, lambda m: m["privacy"]["persons"]["by_level"][0]["queries"][0].update(query="county"))
    assert main(str(out), out=io.StringIO()) == 1
    assert "nmf/persons/nation.parquet: the certificate's query 'county' is not a query of schema pl94_persons" in \
        " ".join(validate_run(out).violations)


def _paths(value, path=()):
    """Every field of a manifest (the first entry of each list standing for the rest)."""
    yield path
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _paths(v, (*path, k))
    elif isinstance(value, list) and value:
        yield from _paths(value[0], (*path, 0))


def _other(value):
    """Values a field could be edited to that keep its kind (and so pass the manifest's reading)."""
    if isinstance(value, bool):
        return [not value]
    if isinstance(value, int | float):
        return [-1]
    if isinstance(value, str):
        return ["", "county"]
    if isinstance(value, list):
        return [[], value[::-1]]
    if isinstance(value, dict):
        return [{}]
    return ["x"]


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["topdown", "synthetic"])
def test_no_edited_field_gives_a_traceback(tiny, synthetic, tmp_path, kind):
    """Every field of the manifest (outside the run's own records), edited to values of its own kind and of
    other kinds: das validate says valid, lists violations, or refuses with a clear error; never a traceback."""
    release = tiny if kind == "topdown" else synthetic
    manifest = json.loads((release / "manifest.json").read_text())
    out = edited(release, tmp_path)
    tracebacks = []
    for path in _paths(manifest):
        if not path or path[0] in ("validation", "levels_report", "timings_seconds", "interruptions"):
            continue
        target = manifest
        for key in path:
            target = target[key]
        for value in [*_other(target), None, ["x"]]:
            copy = json.loads(json.dumps(manifest))
            holder = copy
            for key in path[:-1]:
                holder = holder[key]
            holder[path[-1]] = value
            (out / "manifest.json").write_text(json.dumps(copy))
            try:
                assert main(str(out), out=io.StringIO()) in (0, 1, 2)
            except Exception as e:
                tracebacks.append(f"manifest field {path} = {value!r}: {type(e).__name__}: {e}")
    assert tracebacks == [], "\n".join(tracebacks)


@pytest.mark.parametrize(("budget", "stated"), [
    (Budget(rho=Fraction(1, 2)), ("persons", "rho", "1/2")),
    (Budget(eps=Fraction(4), delta=Fraction(1, 10**10)), ("persons", "eps", "4")),
    (Budget(delta=Fraction(1, 10**6)), ("privacy", "delta", "1e-6")),
])
def test_a_budget_given_on_the_command_line_is_stated_in_the_published_spec_and_proved(tmp_path, budget, stated):
    """--rho, --eps and --delta stand for spec keys: the published spec states them, so the validator's
    recomputed certificate (from the spec alone) is the release's, and the release is valid."""
    result = run("tiny", tmp_path / "run", seed=3, workers=1, progress=False, budget=budget)
    assert result.valid, result.manifest.validation.violations[:3]
    section, key, value = stated
    published = tomllib.loads(result.manifest.spec_text)
    assert published[section][key] == value and not ({"rho", "eps"} - {key} & set(published["persons"]))
    assert validate_run(result.out_dir).ok
