"""A release's signature: the operator signs manifest.json with Ed25519, so that anyone holding the
operator's public key can tell the release is theirs and unchanged.

The manifest lists every published file's SHA-256, so a signature over its exact bytes covers the whole
release: `das validate --public-key K` checks the signature, then every digest. The signature is
written last (RUN/manifest.sig, the 64 raw bytes), beside the public key it verifies with
(RUN/release.pub, PEM): a reader proves origin only with a key obtained from the operator, not with
the one beside the release, which anyone rewriting the release can replace too.

Keys are PEM files (PKCS#8 private, SubjectPublicKeyInfo public), so the standard tools read them:

    openssl pkeyutl -verify -pubin -inkey release.pub -rawin -in manifest.json -sigfile manifest.sig

The private key is the operator's, 0600: `das keygen KEY` makes a pair to reuse across releases
(`--signing-key KEY`); without one, a release gets a key of its own in its operator files.
The cryptography is the `cryptography` library's (Ed25519, RFC 8032).

>>> key = new_private_key()
>>> public = public_key_pem(key)
>>> verifies(public, sign(key, b"manifest"), b"manifest"), verifies(public, sign(key, b"manifest"), b"manifest!")
(True, False)
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from das.core import atomic
from das.core.errors import DasError
from das.frame.rundir import RunDir

PUBLIC_SUFFIX = ".pub"  # `das keygen KEY` writes the public key to KEY.pub


class SigningError(DasError, ValueError):
    """A key that cannot be used as asked: missing, unreadable, not an Ed25519 key, or in the way."""


def new_private_key() -> Ed25519PrivateKey:
    return Ed25519PrivateKey.generate()


def sign(key: Ed25519PrivateKey, data: bytes) -> bytes:
    """The Ed25519 signature of `data` (64 bytes)."""
    return key.sign(data)


def public_key_pem(key: Ed25519PrivateKey) -> bytes:
    return key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)


def fingerprint(public_pem: bytes) -> str:
    """SHA-256 of the raw 32-byte public key, in hex: what to compare when a key is published or given."""
    raw = _public_key(public_pem, "the public key").public_bytes(serialization.Encoding.Raw,
                                                                 serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()


def verifies(public_pem: bytes, signature: bytes, data: bytes) -> bool:
    """Whether `signature` is the Ed25519 signature of `data` by the key of `public_pem` (SigningError:
    not a public key)."""
    try:
        _public_key(public_pem, "the public key").verify(signature, data)
    except InvalidSignature:
        return False
    return True


def _public_key(pem: bytes, where: str) -> Ed25519PublicKey:
    try:
        key = serialization.load_pem_public_key(pem)
    except (ValueError, TypeError) as e:
        raise SigningError(f"{where} is not a PEM public key ({str(e).splitlines()[0][:120]})") from None
    if not isinstance(key, Ed25519PublicKey):
        raise SigningError(f"{where} is a {type(key).__name__.removeprefix('_')}, not an Ed25519 public key")
    return key


# ---------------------------------------------------------------------------------------------
# Key files


def read_private_key(path: str | Path) -> Ed25519PrivateKey:
    """The operator's Ed25519 private key from a PEM file (unencrypted PKCS#8, as `das keygen` writes),
    or SigningError naming the file and what is wrong with it."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as e:
        raise SigningError(f"signing key {path}: cannot read it ({e.strerror}); expected an Ed25519 private key "
                           "as `das keygen` writes") from None
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as e:
        raise SigningError(f"signing key {path}: not an unencrypted PEM private key ({str(e).splitlines()[0][:120]}); "
                           "expected one that `das keygen` writes") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise SigningError(f"signing key {path}: a {type(key).__name__.removeprefix('_')}, not an Ed25519 key")
    return key


def read_public_key(path: str | Path) -> bytes:
    """A public key file's PEM bytes, checked to be an Ed25519 public key (SigningError naming the file)."""
    path = Path(path)
    try:
        pem = path.read_bytes()
    except OSError as e:
        raise SigningError(f"public key {path}: cannot read it ({e.strerror})") from None
    _public_key(pem, f"public key {path}")
    return pem


def write_private_key(path: Path, key: Ed25519PrivateKey, *, new: bool = False) -> None:
    """The private key as PEM, readable by its owner only (0600 whatever the umask); `new`: refused
    (SigningError) if the file exists, never replaced."""
    data = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())
    flags = os.O_WRONLY | os.O_CREAT | (os.O_EXCL if new else os.O_TRUNC)
    try:
        fd = os.open(path, flags, 0o600)
    except FileExistsError:
        raise SigningError(f"{path} exists; das never replaces a key: choose another path") from None
    with os.fdopen(fd, "wb") as f:
        os.fchmod(f.fileno(), 0o600)
        f.write(data)


def keygen(path: str | Path) -> tuple[Path, Path, str]:
    """`das keygen KEY`: a new Ed25519 key pair, KEY (private, 0600) and KEY.pub (public), neither
    replacing a file; returns (private, public, the public key's fingerprint)."""
    private, public = Path(path), Path(f"{path}{PUBLIC_SUFFIX}")
    for p in (private, public):
        if p.exists() or p.is_symlink():
            raise SigningError(f"{p} exists; das never replaces a key: choose another path")
    if not private.parent.is_dir():
        raise SigningError(f"{private.parent} is not a directory; create it first")
    key = new_private_key()
    write_private_key(private, key, new=True)
    pem = public_key_pem(key)
    atomic.write_bytes(public, pem)
    return private, public, fingerprint(pem)


# ---------------------------------------------------------------------------------------------
# A release


def signing_key(run_dir: RunDir, given: str | Path | None) -> Path:
    """The key a release is signed with: the operator's (`given`, checked now, before anything is drawn),
    else the release's own in its operator files, made now if it has none (0600)."""
    if given is not None:
        read_private_key(given)
        return Path(given).resolve()
    path = run_dir.signing_key_file
    if path.is_file():
        read_private_key(path)
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_private_key(path, new_private_key())
    return path


def sign_release(run_dir: RunDir, key_path: Path) -> str:
    """Sign the release's manifest.json as it is now: its public key beside it, then the signature, last.
    Returns the public key's fingerprint."""
    key = read_private_key(key_path)
    pem = public_key_pem(key)
    atomic.write_bytes(run_dir.public_key_file, pem)
    atomic.write_bytes(run_dir.signature_file, sign(key, run_dir.manifest_path.read_bytes()), sync=True)
    return fingerprint(pem)


def unsign(run_dir: RunDir) -> None:
    """Remove a release's signature and its public key: the manifest is about to change, and a signature of
    the one it replaces would not verify (a measured NMF continued by `das run --resume`)."""
    for path in run_dir.signature_files():
        path.unlink(missing_ok=True)
