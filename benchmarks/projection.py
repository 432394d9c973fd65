"""The national projection recomputed from the big state's measured figures (issue 26; docs/scale.md, "A national
release from the big state"), for one 64-core 64 GB machine and for a Dask cluster of 8 workers x 16 cores x 32 GB.

Measured (benchmarks/big_state.py, one run): each state task stage's CPU per person (A read; B measure and solve
persons, of which all but reading is divisible among a state's slots; C units and parts, its engine part
divisible; V validate) and its memory per person over a worker's baseline; the largest batch of each level
below the county; the largest county's tract problem (2,400 tracts), with its growth exponent measured on
Honolulu's tracts replicated, and its peak memory over a worker's baseline (benchmarks/largest_parent.py on the
big state's largest county, in a process of its own); the driver's serial work (the top's measurement and
solves, the assembly (its wall time: its files are written side by side in threads), validation's driver
part, and the rest of the driver's CPU: fingerprints, digests, signing, manifest) per person;
the bytes read and written per person.

Measured too: this machine's disk, written and read back uncached (`disk_rate`), for the one-machine target.
The workers' reads and writes happen inside their tasks, so their time is in the tasks' measured seconds; the
driver's own bytes (the top, the assembly, validation's driver part, digests) are the serial I/O term.

Assumed (`Target`): the states' 2020 persons (benchmarks.partitioned.STATE_POPULATION_2020); the four largest
counties by 2020 tracts (`LARGEST_COUNTIES`); the cluster's shared storage bandwidth `disk_gb_s` (the one
machine's is measured when the run is); the engine's parallel efficiency as measured on 2 processes (else 0.8);
Dask's cost per task `dask_task_s`; that CPU per person does not depend on the state's size beyond the largest
parent (measured at 14.2M and 38.3M persons; California 39.5M).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from benchmarks.partitioned import STATE_POPULATION_2020, makespan

# The four largest counties by 2020 census tracts (approximate counts) and their states: the critical paths.
LARGEST_COUNTIES = {"Los Angeles CA": ("CA", 2498), "Cook IL": ("IL", 1332), "Harris TX": ("TX", 1115),
                    "Maricopa AZ": ("AZ", 1022)}
PARENT_EXPONENT = 1.4  # CPU ~ tracts^1.4 for one county's tract problem: 244 -> 2,400 tracts measured (docs/scale.md)


@dataclass(frozen=True)
class Target:
    """Where a national run is projected: its cores, memory and workers (1 worker: one machine, the local pool)."""

    name: str
    workers: int
    cores_per_worker: int
    memory_gb_per_worker: float
    disk_gb_s: float = 2.0       # local NVMe, or the cluster's shared storage, aggregate
    dask_task_s: float = 0.0     # scheduling cost per task (Dask: about a millisecond)
    persons_m: dict = field(default_factory=lambda: dict(STATE_POPULATION_2020))

    @property
    def cores(self) -> int:
        return self.workers * self.cores_per_worker


MACHINE = Target("one 64-core 256 GB machine", workers=1, cores_per_worker=64, memory_gb_per_worker=256.0)
CLUSTER = Target("Dask: 8 workers x 16 cores x 64 GB", workers=8, cores_per_worker=16, memory_gb_per_worker=64.0,
                 dask_task_s=0.001)


def disk_rate(where: Path, gb: float = 1.0) -> float:
    """This machine's disk in GB/s: `gb` written in 64 MB blocks and synced, then read back with the page cache
    dropped for the file (posix_fadvise), the slower of the two."""
    block = os.urandom(1 << 26)
    n = max(1, int(gb * 1e9) // len(block))
    path = Path(where) / f".das-disk-rate-{os.getpid()}"
    try:
        t0 = time.perf_counter()
        with open(path, "wb") as f:
            for _ in range(n):
                f.write(block)
            f.flush()
            os.fsync(f.fileno())
        write = n * len(block) / (time.perf_counter() - t0)
        with open(path, "rb") as f:
            os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
            t0 = time.perf_counter()
            while f.read(len(block)):
                pass
        read = n * len(block) / (time.perf_counter() - t0)
    finally:
        path.unlink(missing_ok=True)
    return min(write, read) / 1e9


def rates(f: dict) -> dict:
    """Per-person rates and fixed costs from one big-state run's figures (benchmarks.big_state.run_state)."""
    persons = f["persons"]
    below = [k for k in f if k.startswith("persons_") and k.endswith("_cpu_s")
             and k.split("_")[1] not in ("nation", "state")]
    units = [k for k in f if k.startswith("units_") and k.endswith("_cpu_s") and k.split("_")[1] not in ("nation", "state")]
    other = f["driver_cpu_s"] - f.get("read_cpu_s", 0.0) - f.get("states_cpu_s", 0.0) - f.get("validate_cpu_s", 0.0)
    tract_task = f["persons_tract_largest_task_s"]
    return {"A": f["state_A_cpu_s"] / persons, "B": f["state_B_cpu_s"] / persons,
            "B_div": max(0.0, f["state_B_cpu_s"] - f["state_A_cpu_s"]) / persons,
            "C": f["state_C_cpu_s"] / persons, "C_div": sum(f[k] for k in units) / persons,
            "V": f["state_V_cpu_s"] / persons, "V_div": f["state_V_cpu_s"] / persons,
            "V_task_s_per_tract": f["state_V_seconds"] / f["largest_county_tracts"],
            "engine_B": sum(f[k] for k in below) / persons,
            **{f"mb_{s}": f[f"state_{s}_kb_per_person"] / 1024 for s in "ABCV"},
            # the assembly writes its files side by side in threads: its wall time here (2 cores, the workers idle
            # then) bounds a many-core driver's; the rest of the driver's serial work is one thread's CPU
            "serial_per_person": (f.get("assemble_s", f.get("assemble_cpu_s", 0.0)) + f.get("validate_cpu_s", 0.0)
                                  + max(0.0, other)) / persons,
            "top_per_state": f.get("top_measure_cpu_s", 0.0) + f.get("top_solve_cpu_s", 0.0),
            "bytes_per_person": (f["bytes_read"] + f["bytes_written"]) / persons,
            "driver_bytes_per_person": (f["driver_bytes_read"] + f["driver_bytes_written"]) / persons,
            "tract_task_s": tract_task, "tract_task_children": f["persons_tract_largest_children"],
            "below_tract_s": f["persons_block_group_largest_task_s"] + f["persons_block_largest_task_s"],
            "parent_peak_mb": f["largest_parent_peak_mb"], "parent_children": f["largest_parent_children"],
            "driver_peak_mb": f["driver_peak_mb"],
            "efficiency": f.get("engine_efficiency", 0.8),
            "batches_per_person": sum(v for k, v in f.items() if k.endswith("_batches")) / persons}


def critical_paths(r: dict) -> dict[str, float]:
    """Each state's longest chain below it, in seconds: its largest county's tract problem (grown from the measured
    one by PARENT_EXPONENT) and the largest block-group and block batches after it."""
    paths = {}
    for _, (state, tracts) in LARGEST_COUNTIES.items():
        tract = r["tract_task_s"] * (tracts / r["tract_task_children"]) ** PARENT_EXPONENT
        paths[state] = max(paths.get(state, 0.0), tract + r["below_tract_s"])
    return paths


def validation_paths(r: dict, codes: list[str], persons: list[float]) -> list[float]:
    """Each state's longest validation task: its shards are whole counties of at most SHARD_PERSONS persons, so the
    largest county's shard (the measured one grown linearly in tracts) where a state has one of LARGEST_COUNTIES,
    else a shard of SHARD_PERSONS (or the state) at the measured CPU per person."""
    from das.validate.shards import SHARD_PERSONS

    tracts = {state: t for state, t in LARGEST_COUNTIES.values()}
    return [r["V_task_s_per_tract"] * tracts[c] if c in tracts else r["V"] * min(p, SHARD_PERSONS)
            for c, p in zip(codes, persons)]


def _stage_seconds(r: dict, stage: str, persons: list[float], widths: list[int], paths: list[float] | None) -> list[float]:
    """Each state task's seconds: its serial part, its divisible part on its width, at least serial + its longest
    chain of tasks (`paths`, where the stage has them)."""
    divisible = r.get(f"{stage}_div", 0.0)
    serial = r[stage] - divisible
    out = []
    for p, w, path in zip(persons, widths, paths or [0.0] * len(persons)):
        seconds = serial * p + divisible * p / (w * (r["efficiency"] if w > 1 else 1.0))
        out.append(max(seconds, serial * p + path))
    return out


def project(r: dict, target: Target) -> dict:
    """The national wall time on `target`, every term listed (seconds), and whether the largest task fits."""
    from das.driver.admission import DRIVER_MB, TASK_MB_PER_PERSON, WORKER_BASE_MB

    codes = list(target.persons_m)
    persons = [target.persons_m[c] * 1e6 for c in codes]
    total = sum(persons)
    path_of = critical_paths(r)
    paths = {"B": [path_of.get(c, r["below_tract_s"]) for c in codes], "V": validation_paths(r, codes, persons)}
    worker_mb = target.memory_gb_per_worker * 1024
    # a state task is admitted on one worker: the machine's budget less the driver (one machine) and baselines
    alone = (DRIVER_MB if target.workers == 1 else 0.0) + WORKER_BASE_MB * (target.cores_per_worker if target.workers == 1 else 1)
    budget = worker_mb - alone
    out = {"task_budget_gb": budget / 1024}
    wall = 0.0
    for stage in "ABCV":
        if target.workers == 1 and stage in "BCV":  # a wide state: a pool of its own on the machine (V: its shards)
            widths = [max(1, min(target.cores, int(target.cores * p / total))) for p in persons]
        elif stage in "BCV":  # Dask: a state's chunks, batches and shards spread over the whole cluster
            widths = [target.cores] * len(persons)
        else:
            widths = [1] * len(persons)
        seconds = _stage_seconds(r, stage, persons, widths, paths.get(stage))
        memory = [r[f"mb_{stage}"] * p + (w - 1) * WORKER_BASE_MB * (target.workers == 1) for p, w in zip(persons, widths)]
        estimate = [max(TASK_MB_PER_PERSON * p, m) for p, m in zip(persons, memory)]
        slots = [min(w, target.cores_per_worker) if target.workers == 1 else 1 for w in widths]
        if target.workers == 1:
            out[f"stage_{stage}_s"] = makespan(seconds, estimate, target.cores, budget, slots)
        else:  # serial parts one slot each within every worker's budget; divisible parts share all cores
            serial = [r[stage] * p - r.get(f"{stage}_div", 0.0) * p for p in persons]
            spread = sum(r.get(f"{stage}_div", 0.0) * p for p in persons) / (target.cores * r["efficiency"])
            out[f"stage_{stage}_s"] = max(makespan([s + spread / len(persons) for s in serial], estimate,
                                                   target.cores, budget * target.workers), max(seconds))
        out[f"stage_{stage}_largest_s"] = max(seconds)
        out[f"stage_{stage}_largest_gb"] = max(estimate) / 1024
        wall += out[f"stage_{stage}_s"]
    serial = {"top": r["top_per_state"] * len(codes), "driver": r["serial_per_person"] * total,
              "io": r["driver_bytes_per_person"] * total / (target.disk_gb_s * 1e9),
              "dask_tasks": r["batches_per_person"] * total * target.dask_task_s}
    for name, seconds in serial.items():
        out[f"serial_{name}_s"] = seconds
    wall += sum(serial.values())
    # a state task's admission estimate, and beside it on the same worker the largest parent (Los Angeles's tracts,
    # its measured peak grown linearly in tracts: 976 -> 2,400 measured it so), which a cluster may place anywhere
    parent_gb = r["parent_peak_mb"] * max(t for _, t in LARGEST_COUNTIES.values()) / r["parent_children"] / 1024
    largest = max(out[f"stage_{s}_largest_gb"] for s in "ABCV") + parent_gb
    out.update({"h": wall / 3600, "largest_parent_gb": parent_gb, "largest_task_gb": largest,
                "fits": float(largest * 1024 <= budget), "critical_path_s": max(path_of.values())})
    return out


def project_from(f: dict) -> dict:
    """Both targets' projections from one run's figures, prefixed `national_machine_` and `national_cluster_`; the
    one machine's disk at the rate measured on this one (`disk_gb_s` in the figures), when there is one."""
    r = rates(f)
    out = {}
    machine = replace(MACHINE, disk_gb_s=f["disk_gb_s"]) if f.get("disk_gb_s") else MACHINE
    for prefix, target in (("national_machine_", machine), ("national_cluster_", CLUSTER)):
        out.update({prefix + k: v for k, v in project(r, target).items()})
    return out
