"""Issue 38's one path (a whole run is one partition of the driver of every run; every release file made by
write_part + assemble): what it costs a small whole run and the big partitioned state, beside main just before
it, each as a user starts it (a new process, seeded, 2 workers): wall and CPU seconds of the process tree."""

from __future__ import annotations

from pathlib import Path

from benchmarks._harness import Bench, code_at
from benchmarks.big_state import BIG, _input_dir, cli_run
from benchmarks.demo import _demo

ROOT = Path(__file__).resolve().parents[1]
BEFORE = "9a625c8"  # main before issue 38's one path (stop 53)


def _vt(pythonpath: Path) -> dict:
    """`das run vt_demo --seed 1` in a new process (the spec's 2 workers): wall and CPU of the whole tree."""
    return _demo(pythonpath, pythonpath, extra=("--seed", "1", "--no-progress"))


def vt_now() -> dict:
    return _vt(ROOT)


def vt_before() -> dict:
    with code_at(BEFORE) as tree:
        return _vt(tree)


def big_now() -> dict:
    return cli_run(ROOT, _input_dir("big"), BIG)


def big_before() -> dict:
    with code_at(BEFORE) as tree:
        return cli_run(tree, _input_dir("big"), BIG)


BENCHES = [
    Bench("one_path.vt_demo", "das run vt_demo (Vermont whole, 626k persons, 18.7k blocks), seeded, 2 workers, in a new "
          "process: CPU seconds of the process tree, this code beside main before issue 38's one path",
          vt_now, key="cpu_seconds", repeats=3, references={f"main at {BEFORE}, before the one path": vt_before},
          target="CPU within 5% of main before the one path (issue 38)", default=False),
    Bench("one_path.big_state", "das run of the real-shaped big state (14.2M persons, partitioned), seeded, 2 workers, "
          "--memory-gb 24, in a new process: CPU seconds of the process tree, this code beside main before issue 38's "
          "one path", big_now, key="cpu_seconds", repeats=1,
          references={f"main at {BEFORE}, before the one path": big_before},
          target="CPU within 10% of main before the one path (issue 38)", default=False),
]
