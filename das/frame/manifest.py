"""manifest.json, typed: `Manifest` is its one reader, typed records throughout (the certificate is
das.privacy.certificate.Certificate, exact), built from the JSON with every field checked, so an edited or truncated
manifest is a RunDirError naming the field, never a traceback. Where the file lives is das.frame.rundir's.

>>> Manifest.from_dict({"spec_name": "x", "status": "complete", "levels": ["nation"], "persons": {"schema": "s"},
...                     "privacy": {}}).schema("persons")
's'
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace

from das.frame import pinned
from das.frame.records import (
    Counts,
    EngineRecord,
    FailsafeRecord,
    LevelRecord,
    MechanismRecord,
    PublishedInvariants,
    ReleaseInfo,
    RunDirError,
    SpineRecord,
    ValidationRecord,
    _get,
    _mapping,
    _records,
    _strings,
    _where,
)
from das.model.levels import LEVEL_DIGITS
from das.privacy.certificate import Certificate, CertificateError
from das.privacy.guarantee import Guarantee

MANIFEST = "manifest.json"
RUN_KIND = "das run"
REQUIRED = ("spec_name", "status", "levels", "persons", "privacy")
STATUSES = ("running", "measured", "interrupted", "complete")


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
    postprocessed_from: str | None = None  # das postprocess: SHA-256 of the manifest whose NMF it post-processed
    postprocessed_with: str | None = None  # das postprocess --settings: the [postprocess] table used, as TOML
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
            postprocessed_from=_get(data, "postprocessed_from", str, where, optional=True),
            postprocessed_with=_get(data, "postprocessed_with", str, where, optional=True),
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
