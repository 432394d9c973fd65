"""The `das` command line, one module per family of commands: release (run, validate, measure,
tables, privacy...), research (metrics, replicate, report), attack, and synth (other mechanism
families). Each command imports the modules it runs only when it runs, so `das --help` and a
refused command start quickly.
"""

from __future__ import annotations

import argparse
import os
import sys

from das.cli import attack, release, research, synth
from das.cli.args import Parser


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="das", description="Disclosure avoidance: TopDown with exact discrete-Gaussian noise.")
    sub = p.add_subparsers(dest="command", required=True)
    for family in (release, research, attack, synth):
        family.add_parsers(sub)
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "run" and args.out is None and args.spec is not None:  # `das run`'s default --out
        args.out = os.path.join("runs", args.spec.rsplit("/", 1)[-1].removesuffix(".toml"))
    from das.io.microdata import InputError
    from das.outdir import OutDirError
    from das.privacy.strategy import BudgetError
    from das.research.replicate import StudyError
    from das.run import RunError
    from das.schema import SpecError
    from das.signing import SigningError
    from das.specfile import cut_long_words

    try:
        return args.func(args)
    except (SpecError, RunError, BudgetError, StudyError, OutDirError, SigningError) as e:
        print(f"das {args.command}: {cut_long_words(str(e))}", file=sys.stderr)
        return 2
    except InputError as e:
        print(f"das {args.command}: input is invalid:\n{cut_long_words(str(e))}", file=sys.stderr)
        return 2
    except OSError as e:  # a file or directory the system refused (permission, a symbolic link loop, disk full...)
        where = f"{e.filename}: " if e.filename else ""
        print(f"das {args.command}: {cut_long_words(where + (e.strerror or str(e)))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
