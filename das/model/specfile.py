"""The one reader of spec files (runs, strategies, schemas, attack workloads): TOML, checked whole.

Each kind of spec declares its shape once, as a pydantic model (`das.driver.runspec.RunSpecFile`,
`das.privacy.strategy.StrategyFile`, `das.model.schema.SchemaFile`, `das.attack.workload.WorkloadFile`);
`check` reads a parsed file against it and refuses (SpecError) with every problem of the file in one
pass, each naming the section and key, what was found and what was expected: an unknown key with
the nearest valid name ("did you mean rho?") or the sections it belongs to, a wrong type with the
type expected. Nothing but the spec file is read before it passes.

Exact numbers (budgets, shares, delta) are `Exact` fields: an integer or a string "a/b", "0.25",
"1e-10", never a TOML float (already rounded). Every value shown in a message is cut to a readable
length (`shown`).
"""

from __future__ import annotations

import difflib
import json
import os
import re
import tomllib
import types
import typing
from collections.abc import Mapping
from fractions import Fraction
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, PlainValidator, ValidationError

from das.core.errors import SpecError

SHOWN_CHARACTERS = 60  # a value echoed in a message is cut to this many characters


def shown(value: Any, limit: int = SHOWN_CHARACTERS) -> str:
    """A value as a message shows it: its repr, cut to `limit` characters and the length said.

    A table (a pandas DataFrame) is said by its shape, never printed.

    >>> shown("abc"), shown("9" * 300, 20)
    ("'abc'", "'9999999999999999... (300 characters)")
    """
    if hasattr(value, "columns") and hasattr(value, "shape") and len(value.shape) == 2:
        return f"({value.shape[0]:,} rows x {value.shape[1]:,} columns)"
    text = repr(value)
    length = len(value) if isinstance(value, str) else len(text)
    return text if len(text) <= limit else f"{text[:limit - 3]}... ({length:,} characters)"


def cut_long_words(text: str, limit: int = 200) -> str:
    """A message with every run of more than `limit` non-space characters cut (a value echoed inside it).

    >>> cut_long_words("bad value " + "9" * 500 + " here")
    'bad value 99999999999999999999999999999999999999999999999999999999999... (500 characters) here'
    """
    def cut(match) -> str:
        return f"{match.group()[:SHOWN_CHARACTERS - 1]}... ({len(match.group()):,} characters)"

    return re.sub(rf"\S{{{limit + 1},}}", cut, text)


# ---------------------------------------------------------------------------------------------
# Exact fractions

# An exact rational written as a/b, an integer, or a decimal with optional exponent. ASCII digits only;
# no spaces, underscores, "inf" or "nan" (all of which Fraction() would accept or half-accept).
_FRACTION = re.compile(r"[+-]?[0-9]+/[0-9]+")
_DECIMAL = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")
FRACTION_FORMS = 'an exact fraction like "293764/114921", "0.25" or "1e-10"'


def exact_fraction(value) -> Fraction:
    """An exact rational from a TOML integer or a string; ValueError (without a location) otherwise.

    >>> exact_fraction("293764/114921"), exact_fraction("1e-10"), exact_fraction(2)
    (Fraction(293764, 114921), Fraction(1, 10000000000), Fraction(2, 1))
    """
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError(f"{shown(value)} is not {FRACTION_FORMS}")
    if isinstance(value, float):
        raise ValueError(f"write {value!r} as a string like \"1/4\" or \"0.25\" (floats are not exact)")
    if isinstance(value, int):
        return Fraction(value)
    text = value.strip()
    if _FRACTION.fullmatch(text):
        numerator, denominator = text.split("/")
        if int(denominator) == 0:
            raise ValueError(f"{shown(value)} is not an exact fraction (zero denominator)")
        return Fraction(int(numerator), int(denominator))
    if _DECIMAL.fullmatch(text) and len(text) <= 200:
        return Fraction(text)  # exact: Fraction parses decimal strings without rounding
    raise ValueError(f"{shown(value)} is not {FRACTION_FORMS}")


def positive_fraction(value) -> Fraction:
    result = exact_fraction(value)
    if result <= 0:
        raise ValueError(f"must be positive, got {shown(value)}")
    return result


def parse_fraction(value, where: str) -> Fraction:
    """An exact positive rational (`exact_fraction`), or SpecError starting with `where` (file and key).

    >>> parse_fraction("1/0", "spec.toml: rho")
    Traceback (most recent call last):
    ...
    das.core.errors.SpecError: spec.toml: rho: '1/0' is not an exact fraction (zero denominator)
    """
    try:
        return positive_fraction(value)
    except ValueError as e:
        raise SpecError(f"{where}: {e}") from None


Exact = Annotated[Fraction, PlainValidator(positive_fraction)]  # a positive exact fraction field


class Section(BaseModel):
    """A table of a spec file: unknown keys refused, values never coerced (1.5 is not an integer)."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, arbitrary_types_allowed=True)


# ---------------------------------------------------------------------------------------------
# Reading and checking


def real_path(path) -> Path:
    """`path` made absolute with its symbolic links followed as far as they go, never an error: where
    `Path.resolve` raises RuntimeError for a link that loops, this keeps its name, so the reader that opens
    it then refuses it by name (das.io.microdata: "a symbolic link loop"). Every input, spec and output path
    das compares or makes absolute goes through here (das.frame.outdir, das.driver.runspec, das.api.inputs).

    >>> import tempfile; loop = Path(tempfile.mkdtemp()) / "loop.csv"; loop.symlink_to(loop.name)
    >>> real_path(loop) == loop
    True
    """
    return Path(os.path.realpath(path))


def load_toml(path: Path) -> dict:
    """A TOML file as a dict; SpecError naming the file for anything unreadable (missing, a directory,
    no permission, a symlink loop, not UTF-8, not TOML)."""
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except tomllib.TOMLDecodeError as e:
        raise SpecError(f"{path}: not valid TOML: {e}") from None
    except UnicodeDecodeError as e:
        raise SpecError(f"{path}: not UTF-8 text (byte {e.start} is {e.object[e.start:e.start + 1]!r}); a spec is "
                        "a UTF-8 TOML file") from None
    except OSError as e:
        raise SpecError(f"{path}: cannot read: {e.strerror or e}") from None
    except ValueError as e:  # tomllib's own limits, e.g. an integer of more than 4300 digits
        raise SpecError(f"{path}: not valid TOML: {str(e)[:200]}") from None


def toml_text(data: Mapping) -> str:
    """A spec made in Python (a dict of what a spec file holds) as TOML text that `load_toml` reads back equal:
    strings, integers, booleans, Fractions (as "a/b" strings: exact), lists and tables. A float is refused: it is
    not exact (write "0.25" or Fraction(1, 4)), as in a spec file.

    >>> print(toml_text({"name": "x", "levels": ["state", "county"], "persons": {"rho": Fraction(1, 2)}}))
    name = "x"
    levels = ["state", "county"]
    <BLANKLINE>
    [persons]
    rho = "1/2"
    <BLANKLINE>
    """
    lines: list[str] = []
    _toml_table(data, (), lines)
    return "\n".join(lines).lstrip("\n") + "\n"


def _toml_table(data: Mapping, where: tuple[str, ...], lines: list[str]) -> None:
    if not isinstance(data, Mapping):
        raise SpecError(f"{'.'.join(where) or 'the spec'}: expected a table (a dict), got {type(data).__name__}")
    tables = {k: v for k, v in data.items() if isinstance(v, Mapping)}
    if where and (len(tables) < len(data) or not data):
        lines += ["", f"[{'.'.join(_toml_key(k) for k in where)}]"]
    for key, value in data.items():
        if key not in tables:
            lines.append(f"{_toml_key(key)} = {_toml_value(value, (*where, str(key)))}")
    for key, value in tables.items():
        _toml_table(value, (*where, str(key)), lines)


def _toml_key(key) -> str:
    if not isinstance(key, str):
        raise SpecError(f"a spec's keys are strings, got {shown(key)}")
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else json.dumps(key)


def _toml_value(value, where: tuple[str, ...]) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, Fraction):
        return json.dumps(str(value))
    if isinstance(value, (str, Path)):
        return json.dumps(str(value))
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v, where) for v in value) + "]"
    hint = '; a float is not exact: write it as a string like "0.25"' if isinstance(value, float) else ""
    raise SpecError(f"{'.'.join(where)}: {shown(value)} cannot be written to a spec (expected a string, an integer, "
                    f"true or false, a Fraction, a list or a table{hint})")


def check(data: dict, model: type[BaseModel], source: str) -> BaseModel:
    """`data` (a parsed spec) as a `model`, or SpecError listing every problem, each located."""
    try:
        return model.model_validate(data)
    except ValidationError as e:
        problems = [_problem(model, error) for error in e.errors(include_url=False)]
        raise SpecError(f"{source}: " + problems[0] if len(problems) == 1 else
                        f"{source}: {len(problems)} problems:\n" + "\n".join(f"  - {p}" for p in problems)) from None


def where(loc: tuple) -> str:
    """A location in a spec: ('privacy', 'rho') -> "[privacy] rho"; ('levels', 0) -> "levels[0]";
    inside an array of tables, a path: ('attributes', 0, 'column') -> "attributes[0].column".

    >>> where(("privacy", "rho")), where(("levels", 0)), where(("postprocess", "passes", 0)), where(())
    ('[privacy] rho', 'levels[0]', '[postprocess] passes[0]', 'the top level')
    >>> where(("attributes", 0, "column"))
    'attributes[0].column'
    """
    if not loc:
        return "the top level"
    k = max((i for i, part in enumerate(loc) if isinstance(part, str)), default=-1)
    key = (str(loc[k]) if k >= 0 else "") + "".join(f"[{i}]" for i in loc[k + 1:])
    if any(isinstance(p, int) for p in loc[:k]):
        return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc[:k]).lstrip(".") + "." + key
    section = ".".join(str(p) for p in loc[:k])
    return f"[{section}] {key}" if section else key


def _problem(model: type[BaseModel], error: dict) -> str:
    loc, kind = tuple(error["loc"]), error["type"]
    if kind == "extra_forbidden":
        return _unknown_key(model, loc)
    field = _field(model, loc)
    expected = (field.description if field is not None and field.description else None)
    if kind == "missing":
        if _walk(model, loc)[0] is not None:  # a whole table
            return f"missing section [{'.'.join(map(str, loc))}]" + (f" ({expected})" if expected else "")
        return f"{where(loc)}: missing" + (f" (expected {expected})" if expected else "")
    message = error["msg"].removeprefix("Value error, ")
    if kind in ("value_error", "assertion_error"):
        if not loc:
            return message
        return f"{where(loc)} {message}" if message.startswith("must ") else f"{where(loc)}: {message}"
    found = shown(error.get("input"))
    return f"{where(loc)}: {found} is not valid " + (f"(expected {expected})" if expected else f"({message.lower()})")


def _unknown_key(model: type[BaseModel], loc: tuple) -> str:
    """An unknown key: the nearest valid names of its section, or the sections it is a key of."""
    *section, key = loc
    known = _keys(model, tuple(section))
    in_section = f"[{'.'.join(map(str, section))}]" if section else "the top level"
    text = f"{in_section}: unknown key(s) [{str(key)!r}]"
    near = difflib.get_close_matches(str(key), known, n=2, cutoff=0.6)
    elsewhere = [f"[{'.'.join(s)}]" for s in _sections_with(model, str(key)) if list(s) != section]
    if near:
        text += f": did you mean {' or '.join(near)}?"
    elif elsewhere:
        text += f": {key} is a key of {' and '.join(elsewhere)}"
    return text + (f" ({in_section} has {', '.join(known)})" if known else f" ({in_section} takes no keys)")


def _inner(annotation):
    """The model (or None) a field's annotation holds: Optional[M], M, dict[str, M], list[M]."""
    origin = typing.get_origin(annotation)
    if origin is Annotated:
        return _inner(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        for arg in typing.get_args(annotation):
            found = _inner(arg)
            if found is not None:
                return found
        return None
    if origin in (dict, list, tuple):
        args = typing.get_args(annotation)
        return _inner(args[-1] if origin is dict else args[0]) if args else None
    return annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None


def fields(model: type[BaseModel]) -> dict:
    """A model's fields by the names a spec file spells (a field's alias, else its name)."""
    return {(f.alias or name): f for name, f in model.model_fields.items()}


def _walk(model: type[BaseModel] | None, loc: tuple):
    """(model, field) reached by following loc from `model` (dict keys and list indices skipped); the
    model is None when loc ends at a plain value, the field None at the top."""
    field = None
    for part in loc:
        if model is not None and isinstance(part, str) and part in fields(model):
            field = fields(model)[part]
            model = _inner(field.annotation)
        elif field is None:
            return None, None
    return model, field


def model_at(model: type[BaseModel], loc: tuple) -> type[BaseModel] | None:
    """The model of the table at `loc` of a spec, whose keys are its fields (None: loc is a value, or a
    table of free keys such as a strategy's [levels]).

    >>> from das.privacy.strategy import StrategyFile
    >>> model_at(StrategyFile, ("levels",)), model_at(StrategyFile, ("levels", "nation")).__name__
    (None, 'LevelSection')
    """
    current, in_container = model, False
    for part in loc:
        if in_container:  # a key of a table of free keys, or an index of a list: the next part is a field again
            in_container = False
            continue
        if current is None or not isinstance(part, str) or part not in fields(current):
            return None
        annotation = fields(current)[part].annotation
        current, in_container = _inner(annotation), _container(annotation)
    return None if in_container else current


def _container(annotation) -> bool:
    """Is the annotation (Optional or Annotated aside) a dict or a list?"""
    origin = typing.get_origin(annotation)
    if origin is Annotated:
        return _container(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        return any(_container(a) for a in typing.get_args(annotation) if a is not type(None))
    return origin in (dict, list)


def _field(model: type[BaseModel], loc: tuple):
    return _walk(model, loc)[1]


def _keys(model: type[BaseModel], section: tuple) -> list[str]:
    inner, _ = _walk(model, section) if section else (model, None)
    return list(fields(inner)) if inner is not None else []


def _sections_with(model: type[BaseModel], key: str, prefix: tuple = (), depth: int = 0) -> list[tuple]:
    """Every section (a path of field names) of `model` where `key` is a valid key."""
    found = [prefix] if key in fields(model) and prefix else []
    if depth < 3:
        for name, field in fields(model).items():
            inner = _inner(field.annotation)
            if inner is not None and inner is not model:
                found += _sections_with(inner, key, (*prefix, name), depth + 1)
    return found
