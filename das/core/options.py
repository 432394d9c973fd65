"""A command line that never guesses, for every command das ships (the `das` CLI, `python -m` entry points and the
scripts): a long option is spelled out whole (argparse would take `--ep 1 --del 1e-6` as `--eps --delta`), and an
option that takes a value is given at most once (`--rho 1/4 --rho 1/2` would use 1/2 silently).
"""

from __future__ import annotations

import argparse
import difflib

GIVEN = "_das_given"  # the options one parse has stored so far (StoreOnce's memory; gone before args are returned)


class StoreOnce(argparse._StoreAction):
    """argparse's `store`, refusing an option given a second time, naming both spellings."""

    def __call__(self, parser, namespace, values, option_string=None):
        if self.option_strings:
            given = namespace.__dict__.setdefault(GIVEN, {})
            if self.dest in given:
                spellings = "" if given[self.dest] == option_string else f" (as {given[self.dest]}, then {option_string})"
                raise argparse.ArgumentError(self, f"given twice{spellings}: give it once")
            given[self.dest] = option_string
        super().__call__(parser, namespace, values, option_string)


class ExactParser(argparse.ArgumentParser):
    """An ArgumentParser without abbreviations of long options, whose value-taking options are given once each
    (its subcommands' parsers are of the same class, so the rules hold under every command)."""

    def __init__(self, *args, **kwargs):
        kwargs["allow_abbrev"] = False
        super().__init__(*args, **kwargs)
        self.register("action", None, StoreOnce)
        self.register("action", "store", StoreOnce)

    def parse_known_args(self, args=None, namespace=None):
        namespace, rest = super().parse_known_args(args, namespace)
        namespace.__dict__.pop(GIVEN, None)
        return namespace, rest

    def parse_args(self, args=None, namespace=None):
        namespace, rest = self.parse_known_args(args, namespace)
        if rest:  # refused by the (sub)command that was given, each unknown option with the nearest one it has
            parser = self._chosen(namespace)
            known = [o for a in parser._actions for o in a.option_strings if o.startswith("--")]
            hints = []
            for item in rest:
                near = difflib.get_close_matches(item.partition("=")[0], known, n=1) if item.startswith("--") else []
                hints.append(f"{item} (did you mean {near[0]}?)" if near else item)
            parser.error(f"unrecognized arguments: {' '.join(hints)}")
        return namespace

    def _chosen(self, namespace) -> argparse.ArgumentParser:
        """The parser of the subcommand the arguments named (itself when it has none)."""
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction):
                chosen = action.choices.get(getattr(namespace, action.dest, None) or "")
                if chosen is not None:
                    return chosen._chosen(namespace) if isinstance(chosen, ExactParser) else chosen
        return self
