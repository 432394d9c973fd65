"""docs/architecture.md's "where new code goes", the estimator row: one `Estimator` registered in
das.research.estimators, and `das metrics` and `das replicate` score it, from the release's NMF, with the
others; the report names it and says what it is; the command line accepts it."""

import numpy as np
import pandas as pd
import pytest

import das
from das.research import estimators, series

CLIPPED = estimators.Estimator(
    "clipped", "noisy, clipped at 0", "#123456", "the noisy measurement clipped at zero (a toy: biased upwards)",
    lambda data, carried: ((lambda q: None if (a := estimators.noisy_answers(data.schema, data.noisy, q)) is None
                            else np.maximum(a, 0)), None))


@pytest.fixture
def registered(monkeypatch):
    monkeypatch.setitem(estimators.ESTIMATORS, "clipped", CLIPPED)


@pytest.fixture(scope="module")
def release(tmp_path_factory):
    return das.run("tiny", out=tmp_path_factory.mktemp("estimators") / "run", seed=3, progress=False)


def test_a_registered_estimator_is_scored_reported_and_named(registered, release, tmp_path):
    study = das.metrics(release, estimators=("noisy", "clipped"), queries=("total", "hhgq"), out=tmp_path / "m")
    pooled = study.metrics.set_index(["estimator", "level", "query", "bin"])
    assert {"noisy", "clipped"} == set(study.metrics["estimator"])
    # the truth is never negative, so clipping a noisy answer at zero never moves it further from the truth
    both = pooled.loc["noisy"].merge(pooled.loc["clipped"], left_index=True, right_index=True,
                                      suffixes=("_noisy", "_clipped"))
    assert len(both) > 0 and (both["mae_clipped"] <= both["mae_noisy"] + 1e-12).all()
    page = study.report().with_name("report.md")
    text = page.read_text() if page.is_file() else study.report().read_text()
    assert "noisy, clipped at 0" in text and "clipped at zero" in text
    assert series.label("clipped") == "noisy, clipped at 0" and series.color("clipped") == "#123456"


def test_the_command_line_takes_a_registered_estimator(registered, release, tmp_path, capsys):
    from das.cli import main

    out = tmp_path / "m"
    assert main(["metrics", str(release.path), "--estimators", "clipped", "--queries", "total", "--out", str(out)]) == 0
    assert set(pd.read_parquet(out / "metrics.parquet")["estimator"]) == {"clipped"}
    with pytest.raises(SystemExit) as refused:
        main(["metrics", str(release.path), "--estimators", "clipped,nosy", "--out", str(out)])
    assert refused.value.code == 2 and "did you mean noisy" in capsys.readouterr().err


def test_a_name_is_registered_once():
    with pytest.raises(ValueError, match="already registered"):
        estimators.register(estimators.ESTIMATORS["wls"])


def test_the_command_lines_defaults_are_the_libraries():
    from das.cli import research
    from das.research.replicate import DEFAULT_QUERIES

    assert research.DEFAULT_ESTIMATORS == estimators.DEFAULT_ESTIMATORS and research.DEFAULT_QUERIES == DEFAULT_QUERIES
    assert research.estimator_names() == tuple(estimators.ESTIMATORS)


def test_the_research_guides_example_registers_and_scores_its_estimator(tmp_path, monkeypatch, capsys):
    import re

    from conftest import ROOT

    code = re.search(r"\*\*Another estimator\.\*\*.*?```python\n(.*?)```", (ROOT / "docs/research.md").read_text(),
                     re.S).group(1)
    monkeypatch.chdir(tmp_path)
    try:
        exec(code, {})
    finally:
        estimators.ESTIMATORS.pop("clipped", None)
    printed = capsys.readouterr().out
    assert "clipped" in printed and "noisy" in printed and "block" in printed
