"""Scale, partitioned: `das run` on 1, 2, 4 and 8 state copies given as one file per state, and a national
projection from the per-state tasks (method: docs/scale.md, "The partitioned driver").

Each `scale.partitioned_N` runs in its own process (scripts/bench): the driver's peak RSS (VmHWM, reset after
the input is written) and every worker's, wall and CPU, and each state task the workers run (A: read and
check; B: measure below the state, solve persons; C: solve units, write the state's parts), timed on the
worker with its own peak. The driver's own stages (the top's measurement and solves, the assembly of the
release, validation) are timed in the driver.
"""

from __future__ import annotations

import functools
import heapq
import json
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from benchmarks._harness import Bench
from benchmarks.scale import _cpu, _peak_rss_mb, _reset_peak_rss, pollers_cpu, watching_descendants

WORKERS = 2
SEED = 2020
STAGES = {"read_state": "A", "solve_state": "B", "finish_state": "C", "validate_state": "V",
          "_shard_task": "V"}  # a state's validation: whole, or (das.validate.shards) a shard at a time


# 2020 census resident population by state and DC (millions, rounded): the sizes of a national run's state
# tasks, whose cost and memory follow their persons (and blocks, about 41 persons a block nationally).
STATE_POPULATION_2020 = {
    "AL": 5.02, "AK": 0.73, "AZ": 7.15, "AR": 3.01, "CA": 39.54, "CO": 5.77, "CT": 3.61, "DE": 0.99, "DC": 0.69,
    "FL": 21.54, "GA": 10.71, "HI": 1.46, "ID": 1.84, "IL": 12.81, "IN": 6.79, "IA": 3.19, "KS": 2.94, "KY": 4.51,
    "LA": 4.66, "ME": 1.36, "MD": 6.18, "MA": 7.03, "MI": 10.08, "MN": 5.71, "MS": 2.96, "MO": 6.15, "MT": 1.08,
    "NE": 1.96, "NV": 3.10, "NH": 1.38, "NJ": 9.29, "NM": 2.12, "NY": 20.20, "NC": 10.44, "ND": 0.78, "OH": 11.80,
    "OK": 3.96, "OR": 4.24, "PA": 13.00, "RI": 1.10, "SC": 5.12, "SD": 0.89, "TN": 6.91, "TX": 29.15, "UT": 3.27,
    "VT": 0.64, "VA": 8.63, "WA": 7.71, "WV": 1.79, "WI": 5.89, "WY": 0.58,
}


@dataclass(frozen=True)
class Nation:
    """A national run as assumed (docs/scale.md): the states' 2020 persons, and the machine of the target."""

    persons_m: dict = field(default_factory=lambda: dict(STATE_POPULATION_2020))
    cores: int = 64
    memory_gb: float = 64.0  # one machine

    @property
    def persons(self) -> float:
        return sum(self.persons_m.values()) * 1e6


def _status_kb(name: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(name + ":"):
            return float(line.split()[1])
    return float("nan")


def _timed_task(stage: str, fn: Callable, arg):
    """One state task on a worker, with its wall and CPU seconds and the worker's peak over the task (VmHWM reset)."""
    _reset_peak_rss()
    base = _status_kb("VmRSS") / 1024
    t0, c0, k0 = time.perf_counter(), time.process_time(), _cpu(resource.RUSAGE_CHILDREN)
    result = fn(arg)
    state = arg if isinstance(arg, str) else arg[1] if isinstance(arg[1], str) else arg[1].state
    width = arg[3] if stage in "BC" and isinstance(arg, tuple) and len(arg) > 3 else 1  # B's and C's slots
    return result, {"stage": stage, "state": state, "seconds": time.perf_counter() - t0, "width": width,
                    # a wide state's own pool: its processes' CPU counts once they exit (the engine closes it)
                    "cpu_seconds": time.process_time() - c0 + _cpu(resource.RUSAGE_CHILDREN) - k0,
                    "base_mb": base, "peak_mb": _peak_rss_mb()}


@contextmanager
def recording(records: list[dict], driver: dict):
    """Every state task (A, B, C, and V: a state's validation) through `_timed_task` (records appended), the
    driver's stages timed into `driver`."""
    import das.driver.partitioned
    import das.frame.lifecycle
    import das.io.parts
    from das.driver import run
    from das.validate import driver as validation

    def timed_tasks(original: Callable) -> Callable:
        def wrapper(executor, fn, tasks, *args, **kwargs):
            name = getattr(fn, "__name__", None) or fn.func.__name__
            if name not in STAGES:
                return original(executor, fn, tasks, *args, **kwargs)
            found = original(executor, functools.partial(_timed_task, STAGES[name], fn), tasks, *args, **kwargs)
            records.extend(record for _, record in found)
            return [result for result, _ in found]
        return wrapper

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

    patched = [(owner, "largest_first", owner.largest_first) for owner in (das.driver.partitioned, validation)]
    for owner, attr, original in patched:
        setattr(owner, attr, timed_tasks(original))
    patched += [(run, "read_states", timed(run, "read_states", "read")),
                (run, "run_states", timed(run, "run_states", "states")),
                (das.driver.partitioned, "measure_top", timed(das.driver.partitioned, "measure_top", "top_measure")),
                (das.driver.partitioned, "solve_top", timed(das.driver.partitioned, "solve_top", "top_solve")),
                (das.io.parts, "assemble", timed(das.io.parts, "assemble", "assemble")),
                (das.frame.lifecycle, "validate_run", timed(das.frame.lifecycle, "validate_run", "validate"))]
    try:
        yield
    finally:
        for owner, attr, original in patched:
            setattr(owner, attr, original)


def run_partitioned(states: int, workers: int = WORKERS) -> dict:
    """One seeded partitioned `das run` of `states` copies: driver and worker peaks, CPU, the state tasks."""
    from das.driver.run import run
    from das.frame.bundle import read_process

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        counts = _written_elsewhere(tmp / "input", states)
        _reset_peak_rss()
        base = _status_kb("VmRSS") / 1024
        self0, children0 = _cpu(resource.RUSAGE_SELF) - pollers_cpu(), _cpu(resource.RUSAGE_CHILDREN)
        records: list[dict] = []
        driver: dict = {}
        seen: dict = {}
        t0 = time.perf_counter()
        with watching_descendants(seen), recording(records, driver):
            result = run(tmp / "input" / "spec.toml", tmp / "out", seed=SEED, workers=workers, progress=False)
        seconds = time.perf_counter() - t0
        driver_peak = max(_peak_rss_mb(), driver.pop("overall_peak_mb", 0.0))
        driver_cpu = _cpu(resource.RUSAGE_SELF) - pollers_cpu() - self0
        worker_cpu = _cpu(resource.RUSAGE_CHILDREN) - children0
        tree = seen.pop("workers_tree_mb", float("nan"))
        process = read_process(tmp / "out")  # run times are the operator's, never in the manifest
    blocks, persons = float(counts["blocks"]), float(counts["persons"])
    state_persons = _state_persons(states)
    figures = {"states": float(states), "blocks": blocks, "persons": persons, "valid": float(result.valid),
               "seconds": seconds, "s_per_1000_blocks": seconds / blocks * 1000,
               "driver_cpu_s": driver_cpu, "worker_cpu_s": worker_cpu,
               "cpu_ms_per_block": (driver_cpu + worker_cpu) / blocks * 1000,
               "driver_base_mb": base, "driver_peak_mb": driver_peak, "driver_growth_mb": driver_peak - base,
               "worker_peak_mb": max(seen.values(), default=float("nan")), "workers_tree_peak_mb": tree,
               "worker_base_mb": float(np.median([r["base_mb"] for r in records])), **driver}
    for stage in STAGES.values():
        tasks = [r for r in records if r["stage"] == stage]
        figures[f"state_{stage}_tasks"] = float(len(tasks))
        figures[f"state_{stage}_cpu_s"] = sum(r["cpu_seconds"] for r in tasks)
        figures[f"state_{stage}_largest_s"] = max((r["seconds"] for r in tasks), default=0.0)
        figures[f"state_{stage}_peak_mb"] = max((r["peak_mb"] for r in tasks), default=0.0)
        figures[f"state_{stage}_over_base_mb"] = max((r["peak_mb"] - r["base_mb"] for r in tasks), default=0.0)
        figures[f"state_{stage}_mb_per_person"] = max(
            (max(0.0, r["peak_mb"] - r["base_mb"]) / state_persons[r["state"]] for r in tasks), default=0.0)
    for key, value in process["timings_seconds"].items():
        figures[f"timing_{key}_s"] = value
    # the engine's part of B and C (divisible among a wide state's processes), and its parallel efficiency
    for release, stage in (("persons", "B"), ("units", "C")):
        below = [r["tasks"] for r in process["levels"].get(release, []) if r["level"] not in ("nation", "state")]
        figures[f"state_{stage}_engine_cpu_s"] = sum(t["cpu_seconds"] for t in below)
    # B's measurement runs on a wide state's pool too: B's divisible part is all but its reading (A's work again)
    figures["state_B_divisible_cpu_s"] = max(0.0, figures["state_B_cpu_s"] - figures["state_A_cpu_s"])
    figures["state_C_divisible_cpu_s"] = figures["state_C_engine_cpu_s"]
    for release, stage in (("persons", "B"),):
        below = [r["tasks"] for r in process["levels"].get(release, []) if r["level"] not in ("nation", "state")]
        spans = [(t["started_s"], t["complete_s"]) for t in below if "started_s" in t]
        if spans and stage == "B" and max(r["width"] for r in records if r["stage"] == "B") > 1 and states == 1:
            span = max(b for _, b in spans) - min(a for a, _ in spans)
            figures["engine_efficiency"] = figures["state_B_engine_cpu_s"] / (WORKERS * span)
    # the validation's driver part: its own CPU (the states' checks run on the workers meanwhile)
    figures["validate_top_s"] = figures.get("validate_cpu_s", 0.0)
    figures.update(project({**figures, "state_persons": list(state_persons.values())}, Nation()))
    return {k: v for k, v in figures.items() if isinstance(v, float)}


def _written_elsewhere(out: Path, states: int) -> dict:
    """das.io.scale_inputs's partitioned input, written by another process: this one (the driver) starts the run
    with nothing of the input's writing left in its heap, so its peak is the run's."""
    code = ("import json, sys; from das.io.scale_inputs import write_synthetic; "
            "print(json.dumps(write_synthetic(sys.argv[1], int(sys.argv[2]), partitioned=True)))")
    done = subprocess.run([sys.executable, "-c", code, str(out), str(states)], capture_output=True, text=True,
                          check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def _state_persons(states: int) -> dict[str, float]:
    """Persons of each state copy of das.io.scale_inputs (its fixture's rows)."""
    import pyarrow.parquet as pq

    from das.io.scale_inputs import FIXTURES, plan

    return {code: float(pq.read_metadata(FIXTURES / source / "persons.parquet").num_rows)
            for source, code in plan(states)}


def makespan(seconds: list[float], memory_mb: list[float], slots: int, budget_mb: float,
             widths: list[int] | None = None) -> float:
    """Wall seconds of tasks started as das.core.executors.largest_first starts them: the largest (longest)
    first, task i on widths[i] slots, while their slots fit `slots` and their memory `budget_mb` (a
    task alone always starts; the largest waiting one is never passed over).

    >>> makespan([4.0, 3.0, 2.0, 1.0], [1.0, 1.0, 1.0, 1.0], slots=2, budget_mb=10.0)
    5.0
    >>> makespan([4.0, 3.0, 2.0, 1.0], [6.0, 6.0, 1.0, 1.0], slots=2, budget_mb=10.0)
    7.0
    >>> makespan([4.0, 3.0, 2.0, 1.0], [1.0, 1.0, 1.0, 1.0], slots=3, budget_mb=10.0, widths=[2, 1, 1, 1])
    5.0
    """
    widths = widths or [1] * len(seconds)
    order = sorted(range(len(seconds)), key=lambda i: -seconds[i])
    running: list[tuple[float, int]] = []
    now, held, busy = 0.0, 0.0, 0
    while order or running:
        while order and (not running or busy + widths[order[0]] <= slots and held + memory_mb[order[0]] <= budget_mb):
            i = order.pop(0)
            heapq.heappush(running, (now + seconds[i], i))
            held, busy = held + memory_mb[i], busy + widths[i]
        now, i = heapq.heappop(running)
        held, busy = held - memory_mb[i], busy - widths[i]
    return now


def project(f: dict, nation: Nation) -> dict:
    """A national partitioned run from one run's figures (docs/scale.md, "The partitioned driver").

    Each state task (A: read; B: measure and solve persons; C: solve units and write; V: validate) is
    sized by its state's 2020 persons, with this run's CPU seconds and memory over a worker's baseline
    per person (memory: the largest per person of this run's tasks). B and C run on the state's
    width of slots (das.driver.admission.widths: its share of the persons times the cores): their
    divisible CPU (B: measuring and solving, all but its reading; C: solving) is divided by the
    width and the engine's parallel efficiency (`engine_efficiency`, measured on a one-state run of
    width 2, else 0.8), the rest (reading, writing the parts) is not; each extra process costs a
    worker baseline of memory. Each stage is scheduled as the driver does (`makespan`: by the
    driver's own estimates, within the budget `--memory-gb 64` leaves after its allowance for
    itself and the workers' baselines); the stages follow one another, with the driver's serial
    work between them: the top's measurement and solves (grown with the number of states), the assembly and the
    validation's top checks (grown with persons).

    >>> f = {"persons": 2e6, "states": 2.0, "worker_base_mb": 250.0, "driver_peak_mb": 400.0,
    ...      "top_measure_cpu_s": 1.0, "top_solve_cpu_s": 1.0, "assemble_cpu_s": 4.0, "validate_top_s": 0.0,
    ...      **{f"state_{s}_cpu_s": 10.0 for s in "ABCV"}, **{f"state_{s}_mb_per_person": 1e-4 for s in "ABCV"},
    ...      "state_B_divisible_cpu_s": 8.0, "state_C_divisible_cpu_s": 0.0, "engine_efficiency": 1.0}
    >>> p = project(f, Nation(persons_m={"X": 2.0, "Y": 1.0, "Z": 1.0}, cores=4))
    >>> round(p["national_h"] * 3600, 1), p["national_fits"], round(p["national_stage_B_s"], 6)
    (47.0, 1.0, 6.0)
    """
    from das.driver.admission import DRIVER_MB, TASK_MB_PER_PERSON, WORKER_BASE_MB

    persons = [p * 1e6 for p in nation.persons_m.values()]
    total = sum(persons)
    # the driver's own budget and estimates (`--memory-gb 64`): it admits a task by its estimate, which is
    # at least what the tasks measured here hold, so the machine stays within the budget
    budget = nation.memory_gb * 1024 - max(DRIVER_MB, f["driver_peak_mb"]) - nation.cores * max(WORKER_BASE_MB,
                                                                                                  f["worker_base_mb"])
    efficiency = f.get("engine_efficiency", 0.8)
    out: dict = {"national_task_budget_gb": budget / 1024, "national_engine_efficiency": efficiency}
    wall = 0.0
    for stage in "ABCV":
        width = ([max(1, min(nation.cores, int(nation.cores * p / total))) for p in persons] if stage in "BC"
                 else [1] * len(persons))
        parallel = f.get(f"state_{stage}_divisible_cpu_s", 0.0) / f["persons"]
        serial = f[f"state_{stage}_cpu_s"] / f["persons"] - parallel
        seconds = [serial * p + parallel * p / (w * (efficiency if w > 1 else 1.0)) for p, w in zip(persons, width)]
        mb = [f[f"state_{stage}_mb_per_person"] * p + (w - 1) * f["worker_base_mb"] for p, w in zip(persons, width)]
        estimate = [max(TASK_MB_PER_PERSON * p + (w - 1) * WORKER_BASE_MB, m) for p, w, m in zip(persons, width, mb)]
        out[f"national_stage_{stage}_s"] = makespan(seconds, estimate, nation.cores, budget, width)
        out[f"national_stage_{stage}_largest_s"] = max(seconds)
        out[f"national_stage_{stage}_largest_gb"] = max(mb) / 1024
        out[f"national_stage_{stage}_widest"] = float(max(width))
        wall += out[f"national_stage_{stage}_s"]
    states = len(persons)
    serial_s = {"top": (f["top_measure_cpu_s"] + f["top_solve_cpu_s"]) / f["states"] * states,
                "assemble": f["assemble_cpu_s"] / f["persons"] * total,
                "validate_top": f["validate_top_s"] / f["persons"] * total}
    for name, seconds in serial_s.items():
        out[f"national_serial_{name}_s"] = seconds
    wall += sum(serial_s.values())
    largest_gb = max(out[f"national_stage_{s}_largest_gb"] for s in "ABCV")
    out.update({"national_h": wall / 3600, "national_driver_gb": f["driver_peak_mb"] / 1024,
                "national_largest_task_gb": largest_gb,
                "national_fits": float(budget > 0 and largest_gb * 1024 <= budget)})
    return out


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
    print(json.dumps(run_partitioned(int(sys.argv[1]) if len(sys.argv) > 1 else 2), indent=1, sort_keys=True))
