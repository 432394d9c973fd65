"""das's errors: one hierarchy under `DasError`, so `except das.DasError` catches every refusal of a user's
mistake (a spec, an input, a budget, an output directory, an argument), and the command line prints its
message with rc 2 and no traceback.

    DasError                      any refusal by das, said in the caller's terms
    +-- SpecError (ValueError)    a spec (name, file or dict) or an option das cannot use
    |   +-- BudgetError           a privacy budget das refuses (not positive, above the cap, overspent...)
    +-- ArgumentError (TypeError, ValueError)  an argument of a das function of the wrong type or value
    +-- UnknownNameError (KeyError)  a name das does not hold (a release's table)
    +-- InputError                confidential inputs (files or DataFrames) das cannot release: every problem
    +-- OutDirError (RuntimeError)  an output directory das may not write or clear as asked
    +-- ValidationError           a release that cannot be validated at all (a file missing or unreadable)
    +-- ReleaseError (RuntimeError)  a directory that is not the release it is used as, or may not be published
    +-- StudyError (RuntimeError)    a study (replicate, metrics, compare) that cannot start
    +-- RunError (RuntimeError)      a run that cannot start or continue (resume mismatch...)
    +-- RunStopped (RuntimeError)    a started run stopped by an error of das's own: how to continue (rc 1)
    +-- SolverError (RuntimeError)   the solver found no consistent answer for a parent (das's, not the caller's)

The more specific errors of a module (das.driver.preflight.PreflightError, das.mechanisms.base.MechanismError,
das.frame.signing.SigningError, ...) derive from these; each keeps the builtin base it had, so `except ValueError`
code keeps working. A message names an argument as the caller gave it: `option("overwrite", True)` is
"overwrite=True" from Python and "--overwrite" from the command line (das.cli.main speaks `command_line()`).
This module imports nothing of das's, so `import das` stays light.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator, Sequence

_COMMAND_LINE = contextvars.ContextVar("das_command_line", default=False)


@contextlib.contextmanager
def command_line() -> Iterator[None]:
    """Inside the block, messages name arguments as the command line's flags (das.cli.main's work)."""
    token = _COMMAND_LINE.set(True)
    try:
        yield
    finally:
        _COMMAND_LINE.reset(token)


def on_command_line() -> bool:
    """Whether the caller is the command line (messages name flags) rather than Python (keywords)."""
    return _COMMAND_LINE.get()


def option(name: str, value: object = None, *, python: str | None = None) -> str:
    """Argument `name` (its Python keyword) as the caller spells it: "--allow-large-rho" or "allow_large_rho=True"
    (value True: a flag), "--rho 100" or "rho=100" (a value), "--workers" or "workers=" (none); `python`, when
    given, is the Python spelling whole (a flag whose keyword is not its name).

    >>> option("overwrite", True), option("rho", 100), option("workers")
    ('overwrite=True', 'rho=100', 'workers=')
    """
    if _COMMAND_LINE.get():
        flag = "--" + name.replace("_", "-")
        return flag if value is None or value is True else f"{flag} {value}"
    if python is not None:
        return python
    return f"{name}=" if value is None else f"{name}={value}"


def command(name: str) -> str:
    """A das command as the caller runs it: "`das run`" from the command line, "das.driver.run" from Python."""
    return f"`das {name}`" if _COMMAND_LINE.get() else f"das.{name}"


class DasError(Exception):
    """Any refusal by das of what it was given: the message says what, where, and what was expected."""


class SpecError(DasError, ValueError):
    """A spec (a shipped name, a file or a dict) or an option that is missing, malformed or inconsistent."""


class BudgetError(SpecError):
    """A budget das refuses: not positive, inexact, above the cap unacknowledged, overspent, charged twice."""


class ArgumentError(DasError, TypeError, ValueError):
    """An argument of a das function of the wrong type or out of range (which argument, what it takes)."""


class UnknownNameError(DasError, KeyError):
    """A name das does not hold (a release's table): a KeyError too, its message said plainly."""

    __str__ = Exception.__str__  # KeyError's own would quote the whole message


class InputError(DasError):
    """Input files (or DataFrames) that cannot be used, with every problem found (each says file, row, column)."""

    def __init__(self, problems: Sequence):
        self.problems = list(problems)
        listed = "\n".join(f"  - {p}" for p in self.problems[:20])
        more = f"\n  ... and {len(self.problems) - 20} more problems" if len(self.problems) > 20 else ""
        super().__init__(f"{len(self.problems)} problem(s) in the input:\n{listed}{more}")

    def __reduce__(self):  # raised on a worker (a partitioned run reads each state there), re-raised whole here
        return type(self), (self.problems,)


class OutDirError(DasError, RuntimeError):
    """An output directory a command may not write or clear as asked."""


class ValidationError(DasError):
    """A release that cannot be validated at all: a file is missing or unreadable."""


class ReleaseError(DasError, RuntimeError):
    """A directory that is not the release it is used as (not a das run, unfinished), or may not be published."""


class StudyError(DasError, RuntimeError):
    """A study (das replicate, metrics, compare) that cannot start: bad options, a directory holding another study."""


class RunError(DasError, RuntimeError):
    """A run that cannot start or continue (a resume of a different run, an unusable directory...)."""


class RunStopped(DasError, RuntimeError):
    """A run that had started stopped on an error of das's own (not of its input): nothing is released, and what it
    had committed (noisy measurements, solved levels) is kept to resume (`das run --resume`). Its cause is `__cause__`."""


class SolverError(DasError, RuntimeError):
    """The solver found no consistent answer for a parent even after the failsafe: das's failure, not the caller's."""


ERRORS = ("DasError", "SpecError", "BudgetError", "ArgumentError", "UnknownNameError", "InputError", "OutDirError",
          "ValidationError", "ReleaseError", "StudyError", "RunError", "RunStopped", "SolverError")
