"""The demo's job (`scripts/demo`: `das run vt_demo`, Vermont end to end, validated) as a fresh
process, wall seconds as a user sees them (start-up and imports included), beside the same command
of main just before issue 14."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks._harness import Bench, code_at

ROOT = Path(__file__).resolve().parents[1]
BEFORE = "5c5631d"  # main just before issue 14, whose demo took 39 s on a quiet machine
BEFORE_40 = "0584ee9"  # main before issue 40 (memory and validation of the largest state): no slower, within 5%


def _demo(pythonpath: Path, cwd: Path, *, extra: tuple[str, ...] = ()) -> dict:
    """`das run vt_demo --out TMP` as scripts/demo runs it (OS randomness, the spec's workers), in a new process;
    `extra` more arguments (a seed)."""
    with tempfile.TemporaryDirectory() as tmp:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, "-c", "import sys; from das.cli import main; sys.exit(main())",
                               "run", "vt_demo", "--out", str(Path(tmp) / "vt"), *extra],
                              cwd=cwd, env={**os.environ, "PYTHONPATH": str(pythonpath)}, capture_output=True,
                              text=True)
        seconds = time.perf_counter() - t0
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if proc.returncode != 0:
            raise RuntimeError(f"das run vt_demo exited {proc.returncode}: {proc.stderr.strip()[-300:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"seconds": seconds, "cpu_seconds": cpu}


def demo_vt() -> dict:
    return _demo(ROOT, ROOT)


def demo_vt_before() -> dict:
    with code_at(BEFORE) as tree:
        return _demo(tree, tree)


def demo_vt_before_40() -> dict:
    with code_at(BEFORE_40) as tree:
        return _demo(tree, tree)


BENCHES = [
    Bench("demo.vt", "scripts/demo's job: das run vt_demo (Vermont, 626k persons, 18.7k blocks, six levels, "
          "validated) in a new process, 2 workers, OS randomness: wall seconds as the user waits",
          demo_vt, key="seconds", repeats=3, references={f"main at {BEFORE}, before issue 14": demo_vt_before,
                                                   f"main at {BEFORE_40}, before issue 40": demo_vt_before_40},
          target="at most half of the wall time before issue 14 (39 s then) on a quiet machine"),
]
