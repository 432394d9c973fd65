"""A real-shaped big state run partitioned on this machine (issue 26), side by side with Vermont through the same
harness, and the national projection recomputed from it (benchmarks/projection.py; method: docs/scale.md).

    python -m benchmarks.big_state [INPUT_DIR]   # one run, JSON on stdout (the input is written if missing)

`scale.big_state`: scripts/make_big_state's default state (14.2 million persons under one state code: a county of
2,400 tracts, one of 1,000, Vermont's 14 counties; six levels with block groups; the 2020 production strategies),
`das run` partitioned, seeded, 2 workers, `--memory-gb 24`. Its reference is Vermont (625,741 persons) written by
the same script and run by the same harness in the same session, so the per-person figures compare. Recorded:
wall, CPU of the driver and of the workers, the driver's and every worker's peak, the tree's peak; per state task
(A read, B measure and solve persons, C units and parts, V validate) its CPU and its peak over the worker's
baseline, per person, against the task's admission estimate (das.driver.admission.TASK_MB_PER_PERSON); per level the
largest batch (its parents, children, seconds) and the L2 certificate; the bytes the run read and wrote (every
process's rchar and wchar, the pollers' own reads left out); whether validation passed; then, in a process of its
own, the largest county's tract problem alone (benchmarks/largest_parent.py: its peak and its certificate).
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path

from benchmarks._harness import Bench, process_tree
from benchmarks.partitioned import STAGES, _status_kb, recording
from benchmarks.scale import (
    POLLER_TIDS,
    _cpu,
    _peak_rss_mb,
    _reset_peak_rss,
    is_poller,
    pollers_cpu,
    pollers_io,
    polling,
    thread_io,
    watching_descendants,
)

ROOT = Path(__file__).resolve().parents[1]
WORKERS = 2
MEMORY_GB = 24.0
SEED = 2020
BIG = ("--big", "2400,1000", "--small", "vt")  # scripts/make_big_state's defaults, stated
VERMONT = ("--big", "", "--small", "vt", "--state", "50")
# A California-size state (issue 40): 38.3M persons, 700k blocks, 9.8k tracts in 22 counties, the largest of 2,440
# tracts; group quarters in 8% of tracts
CALIFORNIA = ("--big", "2440,1500,1300,1200,1000,900,700,600", "--small", "vt", "--gq-share", "0.08", "--state", "06",
              "--seed", "40")


def write_input(out: Path, arguments: tuple[str, ...]) -> dict:
    """scripts/make_big_state into `out` (in another process: the driver starts at its baseline); its summary."""
    if not (out / "summary.json").is_file():
        subprocess.run([sys.executable, str(ROOT / "scripts" / "make_big_state"), str(out), *arguments], check=True,
                       capture_output=True)
    return json.loads((out / "summary.json").read_text())


def _driver_threads(baseline: dict[int, tuple[int, int]]) -> dict[int, tuple[int, int]]:
    """Each of this process's threads but the pollers: (rchar, wchar) since `baseline` (its value then, if it ran)."""
    pollers = {t.native_id for t in threading.enumerate() if is_poller(t)} | POLLER_TIDS
    out = {}
    for task in Path("/proc/self/task").iterdir():
        tid = int(task.name)
        if tid not in pollers:
            r, w = thread_io(str(task / "io"))
            r0, w0 = baseline.get(tid, (0, 0))
            out[tid] = (r - r0, w - w0)
    return out


def _io_of(stop: threading.Event, baseline: dict, threads: dict, tree: dict, every: float = 0.5) -> None:
    """Until `stop`: the driver's threads' bytes (by thread id, `_driver_threads`) and every descendant's
    latest (rchar, wchar) (by pid), every `every` seconds. A thread's or a process's last half-second before it
    ends may be missed."""
    me = os.getpid()
    while True:
        threads.update(_driver_threads(baseline))
        for pid in process_tree(me):
            found = thread_io(f"/proc/{pid}/io")
            if found != (0, 0):
                tree[pid] = found
        if stop.wait(every):
            return


@contextmanager
def counting_io(figures: dict):
    """Bytes read and written while the block runs: the whole tree's (this process's own counters less its pollers',
    which take in every reaped child's: exact once the workers have ended, and any still alive are added) and the
    driver's (its threads', polled: a thread's last half-second may be missed); the workers' are the difference.

    A process's /proc io counts its reaped children's too, so the driver's cannot be read from it: the workers'
    would be counted as the driver's."""
    baseline = _driver_threads({})
    threads: dict = {}
    tree: dict = {}
    own0, pollers0 = thread_io("/proc/self/io"), pollers_io()
    with polling(_io_of, baseline, threads, tree):
        try:
            yield
        finally:
            own1, pollers1 = thread_io("/proc/self/io"), pollers_io()
            threads.update(_driver_threads(baseline))
            alive = process_tree(os.getpid())
    for k, name in enumerate(("read", "written")):
        total = own1[k] - own0[k] - (pollers1[k] - pollers0[k]) + sum(tree[pid][k] for pid in alive if pid in tree)
        driver = sum(v[k] for tid, v in threads.items() if tid not in POLLER_TIDS)
        figures[f"driver_bytes_{name}"] = float(driver)
        figures[f"workers_bytes_{name}"] = float(max(0, total - driver))
        figures[f"bytes_{name}"] = float(total)


def _state_figures(records: list[dict], persons: float) -> dict:
    """Per state task stage: CPU, CPU per person, peak over the worker's baseline (per person), the estimate."""
    from das.driver.admission import TASK_MB_PER_PERSON, WORKER_BASE_MB

    figures = {}
    for stage in STAGES.values():
        tasks = [r for r in records if r["stage"] == stage]
        if not tasks:
            continue
        cpu = sum(r["cpu_seconds"] for r in tasks)
        over = max(r["peak_mb"] - r["base_mb"] for r in tasks)
        width = max(r["width"] for r in tasks)
        estimate = TASK_MB_PER_PERSON * persons + (width - 1) * WORKER_BASE_MB
        figures.update({f"state_{stage}_cpu_s": cpu, f"state_{stage}_cpu_us_per_person": cpu / persons * 1e6,
                        f"state_{stage}_seconds": max(r["seconds"] for r in tasks),
                        f"state_{stage}_over_base_mb": over, f"state_{stage}_kb_per_person": over * 1024 / persons,
                        f"state_{stage}_estimate_mb": estimate, f"state_{stage}_within_estimate": float(over <= estimate),
                        f"state_{stage}_width": float(width)})
    return figures


def _level_figures(process: dict, manifest) -> dict:
    """Per (release, level): the largest batch (children, seconds, CPU), the batches' CPU, the L2 certificate."""
    figures = {}
    for release, levels in process["levels"].items():
        certificates = {r.level: r.l2_certificate for r in (manifest.levels_report or {}).get(release, [])}
        for r in levels:
            key, tasks, l2 = f"{release}_{r['level']}", r.get("tasks", {}), certificates.get(r["level"], {})
            figures.update({f"{key}_largest_task_s": float(tasks.get("largest_seconds", r.get("seconds", 0.0))),
                            f"{key}_largest_children": float(tasks.get("largest_children", 0)),
                            f"{key}_cpu_s": float(tasks.get("cpu_seconds", 0.0)),
                            f"{key}_batches": float(tasks.get("run", 0)),
                            f"{key}_max_rel_gap": float(l2.get("max_rel_gap", 0.0)),
                            f"{key}_retried": float(l2.get("retried", 0)), f"{key}_uncertified": float(l2.get("uncertified", 0))})
    return figures


def run_state(input_dir: Path, arguments: tuple[str, ...], *, workers: int = WORKERS, memory_gb: float = MEMORY_GB) -> dict:
    """One seeded partitioned `das run` of a make_big_state input: the figures the module lists."""
    from das.driver.run import run
    from das.frame.bundle import read_process

    summary = write_input(input_dir, arguments)
    persons = float(summary["persons"])
    with tempfile.TemporaryDirectory(dir=input_dir.parent) as tmp:
        _reset_peak_rss()
        base = _status_kb("VmRSS") / 1024
        pollers0 = pollers_cpu()
        self0, children0 = _cpu(resource.RUSAGE_SELF) - pollers0, _cpu(resource.RUSAGE_CHILDREN)
        records, driver, seen, io = [], {}, {}, {}
        load = os.getloadavg()[0]
        t0 = time.perf_counter()
        with watching_descendants(seen), counting_io(io), recording(records, driver):
            result = run(input_dir / "spec.toml", Path(tmp) / "out", seed=SEED, workers=workers, progress=False,
                         memory_gb=memory_gb)
        seconds = time.perf_counter() - t0
        process = read_process(Path(tmp) / "out")
        out_bytes = sum(p.stat().st_size for p in (Path(tmp) / "out").rglob("*") if p.is_file())
    driver_cpu = _cpu(resource.RUSAGE_SELF) - pollers_cpu() - self0
    worker_cpu = _cpu(resource.RUSAGE_CHILDREN) - children0
    tree = seen.pop("workers_tree_mb", float("nan"))
    figures = {"persons": persons, "blocks": float(summary["blocks_with_units"]), "tracts": float(summary["tracts"]),
               "largest_county_tracts": float(summary["largest_counties_tracts"][0]), "valid": float(result.valid),
               "load_at_start": load, "seconds": seconds, "driver_cpu_s": driver_cpu, "worker_cpu_s": worker_cpu,
               # das's CPU: the driver's (less this harness's pollers, which read /proc several times a second for
               # the figures here) and its workers'; scripts/bench's own tree figure would count the pollers too
               "cpu_seconds": driver_cpu + worker_cpu, "pollers_cpu_s": pollers_cpu() - pollers0,
               "cpu_us_per_person": (driver_cpu + worker_cpu) / persons * 1e6,
               "driver_peak_mb": max(_peak_rss_mb(), driver.pop("overall_peak_mb", 0.0)), "driver_base_mb": base,
               "worker_peak_mb": max(seen.values(), default=float("nan")), "workers_tree_peak_mb": tree,
               "release_bytes": float(out_bytes), **io, **{k: float(v) for k, v in driver.items()},
               **_state_figures(records, persons), **_level_figures(process, result.manifest)}
    for key, value in process["timings_seconds"].items():
        figures[f"timing_{key}_s"] = float(value)
    return figures


def _input_dir(name: str) -> Path:
    return Path(os.environ.get("DAS_BIG_STATE_DIR", Path(tempfile.gettempdir()) / "das_big_state")) / name


def run_big() -> dict:
    from benchmarks.projection import project_from

    figures = run_state(_input_dir("big"), BIG)
    figures.update(largest_parent(_input_dir("big"), int(figures["largest_county_tracts"])))
    figures.update(project_from(figures))
    return figures


def largest_parent(input_dir: Path, children: int) -> dict:
    """The largest county's tract problem alone (benchmarks/largest_parent.py), in a process of its own after the
    run: its peak over the process's baseline, its solve's CPU and its certificate, prefixed `largest_parent_`."""
    done = subprocess.run([sys.executable, "-m", "benchmarks.largest_parent", str(input_dir), str(children)],
                          check=True, capture_output=True, text=True, cwd=ROOT)
    f = json.loads(done.stdout)
    return {"largest_parent_children": float(f["children"]), "largest_parent_peak_mb": f["l2_peak_over_base_mb"],
            "largest_parent_cpu_s": f["solve_parent_cpu_seconds"], "largest_parent_l2_s": f["l2_seconds"],
            "largest_parent_gap_ratio": f["dual_at_answers_ratio"]}


def run_vermont() -> dict:
    return run_state(_input_dir("vermont"), VERMONT)


def _projected(figures: dict) -> dict:
    """A run's figures with validation's share of the wall, the largest process, the largest relative gap and the
    uncertified optima of every level, and the national projection from them (the largest parent's peak bounded by
    the largest worker's, where it was not measured alone)."""
    from benchmarks.projection import project_from

    figures["validate_share"] = figures["timing_validate_s"] / figures["seconds"]
    figures["largest_process_mb"] = max(figures["worker_peak_mb"], figures["driver_peak_mb"])
    figures["max_rel_gap"] = max(v for k, v in figures.items() if k.endswith("_max_rel_gap"))
    figures["uncertified"] = sum(v for k, v in figures.items() if k.endswith("_uncertified"))
    figures.setdefault("largest_parent_peak_mb", figures["worker_peak_mb"])
    figures.setdefault("largest_parent_children", figures["persons_tract_largest_children"])
    figures.update(project_from(figures))
    return figures


def run_largest() -> dict:
    """The California-size state end to end, and the national projection from it with this machine's disk rate."""
    from benchmarks.projection import disk_rate

    figures = run_state(_input_dir("ca"), CALIFORNIA)
    figures["disk_gb_s"] = disk_rate(_input_dir("ca").parent)
    return _projected(figures)


BEFORE = "0584ee9"  # main before issue 40


def cli_run(pythonpath: Path, input_dir: Path, arguments: tuple[str, ...]) -> dict:
    """`das run` of a make_big_state input as a user starts it (a new process, the das on `pythonpath`, seeded,
    2 workers, --memory-gb 24): wall, CPU of the process tree and the largest process's peak, and validity."""
    write_input(input_dir, arguments)
    with tempfile.TemporaryDirectory(dir=input_dir.parent) as tmp:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0, peaks = time.perf_counter(), {}
        with watching_descendants(peaks):
            done = subprocess.run([sys.executable, "-c", "import sys; from das.cli import main; sys.exit(main())",
                                   "run", str(input_dir / "spec.toml"), "--seed", str(SEED), "--workers", str(WORKERS),
                                   "--memory-gb", str(MEMORY_GB), "--out", str(Path(tmp) / "out"), "--no-progress"],
                                  cwd=pythonpath, env={**os.environ, "PYTHONPATH": str(pythonpath)},
                                  capture_output=True, text=True)
        seconds = time.perf_counter() - t0
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise RuntimeError(f"das run {input_dir} exited {done.returncode}: {done.stderr.strip()[-300:]}")
    return {"seconds": seconds, "cpu_seconds": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime),
            "system_cpu_s": after.ru_stime - before.ru_stime, "tree_peak_mb": peaks.pop("workers_tree_mb", 0.0),
            "largest_process_mb": max(peaks.values(), default=float("nan")),
            "valid": float("validation: PASSED" in done.stdout)}


def big_now() -> dict:
    return cli_run(ROOT, _input_dir("big"), BIG)


def big_before() -> dict:
    from benchmarks._harness import code_at

    with code_at(BEFORE) as tree:
        return cli_run(tree, _input_dir("big"), BIG)


_TARGET = ("completes, validates, no state task over its admission estimate; national projection from it <= 1.0 h on "
           "one 64-core 64 GB machine and on 8 Dask workers x 16 cores x 32 GB")
BENCHES = [Bench("scale.big_state", "real-shaped big state (14.2M persons, a county of 2,400 tracts, six levels with "
                 "block groups, production strategies) run partitioned, seeded, 2 workers, --memory-gb 24; Vermont "
                 "through the same script and harness alongside; the national projection from it",
                 run_big, key="seconds", repeats=1, references={"Vermont (same harness)": run_vermont},
                 target=_TARGET),
           Bench("scale.largest_state", "a California-size real-shaped state (38.3M persons, 700k blocks, 9.8k tracts, a "
                 "county of 2,440 tracts and 10.5M persons, GQ in 8% of tracts; six levels, production strategies) run "
                 "end to end, seeded, 2 workers, --memory-gb 24, persons and units, every output, validation; the big "
                 "state (14.2M) as a user runs it, this code and main before issue 40, alongside; the national projection",
                 run_largest, key="seconds", repeats=1,
                 references={"big state 14.2M, das run in a new process": big_now,
                             f"big state 14.2M, main at {BEFORE} (before issue 40), the same": big_before},
                 target="<= 720 s wall, <= 1,300 CPU-s, largest process <= 6 GB, validation <= 10% of the wall, valid, "
                        "0 uncertified, largest relative gap <= 1e-6; projection <= 15 min on one 64-core 256 GB "
                        "machine and <= 10 min on 8 Dask workers x 16 cores x 64 GB")]


if __name__ == "__main__":  # python -m benchmarks.big_state [INPUT_DIR [vermont]]
    where = Path(sys.argv[1]) if len(sys.argv) > 1 else _input_dir("big")
    vermont = len(sys.argv) > 2 and sys.argv[2] == "vermont"
    print(json.dumps(run_state(where, VERMONT if vermont else BIG), indent=1, sort_keys=True))
