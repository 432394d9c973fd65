"""Other estimators of a published NMF (issue 39): `das postprocess --estimator wls|nnls` writes an estimate directory
(fractional, marked as not a release) from public files alone; `--settings` gives TopDown with other passes; `das
metrics` scores an estimate against the truth, and any release or estimate against another."""

import json
import shutil

import numpy as np
import pandas as pd
import pytest
from conftest import TINY

import das
from das.cli import main as cli
from das.core.errors import RunError, SpecError, StudyError
from das.driver.postprocess import reproduce
from das.frame.rundir import RunDir
from das.model.schema import load_schema

SEED = 7
TRUTH = (TINY / "persons.csv", TINY / "units.csv")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A seeded tiny release, its published bundle, and the WLS and NNLS estimates of the bundle."""
    tmp = tmp_path_factory.mktemp("estimates")
    release = das.run("tiny", out=tmp / "release", seed=SEED, progress=False)
    bundle = das.publish(release, to=tmp / "bundle").path
    wls = das.postprocess(bundle, out=tmp / "wls", estimator="wls")
    nnls = das.postprocess(bundle, out=tmp / "nnls", estimator="nnls")
    return release, bundle, wls, nnls


def _blocks(estimate) -> pd.Series:
    """Total persons per block of an estimate."""
    return estimate.histograms.groupby("GEOID")["COUNT"].sum()


def _kept(study, estimator: str) -> pd.DataFrame:
    """A study's per-geounit total-population estimates of one estimator, by level and unit."""
    errors = study.frame("errors")
    return errors[errors["estimator"] == estimator].set_index(["level", "unit"])[["truth", "estimate"]].sort_index()


def test_the_wls_estimate_equals_the_wls_that_metrics_and_replicate_score(tiny, tmp_path):
    """The WLS of `das postprocess --estimator wls`, scored against the truth, is the `wls` estimator das metrics (one
    replicate of das replicate's scoring, das.research.replicate.score) computes from the same NMF."""
    release, _, wls, _ = tiny
    of_estimate = das.metrics(wls, truth=TRUTH, out=tmp_path / "of-estimate")
    of_release = das.metrics(release, estimators=("wls",), out=tmp_path / "of-release")
    a, b = _kept(of_estimate, "wls"), _kept(of_release, "wls")
    assert len(a) == len(b) > 0 and (a["truth"] == b["truth"]).all()
    np.testing.assert_allclose(a["estimate"], b["estimate"], atol=1e-8)
    stats = [s.metrics.set_index(["level", "query", "bin"])["mae"].sort_index() for s in (of_estimate, of_release)]
    np.testing.assert_allclose(stats[0], stats[1], atol=1e-8)
    assert of_estimate.meta["estimate"]["estimator"] == "wls"


def test_an_estimate_says_it_is_not_a_release_and_holds_the_published_totals(tiny):
    release, bundle, wls, nnls = tiny
    for estimate, nonnegative in ((wls, False), (nnls, True)):
        record = json.loads((estimate.path / "estimate.json").read_text())
        assert record["kind"] == "das estimate" and "NOT A RELEASE" in record["notice"]
        assert record["integral"] is False and record["nonnegative"] is nonnegative and record["private"] is False
        assert not (estimate.path / "manifest.json").exists()  # nothing reads it as a release
        assert (estimate.path / "source/manifest.json").read_bytes() == (bundle / "manifest.json").read_bytes()
        p1 = estimate.tables["P1"].set_index(["level", "geocode"])["total"]
        published = release.tables["P1"].set_index(["level", "geocode"])["total"]
        for level in ("nation", "state"):  # invariant totals, held exactly up to float
            np.testing.assert_allclose(p1[level], published[level], atol=1e-6)
        blocks = _blocks(estimate)
        np.testing.assert_allclose(blocks.sum(), published["nation"].item(), atol=1e-6)
        block_totals = p1["block"]
        np.testing.assert_allclose(block_totals.to_numpy(), blocks.reindex(block_totals.index, fill_value=0.0),
                                   atol=1e-9)
    assert (nnls.histograms["COUNT"] >= -1e-9).all()
    assert (wls.histograms["COUNT"] < -1e-6).any()  # unconstrained: some cell below zero
    for estimate in (wls, nnls):
        counts = estimate.histograms["COUNT"].to_numpy()
        assert (np.abs(counts - np.rint(counts)) > 1e-3).any()  # fractional: not a release


def test_nnls_holds_the_structural_zeros_the_release_holds(tiny):
    """A block with no housing units holds no household persons, one with no facility of a group-quarters type nobody
    of that type (structural zeros): the unrounded least squares holds every such cell at zero, as TopDown does."""
    _, bundle, _, nnls = tiny
    invariants = pd.read_parquet(bundle / "invariants.parquet").set_index("GEOID")
    allowed = np.column_stack([invariants["HOUSING_UNITS"] > 0] +
                              [invariants[f"GQ_FACILITIES_{k}"] > 0 for k in range(1, 8)])  # block x hhgq
    hhgq_of_cell = load_schema("pl94_persons").query("hhgq").matrix.toarray().argmax(axis=0)
    h = nnls.histograms
    rows = invariants.index.get_indexer(h["GEOID"])
    forbidden = ~allowed[rows, hhgq_of_cell[h["CELL"].to_numpy()]]
    assert (~allowed).any() and len(h) > 0
    assert np.abs(h["COUNT"].to_numpy()[forbidden]).max(initial=0.0) < 1e-9


def test_topdown_with_other_passes_is_a_valid_release_that_says_so(tiny, tmp_path):
    release, bundle, _, _ = tiny
    settings = tmp_path / "one-pass.toml"
    settings.write_text('[postprocess]\npasses = [["total"], []]\n')
    other = das.postprocess(bundle, out=tmp_path / "other", settings=settings)
    assert other.valid and "passes" in other.manifest.postprocessed_with
    assert other.manifest.privacy == release.manifest.privacy and other.manifest.spec_text == release.manifest.spec_text
    assert other.manifest.nmf == release.manifest.nmf  # the same noise, post-processed otherwise
    assert not other.mdf.equals(release.mdf)
    assert reproduce(other.path).ok  # its own settings, from its manifest
    assert cli(["postprocess", str(bundle), "--out", str(tmp_path / "cli"), "--settings", str(settings),
                "--workers", "1", "--no-progress"]) == 0
    assert RunDir(tmp_path / "cli").read().postprocessed_with == other.manifest.postprocessed_with


def test_settings_that_are_not_a_postprocess_table_are_refused_before_anything_is_written(tiny, tmp_path):
    _, bundle, _, _ = tiny
    wrong = tmp_path / "wrong.toml"
    wrong.write_text('[privacy]\ndelta = "1e-9"\n')
    with pytest.raises(SpecError, match=r"wrong.toml: expected a \[postprocess\] table .* found privacy"):
        das.postprocess(bundle, out=tmp_path / "a", settings=wrong)
    with pytest.raises(SpecError, match=r"the settings dict: \[postprocess\] passes: pass 1 names 'nope'"):
        das.postprocess(bundle, out=tmp_path / "b", settings={"passes": [["nope"], []]})
    with pytest.raises(SpecError, match=r"the settings dict: .*rounding must be one of"):
        das.postprocess(bundle, out=tmp_path / "c", settings={"rounding": "none"})  # never fractional as a release
    with pytest.raises(RunError, match="estimator wls takes no post-processing settings"):
        das.postprocess(bundle, out=tmp_path / "d", estimator="wls", settings={"passes": [[]]})
    with pytest.raises(RunError, match="an estimate is not a release and is not signed"):
        das.postprocess(bundle, out=tmp_path / "e", estimator="nnls", signing_key=tmp_path / "key")
    with pytest.raises(RunError, match="estimator 'ols' is not one"):
        das.postprocess(bundle, out=tmp_path / "f", estimator="ols")
    assert not any((tmp_path / name).exists() for name in "abcdef")


def test_metrics_scores_a_release_or_an_estimate_against_another(tiny, tmp_path):
    release, bundle, wls, nnls = tiny
    itself = das.metrics(bundle, against=release, out=tmp_path / "itself", estimators=("topdown", "wls"))
    mae = itself.metrics.set_index(["estimator", "level", "query", "bin"])["mae"]
    assert (mae["topdown"] == 0).all()  # a release against its own MDF: no difference anywhere
    assert itself.meta["against"]["path"] == str(release.path)
    wls_vs_wls = das.metrics(bundle, against=wls, estimators=("wls",), out=tmp_path / "wls")
    assert (wls_vs_wls.metrics["mae"] < 1e-8).all()  # the NMF's WLS against the estimate of it
    vs = das.metrics(nnls, against=release, out=tmp_path / "nnls")
    total = vs.metrics.query("query == 'total' and bin == 'all'").set_index("level")
    assert total.loc["nation", "mae"] < 1e-6 and total.loc["block", "mae"] > 0
    assert set(vs.metrics["estimator"]) == {"nnls"}
    report = vs.report()
    assert "NOT the truth" in (report.parent / "report.md").read_text()


def test_what_metrics_cannot_compare_is_refused_saying_why(tiny, tmp_path):
    release, bundle, wls, _ = tiny
    with pytest.raises(StudyError, match="not both"):
        das.metrics(wls, truth=TRUTH, against=release, out=tmp_path / "a")
    with pytest.raises(StudyError, match=r"is an estimate \(wls\): only it can be scored"):
        das.metrics(wls, truth=TRUTH, estimators=("noisy",), out=tmp_path / "b")
    flat = das.synth("tiny", mechanism="flat", out=tmp_path / "flat", seed=3)
    with pytest.raises(StudyError, match="is a synthetic release: das metrics --against"):
        das.metrics(flat, against=release, out=tmp_path / "c")
    with pytest.raises(StudyError, match="give its truth"):
        das.metrics(wls, out=tmp_path / "e")  # an estimate records no input
    assert not any((tmp_path / name).exists() for name in "abce")


@pytest.mark.slow  # a DHC release: ~18 s on 2 loaded cores
def test_a_release_of_another_schema_is_not_compared(tiny, tmp_path):
    release = tiny[0]
    dhc = das.run("vt_grand_isle_dhc", out=tmp_path / "dhc", seed=1, progress=False)
    with pytest.raises(StudyError, match="not of the same persons schema and levels"):
        das.metrics(release, against=dhc, out=tmp_path / "d")
    assert not (tmp_path / "d").exists()


def test_an_estimate_directory_is_replaced_but_never_what_das_did_not_write(tiny, tmp_path):
    _, bundle, _, _ = tiny
    out = tmp_path / "wls"
    first = das.postprocess(bundle, out=out, estimator="wls")
    again = das.postprocess(bundle, out=out, estimator="wls")  # deterministic: replaced without --overwrite
    assert again.histograms.equals(first.histograms)
    (out / "notes.txt").write_text("mine")
    with pytest.raises(das.OutDirError, match="notes.txt"):
        das.postprocess(bundle, out=out, estimator="wls")
    assert (out / "notes.txt").read_text() == "mine"
    with pytest.raises(RunError, match="not a das estimate directory"):
        das.Estimate.open(bundle)


def test_the_command_line_writes_an_estimate_and_scores_it_against_the_release(tiny, tmp_path, capsys):
    release, bundle, _, _ = tiny
    copy = tmp_path / "bundle"
    shutil.copytree(bundle, copy)
    assert cli(["postprocess", str(copy), "--out", str(tmp_path / "w"), "--estimator", "wls"]) == 0
    out = capsys.readouterr().out
    assert "the wls estimate of" in out and "AN ESTIMATE, NOT A RELEASE" in out
    assert cli(["metrics", str(tmp_path / "w"), "--against", str(copy), "--out", str(tmp_path / "m")]) == 0
    out = capsys.readouterr().out
    assert "not the truth" in out and "wls" in out
