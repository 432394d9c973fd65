"""das/cli/release.py: every release command parses as documented, and bad values are refused with
exit code 2 and the reason (never a traceback), before anything is written."""

from fractions import Fraction

import pytest
from conftest import ROOT, cli_commands, cli_refused, cli_refused_by_parser

from das.cli import build_parser, release

PARSED = [  # (argv, handler, what the parsed arguments hold)
    (["run", "tiny"], "_cmd_run", {"spec": "tiny", "out": None, "seed": None, "overwrite": False, "resume": None,
                                   "engine": "local", "scheduler": None, "memory_gb": None, "allow_large_rho": False,
                                   "no_progress": False}),
    (["run", "--resume", "runs/tiny", "--workers", "3", "--memory-gb", "2.5"], "_cmd_run",
     {"spec": None, "resume": "runs/tiny", "workers": 3, "memory_gb": 2.5}),
    (["run", "tiny", "--out", "o", "--seed", "7", "--engine", "dask", "--scheduler", "tcp://h:8786", "--overwrite",
      "--allow-large-rho", "--no-progress"], "_cmd_run",
     {"out": "o", "seed": 7, "engine": "dask", "scheduler": "tcp://h:8786", "overwrite": True, "allow_large_rho": True,
      "no_progress": True}),
    (["validate", "RUN"], "_cmd_validate", {"run_dir": "RUN", "inputs": None}),
    (["validate", "RUN", "--inputs", "p.csv", "u.csv"], "_cmd_validate", {"inputs": ["p.csv", "u.csv"]}),
    (["validate", "RUN", "--public-key", "k.pub"], "_cmd_validate", {"public_key": "k.pub"}),
    (["validate", "RUN", "--reproduce", "--workers", "1"], "_cmd_validate", {"reproduce": True, "workers": 1}),
    (["postprocess", "BUNDLE", "--out", "o"], "_cmd_postprocess",
     {"bundle": "BUNDLE", "out": "o", "overwrite": False, "signing_key": None, "no_progress": False,
      "estimator": "topdown", "settings": None}),
    (["postprocess", "BUNDLE", "--out", "o", "--estimator", "nnls", "--settings", "s.toml"], "_cmd_postprocess",
     {"estimator": "nnls", "settings": "s.toml"}),
    (["publish", "RUN", "--to", "b.tar"], "_cmd_publish", {"run_dir": "RUN", "to": "b.tar", "overwrite": False}),
    (["keygen", "k"], "_cmd_keygen", {"key": "k"}),
    (["run", "tiny", "--signing-key", "k"], "_cmd_run", {"signing_key": "k"}),
    (["validate-input", "p.csv", "u.csv"], "_cmd_validate_input",
     {"persons": "p.csv", "units": "u.csv", "schema": "pl94_persons"}),
    (["privacy", "tiny", "--json"], "_cmd_privacy", {"spec": "tiny", "json": True}),
    (["measure", "tiny", "--out", "o", "--seed", "3"], "_cmd_measure",
     {"spec": "tiny", "out": "o", "seed": 3, "overwrite": False, "allow_large_rho": False}),
    (["tables", "RUN", "--out", "o"], "_cmd_tables", {"source": "RUN", "out": "o", "format": "pl94171"}),
    (["tables", "PL", "--out", "o", "--format", "parquet"], "_cmd_tables", {"format": "parquet", "names": "readable"}),
    (["tables", "PL", "--out", "o", "--format", "parquet", "--names", "pl"], "_cmd_tables", {"names": "pl"}),
    (["init", "p.csv", "u.csv", "--out", "s.toml"], "_cmd_init",
     {"persons": "p.csv", "units": "u.csv", "out": "s.toml", "name": None, "schema": "pl94_persons"}),
    (["audit-privacy", "tiny"], "_cmd_audit_privacy",
     {"spec": "tiny", "trials": None, "rho": None, "delta": None, "seed": None, "json": False, "release": []}),
]


def test_every_release_command_is_exercised_here():
    assert cli_commands(release) == {argv[0] for argv, _, _ in PARSED}


@pytest.mark.parametrize("argv, handler, values", PARSED, ids=[" ".join(a) for a, _, _ in PARSED])
def test_a_release_command_parses(argv, handler, values):
    args = build_parser().parse_args(argv)
    assert args.func is getattr(release, handler)
    assert {k: getattr(args, k) for k in values} == values


@pytest.mark.parametrize("argv, expected", [
    (["run", "tiny", "--workers", "abc"], "argument --workers: expected an integer, got 'abc'"),
    (["run", "tiny", "--workers", "0"], "argument --workers: expected an integer of at least 1, got 0"),
    (["run", "tiny", "--seed", "x"], "argument --seed: expected an integer, got 'x'"),
    (["run", "tiny", "--seed", "-1"], "argument --seed: expected an integer of at least 0, got -1"),
    (["run", "tiny", "--engine", "nope"], "argument --engine: invalid choice: 'nope'"),
    (["run", "tiny", "--memory-gb", "lots"], "argument --memory-gb: expected a number, got 'lots'"),
    (["run", "tiny", "--memory-gb", "-1"], "argument --memory-gb: expected a positive finite number, got '-1'"),
    (["run", "tiny", "--rho", "0.1.2"], "argument --rho: '0.1.2' is not an exact fraction"),
    (["run", "tiny", "--delta", "1"], "argument --delta: must be strictly between 0 and 1, got '1'"),
    (["run", "tiny", "--rho", "9" * 1000], "(1,000 characters)"),
    (["validate"], "the following arguments are required: run_dir"),
    (["validate", "RUN", "--inputs", "p.csv"], "argument --inputs: expected 2 arguments"),
    (["validate-input", "p.csv"], "the following arguments are required: units"),
    (["keygen"], "the following arguments are required: key"),
    (["measure", "tiny"], "the following arguments are required: --out"),
    (["postprocess", "BUNDLE"], "the following arguments are required: --out"),
    (["postprocess", "BUNDLE", "--out", "o", "--estimator", "ols"], "argument --estimator: invalid choice: 'ols'"),
    (["tables", "RUN", "--out", "o", "--format", "csv"], "argument --format: invalid choice: 'csv'"),
    (["audit-privacy", "tiny", "--trials", "many"], "argument --trials: expected an integer, got 'many'"),
    (["audit-privacy", "tiny", "--trials", "0"], "argument --trials: expected an integer of at least 1, got 0"),
    (["audit-privacy", "tiny", "--rho", "abc"], "argument --rho: 'abc' is not an exact fraction"),
    (["audit-privacy", "tiny", "--rho", "0"], "argument --rho: must be positive, got '0'"),
    (["audit-privacy", "tiny", "--delta", "2"], "argument --delta: must be strictly between 0 and 1, got '2'"),
])
def test_a_malformed_release_command_is_refused_while_parsing(argv, expected, capsys):
    assert expected in cli_refused_by_parser(argv, capsys)


@pytest.mark.parametrize("argv, expected", [
    (["run", "tiny", "--workers", "2", "--memory-gb", "0.5"],
     "das run: --memory-gb 0.5 leaves nothing for the state tasks: the driver and 2 workers need about 1.1 GB alone"),
    (["run", "tiny", "--rho", "11"], "(--rho 11): [persons] rho = 11 is above 10"),
    (["run", "tiny", "--rho", "1/2", "--eps", "1"], "das run: --rho and --eps both set the persons budget: give one"),
    (["measure", "tiny", "--eps", "200"], "If that is intended, pass --allow-large-rho"),
    (["privacy"], "das privacy: das privacy needs a SPEC (its certificate), or --eps E --delta D"),
    (["privacy", "--eps", "1"], "das privacy: das privacy needs a SPEC"),
    (["run"], "das run: das run needs a SPEC (or --resume RUN_DIR)"),
    (["run", "tiny", "--resume", "RUN", "--overwrite"], "--resume continues a run; it cannot be combined with --overwrite"),
    (["privacy", "no_such_spec"], "das privacy: no run spec 'no_such_spec'"),
    (["measure", "no_such_spec"], "das measure: no run spec 'no_such_spec'"),
    (["audit-privacy", "no_such_spec"], "das audit-privacy: no run spec 'no_such_spec'"),
])
def test_a_bad_value_is_refused_before_anything_is_written(argv, expected, tmp_path, capsys):
    out = tmp_path / "out"
    if argv[0] in ("run", "measure") and "--resume" not in argv:
        argv = [*argv, "--out", str(out)]
    assert expected in cli_refused(argv, capsys)
    assert not out.exists()


def test_resuming_what_is_not_a_run_says_what_was_expected(tmp_path, capsys):
    printed = cli_refused(["run", "--resume", str(tmp_path / "nothing")], capsys)
    assert f"cannot resume {tmp_path / 'nothing'}" in printed and "manifest.json not found" in printed


def test_validate_and_tables_name_what_they_could_not_read(tmp_path, capsys):
    assert "not a das run directory" in cli_refused(["validate", str(tmp_path / "nothing")], capsys)
    (tmp_path / "src").mkdir()
    printed = cli_refused(["tables", str(tmp_path / "src"), "--out", str(tmp_path / "o")], capsys)
    assert "input is invalid" in printed and "no P.L. 94-171 files (*.pl) here" in printed
    assert not (tmp_path / "o").exists()


def test_validate_input_names_each_missing_file_and_an_unknown_schema(tmp_path, capsys):
    printed = cli_refused(["validate-input", str(tmp_path / "p.csv"), str(tmp_path / "u.csv")], capsys)
    assert f"{tmp_path / 'p.csv'}: file not found" in printed and f"{tmp_path / 'u.csv'}: file not found" in printed
    persons, units = ROOT / "geography_fixtures/tiny/persons.csv", ROOT / "geography_fixtures/tiny/units.csv"
    printed = cli_refused(["validate-input", str(persons), str(units), "--schema", "nonesuch"], capsys)
    assert "das validate-input: no schema spec 'nonesuch'" in printed


def test_privacy_converts_a_budget_both_ways(capsys):
    from das.cli import main

    assert main(["privacy", "--eps", "17.1436", "--delta", "1e-10"]) == 0
    assert "rho = 255623/100000" in capsys.readouterr().out
    assert main(["privacy", "--rho", "293764/114921", "--delta", "1e-10"]) == 0
    assert "eps = 17.1436" in capsys.readouterr().out
    assert main(["privacy", "tiny", "--eps", "4", "--json"]) == 0
    import json

    persons = json.loads(capsys.readouterr().out)["persons"]
    assert persons["eps"] <= 4 and persons["delta"] == "1e-10"


def test_measure_spends_the_budget_the_command_line_gives(tmp_path, capsys):
    from das.cli import main
    from das.frame.rundir import RunDir

    out = tmp_path / "m"
    assert main(["measure", "tiny", "--out", str(out), "--seed", "1", "--rho", "1/2", "--delta", "1/1000000"]) == 0
    cert = RunDir(out).read().certificate("persons")
    assert (cert.rho, cert.delta) == (Fraction(1, 2), Fraction(1, 10**6))
