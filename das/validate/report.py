"""What the validator says: the report (a line per check, its violations), one state's findings, and how
the states' findings merge into a report line that lists what one pass over the whole release would.

>>> report = Report()
>>> report.check("EPNUM", ["row 3: repeated"])
>>> report.checks, report.ok
(['FAIL EPNUM'], False)
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from das.core.errors import ValidationError  # noqa: F401  das's (das.core.errors): a run that cannot be validated at all (rc 2)

MAX_LISTED = 20  # a check lists its first problems, then how many more there are


class Stop(Exception):
    """The checks after this one cannot run (what they read is unreadable): a state's checks end with its
    `part`, and a combining function that raises it ends the report."""

    def __init__(self, part: object = None):
        super().__init__("the checks after this one cannot run")
        self.part = part


@dataclass
class Report:
    """A line per check (`checks`), the problems found (`violations`), and what the checks do not prove
    (`notes`: e.g. no public key was given, so nothing about the release's origin)."""

    checks: list[str] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    operator: set[str] = field(default_factory=set)  # checks against the confidential inputs: the operator's only

    def check(self, name: str, problems: list[str], *, operator: bool = False) -> None:
        """A check's line and its problems; `operator`: it compared the release with the confidential inputs,
        so what it found is never published (das.frame.lifecycle keeps it in the operator's record)."""
        self.checks.append(f"{'ok ' if not problems else 'FAIL'} {name}")
        self.violations.extend(f"{name}: {p}" for p in problems)
        if operator:
            self.operator.add(name)

    def split(self) -> tuple[Report, Report]:
        """(what the published files show, what the comparison with the confidential inputs found)."""
        public, against = Report(notes=list(self.notes)), Report(operator=set(self.operator))
        for line in self.checks:
            (against if line[4:].strip() in self.operator else public).checks.append(line)
        for violation in self.violations:
            inputs = any(violation.startswith(f"{name}: ") for name in self.operator)
            (against if inputs else public).violations.append(violation)
        return public, against

    def note(self, text: str) -> None:
        self.notes.append(text)

    @property
    def ok(self) -> bool:
        return not self.violations


def first(problems: list[str]) -> list[str]:
    """The first MAX_LISTED problems, and how many more there are."""
    return problems[:MAX_LISTED] + ([f"... and {len(problems) - MAX_LISTED} more"] if len(problems) > MAX_LISTED else [])


@dataclass
class Findings:
    """Checks run on one part of a release (a state): each check's first MAX_LISTED problems and how
    many there were, so that merged over the parts in order (`merged`) they list what `first` lists
    of all the problems."""

    problems: dict[str, tuple[list[str], int]] = field(default_factory=dict)

    def check(self, name: str, problems: list[str]) -> None:
        listed, count = self.problems.get(name, ([], 0))
        self.problems[name] = ((listed + problems)[:MAX_LISTED], count + len(problems))

    @classmethod
    def fold(cls, parts: Iterable[Findings]) -> Findings:
        """The findings of consecutive parts (a state's shards, in order) as one part's."""
        out = cls()
        for part in parts:
            for name, (listed, count) in part.problems.items():
                have, n = out.problems.get(name, ([], 0))
                out.problems[name] = ((have + listed)[:MAX_LISTED], n + count)
        return out


def firsts(parts: Iterable[list[list[str]]], keep: int) -> list[list[str]]:
    """Problems in kinds (each part: per kind its first `keep`, the kinds the same in every part) folded
    over consecutive parts: per kind, the first `keep` of them all."""
    out: list[list[str]] = []
    for part in parts:
        out = [(mine + more)[:keep] for mine, more in zip(out, part)] if out else [list(p[:keep]) for p in part]
    return out


def merged(parts: Iterable[Findings], name: str, before: list[str] = (), after: list[str] = ()) -> list[str]:
    """`first` of the problems of check `name`: `before`, then every part's in order, then `after`."""
    listed, count = list(before), len(before)
    for part in parts:
        more, n = part.problems.get(name, ([], 0))
        if len(listed) <= MAX_LISTED:
            listed += more
        count += n
    if count <= len(listed):  # every part's problems are all listed
        return first(listed + list(after))
    listed, count = (listed + list(after))[:MAX_LISTED + 1], count + len(after)
    return listed[:MAX_LISTED] + [f"... and {count - MAX_LISTED} more"]


def ran(parts: Iterable[Findings], name: str) -> bool:
    """Whether check `name` ran in any part (a check that runs only when it fails: whether it failed)."""
    return any(name in part.problems for part in parts)
