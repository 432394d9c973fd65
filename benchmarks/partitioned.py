"""Scale, partitioned: `das run` on 1, 2, 4 and 8 state copies given as one file per state, and a national
projection from the per-state tasks (method: docs/scale.md, "The partitioned driver").

Each `scale.partitioned_N` runs in its own process (scripts/bench): the driver's peak RSS (VmHWM, reset after
the input is written) and every worker's, wall and CPU, and each state task the workers run (A: read and
check; B: measure below the state, solve persons; C: solve units, write the state's parts), timed on the
worker with its own peak. The driver's own stages (the top's measurement and solves, the assembly of the
release, validation) are timed in the driver.
"""

from __future__ import annotations

import json
import resource
import tempfile
import time
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks._harness import Bench
from benchmarks.scale import _cpu, _peak_rss_mb, _quiet, _reset_peak_rss, pollers_cpu, watching_descendants

WORKERS = 2
SEED = 2020
STAGES = {"read_state": "A", "solve_state": "B", "finish_state": "C"}


@dataclass(frozen=True)
class Nation:
    """A national run as assumed (docs/scale.md): 2020 sizes, the largest state's share, the machine of the target."""

    blocks: float = 8.1e6
    persons: float = 331e6
    states: int = 51
    # the largest state's share of the nation's work: California has 11.9% of the 2020 persons, Texas about
    # 8% of the blocks; a state task's cost follows blocks and persons, so the larger share stands for both
    largest_share: float = 0.12
    cores: int = 64
    memory_gb: float = 64.0  # per machine
    machines: tuple = field(default=(1, 2, 4))  # ways to spread the 64 cores


def _status_kb(name: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(name + ":"):
            return float(line.split()[1])
    return float("nan")


def _timed_state(job: tuple[str, object]):
    """One state task on a worker, with its wall and CPU seconds and the worker's peak over the task (VmHWM reset)."""
    import das.partitioned

    name, arg = job
    _reset_peak_rss()
    base = _status_kb("VmRSS") / 1024
    t0, c0 = time.perf_counter(), time.process_time()
    result = getattr(das.partitioned, f"_original_{name}", getattr(das.partitioned, name))(arg)
    state = arg[1].state if hasattr(arg[1], "state") else arg[1]
    return result, {"stage": STAGES[name], "state": state, "seconds": time.perf_counter() - t0,
                    "cpu_seconds": time.process_time() - c0, "base_mb": base, "peak_mb": _peak_rss_mb()}


@contextmanager
def recording(records: list[dict], driver: dict):
    """Every state task through `_timed_state` (records appended), the driver's stages timed into `driver`."""
    import das.io.parts
    import das.partitioned
    import das.run

    module = das.partitioned
    saved = {name: getattr(module, name) for name in STAGES}
    saved_map = module.ordered_map

    def timed_map(executor, fn, items, in_flight=None):
        name = fn.__name__.removeprefix("_original_")
        if name not in STAGES:
            yield from saved_map(executor, fn, items, in_flight)
            return
        for result, record in saved_map(executor, _timed_state, ((name, item) for item in items), in_flight):
            records.append(record)
            yield result

    def timed(owner, attr: str, key: str) -> Callable:
        original = getattr(owner, attr)

        def wrapper(*args, **kwargs):
            before = f"before_{key}_peak_mb"  # the driver's peak since the previous stage
            driver[before] = max(driver.get(before, 0.0), _peak_rss_mb())
            _reset_peak_rss()
            t0, c0 = time.perf_counter(), time.process_time() - pollers_cpu()
            try:
                return original(*args, **kwargs)
            finally:
                driver[f"{key}_s"] = driver.get(f"{key}_s", 0.0) + time.perf_counter() - t0
                driver[f"{key}_cpu_s"] = driver.get(f"{key}_cpu_s", 0.0) + time.process_time() - pollers_cpu() - c0
                driver[f"{key}_peak_mb"] = max(driver.get(f"{key}_peak_mb", 0.0), _peak_rss_mb())
                driver["overall_peak_mb"] = max(driver.get("overall_peak_mb", 0.0), driver[f"{key}_peak_mb"],
                                                driver[before])
                _reset_peak_rss()
        setattr(owner, attr, wrapper)
        return original

    for name, fn in saved.items():
        setattr(module, f"_original_{name}", fn)
    module.ordered_map = timed_map
    patched = [(das.run, "read_states", timed(das.run, "read_states", "read")),
               (das.run, "run_states", timed(das.run, "run_states", "states")),
               (module, "measure_top", timed(module, "measure_top", "top_measure")),
               (module, "solve_top", timed(module, "solve_top", "top_solve")),
               (das.io.parts, "assemble", timed(das.io.parts, "assemble", "assemble")),
               (das.run, "validate_run", timed(das.run, "validate_run", "validate"))]
    try:
        yield
    finally:
        module.ordered_map = saved_map
        for name in saved:
            delattr(module, f"_original_{name}")
        for owner, attr, original in patched:
            setattr(owner, attr, original)


def run_partitioned(states: int, workers: int = WORKERS) -> dict:
    """One seeded partitioned `das run` of `states` copies: driver and worker peaks, CPU, the state tasks."""
    from das.run import run
    from das.synth import write_synthetic

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        counts = write_synthetic(tmp / "input", states, partitioned=True)
        _reset_peak_rss()
        base = _status_kb("VmRSS") / 1024
        self0, children0 = _cpu(resource.RUSAGE_SELF) - pollers_cpu(), _cpu(resource.RUSAGE_CHILDREN)
        records: list[dict] = []
        driver: dict = {}
        seen: dict = {}
        t0 = time.perf_counter()
        with watching_descendants(seen), recording(records, driver):
            result = run(tmp / "input" / "spec.toml", tmp / "out", seed=SEED, workers=workers, progress=False,
                         log=_quiet)
        seconds = time.perf_counter() - t0
        driver_peak = max(_peak_rss_mb(), driver.pop("overall_peak_mb", 0.0))
        driver_cpu = _cpu(resource.RUSAGE_SELF) - pollers_cpu() - self0
        worker_cpu = _cpu(resource.RUSAGE_CHILDREN) - children0
        tree = seen.pop("workers_tree_mb", float("nan"))
        manifest = json.loads((tmp / "out" / "manifest.json").read_text())
    blocks, persons = float(counts["blocks"]), float(counts["persons"])
    figures = {"states": float(states), "blocks": blocks, "persons": persons, "valid": float(result.valid),
               "seconds": seconds, "s_per_1000_blocks": seconds / blocks * 1000,
               "driver_cpu_s": driver_cpu, "worker_cpu_s": worker_cpu,
               "cpu_ms_per_block": (driver_cpu + worker_cpu) / blocks * 1000,
               "driver_base_mb": base, "driver_peak_mb": driver_peak, "driver_growth_mb": driver_peak - base,
               "worker_peak_mb": max(seen.values(), default=float("nan")), "workers_tree_peak_mb": tree,
               **driver}
    for stage in sorted(set(STAGES.values())):
        tasks = [r for r in records if r["stage"] == stage]
        figures[f"state_{stage}_tasks"] = float(len(tasks))
        figures[f"state_{stage}_cpu_s"] = sum(r["cpu_seconds"] for r in tasks)
        figures[f"state_{stage}_largest_s"] = max((r["seconds"] for r in tasks), default=0.0)
        figures[f"state_{stage}_peak_mb"] = max((r["peak_mb"] for r in tasks), default=0.0)
        figures[f"state_{stage}_over_base_mb"] = max((r["peak_mb"] - r["base_mb"] for r in tasks), default=0.0)
    for key, value in manifest["timings_seconds"].items():
        figures[f"timing_{key}_s"] = value
    figures.update(project(figures, Nation()))
    return figures


def project(f: dict, nation: Nation) -> dict:
    """A national partitioned run from one run's figures (docs/scale.md, "The partitioned driver").

    Time: the critical path is the largest state's three tasks one after another (A, then B, then C:
    each is one task on one core) plus the driver's serial work (the top: its measurement and solves,
    which grow with the number of states; the assembly and the digests, which grow with blocks;
    validation's top part), or the whole state work over the cores if that is longer. Memory: the
    driver as measured (it holds the nation and the states), a worker's peak over its baseline scaled
    by its state's blocks, and a machine's sum when every worker holds a state at once.

    >>> f = {"blocks": 1e5, "states": 4.0, "state_A_cpu_s": 10.0, "state_B_cpu_s": 60.0, "state_C_cpu_s": 30.0,
    ...      "top_measure_cpu_s": 1.0, "top_solve_cpu_s": 2.0, "assemble_cpu_s": 5.0, "validate_s": 8.0,
    ...      "driver_peak_mb": 500.0, "worker_peak_mb": 900.0, "state_B_over_base_mb": 400.0,
    ...      "state_C_over_base_mb": 300.0, "state_A_over_base_mb": 100.0}
    >>> p = project(f, Nation(blocks=1e6, states=8, largest_share=0.25, cores=8))
    >>> round(p["national_critical_path_s"]), round(p["national_h"] * 3600)
    (250, 326)
    """
    scale = nation.blocks / f["blocks"]
    per_state = f["states"]
    largest = nation.largest_share * nation.blocks / (f["blocks"] / per_state)  # the largest state, in copies
    path = sum(f[f"state_{s}_cpu_s"] / per_state * largest for s in "ABC")
    state_cpu = sum(f[f"state_{s}_cpu_s"] for s in "ABC") * scale
    top = (f.get("top_measure_cpu_s", 0.0) + f.get("top_solve_cpu_s", 0.0)) / per_state * nation.states
    assemble = f.get("assemble_cpu_s", 0.0) * scale
    validate = f.get("validate_s", 0.0) / per_state * largest  # each state on its own worker, the largest last
    serial = top + assemble + validate
    seconds = serial + max(path, state_cpu / nation.cores)
    worker_mb = max(f[f"state_{s}_over_base_mb"] for s in "ABC")
    base_mb = f["worker_peak_mb"] - worker_mb
    largest_worker_gb = (base_mb + worker_mb * largest) / 1024
    all_states_gb = (nation.states * base_mb + worker_mb * scale * per_state) / 1024 + f["driver_peak_mb"] / 1024
    return {"national_serial_s": serial, "national_top_s": top, "national_assemble_s": assemble,
            "national_validate_s": validate, "national_critical_path_s": path,
            "national_state_cpu_s": state_cpu, "national_h": seconds / 3600,
            "national_driver_gb": f["driver_peak_mb"] / 1024, "national_largest_worker_gb": largest_worker_gb,
            "national_all_states_at_once_gb": all_states_gb}


def run_1() -> dict:
    return run_partitioned(1)


def run_2() -> dict:
    return run_partitioned(2)


def run_4() -> dict:
    return run_partitioned(4)


def run_8() -> dict:
    return run_partitioned(8)


_TARGET = "driver peak flat (within 15%) from 1 to 8 states; worker peak flat; national <= 1 h on 64 cores, <= 64 GB"
BENCHES = [Bench(f"scale.partitioned_{n}", f"partitioned das run on {n} state cop{'y' if n == 1 else 'ies'} (one file "
                 f"per state), {WORKERS} workers, seeded: driver and worker peaks, state tasks, national projection",
                 fn, key="driver_peak_mb", repeats=1, target=_TARGET)
           for n, fn in ((1, run_1), (2, run_2), (4, run_4), (8, run_8))]


if __name__ == "__main__":  # python -m benchmarks.partitioned [STATES]
    import sys

    print(json.dumps(run_partitioned(int(sys.argv[1]) if len(sys.argv) > 1 else 2), indent=1, sort_keys=True))
