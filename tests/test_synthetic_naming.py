"""A synthetic release named as itself (issue 36, item 5): its summary names the mechanism and says what was checked
against the inputs; `das metrics` and `das report` of it score its MDF under the mechanism's name, without
`--estimators`, and say nothing of estimators it does not have (TopDown's, the noisy measurements', WLS)."""

from __future__ import annotations

import json
import re

import pandas as pd
import pytest

import das
from das.cli import main
from das.research import series
from das.research.report import build_report

NOT_COMPUTED = ("TopDown", "topdown", "WLS", "wls", "noisy")  # words of a TopDown release's estimators


@pytest.fixture(scope="module")
def flat(tmp_path_factory):
    """A `das synth tiny --mechanism flat --seed 1` release (a fraction of a second)."""
    return das.synth("tiny", mechanism="flat", out=tmp_path_factory.mktemp("synth") / "flat", seed=1)


@pytest.fixture(scope="module")
def flat_metrics(flat, tmp_path_factory):
    out = tmp_path_factory.mktemp("metrics") / "flat-metrics"
    assert main(["metrics", str(flat.path), "--out", str(out), "-q"]) == 0  # no --estimators
    return out


def test_the_summary_names_the_mechanism_and_what_was_checked(flat):
    summary = flat.summary
    assert summary.startswith("das synth --mechanism flat tiny: ") and "das run" not in summary
    assert "(0 checks)" not in summary
    assert "against the inputs (operator only): nothing checked (flat publishes no invariant" in summary
    assert "validation: PASSED (" in summary and "nmf/" not in summary and "failsafe" not in summary


def test_the_summary_of_a_mechanism_that_spends_no_rho(tmp_path):
    stability = das.synth("tiny", mechanism="stability", out=tmp_path / "s", seed=1)  # (eps, delta)-DP directly
    summary = stability.summary
    assert summary.startswith("das synth --mechanism stability tiny: ")
    assert "(eps, delta)-DP directly, no rho spent" in summary and "eps = " in summary


def test_metrics_scores_the_release_under_its_mechanism_name(flat, flat_metrics, capsys):
    assert main(["metrics", str(flat.path), "--out", str(flat_metrics)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "(das synth --mechanism flat)" in out[0] and out[1].split() == ["level", "flat"]
    for name in ("stats", "metrics", "bias", "errors", "areas", "composition"):
        frame = pd.read_parquet(flat_metrics / f"{name}.parquet")
        assert set(frame["estimator"]) == {"flat"}, name
    meta = json.loads((flat_metrics / "study.json").read_text())
    assert meta["study"]["estimators"] == ["flat"] and meta["mechanism"]["name"] == "flat"
    metrics_md = (flat_metrics / "metrics.md").read_text()
    assert "| flat |" in metrics_md and not any(word in metrics_md for word in NOT_COMPUTED)


def test_metrics_says_what_a_synthetic_release_supports(flat, tmp_path, capsys):
    assert main(["metrics", str(flat.path), "--out", str(tmp_path / "m"), "--estimators", "topdown,noisy"]) == 2
    err = capsys.readouterr().err
    assert "only its own estimator flat" in err and "not noisy" in err and "leave --estimators out" in err
    assert not (tmp_path / "m").exists()
    # its own, by its name or by the product's
    assert main(["metrics", str(flat.path), "--out", str(tmp_path / "m"), "--estimators", "flat", "-q"]) == 0
    assert set(pd.read_parquet(tmp_path / "m" / "metrics.parquet")["estimator"]) == {"flat"}


def test_the_api_scores_a_synthetic_release_without_estimators(flat, tmp_path):
    study = das.metrics(flat, out=tmp_path / "m")
    assert set(study.metrics["estimator"]) == {"flat"} and study.meta["study"]["estimators"] == ["flat"]


def test_the_report_names_the_mechanism_and_no_estimator_it_lacks(flat_metrics):
    index = build_report(flat_metrics)
    page = re.sub(r"data:image/png;base64,[^\"]*", "", index.read_text())  # the text, not the figures' bytes
    report_md = (index.parent / "report.md").read_text()
    for text in (page, report_md):
        assert "(das synth --mechanism flat)" in text and series.label("flat") in text
        assert not [word for word in NOT_COMPUTED if word in text], [w for w in NOT_COMPUTED if w in text]
    assert "Estimator: flat (block-level Gaussian), the release itself" in report_md


def test_a_topdown_report_describes_only_the_estimators_scored(tmp_path):
    release = das.run("tiny", out=tmp_path / "run", seed=1, workers=1)
    das.metrics(release, out=tmp_path / "m", estimators=("topdown",))
    report_md = (build_report(tmp_path / "m").parent / "report.md").read_text()
    assert "Estimator: TopDown (released). TopDown is the released product" in report_md
    assert not [word for word in ("WLS", "wls", "noisy") if word in report_md]
    assert report_md.startswith("# Accuracy report: tiny\n")  # a TopDown run: no mechanism named


def test_a_comparison_without_topdown_describes_no_topdown_estimate(tmp_path):
    from das.research.compare_report import table_note

    study = das.compare("tiny", out=tmp_path / "c", mechanisms=("flat",), seeds=1, attack_blocks=0)
    text = (study.path / "comparison.md").read_text() + (study.path / "report" / "index.html").read_text()
    assert "flat" in text and "`wls`" not in text and "`noisy`" not in text and "TopDown's own" not in text
    full = table_note(["topdown", "wls", "noisy", "exact"])
    assert "`wls` and `noisy`" in full and "can be negative" in full and "`exact` is the attack" in full
