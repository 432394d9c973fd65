"""What a state task of a partitioned run may hold: its memory estimate (per person of its state, over its
worker's baseline), the machine's budget for the tasks in flight, and the slots a large state solves on."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq

from das.core.errors import RunError, option

# What a state task holds over its worker's baseline, per person of its state, and that baseline:
# measured on VT and DE copies (BENCHMARKS.md scale.partitioned_*: 0.28-0.74 KB a person over a new
# worker's ~130 MB, the modules a task imports included). The driver starts a task only while its
# estimate fits the memory budget.
TASK_MB_PER_PERSON = 0.75 / 1024
WORKER_BASE_MB = 300.0
DRIVER_MB = 500.0


def widths(persons: list[int], executor) -> list[int]:
    """Slots of each state's solving task: its share of the persons of the run times the executor's
    slots (at least 1), so a large state solves on several slots; 1 each where workers cannot start
    pools of their own (Dask)."""
    slots = getattr(executor, "slots", 1)
    if not getattr(executor, "nests", False) or slots < 2:
        return [1] * len(persons)
    total = max(1, sum(persons))
    return [max(1, min(slots, int(slots * p / total))) for p in persons]


def task_budget_mb(memory_gb: float | None, executor) -> float | None:
    """What the state tasks in flight may hold over their workers' baselines: the machine's budget less
    the driver and one baseline per worker slot (None: no budget)."""
    if memory_gb is None:
        return None
    slots = getattr(executor, "slots", 1)
    alone = DRIVER_MB + WORKER_BASE_MB * slots
    if memory_gb * 1024 <= alone:
        raise RunError(f"{option('memory_gb', f'{memory_gb:g}')} leaves nothing for the state tasks: the driver and {slots} "
                       f"workers need about {alone / 1024:.1f} GB alone")
    return memory_gb * 1024 - alone


def worker_budgets(executor) -> dict[str, float] | None:
    """What each worker may hold in state tasks, in persons (the budget's unit): its own memory limit less a
    worker baseline, on an executor whose workers have limits (Dask); None elsewhere, or if a worker has none."""
    limits = getattr(executor, "memory_limits_mb", None)
    found = limits() if limits is not None else {}
    if not found or any(mb is None for mb in found.values()):
        return None
    return {worker: max(0.0, mb - WORKER_BASE_MB) / TASK_MB_PER_PERSON for worker, mb in found.items()}


def input_records(path: Path) -> int:
    """Records of an input file, cheaply: a Parquet file's metadata, or a CSV file's size over its
    first lines' (the memory estimate of a state's first task, before it is read)."""
    if path.suffix.lower() == ".parquet":
        return pq.read_metadata(path).num_rows
    with open(path, "rb") as f:
        head = f.read(1 << 16)
    return int(path.stat().st_size / max(1.0, len(head) / max(1, head.count(b"\n"))))


def task_sizes(persons: list[int], width: list[int]) -> list[float]:
    """A task's memory in persons (the budget's unit): its state's, plus a worker baseline per extra process."""
    return [p + (w - 1) * WORKER_BASE_MB / TASK_MB_PER_PERSON for p, w in zip(persons, width)]
