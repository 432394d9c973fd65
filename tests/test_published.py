"""Every public byte accounted for (das.frame.published): each key path of a real release's manifest and of its
Parquet files' metadata is declared with what it is derived from; and two releases of neighbouring
datasets that keep the invariants, seeded alike, differ only where the noise enters (issue 23)."""

import json
import shutil
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest
from conftest import ROOT, TINY

from das.driver.run import run
from das.frame import published
from das.frame.manifest import Manifest
from das.frame.rundir import RunDir
from das.mechanisms import MECHANISMS, synthesize
from das.validate import validate_run

SEED = 7
FAST_MECHANISMS = [m for m, mech in MECHANISMS.items() if mech.extra is None]
MBI_MECHANISMS = [m for m, mech in MECHANISMS.items() if mech.extra is not None and mech.available()]
NOT_FROM_THE_NOISE = ("parameter", "public fact", "invariant")  # the same for neighbours that keep the invariants


def tiny_copy(folder: Path, *, moved: bool = False, states: tuple[str, ...] = ()) -> Path:
    """The tiny spec on a copy of its inputs: one household person moved to another block of the state
    (`moved`: a neighbour keeping every invariant), or (`states`) one file per state, each a copy of tiny."""
    folder.mkdir(parents=True, exist_ok=True)
    persons, units = pd.read_csv(TINY / "persons.csv", dtype=str), pd.read_csv(TINY / "units.csv", dtype=str)
    if moved:
        first = persons.index[persons["RTYPE"] == "3"][0]
        target = units[(units["RTYPE"] == "2")].iloc[-1]  # a block with housing units, other than the first
        assert target["TABBLK"] != persons.loc[first, "TABBLK"]
        for column in ("TABBLKCOU", "TABTRACTCE", "TABBLKGRPCE", "TABBLK"):
            persons.loc[first, column] = target[column]
    text = (ROOT / "specs/runs/tiny.toml").read_text()
    if states:
        for name, frame in (("persons", persons), ("units", units)):
            (folder / name).mkdir(exist_ok=True)
            for state in states:
                frame.assign(TABBLKST=state).to_csv(folder / name / f"{name}_{state}.csv", index=False)
        text = text.replace("../../geography_fixtures/tiny/persons.csv", "persons")
        text = text.replace("../../geography_fixtures/tiny/units.csv", "units")
    else:
        persons.to_csv(folder / "persons.csv", index=False)
        units.to_csv(folder / "units.csv", index=False)
        text = text.replace("../../geography_fixtures/tiny/", "")
    (folder / "spec.toml").write_text(text)
    return folder / "spec.toml"


def released(tmp: Path, spec: Path, name: str = "run") -> Path:
    return run(spec, tmp / name, seed=SEED, workers=1, progress=False).out_dir


@pytest.fixture(scope="module")
def tiny_pair(tmp_path_factory):
    """Releases of tiny and of its neighbour (one person moved between blocks of the state), seeded alike."""
    tmp = tmp_path_factory.mktemp("pair")
    return released(tmp, tiny_copy(tmp / "d")), released(tmp, tiny_copy(tmp / "d_prime", moved=True), "run_prime")


def assert_declared(out: Path) -> None:
    """Every key path of the manifest and of every Parquet file's key-value metadata is declared; nothing
    names the run directory or an input path."""
    data = json.loads((out / "manifest.json").read_text())
    manifest = Manifest.from_dict(data)
    assert manifest.extra == {}, f"fields this version does not know: {sorted(manifest.extra)}"
    context = {"details": MECHANISMS[manifest.mechanism.name].details} if manifest.mechanism else {}
    assert published.undeclared(data, published.MANIFEST, context) == []
    assert published.problems(data, context=context) == []  # each field of its declared type too
    files = sorted(p for p in out.rglob("*.parquet") if RunDir(out).relative(p).split("/")[0] not in ("operator",))
    assert files
    for path in files:
        metadata = pq.read_metadata(path).metadata
        assert published.undeclared(published.parquet_metadata_paths(metadata), published.PARQUET) == [], path
    public = (out / "manifest.json").read_text() + "".join(str(pq.read_metadata(p).metadata) for p in files)
    assert str(out) not in public and str(out.parent) not in public and str(TINY) not in public


def test_every_declaration_names_its_source_and_known_keys():
    published.check_declared()
    with pytest.raises(ValueError, match="counts_secret"):
        published.check_declared(({"counts_secret": "true count: a count of the confidential data"},))
    with pytest.raises(ValueError, match="geounit"):
        published.check_declared(({"invariants.{geounit}": "invariant: a geounit's population"},))


def test_an_undeclared_field_is_named(tiny_pair):
    data = json.loads((tiny_pair[0] / "manifest.json").read_text())
    data["counts"]["nonzero_bins"] = 1322  # a truth-derived count, as stability's bins_noised was
    data["levels_report"]["persons"][0]["seconds"] = 0.5  # a run time
    data["validation"]["input_rows"] = [145]
    assert published.undeclared(data, published.MANIFEST) == [
        "levels_report.persons[].seconds", "counts.nonzero_bins", "validation.input_rows[]"]
    metadata = dict(pq.read_metadata(tiny_pair[0] / "tables/P1.parquet").metadata)
    metadata[b"pandas"] = b'{"index_columns": [{"kind": "range", "stop": 145}]}'
    assert published.undeclared(published.parquet_metadata_paths(metadata), published.PARQUET) == ["pandas"]


def test_a_das_run_publishes_only_declared_fields(tiny_pair):
    for out in tiny_pair:
        assert_declared(out)
    # the validation record is what anyone finds from the published files; the comparison with the inputs is
    # the operator's
    report, manifest = validate_run(tiny_pair[0], use_operator=False), RunDir(tiny_pair[0]).read()
    found = tuple(c for c in report.checks if not c[4:].startswith("signature:"))  # signed after it was validated
    assert manifest.validation.checks == found and manifest.validation.valid == report.ok
    against = json.loads(RunDir(tiny_pair[0]).process_file.read_text())["validation_against_inputs"]
    assert against["valid"] and any("against the inputs" in c for c in against["checks"])
    process = json.loads(RunDir(tiny_pair[0]).process_file.read_text())
    assert {"read_inputs", "total", "validate"} <= set(process["timings_seconds"])  # the operator's, not public
    assert [r["level"] for r in process["levels"]["persons"]][0] == "nation"


def test_neighbours_keeping_the_invariants_differ_only_through_the_noise(tiny_pair):
    """Same seed, one person moved between blocks of the state: every field not declared noisy or computed from
    the release is the same, the manifests' key paths come in the same order, and every Parquet file has the
    same name, rows, row groups and metadata (its values alone may differ)."""
    d, d_prime = (json.loads((out / "manifest.json").read_text()) for out in tiny_pair)
    assert list(published.key_paths(d)) == list(published.key_paths(d_prime))
    fixed = [p for p, s in published.sources(d, published.MANIFEST).items() if s in NOT_FROM_THE_NOISE]
    assert "invariants.total_population.state.44" in fixed and "privacy.persons.eps" in fixed
    for path in fixed:
        assert published.values_at(d, path) == published.values_at(d_prime, path), path
    assert d["outputs"] != d_prime["outputs"]  # the released values themselves are noisy
    files = [sorted(RunDir(out).relative(p) for p in out.rglob("*.parquet")) for out in tiny_pair]
    assert files[0] == files[1]
    for relative in files[0]:
        a, b = (pq.read_metadata(out / relative) for out in tiny_pair)
        assert a.num_rows == b.num_rows and a.metadata == b.metadata, relative
        assert [a.row_group(i).num_rows for i in range(a.num_row_groups)] == \
               [b.row_group(i).num_rows for i in range(b.num_row_groups)], relative


def test_a_partitioned_run_publishes_only_declared_fields(tmp_path):
    out = released(tmp_path, tiny_copy(tmp_path / "in", states=("44", "45")))
    assert (out / "nmf/persons/block/45.parquet").is_file()  # one NMF file per state below the state
    assert_declared(out)


@pytest.mark.slow  # ~20 s
def test_al_perry_publishes_only_declared_fields(tmp_path):
    out = run(ROOT / "specs/runs/al_perry.toml", tmp_path / "run", seed=SEED, workers=1, progress=False).out_dir
    assert_declared(out)


@pytest.mark.parametrize("name", FAST_MECHANISMS)
def test_each_mechanism_publishes_only_declared_fields(tmp_path, name):
    assert_declared(synthesize("tiny", name, tmp_path / name, seed=SEED))


@pytest.mark.slow  # JAX: 30-60 s each
@pytest.mark.parametrize("name", MBI_MECHANISMS)
def test_each_mbi_mechanism_publishes_only_declared_fields(tmp_path, name):
    assert_declared(synthesize("tiny", name, tmp_path / name, seed=SEED))


def test_a_mechanisms_parameters_are_the_same_for_neighbours(tmp_path):
    """flat on tiny and on its neighbour, seeded alike: every field declared a parameter or public fact is equal."""
    outs = [synthesize(tiny_copy(tmp_path / name, moved=moved), "flat", tmp_path / f"out_{name}", seed=SEED)
            for name, moved in (("d", False), ("d_prime", True))]
    d, d_prime = (json.loads((out / "manifest.json").read_text()) for out in outs)
    context = {"details": MECHANISMS["flat"].details}
    for path, source in published.sources(d, published.MANIFEST, context).items():
        if source in NOT_FROM_THE_NOISE:
            assert published.values_at(d, path) == published.values_at(d_prime, path), path
    shutil.rmtree(tmp_path)
