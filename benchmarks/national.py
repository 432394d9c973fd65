"""Scale, national-shaped: `das run` on 9 synthetic states (165k blocks) and a national projection from it.

`scale.national` runs `das run` (seeded, 2 workers) on 9 state copies of the VT/DE fixtures
(das.io.scale_inputs: VT, DE, ..., VT: 165,024 blocks, 6.72 million persons) and times every task the
workers run: each measurement chunk, each batch of parents and, inside a batch, each parent
(build + solve, CPU and the worker's peak memory over its own baseline). From those it reports
the critical path of this run (per level, the longest single task) and projects a national run
(method: docs/scale.md, "The national projection"; the function is `project`).

The engine reports each batch's figures itself (`LevelReport.tasks`: `parents`, `children`,
`seconds`, `cpu_seconds`); the benchmark runs each batch through `_timed_batch` on its worker, which
adds per parent the build + solve CPU and peak memory, and wraps measurement's executor map
(das.topdown.measure.ordered_map) so that each chunk is timed too.
"""

from __future__ import annotations

import json
import resource
import tempfile
import time
from collections.abc import Callable, Iterable
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from benchmarks._harness import Bench
from benchmarks.scale import _cpu, _driver_cpu_by_stage, pollers_cpu, watching_descendants

STATES = 9
WORKERS = 2
SEED = 2020


# ----------------------------------------------------------------------------- national assumptions
@dataclass(frozen=True)
class Nation:
    """What a national run is assumed to be (docs/scale.md): sizes from 2020 and the machine the target names."""

    blocks: float = 8.1e6     # 2020 tabulation blocks, order of magnitude
    persons: float = 331e6    # 2020 resident population
    cores: int = 64
    memory_gb: float = 64.0   # per machine
    # children of the largest single parent at each child level (a task holds at least one whole parent):
    largest_children: dict = field(default_factory=lambda: dict(LARGEST_NATIONAL))


# The largest parents, by the level of their children. National: the nation's 50 states + DC; Texas's 254
# counties; Los Angeles County's 2,346 tracts (2010 and the 2020 count as published by the county); the
# largest tract by blocks is not in the shipped files: the largest shipped (Hawaii 2010, tract 001021202,
# 1,491 blocks, 504 with people) stands in for it. SHIPPED: the same maxima over the states in
# ../shared/data/census2010 (2010 DE, HI, VT and 2020 HI; `largest_in_shipped` recomputes them).
LARGEST_NATIONAL = {"state": 51, "county": 254, "tract": 2346, "block": 1491}
LARGEST_SHIPPED = {"state": 3, "county": 14, "tract": 330, "block": 1491}


def largest_in_shipped(census_dir: Path) -> dict:
    """The largest parent by the level of its children over the block files of `census_dir` (blocks_20*.parquet):
    {level: (children, where)}: counties of a state, tracts of a county, blocks of a tract (every block, populated
    or not: a production run has them all)."""
    import pyarrow.parquet as pq

    best = {"county": (0, ""), "tract": (0, ""), "block": (0, "")}
    states = set()
    for path in sorted(Path(census_dir).glob("blocks_20*.parquet")):
        if "subset" in path.name:
            continue
        t = pq.read_table(path, columns=["state", "county", "tract", "block"]).to_pandas()
        states.update(t["state"].unique())
        found = {"county": (t["county"].nunique(), path.name),
                 "tract": max((g["tract"].nunique(), f"{path.name} county {c}") for c, g in t.groupby("county")),
                 "block": max((len(g), f"{path.name} tract {c}{tr}") for (c, tr), g in t.groupby(["county", "tract"]))}
        best = {k: max(best[k], found[k]) for k in best}
    return {"state": (len(states), "states: " + " ".join(sorted(states))), **best}


# ----------------------------------------------------------------------------- the projection
@dataclass(frozen=True)
class LevelWork:
    """One barriered step of a national run: all its tasks' CPU and its largest single task, national-sized."""

    name: str              # e.g. "persons county" (the level solved) or "measure"
    total_cpu_s: float     # every task of the step, summed
    largest_task_s: float  # the longest single task (it cannot be split: one whole parent)
    fit: tuple = ()        # how largest_task_s was found: (CPU s per child, a, b) of `fit_cost`, if fitted


def project(serial_s: dict[str, float], steps: list[LevelWork], cores: int) -> dict:
    """National wall seconds on `cores` cores: serial driver work plus the parallel steps, two schedules.

    - `barriered` (levels one after another, as the engine ran before issue 14): each step
      takes max(total CPU / cores, its largest task), and the steps add up.
    - `per_parent` (a batch starts as soon as its parents are solved, as the engine runs now): the
      parallel part takes max(all steps' CPU / cores, the critical path), the critical path being
      the sum of the steps' largest tasks (nation -> largest state -> largest county -> ... : an upper
      bound of the longest chain, since the largest tasks need not lie on one chain).
    The serial driver work (reading, the driver's part of measurement and post-processing, outputs,
    validation) is added in both: it is not overlapped with the workers here.

    >>> steps = [LevelWork("a", 640.0, 5.0), LevelWork("b", 64.0, 20.0)]
    >>> r = project({"read": 100.0}, steps, cores=64)
    >>> r["barriered_s"], r["per_parent_s"], r["critical_path_s"]
    (130.0, 125.0, 25.0)
    """
    serial = sum(serial_s.values())
    by_step = {s.name: max(s.total_cpu_s / cores, s.largest_task_s) for s in steps}
    parallel_cpu = sum(s.total_cpu_s for s in steps)
    critical = sum(s.largest_task_s for s in steps)
    return {"serial_s": serial, "barriered_s": serial + sum(by_step.values()),
            "per_parent_s": serial + max(parallel_cpu / cores, critical), "critical_path_s": critical,
            "parallel_cpu_s": parallel_cpu, "steps_s": by_step,
            "bound_by_largest_task": [s.name for s in steps if s.largest_task_s > s.total_cpu_s / cores]}


def fit_cost(children: Iterable[float], cost: Iterable[float]) -> tuple[float, float, float]:
    """Per-parent cost against its number of children: (per child, a, b) of the linear fit through the
    origin over the larger half of the parents and of cost = a * children**b (least squares on logs).

    >>> per_child, a, b = fit_cost([2, 4, 8, 16], [1.0, 2.0, 4.0, 8.0])
    >>> round(per_child, 6), round(a, 6), round(b, 6)
    (0.5, 0.5, 1.0)
    """
    c, t = np.asarray(list(children), float), np.asarray(list(cost), float)
    keep = (c >= 2) & (t > 0)
    c, t = c[keep], t[keep]
    if not len(c):
        return 0.0, 0.0, 1.0
    big = c >= np.median(c)
    per_child = float(t[big].sum() / c[big].sum())
    if len(np.unique(c)) < 2:
        return per_child, per_child, 1.0
    b, log_a = np.polyfit(np.log(c), np.log(t), 1)
    return per_child, float(np.exp(log_a)), float(b)


def extrapolate(per_child: float, a: float, b: float, children: float) -> float:
    """A parent of `children` children: the larger of the linear and the power-law fit (the safer one).

    >>> extrapolate(0.5, 0.1, 1.5, 100)
    100.0
    """
    return max(per_child * children, a * children ** b)


def project_memory(driver_base_mb: float, driver_peak_mb: float, blocks: float, worker_peak_mb: float,
                   largest_task_mb: float, nation: Nation) -> dict:
    """Memory of a national run: the driver's growth over its baseline scaled by blocks (it holds O(country)
    arrays, docs/scale.md), and a machine holding the driver, `cores - 1` workers at the measured worker peak
    and one worker with the largest task.

    >>> m = project_memory(400.0, 1400.0, 1e5, 700.0, 2000.0, Nation(blocks=1e6, cores=4))
    >>> m["driver_peak_gb"], m["machine_peak_gb"]
    (10.15625, 14.16015625)
    """
    driver = driver_base_mb + (driver_peak_mb - driver_base_mb) * nation.blocks / blocks
    machine = driver + (nation.cores - 1) * worker_peak_mb + max(worker_peak_mb, largest_task_mb)
    return {"driver_peak_gb": driver / 1024, "largest_task_worker_gb": largest_task_mb / 1024,
            "machine_peak_gb": machine / 1024, "fits": float(machine / 1024 <= nation.memory_gb)}


# ----------------------------------------------------------------------------- per-task timings
def _status_kb(field_name: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field_name + ":"):
            return int(line.split()[1])
    return float("nan")


def _reset_hwm() -> None:
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass


def _timed(job: tuple[Callable, object]):
    """Run one task (fn, arg) on a worker: (result, record of its wall and CPU seconds, and per parent for a batch)."""
    import das.topdown.batch as batch

    fn, arg = job
    record: dict = {"seconds": 0.0, "cpu_seconds": 0.0}
    parents: list[dict] = []
    originals = batch.parent_problem, batch.solve_parent
    if fn is batch.solve_batch:
        family = arg.family
        record.update(parents=len(family.parents), children=len(family.children), kind="batch",
                      level_digits=len(family.children[0]) if len(family.children) else 0, schema=family.schema.name)

        def build(*args, **kwargs):
            base = _status_kb("VmRSS")
            _reset_hwm()
            t0, c0 = time.perf_counter(), time.process_time()
            problem = originals[0](*args, **kwargs)
            parents.append({"children": problem.n_children, "variables": int(problem.allowed.sum()),
                            "base_kb": base, "t0": t0, "c0": c0})
            return problem

        def solve(problem, **kwargs):
            solution = originals[1](problem, **kwargs)
            p = parents[-1]
            p["seconds"], p["cpu_seconds"] = time.perf_counter() - p.pop("t0"), time.process_time() - p.pop("c0")
            p["peak_over_base_mb"] = (_status_kb("VmHWM") - p.pop("base_kb")) / 1024
            return solution

        batch.parent_problem, batch.solve_parent = build, solve
    else:
        record["kind"] = "chunk"
    t0, c0 = time.perf_counter(), time.process_time()
    try:
        result = fn(arg)
    finally:
        batch.parent_problem, batch.solve_parent = originals
    record["seconds"], record["cpu_seconds"] = time.perf_counter() - t0, time.process_time() - c0
    record["worker_rss_mb"] = _status_kb("VmRSS") / 1024
    if parents:
        record["parent_solves"] = parents
    return result, record


def _timed_batch(task):
    """The engine's timed_solve_batch on a worker, its figures extended by `_timed`'s (per parent, memory)."""
    import das.topdown.batch as batch

    (solved, events, l2), record = _timed((batch.solve_batch, task))
    return solved, events, l2, record


@contextmanager
def recording_tasks(records: list[dict], reports: dict):
    """Run every measurement chunk and batch of parents through `_timed` (records appended to `records`, tagged
    with the release) and keep the engine's LevelReports per release in `reports`."""
    import das.driver.pipeline
    import das.driver.states
    import das.topdown.engine
    import das.topdown.measure

    release = [""]
    originals = {"timed_solve_batch": das.topdown.engine.timed_solve_batch, "measure_map": das.topdown.measure.ordered_map,
                 "postprocess": das.driver.states.postprocess, "measure_release": das.driver.pipeline.measure_release}

    def timed_map(original):
        def wrapper(executor, fn, items, in_flight=None):
            for result, record in original(executor, _timed, ((fn, item) for item in items), in_flight):
                record["release"] = release[0]
                records.append(record)
                yield result
        return wrapper

    def postprocess(name, *args, **kwargs):
        release[0] = name
        solved, level_reports = originals["postprocess"](name, *args, **kwargs)
        reports[name] = level_reports
        records.extend({**t, "release": name} for r in level_reports for t in r.tasks)
        return solved, level_reports

    def measure_release(what, *args, **kwargs):
        release[0] = what.release
        return originals["measure_release"](what, *args, **kwargs)

    das.topdown.engine.timed_solve_batch = _timed_batch  # pickled by name: the workers run _timed_batch
    das.topdown.measure.ordered_map = timed_map(originals["measure_map"])
    das.driver.states.postprocess, das.driver.pipeline.measure_release = postprocess, measure_release
    try:
        yield
    finally:
        das.topdown.engine.timed_solve_batch = originals["timed_solve_batch"]
        das.topdown.measure.ordered_map = originals["measure_map"]
        das.driver.states.postprocess = originals["postprocess"]
        das.driver.pipeline.measure_release = originals["measure_release"]


def critical_path(reports: dict[str, list], recorded: list[dict] = ()) -> dict[str, dict]:
    """Per (release, level solved): tasks, their CPU, the longest single task, and the level's wall seconds.

    `reports`: release -> LevelReports (or dicts) in order; a report's own `tasks` (the engine's per-task
    timings: dicts with `parents`, `children`, `seconds`, `cpu_seconds`) are used when present, else the
    `recorded` batches of that release whose children are that level's geocodes. The root (one parent,
    solved in the driver) is its own single task.
    """
    from das.model.levels import LEVEL_DIGITS

    out = {}
    for release, level_reports in reports.items():
        for r in level_reports:
            get = r.get if isinstance(r, dict) else lambda k, d=None, r=r: getattr(r, k, d)
            level, seconds = get("level"), float(get("seconds"))
            tasks = get("tasks")
            if tasks is None:
                tasks = [t for t in recorded if t.get("kind") == "batch" and t.get("release") == release
                         and t.get("level_digits") == LEVEL_DIGITS[level]]
            if not tasks:  # the root: solved in the driver, one task
                tasks = [{"parents": 1, "children": 1, "seconds": seconds, "cpu_seconds": seconds}]
            longest = max(tasks, key=lambda t: t["seconds"])
            out[f"{release} {level}"] = {
                "level_s": seconds, "tasks": len(tasks), "cpu_s": sum(t["cpu_seconds"] for t in tasks),
                "longest_task_s": longest["seconds"], "longest_task_cpu_s": max(t["cpu_seconds"] for t in tasks),
                "longest_task_parents": longest["parents"], "longest_task_children": longest["children"],
            }
    return out


# ----------------------------------------------------------------------------- from one run to the nation
def national_steps(path: dict[str, dict], recorded: list[dict], blocks: float, nation: Nation) -> list[LevelWork]:
    """The parallel steps of a national run, from this run: measurement chunks (CPU scaled by blocks, the largest
    chunk as it is: chunks have a fixed cap) and each (release, level): its tasks' CPU scaled by blocks and its
    largest task = one parent of the nation's largest size at that level (per-parent fit, `extrapolate`) plus
    the batch's per-child reading cost."""
    from das.model.levels import LEVEL_DIGITS

    scale = nation.blocks / blocks
    chunks = [t for t in recorded if t.get("kind") == "chunk"]
    steps = [LevelWork("measure", sum(t["cpu_seconds"] for t in chunks) * scale,
                       max((t["cpu_seconds"] for t in chunks), default=0.0))]
    for name, level_path in path.items():
        release, level = name.split()
        batches = [t for t in recorded if t.get("kind") == "batch" and t.get("release") == release
                   and t.get("level_digits") == LEVEL_DIGITS[level]]
        if not batches:  # the root: one parent whatever the size of the country
            steps.append(LevelWork(name, level_path["cpu_s"], level_path["longest_task_cpu_s"]))
            continue
        # per parent when the batches say (recorded by `_timed`), else per batch (then reading is inside the fit)
        parents = [p for t in batches for p in t.get("parent_solves", [])] or batches
        per_child, a, b = fit_cost([p["children"] for p in parents], [p["cpu_seconds"] for p in parents])
        reading = max(0.0, sum(t["cpu_seconds"] for t in batches) - sum(p["cpu_seconds"] for p in parents))
        reading_per_child = reading / max(1, sum(t["children"] for t in batches))
        largest = nation.largest_children[level]  # the synthetic runs' five-level spine (no block groups)
        largest_s = extrapolate(per_child, a, b, largest) + reading_per_child * largest
        # the state level is one parent (the nation) whatever the country: its total is its largest task
        total = largest_s if level == "state" else level_path["cpu_s"] * scale
        steps.append(LevelWork(name, total, largest_s, (per_child, a, b)))
    return steps


def largest_task_memory(recorded: list[dict], nation: Nation) -> dict[str, float]:
    """Per (release, level): a worker's peak over its baseline for the nation's largest parent, scaled linearly in
    children from the measured parents' peaks (MB per child over the larger half of the parents, at least the
    largest measured peak)."""
    from das.model.levels import LEVEL_DIGITS

    digits_level = {d: lv for lv, d in LEVEL_DIGITS.items()}
    by: dict[str, list] = {}
    for t in recorded:
        if t.get("kind") == "batch":
            key = f"{t['release']} {digits_level[t['level_digits']]}"
            by.setdefault(key, []).extend(t.get("parent_solves", []))
    out = {}
    for key, parents in by.items():
        c = np.array([p["children"] for p in parents], float)
        m = np.array([max(0.0, p["peak_over_base_mb"]) for p in parents], float)
        if not len(c) or not np.isfinite(m).all():
            continue
        big = c >= np.median(c)
        per_child = m[big].sum() / max(1.0, c[big].sum())
        out[key] = max(float(m.max()), per_child * nation.largest_children.get(key.split()[1], 1))
    return out


# ----------------------------------------------------------------------------- the benchmark
def run_national(states: int = STATES, workers: int = WORKERS, nation: Nation | None = None) -> dict:
    """One seeded `das run` of `states` state copies, with per-task timings; this run's figures and the projection."""
    from das.driver.run import run
    from das.frame.bundle import read_process
    from das.io.scale_inputs import write_synthetic

    nation = nation or Nation()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        counts = write_synthetic(tmp / "input", states)
        driver_base_mb = _status_kb("VmRSS") / 1024
        self0, children0 = _cpu(resource.RUSAGE_SELF) - pollers_cpu(), _cpu(resource.RUSAGE_CHILDREN)
        stages: dict = {}
        workers_seen: dict = {}
        records: list[dict] = []
        reports: dict = {}
        t0 = time.perf_counter()
        with watching_descendants(workers_seen), _driver_cpu_by_stage(stages), recording_tasks(records, reports):
            result = run(tmp / "input" / "spec.toml", tmp / "out", seed=SEED, workers=workers, progress=False)
        seconds = time.perf_counter() - t0
        tree_peak = workers_seen.pop("workers_tree_mb", float("nan"))
        driver_cpu = _cpu(resource.RUSAGE_SELF) - pollers_cpu() - self0
        worker_cpu = _cpu(resource.RUSAGE_CHILDREN) - children0
        process = read_process(tmp / "out")  # run times are the operator's, never in the manifest
    blocks, persons = float(counts["blocks"]), float(counts["persons"])
    figures = {
        "states": float(states), "blocks": blocks, "persons": persons, "valid": float(result.valid),
        "seconds": seconds, "s_per_1000_blocks": seconds / blocks * 1000,
        "driver_cpu_s": driver_cpu, "worker_cpu_s": worker_cpu, "cpu_s": driver_cpu + worker_cpu,
        "cpu_ms_per_block": (driver_cpu + worker_cpu) / blocks * 1000,
        "driver_cpu_ms_per_block": driver_cpu / blocks * 1000, "worker_cpu_ms_per_block": worker_cpu / blocks * 1000,
        "driver_base_mb": driver_base_mb,
        "worker_peak_rss_mb": max(workers_seen.values(), default=float("nan")),  # one worker's own peak (VmHWM)
        "workers_tree_peak_mb": tree_peak,  # all descendants of the driver together, at their largest
        "workers_seen": float(len(workers_seen)),
        "timed_task_cpu_s": sum(t["cpu_seconds"] for t in records),
        **stages,
    }
    for key, value in process["timings_seconds"].items():
        figures[f"{key}_s"] = value

    if not any(t["kind"] == "batch" for t in records):  # the fits need them: say so rather than project from nothing
        raise RuntimeError("no batch of parents was timed: das.topdown.engine no longer submits timed_solve_batch; "
                           "recording_tasks must follow the engine")
    # this run's critical path: per level, the longest single task
    path = critical_path(reports, records)
    for name, p in path.items():
        tag = name.replace(" ", "_")
        figures[f"{tag}_level_s"] = p["level_s"]
        figures[f"{tag}_tasks"] = float(p["tasks"])
        figures[f"{tag}_cpu_s"] = p["cpu_s"]
        figures[f"{tag}_longest_task_s"] = p["longest_task_s"]
        figures[f"{tag}_longest_task_children"] = float(p["longest_task_children"])
    figures["critical_path_s"] = sum(p["longest_task_s"] for p in path.values())

    # the projection (docs/scale.md): serial driver stages per block, the root as it is, the steps national-sized
    scale = nation.blocks / blocks
    root_s = sum(p["level_s"] for name, p in path.items() if name.endswith(" nation"))
    serial = {name: stages.get(f"{name}_driver_cpu_s", 0.0) * scale
              for name in ("read_confidential", "measure_all", "write_outputs", "validate_run")}
    serial["postprocess"] = max(0.0, stages.get("postprocess_driver_cpu_s", 0.0) - root_s) * scale
    # the rest of the driver's CPU (spec and preflight, the inputs' keyed fingerprint, the outputs' digests,
    # the manifest, starting the pool): mostly reading or hashing files, so it too scales with blocks
    staged = sum(v for k, v in stages.items() if k.endswith("_driver_cpu_s"))
    serial["other"] = max(0.0, driver_cpu - staged) * scale
    serial["root"] = root_s
    steps = national_steps({k: v for k, v in path.items() if not k.endswith(" nation")}, records, blocks, nation)
    projection = project(serial, steps, nation.cores)
    for name, value in serial.items():
        figures[f"national_serial_{name}_s"] = value
    for step in steps:
        tag = step.name.replace(" ", "_")
        figures[f"national_{tag}_cpu_s"] = step.total_cpu_s
        figures[f"national_{tag}_largest_task_s"] = step.largest_task_s
        if step.fit:
            figures[f"fit_{tag}_cpu_ms_per_child"], _, figures[f"fit_{tag}_exponent"] = step.fit
            figures[f"fit_{tag}_cpu_ms_per_child"] *= 1000
    figures["national_serial_s"] = projection["serial_s"]
    figures["national_critical_path_s"] = projection["critical_path_s"]
    figures["projected_national_h_barriered"] = projection["barriered_s"] / 3600
    figures["projected_national_h_per_parent"] = projection["per_parent_s"] / 3600
    no_validation = projection["per_parent_s"] - serial["validate_run"]
    figures["projected_national_h_per_parent_without_validation"] = no_validation / 3600
    task_mb = largest_task_memory(records, nation)
    for name, mb in task_mb.items():
        figures[f"national_{name.replace(' ', '_')}_largest_task_mb"] = mb
    driver_peak = max(stages.get("run_driver_peak_mb", 0.0), driver_base_mb)
    memory = project_memory(driver_base_mb, driver_peak, blocks, figures["worker_peak_rss_mb"],
                            figures["worker_peak_rss_mb"] + max(task_mb.values(), default=0.0), nation)
    figures.update({f"national_{k}": v for k, v in memory.items()})
    for stage in ("read_confidential", "measure_all", "postprocess", "write_outputs", "validate_run"):
        peak = stages.get(f"{stage}_driver_peak_mb")
        if peak is not None:
            figures[f"national_{stage}_driver_gb"] = (driver_base_mb + (peak - driver_base_mb) * scale) / 1024
    figures["persons_per_block_ratio"] = (nation.persons / nation.blocks) / (persons / blocks)
    return figures


def run_national_9() -> dict:
    return run_national(STATES)


BENCHES = [
    Bench("scale.national", f"das run on {STATES} state copies (VT, DE, ..., VT under new codes: 165k blocks, 6.7M "
          f"persons), {WORKERS} workers, seeded, every task timed; national projection (8.1M blocks, 64 cores, 64 GB; "
          "method in docs/scale.md)", run_national_9, key="projected_national_h_per_parent", repeats=1,
          target="national projection (per parent, as the engine runs) <= 1 h on 64 cores, <= 64 GB per machine"),
]


if __name__ == "__main__":  # python -m benchmarks.national [STATES]: one run, all figures
    import sys

    print(json.dumps(run_national(int(sys.argv[1]) if len(sys.argv) > 1 else STATES), indent=1, sort_keys=True))
