"""manifest.json, typed: `Manifest` is its one reader, typed records throughout (the certificate is
das.privacy.certificate.Certificate, exact), built from the JSON with every field checked, so an edited or truncated
manifest is a RunDirError naming the field, never a traceback. Where the file lives is das.frame.rundir's.

>>> Manifest.from_dict({"spec_name": "x", "status": "complete", "levels": ["nation"], "persons": {"schema": "s"},
...                     "privacy": {}}).schema("persons")
's'
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from fractions import Fraction

from das.core.errors import ReleaseError
from das.frame import pinned
from das.model.geography import LEVEL_DIGITS
from das.privacy.certificate import Certificate, CertificateError, exact, fraction_text
from das.privacy.guarantee import Guarantee

MANIFEST = "manifest.json"
RUN_KIND = "das run"
REQUIRED = ("spec_name", "status", "levels", "persons", "privacy")
STATUSES = ("running", "measured", "interrupted", "complete")


class RunDirError(ReleaseError):
    """A directory that is not the das run it is used as (missing, unreadable, unfinished manifest)."""



# ---------------------------------------------------------------------------------------------
# Reading JSON fields, each checked


def _where(where: str, key: str) -> str:
    return f"{where}: field {key}"


def _get(data: Mapping, key: str, kind, where: str, *, optional: bool = False):
    """data[key] checked to be of `kind` (a type or tuple of types; None allowed when optional)."""
    value = data.get(key)
    if value is None and (optional or key not in data):
        if optional:
            return None
        raise RunDirError(f"{_where(where, key)} is missing")
    if isinstance(value, bool) and bool not in (kind if isinstance(kind, tuple) else (kind,)):
        raise RunDirError(f"{_where(where, key)}: expected {_kind_name(kind)}, got {value!r}")
    if not isinstance(value, kind):
        raise RunDirError(f"{_where(where, key)}: expected {_kind_name(kind)}, got {type(value).__name__}")
    return value


def _kind_name(kind) -> str:
    names = {str: "a string", int: "an integer", float: "a number", bool: "true or false", list: "a list",
             dict: "an object"}
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join(dict.fromkeys(names.get(k, k.__name__) for k in kinds))


def _strings(data: Mapping, key: str, where: str, *, optional: bool = False) -> tuple[str, ...] | None:
    values = _get(data, key, list, where, optional=optional)
    if values is None:
        return None
    if not all(isinstance(v, str) for v in values):
        raise RunDirError(f"{_where(where, key)}: expected a list of strings")
    return tuple(values)


def _mapping(data: Mapping, key: str, value_kind, where: str, *, optional: bool = True) -> dict | None:
    value = _get(data, key, dict, where, optional=optional)
    if value is None:
        return None
    bad = [k for k, v in value.items() if isinstance(v, bool) or not isinstance(v, value_kind)]
    if bad:
        raise RunDirError(f"{_where(where, key)}.{bad[0]}: expected {_kind_name(value_kind)}")
    return dict(value)


def _number(value, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise RunDirError(f"{where}: expected a number, got {value!r}")
    return value


# ---------------------------------------------------------------------------------------------
# The manifest's records


@dataclass(frozen=True)
class ReleaseInfo:
    """What a release (persons or units) was made with: its schema, and its strategy or mechanism."""

    schema: str
    strategy: str | None
    mechanism: str | None = None

    def to_dict(self) -> dict:
        return {"schema": self.schema, "strategy": self.strategy,
                **({"mechanism": self.mechanism} if self.mechanism is not None else {})}

    @classmethod
    def from_dict(cls, data, where: str) -> ReleaseInfo:
        if not isinstance(data, Mapping):
            raise RunDirError(f"{where}: expected an object with the release's schema")
        return cls(_get(data, "schema", str, where), _get(data, "strategy", str, where, optional=True),
                   _get(data, "mechanism", str, where, optional=True))


@dataclass(frozen=True)
class PublishedInvariants:
    """The invariants published exactly (outside the budget): total population per geounit of the levels held."""

    total_population: Mapping[str, Mapping[str, int]] | None = None

    def to_dict(self) -> dict:
        if self.total_population is None:
            return {}
        return {"total_population": {level: dict(units) for level, units in self.total_population.items()}}

    @classmethod
    def from_dict(cls, data, where: str) -> PublishedInvariants:
        if not isinstance(data, Mapping):
            raise RunDirError(f"{where}: expected an object")
        if "total_population" not in data:
            return cls()
        totals = data["total_population"]
        if not isinstance(totals, Mapping):
            raise RunDirError(f"{where}.total_population: expected an object of levels")
        out = {}
        for level, units in totals.items():
            if not isinstance(units, Mapping) or any(isinstance(v, bool) or not isinstance(v, int) for v in units.values()):
                raise RunDirError(f"{where}.total_population.{level}: expected geocode -> integer population")
            out[str(level)] = dict(units)
        return cls(out)


@dataclass(frozen=True)
class Counts:
    """Persons and blocks of the release (the persons are the published national total)."""

    persons: int
    blocks: int

    def to_dict(self) -> dict:
        return {"persons": self.persons, "blocks": self.blocks}

    @classmethod
    def from_dict(cls, data, where: str) -> Counts:
        if not isinstance(data, Mapping):
            raise RunDirError(f"{where}: expected an object")
        return cls(_get(data, "persons", int, where), _get(data, "blocks", int, where))


@dataclass(frozen=True)
class EngineRecord:
    """Where the run's tasks ran."""

    engine: str
    workers: int

    def to_dict(self) -> dict:
        return {"engine": self.engine, "workers": self.workers}

    @classmethod
    def from_dict(cls, data, where: str) -> EngineRecord:
        if not isinstance(data, Mapping):
            raise RunDirError(f"{where}: expected an object")
        return cls(_get(data, "engine", str, where), _get(data, "workers", int, where))


@dataclass(frozen=True)
class UncertifiedRecord:
    """A least-squares pass whose duality gap stayed above the tolerance after every retry: its parent (geocode;
    "" for the root), the pass, its objective and gap in original units (das.topdown.optimality)."""

    parent: str
    pass_index: int
    objective: float
    gap: float

    def to_dict(self) -> dict:
        return {"parent": self.parent, "pass": self.pass_index, "objective": self.objective, "gap": self.gap}

    @classmethod
    def from_dict(cls, data, where: str) -> UncertifiedRecord:
        if not isinstance(data, Mapping):
            raise RunDirError(f"{where}: expected an object")
        return cls(_get(data, "parent", str, where), _get(data, "pass", int, where),
                   _number(_get(data, "objective", (int, float), where), f"{where}.objective"),
                   _number(_get(data, "gap", (int, float), where), f"{where}.gap"))

    @property
    def relative_gap(self) -> float:
        return self.gap / max(self.objective, 1.0)


@dataclass(frozen=True)
class LevelRecord:
    """One level of a release's post-processing: parents solved, failsafe events, the L2 certificate and the
    passes it could not certify. Its times are the operator's (RunDir.process_file): a run time may depend on
    the data outside the noise."""

    level: str
    parents: int
    failsafe_events: int
    l2_certificate: Mapping[str, float]
    uncertified: tuple[UncertifiedRecord, ...] = ()

    @classmethod
    def of(cls, level: str, parents: int, failsafe_events: int, certificate: Mapping) -> LevelRecord:
        """From an engine's level certificate (das.topdown.optimality.new_certificate): its figures, and its list of
        uncertified passes as records."""
        figures = {k: v for k, v in certificate.items() if k != "uncertified_at"}
        found = tuple(UncertifiedRecord(r["parent"], r["pass"], r["objective"], r["gap"])
                      for r in certificate.get("uncertified_at", ()))
        return cls(level, parents, failsafe_events, figures, found)

    def to_dict(self) -> dict:
        return {"level": self.level, "parents": self.parents, "failsafe_events": self.failsafe_events,
                "l2_certificate": dict(self.l2_certificate), "uncertified": [u.to_dict() for u in self.uncertified]}

    @classmethod
    def from_dict(cls, data, where: str) -> LevelRecord:
        if not isinstance(data, Mapping):
            raise RunDirError(f"{where}: expected an object")
        return cls(_get(data, "level", str, where), _get(data, "parents", int, where),
                   _get(data, "failsafe_events", int, where),
                   _mapping(data, "l2_certificate", (int, float), where, optional=False),
                   _records(UncertifiedRecord, data, "uncertified", where) or ())


@dataclass(frozen=True)
class FailsafeRecord:
    """A parent that was infeasible as stated and was solved with a minimal L1 relaxation."""

    release: str
    level: str
    parent: str
    stage: str
    relaxed: str
    slack: float
    detail: str = ""

    def to_dict(self) -> dict:
        return {"release": self.release, "level": self.level, "parent": self.parent, "stage": self.stage,
                "relaxed": self.relaxed, "slack": self.slack, "detail": self.detail}

    @classmethod
    def from_dict(cls, data, where: str) -> FailsafeRecord:
        if not isinstance(data, Mapping):
            raise RunDirError(f"{where}: expected an object")
        return cls(*(_get(data, k, str, where) for k in ("release", "level", "parent", "stage", "relaxed")),
                   _number(_get(data, "slack", (int, float), where), f"{where}.slack"),
                   _get(data, "detail", str, where, optional=True) or "")


@dataclass(frozen=True)
class ValidationRecord:
    """What the independent validator found right after the run."""

    valid: bool
    checks: tuple[str, ...]
    violations: tuple[str, ...]

    def to_dict(self) -> dict:
        return {"valid": self.valid, "checks": list(self.checks), "violations": list(self.violations)}

    @classmethod
    def from_dict(cls, data, where: str) -> ValidationRecord:
        if not isinstance(data, Mapping):
            raise RunDirError(f"{where}: expected an object")
        return cls(_get(data, "valid", bool, where), _strings(data, "checks", where), _strings(data, "violations", where))


@dataclass(frozen=True)
class MechanismRecord:
    """A synthetic release (das.mechanisms): the mechanism, how geography enters, its budget, its details."""

    name: str
    summary: str
    geography: str
    budget: Fraction
    details: Mapping[str, object] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"name": self.name, "summary": self.summary, "geography": self.geography,
                "budget": fraction_text(self.budget), "details": dict(self.details)}

    @classmethod
    def from_dict(cls, data, where: str) -> MechanismRecord:
        if not isinstance(data, Mapping):
            raise RunDirError(f"{where}: expected an object")
        try:
            budget = exact(_get(data, "budget", (str, int), where), f"{where}.budget")
        except CertificateError as e:
            raise RunDirError(str(e)) from None
        return cls(_get(data, "name", str, where), _get(data, "summary", str, where),
                   _get(data, "geography", str, where), budget, _get(data, "details", dict, where, optional=True) or {})


@dataclass(frozen=True)
class SpineRecord:
    """The spine a release was measured and solved on (das.model.spine), when not the standard one: its kind and
    each declared area file's SHA-256 (public geography; the files' paths stay with the operator)."""

    kind: str
    areas: Mapping[str, str] = field(default_factory=dict)  # area type -> SHA-256 of its file

    def to_dict(self) -> dict:
        return {"kind": self.kind, "areas": dict(self.areas)}

    @classmethod
    def from_dict(cls, data, where: str) -> SpineRecord:
        if not isinstance(data, Mapping):
            raise RunDirError(f"{where}: expected an object")
        areas = _get(data, "areas", dict, where, optional=True) or {}
        bad = [k for k, v in areas.items() if not isinstance(v, str)]
        if bad:
            raise RunDirError(f"{where}.areas.{bad[0]}: expected a SHA-256 (text)")
        return cls(_get(data, "kind", str, where), dict(areas))


@dataclass(frozen=True)
class Interruption:
    """One resumption of an interrupted run: when, from which status, what it found and reused. The
    operator's (RunDir.process_file), never public: when a run stopped and what it had done by then
    depends on how long its stages took."""

    resumed_at: str
    previous_status: str
    found: Mapping[str, object]
    measurement: Mapping[str, object] | None = None

    def to_dict(self) -> dict:
        out = {"resumed_at": self.resumed_at, "previous_status": self.previous_status, "found": dict(self.found)}
        return out | ({"measurement": dict(self.measurement)} if self.measurement is not None else {})


def _records(kind, data: Mapping, key: str, where: str) -> tuple | None:
    values = _get(data, key, list, where, optional=True)
    return None if values is None else tuple(kind.from_dict(v, f"{where}: {key}[{i}]") for i, v in enumerate(values))


# ---------------------------------------------------------------------------------------------
# The manifest


@dataclass(frozen=True)
class Manifest:
    """manifest.json: what was run and how (fixed at the start), then what came out (at the end).
    Frozen: a stage's result is `dataclasses.replace(manifest, ...)`, written by `RunDir.write`."""

    spec_name: str
    status: str  # running | measured | interrupted | complete
    levels: tuple[str, ...]
    persons: ReleaseInfo
    privacy: Mapping[str, Certificate]  # release -> its certificate
    kind: str = RUN_KIND
    das_version: str = ""
    spec_text: str = ""
    spec_sha256: str = ""
    private: bool = True
    randomness: str = ""
    tables: str = "pl94"
    units: ReleaseInfo | None = None
    python: str = ""
    seed: int | None = None
    invariants: PublishedInvariants = field(default_factory=PublishedInvariants)
    warning: str | None = None
    engine: EngineRecord | None = None
    levels_report: Mapping[str, tuple[LevelRecord, ...]] | None = None
    failsafe_events: tuple[FailsafeRecord, ...] | None = None
    outputs: Mapping[str, str] | None = None  # relative path -> SHA-256, the release files
    nmf: Mapping[str, str] | None = None  # relative path -> SHA-256
    counts: Counts | None = None
    validation: ValidationRecord | None = None
    mechanism: MechanismRecord | None = None  # a synthetic release (das.mechanisms)
    holds: tuple[str, ...] | None = None  # what the release claims (das.validate); None: a TopDown release
    spine: SpineRecord | None = None  # a spine other than the standard one (das.model.spine)
    guarantee: Guarantee | None = None  # the releases' certificates composed (das.privacy.guarantee)
    extra: Mapping[str, object] = field(default_factory=dict)  # keys this version does not know, kept as they are

    ORDER = ("kind", "das_version", "spec_name", "spec_text", "spec_sha256", "status", "private", "randomness",
             "levels", "tables", "persons", "units", "privacy", "python", "seed", "invariants")

    @classmethod
    def from_dict(cls, data: Mapping, where: str = MANIFEST) -> Manifest:
        """The manifest a JSON object states, or RunDirError naming the field and what was expected."""
        if not isinstance(data, Mapping):
            raise RunDirError(f"{where} is not a das run manifest (not a JSON object)")
        missing = [k for k in REQUIRED if k not in data]
        if missing:
            raise RunDirError(f"{where} is not a das run manifest (no {', '.join(missing)})")
        status = _get(data, "status", str, where)
        if status not in STATUSES:
            raise RunDirError(f"{_where(where, 'status')}: {status!r} is not one of {', '.join(STATUSES)}")
        privacy = _get(data, "privacy", dict, where)
        try:
            certificates = {str(k): Certificate.from_dict(v, f"{where}: privacy.{k}") for k, v in privacy.items()}
        except CertificateError as e:
            raise RunDirError(str(e)) from None
        orphans = [k for k in certificates if k not in ("persons", "units") or data.get(k) is None]
        if orphans:
            raise RunDirError(f"{_where(where, 'privacy')}.{orphans[0]}: the certificate of no release of the manifest "
                              "(expected persons or units, each with its section)")
        levels = _strings(data, "levels", where)
        unknown = [lv for lv in levels if lv not in LEVEL_DIGITS]
        if unknown:
            raise RunDirError(f"{_where(where, 'levels')}: {unknown[0]!r} is not a geography level (known: "
                              f"{', '.join(LEVEL_DIGITS)})")
        seed = _get(data, "seed", int, where, optional=True)
        known = {f.name for f in fields(cls)} - {"extra"}
        return cls(
            spec_name=_get(data, "spec_name", str, where), status=status, levels=levels,
            persons=ReleaseInfo.from_dict(data["persons"], f"{where}: persons"), privacy=certificates,
            kind=_get(data, "kind", str, where, optional=True) or RUN_KIND,
            **{k: _get(data, k, str, where, optional=True) or "" for k in
               ("das_version", "spec_text", "spec_sha256", "randomness", "python")},
            private=True if data.get("private") is None else _get(data, "private", bool, where),
            tables=_get(data, "tables", str, where, optional=True) or "pl94",
            units=None if data.get("units") is None else ReleaseInfo.from_dict(data["units"], f"{where}: units"),
            seed=seed,
            invariants=PublishedInvariants.from_dict(data.get("invariants") or {}, f"{where}: invariants"),
            warning=_get(data, "warning", str, where, optional=True),
            engine=None if data.get("engine") is None else EngineRecord.from_dict(data["engine"], f"{where}: engine"),
            levels_report=_levels_report(data, where),
            failsafe_events=_records(FailsafeRecord, data, "failsafe_events", where),
            outputs=_mapping(data, "outputs", str, where), nmf=_mapping(data, "nmf", str, where),
            counts=None if data.get("counts") is None else Counts.from_dict(data["counts"], f"{where}: counts"),
            validation=None if data.get("validation") is None
            else ValidationRecord.from_dict(data["validation"], f"{where}: validation"),
            mechanism=None if data.get("mechanism") is None
            else MechanismRecord.from_dict(data["mechanism"], f"{where}: mechanism"),
            holds=_strings(data, "holds", where, optional=True),
            spine=None if data.get("spine") is None else SpineRecord.from_dict(data["spine"], f"{where}: spine"),
            guarantee=_guarantee(data, where),
            extra={k: v for k, v in data.items() if k not in known},
        )

    def to_dict(self) -> dict:
        """The JSON object, in a stable key order; fields not set yet are left out."""
        out = {k: _json(getattr(self, k)) for k in self.ORDER}
        for f in fields(self):
            if f.name not in self.ORDER and f.name != "extra" and getattr(self, f.name) is not None:
                out[f.name] = _json(getattr(self, f.name))
        return {**out, **self.extra}

    @property
    def complete(self) -> bool:
        return self.status == "complete"

    def schema(self, release: str) -> str:
        """The schema name (or path) of a release ("persons" or "units")."""
        section = getattr(self, release) if release in ("persons", "units") else None
        if section is None:
            raise RunDirError(f"{MANIFEST}: field {release}.schema is missing; expected the {release} schema name")
        return section.schema

    def schema_of(self, release: str):
        """The Schema of a release ("persons" or "units") as its published spec pins it (das.frame.pinned), not as
        a file of this machine says today. SpecError: the spec does not pin it, or was changed."""
        return pinned.schema(self.spec_text, self.schema(release))

    def strategy_of(self, release: str):
        """The Strategy of a TopDown release as its published spec pins it (das.frame.pinned)."""
        section = getattr(self, release) if release in ("persons", "units") else None
        if section is None or section.strategy is None:
            raise RunDirError(f"{MANIFEST}: field {release}.strategy is missing; expected the {release} strategy name")
        return pinned.strategy(self.spec_text, section.strategy)

    def table_set(self) -> tuple:
        """The release's table specs (das.io.tables.TableSpec) as its published spec pins them (das.frame.pinned)."""
        return pinned.tables(self.spec_text, self.tables)

    def releases(self) -> list[str]:
        return [name for name in ("persons", "units") if getattr(self, name)]

    def certificate(self, release: str) -> Certificate:
        if release not in self.privacy:
            raise RunDirError(f"{MANIFEST}: field privacy.{release} is missing; expected the {release} certificate")
        return self.privacy[release]

    def listed(self) -> dict[str, str]:
        """Every file the manifest lists with its SHA-256: the outputs and the NMF."""
        return {**(self.outputs or {}), **(self.nmf or {})}

    def but(self, **changes) -> Manifest:
        """This manifest with some fields changed (it is frozen)."""
        return replace(self, **changes)


def _guarantee(data: Mapping, where: str) -> Guarantee | None:
    if data.get("guarantee") is None:
        return None
    try:
        return Guarantee.from_dict(data["guarantee"], f"{where}: guarantee")
    except CertificateError as e:
        raise RunDirError(str(e)) from None


def _levels_report(data: Mapping, where: str) -> dict | None:
    reports = _get(data, "levels_report", dict, where, optional=True)
    if reports is None:
        return None
    out = {}
    for release, levels in reports.items():
        if not isinstance(levels, list):
            raise RunDirError(f"{_where(where, 'levels_report')}.{release}: expected a list of levels")
        out[str(release)] = tuple(LevelRecord.from_dict(r, f"{where}: levels_report.{release}[{i}]")
                                  for i, r in enumerate(levels))
    return out


def _json(value):
    """A manifest field as JSON: records by their to_dict, tuples as lists, mappings of records too."""
    if hasattr(value, "to_dict"):
        return value.to_dict()
    if isinstance(value, (list, tuple)):
        return [_json(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _json(v) for k, v in value.items()}
    return value
