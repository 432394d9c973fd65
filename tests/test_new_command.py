"""docs/architecture.md's "where new code goes", the command row: a toy command written as that row says (a parser
and a `_cmd_` function in its family's module, its Python twin checked at its door, an `outdir.Owner` for the
directory it writes) gets the command line's help, -v/-q, refusals as rc 2 in flags, and the output directory
rules (its own output replaced only with --overwrite, nothing it did not write ever deleted)."""

import argparse

import pytest

from das.cli import main, research
from das.cli.args import add_overwrite, path, positive_int
from das.core import arguments
from das.core.errors import ArgumentError, StudyError, option
from das.frame import outdir

TALLY = outdir.Owner("das tally", "tally", ("tally.txt",))


@arguments.checked
def tally(*, out, count: int = 1, overwrite: bool = False):
    """The Python twin: writes COUNT lines to OUT/tally.txt (the command line's flags are its keywords)."""
    if count > 100:
        raise StudyError(f"{option('count', count)} is more than a tally holds (100)")
    claim = outdir.check(out, TALLY, overwrite=overwrite)
    claim.start()
    (claim.path / "tally.txt").write_text("|\n" * count)
    return claim.finish()


def _cmd_tally(args) -> int:
    print(", ".join(tally(out=args.out, count=args.count, overwrite=args.overwrite)))
    return 0


@pytest.fixture
def with_tally(monkeypatch):
    family = research.add_parsers

    def add_parsers(subparsers) -> argparse.ArgumentParser:
        t = subparsers.add_parser("tally", help="a toy command", description="Write a tally.")
        t.add_argument("--out", type=path, required=True, help="output directory")
        t.add_argument("--count", type=positive_int, default=1, help="lines of the tally")
        add_overwrite(t, "the tally")
        t.set_defaults(func=_cmd_tally)
        return family(subparsers)

    monkeypatch.setattr(research, "add_parsers", add_parsers)


def test_a_new_command_gets_help_flags_and_its_output_directory(with_tally, tmp_path, capsys):
    with pytest.raises(SystemExit) as shown:
        main(["--help"])
    assert shown.value.code == 0 and "tally" in capsys.readouterr().out
    out = tmp_path / "t"
    assert main(["tally", "--out", str(out), "--count", "3", "-q"]) == 0 and capsys.readouterr().out.strip() == "tally.txt"
    assert (out / "tally.txt").read_text() == "|\n" * 3 and outdir.holds(out, TALLY)["status"] == "complete"
    assert main(["tally", "--out", str(out)]) == 2  # its own earlier output: replaced only when asked
    assert "pass --overwrite to replace it" in capsys.readouterr().err
    assert main(["-v", "tally", "--out", str(out), "--overwrite"]) == 0 and (out / "tally.txt").read_text() == "|\n"
    (out / "mine.txt").write_text("a user's file")
    assert main(["tally", "--out", str(out), "--overwrite"]) == 2
    assert "das never deletes them" in capsys.readouterr().err and (out / "mine.txt").read_text() == "a user's file"


def test_a_new_commands_refusals_are_said_in_its_callers_terms(with_tally, tmp_path, capsys):
    with pytest.raises(SystemExit) as refused:
        main(["tally", "--out", str(tmp_path / "t"), "--count", "0"])
    assert refused.value.code == 2 and "--count" in capsys.readouterr().err  # the argument's type, before any work
    assert main(["tally", "--out", str(tmp_path / "t"), "--count", "101"]) == 2
    assert "das tally: --count 101 is more than a tally holds" in capsys.readouterr().err  # a flag on the command line
    with pytest.raises(StudyError, match=r"count=101 is more"):  # a keyword in Python
        tally(out=tmp_path / "t", count=101)
    with pytest.raises(ArgumentError, match="counts"):  # a misspelled keyword, refused at the door
        tally(out=tmp_path / "t", counts=2)
    assert not (tmp_path / "t").exists()
