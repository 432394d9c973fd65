"""A run directory, typed: where each file lives, and the manifest as one frozen value.

`RunDir` is the one owner of the layout: every path of a run directory (release files, NMF,
operator files, checkpoints, a partitioned run's per-state work) is a method here, and nothing else
spells a file name of it. `Manifest` is the one reader of manifest.json: typed records throughout
(the certificate is das.privacy.certificate.Certificate, exact), built from the JSON with every
field checked, so an edited or truncated manifest is a RunDirError naming the field, never a traceback.

    RUN_DIR/manifest.json        public: spec (input paths redacted), certificate, checksums, invariants
    RUN_DIR/mdf_*.parquet, tables/, pl94171/, nmf/     public: the release
    RUN_DIR/manifest.sig, release.pub    public: the signature of manifest.json and its key (das.signing)
    RUN_DIR/operator/            operator only (das.bundle): input paths, keyed fingerprints, the keys, how the
                                 run went (timings, interruptions, errors)
    RUN_DIR/checkpoints/         operator only, while a run is unfinished

>>> Manifest.from_dict({"spec_name": "x", "status": "complete", "levels": ["nation"], "persons": {"schema": "s"},
...                     "privacy": {}}).schema("persons")
's'
"""

from __future__ import annotations

import fnmatch
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from fractions import Fraction
from pathlib import Path

from das import atomic, pinned
from das.errors import ReleaseError, command, option
from das.geography import LEVEL_DIGITS
from das.privacy.certificate import Certificate, CertificateError, exact, fraction_text
from das.privacy.guarantee import Guarantee

MANIFEST = "manifest.json"
RUN_KIND = "das run"
REQUIRED = ("spec_name", "status", "levels", "persons", "privacy")
STATUSES = ("running", "measured", "interrupted", "complete")
OPERATOR_DIR = "operator"
OPERATOR_FILE = "operator.json"
KEY_FILE = "fingerprint.key"
SIGNING_KEY_FILE = "signing.key"  # a release's own Ed25519 key, when the operator names none (das.signing)
PUBLIC_KEY = "release.pub"  # the public key of the release's signature, published beside it
SIGNATURE = "manifest.sig"  # the Ed25519 signature of manifest.json's exact bytes, written last
PROCESS_FILE = "process.json"  # operator only: timings, interruptions, the last error, the checks against the inputs
PARTS_FILE = "parts.json"  # a state's part directory is complete when this is present (das.io.parts)


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
    """The spine a release was measured and solved on (das.spine), when not the standard one: its kind and
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
    spine: SpineRecord | None = None  # a spine other than the standard one (das.spine)
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
        """The Schema of a release ("persons" or "units") as its published spec pins it (das.pinned), not as
        a file of this machine says today. SpecError: the spec does not pin it, or was changed."""
        return pinned.schema(self.spec_text, self.schema(release))

    def strategy_of(self, release: str):
        """The Strategy of a TopDown release as its published spec pins it (das.pinned)."""
        section = getattr(self, release) if release in ("persons", "units") else None
        if section is None or section.strategy is None:
            raise RunDirError(f"{MANIFEST}: field {release}.strategy is missing; expected the {release} strategy name")
        return pinned.strategy(self.spec_text, section.strategy)

    def table_set(self) -> tuple:
        """The release's table specs (das.io.tables.TableSpec) as its published spec pins them (das.pinned)."""
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


# ---------------------------------------------------------------------------------------------
# The NMF's layout, inside a run's nmf/ (the stages that measure and read it are given that directory)


def nmf_level_path(nmf_dir: Path, release: str, level: str, state: str | None = None) -> Path:
    """The NMF file of a level (state None), or of one state's part of a level below the state (a
    partitioned run writes those levels one file per state, its geounits all of that state)."""
    if state is None:
        return Path(nmf_dir) / release / f"{level}.parquet"
    return Path(nmf_dir) / release / level / f"{state}.parquet"


def nmf_level_files(nmf_dir: Path, release: str, level: str) -> list[tuple[Path, str | None]]:
    """The files of one NMF level, with the state each holds (None: the whole level in one file)."""
    whole = nmf_level_path(nmf_dir, release, level)
    if whole.is_file():
        return [(whole, None)]
    folder = Path(nmf_dir) / release / level
    return [(p, p.stem) for p in sorted(folder.glob("*.parquet"))] if folder.is_dir() else []


# ---------------------------------------------------------------------------------------------
# The directory


@dataclass(frozen=True)
class RunDir:
    """The files of one run directory (or of a state's part directory, which is laid out the same)."""

    path: Path

    def __post_init__(self):
        object.__setattr__(self, "path", Path(self.path))

    # the release
    @property
    def manifest_path(self) -> Path:
        return self.path / MANIFEST

    def mdf(self, kind: str, layout: str = "parquet") -> Path:
        """The MDF of `kind` ("persons" or "units") in a layout (parquet, or the pipe-delimited text)."""
        return self.path / f"mdf_{kind}.{'parquet' if layout == 'parquet' else 'txt'}"

    @property
    def tables_dir(self) -> Path:
        return self.path / "tables"

    def table(self, name: str) -> Path:
        """Table `name` (P1, H1...) of the release: one Parquet file with every level's rows."""
        return self.tables_dir / f"{name}.parquet"

    @property
    def pl94171_dir(self) -> Path:
        return self.path / "pl94171"

    @property
    def spine(self) -> Path:
        """The spine a release was measured on, when not the standard one: each block's unit at the levels it re-forms."""
        return self.path / "spine.parquet"

    # the noisy measurement file
    @property
    def nmf_dir(self) -> Path:
        return self.path / "nmf"

    def nmf_level(self, release: str, level: str, state: str | None = None) -> Path:
        """The NMF file of a level, or of one state's part of it (`nmf_level_path`)."""
        return nmf_level_path(self.nmf_dir, release, level, state)

    def nmf_level_files(self, release: str, level: str) -> list[tuple[Path, str | None]]:
        """The files of one NMF level, with the state each holds (None: the whole level in one file)."""
        return nmf_level_files(self.nmf_dir, release, level)

    def nmf_files(self) -> list[Path]:
        """Every NMF file, a level's one file or a state's, sorted."""
        return sorted(self.nmf_dir.rglob("*.parquet"))

    # the operator's files, never published
    @property
    def operator_dir(self) -> Path:
        return self.path / OPERATOR_DIR

    @property
    def operator_file(self) -> Path:
        return self.operator_dir / OPERATOR_FILE

    @property
    def key_file(self) -> Path:
        return self.operator_dir / KEY_FILE

    @property
    def signing_key_file(self) -> Path:
        """The release's own Ed25519 private key (when the operator names no key of theirs): operator only."""
        return self.operator_dir / SIGNING_KEY_FILE

    # the signature, published beside the release (it covers the manifest, which lists every file's digest)
    @property
    def public_key_file(self) -> Path:
        return self.path / PUBLIC_KEY

    @property
    def signature_file(self) -> Path:
        return self.path / SIGNATURE

    def signature_files(self) -> tuple[Path, Path]:
        """The files published beside the listed ones: the manifest's signature and its public key."""
        return self.signature_file, self.public_key_file

    @property
    def process_file(self) -> Path:
        """How the run went (das.bundle.record_process): timings per stage and level, interruptions, the
        last error, the validator's checks against the confidential inputs. Never published."""
        return self.operator_dir / PROCESS_FILE

    # work in progress, removed when the run is complete
    @property
    def checkpoints_dir(self) -> Path:
        return self.path / "checkpoints"

    def checkpoints(self, release: str) -> Path:
        """The solved levels and batches of a release (das.checkpoint.Checkpoints), for resume."""
        return self.checkpoints_dir / release

    def state_dir(self, state: str) -> Path:
        """A partitioned run's work for one state: its facts, solutions, checkpoints and output parts."""
        return self.checkpoints_dir / "states" / state

    def state_parts(self, state: str) -> RunDir:
        """A state's output parts, laid out as a release (das.io.parts)."""
        return RunDir(self.state_dir(state) / "parts")

    def state_facts(self, state: str) -> Path:
        """A state's public facts (blocks, housing units, GQ facilities), saved by its first solving task."""
        return self.state_dir(state) / "facts.npz"

    def state_checkpoints(self, state: str) -> Path:
        """The checkpoints of a state's post-processing below the state (its engine's)."""
        return self.state_dir(state) / "solved"

    def solution(self, release: str, state: str | None = None) -> Path:
        """A release's solved histograms: of a state's blocks, or (state None) of the driver's top levels."""
        return (self.state_dir(state) if state else self.checkpoints("top")) / f"{release}.npz"

    def state_reports(self, state: str, release: str) -> Path:
        """A state's level reports of a release solved in its finishing task."""
        return self.state_dir(state) / f"{release}_reports.json"

    @property
    def parts_marker(self) -> Path:
        """In a state's part directory: written last, so its presence means the parts are complete."""
        return self.path / PARTS_FILE

    @staticmethod
    def internal_patterns() -> tuple[str, ...]:
        """Files a run writes besides its release files, relative to its directory (`*` matches across '/'):
        the manifest, its signature and public key, temporaries, committed NMF chunks, checkpoints and
        per-state work, operator files."""
        return (MANIFEST, f"{MANIFEST}.partial", SIGNATURE, PUBLIC_KEY, "*.partial", "*.partial/*", "nmf/*/*.parquet.parts/*",
                "checkpoints/*", f"{OPERATOR_DIR}/{OPERATOR_FILE}", f"{OPERATOR_DIR}/{KEY_FILE}",
                f"{OPERATOR_DIR}/{SIGNING_KEY_FILE}", f"{OPERATOR_DIR}/{PROCESS_FILE}")

    def relative(self, path: Path) -> str:
        return Path(path).relative_to(self.path).as_posix()

    # a run directory, or a bundle of its public files (das publish)
    @staticmethod
    def public_files(manifest: Manifest) -> tuple[str, ...]:
        """What is published of a release, sorted: the manifest, every file it lists, its signature and public key."""
        return tuple(sorted({MANIFEST, SIGNATURE, PUBLIC_KEY, *manifest.listed()}))

    def is_run_directory(self) -> bool:
        """Whether this is a run directory (the operator's: it holds das's operator record), not a bundle."""
        return self.operator_file.is_file()

    def operator_only_files(self) -> list[str]:
        """The files here that only a run directory holds, never a bundle: anything under operator/ or
        checkpoints/, and the run's other internal files (temporaries, committed NMF chunks)."""
        public = (MANIFEST, SIGNATURE, PUBLIC_KEY)
        internal = [p for p in self.internal_patterns() if p not in public]
        own = (OPERATOR_DIR + "/", self.relative(self.checkpoints_dir) + "/")
        found = (self.relative(p) for p in sorted(self.path.rglob("*")) if p.is_file() or p.is_symlink())
        return [r for r in found if r.startswith(own) or any(fnmatch.fnmatchcase(r, p) for p in internal)]

    # the manifest
    def read(self) -> Manifest:
        """The manifest, or RunDirError naming the file and what is wrong with it."""
        if not self.path.is_dir():
            what = "it is a file" if self.path.exists() else "it does not exist"
            raise RunDirError(f"{self.path}: not a das run directory (no {MANIFEST}: {what}); expected the "
                              f"{option('out')} of {command('run')}")
        if not self.manifest_path.is_file():
            raise RunDirError(f"{self.path}: not a das run directory (no {MANIFEST}); expected the {option('out')} of "
                              f"{command('run')}")
        try:
            data = json.loads(self.manifest_path.read_text())
        except (OSError, ValueError) as e:
            raise RunDirError(f"{self.manifest_path} is not readable JSON ({e})") from None
        return Manifest.from_dict(data, str(self.manifest_path))

    def read_complete(self) -> Manifest:
        """The manifest of a finished run, or RunDirError saying why the directory is not one."""
        manifest = self.read()
        if not manifest.complete:
            raise RunDirError(f"{self.path}: the run is not complete (manifest status {manifest.status!r}, "
                              "expected 'complete')")
        return manifest

    def write(self, manifest: Manifest) -> None:
        """Replace the manifest atomically: a reader sees the old one or the new one, never a torn one."""
        atomic.write_text(self.manifest_path, json.dumps(manifest.to_dict(), indent=2, default=str))

    def is_das_run(self) -> bool:
        """Whether the manifest says this directory is a das run (an older run may lack `kind`)."""
        try:
            data = json.loads(self.manifest_path.read_text())
        except (OSError, ValueError):
            return False
        return isinstance(data, dict) and (data.get("kind") == RUN_KIND
                                           or {"das_version", "spec_name", "status"} <= set(data))
