"""The `das` command line (das/cli/__init__.py): every family of commands is reachable, errors exit 2
with the reason. Each family's commands are tested in tests/test_cli_<family>.py."""

import os
import re
import subprocess
import sys

import pytest
from conftest import ROOT, cli_commands

from das.cli import attack, build_parser, main, release, research, synth

COMMANDS = {"run", "init", "validate", "postprocess", "publish", "keygen", "validate-input", "privacy", "measure", "tables",
            "audit-privacy",
            "metrics", "replicate", "report", "compare", "attack", "synth"}


def test_every_command_is_registered_once():
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    families = [cli_commands(family) for family in (release, research, attack, synth)]
    assert set(sub.choices) == COMMANDS == set().union(*families)
    assert sum(len(f) for f in families) == len(COMMANDS)  # no command in two families


def test_a_spec_without_out_writes_under_runs_named_after_the_spec(monkeypatch, tmp_path):
    from das.driver import run as run_module

    seen = []

    def recorded(spec, out_dir, **settings):
        seen.append(str(out_dir))
        raise run_module.RunError("stop here")

    monkeypatch.setattr(run_module, "run", recorded)
    spec = tmp_path / "file_name.toml"  # its `name` key says "tiny": the spec's name, as --help says
    spec.write_text((ROOT / "specs/runs/tiny.toml").read_text().replace("../../", f"{ROOT}/"))
    for argv in (["run", "specs/runs/tiny.toml"], ["run", "tiny", "--out", "elsewhere"], ["run", str(spec)]):
        assert main(argv) == 2
    assert seen == [os.path.join("runs", "tiny"), "elsewhere", os.path.join("runs", "tiny")]




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


# ---------------------------------------------------------------------------------------------
# Usability (issue 27): version, quiet and verbose, a closed pipe, short and aligned output, progress on a terminal


def test_version_is_printed(capsys):
    import das

    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0 and capsys.readouterr().out.strip() == f"das {das.__version__}"


def test_a_closed_pipe_ends_quietly():
    process = subprocess.Popen([sys.executable, "-m", "das.cli", "privacy", "tiny", "--json"], cwd=ROOT,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, "PYTHONPATH": str(ROOT)})
    process.stdout.readline()  # `| head -1`: one line read, then the pipe is closed
    process.stdout.close()
    err = process.stderr.read().decode()
    assert process.wait(timeout=120) in (0, 141) and err == "", err


def test_quiet_and_verbose(tmp_path, capsys):
    assert main(["run", "tiny", "--out", str(tmp_path / "a"), "--seed", "1", "--workers", "1", "-q"]) == 0
    quiet = capsys.readouterr()
    assert quiet.err == ""  # errors only (issue 36)
    assert "validation: PASSED" in quiet.out and "SEEDED REPLICATION MODE" in quiet.out  # the result says it
    assert main(["-v", "run", "tiny", "--out", str(tmp_path / "b"), "--seed", "1", "--workers", "1"]) == 0
    assert "read 145 persons in 12 blocks" in capsys.readouterr().err


def test_privacy_columns_are_aligned(capsys):
    assert main(["privacy", "tiny"]) == 0
    lines = capsys.readouterr().out.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("level "))
    table = lines[header + 2:next(i for i in range(header, len(lines)) if lines[i].startswith("share:"))]
    levels = [line for line in table if "(all queries)" in line]  # level, share, rho: right-aligned columns
    queries = [line for line in table if "(all queries)" not in line]  # ... and sigma^2, sigma
    assert len(levels) == 6 and len({len(line) for line in levels}) == 1  # the persons release's six levels
    assert len(queries) > 6 and {len(line) for line in queries} == {len(lines[header])}


def test_help_lists_valid_names(capsys):
    with pytest.raises(SystemExit):
        main(["validate-input", "--help"])
    shown = " ".join(capsys.readouterr().out.split())
    assert "one of dhc_persons, pl94_persons, or a .toml path" in shown
    with pytest.raises(SystemExit):
        main(["attack", "--help"])
    assert "dhc_sf1_2010" in capsys.readouterr().out


def test_metrics_prints_a_short_summary(tmp_path, capsys):
    assert main(["run", "tiny", "--out", str(tmp_path / "r"), "--seed", "1", "--workers", "1", "-q"]) == 0
    capsys.readouterr()
    assert main(["metrics", str(tmp_path / "r")]) == 0
    out = capsys.readouterr().out.splitlines()
    # one table: a row per level, then one per area type off the spine (the synthetic districts here), then where
    # the details are
    assert len(out) <= 12 and out[1].split() == ["level", "topdown", "noisy", "wls"] and "metrics.md" in out[-1]
    assert [line.split()[0] for line in out[2:-1]][-2:] == ["district_1k", "district_5k"]


def _in_a_terminal(argv: list[str]) -> str:
    """What `das ARGV` shows on a terminal (a pseudo-terminal of 120 columns), stdout and stderr together."""
    import fcntl
    import pty
    import select
    import struct
    import termios

    pid, fd = pty.fork()
    if pid == 0:  # the child: a terminal of its own
        fcntl.ioctl(1, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
        os.environ["PYTHONPATH"] = str(ROOT)
        os.chdir(ROOT)
        os.execv(sys.executable, [sys.executable, "-m", "das.cli", *argv])
    shown = b""
    while select.select([fd], [], [], 120)[0]:
        try:
            data = os.read(fd, 65536)
        except OSError:
            break
        if not data:
            break
        shown += data
    os.waitpid(pid, 0)
    return shown.decode(errors="replace")


def test_long_work_shows_progress_with_an_estimate_on_a_terminal_only(capsys):
    shown = _in_a_terminal(["audit-privacy", "tiny", "--trials", "300", "--seed", "1"])
    assert re.search(r"audit trials: +\d+%\|.*\| [\d.]+k?/[\d.]+k? \[\d\d:\d\d<\d\d:\d\d", shown), shown[-2000:]
    assert main(["audit-privacy", "tiny", "--trials", "300", "--seed", "1"]) == 0  # stderr not a terminal: no bar
    assert "%|" not in capsys.readouterr().err
