"""The `das` command line, one module per family of commands: release (run, validate, measure,
tables, privacy, init...), research (metrics, replicate, report, compare), attack, and synth (other
mechanism families). Each command calls the Python API (das.api) or the layer that owns the work, and
imports what it runs only when it runs, so `das --help` and a refused command start quickly.

Messages go through `logging` (each module's logger, under "das") to stderr: `-q` keeps errors only,
`-v` adds each level's and stage's details; results go to stdout. Progress bars (das.core.progress) show on a terminal only.
"""

from __future__ import annotations

import argparse
import os
import sys

import das
from das.cli import attack, release, research, synth
from das.cli.args import Parser


def _verbosity(parser: argparse.ArgumentParser, *, top: bool) -> None:
    """-v / -q, on the top parser and on every command (`das -q run ...` and `das run ... -q` alike)."""
    default = 0 if top else argparse.SUPPRESS  # a command's own flag overrides the top's only when given
    group = parser.add_mutually_exclusive_group()
    group.add_argument("-v", "--verbose", dest="verbosity", action="store_const", const=1, default=default,
                       help="say more: each level's and stage's details (problems, largest parent, duality gaps, "
                            "times; log level DEBUG), on stderr only")
    group.add_argument("-q", "--quiet", dest="verbosity", action="store_const", const=-1, default=default,
                       help="say less: errors only, no progress bars (the results on stdout say what a warning would)")


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="das", description="Disclosure avoidance: TopDown with exact discrete-Gaussian noise.")
    p.add_argument("--version", action="version", version=f"das {das.__version__}",
                   help="print das's version and exit")
    _verbosity(p, top=True)
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for family in (release, research, attack, synth):
        family.add_parsers(sub)
    for command in sub.choices.values():
        _verbosity(command, top=False)
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    from das.core.progress import configure

    configure(args.verbosity)
    try:
        return _refusals(args)
    except BrokenPipeError:  # `das privacy tiny --json | head`: the reader left; nothing more to say, no traceback
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # Python's own flush at exit must not fail again
        os.close(devnull)
        return 141  # 128 + SIGPIPE, what a shell reports for a command ended by a closed pipe


def _refusals(args) -> int:
    """The command run, every refusal (a das.DasError: a user's mistake, said in flags) mapped to rc 2 and one
    message on stderr; a run stopped by das's own error (RunStopped, SolverError) rc 1 with how to continue."""
    from das.core.errors import DasError, InputError, RunStopped, SolverError, command_line
    from das.model.specfile import cut_long_words

    try:
        with command_line():
            return args.func(args)
    except (RunStopped, SolverError) as e:  # a started run stopped on das's own error: how to continue, no traceback
        print(f"das {args.command}: {cut_long_words(str(e))}", file=sys.stderr)
        return 1
    except DasError as e:
        lead = "input is invalid:\n" if isinstance(e, InputError) else ""
        print(f"das {args.command}: {lead}{cut_long_words(str(e))}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        raise
    except OSError as e:  # a file or directory the system refused (permission, a symbolic link loop, disk full...)
        where = f"{e.filename}: " if e.filename else ""
        print(f"das {args.command}: {cut_long_words(where + (e.strerror or str(e)))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
