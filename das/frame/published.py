"""What every public byte of a release is derived from: one declaration per field, and the check.

A release may publish only what is derived from the noisy measurements, the declared invariants and
public facts (docs/privacy.md, "What is published"). Every key path of the public manifest and of
the key-value metadata das puts in a Parquet file is declared here with its source (`SOURCES`);
`undeclared` names every key path of a manifest (or metadata) that no declaration covers, so a new
field cannot reach a public file without saying what it is derived from (tests/test_published.py
walks real releases of every command). What may depend on the data outside the noise (run times,
interruptions, error messages, the comparison with the inputs) is the operator's (das.frame.bundle).

A key path is the keys from the top joined by ".", a list's items as "[]". A declared path segment
`{name}` stands for any key of that kind (`KEYS`), a "quoted" one for a key holding dots; a final
"**" covers the whole value below it.

>>> undeclared({"kind": "das run", "counts": {"persons": 3, "blocks": 1}, "secret": 4}, MANIFEST)
['secret']
>>> undeclared({"invariants": {"total_population": {"state": {"44": 9, "4": 1}}}}, MANIFEST)
['invariants.total_population.state.4']
"""

from __future__ import annotations

import fnmatch
import json
import math
import re
from collections.abc import Callable, Iterator, Mapping

from das.io.outputs import release_patterns
from das.model.levels import LEVEL_DIGITS
from das.privacy.certificate import CertificateError, exact

SOURCES = {
    "parameter": "the run spec, the code, the command line or the environment: the same whatever the data",
    "public fact": "the block universe (the blocks of the units file: their housing units and facilities are "
                   "published exactly, so their list is public)",
    "invariant": "a declared invariant, published exactly: the total population of the nation and of each state "
                 "(housing units and GQ facilities per block are published exactly through the units MDF)",
    "noisy": "post-processing of the noisy measurements (with the invariants and public facts)",
    "release": "computed from the released files themselves",
    "mechanism": "a synthetic mechanism's published detail: its own declaration (das.mechanisms.base.Mechanism.details)",
}

CERTIFICATE_FIELDS = ("schema", "strategy", "mechanism", "levels[]", "convention", "budget", "rho", "rho_decimal",
                      "delta", "eps", "eps_rounding", "eps_loose_bound", "conversion", "loose_bound", "randomness",
                      "private", "warning")
# the stated parameters of a synthetic mechanism's charges (das.mechanisms.base.Ledger.charge): all constants of
# the mechanism or computed from the budget, delta and schema
CHARGE_PARAMETERS = ("sigma2", "eps", "sensitivity", "cost", "laplace_scale", "threshold", "delta", "allocation",
                     "sigma2_start", "eps_start", "alpha")  # the last three: AIM's filtered rounds
L2_CERTIFICATE = ("problems", "objective", "gap", "max_rel_gap", "retried", "uncertified")  # das.topdown.engine


def _certificate(prefix: str) -> dict[str, str]:
    """A certificate's fields (das.privacy.certificate.Certificate.to_dict): all from the spec's budget."""
    budget = "parameter: the certificate, from the spec's budget, strategy and delta (das.privacy.accounting)"
    fields = {f"{prefix}.{name}": budget for name in CERTIFICATE_FIELDS}
    for name in ("level", "rho_share", "rho", "rho_decimal"):
        fields[f"{prefix}.by_level[].{name}"] = budget
    for name in ("query", "share", "rho", "rho_decimal", "sigma2", "sigma2_decimal", "sigma"):
        fields[f"{prefix}.by_level[].queries[].{name}"] = budget
    fields[f"{prefix}.delta_parts.{{step}}"] = budget
    for name in ("scope", "step", "rho", "rho_decimal", "noise"):
        fields[f"{prefix}.charges[].{name}"] = budget
    fields[f"{prefix}.charges[].{{parameter}}"] = "parameter: a charge's stated parameter (CHARGE_PARAMETERS)"
    return fields


MANIFEST: dict[str, str] = {
    "kind": "parameter: the kind of directory (das run)",
    "das_version": "parameter: the code's version and commit",
    "spec_name": "parameter: the run spec's name",
    "spec_text": "parameter: the run spec, parsed, its [input] and area file paths redacted, the schemas, strategies "
                 "and table set it names pinned (das.frame.pinned: their text and SHA-256), written canonically "
                 "(das.frame.bundle.public_spec)",
    "spec_sha256": "parameter: SHA-256 of spec_text",
    "status": "parameter: running, measured, interrupted or complete (a release is complete)",
    "private": "parameter: whether the noise came from the OS CSPRNG (a seed given or not)",
    "randomness": "parameter: the randomness, and the seed when seeded",
    "levels[]": "parameter: the geographic levels of the spec",
    "tables": "parameter: the spec's table set",
    "{release}": "parameter: null, a release this run does not make (units of a synthetic release)",
    "{release}.schema": "parameter: the release's schema",
    "{release}.strategy": "parameter: the release's strategy",
    "{release}.mechanism": "parameter: the synthetic release's mechanism",
    **_certificate("privacy.{release}"),
    "python": "parameter: the Python version that ran",
    "seed": "parameter: the seed of a seeded (NOT private) run",
    "invariants.total_population.{level}.{geocode}": "invariant: a nation's or state's total population",
    "warning": "parameter: the NOT PRIVATE warning of a seeded run",
    "engine.engine": "parameter: --engine",
    "engine.workers": "parameter: --workers",
    "levels_report.{release}[].level": "parameter: a level of the spec",
    "levels_report.{release}[].parents": "public fact: geounits of the level above (the block universe's)",
    "levels_report.{release}[].failsafe_events": "noisy: failsafe events of the level's post-processing",
    "levels_report.{release}[].l2_certificate.{l2}": "noisy: the least-squares solves' certificate (L2_CERTIFICATE)",
    **{f"levels_report.{{release}}[].uncertified[].{name}": "noisy: a least-squares pass whose duality gap stayed above "
                                                         "the tolerance: its parent's geocode, pass, objective and gap"
       for name in ("parent", "pass", "objective", "gap")},
    **{f"failsafe_events[].{name}": "noisy: a parent of the post-processing solved with a relaxation"
       for name in ("release", "level", "parent", "stage", "relaxed", "slack", "detail")},
    "outputs.{file}": "release: SHA-256 of a released file",
    "nmf.{file}": "release: SHA-256 of an NMF file",
    "counts.persons": "release: the persons of the release, its MDF's rows (TopDown: the nation's invariant total)",
    "counts.blocks": "public fact: blocks of the universe",
    "validation.valid": "release: whether the published files pass das validate (from them alone)",
    "validation.checks[]": "release: the checks das validate runs on the published files",
    "validation.violations[]": "release: what das validate finds in the published files",
    "mechanism.name": "parameter: the mechanism",
    "mechanism.summary": "parameter: the mechanism's description",
    "mechanism.geography": "parameter: how the mechanism takes geography",
    "mechanism.budget": "parameter: the budget given",
    "mechanism.details.{detail}.**": "mechanism: the detail's own declaration",
    "holds[]": "parameter: what the release claims (das.frame.lifecycle.holds)",
    "spine.kind": "parameter: the spine of the spec's [geography] (das.model.spine)",
    "spine.areas.{area}": "public fact: SHA-256 of a declared area file (public geography)",
    **{f"guarantee.{name}": "parameter: the releases' certificates composed (das.privacy.guarantee)"
       for name in ("releases[]", "composition", "rho", "rho_decimal", "delta", "eps")},
    "postprocessed_from": "release: SHA-256 of the manifest of the release whose NMF das postprocess post-processed",
    "postprocessed_with": "parameter: the [postprocess] settings das postprocess used in place of the published spec's",
}

# The JSON type of each declared manifest field (MANIFEST's patterns; a list's items for "[]"), as TYPE_CHECKS
# names them, "|" between the types allowed: `problems` holds a manifest to them (das validate, das.validate.manifest)
CERTIFICATE_TYPES = {"schema": "text", "strategy": "text", "mechanism": "text", "levels[]": "level", "convention": "text",
                     "budget": "fraction", "rho": "fraction", "rho_decimal": "number", "delta": "fraction",
                     "eps": "number", "eps_rounding": "text", "eps_loose_bound": "number", "conversion": "text",
                     "loose_bound": "text", "randomness": "text", "private": "boolean", "warning": "text"}
TYPES: dict[str, str] = {
    "kind": "text", "das_version": "text", "spec_name": "text", "spec_text": "text", "spec_sha256": "sha256",
    "status": "text", "private": "boolean", "randomness": "text", "levels[]": "level", "tables": "text",
    "{release}": "null", "{release}.schema": "text", "{release}.strategy": "text|null", "{release}.mechanism": "text",
    **{f"privacy.{{release}}.{name}": kind for name, kind in CERTIFICATE_TYPES.items()},
    **{f"privacy.{{release}}.by_level[].{name}": kind for name, kind in
       (("level", "level"), ("rho_share", "fraction"), ("rho", "fraction"), ("rho_decimal", "number"))},
    **{f"privacy.{{release}}.by_level[].queries[].{name}": kind for name, kind in
       (("query", "text"), ("share", "fraction"), ("rho", "fraction"), ("rho_decimal", "number"),
        ("sigma2", "fraction"), ("sigma2_decimal", "number"), ("sigma", "number"))},
    "privacy.{release}.delta_parts.{step}": "fraction",
    **{f"privacy.{{release}}.charges[].{name}": kind for name, kind in
       (("scope", "text"), ("step", "text"), ("rho", "fraction"), ("rho_decimal", "number"), ("noise", "text"))},
    "privacy.{release}.charges[].{parameter}": "fraction|number|text",
    "python": "text", "seed": "count|null", "invariants.total_population.{level}.{geocode}": "count",
    "warning": "text", "engine.engine": "text", "engine.workers": "count",
    "levels_report.{release}[].level": "level", "levels_report.{release}[].parents": "count",
    "levels_report.{release}[].failsafe_events": "count", "levels_report.{release}[].l2_certificate.{l2}": "number",
    **{f"levels_report.{{release}}[].uncertified[].{name}": kind for name, kind in
       (("parent", "text"), ("pass", "count"), ("objective", "number"), ("gap", "number"))},
    **{f"failsafe_events[].{name}": "text" for name in ("release", "parent", "stage", "relaxed", "detail")},
    "failsafe_events[].level": "level",
    "failsafe_events[].slack": "number",
    "outputs.{file}": "sha256", "nmf.{file}": "sha256", "counts.persons": "count", "counts.blocks": "count",
    "validation.valid": "boolean", "validation.checks[]": "text", "validation.violations[]": "text",
    "mechanism.name": "text", "mechanism.summary": "text", "mechanism.geography": "text", "mechanism.budget": "fraction",
    "mechanism.details.{detail}.**": "any", "holds[]": "text", "spine.kind": "text", "spine.areas.{area}": "sha256",
    "guarantee.releases[]": "text", "guarantee.composition": "text", "guarantee.rho": "fraction",
    "guarantee.rho_decimal": "number", "guarantee.delta": "fraction", "guarantee.eps": "number",
    "postprocessed_from": "sha256", "postprocessed_with": "text",
}


def _fraction(value) -> bool:
    """An exact value as das writes one: "a/b", "1e-10" or an integer (das.privacy.certificate.exact)."""
    try:
        exact(value, "value")
    except CertificateError:
        return False
    return True


TYPE_CHECKS: dict[str, Callable[[object], bool]] = {
    "text": lambda v: isinstance(v, str),
    "boolean": lambda v: isinstance(v, bool),
    "count": lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0,
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v),
    "fraction": _fraction,
    "sha256": lambda v: isinstance(v, str) and re.fullmatch(r"[0-9a-f]{64}", v) is not None,
    "null": lambda v: v is None,
    "level": lambda v: isinstance(v, str) and v in LEVEL_DIGITS,
    "any": lambda v: True,
}
TYPE_NAMES = {"text": "a string", "boolean": "true or false", "count": "an integer >= 0", "number": "a finite number",
              "fraction": "an exact value ('a/b')", "sha256": "a SHA-256 (64 hex digits)", "null": "null",
              "level": f"a geography level ({', '.join(LEVEL_DIGITS)})", "any": "anything"}

# Parquet key-value metadata of every release file: das's own keys (das.frame.bundle.parquet_metadata), and the
# Arrow schema pyarrow stores (the columns' names and types, and this metadata again)
PARQUET: dict[str, str] = {
    '"das.privacy"': "parameter: private, or the NOT PRIVATE mark of a seeded run",
    **{f'"das.certificate".{{release}}.{name}': "parameter: the certificate's summary (Certificate.summary)"
       for name in ("rho", "eps", "delta", "schema", "strategy", "convention")},
    '"das.spec_sha256"': "parameter: the manifest's spec_sha256",
    '"das.version"': "parameter: the code's version",
    '"ARROW:schema"': "parameter: the Arrow schema (column names and types from the schema spec) and this metadata",
}

RELEASES = ("persons", "units")


def _file(key: str) -> bool:
    return any(fnmatch.fnmatchcase(key, p) for p in release_patterns())


def _geocode(key: str) -> bool:
    return key == "" or (key.isdigit() and len(key) in set(LEVEL_DIGITS.values()))


KEYS: dict[str, Callable[[str, Mapping], bool]] = {  # what each {name} of a declaration may stand for
    "release": lambda k, c: k in RELEASES,
    "level": lambda k, c: k in LEVEL_DIGITS,
    "geocode": lambda k, c: _geocode(k),
    "file": lambda k, c: _file(k),
    "l2": lambda k, c: k in L2_CERTIFICATE,
    "parameter": lambda k, c: k in CHARGE_PARAMETERS,
    "step": lambda k, c: bool(re.fullmatch(r"[a-zA-Z][a-zA-Z0-9 _-]*", k)),  # a step's name: the code's words
    "detail": lambda k, c: k in c.get("details", ()),
    "area": lambda k, c: bool(re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", k)),  # an area type: an identifier
}


def key_paths(value, prefix: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], bool]]:
    """Every leaf's key path (dict keys, "[]" for a list's items), and whether it is an empty dict or list."""
    if isinstance(value, Mapping) and value:
        for k, v in value.items():
            yield from key_paths(v, (*prefix, str(k)))
    elif isinstance(value, list) and value:
        for v in value:
            yield from key_paths(v, (*prefix, "[]"))
    else:
        yield prefix, isinstance(value, (Mapping, list))


def _segments(pattern: str) -> list[str]:
    """A declaration's segments: names joined by ".", "[]" for a list's items, a "quoted" name as it is."""
    return [t.strip('"') for t in re.findall(r'"[^"]*"|\[\]|[^.\["]+', pattern)]


def _matches(pattern: list[str], path: tuple[str, ...], context: Mapping, *, empty: bool = False) -> bool:
    """Whether `pattern` covers `path` (an empty dict or list: whether it covers anything below it)."""
    for i, segment in enumerate(pattern):
        if segment == "**":
            return True
        if i >= len(path):
            return empty
        if segment.startswith("{") and segment.endswith("}"):
            if not KEYS[segment[1:-1]](path[i], context):
                return False
        elif segment != path[i]:
            return False
    return len(path) == len(pattern)


def _path_text(path: tuple[str, ...]) -> str:
    return ".".join(path).replace(".[]", "[]")


def sources(data: Mapping, declared: Mapping[str, str], context: Mapping | None = None) -> dict[str, str | None]:
    """Each key path of `data` (as text, in order) with the source its declaration names, None when undeclared
    (context: e.g. the mechanism's declared `details`)."""
    patterns = [(_segments(p), what.split(":", 1)[0]) for p, what in declared.items()]
    out: dict[str, str | None] = {}
    for path, empty in key_paths(data):
        out[_path_text(path)] = next((source for q, source in patterns
                                      if _matches(q, path, context or {}, empty=empty)), None)
    return out


def undeclared(data: Mapping, declared: Mapping[str, str], context: Mapping | None = None) -> list[str]:
    """The key paths of `data` that no declaration of `declared` covers, deduplicated, in order."""
    return [path for path, source in sources(data, declared, context).items() if source is None]


def _leaves(value, prefix: tuple = ()) -> Iterator[tuple[tuple, object, bool]]:
    """Every leaf: its key path (a list item's index as an int), its value, whether it is an empty dict or list."""
    if isinstance(value, Mapping) and value:
        for k, v in value.items():
            yield from _leaves(v, (*prefix, str(k)))
    elif isinstance(value, list) and value:
        for i, v in enumerate(value):
            yield from _leaves(v, (*prefix, i))
    else:
        yield prefix, value, isinstance(value, (Mapping, list))


def _where(path: tuple) -> str:
    """A leaf's key path as text: `levels_report.persons[3].level`."""
    return "".join(f"[{k}]" if isinstance(k, int) else f".{k}" for k in path).lstrip(".")


def _shape(path: tuple[str, ...], value, patterns: list[list[str]], context: Mapping) -> tuple[int, str] | None:
    """Where a leaf's key path leaves the shape its declarations give (how many of its keys lead there, and
    "a list" or "an object" as declared there), or None: the deepest of its heads that a declaration goes
    below is followed by a key where the declaration has a list's items, or the other way round, or is the
    leaf itself, a value or a container of the other kind."""
    for depth in range(len(path), 0, -1):
        below = [q for q in patterns if len(q) > depth and _matches(q, path[:depth], context, empty=True)]
        wanted = {q[depth] == "[]" for q in below if q[depth] != "**"}
        if not below:
            continue
        if depth == len(path):
            got = isinstance(value, list) if isinstance(value, (list, Mapping)) else None
        else:
            got = path[depth] == "[]"
        if not wanted or got in wanted:
            return None
        return depth, "a list" if True in wanted else "an object"
    return None


def problems(data: Mapping, declared: Mapping[str, str] = MANIFEST, types: Mapping[str, str] = TYPES,
             context: Mapping | None = None) -> list[str]:
    """What a manifest publishes that its declarations do not allow, each naming the field's key path: a field
    no declaration covers, a list or object where the other (or a value) is declared, and a declared field whose
    value is not of its declared type (`types`).

    >>> problems({"kind": "das run", "counts": {"persons": -1, "extra": 2}, "levels": "nation"})[1:]
    ['counts.extra: a field das/frame/published.py does not declare', 'levels: expected a list']
    >>> problems({"counts": {"persons": -1}})
    ['counts.persons: expected an integer >= 0, got -1']
    """
    patterns = [(_segments(p), p) for p in declared]
    context = context or {}
    found = []
    for path, value, empty in _leaves(data):
        general = tuple("[]" if isinstance(k, int) else k for k in path)
        pattern = next((p for q, p in patterns if _matches(q, general, context)), None)
        if pattern is not None:
            kinds = types[pattern].split("|")
            if not any(TYPE_CHECKS[kind](value) for kind in kinds):
                found.append(f"{_where(path)}: expected {' or '.join(TYPE_NAMES[k] for k in kinds)}, got "
                             f"{json.dumps(value, default=str)[:60]}")
            continue
        shape = _shape(general, value, [q for q, _ in patterns], context)
        if shape is not None:
            found.append(f"{_where(path[:shape[0]])}: expected {shape[1]}")
        elif not (empty and any(_matches(q, general, context, empty=True) for q, _ in patterns)):
            found.append(f"{_where(path)}: a field das/frame/published.py does not declare")
    return found


def values_at(data, path: str) -> list:
    """The values at a key path (`sources`' form: "a.b[].c"), every list item's."""
    def walk(value, segments):
        if not segments:
            return [value]
        head, rest = segments[0], segments[1:]
        if head == "[]":
            return [v for item in (value if isinstance(value, list) else []) for v in walk(item, rest)]
        return walk(value[head], rest) if isinstance(value, Mapping) and head in value else []
    return walk(data, re.findall(r"\[\]|[^.\[]+", path))


def parquet_metadata_paths(metadata: Mapping[bytes, bytes]) -> dict:
    """A Parquet file's key-value metadata as a tree to walk: JSON values (das.certificate) parsed."""
    out: dict = {}
    for key, value in metadata.items():
        name = key.decode(errors="replace")
        out[name] = json.loads(value) if name == "das.certificate" else value.decode(errors="replace")
    return out


def check_declared(tables: tuple[Mapping[str, str], ...] = (MANIFEST, PARQUET)) -> None:
    """Every declaration names its source (a key of SOURCES) and only known kinds of keys."""
    untyped = [p for p in MANIFEST if p not in TYPES] + [p for p in TYPES if p not in MANIFEST]
    if untyped or any(k not in TYPE_CHECKS for kinds in TYPES.values() for k in kinds.split("|")):
        raise ValueError(f"every manifest field has one declared type of TYPE_CHECKS: {untyped[:1] or TYPES}")
    for table in tables:
        for pattern, what in table.items():
            source = what.split(":", 1)[0]
            if source not in SOURCES:
                raise ValueError(f"{pattern}: source {source!r} is not one of {', '.join(SOURCES)}")
            for segment in _segments(pattern):
                if segment.startswith("{") and segment[1:-1] not in KEYS:
                    raise ValueError(f"{pattern}: {segment} is not a kind of key ({', '.join(KEYS)})")
