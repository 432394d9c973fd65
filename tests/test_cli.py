"""The `das` command line: every family of commands is reachable, errors exit 2 with the reason."""

import subprocess
import sys

import pytest
from conftest import ROOT

from das.cli import build_parser, main

COMMANDS = {"run", "validate", "validate-input", "privacy", "measure", "tables", "audit-privacy",
            "metrics", "replicate", "report", "attack"}


def test_every_command_is_registered_once():
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    assert COMMANDS <= set(sub.choices)


def test_python_dash_m_runs_the_same_command_line():
    out = subprocess.run([sys.executable, "-m", "das.cli", "privacy", "tiny"], capture_output=True, text=True,
                         cwd=ROOT, timeout=120)
    assert out.returncode == 0 and "rho" in out.stdout


@pytest.mark.parametrize("argv, expected", [
    (["run", "no_such_spec", "--out", "x"], "no run spec 'no_such_spec'"),
    (["privacy", "no_such_spec"], "no run spec 'no_such_spec'"),
    (["validate", "/nonexistent/run"], "not a das run directory"),
])
def test_a_refused_command_exits_2_with_the_reason(argv, expected, capsys):
    assert main(argv) == 2
    assert expected in capsys.readouterr().err


def test_an_unknown_command_is_an_argparse_error():
    with pytest.raises(SystemExit) as e:
        main(["no-such-command"])
    assert e.value.code == 2
