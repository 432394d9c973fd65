"""das/attack/scenario.py: the audit scenario attacks the same blocks on exact tables and on a release,
beside the baselines, and writes the side-by-side table it promises."""

import json

import pytest

from das.attack.audit import REPORT_FRACTIONS, REPORT_K
from das.attack.scenario import comparison_markdown, main

ARMS = ["(a) RAP-Rank, exact tables", "(b) RAP-Rank, release", "(c) baseline: rest of tract",
        "(c) baseline: rest of county"]


def test_the_table_has_one_row_per_arm_and_a_dash_where_nothing_was_asked():
    rates = {"k_over_u": {str(f): 0.5 for f in REPORT_FRACTIONS}, "k": {str(k): None for k in REPORT_K}}
    rates["k"]["1"] = 1 / 3
    text = comparison_markdown({"arm one": rates, "arm two": rates}, blocks=4, runs=7, release_note="a note")
    lines = text.splitlines()
    assert lines[0] == ("Audit scenario: 4 Grand Isle blocks across the size range, 7 RAP runs each (K = 1000, "
                        "1000 steps); a note.")
    assert lines[2] == "| attack | " + " | ".join(
        [f"k/u={f}" for f in REPORT_FRACTIONS] + [f"k={k}" for k in REPORT_K]) + " |"
    assert lines[3].count("|---") == 1 + len(REPORT_FRACTIONS) + len(REPORT_K)
    assert lines[4] == "| arm one | " + " | ".join(["0.500"] * len(REPORT_FRACTIONS) + ["0.333"]
                                                  + ["-"] * (len(REPORT_K) - 1)) + " |"
    assert lines[5].startswith("| arm two |") and len(lines) == 6


@pytest.fixture(scope="module")
def scenario(tmp_path_factory):
    from das.driver.run import run

    root = tmp_path_factory.mktemp("scenario")
    release = run("tiny", root / "release", seed=5, workers=1, progress=False).out_dir
    out = root / "audit"
    code = main(["--out", str(out), "--release", str(release), "--count", "2", "--runs", "1", "--steps", "20",
                 "--workers", "1", "--seed", "3"])
    return code, release, out


def test_the_scenario_writes_its_table_and_summary(scenario):
    code, release, out = scenario
    assert code == 0
    summary = json.loads((out / "audit.json").read_text())
    assert list(summary["match_rate"]) == ARMS
    assert summary["runs"] == 1 and summary["release"] == str(release)
    assert len(summary["blocks"]) == 2 and all(len(b) == 15 and b.isdigit() for b in summary["blocks"])
    manifest = json.loads((release / "manifest.json").read_text())
    assert f"persons rho = {manifest['privacy']['persons']['rho']}" in summary["release_note"]
    assert "seeded, NOT private" in summary["release_note"]  # a seeded release says so
    table = (out / "audit.md").read_text()
    assert all(f"| {arm} |" in table for arm in ARMS)


def test_both_arms_attack_the_same_blocks_and_the_baselines_do_not_see_the_release(scenario):
    _, _, out = scenario
    exact = json.loads((out / "attack_exact" / "summary.json").read_text())
    release = json.loads((out / "attack_release" / "summary.json").read_text())
    assert [g["geocode"] for g in exact["geounits"]] == [g["geocode"] for g in release["geounits"]]
    assert exact["published"] == "exact tables (no protection)" and release["published"].startswith("release ")
    for scope in ("tract", "county"):  # the rest of the tract or county of the truth: the same whatever was published
        assert exact["match_rate"][f"baseline_{scope}"] == release["match_rate"][f"baseline_{scope}"]
    summary = json.loads((out / "audit.json").read_text())
    assert summary["match_rate"][ARMS[0]] == exact["match_rate"]["rap_rank"]
    assert summary["match_rate"][ARMS[1]] == release["match_rate"]["rap_rank"]
    assert summary["match_rate"][ARMS[2]] == exact["match_rate"]["baseline_tract"]
