"""das/cli/synth.py: `das synth` parses every registered mechanism, and bad values are refused with
exit code 2 and the reason (never a traceback), before anything is written. (Releases that run are
in tests/test_mechanisms.py.)"""

import pytest
from conftest import cli_commands, cli_refused, cli_refused_by_parser

from das.cli import build_parser, synth


def test_synth_is_the_one_command_of_its_family():
    assert cli_commands(synth) == {"synth"}


@pytest.mark.parametrize("mechanism", synth.MECHANISM_NAMES)
def test_synth_parses_every_mechanism_with_its_documented_defaults(mechanism):
    args = build_parser().parse_args(["synth", "tiny", "--mechanism", mechanism, "--out", "o"])
    assert args.func is synth._cmd_synth
    assert (args.spec, args.mechanism, args.out, args.seed, args.rho, args.overwrite) == (
        "tiny", mechanism, "o", None, None, False)


def test_synth_parses_its_options():
    args = build_parser().parse_args(["synth", "tiny", "--mechanism", "flat", "--out", "o", "--seed", "4", "--rho",
                                      "1/2", "--overwrite"])
    assert (args.seed, args.rho, args.overwrite) == (4, "1/2", True)


@pytest.mark.parametrize("argv, expected", [
    (["synth", "tiny", "--out", "o"], "the following arguments are required: --mechanism"),
    (["synth", "tiny", "--mechanism", "flat"], "the following arguments are required: --out"),
    (["synth", "tiny", "--mechanism", "nonesuch", "--out", "o"], "argument --mechanism: invalid choice: 'nonesuch'"),
    (["synth", "tiny", "--mechanism", "flat", "--out", "o", "--seed", "x"], "argument --seed: invalid int value: 'x'"),
    (["synth", "--mechanism", "flat", "--out", "o"], "the following arguments are required: spec"),
])
def test_a_malformed_synth_is_refused_while_parsing(argv, expected, capsys):
    assert expected in cli_refused_by_parser(argv, capsys)


@pytest.mark.parametrize("args, expected", [
    (["tiny", "--rho", "abc"], "das synth: --rho: 'abc' is not an exact fraction"),
    (["tiny", "--rho", "0"], "das synth: --rho: must be positive, got '0'"),
    (["tiny", "--rho=-1/2"], "das synth: --rho: must be positive, got '-1/2'"),
    (["no_such_spec"], "das synth: no run spec 'no_such_spec'"),
])
def test_a_bad_synth_value_is_refused_before_anything_is_written(args, expected, tmp_path, capsys):
    out = tmp_path / "out"
    assert expected in cli_refused(["synth", *args, "--mechanism", "flat", "--out", str(out)], capsys)
    assert not out.exists()
