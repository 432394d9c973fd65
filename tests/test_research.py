"""Bias research: metrics by hand, the WLS reference against a direct KKT solve, replicate
studies (the known TopDown bias reproduced, WLS consistent with zero), metrics of a run, reports."""

import json
from fractions import Fraction

import numpy as np
import pandas as pd
import pytest
from conftest import ROOT

from das.cli import main as das_main
from das.core.errors import OutDirError
from das.driver.run import run
from das.frame.outdir import RECORD
from das.io.nmf import NoisyAnswers
from das.model.geography import Geography
from das.model.rules import Invariants
from das.model.schema import schema_from_dict
from das.research.estimators import _LevelSystem, answers, distribute, query_matrix, wls_level
from das.research.evaluate import evaluate_run, metrics_dir
from das.research.figures import moving_average
from das.research.metrics import SIZE_BINS, combine, error_stats, metrics, size_bin
from das.research.replicate import Study, bias_table, replicate_study
from das.research.report import build_report
from das.validate import validate_run

# --------------------------------------------------------------------------------------------
# Metrics against hand-computed values


def test_size_bins_follow_the_issue_edges():
    truth = np.array([0, 1, 9, 10, 99, 100, 999, 1000, 9999, 10000, 123456])
    assert [SIZE_BINS[b] for b in size_bin(truth)] == [
        "0", "1-9", "1-9", "10-99", "10-99", "100-999", "100-999", "1000-9999", "1000-9999", "10000+", "10000+"]
    with pytest.raises(ValueError):
        size_bin(np.array([-1]))


def test_metrics_match_a_hand_computed_example():
    truth = np.array([[0, 4], [20, 200]])
    estimate = np.array([[1, 3], [22, 190]])
    m = metrics(error_stats(estimate, truth)).set_index("bin")
    # errors: +1 (T=0), -1 (T=4), +2 (T=20), -10 (T=200)
    allbin = m.loc["all"]
    assert allbin["n"] == 4
    assert allbin["mean_error"] == pytest.approx((1 - 1 + 2 - 10) / 4)
    assert allbin["mae"] == pytest.approx(14 / 4)
    assert allbin["rmse"] == pytest.approx(np.sqrt((1 + 1 + 4 + 100) / 4))
    assert allbin["max_abs_error"] == 10
    # over cells with T > 0: relative errors -1/4, 2/20, -10/200
    assert allbin["malpe"] == pytest.approx(100 * (-0.25 + 0.1 - 0.05) / 3)
    assert allbin["mape"] == pytest.approx(100 * (0.25 + 0.1 + 0.05) / 3)
    # off by more than 5%: T=0 with error 1, 1/4, 2/20 yes; 10/200 = 5% exactly is not more
    assert allbin["share_off_5pct"] == pytest.approx(3 / 4)
    # TVD per geounit: row 0: est (1/4, 3/4) vs truth (0, 1) -> 1/4; row 1: (22/212, 190/212) vs (20/220, 200/220)
    row1 = 0.5 * (abs(22 / 212 - 20 / 220) + abs(190 / 212 - 200 / 220))
    assert allbin["tvd"] == pytest.approx((0.25 + row1) / 2)
    assert m.loc["0", "mean_error"] == 1 and m.loc["1-9", "mean_error"] == -1
    assert m.loc["10-99", "mae"] == 2 and m.loc["100-999", "malpe"] == pytest.approx(-5.0)
    assert np.isnan(m.loc["0", "malpe"])  # no positive truth in the bin


def test_statistics_are_additive_across_parts():
    rng = np.random.default_rng(0)
    truth = rng.poisson(30, size=(40, 6))
    estimate = truth + rng.normal(0, 3, size=truth.shape)
    whole = metrics(error_stats(estimate, truth).assign(key=1)).set_index("bin")
    parts = pd.concat([error_stats(estimate[:15], truth[:15]), error_stats(estimate[15:], truth[15:])]).assign(key=1)
    pooled = metrics(combine(parts, ["key", "bin"])).set_index("bin")
    for column in ("n", "mean_error", "mae", "rmse", "mape", "malpe", "max_abs_error", "share_off_5pct", "tvd"):
        assert pooled.loc["all", column] == pytest.approx(whole.loc["all", column]), column


def test_moving_average_is_a_sliding_mean_in_x_order():
    x = np.array([3.0, 1.0, 2.0, 4.0])
    y = np.array([30.0, 10.0, 20.0, 40.0])
    mx, my = moving_average(x, y, 2)
    assert mx.tolist() == [1.5, 2.5, 3.5] and my.tolist() == [15.0, 25.0, 35.0]


# --------------------------------------------------------------------------------------------
# The WLS reference estimator

SMALL = schema_from_dict({
    "name": "small", "description": "3 x 2 test schema", "universe": "persons",
    "attributes": [
        {"name": "a", "column": "A", "codes": [0, 1, 2], "labels": ["a0", "a1", "a2"]},
        {"name": "b", "column": "B", "codes": [0, 1], "labels": ["b0", "b1"]},
    ],
})
VARIANCES = {"total": Fraction(2), "a": Fraction(1), "detailed": Fraction(4)}


def small_geography():
    blocks = ["100010000010001", "100010000010002", "100010000020001", "110010000010001", "110010000010002",
              "110010000010003"]
    return Geography.from_blocks(blocks, ("nation", "state", "county", "tract", "block"))


def kkt_solve(schema, noisy, parent, c=None, d=None):
    """Direct reference: the equality-constrained WLS of one parent's children as one KKT system."""
    n = schema.size
    k = next(iter(noisy.values())).answers.shape[0]
    h = np.zeros((k * n, k * n))
    g = np.zeros(k * n)
    for name, a in noisy.items():
        y, var = a.answers, float(a.variance)
        q = query_matrix(schema, name).toarray()
        for child in range(k):
            s = slice(child * n, (child + 1) * n)
            h[s, s] += 2 / var * q.T @ q
            g[s] += 2 / var * q.T @ y[child]
    rows, rhs = [], []
    if parent is not None:
        rows.append(np.hstack([np.eye(n)] * k))
        rhs.append(parent)
    if c is not None:
        for child in range(k):
            block = np.zeros((c.shape[0], k * n))
            block[:, child * n:(child + 1) * n] = c
            rows.append(block)
            rhs.append(d[child])
    a = np.vstack(rows)
    kkt = np.block([[h, a.T], [a, np.zeros((a.shape[0], a.shape[0]))]])
    solution = np.linalg.lstsq(kkt, np.concatenate([g, *rhs]), rcond=None)[0]
    return solution[: k * n].reshape(k, n)


def random_noisy(rng, n_units, schema):
    codes = np.array([str(u) for u in range(n_units)])
    return {name: NoisyAnswers(name, "", codes, rng.normal(5, 3, size=(n_units, query_matrix(schema, name).shape[0])), var)
            for name, var in VARIANCES.items()}


def test_wls_equals_a_direct_kkt_solve_per_parent_with_invariants():
    rng = np.random.default_rng(1)
    geo = small_geography()
    totals = {"nation": np.array([60]), "state": np.array([25, 35])}
    inv = Invariants(np.ones(geo.n_blocks, np.int64), np.zeros((geo.n_blocks, 7), np.int64), totals)
    noisy = {level: random_noisy(rng, geo.n_units(level), SMALL) for level in geo.levels}
    x_nation = wls_level(SMALL, geo, inv, "nation", noisy=noisy["nation"])
    ones = np.ones((1, SMALL.size))
    assert np.allclose(x_nation, kkt_solve(SMALL, noisy["nation"], None, ones, totals["nation"][:, None]))
    x_state = wls_level(SMALL, geo, inv, "state", noisy=noisy["state"], parent=x_nation)
    assert np.allclose(x_state, kkt_solve(SMALL, noisy["state"], x_nation[0], ones, totals["state"][:, None]))
    assert np.allclose(x_state.sum(axis=1), [25, 35])  # the invariant holds exactly (to rounding)
    county = wls_level(SMALL, geo, inv, "county", noisy=noisy["county"], parent=x_state)
    tract = wls_level(SMALL, geo, inv, "tract", noisy=noisy["tract"], parent=county)
    block = wls_level(SMALL, geo, inv, "block", noisy=noisy["block"], parent=tract)
    offsets = geo.child_ranges("tract")
    for p in range(geo.n_units("tract")):
        lo, hi = offsets[p], offsets[p + 1]
        part = {k: v.rows(lo, hi) for k, v in noisy["block"].items()}
        assert np.allclose(block[lo:hi], kkt_solve(SMALL, part, tract[p]))
    assert np.allclose(geo.aggregate(block, "state"), x_state)  # consistent all the way up


def test_woodbury_inverse_equals_the_dense_normal_matrix():
    rng = np.random.default_rng(2)
    noisy = random_noisy(rng, 3, SMALL)
    system = _LevelSystem(SMALL, noisy, None)
    m = sum(query_matrix(SMALL, q).T @ query_matrix(SMALL, q) / float(a.variance) for q, a in noisy.items()).toarray()
    b = rng.normal(size=(4, SMALL.size))
    assert np.allclose(system.apply_inverse(b), np.linalg.solve(m, b.T).T)
    no_detailed = {k: v for k, v in noisy.items() if k != "detailed"}  # singular M: pseudo-inverse
    dense = _LevelSystem(SMALL, no_detailed, None)
    m2 = sum(query_matrix(SMALL, q).T @ query_matrix(SMALL, q) / float(a.variance)
             for q, a in no_detailed.items()).toarray()
    assert np.allclose(dense.apply_inverse(b), b @ np.linalg.pinv(m2))


def test_distribute_shares_the_parent_discrepancy_equally():
    children = np.array([[1.0, 2.0], [3.0, 4.0], [10.0, 10.0]])
    out = distribute(children, np.array([[6.0, 8.0], [7.0, 13.0]]), np.array([0, 2, 3]))
    assert np.allclose(out, [[2.0, 3.0], [4.0, 5.0], [7.0, 13.0]])


def test_wls_reproduces_the_truth_without_noise_on_real_shaped_data():
    """WLS is linear in the answers: exact on noise-free answers means unbiased under zero-mean noise.
    Runs every level of Grand Isle (219 blocks) with PL94's structural zeros and invariants."""
    from das.research.replicate import load_context

    ctx = load_context("vt_grand_isle", seed=1)
    geo, schema = ctx.geography, ctx.schema
    parent = None
    for level in geo.levels:
        truth = geo.aggregate(ctx.blocks, level)
        noisy = {q: NoisyAnswers(q, level, geo.units(level), answers(schema, truth, q), Fraction(var)) for q, var in
                 (("total", 3), ("hhgq", 5), ("votingage x hispanic x cenrace", 7), ("detailed", 11))}
        parent = wls_level(schema, geo, ctx.invariants, level, noisy=noisy, parent=parent)

        assert np.allclose(parent, truth.toarray(), atol=1e-7), level


# --------------------------------------------------------------------------------------------
# Replicate studies on a real county


@pytest.fixture(scope="module")
def study_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("study") / "gi"
    replicate_study(Study("vt_grand_isle", runs=8, seed=11), out, workers=2)
    return out


def test_replicates_reproduce_the_topdown_bias_and_wls_is_unbiased(study_dir):
    bias = pd.read_parquet(study_dir / "bias.parquet")
    total = bias[(bias["query"] == "total") & (bias["bin"] != "all")].set_index(["estimator", "level", "bin"])
    assert (total["replicates"] == 8).all()
    # TopDown: small blocks pushed up (nonnegativity + exact sums), significantly
    for size in ("0", "1-9"):
        row = total.loc[("topdown", "block", size)]
        assert row["mean_error"] > 0 and row["t"] > 4 and row["p"] < 1e-3, (size, row.to_dict())
    assert total.loc[("topdown", "block", "100-999"), "mean_error"] < 0  # ... and large ones down
    # WLS: no bin of any level shows a bias the replicates resolve (Bonferroni over the bins tested)
    wls = total.loc["wls"]
    tested = wls[wls["p"].notna()]
    assert len(tested) >= 4
    assert (tested["p"] > 0.001 / len(tested)).all(), tested[["mean_error", "t", "p"]]
    # the invariant total at state level is exact for both consistent estimators
    stats = pd.read_parquet(study_dir / "stats.parquet")
    state = stats[(stats["level"] == "state") & (stats["query"] == "total") & (stats["bin"] == "all")]
    assert np.allclose(state.loc[state["estimator"] != "noisy", "sum_abs"], 0, atol=1e-6)


def test_seeded_study_resumes_and_reproduces(study_dir, tmp_path):
    before = pd.read_parquet(study_dir / "stats.parquet")
    meta = replicate_study(Study("vt_grand_isle", runs=8, seed=11), study_dir, workers=1)
    assert meta["replicates_run_now"] == 0  # every part was already there: nothing redrawn
    assert len(meta["replicate_timings"]) == 8  # the first invocation's timings are kept
    pd.testing.assert_frame_equal(pd.read_parquet(study_dir / "stats.parquet"), before)
    again = tmp_path / "again"
    replicate_study(Study("vt_grand_isle", runs=2, seed=11, estimators=("noisy", "wls")), again, workers=1)
    sub = before[(before["replicate"] < 2) & before["estimator"].isin(["noisy", "wls"])].reset_index(drop=True)
    pd.testing.assert_frame_equal(pd.read_parquet(again / "stats.parquet"), sub, check_exact=False)
    with pytest.raises(OutDirError, match="holds another study .* pass overwrite=True"):
        replicate_study(Study("vt_grand_isle", runs=3, seed=11), again)


@pytest.mark.slow  # > 10 s (20-40 s on 2 loaded cores)
def test_budget_sweep_gets_more_accurate_with_more_budget(tmp_path):
    out = tmp_path / "sweep"
    replicate_study(Study("vt_grand_isle", rhos=("1/100", "10"), runs=2, seed=5, estimators=("noisy", "wls")),
                    out, workers=1)
    pooled = pd.read_parquet(out / "metrics.parquet")
    block = pooled[(pooled["level"] == "block") & (pooled["query"] == "total") & (pooled["bin"] == "all")]
    mae = block.set_index(["estimator", "rho"])["mae"]
    for estimator in ("noisy", "wls"):
        assert mae[(estimator, "10")] < mae[(estimator, "1/100")] / 5
    report = build_report(out)
    assert (out / "report" / "accuracy_vs_rho.png").exists() and report.exists()


def test_a_budget_sweep_shows_every_budget_and_figures_fit_the_page(tmp_path):
    from PIL import Image

    from das.research.figures import PAGE_PX

    out = tmp_path / "sweep"
    replicate_study(Study("tiny", rhos=("1/10", "1"), runs=2, seed=5, estimators=("topdown", "wls")), out, workers=1)
    page = build_report(out).read_text()
    assert "<h2>rho = 1/10</h2>" in page and "<h2>rho = 1</h2>" in page  # a section per budget
    for stem in ("signed_error_vs_truth", "mae_by_level", "bias_by_size_0", "error_distribution"):
        assert (out / "report" / f"{stem}.png").exists() and (out / "report" / f"{stem}-rho1.png").exists()
    assert "Accuracy and bias report" in page and "Replicates per budget: 2" in page
    for png in (out / "report").glob("*.png"):
        assert Image.open(png).width <= PAGE_PX, png  # shown at its own size: legible


def test_a_single_release_is_never_shown_as_a_study(tmp_path):
    import matplotlib.figure

    drawn = []
    original = matplotlib.figure.Figure.savefig

    def recording(fig, *args, **kwargs):
        drawn.append(fig)
        return original(fig, *args, **kwargs)

    run_dir = tmp_path / "run"
    run(ROOT / "specs/runs/tiny.toml", run_dir, seed=4, workers=1, progress=False)
    evaluate_run(run_dir, out=tmp_path / "m")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(matplotlib.figure.Figure, "savefig", recording)
        page = build_report(tmp_path / "m").read_text()
    assert "Accuracy report (one release)" in page and "not a bias" in page and ": t<" not in page
    titles = [fig.get_suptitle() for fig in drawn]
    assert not any("Bias" in t or "s.e." in t for t in titles), titles
    bars = [fig for fig, t in zip(drawn, titles) if t.startswith("Signed error by true size")]
    assert bars and not any(c.__class__.__name__ == "ErrorbarContainer" for fig in bars for ax in fig.axes
                            for c in ax.containers)  # no error bars of zero width


def test_a_log_axis_floor_is_set_by_the_data_not_by_float_noise():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from das.research.figures import log_values, mark_zeros

    fig, ax = plt.subplots()
    zero = log_values(ax, [0, 1, 2], [1e-13, 0.5, 2.0])  # a WLS MAE of 0 up to float noise
    mark_zeros(ax, [([0, 1, 2], zero, "red")])
    assert zero.tolist() == [True, False, False] and ax.get_ylim()[0] == pytest.approx(0.25)
    plt.close(fig)


def test_report_is_self_contained(study_dir):
    index = build_report(study_dir)
    page = index.read_text()
    assert page.count("data:image/png;base64,") >= 5
    assert "NOT a privacy-protected release" in page and "unconstrained WLS" in page
    md = (study_dir / "report" / "report.md").read_text()
    for name in ("signed_error_vs_truth.png", "bias_by_size_0.png", "mae_by_level.png", "error_distribution.png"):
        assert f"]({name})" in md and (study_dir / "report" / name).stat().st_size > 5000


def test_bias_table_t_and_p():
    stats = pd.DataFrame({"rho": "1", "estimator": "e", "level": "block", "query": "total", "bin": "1-9",
                          "replicate": [0, 1, 2], "n": [10, 10, 10], "sum_err": [10.0, 20.0, 30.0]})
    row = bias_table(stats).iloc[0]
    assert row["mean_error"] == pytest.approx(2.0) and row["se"] == pytest.approx(1 / np.sqrt(3))
    assert row["t"] == pytest.approx(2 * np.sqrt(3)) and 0.05 < row["p"] < 0.1  # t = 3.46, 2 df


# --------------------------------------------------------------------------------------------
# Metrics of one run, and the command line


def test_metrics_of_a_run_agree_with_a_direct_recount(tmp_path):
    result = run("tiny", tmp_path / "run", seed=3, workers=1, progress=False)
    meta = evaluate_run(result.out_dir)
    assert meta["replicates"] == 1
    out = metrics_dir(result.out_dir)
    assert out == tmp_path / "run-metrics"  # beside the release, never in it
    pooled = pd.read_parquet(out / "metrics.parquet").set_index(
        ["estimator", "level", "query", "bin"])
    mdf = pd.read_parquet(result.out_dir / "mdf_persons.parquet")
    truth = pd.read_csv(ROOT / "geography_fixtures/tiny/persons.csv", dtype=str)
    units = pd.read_csv(ROOT / "geography_fixtures/tiny/units.csv", dtype=str)
    key = ["TABBLKST", "TABBLKCOU", "TABTRACTCE", "TABBLK"]
    blocks = units[key].drop_duplicates()
    counts = (blocks.merge(truth.groupby(key).size().rename("t").reset_index(), how="left")
              .merge(mdf.astype({k: str for k in key}).groupby(key).size().rename("e").reset_index(), how="left")
              .fillna(0))
    err = counts["e"] - counts["t"]
    row = pooled.loc[("topdown", "block", "total", "all")]
    assert row["n"] == len(blocks)
    assert row["mae"] == pytest.approx(err.abs().mean()) and row["mean_error"] == pytest.approx(err.mean())
    assert pooled.loc[("topdown", "state", "total", "all"), "mae"] == 0  # invariant
    assert pooled.loc[("wls", "state", "total", "all"), "mae"] == pytest.approx(0, abs=1e-9)
    assert (out / "metrics.md").read_text().startswith("> Research output")
    # a rerun replaces its own earlier output (deterministic), a user's file is never deleted
    stale = out / "parts" / "stats-rho9-rep0000.parquet"  # a part of an earlier `das metrics`
    stale.write_bytes(b"PAR1")
    evaluate_run(result.out_dir, estimators=("topdown",))
    assert not stale.exists() and (out / "metrics.parquet").exists()
    (out / "notes.txt").write_text("mine")
    with pytest.raises(OutDirError, match="notes.txt"):
        evaluate_run(result.out_dir, estimators=("topdown",))
    assert (out / "notes.txt").exists() and (out / "metrics.parquet").exists()
    with pytest.raises(OutDirError, match="a release must hold only its own files"):
        evaluate_run(result.out_dir, out=result.out_dir / "metrics")
    assert validate_run(result.out_dir).ok


def test_cli_errors_are_clear(tmp_path, capsys):
    with pytest.raises(SystemExit) as stopped:  # refused while parsing
        das_main(["replicate", "tiny", "--out", str(tmp_path / "x"), "--estimators", "topdown,magic"])
    assert stopped.value.code == 2 and "unknown name 'magic'" in capsys.readouterr().err
    assert das_main(["replicate", "tiny", "--out", str(tmp_path / "x"), "--rho", "0"]) == 2
    assert "--rho" in capsys.readouterr().err
    assert das_main(["report", str(tmp_path)]) == 2
    assert "study.json is missing" in capsys.readouterr().err
    assert das_main(["metrics", str(tmp_path)]) == 2
    assert "not a das run directory (no manifest.json)" in capsys.readouterr().err


def test_cli_replicate_and_report(tmp_path, capsys):
    out = tmp_path / "cli"
    code = das_main(["replicate", "tiny", "--runs", "2", "--seed", "1", "--workers", "1", "--out", str(out),
                     "--estimators", "noisy,wls", "--report"])
    assert code == 0
    printed = capsys.readouterr().out
    assert "NOT private" in printed and "report:" in printed
    meta = json.loads((out / "study.json").read_text())
    assert meta["status"] == "complete" and meta["replicates"] == 2 and "NOT private" in meta["randomness"]
    assert meta["confidential"] is True and json.loads((out / RECORD).read_text())["confidential"] is True
    assert das_main(["report", str(out)]) == 0  # deterministic: its own earlier report replaced
    # --overwrite deletes the study's own files and its report, never a user's file
    other = ["replicate", "tiny", "--runs", "1", "--seed", "2", "--workers", "1", "--out", str(out),
             "--estimators", "noisy"]
    (out / "report" / "notes.txt").write_text("mine")
    capsys.readouterr()
    assert das_main(other) == 2 and das_main([*other, "--overwrite"]) == 2
    assert "report/notes.txt" in capsys.readouterr().err and (out / "report" / "index.html").exists()
    (out / "report" / "notes.txt").unlink()
    assert das_main([*other, "--overwrite"]) == 0
    assert not (out / "report").exists() and len(list((out / "parts").glob("stats-*"))) == 1


def test_wls_on_a_schema_it_cannot_hold_is_refused_before_any_work(tmp_path, capsys):
    out = tmp_path / "dhc"
    assert das_main(["replicate", "vt_grand_isle_dhc", "--runs", "1", "--seed", "1", "--out", str(out),
                     "--estimators", "noisy,wls"]) == 2
    err = capsys.readouterr().err
    assert "estimator wls" in err and "233,856" in err and "leave wls out" in err
    assert not list((out / "parts").glob("*.parquet"))


def test_replicate_refuses_no_workers_and_a_budget_over_the_cap_before_anything(tmp_path):
    from das.core.errors import ArgumentError
    from das.driver.preflight import PreflightError

    for workers in (0, -2):
        with pytest.raises(ArgumentError, match="workers= must be an integer of at least 1"):
            replicate_study(Study(spec="tiny", runs=1), tmp_path / "out", workers=workers)
    with pytest.raises(PreflightError, match=r"rho=20: rho = 20 is above 10"):
        replicate_study(Study(spec="tiny", rhos=("1/2", "20"), runs=1), tmp_path / "out")
    assert not (tmp_path / "out").exists()
