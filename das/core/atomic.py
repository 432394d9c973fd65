"""Files that appear whole or not at all: write under `<name>.partial`, rename when complete.

A reader (a resumed run, the validator, `--overwrite`) can then trust that a present file is
complete; a torn write leaves only a `.partial`, which nothing reads.

>>> import tempfile; folder = Path(tempfile.mkdtemp())
>>> write_text(folder / "a.json", "{}"); (folder / "a.json").read_text(), sorted(p.name for p in folder.iterdir())
('{}', ['a.json'])
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

SUFFIX = ".partial"
OWNER_ONLY_FILE, OWNER_ONLY_DIR = 0o600, 0o700  # what only its owner may read: operator files, confidential outputs


def partial(path: Path) -> Path:
    """The temporary name of `path` while it is being written."""
    return path.with_name(path.name + SUFFIX)


@contextmanager
def replacing(path: str | Path, *, directory: bool = False, sync: bool = False) -> Iterator[Path]:
    """Yield the temporary path to write; on success it replaces `path` (a file, or with
    directory=True a whole directory, so its files appear at once); on failure it is removed."""
    path = Path(path)
    tmp = partial(path)
    _remove(tmp)
    if directory:
        tmp.mkdir(parents=True)
    try:
        yield tmp
        if sync and not directory:
            with open(tmp, "rb") as f:
                os.fsync(f.fileno())
        if directory:
            _remove(path)
        tmp.replace(path)
    except BaseException:
        _remove(tmp)
        raise


def write_text(path: str | Path, text: str) -> None:
    """`path` holds `text`, written atomically."""
    with replacing(path) as tmp:
        tmp.write_text(text)


def write_bytes(path: str | Path, data: bytes, *, sync: bool = False) -> None:
    """`path` holds `data`, written atomically (and synced to disk before the rename with sync=True)."""
    with replacing(path, sync=sync) as tmp:
        tmp.write_bytes(data)


def owner_only_directory(folder: str | Path) -> Path:
    """`folder`, created if need be, open to its owner only (0700) whatever the umask."""
    folder = Path(folder)
    folder.mkdir(mode=OWNER_ONLY_DIR, parents=True, exist_ok=True)
    os.chmod(folder, OWNER_ONLY_DIR)  # mkdir's mode is masked by the umask, and an older directory may be wider
    return folder


def write_owner_only(path: str | Path, data: bytes) -> None:
    """`path` holds `data`, written atomically, readable and writable by its owner only (0600) whatever the umask."""
    with replacing(path) as tmp:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, OWNER_ONLY_FILE)
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), OWNER_ONLY_FILE)
            f.write(data)


def owner_only_tree(folder: str | Path) -> None:
    """`folder` and everything under it open to its owner only: directories 0700, files 0600 (symbolic links are
    left alone: their modes mean nothing, and what they point to is not the folder's)."""
    folder = Path(folder)
    os.chmod(folder, OWNER_ONLY_DIR)
    for root, dirs, files in os.walk(folder):
        for name in dirs:
            if not os.path.islink(os.path.join(root, name)):
                os.chmod(os.path.join(root, name), OWNER_ONLY_DIR)
        for name in files:
            if not os.path.islink(os.path.join(root, name)):
                os.chmod(os.path.join(root, name), OWNER_ONLY_FILE)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)
