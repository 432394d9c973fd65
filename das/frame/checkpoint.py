"""Checkpoints of a run: solved levels and batches of parents, written atomically.

Layout under a run directory (removed when the run completes):
    checkpoints/<release>/<level>.npz                  a whole solved level (CSR + failsafe events)
    checkpoints/<release>/<level>.parts/b<batch>.npz   solved batches of parents of an unfinished level
Every file is written to `<name>.partial` and renamed, so a present file is complete. Solved
histograms are post-processed output (the same content as the MDF), not confidential input.
Beside them go plain JSON records (the failsafe events, metadata): what they mean is the engine's.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import signal
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from das.core import atomic

CRASH_ENV = "DAS_TEST_CRASH_AT"        # test hook: "<point>" or "<point>#<n>" (die at the n-th hit)
CRASH_COUNTS: dict[str, int] = {}


def crash_point(name: str) -> None:
    """Test hook: SIGKILL this process at the named point when DAS_TEST_CRASH_AT names it.

    Points: `measure:<release>:<level>` (after each committed measurement chunk),
    `solve:<release>:<level>` (after each committed batch of parents), `level:<release>:<level>`
    (after a level's checkpoint), `outputs` (after the MDF, before the tables and the manifest).
    """
    wanted = os.environ.get(CRASH_ENV)
    if not wanted:
        return
    point, _, nth = wanted.partition("#")
    if point != name:
        return
    CRASH_COUNTS[name] = CRASH_COUNTS.get(name, 0) + 1
    if CRASH_COUNTS[name] >= int(nth or 1):
        os.kill(os.getpid(), signal.SIGKILL)


def is_disk_full(error: BaseException) -> bool:
    return isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT)


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def save_arrays(path: Path, **arrays) -> None:
    """Named arrays as one .npz file, atomically and synced (a checkpoint, a state's facts)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic.replacing(path, sync=True) as tmp, open(tmp, "wb") as f:
        np.savez(f, **arrays)


def save_solved(path: Path, solved: sp.csr_matrix, events: list[dict], meta: dict | None = None) -> None:
    """Solved histograms (CSR) with their failsafe events (plain records) and metadata, atomically."""
    solved = solved.tocsr()
    text = json.dumps({"events": [dict(e) for e in events], "meta": meta or {}})
    save_arrays(path, data=solved.data, indices=solved.indices, indptr=solved.indptr,
                shape=np.asarray(solved.shape, np.int64), info=np.frombuffer(text.encode(), np.uint8))


def load_solved(path: Path) -> tuple[sp.csr_matrix, list[dict], dict]:
    """What `save_solved` wrote: (solved histograms, failsafe event records, metadata)."""
    with np.load(path) as z:
        solved = sp.csr_matrix((z["data"], z["indices"], z["indptr"]), shape=tuple(int(s) for s in z["shape"]))
        info = json.loads(bytes(z["info"]).decode())
    return solved, info["events"], info["meta"]


class Checkpoints:
    """Solved levels and batches of one release under `root/<release>/`."""

    def __init__(self, root: Path, release: str):
        self.dir = Path(root) / release

    def level_path(self, level: str) -> Path:
        return self.dir / f"{level}.npz"

    def parts_dir(self, level: str) -> Path:
        return self.dir / f"{level}.parts"

    def batch_path(self, level: str, batch: int) -> Path:
        return self.parts_dir(level) / f"b{batch:07d}.npz"

    def last_complete(self, levels: tuple[str, ...]) -> int:
        """Index of the deepest level with a complete checkpoint whose ancestors are all complete, or -1."""
        last = -1
        for i, level in enumerate(levels):
            if not self.level_path(level).exists():
                break
            last = i
        return last

    def save_level(self, level: str, solved: sp.csr_matrix, events: list[dict], meta: dict) -> None:
        save_solved(self.level_path(level), solved, events, meta)
        shutil.rmtree(self.parts_dir(level), ignore_errors=True)

    def load_batches(self, level: str, n_batches: int, batch_key: str) -> dict[int, tuple]:
        """Complete batches of an unfinished level made with the same batching (batch_key), as (solved, event
        records, L2 certificate); others are ignored."""
        found = {}
        parts = self.parts_dir(level)
        if not parts.is_dir():
            return found
        for path in sorted(parts.glob("b*.npz")):
            solved, events, meta = load_solved(path)
            if meta.get("batch_key") == batch_key and 0 <= meta.get("batch", -1) < n_batches:
                found[meta["batch"]] = (solved, events, meta.get("l2", {}))
        for stale in parts.glob("*.partial"):  # a torn write: never renamed, never read
            stale.unlink(missing_ok=True)
        return found
