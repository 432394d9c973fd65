"""A partitioned run's state tasks, on the workers (das.driver.partitioned is the driver that sends them):

    A  read and check a state's inputs: its true state histograms and bounds (in memory only)
    B  read again, measure county..block into the state's NMF files, solve persons below the state
    C  solve units below the state, write the state's output parts

`Work` is what every task needs, none of it confidential.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from das.core import atomic
from das.core.executors import local_executor
from das.driver import preflight
from das.driver.admission import (
    TASK_MB_PER_PERSON,
)
from das.driver.inputs import Reader, read_partition
from das.driver.pipeline import Pipeline
from das.frame.checkpoint import load_solved, save_arrays, save_solved
from das.frame.lifecycle import output_plan
from das.frame.records import SpineRecord
from das.frame.rundir import RunDir
from das.io import parts as state_parts
from das.io.invariants import write_block_invariants
from das.io.outputs import OutputPlan, Part, write_spine
from das.io.partitions import StateInputs, state_inputs
from das.io.tables import table_widths
from das.model.geography import Geography
from das.model.levels import NATION, STATE
from das.model.rules import Bounds, Invariants, household_persons, level_bounds
from das.model.schema import Schema
from das.topdown.engine import EngineOptions, LevelReport, postprocess
from das.topdown.measure import Measured, Target, measure_release
from das.topdown.problem import FailsafeEvent

TOP = (NATION, STATE)  # the levels the driver measures and solves; the states the rest

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Work:
    """What every state's task needs (no confidential data): levels, schemas, plans, randomness, where to write."""

    levels: tuple[str, ...]
    schemas: dict[str, Schema]
    plans: dict[str, Measured]
    rng: object
    metadata: dict
    run_dir: Path
    engine: EngineOptions  # a state's subtree is solved in its task (on a pool of its own if it is wide)
    outputs: OutputPlan
    memory_mb: float | None = None  # what the state tasks in flight may hold together (None: no limit)
    spread: bool = False  # a state task submits its chunks and batches to the cluster it runs on (Dask)
    spine: str = "standard"  # the spec's [geography] spine (das.model.spine)
    areas: dict[str, Path] = field(default_factory=dict)  # the declared area files (public geography)
    states: tuple[str, ...] = ()  # every state of the run: each reads its own rows of the area files

    @property
    def persons_limit(self) -> float | None:
        """The memory budget as persons in flight (TASK_MB_PER_PERSON each)."""
        return None if self.memory_mb is None else self.memory_mb / TASK_MB_PER_PERSON

    @classmethod
    def of(cls, pipe: Pipeline, run_dir: RunDir, memory_mb: float | None = None, executor=None) -> Work:
        metadata = pipe.metadata()
        return cls(pipe.spec.levels, pipe.schemas, {n: r.measured for n, r in pipe.releases.items()}, pipe.rng,
                   metadata, run_dir.path, pipe.engine_options(workers=1, progress=False),
                   output_plan(pipe.spec, pipe.tables, metadata), memory_mb, getattr(executor, "spreads", False),
                   pipe.spec.spine, dict(pipe.spec.areas),
                   tuple(si.state for si in state_inputs(pipe.spec.persons_path, pipe.spec.units_path)))

    def pool(self, width: int):
        """Where a state task's chunks and batches run: the cluster it runs on (`spread`), a pool of `width`
        processes of its own, or (width 1) the task itself."""
        if self.spread:
            from das.core.distributed import TaskClient

            return TaskClient()
        return local_executor(width)

    @property
    def nmf_dir(self) -> Path:
        return self.files.nmf_dir

    @property
    def files(self) -> RunDir:
        """Where the run's files are: the NMF, and each state's facts, solutions, checkpoints and parts."""
        return RunDir(self.run_dir)

    @property
    def reader(self) -> Reader:
        """How a state task reads its inputs: its own rows of the area files (das.driver.inputs)."""
        return Reader(self.schemas, self.levels, self.spine, self.areas, self.states)

    def below(self) -> tuple[str, ...]:
        return self.levels[len(TOP):]


@dataclass(frozen=True)
class StateTop:
    """A state as the driver sees it after A: size, true state histograms (in memory only), the persons' bounds."""

    state: str
    blocks: int
    truth: dict[str, sp.csr_matrix]  # release -> (1 x cells), confidential: never written
    bounds: list[Bounds]             # the persons' bounds of the state, total population invariant included
    bytes_needed: int = 0            # the disk its part of the release needs (das.driver.preflight.estimate_space)
    spine: SpineRecord | None = None  # the spine's record (the area files' digests), when not the standard one

    @property
    def population(self) -> int:
        return int(next(b for b in self.bounds if b.query == "total").lower[0, 0])


def _read(work: Work, si: StateInputs, preflight=None):
    """A state's inputs read (das.driver.inputs.read_partition), on its part of the spine."""
    return read_partition(work.reader, si.persons, si.units, state=si.state, preflight=preflight)


def read_state(task: tuple[Work, StateInputs]) -> StateTop:
    """A: a state's inputs read and checked (the input preflight passed, the area files checked); only its top
    leaves the worker."""
    work, si = task
    part = _read(work, si, preflight.input_check(work.schemas, {n: m.allocation for n, m in work.plans.items()},
                                                 out_dir=work.run_dir,
                                                 table_columns=table_widths(work.outputs.tables, work.schemas),
                                                 pl94171=work.outputs.pl94171))
    c = part.confidential
    truth = {name: c.geography.aggregate(c.histograms[name], STATE) for name in work.plans}
    return StateTop(si.state, c.n_blocks, truth,
                    level_bounds(work.schemas["persons"], c.invariants, c.geography, level=STATE),
                    part.checked.needed, c.spine_record)


@dataclass(frozen=True)
class StateSolved:
    """B's result: the persons' reports below the state, and the units' bounds of the state (from its household persons)."""

    state: str
    reports: list[LevelReport]
    units_bounds: list[Bounds] | None


def _facts_path(work: Work, state: str) -> Path:
    return work.files.state_facts(state)


def _state_facts(work: Work, state: str) -> tuple[Geography, Invariants]:
    """A state's blocks (in its spine's order), its spine's units and its facts, as B saved them."""
    with np.load(_facts_path(work, state)) as z:
        spine = {lv: z[f"spine_{lv}"] for lv in work.levels if f"spine_{lv}" in z.files}
        geography = Geography(z["blocks"], work.levels, spine) if spine else Geography.from_blocks(z["blocks"], work.levels)
        return geography, Invariants(z["housing_units"], z["gq_facilities"], {})


def _engine(work: Work, state: str, width: int = 1) -> EngineOptions:
    """A state's engine: its own checkpoints and NMF files, and a pool of `width` processes (1: in its task)."""
    return replace(work.engine, checkpoint_dir=work.files.state_checkpoints(state), state=state, workers=width)


def _with_household_persons(work: Work, invariants: Invariants, persons: sp.csr_matrix) -> Invariants:
    """A state's facts for its units: its persons release's household persons bound them."""
    return replace(invariants, household_persons=household_persons(work.schemas["persons"], persons))


def _units_bounds(work: Work, geography: Geography, invariants: Invariants, persons: sp.csr_matrix):
    if "units" not in work.plans:
        return None
    return level_bounds(work.schemas["units"], _with_household_persons(work, invariants, persons), geography,
                        level=STATE)


def measure_state(task: tuple[Work, StateInputs], executor=None) -> tuple[Geography, Invariants]:
    """Read a state again and measure its levels below the state into its own NMF files (committed chunks are
    reused), its chunks drawn on `executor` (a wide state's own pool) or in this process."""
    work, si = task
    confidential = _read(work, si).confidential
    geography, invariants, histograms = confidential.geography, confidential.invariants, confidential.histograms
    for name, measured in work.plans.items():
        measure_release(measured, geography, histograms[name], rng=work.rng,
                        target=Target(work.nmf_dir, metadata=work.metadata, executor=executor, state=si.state),
                        levels=work.below())
    return geography, invariants  # the true counts stay here


def measure_state_task(task: tuple[Work, StateInputs]) -> str:
    """B's measurement as a task: the state measured, its parts of the invariants per block and (when not the
    standard one) of the spine written."""
    work, si = task
    geography, invariants = measure_state(task)
    part = RunDir(work.files.state_dir(si.state))
    part.path.mkdir(parents=True, exist_ok=True)
    if not geography.standard:  # the state's part of the spine, for the driver to assemble
        write_spine(part, geography, work.metadata)
    back = np.argsort(geography.blocks, kind="stable")  # its invariants per block, in geocode order
    write_block_invariants(part, geography.blocks[back], invariants.housing_units[back], invariants.gq_facilities[back],
                           metadata=work.metadata)
    return si.state


def solve_state(task: tuple[Work, StateInputs, sp.csr_matrix, int]) -> StateSolved:
    """B: read the state again, measure its levels below the state, solve the persons below its solved row
    (on `width` processes)."""
    work, si, row, width = task
    solution = work.files.solution("persons", si.state)
    if solution.exists():  # solved before an interruption
        persons, _, meta = load_solved(solution)
        geography, invariants = _state_facts(work, si.state)
        return StateSolved(si.state, [record_report(r) for r in meta["reports"]],
                           _units_bounds(work, geography, invariants, persons))
    pool = work.pool(width)  # a wide state measures and solves on a pool of its own, or on the cluster
    try:
        geography, invariants = measure_state((work, si), pool if width > 1 or work.spread else None)
        persons, reports = postprocess("persons", work.schemas["persons"], geography, invariants, nmf_dir=work.nmf_dir,
                                       options=replace(_engine(work, si.state, width), executor=pool),
                                       start=(STATE, row))
    finally:
        pool.close()
    save_arrays(_facts_path(work, si.state), blocks=geography.blocks, housing_units=invariants.housing_units,
                gq_facilities=invariants.gq_facilities, **{f"spine_{lv}": c for lv, c in geography.spine.items()})
    save_solved(solution, persons, [], {"reports": [report_record(r) for r in reports]})
    return StateSolved(si.state, reports, _units_bounds(work, geography, invariants, persons))


@dataclass(frozen=True)
class StateDone:
    """C's result: the units' reports below the state and the state's output parts."""

    state: str
    reports: list[LevelReport]
    parts: Part


def finish_state(task: tuple[Work, str, sp.csr_matrix | None, int]) -> StateDone:
    """C: the units below the state's solved row (if a units release, on `width` processes), then the
    state's output parts."""
    work, state, row, width = task
    reports_path = work.files.state_reports(state, "units")
    done = state_parts.read_state_parts(work.files.state_parts(state).path)
    if done is not None:
        records = json.loads(reports_path.read_text()) if reports_path.exists() else []
        return StateDone(state, [record_report(r) for r in records], done)
    geography, invariants = _state_facts(work, state)
    persons, _, _ = load_solved(work.files.solution("persons", state))
    solved, reports = {"persons": persons}, []
    if row is not None:
        pool = work.pool(width) if work.spread else None  # else postprocess starts a pool of `width` itself
        try:
            solved["units"], reports = postprocess("units", work.schemas["units"], geography,
                                                   _with_household_persons(work, invariants, persons),
                                                   nmf_dir=work.nmf_dir,
                                                   options=replace(_engine(work, state, width), executor=pool),
                                                   start=(STATE, row))
        finally:
            if pool is not None:
                pool.close()
    atomic.write_text(reports_path, json.dumps([report_record(r) for r in reports]))
    back = np.argsort(geography.blocks, kind="stable")  # the outputs in geocode order, whatever the spine
    written = state_parts.write_state_parts(work.files.state_parts(state).path, work.schemas, geography.blocks[back],
                                            {name: h[back] for name, h in solved.items()},
                                            gq_facilities=invariants.gq_facilities[back], plan=work.outputs,
                                            spine=None if geography.standard else geography,
                                            housing_units=invariants.housing_units[back])
    return StateDone(state, reports, written)


def report_record(report: LevelReport) -> dict:
    """A level's report as the JSON of a solution file (its failsafe events as records)."""
    return {**asdict(report), "failsafe_events": [e.record() for e in report.failsafe_events]}


def record_report(record: dict) -> LevelReport:
    """A level's report read back from a solution file."""
    return LevelReport(**{**record, "failsafe_events": [FailsafeEvent.of_record(e) for e in record["failsafe_events"]],
                          "span": tuple(record.get("span", ()))})
