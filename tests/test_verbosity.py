"""What the command line says on stderr (issue 36, item 6): -v adds each level's and stage's details, -q keeps
errors only, and a progress bar is a bar on a terminal of any width (das/core/progress.py)."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import select
import struct
import sys
import termios

import pytest

from das.cli import main
from das.core import progress


def _run(capsys, argv: list[str]):
    assert main(argv) == 0
    return capsys.readouterr()


def test_verbose_run_names_each_level_its_problems_largest_parent_and_gap(tmp_path, capsys):
    default = _run(capsys, ["run", "tiny", "--seed", "1", "--workers", "1", "--out", str(tmp_path / "a")])
    verbose = _run(capsys, ["run", "tiny", "--seed", "1", "--workers", "1", "--out", str(tmp_path / "b"), "-v"])
    assert len(verbose.err.splitlines()) > len(default.err.splitlines()) + 12
    levels = ("nation", "state", "county", "tract", "block_group", "block")
    for release in ("persons", "units"):
        for level in levels:
            assert f"measured {release}/{level}: " in verbose.err and f"post-processed {release}/{level}: " in verbose.err
    block = next(line for line in verbose.err.splitlines() if line.startswith("post-processed persons/block: "))
    assert re.search(r"\d+ least-squares problem\(s\), largest parent block_group \d{12} \(\d+ children\), largest "
                     r"relative duality gap \d\.\de[-+]\d\d", block), block
    assert "least-squares problem" not in default.err and "largest parent" not in default.err
    assert verbose.out.splitlines()[1:3] == default.out.splitlines()[1:3]  # the results are stdout's, unchanged
    # the details are the operator's: none reaches a published file
    for path in (tmp_path / "b").rglob("*"):
        if path.is_file() and "operator" not in path.parts and path.suffix in (".json", ".toml", ".txt"):
            assert "largest parent" not in path.read_text(errors="replace"), path
    manifest = json.loads((tmp_path / "b" / "manifest.json").read_text())
    assert "timings_seconds" not in manifest and "seconds" not in json.dumps(manifest.get("levels_report", {}))


def test_verbose_synth_and_measure_say_their_stages(tmp_path, capsys):
    synth = _run(capsys, ["synth", "tiny", "--mechanism", "flat", "--seed", "1", "--out", str(tmp_path / "s"), "-v"])
    assert "ran flat" in synth.err and "detailed per block (discrete Gaussian): rho 2.556" in synth.err
    direct = _run(capsys, ["synth", "tiny", "--mechanism", "stability", "--seed", "1", "--out", str(tmp_path / "d"),
                           "-v"])  # (eps, delta)-DP directly: its steps charge no rho
    assert "ran stability" in direct.err and "(eps, delta)-DP directly" in direct.err and ": no rho" in direct.err
    measured = _run(capsys, ["measure", "tiny", "--seed", "1", "--out", str(tmp_path / "m"), "-v"])
    assert "measured persons/block: 11 queries" in measured.err


@pytest.mark.parametrize("command", [
    ["run", "tiny", "--seed", "1", "--workers", "1"],
    ["synth", "tiny", "--mechanism", "flat", "--seed", "1"],
    ["measure", "tiny", "--seed", "1"],
])
def test_quiet_says_errors_only(tmp_path, capsys, command):
    quiet = _run(capsys, [*command, "--out", str(tmp_path / "q"), "-q"])
    assert quiet.err == ""
    assert "SEEDED REPLICATION MODE" in quiet.out  # what the warning said, the result says on stdout


# ---------------------------------------------------------------------------------------------
# The progress bar on a terminal


def _bar_on_a_terminal(columns: int, rows: int = 0) -> list[str]:
    """What `das.core.progress.bar` draws on a terminal of `columns` x `rows` (0: one that reports no size): each redraw."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
    stream = os.fdopen(slave, "w", encoding="utf-8")
    stderr, sys.stderr = sys.stderr, stream
    try:
        with progress.bar(range(8), desc="measuring persons", unit="level", mininterval=0) as levels:
            for _ in levels:
                pass
    finally:
        sys.stderr = stderr
        stream.close()
    shown = b""
    while select.select([master], [], [], 0.5)[0]:
        try:
            data = os.read(master, 65536)
        except OSError:
            break
        if not data:
            break
        shown += data
    os.close(master)
    return [line for line in re.split(r"[\r\n]+", shown.decode()) if line.strip()]


BAR = re.compile(r"100%\|[^|\s]+\|")  # the finished bar: filled, between its two edges


@pytest.fixture
def no_size_from_the_environment(monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.delenv("LINES", raising=False)
    progress.configure(0)


def test_a_terminal_reporting_no_width_gets_an_80_column_bar(no_size_from_the_environment):
    lines = _bar_on_a_terminal(0)
    assert lines and BAR.search(lines[-1]), lines
    assert "measuring persons" in lines[-1] and max(len(line) for line in lines) <= 80


def test_columns_zero_in_the_environment_is_no_width(no_size_from_the_environment, monkeypatch):
    monkeypatch.setenv("COLUMNS", "0")
    lines = _bar_on_a_terminal(0)
    assert lines and BAR.search(lines[-1]), lines


@pytest.mark.parametrize("columns", [20, 30, 50])
def test_a_narrow_terminal_gets_a_bar_that_fits(no_size_from_the_environment, columns):
    lines = _bar_on_a_terminal(columns, 24)
    assert lines and BAR.search(lines[-1]), lines
    assert max(len(line) for line in lines) < columns
    filled = BAR.search(lines[-1]).group()
    assert len(filled) >= min(10, columns // 2)  # a bar one can read, not a sliver


def test_a_wide_terminal_keeps_the_counts_and_the_estimate(no_size_from_the_environment):
    lines = _bar_on_a_terminal(120, 40)
    assert re.search(r"measuring persons: 100%\|[^|]+\| 8/8 \[\d\d:\d\d<\d\d:\d\d", lines[-1]), lines
    assert max(len(line) for line in lines) < 120
