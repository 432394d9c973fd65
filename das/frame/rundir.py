"""A run directory, typed: where each file lives.

`RunDir` is the one owner of the layout: every path of a run directory (release files, NMF,
operator files, checkpoints, a partitioned run's per-state work) is a method here, and nothing else
spells a file name of it. It reads and writes manifest.json as a `das.frame.manifest.Manifest`, that file's
one reader.

    RUN_DIR/manifest.json        public: spec (input paths redacted), certificate, checksums, invariants
    RUN_DIR/mdf_*.parquet, tables/, pl94171/, nmf/     public: the release
    RUN_DIR/manifest.sig, release.pub    public: the signature of manifest.json and its key (das.frame.signing)
    RUN_DIR/operator/            operator only (das.frame.bundle): input paths, keyed fingerprints, the keys, how the
                                 run went (timings, interruptions, errors)
    RUN_DIR/checkpoints/         operator only, while a run is unfinished

"""

from __future__ import annotations

import fnmatch
import json
from dataclasses import dataclass
from pathlib import Path

from das.core import atomic
from das.core.errors import command, option
from das.frame.manifest import MANIFEST, RUN_KIND, Manifest
from das.frame.records import RunDirError

OPERATOR_DIR = "operator"
OPERATOR_FILE = "operator.json"
KEY_FILE = "fingerprint.key"
SIGNING_KEY_FILE = "signing.key"  # a release's own Ed25519 key, when the operator names none (das.frame.signing)
PUBLIC_KEY = "release.pub"  # the public key of the release's signature, published beside it
SIGNATURE = "manifest.sig"  # the Ed25519 signature of manifest.json's exact bytes, written last
ESTIMATE_RECORD = "estimate.json"  # an estimate directory's record (das.research.estimates): never a release
PROCESS_FILE = "process.json"  # operator only: timings, interruptions, the last error, the checks against the inputs
PARTS_FILE = "parts.json"  # a state's part directory is complete when this is present (das.io.parts)


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
    def block_invariants(self) -> Path:
        """The invariants held exactly per block (housing units, GQ facilities by type): a TopDown release's public
        facts, from which its NMF is post-processed again (das postprocess)."""
        return self.path / "invariants.parquet"

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
        """How the run went (das.frame.bundle.record_process): timings per stage and level, interruptions, the
        last error, the validator's checks against the confidential inputs. Never published."""
        return self.operator_dir / PROCESS_FILE

    # work in progress, removed when the run is complete
    @property
    def checkpoints_dir(self) -> Path:
        return self.path / "checkpoints"

    def checkpoints(self, release: str) -> Path:
        """The solved levels and batches of a release (das.frame.checkpoint.Checkpoints), for resume."""
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
        if (self.path / ESTIMATE_RECORD).is_file():
            raise RunDirError(f"{self.path}: an estimate directory ({command('postprocess')} with {option('estimator')}), not a "
                              f"release: it has no {MANIFEST}, MDF or signature; score it with {command('metrics')}")
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
