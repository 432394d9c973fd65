"""das/cli/synth.py: `das synth` parses every registered mechanism, and bad values are refused with
exit code 2 and the reason (never a traceback), before anything is written. (Releases that run are
in tests/test_mechanisms.py.)"""

from fractions import Fraction

import pytest
from conftest import cli_commands, cli_refused, cli_refused_by_parser

from das.cli import build_parser, synth
from das.mechanisms.registry import ENTRIES


def test_synth_is_the_one_command_of_its_family():
    assert cli_commands(synth) == {"synth"}


@pytest.mark.parametrize("mechanism", tuple(ENTRIES))
def test_synth_parses_every_mechanism_with_its_documented_defaults(mechanism):
    args = build_parser().parse_args(["synth", "tiny", "--mechanism", mechanism, "--out", "o"])
    assert args.func is synth._cmd_synth
    assert (args.spec, args.mechanism, args.out, args.seed, args.rho, args.overwrite) == (
        "tiny", mechanism, "o", None, None, False)


def test_synth_parses_its_options():
    args = build_parser().parse_args(["synth", "tiny", "--mechanism", "flat", "--out", "o", "--seed", "4", "--rho",
                                      "1/2", "--overwrite"])
    assert (args.seed, args.rho, args.overwrite, args.allow_large_rho) == (4, Fraction(1, 2), True, False)


@pytest.mark.parametrize("argv, expected", [
    (["synth", "tiny", "--out", "o"], "the following arguments are required: --mechanism"),
    (["synth", "tiny", "--mechanism", "flat"], "the following arguments are required: --out"),
    (["synth", "tiny", "--mechanism", "nonesuch", "--out", "o"], "argument --mechanism: invalid choice: 'nonesuch'"),
    (["synth", "tiny", "--mechanism", "flat", "--out", "o", "--seed", "x"], "argument --seed: expected an integer, got 'x'"),
    (["synth", "tiny", "--mechanism", "flat", "--out", "o", "--rho", "abc"], "argument --rho: 'abc' is not an exact fraction"),
    (["synth", "tiny", "--mechanism", "flat", "--out", "o", "--rho", "0"], "argument --rho: must be positive, got '0'"),
    (["synth", "tiny", "--mechanism", "flat", "--out", "o", "--rho=-1/2"], "argument --rho: must be positive, got '-1/2'"),
    (["synth", "--mechanism", "flat", "--out", "o"], "the following arguments are required: spec"),
])
def test_a_malformed_synth_is_refused_while_parsing(argv, expected, capsys):
    assert expected in cli_refused_by_parser(argv, capsys)


@pytest.mark.parametrize("args, expected", [
    (["tiny", "--rho", "1000000000"], "das synth: --rho 1000000000: rho = 1e+09 is above 10"),
    (["tiny", "--eps", "100"], "If that is intended, pass --allow-large-rho"),
    (["no_such_spec"], "das synth: no run spec 'no_such_spec'"),
])
def test_a_bad_synth_value_is_refused_before_anything_is_written(args, expected, tmp_path, capsys):
    out = tmp_path / "out"
    assert expected in cli_refused(["synth", *args, "--mechanism", "flat", "--out", str(out)], capsys)
    assert not out.exists()


def test_an_error_of_das_own_in_a_mechanism_is_a_clean_stop(tmp_path, monkeypatch, capsys):
    """As in `das run`: a bug inside a mechanism (after its noise was drawn) ends with rc 1 and what happened, no
    traceback, and nothing written: the noise drawn goes with it, unpublished."""
    from dataclasses import replace

    from das.cli import main
    from das.mechanisms import registry

    def broken(data):
        raise IndexError("a bug in the mechanism")

    monkeypatch.setitem(registry.MECHANISMS, "flat", replace(registry.MECHANISMS["flat"], run=broken))
    out = tmp_path / "flat"
    assert main(["synth", "tiny", "--mechanism", "flat", "--out", str(out), "--seed", "1"]) == 1
    err = capsys.readouterr().err
    assert "IndexError: a bug in the mechanism" in err and "nothing was written or released" in err
    assert "Traceback" not in err and not out.exists()
