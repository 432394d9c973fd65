"""The rules of the arguments das's two interfaces share, one function per rule: a seed is an integer >= 0,
workers an integer >= 1, an input a path or a DataFrame... The Python API checks its arguments at the door
with them (`checked`, each keyword by the rule of its name) and the command line checks its flags with the
same ones (das.cli.args), so `seed=-1` and `--seed -1` are refused alike: ArgumentError (a das.DasError),
naming the argument as the caller spells it (das.core.errors.option).
"""

from __future__ import annotations

import difflib
import functools
import inspect
import numbers
import os
from collections.abc import Callable, Mapping

from das.core.errors import ArgumentError, option
from das.model.specfile import shown

MAX_PATH_BYTES, MAX_NAME_BYTES = 4096, 255  # Linux's PATH_MAX and NAME_MAX


def integer_problem(value, minimum: int) -> str | None:
    """What is wrong with `value` as an integer of at least `minimum` (None: nothing). The rule of both interfaces."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        return f"an integer of at least {minimum}, not {type(value).__name__} {shown(value)}"
    if value < minimum:
        return f"an integer of at least {minimum}, got {value}"
    return None


def integer(value, name: str, *, minimum: int) -> int:
    """`value` as an int of at least `minimum`, or ArgumentError naming `name`."""
    problem = integer_problem(value, minimum)
    if problem is not None:
        raise ArgumentError(f"{option(name)} must be {problem}")
    return int(value)


def seed(value, name: str = "seed") -> int:
    """A seed: an integer >= 0 (replication mode: seeded noise, NOT private)."""
    return integer(value, name, minimum=0)


def workers(value, name: str = "workers") -> int:
    """A number of processes: an integer >= 1."""
    return integer(value, name, minimum=1)


def count(value, name: str) -> int:
    """A count of runs, seeds, steps...: an integer >= 1."""
    return integer(value, name, minimum=1)


def nonnegative(value, name: str) -> int:
    """An integer >= 0 (0 meaning none)."""
    return integer(value, name, minimum=0)


def flag(value, name: str) -> bool:
    """A yes/no argument: True or False (a string "no" would be true)."""
    if not isinstance(value, bool):
        raise ArgumentError(f"{option(name)} must be True or False, not {type(value).__name__} {shown(value)}")
    return value


def positive_number(value, name: str) -> float:
    """A positive finite number."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0 < value < float("inf"):
        raise ArgumentError(f"{option(name)} must be a positive number, not {shown(value)}")
    return value


def share(value, name: str) -> float:
    """A number between 0 and 1."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0 <= value <= 1:
        raise ArgumentError(f"{option(name)} must be a number between 0 and 1, not {shown(value)}")
    return value


def text(value, name: str) -> str:
    """A name (a string)."""
    if not isinstance(value, str):
        raise ArgumentError(f"{option(name)} must be a string, not {type(value).__name__} {shown(value)}")
    return value


def path_problem(value) -> str | None:
    """What keeps `value` from being a file or directory name the operating system takes (None: nothing): a
    str or os.PathLike, no NUL byte, at most 4096 bytes, each name at most 255."""
    if not isinstance(value, (str, os.PathLike)):
        return f"a path (a str or pathlib.Path), not {type(value).__name__} {shown(value)}"
    text = os.fspath(value)
    if isinstance(text, bytes):
        return f"a path as text, not bytes {shown(text)}"
    if "\x00" in text:
        return f"a path without a NUL byte, got {shown(text)}"
    try:
        encoded = text.encode()
    except UnicodeEncodeError:
        return f"a path of characters that can be encoded, got {shown(text)}"
    if len(encoded) > MAX_PATH_BYTES or any(len(part) > MAX_NAME_BYTES for part in encoded.split(b"/")):
        return f"a path of at most {MAX_PATH_BYTES} bytes, each name at most {MAX_NAME_BYTES}: {shown(text)}"
    return None


def path(value, name: str):
    """A file or directory name (str or os.PathLike) the operating system can take."""
    problem = path_problem(value)
    if problem is not None:
        raise ArgumentError(f"{option(name)} must be {problem}")
    return value


def is_frame(value) -> bool:
    """Whether an input is a DataFrame (duck-typed, so pandas is not imported for a path)."""
    return hasattr(value, "to_csv") and hasattr(value, "columns")


def data(value, name: str):
    """A confidential input: a path to its CSV file, or a pandas DataFrame of the same columns."""
    if is_frame(value):
        return value
    if not isinstance(value, (str, os.PathLike)):
        raise ArgumentError(f"{option(name)} takes a path to a CSV file or a pandas DataFrame, not "
                            f"{type(value).__name__} {shown(value)}")
    return path(value, name)


def data_pair(value, name: str):
    """The confidential persons and units: a pair (persons, units), each a path or a DataFrame."""
    if isinstance(value, (tuple, list)) and len(value) == 2 and all(is_frame(v) or isinstance(v, (str, os.PathLike))
                                                                    for v in value):
        return value
    raise ArgumentError(f"{option(name)} takes a pair (persons, units), each a path or a DataFrame, not "
                        f"{type(value).__name__} {shown(value)}")


def spec(value, name: str = "spec"):
    """A run spec: a shipped name ("tiny"), a path to a .toml file, or a dict of what a spec file holds."""
    if not isinstance(value, (str, os.PathLike, Mapping)):
        raise ArgumentError(f"{option(name)} takes a shipped spec's name, a path to a .toml file or a dict, not "
                            f"{type(value).__name__} {shown(value)}")
    return value if isinstance(value, Mapping) else path(value, name)


def spec_file(value, name: str = "spec"):
    """A run spec given by name or path (not a dict)."""
    if isinstance(value, Mapping):
        raise ArgumentError(f"{option(name)} takes a shipped spec's name or a path to a .toml file here, not a dict")
    return spec(value, name)


def settings(value, name: str = "settings"):
    """Post-processing settings: a path to a TOML file with a [postprocess] table, or that table as a dict."""
    return value if isinstance(value, Mapping) else path(value, name)


def release(value, name: str = "release"):
    """A release: a das.Release, or the path of its directory."""
    return path(getattr(value, "path", value), name)


def names(value, name: str) -> tuple[str, ...]:
    """A few names: a tuple or list of strings ("a,b" is one name; give ("a", "b"))."""
    if isinstance(value, str) or not isinstance(value, (tuple, list)) or not all(isinstance(v, str) for v in value):
        hint = f" like {tuple(v.strip() for v in value.split(','))!r}" if isinstance(value, str) else ""
        raise ArgumentError(f"{option(name)} takes a tuple of names{hint}, not {type(value).__name__} {shown(value)}")
    return tuple(value)


def names_or_text(value, name: str):
    """A comma list as one string, or a tuple or list of names."""
    return value if isinstance(value, str) else names(value, name)


def area_files(value, name: str):
    """Area files by area type: a dict {"place": "places.csv"} (type -> path)."""
    if not isinstance(value, Mapping):
        raise ArgumentError(f"{option(name)} takes a dict of area type -> area file, not {type(value).__name__} "
                            f"{shown(value)}")
    for area_type, file in value.items():
        text(area_type, f"{name} key")
        path(file, f"{name}[{area_type!r}]")
    return value


def engine(value, name: str = "engine") -> str:
    """Where tasks run: "local" (processes on this machine) or "dask" (a dask cluster)."""
    if value not in ("local", "dask"):
        raise ArgumentError(f"{option(name)} must be 'local' or 'dask', not {shown(value)}")
    return value


Rule = Callable[[object, str], object]

RULES: dict[str, Rule] = {  # an API keyword -> its rule (a keyword of another meaning says so in `checked`)
    "spec": spec, "release": release, "persons": data, "units": data, "inputs": data_pair, "truth": data_pair, "holdout": data,
    "against": release, "settings": settings, "estimator": text,
    "out": path, "to": path, "signing_key": path, "public_key": path, "published": path,
    "seed": seed, "workers": workers, "runs": count, "seeds": count, "count": count, "relaxed": count, "steps": count,
    "batch": count, "attack_runs": count, "attack_relaxed": count, "attack_steps": count,
    "attack_blocks": nonnegative, "attack_seeds": nonnegative, "ip_top": nonnegative, "ip_max_persons": nonnegative,
    "overwrite": flag, "allow_large_rho": flag, "progress": flag, "multiset": flag,
    "engine": engine, "memory_gb": positive_number, "learning_rate": positive_number, "min_confidence": share,
    "mechanism": text, "scheduler": text, "name": text, "schema": text, "tables": text, "level": text,
    "estimators": names, "queries": names, "keep": names, "baselines": names, "mechanisms": names_or_text,
    "geounits": names_or_text, "areas": area_files,
}


def check(function: str, given: Mapping[str, object], *, valid, optional=(), rules: Mapping[str, Rule] | None = None
          ) -> None:
    """Arguments `given` to das.`function`: an unknown name refused naming the nearest and the valid ones
    (`valid`), then each value checked by the rule of its name (None passes for the `optional`, whose default it is)."""
    rules = {**RULES, **(rules or {})}
    for name, value in given.items():
        if name not in valid:
            near = difflib.get_close_matches(name, list(valid), n=1)
            hint = f" (did you mean {near[0]}?)" if near else ""
            raise ArgumentError(f"das.{function} has no argument {name!r}{hint}; it takes {', '.join(valid)}")
        rule = rules.get(name)
        if rule is not None and not (value is None and name in optional):
            rule(value, name)


def checked(function=None, /, **rules: Rule):
    """A function of das's API whose arguments are checked at its door (`check`: the rule of each keyword's name,
    or the one given here), a misspelled or missing argument refused as ArgumentError rather than TypeError.

    >>> @checked
    ... def run(spec, *, seed=None): return seed
    >>> run("tiny", seed=-1)
    Traceback (most recent call last):
    das.core.errors.ArgumentError: seed= must be an integer of at least 0, got -1
    """
    if function is None:
        return lambda f: checked(f, **rules)
    signature = inspect.signature(function)
    valid = tuple(signature.parameters)
    optional = {name for name, p in signature.parameters.items() if p.default is None}

    @functools.wraps(function)
    def door(*args, **kwargs):
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError as e:
            unknown = [k for k in kwargs if k not in valid]
            if unknown:
                check(function.__name__, {unknown[0]: None}, valid=valid, optional=valid)
            raise ArgumentError(f"das.{function.__name__}: {e}; it takes {', '.join(valid)}") from None
        check(function.__name__, bound.arguments, valid=valid, optional=optional, rules=rules)
        return function(*args, **kwargs)

    return door
