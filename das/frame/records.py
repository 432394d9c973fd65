"""The manifest's records: each a frozen value read from its JSON with every field checked (a wrong one is a
RunDirError naming it), written back by `to_dict`. `das.frame.manifest.Manifest` holds them."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction

from das.core.errors import ReleaseError
from das.privacy.certificate import CertificateError, exact, fraction_text


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
