"""The `das` command line (das/cli/__init__.py): every family of commands is reachable, errors exit 2
with the reason. Each family's commands are tested in tests/test_cli_<family>.py."""

import os
import subprocess
import sys

import pytest
from conftest import ROOT, cli_commands

from das.cli import attack, build_parser, main, release, research, synth

COMMANDS = {"run", "validate", "keygen", "validate-input", "privacy", "measure", "tables", "audit-privacy",
            "metrics", "replicate", "report", "compare", "attack", "synth"}


def test_every_command_is_registered_once():
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    families = [cli_commands(family) for family in (release, research, attack, synth)]
    assert set(sub.choices) == COMMANDS == set().union(*families)
    assert sum(len(f) for f in families) == len(COMMANDS)  # no command in two families


def test_a_spec_without_out_writes_under_runs_named_after_the_spec(monkeypatch):
    seen = []

    def recorded(args) -> int:
        seen.append(args.out)
        return 0

    monkeypatch.setattr(release, "_cmd_run", recorded)  # the parser is built per call, so it takes this one
    assert main(["run", "specs/runs/tiny.toml"]) == 0
    assert main(["run", "tiny", "--out", "elsewhere"]) == 0
    assert seen == [os.path.join("runs", "tiny"), "elsewhere"]




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
