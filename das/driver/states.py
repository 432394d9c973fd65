"""The tasks of a run's partitions: one state's files of a partitioned run each, on the workers; or the whole
input, held in the driver's process (das.driver.partitioned is the driver that runs them):

    A  read and check a partition's inputs: its top (true histograms and bounds of its states, in memory only)
    B  measure the levels below the driver's top into the partition's NMF files, solve persons below its top
    C  solve units below its top, write its output parts (a state) or hand its solution back (the whole input)

The driver's top is the nation and the states for a partitioned run, nothing for a whole run (its one
partition is rooted at the nation): the same tasks, the same engine calls, whatever the run's shape. A
state's task reads its files again in B; the whole input, held in memory, is read once.
`Work` is what every task needs, none of it confidential.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
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
from das.driver.inputs import Confidential, Reader, read_partition
from das.driver.pipeline import Pipeline, measure_releases
from das.frame.checkpoint import load_solved, save_arrays, save_solved
from das.frame.lifecycle import output_plan
from das.frame.records import PublishedInvariants, SpineRecord
from das.frame.rundir import RunDir
from das.io import parts as state_parts
from das.io.invariants import write_block_invariants
from das.io.outputs import OutputPlan, Part, write_spine
from das.io.partitions import StateInputs
from das.io.tables import table_widths
from das.model.geography import Geography
from das.model.levels import NATION, STATE
from das.model.rules import Bounds, Invariants, household_persons, level_bounds
from das.model.schema import Schema
from das.topdown.engine import EngineOptions, LevelReport, postprocess
from das.topdown.measure import Measured, Target
from das.topdown.problem import FailsafeEvent

TOP = (NATION, STATE)  # the levels the driver measures and solves in a partitioned run; the states the rest

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Work:
    """What every partition's task needs (no confidential data): levels, schemas, plans, randomness, where to
    write, and the driver's top (the levels it measures and solves above the partitions)."""

    levels: tuple[str, ...]
    schemas: dict[str, Schema]
    plans: dict[str, Measured]
    rng: object
    metadata: dict
    run_dir: Path
    engine: EngineOptions  # a partition's subtree is solved in its task (on a pool of its own if it is wide)
    outputs: OutputPlan
    memory_mb: float | None = None  # what the state tasks in flight may hold together (None: no limit)
    spread: bool = False  # a state task submits its chunks and batches to the cluster it runs on (Dask)
    spine: str = "standard"  # the spec's [geography] spine (das.model.spine)
    areas: dict[str, Path] = field(default_factory=dict)  # the declared area files (public geography)
    states: tuple[str, ...] = ()  # every state of a partitioned run: each reads its own rows of the area files
    top: tuple[str, ...] = TOP  # the driver's levels: () when the one partition is the whole input

    @property
    def persons_limit(self) -> float | None:
        """The memory budget as persons in flight (TASK_MB_PER_PERSON each)."""
        return None if self.memory_mb is None else self.memory_mb / TASK_MB_PER_PERSON

    @classmethod
    def of(cls, pipe: Pipeline, run_dir: RunDir, partitions: list[StateInputs], *, memory_mb: float | None = None,
           executor=None, progress: bool = False) -> Work:
        """The work of `partitions` (das.driver.partitioned.partitions: states, or the whole input as one)."""
        metadata, whole = pipe.metadata(), [p.state for p in partitions] == [None]
        return cls(pipe.spec.levels, pipe.schemas, {n: r.measured for n, r in pipe.releases.items()}, pipe.rng,
                   metadata, run_dir.path, pipe.engine_options(workers=1, progress=progress and whole),
                   output_plan(pipe.spec, pipe.tables, metadata), memory_mb, getattr(executor, "spreads", False),
                   pipe.spec.spine, dict(pipe.spec.areas), () if whole else tuple(p.state for p in partitions),
                   () if whole else TOP)

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
        """How a partition's task reads its inputs: a state its own rows of the area files (das.driver.inputs)."""
        return Reader(self.schemas, self.levels, self.spine, self.areas, self.states)

    def below(self) -> tuple[str, ...]:
        """The levels the partitions measure and solve: all but the driver's top."""
        return self.levels[len(self.top):]

    def part(self, state: str | None) -> RunDir:
        """Where a partition's public facts go beside its NMF: a state's directory, or the run's own."""
        return self.files if state is None else RunDir(self.files.state_dir(state))


@dataclass(frozen=True)
class StateTop:
    """A partition as the driver sees it after A: its size, the true histograms of its states and the persons'
    bounds there (in memory only; none for the whole input, which has no top above it), what it publishes
    exactly, and (the whole input) its inputs, held in the driver's process."""

    state: str | None
    blocks: int
    truth: dict[str, sp.csr_matrix]  # release -> (1 x cells), confidential: never written
    bounds: list[Bounds]             # the persons' bounds of the state, total population invariant included
    bytes_needed: int = 0            # the disk its part of the release needs (das.driver.preflight.estimate_space)
    spine: SpineRecord | None = None  # the spine's record (the area files' digests), when not the standard one
    published: PublishedInvariants | None = None  # its totals held exactly (the nation's: its own share)
    kept: Confidential | None = None  # the whole input's, read once (never sent to a worker)

    @property
    def population(self) -> int:
        return int(sum(self.published.total_population[NATION].values()))


def _read(work: Work, si: StateInputs, preflight=None):
    """A partition's inputs read (das.driver.inputs.read_partition), on its part of the spine."""
    return read_partition(work.reader, si.persons, si.units, state=si.state, preflight=preflight)


def read_state(task: tuple[Work, StateInputs]) -> StateTop:
    """A: a partition's inputs read and checked (the input preflight passed, the area files checked); of a state
    only its top leaves the worker, the whole input is kept."""
    work, si = task
    part = _read(work, si, preflight.input_check(work.schemas, {n: m.allocation for n, m in work.plans.items()},
                                                 out_dir=work.run_dir,
                                                 table_columns=table_widths(work.outputs.tables, work.schemas),
                                                 pl94171=work.outputs.pl94171))
    c, level = part.confidential, (work.top or (None,))[-1]
    truth = {name: c.geography.aggregate(c.histograms[name], level) for name in work.plans} if work.top else {}
    bounds = level_bounds(work.schemas["persons"], c.invariants, c.geography, level=level) if work.top else []
    return StateTop(si.state, c.n_blocks, truth, bounds, part.checked.needed, c.spine_record,
                    c.published_invariants(), None if work.top else c)


@dataclass(frozen=True)
class Held:
    """A partition held in the driver's process (the whole input): its inputs, the run's pool for its chunks and
    batches, and where what its measurement reused and drew is reported (an interrupted run's record)."""

    confidential: Confidential
    pool: object
    measured: Callable[[dict], None] | None = None


@dataclass(frozen=True)
class StateSolved:
    """B's result: the persons' reports below the top, the units' bounds of the state (from its household persons),
    and (a partition held in the driver) its solved persons; the seconds it measured and solved."""

    state: str | None
    reports: list[LevelReport]
    units_bounds: list[Bounds] | None
    persons: sp.csr_matrix | None = None
    seconds: dict = field(default_factory=dict)


def _facts_path(work: Work, state: str) -> Path:
    return work.files.state_facts(state)


def _state_facts(work: Work, state: str) -> tuple[Geography, Invariants]:
    """A state's blocks (in its spine's order), its spine's units and its facts, as B saved them."""
    with np.load(_facts_path(work, state)) as z:
        spine = {lv: z[f"spine_{lv}"] for lv in work.levels if f"spine_{lv}" in z.files}
        geography = Geography(z["blocks"], work.levels, spine) if spine else Geography.from_blocks(z["blocks"], work.levels)
        return geography, Invariants(z["housing_units"], z["gq_facilities"], {})


def _engine(work: Work, state: str | None, width: int = 1, pool=None) -> EngineOptions:
    """A partition's engine: its own checkpoints and NMF files (the run's for the whole input), and a pool of
    `width` processes (1: in its task) or `pool`."""
    checkpoints = work.files.checkpoints_dir if state is None else work.files.state_checkpoints(state)
    return replace(work.engine, checkpoint_dir=checkpoints, state=state, workers=width, executor=pool)


def _start(work: Work, row: sp.csr_matrix | None) -> tuple[str, sp.csr_matrix] | None:
    """Where a partition's solve starts: below the driver's top, from its solved rows (none: from the root)."""
    return None if row is None else (work.top[-1], row)


def _with_household_persons(work: Work, invariants: Invariants, persons: sp.csr_matrix) -> Invariants:
    """A partition's facts for its units: its persons release's household persons bound them."""
    return replace(invariants, household_persons=household_persons(work.schemas["persons"], persons))


def _units_bounds(work: Work, geography: Geography, invariants: Invariants, persons: sp.csr_matrix):
    if "units" not in work.plans or not work.top:
        return None
    return level_bounds(work.schemas["units"], _with_household_persons(work, invariants, persons), geography,
                        level=work.top[-1])


def measure_partition(work: Work, si: StateInputs, confidential: Confidential, *,
                      executor=None) -> tuple[dict, list[Path]]:
    """Measure a partition's levels below the driver's top into its NMF files (committed levels and chunks are
    reused, never drawn again), its chunks drawn on `executor` (a pool) or in this process; then write its public
    facts beside them (`write_public_facts`). What each release reused and drew, and the facts' files."""
    report = measure_releases(work.plans, confidential, rng=work.rng, levels=work.below(),
                              target=Target(work.nmf_dir, metadata=work.metadata, executor=executor, state=si.state))
    return report, write_public_facts(work, si.state, confidential)


def write_public_facts(work: Work, state: str | None, confidential: Confidential) -> list[Path]:
    """A partition's public facts beside its NMF: the invariants per block and (when not the standard one) the spine,
    in geocode order, into the run directory (the whole input: with them das postprocess finishes the release
    from public files alone, also when post-processing here stops) or the state's directory (the driver assembles
    them). Their files."""
    part = work.part(state)
    part.path.mkdir(parents=True, exist_ok=True)
    standard = confidential.solved_release(work.schemas, {})  # in geocode order, whatever the spine
    invariants = write_block_invariants(part, standard.geography.blocks, standard.housing_units,
                                        standard.gq_facilities, metadata=work.metadata)
    if confidential.geography.standard:
        return [invariants]
    return [write_spine(part, confidential.geography, work.metadata), invariants]


def measure_state_task(task: tuple[Work, StateInputs]) -> str:
    """B's measurement alone (das measure): a state read, measured, its public facts written."""
    work, si = task
    measure_partition(work, si, _read(work, si).confidential)
    return si.state


def solve_state(task: tuple[Work, StateInputs, sp.csr_matrix | None, int, Held | None]) -> StateSolved:
    """B: a partition measured below the driver's top and its persons solved below its solved rows (`row`; None:
    from the root), on `width` processes or (held in the driver) the run's pool. A state reads its files again
    and keeps its facts and solution for C and for resume; a held partition hands its solution back."""
    work, si, row, width, held = task
    solution = work.files.solution("persons", si.state)
    if held is None and solution.exists():  # solved before an interruption
        persons, _, meta = load_solved(solution)
        geography, invariants = _state_facts(work, si.state)
        return StateSolved(si.state, [record_report(r) for r in meta["reports"]],
                           _units_bounds(work, geography, invariants, persons))
    pool = held.pool if held else work.pool(width)  # a wide state measures and solves on a pool of its own
    try:
        t0 = time.perf_counter()
        confidential = held.confidential if held else _read(work, si).confidential
        measured, _ = measure_partition(work, si, confidential,
                                        executor=pool if held or width > 1 or work.spread else None)
        if held and held.measured:
            held.measured(measured)
        geography, invariants = confidential.geography, confidential.invariants  # the true counts stay here
        t1 = time.perf_counter()
        persons, reports = postprocess("persons", work.schemas["persons"], geography, invariants, nmf_dir=work.nmf_dir,
                                       options=_engine(work, si.state, width, pool), start=_start(work, row))
        seconds = {"measure": t1 - t0, "postprocess_persons": time.perf_counter() - t1}
    finally:
        if held is None:
            pool.close()
    if held is None:
        save_arrays(_facts_path(work, si.state), blocks=geography.blocks, housing_units=invariants.housing_units,
                    gq_facilities=invariants.gq_facilities, **{f"spine_{lv}": c for lv, c in geography.spine.items()})
        save_solved(solution, persons, [], {"reports": [report_record(r) for r in reports]})
    return StateSolved(si.state, reports, _units_bounds(work, geography, invariants, persons),
                       persons if held else None, seconds)


@dataclass(frozen=True)
class StateDone:
    """C's result: the units' reports below the top and the state's output parts, or (a partition held in the
    driver) its solved histograms by release."""

    state: str | None
    reports: list[LevelReport]
    parts: Part | None
    solved: dict[str, sp.csr_matrix] | None = None


def _solve_units(work: Work, state: str | None, facts: tuple[Geography, Invariants], persons: sp.csr_matrix, *,
                 row, width: int, pool) -> tuple[sp.csr_matrix, list[LevelReport]]:
    """The units below the partition's solved row (None: from the root), bounded by its household persons."""
    geography, invariants = facts
    return postprocess("units", work.schemas["units"], geography, _with_household_persons(work, invariants, persons),
                       nmf_dir=work.nmf_dir, options=_engine(work, state, width, pool), start=_start(work, row))


def finish_state(task: tuple[Work, StateSolved, sp.csr_matrix | None, int, Held | None]) -> StateDone:
    """C: a partition's units solved below its solved row (None: from the root), if a units release, on `width`
    processes or (held in the driver) the run's pool; then a state's output parts, or the held partition's solved
    histograms handed back for the driver to write."""
    work, b, row, width, held = task
    if held is None:
        done = state_parts.read_state_parts(work.files.state_parts(b.state).path)
        if done is not None:  # written before an interruption
            path = work.files.state_reports(b.state, "units")
            return StateDone(b.state, [record_report(r) for r in json.loads(path.read_text())] if path.exists() else [],
                             done)
    facts = (held.confidential.geography, held.confidential.invariants) if held else _state_facts(work, b.state)
    persons = b.persons if held else load_solved(work.files.solution("persons", b.state))[0]
    solved, reports = {"persons": persons}, []
    if "units" in work.plans:
        pool = held.pool if held else work.pool(width) if work.spread else None  # else postprocess starts a pool
        try:
            solved["units"], reports = _solve_units(work, b.state, facts, persons, row=row, width=width, pool=pool)
        finally:
            if pool is not None and held is None:
                pool.close()
    if held:
        return StateDone(None, reports, None, solved)
    atomic.write_text(work.files.state_reports(b.state, "units"), json.dumps([report_record(r) for r in reports]))
    return StateDone(b.state, reports, _write_parts(work, b.state, facts, solved))


def _write_parts(work: Work, state: str, facts: tuple[Geography, Invariants], solved: dict) -> Part:
    """A state's output parts (das.io.parts), in geocode order whatever the spine."""
    geography, invariants = facts
    back = np.argsort(geography.blocks, kind="stable")
    return state_parts.write_state_parts(work.files.state_parts(state).path, work.schemas, geography.blocks[back],
                                         {name: h[back] for name, h in solved.items()},
                                         gq_facilities=invariants.gq_facilities[back], plan=work.outputs,
                                         spine=None if geography.standard else geography,
                                         housing_units=invariants.housing_units[back])


def report_record(report: LevelReport) -> dict:
    """A level's report as the JSON of a solution file (its failsafe events as records)."""
    return {**asdict(report), "failsafe_events": [e.record() for e in report.failsafe_events]}


def record_report(record: dict) -> LevelReport:
    """A level's report read back from a solution file."""
    return LevelReport(**{**record, "failsafe_events": [FailsafeEvent.of_record(e) for e in record["failsafe_events"]],
                          "span": tuple(record.get("span", ()))})
