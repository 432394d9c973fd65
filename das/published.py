"""What every public byte of a release is derived from: one declaration per field, and the check.

A release may publish only what is derived from the noisy measurements, the declared invariants and
public facts (docs/privacy.md, "What is published"). Every key path of the public manifest and of
the key-value metadata das puts in a Parquet file is declared here with its source (`SOURCES`);
`undeclared` names every key path of a manifest (or metadata) that no declaration covers, so a new
field cannot reach a public file without saying what it is derived from (tests/test_published.py
walks real releases of every command). What may depend on the data outside the noise (run times,
interruptions, error messages, the comparison with the inputs) is the operator's (das.bundle).

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
import re
from collections.abc import Callable, Iterator, Mapping

from das.geography import LEVEL_DIGITS
from das.io.outputs import release_patterns

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
                 "and table set it names pinned (das.pinned: their text and SHA-256), written canonically "
                 "(das.bundle.public_spec)",
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
    "holds[]": "parameter: what the release claims (das.frame.holds)",
    "spine.kind": "parameter: the spine of the spec's [geography] (das.spine)",
    "spine.areas.{area}": "public fact: SHA-256 of a declared area file (public geography)",
}

# Parquet key-value metadata of every release file: das's own keys (das.bundle.parquet_metadata), and the
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
    for table in tables:
        for pattern, what in table.items():
            source = what.split(":", 1)[0]
            if source not in SOURCES:
                raise ValueError(f"{pattern}: source {source!r} is not one of {', '.join(SOURCES)}")
            for segment in _segments(pattern):
                if segment.startswith("{") and segment[1:-1] not in KEYS:
                    raise ValueError(f"{pattern}: {segment} is not a kind of key ({', '.join(KEYS)})")
