"""The specs a release names, pinned in its published spec: canonical text and SHA-256, never a path.

A run spec names its schemas, strategies and table set by a shipped name or by a file path. Neither
is safe to publish as it is: a path is the operator's file system (a home directory), and a file, or
a shipped spec of another das version, can change after the release, so the certificate could no
longer be recomputed from the release alone. The published spec (das.frame.bundle.public_spec) therefore
holds every spec it names, shipped or not, under `[specs.<kind>.<name>]`: `text`, the spec parsed and
written canonically (no comment reaches it), and `sha256`, that text's digest; the reference itself
becomes `<name>` (the spec's own `name`, else its file's stem). Whoever reads a release
(das validate first) takes the specs from there, on any machine, whatever the files say today.

>>> import tomllib
>>> text = tomli_w.dumps(pin({"persons": {"schema": "pl94_persons", "strategy": "pl94_six_level"}}))
>>> sorted(tomllib.loads(text)[SECTION]["strategies"]), strategy(text, "pl94_six_level").name
(['pl94_six_level'], 'pl94_six_level')
"""

from __future__ import annotations

import copy
import functools
import hashlib
import tomllib

import tomli_w

from das.core.errors import SpecError
from das.io.tables import DEFAULT_TABLES, TableSpec, load_tables, tables_from_dict
from das.model.schema import Schema, load_schema, resolve_spec, schema_from_dict
from das.model.specfile import load_toml
from das.privacy.strategy import Strategy, load_strategy, strategy_from_dict

SECTION = "specs"  # [specs.<kind>.<name>] of a published run spec
# where a run spec names another spec: (section, key, kind of spec, the value when the key is left out)
REFERENCES = (("persons", "schema", "schemas", None), ("persons", "strategy", "strategies", None),
              ("units", "schema", "schemas", None), ("units", "strategy", "strategies", None),
              ("output", "tables", "tables", DEFAULT_TABLES))


def canonical_text(data: dict) -> str:
    """A parsed spec written canonically (TOML, keys in the file's order, no comment)."""
    return tomli_w.dumps(data)


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _named(value: str, kind: str) -> tuple[str, str]:
    """(the name a published spec calls a referenced spec, its canonical text): the spec's own `name` (a
    schema's or strategy's, as its loader calls it), else its file's stem (a shipped spec's name)."""
    path = resolve_spec(value, kind)
    data = load_toml(path)
    own = data.get("name") if kind != "tables" else None  # a table set's keys are its tables
    return (own if isinstance(own, str) and own else path.stem), canonical_text(data)


def published_name(value: str, kind: str) -> str:
    """The name the published spec calls the spec `value` (a shipped name or a path) of `kind`."""
    return _named(value, kind)[0]


def pin(data: dict) -> dict:
    """A parsed run spec with every spec it names pinned: each reference a name, never a path, and
    [specs.<kind>.<name>] its canonical text and SHA-256. SpecError: a referenced spec cannot be read,
    or two different specs of a kind would have the same name."""
    out = copy.deepcopy(data)
    pinned: dict[str, dict[str, dict[str, str]]] = {}
    for section, key, kind, default in REFERENCES:
        table = out.get(section)
        value = table.get(key, default) if isinstance(table, dict) else default if section == "output" else None
        if not isinstance(value, str):
            continue
        name, text = _named(value, kind)
        held = pinned.setdefault(kind, {}).setdefault(name, {"sha256": digest(text), "text": text})
        if held["text"] != text:
            raise SpecError(f"[{section}] {key} = {value!r} is a {kind[:-1] if kind != 'strategies' else 'strategy'} "
                            f"named {name!r}, like another of this spec that differs: give them different names")
        if isinstance(table, dict) and key in table:
            table[key] = name
    return {**out, SECTION: pinned} if pinned else out


def pinned_specs(spec_text: str) -> dict[str, dict[str, str]]:
    """kind -> name -> canonical text of the specs a published spec pins, each checked against its
    SHA-256 ({} for a release published before specs were pinned). SpecError naming the entry otherwise."""
    try:
        specs = tomllib.loads(spec_text).get(SECTION, {})
    except tomllib.TOMLDecodeError as e:
        raise SpecError(f"spec_text is not TOML ({e})") from None
    out: dict[str, dict[str, str]] = {}
    for kind, named in (specs.items() if isinstance(specs, dict) else ()):
        for name, entry in (named.items() if isinstance(named, dict) else ()):
            where = f"spec_text [{SECTION}.{kind}.{name}]"
            if not isinstance(entry, dict) or not isinstance(entry.get("text"), str):
                raise SpecError(f"{where}: expected a table with the spec's text and sha256")
            if entry.get("sha256") != digest(entry["text"]):
                raise SpecError(f"{where}: the text's SHA-256 is not the sha256 it states (the spec was changed)")
            out.setdefault(kind, {})[name] = entry["text"]
    if not isinstance(specs, dict) or any(not isinstance(v, dict) for v in specs.values()):
        raise SpecError(f"spec_text [{SECTION}]: expected tables of specs by kind and name")
    return out


def _pinned(spec_text: str, kind: str, name: str) -> tuple[dict, str] | None:
    """(the parsed spec `name` of `kind` the published spec pins, where it is), None when it pins no spec at
    all (a release published before specs were pinned: the name is then a shipped spec's)."""
    specs = pinned_specs(spec_text)
    if not specs:
        return None
    if name not in specs.get(kind, {}):
        raise SpecError(f"spec_text pins no {kind} spec {name!r} ([{SECTION}.{kind}] holds "
                        f"{sorted(specs.get(kind, {}))}); the release names it")
    data = tomllib.loads(specs[kind][name])
    if kind == "strategies":  # a strategy without a `name` is called by its file's stem, which pinned it as `name`
        data.setdefault("name", name)
    return data, f"spec_text [{SECTION}.{kind}.{name}]"


@functools.lru_cache(maxsize=16)
def schema(spec_text: str, name: str) -> Schema:
    """The schema `name` of a release, as its published spec pins it."""
    found = _pinned(spec_text, "schemas", name)
    return load_schema(name) if found is None else schema_from_dict(*found)


@functools.lru_cache(maxsize=16)
def strategy(spec_text: str, name: str) -> Strategy:
    """The strategy `name` of a release, as its published spec pins it."""
    found = _pinned(spec_text, "strategies", name)
    return load_strategy(name) if found is None else strategy_from_dict(*found)


@functools.lru_cache(maxsize=16)
def tables(spec_text: str, name: str) -> tuple[TableSpec, ...]:
    """The table set `name` of a release, as its published spec pins it."""
    found = _pinned(spec_text, "tables", name)
    return load_tables(name) if found is None else tables_from_dict(*found)
