"""`das publish RUN --to DIR` (or `--to FILE.tar`): a release's public files alone, as anyone receives them.

A run directory is not publishable as it is: it holds the operator's files (operator/: the keys, the
input paths, process.json with the timings), and its files' modification times give those timings
away to whoever gets a `tar`, `rsync -a` or `zip` of it. A bundle holds exactly the public files
(das.frame.rundir.RunDir.public_files: manifest.json, every file it lists, its signature and public key),
copied byte for byte and checked against the manifest's digests, in a canonical order (sorted paths),
every file 0644, every directory 0755, every modification time the same (SOURCE_DATE_EPOCH, else 0):
two releases of the same bytes publish the same bundle, byte for byte, a tar archive included.

Refused (PublishError, exit 1): a run that is not signed or that das validate does not pass, the
reason said. The bundle directory follows das.frame.outdir (das.frame.outdir.check_bundle): empty, or an earlier
bundle replaced with --overwrite, never a directory holding anyone else's file.
"""

from __future__ import annotations

import hashlib
import io
import os
import tarfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from das.core import atomic
from das.core.errors import ReleaseError, ValidationError
from das.frame import outdir
from das.frame.rundir import RunDir
from das.validate import validate_run

FILE_MODE, DIRECTORY_MODE = 0o644, 0o755
EPOCH_VARIABLE = "SOURCE_DATE_EPOCH"  # reproducible-builds.org: the one time every file of a bundle bears
SHOWN = 5  # violations named in a refusal


class PublishError(ReleaseError):
    """A run that may not be published (not complete, not signed, not valid): the CLI exits 1 with the reason."""


@dataclass(frozen=True)
class Bundle:
    """What `publish` wrote: the bundle (a directory or a tar archive) and its files, in their order."""

    path: Path
    files: tuple[str, ...]
    archive: bool


def epoch() -> int:
    """Every bundle file's modification time: SOURCE_DATE_EPOCH when set (an integer), else 0."""
    value = os.environ.get(EPOCH_VARIABLE, "").strip()
    if not value:
        return 0
    if not value.isdigit():
        raise PublishError(f"{EPOCH_VARIABLE}={value!r} is not a nonnegative integer (seconds since 1970)")
    return int(value)


def publishable(run_dir) -> tuple[RunDir, tuple[str, ...]]:
    """The run and its public files, once it is proved publishable: signed, and valid by das validate (its
    published files alone, not against the inputs). PublishError saying why not; RunDirError: not a release
    (no readable manifest)."""
    run = RunDir(run_dir)
    manifest = run.read()
    missing = [run.relative(p) for p in run.signature_files() if not p.is_file()]
    if missing:
        raise PublishError(f"{run.path}: the release is not signed (no {', '.join(missing)}): a bundle proves its "
                           "origin only with the signature of its manifest")
    try:
        report = validate_run(run.path, use_operator=False)
    except ValidationError as e:
        raise PublishError(f"{run.path} does not validate: {e}") from None
    if not report.ok:
        more = f" and {len(report.violations) - SHOWN} more" if len(report.violations) > SHOWN else ""
        raise PublishError(f"{run.path} does not validate (das validate {run.path}): "
                           + "; ".join(report.violations[:SHOWN]) + more)
    return run, run.public_files(manifest)


def _read(run: RunDir, name: str, listed: dict[str, str]) -> bytes:
    """A public file's bytes, checked against the manifest's digest (it could change after validation)."""
    data = (run.path / name).read_bytes()
    if name in listed and hashlib.sha256(data).hexdigest() != listed[name]:
        raise PublishError(f"{run.path / name} changed while it was being published (its SHA-256 is not the manifest's)")
    return data


def directories(files) -> list[str]:
    """Every directory the files are in, parents first."""
    return sorted({str(p) for f in files for p in PurePosixPath(f).parents if str(p) != "."},
                  key=lambda d: PurePosixPath(d).parts)


def _to_directory(run: RunDir, files: tuple[str, ...], to: Path, *, overwrite: bool) -> None:
    remove = outdir.check_bundle(to, overwrite=overwrite, protected=[run.path])
    outdir.remove_files(to, remove)
    to.mkdir(parents=True, exist_ok=True)
    listed, when = run.read().listed(), epoch()
    for name in files:
        target = to / name
        target.parent.mkdir(parents=True, exist_ok=True)
        atomic.write_bytes(target, _read(run, name, listed))
        os.chmod(target, FILE_MODE)
        os.utime(target, (when, when))
    for folder in sorted(directories(files), key=lambda d: -len(PurePosixPath(d).parts)) + ["."]:
        os.chmod(to / folder, DIRECTORY_MODE)  # deepest first, the bundle's own last: a directory's time stays
        os.utime(to / folder, (when, when))


def _member(name: str, *, size: int = 0, folder: bool = False) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.mode = (tarfile.DIRTYPE, DIRECTORY_MODE) if folder else (tarfile.REGTYPE, FILE_MODE)
    info.size, info.mtime, info.uid, info.gid, info.uname, info.gname = size, epoch(), 0, 0, "", ""
    return info


def _to_archive(run: RunDir, files: tuple[str, ...], to: Path, *, overwrite: bool) -> None:
    """A tar archive (POSIX ustar) of the bundle under one directory named after the archive: its directories
    and files in path order, owner 0 and no owner names."""
    outdir.check_bundle_archive(to, overwrite=overwrite)
    listed, top = run.read().listed(), to.name[: -len(".tar")]
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        entries = [(d, True) for d in ["", *directories(files)]] + [(f, False) for f in files]
        for name, folder in sorted(entries, key=lambda e: PurePosixPath(top, e[0]).parts):
            path = str(PurePosixPath(top, name))
            if folder:
                tar.addfile(_member(path, folder=True))
            else:
                data = _read(run, name, listed)
                tar.addfile(_member(path, size=len(data)), io.BytesIO(data))
    to.parent.mkdir(parents=True, exist_ok=True)
    atomic.write_bytes(to, buffer.getvalue())
    os.chmod(to, FILE_MODE)


def publish(run_dir, to, *, overwrite: bool = False) -> Bundle:
    """Write the bundle of a finished, signed and valid release: a directory, or a tar archive when `to` ends
    in .tar. PublishError: the run may not be published; das.frame.outdir.OutDirError: `to` may not be written."""
    to = Path(to)
    run, files = publishable(run_dir)
    archive = to.suffix == ".tar"
    (_to_archive if archive else _to_directory)(run, files, to, overwrite=overwrite)
    return Bundle(to, files, archive)


