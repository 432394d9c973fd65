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


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)
