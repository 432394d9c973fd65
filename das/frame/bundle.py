"""A run directory: the release bundle (publishable) apart from the operator's files.

    RUN_DIR/manifest.json        public: spec (input and area file paths redacted), certificate, checksums, invariants
    RUN_DIR/mdf_*.parquet, tables/, nmf/      public: the release
    RUN_DIR/operator/            operator only (0700, its files 0600): input paths, keyed input fingerprints,
                                 the key, how the run went (process.json: timings, interruptions, errors)
    RUN_DIR/checkpoints/         operator only, while a run is unfinished (removed when complete)

Nothing computed from the confidential input files' bytes (a digest would let anyone confirm a
guessed small input) and no input path goes into the bundle. Resume still refuses changed
inputs: it compares HMAC-SHA256 fingerprints keyed with a random secret kept in
`operator/fingerprint.key`, never published.

What `--overwrite` may delete in a run directory (only what a das run writes) is das.frame.outdir's, the
one output-directory policy of every command.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import tomllib
from pathlib import Path

import tomli_w

from das.core import atomic
from das.core.errors import ReleaseError, SpecError
from das.frame import pinned
from das.frame.rundir import RunDir
from das.io.tabular import InMemory

REDACTED = "<operator only>"
INPUT_KEYS = ("persons", "units")  # the keys of [input] a run spec reads (das.driver.runspec)
# process.json's record of the inputs given as pandas DataFrames (das.run, das.synth): their recorded paths were
# temporary copies, gone when the call returned, so a scoring needs the truth given again
DATAFRAMES = "dataframes"
NOT_PRIVATE_MARK = "NOT PRIVATE: seeded replication mode; these outputs must not be released"


class BundleError(ReleaseError):
    """A run directory that cannot be used as asked (not a das run, holds other files...)."""


# ---------------------------------------------------------------------------------------------
# Keyed fingerprints of the confidential inputs (operator only)


def new_key() -> bytes:
    return secrets.token_bytes(32)


def keyed_digest(key: bytes, path: Path) -> str:
    """HMAC-SHA256 of a file's bytes under `key`: matches only for the same bytes and the same key."""
    mac = hmac.new(key, digestmod=hashlib.sha256)
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            mac.update(chunk)
    return mac.hexdigest()


def keyed_fingerprint(key: bytes, path) -> dict:
    """Keyed digest of an input file, or of every file under an input directory (name -> digest), or of an input
    held in memory (das.io.tabular.InMemory: its bytes)."""
    if isinstance(path, InMemory):
        return {"": hmac.new(key, path.csv, hashlib.sha256).hexdigest()}
    path = Path(path)
    if path.is_dir():
        return {str(p.relative_to(path)): keyed_digest(key, p) for p in sorted(path.rglob("*")) if p.is_file()}
    return {"": keyed_digest(key, path)} if path.is_file() else {"": "missing"}


def spec_digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def public_spec(text: str, *, budget: dict | None = None) -> dict:
    """The run spec as published: parsed, its [input] table (confidential paths) replaced by REDACTED
    values under the known keys, and the paths of its area files ([geography] areas: the operator's
    file system) by REDACTED under their area types, so no input path and no comment of the text can
    reach a public file (the area types and the spine stay: they say what was released);
    `budget` (das.driver.runspec.RunSpec.budget_table: a budget the command line gave) is written into the
    sections it stands for, replacing the spec's own rho or eps, so the published spec states the
    budget the release was made with (das validate recomputes the certificate from it); and every
    schema, strategy and table set it names is pinned in it (das.frame.pinned: canonical text and SHA-256,
    referred to by name, never by path), so the certificate is recomputed from the published bytes alone.

    Refused (SpecError) when not TOML, when [input] or [geography] areas is not a table, or when an input
    or area path also appears elsewhere in the spec (in a key or another string it cannot be told from text)."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise SpecError(f"the run spec is not valid TOML ({e}); it cannot be redacted for publication") from None
    for section, values in (budget or {}).items():
        table = dict(data.get(section) or {})
        if "rho" in values or "eps" in values:
            table.pop("rho", None), table.pop("eps", None)
        data[section] = {**table, **values}
    return pinned.pin(_redacted(data))


def _redacted(data: dict) -> dict:
    """A parsed run spec, its input and area paths redacted (`public_spec`)."""
    given, areas = data.get("input"), _areas(data)
    if given is None and areas is None:
        return data
    if given is not None and not isinstance(given, dict):
        raise SpecError(f"[input] must be a table of input paths (persons, units), not {type(given).__name__}: "
                        "written so it cannot be redacted for publication")
    public = {k: v for k, v in data.items() if k != "input"}
    if areas is not None:
        public["geography"] = {**data["geography"], "areas": {k: REDACTED for k in areas}}
    paths = {str(v) for v in _leaves([given or {}, areas or {}]) if "/" in str(v) or "\\" in str(v)}  # a bare name says nothing
    found = sorted(p for p in paths if any(p in t for t in _texts(public)))
    if found:
        raise SpecError(f"the input or area path {found[0]!r} also appears elsewhere in the spec; it cannot be "
                        "redacted for publication: keep input paths in [input] and area files in [geography] areas")
    return public if given is None else {"input": {k: REDACTED for k in INPUT_KEYS if k in given}, **public}


def _areas(data: dict) -> dict | None:
    """The spec's [geography] areas (area type -> file path), None when it declares none."""
    geography = data.get("geography")
    areas = geography.get("areas") if isinstance(geography, dict) else None
    if areas is not None and not isinstance(areas, dict):
        raise SpecError(f"[geography] areas must be a table of area files (type = path), not {type(areas).__name__}: "
                        "written so it cannot be redacted for publication")
    return areas


def public_spec_text(text: str, *, budget: dict | None = None) -> str:
    """The published spec text: `public_spec` written canonically (TOML, no comments, [input] redacted,
    a command-line budget stated). spec_sha256 in the manifest and in every Parquet file is its digest."""
    return tomli_w.dumps(public_spec(text, budget=budget), multiline_strings=True)


def _leaves(value):
    """Every scalar in a parsed TOML value (tables and arrays walked)."""
    if isinstance(value, dict):
        for v in value.values():
            yield from _leaves(v)
    elif isinstance(value, list):
        for v in value:
            yield from _leaves(v)
    else:
        yield value


def _texts(value):
    """Every key and string value in a parsed TOML value."""
    if isinstance(value, dict):
        for k, v in value.items():
            yield str(k)
            yield from _texts(v)
    elif isinstance(value, list):
        for v in value:
            yield from _texts(v)
    elif isinstance(value, str):
        yield value


def operator_directory(run_dir: Path) -> Path:
    """RUN_DIR/operator, created if need be, open to its owner only (0700)."""
    return atomic.owner_only_directory(RunDir(run_dir).operator_dir)


def write_operator(run_dir: Path, record: dict, key: bytes | None = None) -> None:
    """operator/operator.json (and the fingerprint key on first write): owner only, in an owner-only directory."""
    where = RunDir(run_dir)
    operator_directory(run_dir)
    if key is not None:
        atomic.write_owner_only(where.key_file, key)
    atomic.write_owner_only(where.operator_file, json.dumps(record, indent=2, default=str).encode())


def read_operator(run_dir: Path) -> tuple[dict, bytes]:
    """(operator.json, key) of a run directory; BundleError when they are missing or unreadable."""
    where = RunDir(run_dir)
    try:
        record = json.loads(where.operator_file.read_text())
        key = where.key_file.read_bytes()
    except FileNotFoundError as e:
        raise BundleError(f"{run_dir}: the operator files are missing ({e.filename} not found)") from None
    except (OSError, ValueError) as e:
        raise BundleError(f"{run_dir}: {where.operator_file} is not readable JSON ({e})") from None
    if not isinstance(record, dict):
        raise BundleError(f"{run_dir}: {where.operator_file} is not a JSON object")
    return record, key


def read_process(run_dir: Path) -> dict:
    """operator/process.json (how the run went: timings, interruptions, errors), or {} when there is none."""
    try:
        record = json.loads(RunDir(run_dir).process_file.read_text())
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def record_process(run_dir: Path, **fields) -> dict:
    """operator/process.json with `fields` set (the others kept): what may depend on the data outside the
    noise (run times, when a run stopped and what it had done, error messages) is the operator's, never public."""
    record = {**read_process(run_dir), **fields}
    operator_directory(run_dir)
    atomic.write_owner_only(RunDir(run_dir).process_file, (json.dumps(record, indent=2, default=str) + "\n").encode())
    return record


def input_paths(run_dir: Path) -> dict[str, str]:
    """The confidential input paths a run read (from its operator files)."""
    record, _ = read_operator(run_dir)
    return dict(record.get("inputs", {}))


# ---------------------------------------------------------------------------------------------
# Metadata carried inside every Parquet output


def parquet_metadata(private: bool, certificates: dict, spec_sha256: str, version: str) -> dict[bytes, bytes]:
    """Key-value metadata for every Parquet output: privacy mode, certificate (das.privacy.certificate's summary:
    rho, (eps, delta), and the certificate's own convention, the guarantee in words true for its release: TopDown's,
    or the mechanism's), spec digest, code version."""
    summary = {name: c.summary() for name, c in certificates.items()}
    return {
        b"das.privacy": (b"private" if private else NOT_PRIVATE_MARK.encode()),
        b"das.certificate": json.dumps(summary, sort_keys=True).encode(),
        b"das.spec_sha256": spec_sha256.encode(),
        b"das.version": version.encode(),
    }

