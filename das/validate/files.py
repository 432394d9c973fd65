"""The checks every release is held to, of its files as files: each listed output and NMF file has the
SHA-256 the manifest lists, nothing unlisted is there (but the manifest's signature and its public key,
das.validate.signature's), the spec digest is the spec's; and every Parquet file says in its own
metadata whether it is private, the certificate it was made under (the manifest's, as das.frame.bundle
stamps it) and which spec made it."""

from __future__ import annotations

import fnmatch
import hashlib
import json

import pyarrow.parquet as pq

from das.core.errors import ValidationError
from das.frame.bundle import parquet_metadata
from das.frame.checkpoint import file_sha256
from das.frame.outdir import run_files
from das.validate.nmf import NMF
from das.validate.reading import unreadable
from das.validate.registry import Check
from das.validate.release import OpenRelease
from das.validate.report import Report, first

RUN_DIRECTORY = ("a run directory: it holds the operator's files (operator/: keys, input paths, timings), which "
                 "are not checked here and must never be published; publish its bundle (das publish RUN --to DIR)")
BUNDLE = "a bundle: nothing but public files (no operator file, no checkpoint, no key)"


def _unlisted(release: OpenRelease, listed: dict[str, str], internal: list[str]) -> list[str]:
    """The files that the manifest does not list (its own, its signature's and, in a run directory, the
    operator's aside)."""
    run = release.run
    beside = {run.manifest_path, *run.signature_files()}
    problems = []
    for path in sorted(run.path.rglob("*")):
        relative = run.relative(path)
        if path.is_file() and path not in beside and relative not in internal and relative not in listed:
            known = any(fnmatch.fnmatchcase(relative, p) for p in run_files())
            problems.append(f"{relative}: not listed in the manifest" + ("" if known else " (not a das output)"))
    return problems


def check_files(release: OpenRelease, parts, report: Report, alongside=None) -> None:
    """Checksums of every listed output and NMF file; no unlisted release file; the spec digest."""
    manifest, run = release.manifest, release.run
    with_nmf = NMF.claim in release.claims  # a release that claims its NMF lists its files
    listed = manifest.listed()
    problems = []
    if release.nmf_only and not manifest.nmf:
        problems.append("the manifest lists no NMF files (an NMF release publishes them)")
    elif not release.nmf_only and (not manifest.outputs or with_nmf and not manifest.nmf):
        problems.append("the manifest lists no outputs" + (" or no NMF files" if with_nmf else ""))
    for name, digest in sorted(listed.items()):
        path = run.path / name
        if not path.is_file():
            raise ValidationError(f"{path} is missing (the manifest lists it)")
        if file_sha256(path) != digest:
            problems.append(f"{name}: SHA-256 differs from the manifest's (the file was changed after the run)")
    internal, directory = run.operator_only_files(), run.is_run_directory()
    own = (run.relative(run.operator_dir) + "/", run.relative(run.checkpoints_dir) + "/")
    problems += _unlisted(release, listed, [r for r in internal if r.startswith(own)] if directory else internal)
    if manifest.spec_sha256 and hashlib.sha256(manifest.spec_text.encode()).hexdigest() != manifest.spec_sha256:
        problems.append("spec_sha256 does not match the spec text in the manifest")
    report.check("checksums of every output and NMF file", first(problems))
    if directory:
        report.note(RUN_DIRECTORY)
    else:  # what a reader received: any operator-only file in it is a leak
        report.check(BUNDLE, first([f"{name}: an operator-only file (never published)" for name in internal]))


def _certificates(meta: dict) -> object:
    """The certificates a Parquet file's das.certificate metadata states (None: none, or not JSON)."""
    try:
        return json.loads(meta[b"das.certificate"])
    except (KeyError, ValueError):
        return None


def check_metadata(release: OpenRelease, parts, report: Report, alongside=None) -> None:
    """Every Parquet file says, in its own metadata, whether it is private, the certificate it was made
    under (the manifest's certificates as das.frame.bundle stamps them) and which spec made it."""
    manifest = release.manifest
    problems = []
    want_private = b"private" if manifest.private else None
    stamped = parquet_metadata(manifest.private, dict(manifest.privacy), manifest.spec_sha256, manifest.das_version)
    want_certificates = json.loads(stamped[b"das.certificate"])
    for name in sorted(manifest.listed()):
        if not name.endswith(".parquet"):
            continue
        try:
            meta = pq.read_schema(release.run.path / name).metadata or {}
        except Exception as e:
            raise unreadable(release.run.path / name, e) from None
        mode = meta.get(b"das.privacy")
        if mode is None:
            problems.append(f"{name}: no das.privacy metadata")
        elif want_private and mode != want_private or not want_private and b"NOT PRIVATE" not in mode:
            problems.append(f"{name}: das.privacy says {mode.decode(errors='replace')!r}, the manifest says "
                            f"private = {manifest.private}")
        if _certificates(meta) != want_certificates:
            problems.append(f"{name}: das.certificate is not the manifest's certificate"
                            + ("" if b"das.certificate" in meta else " (it has none)"))
        if manifest.spec_sha256 and meta.get(b"das.spec_sha256", b"").decode() != manifest.spec_sha256:
            problems.append(f"{name}: das.spec_sha256 is not the run's spec digest")
    report.check("privacy mode, certificate and spec digest in every Parquet file", first(problems))


CHECKSUMS = Check("checksums", check_files, claim=None, always=True, nmf=True)
METADATA = Check("metadata", check_metadata, claim=None, always=True, nmf=True)
