"""Authenticity (every release): whose release it is, and that it is unchanged since they signed it.

The operator signs manifest.json's exact bytes (das.frame.signing, Ed25519); the manifest lists every file's
SHA-256, so with the operator's public key (`das validate --public-key K`) the signature proves the
manifest is theirs, and the checksums check after it proves every listed file. Without a key nothing
proves origin: a release rewritten consistently (a record changed in the MDF and in every table, the
digests recomputed) is internally consistent, and the report says that this is all it proves. A
signature beside the release that does not verify with the key beside it is a violation either way
(the manifest was changed after it was signed).
"""

from __future__ import annotations

import json

from das.frame.manifest import Manifest
from das.frame.records import RunDirError
from das.frame.signing import SigningError, fingerprint, verifies
from das.validate.registry import Check
from das.validate.release import OpenRelease
from das.validate.report import Report

CONSISTENCY_ONLY = ("no --public-key given: this proves the release's internal consistency only, not its origin "
                    "(a release rewritten consistently, its digests recomputed, would pass too); give the operator's "
                    "published public key to prove the release is theirs and unchanged")


def _signature(release: OpenRelease) -> bytes | None:
    path = release.run.signature_file
    return path.read_bytes() if path.is_file() else None


def _signed_manifest(release: OpenRelease, data: bytes) -> list[str]:
    """The signed bytes are the manifest the other checks read (not a file swapped in between)."""
    try:
        signed = Manifest.from_dict(json.loads(data), str(release.run.manifest_path))
    except (ValueError, RunDirError) as e:
        return [f"the signed manifest is not readable ({e})"]
    return [] if signed == release.manifest else ["manifest.json changed while it was being validated"]


def check_given_key(release: OpenRelease, report: Report) -> None:
    """With the operator's public key: manifest.sig is its signature of manifest.json's exact bytes."""
    run = release.run
    data, signature = run.manifest_path.read_bytes(), _signature(release)
    name = f"signature: manifest.json is signed by the given public key (SHA-256 {fingerprint(release.public_key)})"
    if signature is None:
        problems = [f"the release is not signed: no {run.relative(run.signature_file)}"]
    elif not verifies(release.public_key, signature, data):
        problems = [f"{run.relative(run.signature_file)} is not the given key's signature of manifest.json: the "
                    "manifest was changed after it was signed, or another key signed it"]
    else:
        problems = _signed_manifest(release, data)
    report.check(name, problems)


def check_beside(release: OpenRelease, report: Report) -> None:
    """Without a key: the report says what is not proved; a signature beside the release must still verify
    with the public key beside it (which proves nothing about who wrote either)."""
    report.note(CONSISTENCY_ONLY)
    run = release.run
    signature, beside = _signature(release), run.public_key_file
    if signature is None and not beside.is_file():
        return
    name = (f"signature: {run.relative(run.signature_file)} verifies with the {run.relative(beside)} beside it "
            "(not a proof of origin)")
    if signature is None or not beside.is_file():
        missing = run.signature_file if signature is None else beside
        report.check(name, [f"{run.relative(missing)} is missing (the release is signed only in part)"])
        return
    try:
        ok = verifies(beside.read_bytes(), signature, run.manifest_path.read_bytes())
    except SigningError as e:
        report.check(name, [f"{run.relative(beside)}: {e}"])
        return
    report.check(name, [] if ok else ["the signature does not verify: manifest.json was changed after it was signed"])


def check_signature(release: OpenRelease, parts, report: Report, alongside=None) -> None:
    """Authenticity with the given public key, else what can be said without one."""
    if release.public_key is not None:
        check_given_key(release, report)
    else:
        check_beside(release, report)


SIGNATURE = Check("signature", check_signature, claim=None, always=True, nmf=True)
