"""A run directory, typed: where each file lives, the manifest as named fields, one reader and one
atomic writer. Everything that reads or writes a run (run, resume, validate, tables, research,
attack) goes through here.

    RUN_DIR/manifest.json        public: spec (input paths redacted), certificate, checksums, invariants
    RUN_DIR/mdf_*.parquet, tables/, pl94171/, nmf/     public: the release
    RUN_DIR/operator/            operator only (das.bundle): input paths, keyed fingerprints, the key
    RUN_DIR/checkpoints/         operator only, while a run is unfinished

>>> Manifest.from_dict({"spec_name": "x", "status": "complete", "levels": ["nation"], "persons": {"schema": "s"},
...                     "privacy": {}}).schema("persons")
's'
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from pathlib import Path

from das import atomic

MANIFEST = "manifest.json"
RUN_KIND = "das run"
REQUIRED = ("spec_name", "status", "levels", "persons", "privacy")


class RunDirError(RuntimeError):
    """A directory that is not the das run it is used as (missing, unreadable, unfinished manifest)."""


@dataclass
class Manifest:
    """manifest.json: what was run and how (fixed at the start), then what came out (at the end)."""

    spec_name: str
    status: str  # running | measured | interrupted | complete
    levels: list[str]
    persons: dict  # {"schema", "strategy"}
    privacy: dict  # release -> privacy certificate
    kind: str = RUN_KIND
    das_version: str = ""
    spec_text: str = ""
    spec_sha256: str = ""
    private: bool = True
    randomness: str = ""
    tables: str = "pl94"
    units: dict | None = None
    python: str = ""
    seed: int | None = None
    invariants: dict = field(default_factory=dict)
    warning: str | None = None
    interruptions: list | None = None
    engine: dict | None = None
    timings_seconds: dict | None = None
    levels_report: dict | None = None
    failsafe_events: list | None = None
    outputs: dict | None = None  # relative path -> SHA-256, the release files
    nmf: dict | None = None  # relative path -> SHA-256
    counts: dict | None = None
    validation: dict | None = None
    error: str | None = None
    mechanism: dict | None = None  # a synthetic release (das.mechanisms): name, geography, budget, details
    holds: list | None = None  # what the release claims (validate.HOLDS); None: a TopDown release, all of TOPDOWN_HOLDS
    extra: dict = field(default_factory=dict)  # keys this version does not know, kept as they are

    ORDER = ("kind", "das_version", "spec_name", "spec_text", "spec_sha256", "status", "private", "randomness",
             "levels", "tables", "persons", "units", "privacy", "python", "seed", "invariants")

    @classmethod
    def from_dict(cls, data: dict, where: str = MANIFEST) -> Manifest:
        missing = [k for k in REQUIRED if k not in data]
        if missing:
            raise RunDirError(f"{where} is not a das run manifest (no {', '.join(missing)})")
        known = {f.name for f in fields(cls)} - {"extra"}
        return cls(**{k: v for k, v in data.items() if k in known},
                   extra={k: v for k, v in data.items() if k not in known})

    def to_dict(self) -> dict:
        """The JSON object, in a stable key order; fields not set yet are left out."""
        out = {k: getattr(self, k) for k in self.ORDER}
        for f in fields(self):
            if f.name not in self.ORDER and f.name != "extra" and getattr(self, f.name) is not None:
                out[f.name] = getattr(self, f.name)
        return {**out, **self.extra}

    @property
    def complete(self) -> bool:
        return self.status == "complete"

    def schema(self, release: str) -> str:
        """The schema name (or path) of a release ("persons" or "units")."""
        section = getattr(self, release) if release in ("persons", "units") else None
        if not section or "schema" not in section:
            raise RunDirError(f"{MANIFEST}: field {release}.schema is missing; expected the {release} schema name")
        return section["schema"]

    def releases(self) -> list[str]:
        return [name for name in ("persons", "units") if getattr(self, name)]


@dataclass(frozen=True)
class RunDir:
    """The files of one run directory."""

    path: Path

    def __post_init__(self):
        object.__setattr__(self, "path", Path(self.path))

    @property
    def manifest_path(self) -> Path:
        return self.path / MANIFEST

    @property
    def nmf_dir(self) -> Path:
        return self.path / "nmf"

    def nmf_files(self) -> list[Path]:
        """Every NMF file, a level's one file or a state's (das.io.nmf.level_files), sorted."""
        return sorted(self.nmf_dir.rglob("*.parquet"))

    @property
    def checkpoints_dir(self) -> Path:
        return self.path / "checkpoints"

    @property
    def tables_dir(self) -> Path:
        return self.path / "tables"

    @property
    def pl94171_dir(self) -> Path:
        return self.path / "pl94171"

    def mdf(self, kind: str, layout: str = "parquet") -> Path:
        """The MDF of `kind` ("persons" or "units") in a layout (parquet, or the pipe-delimited text)."""
        return self.path / f"mdf_{kind}.{'parquet' if layout == 'parquet' else 'txt'}"

    def read(self) -> Manifest:
        """The manifest, or RunDirError naming the file and what is wrong with it."""
        if not self.path.is_dir():
            what = "it is a file" if self.path.exists() else "it does not exist"
            raise RunDirError(f"{self.path}: not a das run directory (no {MANIFEST}: {what}); expected the --out "
                              "of `das run`")
        if not self.manifest_path.is_file():
            raise RunDirError(f"{self.path}: not a das run directory (no {MANIFEST}); expected the --out of `das run`")
        try:
            data = json.loads(self.manifest_path.read_text())
        except (OSError, ValueError) as e:
            raise RunDirError(f"{self.manifest_path} is not readable JSON ({e})") from None
        if not isinstance(data, dict):
            raise RunDirError(f"{self.manifest_path} is not a das run manifest (not a JSON object)")
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
