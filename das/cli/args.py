"""What every command's arguments share: a parser that shows each default in --help and cuts long
values from its errors, and argument types that check a value when it is parsed (rc 2, naming the
argument and what was expected), including the budget arguments of every command that spends one.
"""

from __future__ import annotations

import argparse
import difflib
import re
from fractions import Fraction

from das.core.arguments import integer_problem, path_problem
from das.core.options import ExactParser
from das.model.specfile import SHOWN_CHARACTERS, positive_fraction, shown

MAX_RHO_TEXT = "10"  # das.driver.preflight.MAX_RHO, spelled out so that --help imports nothing heavy (tests check they agree)


class DefaultsFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """--help with each default: a value is shown as "(default: X)"; an option whose default is None (or
    a flag, off by default) says in its own help what happens without it, so "(default: None)" never shows."""

    def _get_help_string(self, action):
        if action.default is None or action.default is False or "default" in (action.help or ""):
            return action.help
        return super()._get_help_string(action)


NEGATIVE_NUMBER = re.compile(r"^-\.?\d")  # no das option starts with a digit


class Parser(ExactParser):
    """The `das` parser: exact (das.core.options: no abbreviations, each option once), --help showing every default,
    errors never echoing a value whole."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", DefaultsFormatter)
        super().__init__(*args, **kwargs)
        # a value that starts like a negative number ("-1/2", "-1e-5", "-.5") is the option's value, checked by its
        # type (`--rho -1/2`: rho must be positive), not an unknown option ("expected one argument")
        self._negative_number_matcher = NEGATIVE_NUMBER

    def error(self, message: str):
        long = re.compile(rf"'([^']{{{SHOWN_CHARACTERS},}})'")
        super().error(long.sub(lambda m: shown(m.group(1)), message))

    def _get_values(self, action, arg_strings):
        # argparse drops a lone "--" given as an option's value (`--runs=--`) and stores [] unchecked
        if action.option_strings and action.nargs is None and arg_strings == ["--"]:
            self.error(f"argument {'/'.join(action.option_strings)}: expected a value, got '--'")
        return super()._get_values(action, arg_strings)


def shipped(kind: str) -> tuple[str, ...]:
    """The names of the shipped specs of a kind (specs/<kind>/*.toml), for --help and choices: a directory
    listing, no spec read."""
    from importlib import resources

    return tuple(sorted(p.name.removesuffix(".toml") for p in resources.files("das.specs").joinpath(kind).iterdir()
                        if p.name.endswith(".toml")))


def spec_help(kind: str = "runs", what: str = "run spec") -> str:
    """The help of an argument naming a spec: the shipped names, or a .toml path."""
    return f"{what}: a shipped name ({', '.join(shipped(kind))}) or a .toml path"


SEED_HELP = ("replication mode: seeded noise, outputs labelled NOT private (default: none, noise from the operating "
             "system's CSPRNG)")

def path(text: str) -> str:
    """A file or directory name the operating system can take (das.core.arguments.path_problem: the API's rule too)."""
    problem = path_problem(text)
    if problem is not None:
        raise argparse.ArgumentTypeError(f"expected {problem}")
    return text


AREA_TYPE = r"[A-Za-z_][A-Za-z0-9_]*"  # das.io.areas.TYPE_NAME, spelled out so --help imports nothing heavy (tests agree)


def area_file(text: str) -> tuple[str, str]:
    """An argument type: TYPE=PATH, an area type (letters, digits, underscores; not starting with a digit) and
    its area file (das.io.areas: columns GEOID and area).

    >>> area_file("place=places.csv")
    ('place', 'places.csv')
    """
    area_type, equals, file = text.partition("=")
    if not equals or not file:
        raise argparse.ArgumentTypeError(f"expected TYPE=PATH (an area type, '=', its area file), got {shown(text)}")
    if not re.fullmatch(AREA_TYPE, area_type):
        raise argparse.ArgumentTypeError(f"the area type of {shown(text)} is not a name: letters, digits and "
                                         "underscores, not starting with a digit")
    return area_type, path(file)


def integer(minimum: int):
    """An argument type: an integer of at least `minimum` (das.core.arguments.integer_problem: the API's rule too, so
    `--seed -1` and `seed=-1` are refused alike)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {shown(text)}") from None
        problem = integer_problem(value, minimum)
        if problem is not None:
            raise argparse.ArgumentTypeError(f"expected {problem}")
        return value

    parse.__name__ = f"integer >= {minimum}"
    return parse


positive_int = integer(1)
nonnegative_int = integer(0)


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {shown(text)}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive finite number, got {shown(text)}")
    return value


def share(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number between 0 and 1, got {shown(text)}") from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"expected a share between 0 and 1, got {shown(text)}")
    return value


def fraction(text: str) -> Fraction:
    """An exact positive fraction: "1/2", "0.25", "1e-10" (a float would be rounded)."""
    try:
        return positive_fraction(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def delta(text: str) -> Fraction:
    value = fraction(text)
    if value >= 1:
        raise argparse.ArgumentTypeError(f"must be strictly between 0 and 1, got {shown(text)}")
    return value


def names(choices):
    """An argument type: a comma list of some of `choices` (an unknown name refused, the nearest named); `choices`
    may be a function giving them, called only when the argument is parsed (a registry that is heavy to import)."""

    def parse(text: str) -> tuple[str, ...]:
        known = tuple(choices() if callable(choices) else choices)
        given = tuple(part.strip() for part in text.split(",") if part.strip())
        if not given:
            raise argparse.ArgumentTypeError(f"expected a comma list of {', '.join(known)}")
        for name in given:
            if name not in known:
                near = difflib.get_close_matches(name, known, n=1)
                hint = f" (did you mean {near[0]}?)" if near else ""
                raise argparse.ArgumentTypeError(f"unknown name {shown(name)}{hint}; expected some of {', '.join(known)}")
        return given

    parse.__name__ = "comma list"
    return parse


def add_budget(parser: argparse.ArgumentParser, *, eps: bool = True, rho_help: str | None = None,
               delta_help: str | None = None) -> None:
    """The budget arguments of a command that spends one: --rho (or --eps at --delta) and the one
    acknowledgement of a budget above the cap, --allow-large-rho."""
    parser.add_argument("--rho", type=fraction, default=None,
                        help=rho_help or "persons zCDP budget, an exact fraction like 1/2 or 0.25 (default: the spec's)")
    if eps:
        parser.add_argument("--eps", type=fraction, default=None,
                            help="persons budget as eps at --delta: the largest exact rho whose certificate is within "
                                 "(eps, delta) (default: the spec's budget)")
        parser.add_argument("--delta", type=delta, default=None,
                            help=delta_help or "delta of the certificate, an exact fraction in (0, 1) (default: the "
                                                    "spec's [privacy] delta)")
    parser.add_argument("--allow-large-rho", action="store_true",
                        help=f"acknowledge a budget above the cap (rho > {MAX_RHO_TEXT}): barely protected")


def budget(args):
    """The das.driver.runspec.Budget the budget arguments give (or None when none was given)."""
    from das.driver.runspec import Budget

    given = Budget(rho=getattr(args, "rho", None), eps=getattr(args, "eps", None), delta=getattr(args, "delta", None))
    return given if given else None


def add_overwrite(parser: argparse.ArgumentParser, what: str, *, where: str = "the output directory",
                  then: str = "") -> None:
    """--overwrite, said the same way by every command that writes a directory (das.frame.outdir decides what it
    may delete): `what` is replaced in `where`, and nothing but its own files is ever deleted."""
    parser.add_argument("--overwrite", action="store_true",
                        help=f"replace {what} in {where}, deleting only its own files; a directory holding any other "
                             f"file is refused{then}")
