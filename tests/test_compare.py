"""`das compare`: mechanisms side by side on the same input; the process-tree memory probe."""

from __future__ import annotations

import json
import stat
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
from conftest import recorded_logs

from das.cli import main
from das.core.errors import OutDirError, StudyError
from das.driver.runspec import load_run_spec
from das.frame import outdir
from das.research.compare import COMPARE, Comparison, attack_rates, mechanism_names, rho_spec_text, run_comparison
from das.research.resources import run_measured

ROOT = Path(__file__).resolve().parents[1]
TINY = str(ROOT / "specs/runs/tiny.toml")
ATTACK = {"attack_blocks": 2, "attack_runs": 2, "attack_relaxed": 40, "attack_steps": 30}


def test_tree_memory_counts_grandchildren():
    """A child running two grandchildren of 100 MB each at once: the tree's peak holds both (any one
    process, as ru_maxrss reports, holds about 100 MB)."""
    grandchild = "b = bytearray(100 * 2**20); import time; time.sleep(1.0)"
    child = ("import subprocess, sys; ps = [subprocess.Popen([sys.executable, '-c', " + repr(grandchild) + "]) "
             "for _ in range(2)]; [p.wait() for p in ps]")
    measured = run_measured([sys.executable, "-c", child], interval=0.02)
    assert measured.returncode == 0 and measured.seconds >= 1.0
    assert measured.peak_tree_mb > 200


def test_tree_memory_is_not_the_parents():
    """A small child of a large parent: its peak is its own (ru_maxrss of an exec'ed child carries the
    parent's high-water mark on Linux, so it is not used)."""
    ballast = bytearray(400 * 2**20)
    ballast[::4096] = b"x" * len(ballast[::4096])  # touch every page: resident
    measured = run_measured([sys.executable, "-c", "import time; time.sleep(0.3)"], interval=0.02)
    assert 0 < measured.peak_tree_mb < 200
    del ballast


def test_failed_command_is_reported():
    failed = run_measured([sys.executable, "-c", "import sys; sys.exit('no such thing')"])
    assert failed.returncode == 1 and "no such thing" in failed.stderr


def test_spec_with_rho_keeps_inputs_and_sets_budget(tmp_path):
    (tmp_path / "spec.toml").write_text(rho_spec_text(TINY, "3/2"))
    derived = load_run_spec(tmp_path / "spec.toml")
    original = load_run_spec(TINY)
    assert str(derived.persons.rho) == "3/2" and original.persons.rho is None
    assert derived.persons_path == original.persons_path and derived.levels == original.levels
    # a spec giving its budget as eps: --rho replaces it, as in das run (not "rho and eps both set")
    with_eps = tmp_path / "eps.toml"
    with_eps.write_text(original.text.replace("../../geography_fixtures", str(ROOT / "geography_fixtures"))
                        .replace('strategy = "pl94_six_level"', 'strategy = "pl94_six_level"\neps = "4"', 1))
    assert load_run_spec(with_eps).persons.eps == 4
    (tmp_path / "from_eps.toml").write_text(rho_spec_text(with_eps, "1/2"))
    derived = load_run_spec(tmp_path / "from_eps.toml")
    assert str(derived.persons.rho) == "1/2" and derived.persons.eps is None


def test_attack_rates_pool_expected_hits_over_blocks_and_seeds():
    attack = pd.DataFrame({"mechanism": "m", "method": "rap_rank", "seed": [0, 0, 1], "geocode": ["a", "b", "a"],
                           "u": [4, 1, 4], "hits_at_u": [2.5, 1.0, 1.0], "hits_at_10": [3.0, 1.0, 2.0]})
    rates = attack_rates(attack).iloc[0]
    assert rates["rate_at_u"] == pytest.approx(4.5 / 9) and rates["rate_at_10"] == pytest.approx(6 / 30)
    assert rates["seeds"] == 2 and rates["blocks"] == 2


def test_unknown_mechanism_and_other_settings_are_refused(tmp_path, monkeypatch):
    with pytest.raises(StudyError, match="unknown mechanism"):
        run_comparison(Comparison(TINY, mechanisms=("nonesuch",), seeds=1), tmp_path / "a")
    import das.mechanisms
    from das.mechanisms import Mechanism

    absent = Mechanism("absent", "needs a library not installed", "none", lambda _: None,
                       plan=lambda public, ledger: None, extra="nothing",
                       available=lambda: False)
    monkeypatch.setitem(das.mechanisms.MECHANISMS, "absent", absent)
    assert "absent" not in mechanism_names()
    with pytest.raises(StudyError, match=r"absent \(pip install 'das\[nothing\]'\)"):
        run_comparison(Comparison(TINY, mechanisms=("topdown", "absent"), seeds=1), tmp_path / "c")
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "compare.json").write_text(json.dumps({"settings": {"spec": "other"}}))
    with pytest.raises(OutDirError, match="is not an output of das compare .* compare.json"):  # no record: a user's
        run_comparison(Comparison(TINY, seeds=1), tmp_path / "b", overwrite=True)
    (tmp_path / "b" / "compare.json").unlink()
    outdir.check(tmp_path / "b", COMPARE).start()  # das compare's own, with other settings
    (tmp_path / "b" / "compare.json").write_text(json.dumps({"settings": {"spec": "other"}}))
    with pytest.raises(OutDirError, match="holds another comparison .* pass overwrite=True"):
        run_comparison(Comparison(TINY, seeds=1), tmp_path / "b")


@pytest.mark.slow
def test_compare_two_mechanisms_two_seeds_then_rerun_skips(tmp_path):
    mechanisms = ("topdown", "flat")
    assert set(mechanisms) <= set(mechanism_names())
    out = tmp_path / "cmp"
    comparison = Comparison(TINY, mechanisms=mechanisms, seeds=2, rho="2", **ATTACK)
    run_comparison(comparison, out, workers=1)
    table = pd.read_parquet(out / "comparison.parquet")
    expected = {"estimator", "seeds", "release_seconds", "peak_tree_mb", "attack_seeds", "rap_rank_at_u",
                "baseline_tract_at_u", "baseline_county_at_u",
                *(f"{kind}_{level}" for kind in ("mae", "bias") for level in ("block", "tract", "county"))}
    assert expected <= set(table.columns)
    rows = table.set_index("estimator")
    assert set(mechanisms) | {"wls", "noisy", "exact"} == set(rows.index)
    released = rows.loc[list(mechanisms)]
    assert np.isfinite(released[sorted(expected - {"estimator"})].to_numpy(float)).all()
    assert (released["seeds"] == 2).all() and (released["attack_seeds"] == 2).all()
    rates = rows.filter(like="_at_u").to_numpy(float)
    assert ((rates[np.isfinite(rates)] >= 0) & (rates[np.isfinite(rates)] <= 1)).all()
    assert pd.read_parquet(out / "stats.parquet")["rho"].eq("2").all()  # the budget asked for, not the spec's
    assert (out / "report" / "index.html").stat().st_size > 0 and (out / "comparison.md").exists()
    # a rerun finds every part done: nothing is made, scored or attacked again, the table is the same
    stamps = {p: p.stat().st_mtime_ns for p in (out / "parts").rglob("*")}
    with recorded_logs("das.research.compare") as logs:
        run_comparison(comparison, out, workers=1)
    assert logs == [] and stamps == {p: p.stat().st_mtime_ns for p in (out / "parts").rglob("*")}
    pd.testing.assert_frame_equal(pd.read_parquet(out / "comparison.parquet"), table)


def test_cli_compare_one_seed(tmp_path, capsys):
    out = tmp_path / "cmp"
    code = main(["compare", TINY, "--mechanisms", "topdown", "--seeds", "1", "--out", str(out), "--workers", "1",
                 "--attack-blocks", "1", "--attack-runs", "1", "--attack-relaxed", "30", "--attack-steps", "20"])
    assert code == 0
    printed = capsys.readouterr().out
    lines = printed.splitlines()
    assert len(lines) <= 12 and lines[1].split() == ["estimator", "MAE", "block", "MAE", "tract", "MAE", "county",
                                                      "s/release", "RAP@u"]
    assert {"topdown", "exact"} <= {line.split()[0] for line in lines[2:]}  # a short table; comparison.md has the rest
    assert main(["compare", TINY, "--mechanisms", "nonesuch", "--seeds", "1", "--out", str(tmp_path / "x")]) == 2
    # everything it wrote (its release, parts, summaries, report) is its own and says it is confidential
    assert json.loads((out / "compare.json").read_text())["confidential"] is True
    assert json.loads((out / outdir.RECORD).read_text())["confidential"] is True
    for path in out.glob("*.parquet"):
        assert outdir.CONFIDENTIAL_KEY in pq.read_schema(path).metadata, path
    removable = outdir.check(out, COMPARE, overwrite=True).remove
    assert {p for p in out.rglob("*") if p.is_file()} == set(removable)
    assert any("releases/topdown/seed0000/mdf_persons.parquet" in str(p) for p in removable)
    # and only its owner may read any of it (its releases too): directories 0700, files 0600
    wide = [p for p in [out, *out.rglob("*")] if stat.S_IMODE(p.stat().st_mode) != (0o700 if p.is_dir() else 0o600)]
    assert wide == []


# ---------------------------------------------------------------------------------------------
# issue 24: every setting checked before anything is made; a comparison whose every release failed


def test_bad_settings_are_refused_as_settings_not_tracebacks(tmp_path):
    from das.core.errors import ArgumentError, SpecError

    with pytest.raises(SpecError, match="rho: 'abc' is not an exact fraction"):
        Comparison(spec="tiny", rho="abc").check()
    with pytest.raises(SpecError, match=r"rho=11: rho = 11 is above 10.*allow_large_rho=True"):
        Comparison(spec="tiny", rho="11").check()
    Comparison(spec="tiny", rho="11", allow_large_rho=True).check()
    for workers in (0, -1, True):
        with pytest.raises(ArgumentError, match="workers= must be an integer of at least 1"):
            run_comparison(Comparison(spec="tiny", seeds=1, attack_blocks=0), tmp_path / "out", workers=workers)
    assert not (tmp_path / "out").exists()


def test_a_comparison_whose_every_release_failed_summarizes_to_nothing(tmp_path):
    from das.research.compare import summarize

    (tmp_path / "parts" / "topdown").mkdir(parents=True)
    (tmp_path / "parts" / "topdown" / "seed0000.json").write_text("{}")  # no scores: every release failed
    assert summarize(tmp_path, Comparison(spec="tiny")) == {"rows": 0, "seeds_scored": 0, "seeds_attacked": 0}


def test_every_series_keeps_one_colour_of_its_own():
    from das.mechanisms.registry import ENTRIES as MECHANISM_NAMES
    from das.research import series

    names = ["topdown", "noisy", "wls", "exact", *MECHANISM_NAMES, "rap_rank",
             *(f"baseline_{scope}" for scope in ("tract", "county", "state", "holdout"))]
    assert all(name in series.known() for name in names)
    assert len({series.color(name) for name in names}) == len(names)  # no colour means two things


def test_the_comparison_figures_draw_each_series_in_its_colour(tmp_path, monkeypatch):
    import matplotlib.colors
    import matplotlib.figure

    from das.research import compare_report, series

    drawn = []
    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", lambda fig, *a, **k: drawn.append(fig))
    levels = ("block", "tract", "county")
    pooled = pd.DataFrame([{"estimator": e, "level": lv, "query": q, "bin": "all", "mae": 0.0 if e == "wls" and
                            lv == "county" else 1.0 + i} for i, e in enumerate(("flat", "topdown", "wls"))
                           for lv in levels for q in ("total", "hhgq")])
    assert compare_report.plot_queries(pooled, tmp_path / "q.png")
    table = pd.DataFrame([{"estimator": e, "seeds": 3, **{f"mae_{lv}": 1.0 for lv in levels},
                           **{f"bias_{lv}": 0.5 for lv in levels}} for e in ("mwem", "topdown")])
    assert compare_report.plot_accuracy(table, tmp_path / "a.png")
    checked = 0
    for fig in drawn:
        for ax in fig.axes:
            for artist in [*ax.get_lines(), *ax.containers]:
                name = next((n for n, s in series.known().items() if s.label == artist.get_label()), None)
                if name is None or not (hasattr(artist, "get_color") or artist.patches):
                    continue
                shown = artist.get_color() if hasattr(artist, "get_color") else artist.patches[0].get_facecolor()
                assert matplotlib.colors.to_hex(shown) == series.color(name).lower(), name  # whichever figure
                checked += 1
    assert checked == 2 * 3 + 2 * 2  # the query panels' lines, and the bars of the accuracy panels with data
    queries_axis = drawn[0].axes[0]
    assert queries_axis.get_yscale() == "log" and queries_axis.get_ylim()[0] >= 0.5  # the exact 0 set no floor


def test_the_comparison_page_tables_fit(tmp_path):
    from das.research.compare_report import page_tables

    table = pd.DataFrame([{"estimator": "topdown", "mae_block": 1.0, "mae_tract": 2.0, "mae_county": 3.0,
                           "bias_block": 0.1, "bias_tract": 0.2, "bias_county": 0.3, "bias_block_0": 0.0,
                           "bias_block_1_9": 0.1, "seeds": 2, "release_seconds": 1.5, "release_cpu_seconds": 1.4,
                           "peak_tree_mb": 200.0, "attack_seeds": 2, "rap_rank_at_u": 0.5, "baseline_tract_at_u": 0.3,
                           "baseline_county_at_u": 0.2}])
    parts = page_tables(table)
    assert len(parts) == 4 and all(len(part.columns) <= 7 for _, part in parts)
    assert parts[0][1]["estimator"].tolist() == ["TopDown (released)"]


def test_a_bad_setting_found_with_the_truth_is_refused_before_the_directory_is_claimed(tmp_path):
    """--tables (the attack workload) and --rho (a spec derived with it) are checked before das-output.json is
    written, so the corrected rerun is not refused as another comparison's directory (issue 41)."""
    from das.core.errors import SpecError

    out = tmp_path / "out"
    with pytest.raises(SpecError, match="no attack spec 'nonesuch'"):
        run_comparison(Comparison(TINY, mechanisms=("flat",), seeds=1, attack_tables="nonesuch"), out)
    assert not out.exists()
    meta = run_comparison(Comparison(TINY, mechanisms=("flat",), seeds=1, attack_blocks=0), out)  # corrected
    assert meta["status"] == "complete" and meta["settings"]["attack_tables"] is None


def test_a_release_runs_in_a_process_of_its_own_from_the_release_child_module(tmp_path):
    from das.frame.rundir import RunDir
    from das.research import release_child

    argv = release_child.command("tiny", "flat", tmp_path / "flat", seed=3, rho=None, workers=1)
    assert argv[:3] == [sys.executable, "-m", "das.research.release_child"]
    measured = run_measured(argv)
    assert measured.returncode == 0, measured.stderr
    manifest = RunDir(tmp_path / "flat").read()
    assert manifest.mechanism.name == "flat" and manifest.validation.valid
    failed = run_measured(release_child.command("tiny", "no-such-mechanism", tmp_path / "x", seed=3, rho=None,
                                                workers=1))
    assert failed.returncode != 0 and "no-such-mechanism" in failed.stderr
