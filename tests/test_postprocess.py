"""Post-processing from public files alone (issue 39): `das postprocess` of a published bundle gives the release's own
MDF, tables and certificates, reading nothing outside the bundle; `das validate --reproduce` says so, and names the
file that is not; an NMF release (das measure) is finished without its input; `das.nmf.read` reads the NMF; the
invariants per block that make it possible are published, and held to the units MDF by the validator."""

import hashlib
import json
import shutil
from fractions import Fraction

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import ROOT, TINY

import das
from das.cli import main as cli
from das.core.errors import ReleaseError, RunError
from das.driver.postprocess import postprocess, reproduce, same_content
from das.driver.run import measure_only
from das.driver.run import run as run_release
from das.frame.rundir import RunDir
from das.model.specfile import load_toml

SEED = 7


def _published(spec, tmp, name: str = "release"):
    """A seeded release of `spec` and its published bundle."""
    release = run_release(spec, tmp / name, seed=SEED, progress=False)
    assert release.valid
    return release.out_dir, das.publish(release.out_dir, to=tmp / f"{name}-bundle").path


def _outputs_equal(a, b) -> list[str]:
    """The output files (the manifest's) whose content differs between releases a and b."""
    listed = RunDir(a).read().outputs
    assert set(listed) == set(RunDir(b).read().outputs)
    return [name for name in listed if not same_content(a / name, b / name)]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return _published("tiny", tmp_path_factory.mktemp("tiny"))


@pytest.mark.parametrize("spec", ["tiny", "vt_grand_isle_dhc"])
def test_the_bundle_post_processes_to_the_release_it_publishes(spec, tmp_path):
    run_dir, bundle = _published(spec, tmp_path)
    again = postprocess(bundle, tmp_path / "again")
    assert again.valid and again.manifest.status == "complete"
    assert _outputs_equal(run_dir, again.out_dir) == []
    original = RunDir(run_dir).read()
    assert again.manifest.privacy == original.privacy and again.manifest.invariants == original.invariants
    assert again.manifest.nmf == original.nmf  # the NMF as published, not drawn again
    assert again.manifest.postprocessed_from == hashlib.sha256((bundle / "manifest.json").read_bytes()).hexdigest()
    assert not again.manifest.private and again.manifest.seed == SEED  # as the noise it post-processed was drawn


def test_it_reads_nothing_outside_the_bundle(tmp_path):
    """The inputs, the spec file and the run directory removed: the bundle alone is post-processed."""
    inputs = tmp_path / "inputs"
    shutil.copytree(TINY, inputs)
    spec = load_toml(ROOT / "specs/runs/tiny.toml")
    spec["input"] = {"persons": str(inputs / "persons.csv"), "units": str(inputs / "units.csv")}
    release = das.run(spec, out=tmp_path / "run", seed=SEED, progress=False)
    bundle = das.publish(release, to=tmp_path / "bundle").path
    reference = pd.read_parquet(release.path / "mdf_persons.parquet")
    shutil.rmtree(inputs), shutil.rmtree(release.path)
    again = postprocess(bundle, tmp_path / "again")
    assert again.valid
    pd.testing.assert_frame_equal(pd.read_parquet(again.out_dir / "mdf_persons.parquet"), reference)


def test_an_nmf_release_is_finished_without_its_input(tmp_path):
    """`das measure`, then `das postprocess` of what it published: the release `das run` makes with the same seed,
    no noise drawn again (the NMF files are the measurement's, byte for byte)."""
    measured = tmp_path / "measured"
    measure_only("tiny", measured, seed=SEED)
    assert (measured / "invariants.parquet").is_file()
    finished = postprocess(measured, tmp_path / "finished")
    whole = run_release("tiny", tmp_path / "whole", seed=SEED, progress=False)
    assert finished.valid and _outputs_equal(whole.out_dir, finished.out_dir) == []
    for name, digest in RunDir(measured).read().nmf.items():
        assert finished.manifest.nmf[name] == digest


def test_a_run_stopped_in_post_processing_is_finished_from_its_nmf(tmp_path, monkeypatch):
    """An operator's `das run` stopped by an error in post-processing: das postprocess of its run directory, with the
    inputs gone and no noise drawn, gives the release the run would have made."""
    import das.topdown.engine

    inputs = tmp_path / "inputs"
    shutil.copytree(TINY, inputs)
    spec = load_toml(ROOT / "specs/runs/tiny.toml")
    spec["input"] = {"persons": str(inputs / "persons.csv"), "units": str(inputs / "units.csv")}
    solve_levels = das.topdown.engine._solve_levels

    def stop_below_the_state(job, names, *args, **kwargs):
        raise ZeroDivisionError(f"a fault of das's own while solving {names[0]}")

    monkeypatch.setattr(das.topdown.engine, "_solve_levels", stop_below_the_state)
    with pytest.raises(das.RunStopped):
        das.run(spec, out=tmp_path / "run", seed=SEED, progress=False)
    monkeypatch.setattr(das.topdown.engine, "_solve_levels", solve_levels)
    stopped = tmp_path / "run"
    assert RunDir(stopped).read().status == "interrupted" and not (stopped / "mdf_persons.parquet").exists()
    nmf = {p.relative_to(stopped): p.read_bytes() for p in RunDir(stopped).nmf_files()}
    shutil.rmtree(inputs)
    finished = postprocess(stopped, tmp_path / "finished")
    whole = run_release("tiny", tmp_path / "whole", seed=SEED, progress=False)
    assert finished.valid and _outputs_equal(whole.out_dir, finished.out_dir) == []
    assert {p.relative_to(finished.out_dir): p.read_bytes() for p in RunDir(finished.out_dir).nmf_files()} == nmf
    assert finished.manifest.postprocessed_from == hashlib.sha256((stopped / "manifest.json").read_bytes()).hexdigest()


def test_a_run_stopped_before_its_nmf_is_whole_is_sent_to_resume(tmp_path):
    run_release("tiny", tmp_path / "run", seed=SEED, progress=False)
    (tmp_path / "run/nmf/persons/block.parquet").unlink()  # as if measurement stopped before the block level
    manifest = json.loads((tmp_path / "run/manifest.json").read_text())
    (tmp_path / "run/manifest.json").write_text(json.dumps({**manifest, "status": "interrupted"}))
    with pytest.raises(RunError, match=r"no NMF file of the persons release's block level.*das run --resume"):
        postprocess(tmp_path / "run", tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_validate_reproduce_passes_and_names_a_changed_mdf_record(tiny, tmp_path, capsys):
    _, bundle = tiny
    assert reproduce(bundle).ok
    assert cli(["validate", str(bundle), "--reproduce", "--workers", "1"]) == 0
    assert "reproduced: every output" in capsys.readouterr().out
    changed = tmp_path / "changed"
    shutil.copytree(bundle, changed)
    mdf = pq.read_table(changed / "mdf_persons.parquet")
    column = mdf.column("CENRACE").to_pylist()
    column[0] = "02" if column[0] != "02" else "03"
    pq.write_table(mdf.set_column(mdf.schema.get_field_index("CENRACE"), "CENRACE", pa.array(column)),
                   changed / "mdf_persons.parquet")
    found = reproduce(changed)
    assert found.differ == ("mdf_persons.parquet",)
    assert cli(["validate", str(changed), "--reproduce", "--workers", "1"]) == 1
    out = capsys.readouterr().out
    assert "FAIL mdf_persons.parquet: as its NMF post-processes to again" in out
    assert "not reproduced: mdf_persons.parquet" in out


def test_what_cannot_be_post_processed_is_refused_saying_why(tiny, tmp_path):
    _, bundle = tiny
    synthetic = das.synth("tiny", mechanism="flat", out=tmp_path / "flat", seed=3)
    with pytest.raises(RunError, match="a synthetic release .* publishes no noisy measurements"):
        postprocess(synthetic.path, tmp_path / "x")
    changed = tmp_path / "changed"
    shutil.copytree(bundle, changed)
    table = pq.read_table(changed / "nmf/persons/block.parquet")
    noisy = table.column("noisy").to_numpy().copy()
    noisy[0] += 1
    pq.write_table(table.set_column(table.schema.get_field_index("noisy"), "noisy", pa.array(noisy)),
                   changed / "nmf/persons/block.parquet")
    with pytest.raises(RunError, match=r"nmf/persons/block.parquet is not the file its manifest lists"):
        postprocess(changed, tmp_path / "y")
    with pytest.raises(RunError, match="not a das run directory"):
        postprocess(tmp_path / "nowhere", tmp_path / "z")
    assert not any((tmp_path / name).exists() for name in ("x", "y", "z"))
    with pytest.raises(das.OutDirError):
        postprocess(bundle, bundle / "inside")


def test_the_nmf_reads_as_one_frame_with_exact_variances(tiny):
    run_dir, bundle = tiny
    nmf = das.nmf.read(bundle)
    files = [p for p in (bundle / "nmf").rglob("*.parquet")]
    assert len(nmf) == sum(pq.read_metadata(p).num_rows for p in files)
    assert list(nmf.columns) == ["release", "level", "geocode", "query", "cell", "noisy", "variance", "variance_num",
                                 "variance_den"]
    manifest = RunDir(bundle).read()
    strategy = manifest.strategy_of("persons")
    from das.privacy.accounting import allocate

    allocation = allocate(strategy, manifest.privacy["persons"].rho)
    persons = nmf[nmf["release"] == "persons"]
    for m in allocation.items:
        rows = persons[(persons["level"] == m.level) & (persons["query"] == m.query)]
        assert len(rows) > 0
        exact = {Fraction(int(n), int(d)) for n, d in zip(rows["variance_num"], rows["variance_den"])}
        assert exact == {m.sigma2}
    blocks = das.nmf.read(bundle, release="units", level="block")
    assert set(blocks["level"]) == {"block"} and set(blocks["release"]) == {"units"}
    with pytest.raises(ReleaseError, match="level='county_x'"):
        das.nmf.read(bundle, level="county_x")


def test_the_validator_holds_the_invariants_per_block_to_the_units_mdf(tiny, tmp_path):
    _, bundle = tiny
    changed = tmp_path / "changed"
    shutil.copytree(bundle, changed)
    table = pq.read_table(changed / "invariants.parquet")
    housing = table.column("HOUSING_UNITS").to_numpy().copy()
    housing[2] += 1
    pq.write_table(table.set_column(1, "HOUSING_UNITS", pa.array(housing)), changed / "invariants.parquet")
    manifest = json.loads((changed / "manifest.json").read_text())
    manifest["outputs"]["invariants.parquet"] = hashlib.sha256((changed / "invariants.parquet").read_bytes()).hexdigest()
    (changed / "manifest.json").write_text(json.dumps(manifest))
    report = das.validate(changed)
    block = table.column("GEOID").to_pylist()[2]
    assert not report.ok
    assert any(f"block {block}: the units MDF holds" in v for v in report.violations), report.violations
    assert np.array_equal(pd.read_parquet(bundle / "invariants.parquet")["GEOID"].to_numpy(),
                          np.sort(pd.read_parquet(bundle / "invariants.parquet")["GEOID"].to_numpy()))


def test_a_release_on_the_optimized_spine_post_processes_to_itself(tmp_path):
    """The spine is public (spine.parquet): the NMF's geounits are read on it, and the release comes out the same."""
    from test_spine import _area_frames, _blocks, _spine_spec

    run_dir, bundle = _published(_spine_spec(tmp_path / "spec", _area_frames(_blocks())), tmp_path)
    assert (bundle / "spine.parquet").is_file()
    again = postprocess(bundle, tmp_path / "again")
    assert again.valid and _outputs_equal(run_dir, again.out_dir) == []
    # the other estimators read the NMF on the spine too: WLS as das metrics computes it there, by GEOID
    from das.frame.bundle import input_paths

    truth = tuple(input_paths(run_dir)[k] for k in ("persons", "units"))
    wls = das.postprocess(bundle, out=tmp_path / "wls", estimator="wls")
    assert (wls.path / "source/spine.parquet").is_file()
    ours = das.metrics(wls, truth=truth, out=tmp_path / "m1").frame("errors").set_index(["level", "unit"])
    theirs = das.metrics(run_dir, estimators=("wls",), out=tmp_path / "m2").frame("errors").set_index(["level", "unit"])
    np.testing.assert_allclose(ours["estimate"].sort_index(), theirs["estimate"].sort_index(), atol=1e-8)
    nnls = das.postprocess(bundle, out=tmp_path / "nnls", estimator="nnls")
    total = das.metrics(nnls, against=bundle, out=tmp_path / "m3").metrics.query("query == 'total' and bin == 'all'")
    assert total.set_index("level").loc["nation", "mae"] < 1e-6


@pytest.mark.slow
@pytest.mark.parametrize("spec", ["al_perry", "vt_grand_isle", "vt_demo"])
def test_every_shipped_state_post_processes_to_its_release(spec, tmp_path):
    run_dir, bundle = _published(spec, tmp_path)
    found = reproduce(bundle, workers=2)
    assert found.ok and "mdf_persons.parquet" in found.compared and "tables/P1.parquet" in found.compared


def test_the_command_line_post_processes_and_says_what_it_wrote(tiny, tmp_path, capsys):
    _, bundle = tiny
    assert cli(["postprocess", str(bundle), "--out", str(tmp_path / "again"), "--workers", "1", "-q"]) == 0
    out = capsys.readouterr().out
    assert f"wrote {tmp_path / 'again'}: the release of {bundle}'s NMF, post-processed again" in out
    assert cli(["postprocess", str(bundle), "--out", str(tmp_path / "again"), "-q"]) == 2  # not over a release
    assert "--overwrite" in capsys.readouterr().err


def test_the_research_walkthrough_from_a_published_bundle_runs_as_written(tiny, tmp_path, monkeypatch):
    """docs/research.md, "From a published bundle": its code, run on a published bundle, reproduces the tables and
    gives post-processing's change to every block total."""
    import re

    _, bundle = tiny
    code = re.search(r"## From a published bundle.*?```python\n(.*?)```", (ROOT / "docs/research.md").read_text(),
                     re.S).group(1)
    compared = re.search(r"### Estimators compared.*?```python\n(.*?)```", (ROOT / "docs/research.md").read_text(),
                         re.S).group(1)
    monkeypatch.chdir(tmp_path)
    shutil.copytree(bundle, tmp_path / "bundle")
    names: dict = {}
    exec(code, names)
    assert names["mine"].equals(names["released"])
    assert len(names["moved"]) == len(names["blocks"]) > 0 and np.issubdtype(names["moved"].dtype, np.integer)
    exec(compared, names)
    assert names["one_pass"].valid and names["wls"].estimator == "wls" and names["nnls"].estimator == "nnls"
    assert set(names["table"]["level"]) == set(RunDir(tmp_path / "bundle").read().levels)
    assert (names["table"]["estimator"] == "topdown").all() and (names["table"]["mae"] > 0).any()
    assert set(names["unrounded"]["estimator"]) == {"nnls"}
