"""das/cli/attack.py: `das attack` parses as documented, and bad values are refused with exit code 2
and the reason (never a traceback), before anything is read or written. (Attacks that run are in
tests/test_attack.py.)"""

import json

import pytest
from conftest import ROOT, cli_commands, cli_refused, cli_refused_by_parser

from das.cli import attack, build_parser

GRAND_ISLE = ROOT / "geography_fixtures" / "vt_grand_isle" / "persons.parquet"
BLOCK = "500130202002042"


def test_attack_is_the_one_command_of_its_family():
    assert cli_commands(attack) == {"attack"}


def test_attack_parses_with_its_documented_defaults():
    args = build_parser().parse_args(["attack", "--truth", "p.parquet", "--published", "exact", "--out", "o"])
    assert args.func is attack._cmd_attack
    assert {k: getattr(args, k) for k in ("truth", "published", "out", "schema", "tables", "level", "geounits", "count",
                                          "runs", "relaxed", "steps", "batch", "learning_rate", "min_confidence",
                                          "multiset", "baselines", "holdout", "ip_top", "ip_max_persons", "seed")} == {
        "truth": "p.parquet", "published": "exact", "out": "o", "schema": None, "tables": None, "level": "block",
        "geounits": "auto", "count": 10, "runs": 100, "relaxed": 1000, "steps": 1000, "batch": 128,
        "learning_rate": 0.1, "min_confidence": 0.0, "multiset": False, "baselines": "tract,county", "holdout": None,
        "ip_top": 50, "ip_max_persons": 60, "seed": 0}


def test_attack_parses_every_option():
    args = build_parser().parse_args([
        "attack", "--truth", "p", "--published", "RUN", "--out", "o", "--schema", "dhc_persons", "--tables", "dhc_sf1_2010",
        "--level", "tract", "--geounits", "50013020200", "--count", "3", "--runs", "4", "--relaxed", "5", "--steps", "6",
        "--batch", "7", "--learning-rate", "0.5", "--min-confidence", "0.25", "--multiset", "--baselines", "county",
        "--holdout", "h", "--ip-top", "0", "--ip-max-persons", "9", "--workers", "2", "--seed", "11"])
    assert (args.schema, args.tables, args.level, args.geounits, args.count, args.runs, args.relaxed, args.steps,
            args.batch, args.learning_rate, args.min_confidence, args.multiset, args.baselines, args.holdout,
            args.ip_top, args.ip_max_persons, args.workers, args.seed) == (
        "dhc_persons", "dhc_sf1_2010", "tract", "50013020200", 3, 4, 5, 6, 7, 0.5, 0.25, True, "county", "h", 0, 9, 2, 11)


@pytest.mark.parametrize("argv, expected", [
    (["--published", "exact", "--out", "o"], "the following arguments are required: --truth"),
    (["--truth", "p", "--out", "o"], "the following arguments are required: --published"),
    (["--truth", "p", "--published", "exact"], "the following arguments are required: --out"),
    (["--truth", "p", "--published", "exact", "--out", "o", "--level", "county"], "argument --level: invalid choice"),
    (["--truth", "p", "--published", "exact", "--out", "o", "--count", "0"], "argument --count: expected an integer of at least"),
    (["--truth", "p", "--published", "exact", "--out", "o", "--steps", "0"], "argument --steps: expected an integer of at least"),
    (["--truth", "p", "--published", "exact", "--out", "o", "--min-confidence", "2"],
     "argument --min-confidence: expected a share between 0 and 1, got '2'"),
    (["--truth", "p", "--published", "exact", "--out", "o", "--runs", "x"], "argument --runs: expected an integer, got 'x'"),
    (["--truth", "p", "--published", "exact", "--out", "o", "--learning-rate", "fast"],
     "argument --learning-rate: expected a number, got 'fast'"),
])
def test_a_malformed_attack_is_refused_while_parsing(argv, expected, capsys):
    assert expected in cli_refused_by_parser(["attack", *argv], capsys)


@pytest.mark.parametrize("args, expected", [
    (["--published", "exact", "--baselines", "holdout"], "das attack: --baselines holdout needs --holdout PATH"),
    (["--published", "exact", "--geounits", ","], "das attack: --geounits: expected 'auto' or a comma-separated list"),
    (["--published", "exact", "--schema", "nonesuch"], "das attack: no schema spec 'nonesuch'"),
    (["--published", "exact", "--geounits", BLOCK, "--tables", "nonesuch"], "das attack: no attack spec 'nonesuch'"),
    (["--published", "exact", "--baselines", "holdout", "--holdout", "/nonexistent/h.parquet"],
     "/nonexistent/h.parquet: file not found"),
    (["--published", "exact", "--geounits", "123"], "das attack: geounit '123': expected a 15-digit block geocode"),
    (["--published", "exact", "--geounits", f"{BLOCK},5001302020"], "geounit '5001302020': expected a 15-digit block"),
    (["--published", "exact", "--level", "tract", "--geounits", BLOCK],
     f"das attack: geounit '{BLOCK}': expected a 11-digit tract geocode"),
])
def test_a_bad_attack_setting_is_refused_before_any_output(args, expected, tmp_path, capsys):
    out = tmp_path / "audit"
    printed = cli_refused(["attack", "--truth", str(GRAND_ISLE), "--out", str(out), "--workers", "1", *args], capsys)
    assert expected in printed
    assert not out.exists()


def test_a_schema_other_than_the_releases_is_refused(tmp_path, capsys):
    from das.driver.run import run

    release = run("tiny", tmp_path / "release", seed=3, workers=1, progress=False).out_dir
    printed = cli_refused(["attack", "--truth", str(GRAND_ISLE), "--published", str(release), "--schema", "dhc_persons",
                           "--out", str(tmp_path / "audit")], capsys)
    assert f"das attack: --schema dhc_persons: the release {release} uses schema pl94_persons" in printed
    assert not (tmp_path / "audit").exists()


def test_a_truth_that_does_not_cover_the_releases_geography_is_refused(tmp_path, capsys):
    from das.driver.run import run

    release = run("tiny", tmp_path / "release", seed=3, workers=1, progress=False).out_dir
    printed = cli_refused(["attack", "--truth", str(GRAND_ISLE), "--published", str(release), "--out",
                           str(tmp_path / "audit"), "--workers", "1"], capsys)  # Vermont's persons, a release of Rhode Island
    assert f"das attack: --truth {GRAND_ISLE} does not cover the release's geography: it holds no persons in 2 of " \
           "the release's 2 counties (44001, 44003)" in printed
    assert not (tmp_path / "audit").exists()


def test_the_corrected_rerun_of_a_refused_attack_runs(tmp_path, capsys):
    """A geocode --geounits cannot name is refused before --out is claimed (no das-output.json saying
    "running"), so the same command with the geocode corrected writes its attack there (issue 41)."""
    from das.cli import main

    out = tmp_path / "audit"
    quick = ["attack", "--truth", str(GRAND_ISLE), "--published", "exact", "--out", str(out), "--runs", "2",
             "--relaxed", "50", "--steps", "20", "--ip-top", "0", "--workers", "1"]
    assert "geounit '123': expected a 15-digit block geocode" in cli_refused([*quick, "--geounits", "123"], capsys)
    assert not out.exists()
    assert main([*quick, "--geounits", BLOCK]) == 0
    assert f"wrote {out}" in capsys.readouterr().out
    record = json.loads((out / "das-output.json").read_text())
    assert record["status"] == "complete" and "summary.json" in record["files"]
    assert [g["geocode"] for g in json.loads((out / "summary.json").read_text())["geounits"]] == [BLOCK]
