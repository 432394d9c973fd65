"""Whole states nobody tuned on, certified (issue 41): `das run` of real-shaped states, seeds 1-3 each, counting the
least-squares optima left uncertified and the largest relative duality gap, beside the same runs of main before
issue 41 (0e8080b), side by side in one session.

States (`DAS_CERTIFIED_STATES`, comma-separated, default `big,hi`):
- `big`: scripts/make_big_state's default state (14.2M persons, a county of 2,400 tracts; partitioned input, its
  own spec: six levels, the 2020 production strategies), the one scale.big_state and stress.largest use;
- `big-gq`: a held-out variant, `--big 2440,488 --small '' --gq-share 0.35 --seed 41` (2,440 tracts in its largest
  county, group quarters in 35% of tracts as in the shipped fixtures, another draw of the source tracts);
- `hi`: Hawaii (scripts/make_fixtures --only hi: 1.36M persons; Honolulu's tract problem of 200+ tracts and tracts
  of 500+ populated blocks) under the vt_demo spec (six levels, pl94_six_level, the two-pass root).

The reference runs the seeds of `DAS_CERTIFIED_REFERENCE_SEEDS` (default 1,2,3; one big-state run is 10-20 minutes
on 2 shared cores): `cpu_seconds`, the figure compared, sums the runs of those seeds on either side, and
`cpu_seconds_all` every run of this side.

Figures per state and seed (`{state}_s{seed}_...`): uncertified optima, the largest relative gap, retried passes,
failsafe events, validation, CPU seconds of the run's process tree, wall seconds; totals over them all. A run that
exits non-zero is counted in `crashes` with the last line it printed (main before issue 41 could crash at a root).
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks._harness import Bench, code_at
from benchmarks.stress import BIG_STATES, WORK, big_state, hawaii, manifest_figures

ROOT = Path(__file__).resolve().parents[1]
BEFORE = "0e8080b"  # main when issue 41 was filed: the demo crashed at its root in 3 runs of 10
SEEDS = (1, 2, 3)
BIG_GQ = ("--big", "2440,488", "--small", "", "--gq-share", "0.35", "--seed", "41")


def _seeds(variable: str) -> tuple[int, ...]:
    given = os.environ.get(variable, "")
    return tuple(int(s) for s in given.split(",") if s.strip()) if given else SEEDS


def _states() -> list[str]:
    return [s for s in os.environ.get("DAS_CERTIFIED_STATES", "big,hi").split(",") if s]


def spec_of(state: str) -> Path:
    """The run spec of a state (written once: the big states' own, Hawaii's a copy of vt_demo's over its fixture)."""
    if state == "big":
        return big_state("big") / "spec.toml"
    if state == "big-gq":
        from benchmarks.big_state import write_input

        out = BIG_STATES / "big-gq"
        write_input(out, BIG_GQ)
        return out / "spec.toml"
    if state == "hi":
        fixture = hawaii()
        text = (ROOT / "specs" / "runs" / "vt_demo.toml").read_text()
        text = text.replace("../../geography_fixtures/vt/", f"{fixture}/").replace('name = "vt_demo"', 'name = "hi"')
        path = WORK / "hi.toml"
        path.write_text(text)
        return path
    raise ValueError(f"DAS_CERTIFIED_STATES: unknown state {state!r} (big, big-gq, hi)")


def _run(spec: Path, seed: int, pythonpath: Path) -> dict:
    """`das run SPEC --seed N --workers 2` in a new process with das from `pythonpath`: its outcome and cost."""
    with tempfile.TemporaryDirectory(dir=WORK) as tmp:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, "-c", "import sys; from das.cli import main; sys.exit(main())", "run",
                               str(spec), "--seed", str(seed), "--workers", "2", "--out", str(Path(tmp) / "run"),
                               "--no-progress"], cwd=pythonpath, env={**os.environ, "PYTHONPATH": str(pythonpath)},
                              capture_output=True, text=True)
        wall = time.perf_counter() - t0
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        figures = manifest_figures(Path(tmp) / "run" / "manifest.json")
    figures.update(rc=proc.returncode, wall_s=wall,
                   cpu_s=(after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime))
    if proc.returncode != 0:
        lines = (proc.stderr or proc.stdout).strip().splitlines()
        figures["error"] = lines[-1][:200] if lines else ""
        print(f"[certified] {spec} seed {seed}: exit {proc.returncode}: {figures['error']}", file=sys.stderr)
    return figures


def _states_figures(pythonpath: Path, seeds: tuple[int, ...]) -> dict:
    """Every state at each of `seeds`; `cpu_seconds` sums the seeds the reference also runs."""
    common = _seeds("DAS_CERTIFIED_REFERENCE_SEEDS")
    out: dict[str, float] = {"crashes": 0.0, "uncertified": 0.0, "max_rel_gap": 0.0, "validation_failures": 0.0,
                             "failsafe": 0.0, "retried": 0.0, "cpu_seconds": 0.0, "cpu_seconds_all": 0.0}
    WORK.mkdir(parents=True, exist_ok=True)
    for state in _states():
        spec = spec_of(state)
        for seed in seeds:
            r = _run(spec, seed, pythonpath)
            key = f"{state}_s{seed}"
            crashed = r["rc"] != 0
            out[f"{key}_rc"] = float(r["rc"])
            out[f"{key}_cpu_s"], out[f"{key}_wall_s"] = r["cpu_s"], r["wall_s"]
            out["cpu_seconds_all"] += r["cpu_s"]
            out["cpu_seconds"] += r["cpu_s"] if seed in common else 0.0
            out["crashes"] += crashed
            if not crashed:
                for name in ("uncertified", "retried", "failsafe"):
                    out[f"{key}_{name}"] = float(r.get(name, 0))
                    out[name] += r.get(name, 0)
                out[f"{key}_max_rel_gap"] = r.get("max_rel_gap", 0.0)
                out["max_rel_gap"] = max(out["max_rel_gap"], r.get("max_rel_gap", 0.0))
                out["validation_failures"] += not r.get("valid", False)
            print(f"[certified] {state} seed {seed}: rc {r['rc']}, uncertified {r.get('uncertified')}, largest gap "
                  f"{r.get('max_rel_gap')}, {r['cpu_s']:.0f} CPU s, {r['wall_s']:.0f} s", file=sys.stderr, flush=True)
    return out


def certified_states() -> dict:
    return _states_figures(ROOT, SEEDS)


def certified_states_before() -> dict:
    with code_at(BEFORE) as tree:
        return _states_figures(tree, _seeds("DAS_CERTIFIED_REFERENCE_SEEDS"))


BENCHES = [
    Bench("certified.states", "das run of real-shaped states nobody tuned on (DAS_CERTIFIED_STATES, default: "
          "make_big_state's 14.2M-person state with its 2,400-tract county, and Hawaii under the vt_demo spec), seeds "
          "1-3 each, 2 workers: uncertified least-squares optima, largest relative duality gap, CPU seconds of the "
          "whole process tree", certified_states, key="cpu_seconds", repeats=1, default=False,
          references={f"main at {BEFORE}, before issue 41": certified_states_before},
          target="0 uncertified, largest relative gap <= 1e-6, CPU within 10% of main before issue 41 (issue 41)"),
]
