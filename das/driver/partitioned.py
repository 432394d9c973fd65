"""A partitioned run: the driver holds the nation and the states, the workers everything below.

With inputs given as one file per state (das.io.partitions), a run goes

    per state  A  read and check the inputs: the state's true histograms and bounds (in memory only)
    driver        charge the whole plan; measure the nation and the states; solve them (persons)
    per state  B  read again, measure county..block into the state's NMF files, solve persons below the state
    driver        solve the units' nation and states (their bounds need the persons' household persons)
    per state  C  solve units below the state, write the state's output parts
    driver        assemble the release files from the parts, streaming (das.io.parts)

so the driver's memory follows the number of states, and a worker's the largest state; a large
state solves on several slots (a pool of its own, `widths`), so few large states still use every
core. No noise
is drawn before every state's inputs have passed A. A state's chunks draw from streams named by
the state; on resume every NMF file and committed chunk, solved level and batch, and state's
parts is reused, never drawn or solved again. The operator files of each state (its facts, its
solution, its parts) live under checkpoints/states/<state>/ and go with the checkpoints.
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import scipy.sparse as sp

from das.core import atomic
from das.core.errors import RunError, option
from das.core.executors import largest_first, local_executor
from das.driver import preflight
from das.driver.pipeline import Confidential, Pipeline
from das.frame.checkpoint import load_solved, save_arrays, save_solved
from das.frame.lifecycle import output_plan
from das.frame.manifest import PublishedInvariants, SpineRecord
from das.frame.rundir import RunDir, nmf_level_path
from das.io import nmf
from das.io import parts as state_parts
from das.io.areas import Scope, read_areas
from das.io.microdata import read_inputs
from das.io.outputs import NationRelease, OutputPlan, Part, assemble_spine, write_spine
from das.io.partitions import PartitionError, StateInputs, state_inputs
from das.io.tables import table_widths
from das.model.geography import Geography
from das.model.rules import Bounds, Invariants, household_persons, level_bounds
from das.model.schema import Schema
from das.model.spine import spine_geography
from das.privacy.accounting import PrivacyAccountant
from das.topdown.engine import (
    BatchReads,
    BatchTask,
    ChildLimits,
    EngineOptions,
    Family,
    LevelReport,
    postprocess,
    timed_solve_batch,
)
from das.topdown.measure import Measured, Target, charge, measure_level, measure_release
from das.topdown.optimality import merge_certificates
from das.topdown.problem import FailsafeEvent
from das.topdown.solve import solve_root

TOP = ("nation", "state")  # the levels the driver measures and solves
# What a state task holds over its worker's baseline, per person of its state, and that baseline:
# measured on VT and DE copies (BENCHMARKS.md scale.partitioned_*: 0.28-0.74 KB a person over a new
# worker's ~130 MB, the modules a task imports included). The driver starts a task only while its
# estimate fits the memory budget.
TASK_MB_PER_PERSON = 0.75 / 1024
WORKER_BASE_MB = 300.0
DRIVER_MB = 500.0

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


@dataclass
class Tops:
    """The states of a partitioned run after A, in FIPS order: what the driver holds."""

    inputs: list[StateInputs]
    states: list[StateTop]

    def published_invariants(self) -> PublishedInvariants:
        totals = {s.state: s.population for s in self.states}
        return PublishedInvariants({"nation": {"": sum(totals.values())}, "state": totals})

    @property
    def n_blocks(self) -> int:
        return sum(s.blocks for s in self.states)

    @property
    def persons(self) -> list[int]:
        return [s.population for s in self.states]

    @property
    def spine_record(self) -> SpineRecord | None:
        """The spine the states are measured on (every state reads the same area files)."""
        return self.states[0].spine if self.states else None


def check_levels(levels: tuple[str, ...]) -> None:
    if tuple(levels[:len(TOP)]) != TOP or len(levels) <= len(TOP):
        raise PartitionError(f"a partitioned run needs the levels to start {' > '.join(TOP)} (the driver solves "
                             f"those, the states the rest); this spec has {' > '.join(levels)}")


# ---------------------------------------------------------------------------------------------
# A: read and check each state's inputs (workers)


def _read(work: Work, si: StateInputs):
    inputs = read_inputs(si.persons, si.units, work.schemas["persons"], work.schemas.get("units"))
    geography = Geography.from_blocks(inputs.inventory.blocks, work.levels)
    found = geography.units("state").tolist()
    if found != [si.state]:
        raise PartitionError(f"{si.units}: holds blocks of state(s) {', '.join(found)}; the file is named for state "
                             f"{si.state} and must hold only that state's blocks")
    invariants = Invariants.from_inputs(inputs.inventory, inputs.person_histograms, geography)
    return inputs, geography, invariants


def _spine(work: Work, si: StateInputs, geography: Geography) -> tuple[Geography, SpineRecord | None]:
    """The state's part of the spine: its rows of the area files (checked against its blocks) and its units."""
    if work.spine == "standard":
        return geography, None
    areas = read_areas(work.areas, geography.blocks, scope=Scope(si.state, work.states))
    return (spine_geography(work.spine, geography, areas.ids),
            SpineRecord(work.spine, {t: f.sha256 for t, f in areas.files.items()}))


def _on_spine(work: Work, si: StateInputs):
    """A state's inputs read, with its blocks, histograms and facts in the order of its spine."""
    inputs, geography, invariants = _read(work, si)
    histograms = {"persons": inputs.person_histograms, "units": inputs.unit_histograms}
    confidential = Confidential(geography, invariants, histograms).on_spine(_spine(work, si, geography)[0])
    return confidential.geography, confidential.invariants, confidential.histograms


def read_state(task: tuple[Work, StateInputs]) -> StateTop:
    """A: a state's inputs read and checked (and the input preflight passed); only its top leaves the worker."""
    work, si = task
    inputs, geography, invariants = _read(work, si)
    space = preflight.check_inputs(work.schemas, inputs, geography, {n: m.plan for n, m in work.plans.items()},
                                   out_dir=work.run_dir, table_columns=table_widths(work.outputs.tables, work.schemas),
                                   pl94171=work.outputs.pl94171)
    _, spine = _spine(work, si, geography)  # the area files checked here too, before any noise
    histograms = {"persons": inputs.person_histograms, "units": inputs.unit_histograms}
    truth = {name: geography.aggregate(histograms[name], "state") for name in work.plans}
    return StateTop(si.state, geography.n_blocks, truth,
                    level_bounds(work.schemas["persons"], invariants, geography, level="state"), space.needed, spine)


def read_states(pipe: Pipeline, run_dir: RunDir, executor, memory_gb: float | None = None) -> Tops:
    """A for every state, largest first; no noise is drawn until all have passed."""
    t0 = time.perf_counter()
    check_levels(pipe.spec.levels)
    inputs = state_inputs(pipe.spec.persons_path, pipe.spec.units_path)
    work = Work.of(pipe, run_dir, task_budget_mb(memory_gb, executor), executor)
    persons = [input_records(si.persons) for si in inputs]
    tops = Tops(inputs, largest_first(executor, read_state, [(work, si) for si in inputs], sizes=persons,
                                      limit=work.persons_limit, places=worker_budgets(executor),
                                      desc="reading the states"))
    where = preflight.nearest_existing(run_dir.path)  # every state's files together, before any noise
    preflight.check_space(preflight.SpaceEstimate(sum(s.bytes_needed for s in tops.states),
                                                  shutil.disk_usage(where).free, where), run_dir.path,
                          pl94171=work.outputs.pl94171)
    pipe.timings["read_inputs"] = time.perf_counter() - t0
    logger.info(f"read {sum(s.population for s in tops.states):,} persons in {tops.n_blocks:,} blocks of "
             f"{len(inputs)} state(s) ({pipe.timings['read_inputs']:.1f} s)")
    return tops


# ---------------------------------------------------------------------------------------------
# The driver's top: measure and solve the nation and the states


def measure_top(pipe: Pipeline, tops: Tops, nmf_dir: Path) -> None:
    """Charge each release's whole plan (before any draw), then measure its nation and states."""
    codes = np.array([s.state for s in tops.states])
    for name, r in pipe.releases.items():
        accountant = PrivacyAccountant.for_allocation(r.allocation)
        charge(accountant, r.plan, pipe.spec.levels)  # every level's, the states' below included
        if accountant.spent != r.allocation.rho:
            raise RunError(f"{name}: planned rho {accountant.spent} differs from the certified {r.allocation.rho}")
        states = sp.vstack([s.truth[name] for s in tops.states], format="csr")
        truth = {"nation": sp.csr_matrix(states.sum(axis=0)), "state": states}
        for level, geocodes in (("nation", np.array([""])), ("state", codes)):
            target = Target(nmf_dir, metadata=pipe.metadata())
            if not target.level_path(name, level).exists():  # a level committed before an interruption is kept
                measure_level(r.measured, level, truth[level], geocodes, rng=pipe.rng, target=target)


def _summed(families: list[list[Bounds]]) -> list[Bounds]:
    """The nation's bounds: the states' summed (every bound is a sum over blocks)."""
    return [Bounds(f[0].query, sum(b.lower for b in f), sum(b.upper for b in f), f[0].rule) for f in zip(*families)]


def _stacked(families: list[list[Bounds]]) -> list[Bounds]:
    return [Bounds(f[0].query, np.vstack([b.lower for b in f]), np.vstack([b.upper for b in f]), f[0].rule)
            for f in zip(*families)]


def solve_top(name: str, schema: Schema, codes: np.ndarray, bounds: list[list[Bounds]], *, nmf_dir: Path,
              options: EngineOptions, checkpoint: Path) -> tuple[sp.csr_matrix, list[LevelReport]]:
    """The nation (a root problem) and the states (one parent's children), from the top NMF files."""
    if checkpoint.exists():
        states, _, meta = load_solved(checkpoint)
        return states, [_report(r) for r in meta["reports"]]
    t0 = time.perf_counter()
    noisy = nmf.read_level(nmf_level_path(nmf_dir, name, "nation"), np.array([""]))
    root = solve_root(schema, list(noisy.values()), _summed(bounds), settings=options.settings("nation"))
    nation = sp.csr_matrix(root.counts.reshape(1, -1))
    reports = [LevelReport("nation", 1, time.perf_counter() - t0, list(root.events),
                           merge_certificates([root.certificate]))]
    t1 = time.perf_counter()
    index = nmf.level_index(nmf_level_path(nmf_dir, name, "state"), len(codes))
    task = BatchTask(Family(schema, np.array([""]), nation, codes, np.array([0, len(codes)])),
                     BatchReads(index, 0, len(codes)), ChildLimits(given=_stacked(bounds)), options.settings("state"))
    states, events, l2, figures = timed_solve_batch(task)
    reports.append(LevelReport("state", 1, time.perf_counter() - t1, events, l2, [figures]))
    save_solved(checkpoint, states, [], {"reports": [_record(r) for r in reports]})
    return states, reports


def _record(report: LevelReport) -> dict:
    return {**asdict(report), "failsafe_events": [e.record() for e in report.failsafe_events]}


def _report(record: dict) -> LevelReport:
    return LevelReport(**{**record, "failsafe_events": [FailsafeEvent.of_record(e) for e in record["failsafe_events"]],
                          "span": tuple(record.get("span", ()))})


# ---------------------------------------------------------------------------------------------
# B and C: each state below the top (workers)


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


def widths(persons: list[int], executor) -> list[int]:
    """Slots of each state's solving task: its share of the persons of the run times the executor's
    slots (at least 1), so a large state solves on several slots; 1 each where workers cannot start
    pools of their own (Dask)."""
    slots = getattr(executor, "slots", 1)
    if not getattr(executor, "nests", False) or slots < 2:
        return [1] * len(persons)
    total = max(1, sum(persons))
    return [max(1, min(slots, int(slots * p / total))) for p in persons]


def _with_household_persons(work: Work, invariants: Invariants, persons: sp.csr_matrix) -> Invariants:
    """A state's facts for its units: its persons release's household persons bound them."""
    return replace(invariants, household_persons=household_persons(work.schemas["persons"], persons))


def _units_bounds(work: Work, geography: Geography, invariants: Invariants, persons: sp.csr_matrix):
    if "units" not in work.plans:
        return None
    return level_bounds(work.schemas["units"], _with_household_persons(work, invariants, persons), geography,
                        level="state")


def measure_state(task: tuple[Work, StateInputs], executor=None) -> tuple[Geography, Invariants]:
    """Read a state again and measure its levels below the state into its own NMF files (committed chunks are
    reused), its chunks drawn on `executor` (a wide state's own pool) or in this process."""
    work, si = task
    geography, invariants, histograms = _on_spine(work, si)
    for name, measured in work.plans.items():
        measure_release(measured, geography, histograms[name], rng=work.rng,
                        target=Target(work.nmf_dir, metadata=work.metadata, executor=executor, state=si.state),
                        levels=work.below())
    return geography, invariants  # the true counts stay here


def measure_states(pipe: Pipeline, run_dir: RunDir, tops: Tops, executor) -> list[Path]:
    """`das measure` of a partitioned run: the top, then every state's levels below it, largest first; and the
    spine they were measured on, when not the standard one (the states' parts of it assembled): its file."""
    work = Work.of(pipe, run_dir)
    measure_top(pipe, tops, run_dir.nmf_dir)
    largest_first(executor, _measured, [(work, si) for si in tops.inputs], sizes=tops.persons, desc="measuring the states")
    if work.spine == "standard":
        return []
    return [assemble_spine(run_dir, [RunDir(work.files.state_dir(si.state)) for si in tops.inputs], work.metadata)]


def _measured(task: tuple[Work, StateInputs]) -> str:
    work, si = task
    geography, _ = measure_state(task)
    if not geography.standard:  # the state's part of the spine, for the driver to assemble
        work.files.state_dir(si.state).mkdir(parents=True, exist_ok=True)
        write_spine(RunDir(work.files.state_dir(si.state)), geography, work.metadata)
    return si.state


def solve_state(task: tuple[Work, StateInputs, sp.csr_matrix, int]) -> StateSolved:
    """B: read the state again, measure its levels below the state, solve the persons below its solved row
    (on `width` processes)."""
    work, si, row, width = task
    solution = work.files.solution("persons", si.state)
    if solution.exists():  # solved before an interruption
        persons, _, meta = load_solved(solution)
        geography, invariants = _state_facts(work, si.state)
        return StateSolved(si.state, [_report(r) for r in meta["reports"]],
                           _units_bounds(work, geography, invariants, persons))
    pool = work.pool(width)  # a wide state measures and solves on a pool of its own, or on the cluster
    try:
        geography, invariants = measure_state((work, si), pool if width > 1 or work.spread else None)
        persons, reports = postprocess("persons", work.schemas["persons"], geography, invariants, nmf_dir=work.nmf_dir,
                                       options=replace(_engine(work, si.state, width), executor=pool),
                                       start=("state", row))
    finally:
        pool.close()
    save_arrays(_facts_path(work, si.state), blocks=geography.blocks, housing_units=invariants.housing_units,
                gq_facilities=invariants.gq_facilities, **{f"spine_{lv}": c for lv, c in geography.spine.items()})
    save_solved(solution, persons, [], {"reports": [_record(r) for r in reports]})
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
        return StateDone(state, [_report(r) for r in records], done)
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
                                                   start=("state", row))
        finally:
            if pool is not None:
                pool.close()
    atomic.write_text(reports_path, json.dumps([_record(r) for r in reports]))
    back = np.argsort(geography.blocks, kind="stable")  # the outputs in geocode order, whatever the spine
    written = state_parts.write_state_parts(work.files.state_parts(state).path, work.schemas, geography.blocks[back],
                                            {name: h[back] for name, h in solved.items()},
                                            gq_facilities=invariants.gq_facilities[back], plan=work.outputs,
                                            spine=None if geography.standard else geography,
                                            housing_units=invariants.housing_units[back])
    return StateDone(state, reports, written)


# ---------------------------------------------------------------------------------------------
# The driver


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


def _task_sizes(persons: list[int], width: list[int]) -> list[float]:
    """A task's memory in persons (the budget's unit): its state's, plus a worker baseline per extra process."""
    return [p + (w - 1) * WORKER_BASE_MB / TASK_MB_PER_PERSON for p, w in zip(persons, width)]


def merge_reports(top: list[LevelReport], states: list[list[LevelReport]]) -> list[LevelReport]:
    """One report per level: the driver's top levels, then each level below summed over the states."""
    merged = list(top)
    by_level: dict[str, list[LevelReport]] = {}
    for reports in states:
        for r in reports:
            by_level.setdefault(r.level, []).append(r)
    for level, reports in by_level.items():
        spans = [r.span for r in reports if r.span]  # each from its own state's start: the longest
        merged.append(LevelReport(level, sum(r.parents for r in reports), max(r.seconds for r in reports),
                                  [e for r in reports for e in r.failsafe_events],
                                  merge_certificates(r.certificate for r in reports),
                                  [t for r in reports for t in r.tasks],
                                  (min(a for a, _ in spans), max(b for _, b in spans)) if spans else ()))
    return merged


def run_states(pipe: Pipeline, run_dir: RunDir, tops: Tops, executor, *,
               memory_gb: float | None = None) -> tuple[dict, dict[str, list[LevelReport]], dict[str, list[Path]]]:
    """Everything after A: the top measured and solved, B and C on the workers, the release assembled.
    Returns the nation's solved histograms (per release), the level reports and the files written
    (by manifest field, das.io.parts.assemble)."""
    work, nmf_dir = Work.of(pipe, run_dir, task_budget_mb(memory_gb, executor), executor), run_dir.nmf_dir
    places = worker_budgets(executor)
    codes = np.array([s.state for s in tops.states])
    options = pipe.engine_options()

    t0 = time.perf_counter()
    measure_top(pipe, tops, nmf_dir)
    persons, top_persons = solve_top("persons", pipe.schemas["persons"], codes, [s.bounds for s in tops.states],
                                     nmf_dir=nmf_dir, options=options, checkpoint=run_dir.solution("persons"))
    width = widths(tops.persons, executor)
    solved_b = largest_first(executor, solve_state,
                             [(work, si, persons[i], width[i]) for i, si in enumerate(tops.inputs)],
                             sizes=_task_sizes(tops.persons, width), limit=work.persons_limit, widths=width,
                             places=places, desc="measuring and solving the states")
    pipe.timings["measure_and_postprocess_persons"] = time.perf_counter() - t0
    logger.info(f"measured and post-processed persons in {len(codes)} state(s) "
             f"({pipe.timings['measure_and_postprocess_persons']:.1f} s)")
    reports = {"persons": merge_reports(top_persons, [s.reports for s in solved_b])}
    nation = {"persons": sp.csr_matrix(persons.sum(axis=0))}

    t0 = time.perf_counter()
    units_rows = [None] * len(codes)
    if "units" in pipe.releases:
        units, top_units = solve_top("units", pipe.schemas["units"], codes, [s.units_bounds for s in solved_b],
                                     nmf_dir=nmf_dir, options=options, checkpoint=run_dir.solution("units"))
        units_rows = [units[i] for i in range(len(codes))]
        nation["units"] = sp.csr_matrix(units.sum(axis=0))
    done = largest_first(executor, finish_state, [(work, s, units_rows[i], width[i]) for i, s in enumerate(codes)],
                         sizes=_task_sizes(tops.persons, width), limit=work.persons_limit, widths=width,
                         places=places, desc="writing the states")
    if "units" in pipe.releases:
        reports["units"] = merge_reports(top_units, [d.reports for d in done])
    pipe.timings["postprocess_units_and_parts"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    outputs = state_parts.assemble(run_dir, [d.parts for d in done], NationRelease(pipe.schemas, nation), work.outputs)
    pipe.timings["write_outputs"] = time.perf_counter() - t0
    return nation, reports, outputs

