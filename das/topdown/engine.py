"""TopDown engine: solve the nation, then every parent of every level, in parallel, top-down.

For each parent the engine gathers, from the NMF of the child level, the children's noisy
answers restricted to the cells that are nonzero in the solved parent; from the invariants, the
children's structural zeros and bounds; and hands the problem to `solve_parent`. Children's
solutions become the parents of the next level. A level is cut into batches of whole parents;
a batch is the unit of parallel work (`solve_batch`, on a local pool or Dask: das.core.executors) and
of checkpointing (das.frame.checkpoint), so neither the driver nor a worker holds a whole level's
noisy answers. A batch starts as soon as the batches that solve its parents are done (no level
barrier), the batch with the most blocks below it first: the critical path starts early.

With `rounding=NO_ROUNDING` (das.topdown.rounding) no level is rounded: each level's fractional solution (float64)
is the parents of the next, and the blocks are nonnegative least squares of the NMF without rounding, a research
estimator to compare with the integral release (the persons release; never checkpointed, never a release).
"""

from __future__ import annotations

import heapq
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from das.core.executors import IN_FLIGHT_PER_SLOT, first_done, local_executor
from das.core.progress import bar
from das.frame.checkpoint import Checkpoints, crash_point, load_solved, save_solved
from das.frame.rundir import nmf_level_path
from das.io import nmf
from das.model.geography import Geography
from das.model.rules import Invariants, block_range, level_bounds, population_total
from das.model.schema import Schema
from das.topdown.batch import (
    BATCH_CHILDREN,
    BatchReads,
    BatchTask,
    ChildLimits,
    Family,
    parent_batches,
    read_single_children,
    single_child_chains,
    timed_solve_batch,
)
from das.topdown.optimality import merge_certificates
from das.topdown.problem import DEFAULT_PASSES, FailsafeEvent
from das.topdown.rounding import DEFAULT_ROUNDING, NO_ROUNDING, check_engine_rounding
from das.topdown.solve import SolveSettings, solve_root
from das.topdown.solvers import DEFAULT_SOLVER


@dataclass
class EngineOptions:
    workers: int = 1
    solver: str = DEFAULT_SOLVER
    rounding: str = DEFAULT_ROUNDING  # or NO_ROUNDING: fractional levels (research), float64 blocks
    progress: bool = True
    passes: tuple[tuple[str, ...], ...] = DEFAULT_PASSES  # query names per L2 pass; () = all remaining
    passes_by_level: dict = field(default_factory=dict)  # level -> its own passes (e.g. the root's)
    executor: object | None = None  # das.core.executors (local pool, Dask); None: a local pool of `workers`
    checkpoint_dir: Path | None = None  # solved levels and batches, for resume; None: no checkpoints
    batch_children: int = BATCH_CHILDREN  # children read and checkpointed together
    state: str | None = None  # a state of a partitioned run: read its own NMF files (das.frame.rundir.nmf_level_path)

    def passes_for(self, level: str) -> tuple[tuple[str, ...], ...]:
        """The L2 passes of the problems that solve the geounits of `level`."""
        return self.passes_by_level.get(level, self.passes)

    def settings(self, level: str) -> SolveSettings:
        """How the parents whose children are the geounits of `level` are solved."""
        return SolveSettings(self.solver, self.rounding, self.passes_for(level))

    def check(self) -> None:
        """Nothing, or ValueError: an unknown rounding, or NO_ROUNDING with checkpoints (they hold integral
        levels, and record no rounding: a resumed call would take an integral run's levels for its own)."""
        check_engine_rounding(self.rounding)
        if self.rounding == NO_ROUNDING and self.checkpoint_dir is not None:
            raise ValueError(f"rounding {NO_ROUNDING!r} (fractional levels, no rounding) cannot use a checkpoint_dir: "
                             "checkpoints hold integral levels; run it without checkpoints")


@dataclass
class LevelReport:
    level: str
    parents: int
    seconds: float
    failsafe_events: list = field(default_factory=list)
    certificate: dict = field(default_factory=dict)  # L2 duality gaps summed over the level's parents
    tasks: list = field(default_factory=list)  # per batch run here: parents, children, worker seconds and CPU
    span: tuple = ()  # (started, complete): seconds from the start of the release's post-processing


def task_summary(report: LevelReport) -> dict:
    """A level's batches in a few figures (for the manifest): how many ran, the largest, their CPU, its span."""
    tasks = report.tasks
    summary = {"run": len(tasks), "largest_seconds": max((t["seconds"] for t in tasks), default=0.0),
               "largest_children": max((t["children"] for t in tasks), default=0),
               "cpu_seconds": sum(t["cpu_seconds"] for t in tasks)}
    if report.span:
        summary["started_s"], summary["complete_s"] = report.span
    return summary


def level_detail(report: LevelReport, geography: Geography | None = None) -> str:
    """A level's post-processing in one line for the operator's `-v` log (stderr, never a public file): parents and
    least-squares problems, the largest parent (from `geography`; without it, the largest batch), the largest relative
    duality gap, retries, failsafe events and its time.

    >>> level_detail(LevelReport("tract", 2, 0.25, certificate={"problems": 1, "max_rel_gap": 6e-10})).split(", ")[:3]
    ['tract: 2 parent(s)', '1 least-squares problem(s)', 'largest relative duality gap 6.0e-10']
    """
    cert, tasks = report.certificate, task_summary(report)
    parent_level = geography.parent_level(report.level) if geography is not None else None
    if parent_level is not None:
        children = np.diff(geography.child_ranges(parent_level))
        largest = int(np.argmax(children))
        name = f"{parent_level} {geography.units(parent_level)[largest]}".strip()  # the nation's geocode is empty
        where = f", largest parent {name} ({children[largest]:,} children)"
    else:
        where = f", largest batch {tasks['largest_children']:,} children" if tasks["run"] else ""
    return (f"{report.level}: {report.parents:,} parent(s), {cert.get('problems', 0):,} least-squares problem(s)"
            f"{where}, largest relative duality gap {cert.get('max_rel_gap', 0.0):.1e}, {cert.get('retried', 0)} "
            f"retried, {cert.get('uncertified', 0)} above tolerance, {len(report.failsafe_events)} failsafe; "
            f"{report.seconds:.2f} s in {tasks['run']} batch(es)"
            + (f" ({tasks['cpu_seconds']:.2f} CPU-s, the longest {tasks['largest_seconds']:.2f} s)" if tasks["run"] else ""))


@dataclass(frozen=True)
class _Release:
    """What postprocess works on: one release's schema, geography, invariants, NMF and options."""

    name: str
    schema: Schema
    geography: Geography
    invariants: Invariants
    nmf_dir: Path
    options: EngineOptions

    def nmf_file(self, level: str) -> Path:
        """The NMF file of a level this release reads (a state's own below the state, in a partitioned run)."""
        return nmf_level_path(self.nmf_dir, self.name, level, self.options.state)


def _stack(parts: list[sp.csr_matrix], n_cols: int) -> sp.csr_matrix:
    return sp.vstack(parts, format="csr") if parts else sp.csr_matrix((0, n_cols), dtype=np.int64)


def _overlapping(bounds: np.ndarray, lo: int, hi: int) -> range:
    """Indices j of the consecutive ranges bounds[j]..bounds[j+1]-1 that meet lo..hi-1."""
    return range(int(np.searchsorted(bounds, lo, side="right")) - 1, int(np.searchsorted(bounds, hi, side="left")))


@dataclass
class _Level:
    """A level being solved: its batches (ranges of its parents), their results, and what each still waits for."""

    name: str
    parents: np.ndarray        # batch b solves parents parents[b]..parents[b+1]-1 of the parent level
    units: np.ndarray          # ... and gives units units[b]..units[b+1]-1 of this level
    key: str                   # the batching, for checkpoints
    index: nmf.LevelIndex
    waiting: np.ndarray        # per batch: batches of the parent level not yet solved that it needs
    blocks: np.ndarray         # per batch: blocks under its units (its priority: largest subtree first)
    results: dict = field(default_factory=dict)  # batch -> (solved, events, l2 certificate, task figures)
    started: float | None = None

    @property
    def n_batches(self) -> int:
        return len(self.parents) - 1

    @property
    def complete(self) -> bool:
        return len(self.results) == self.n_batches

    def rows(self, lo: int, hi: int) -> sp.csr_matrix:
        """Solved rows lo..hi-1 of this level, from the batches that hold them (all solved)."""
        parts = [self.results[j][0][max(lo, self.units[j]) - self.units[j]:min(hi, self.units[j + 1]) - self.units[j]]
                 for j in _overlapping(self.units, lo, hi)]
        return parts[0] if len(parts) == 1 else sp.vstack(parts, format="csr")

    def solution(self, schema: Schema) -> sp.csr_matrix:
        """Every solved row of this level (all its batches solved)."""
        return _stack([self.results[b][0] for b in range(self.n_batches)], schema.size)


def _batch_task(job: _Release, plan: _Level, b: int, parent_solved: sp.csr_matrix, *, indexes: dict) -> BatchTask:
    """The BatchTask of batch b of a level (slices only); `parent_solved` holds its parents' rows, `indexes` the
    NMF indexes of finer levels already read."""
    geography, level = job.geography, plan.name
    p0, p1 = int(plan.parents[b]), int(plan.parents[b + 1])
    parent_level = geography.parent_level(level)
    offsets = geography.child_ranges(parent_level)
    lo, hi = int(offsets[p0]), int(offsets[p1])
    b0, b1 = block_range(geography, level, lo, hi)
    family = Family(job.schema, geography.units(parent_level)[p0:p1], parent_solved, geography.units(level)[lo:hi],
                    offsets[p0:p1 + 1] - lo)
    chains = single_child_chains(geography, job.nmf_file, level, lo=lo, hi=hi, levels_read=indexes)
    limits = ChildLimits(job.invariants.blocks(b0, b1), geography.block_to_unit(level)[b0:b1] - lo,
                         population_total(job.schema, job.invariants, level, lo=lo, hi=hi))
    return BatchTask(family, BatchReads(plan.index, lo, hi, tuple(chains)), limits, job.options.settings(level))


def _plan_levels(job: _Release, names: list[str], slots: int) -> list[_Level]:
    """Batches of every level to solve, with each batch's dependencies on the batches of its parent level."""
    geography, options = job.geography, job.options
    plans: list[_Level] = []
    for level in names:
        parent_level = geography.parent_level(level)
        n_parents, n_children = geography.n_units(parent_level), geography.n_units(level)
        offsets = geography.child_ranges(parent_level)
        # enough batches to keep every slot busy, none larger than batch_children
        size = max(1, min(options.batch_children, -(-n_children // (IN_FLIGHT_PER_SLOT * slots))))
        parents = parent_batches(offsets, size)
        units = offsets[parents]
        if plans:
            above = plans[-1].units
            waiting = (np.searchsorted(above, parents[1:], side="left")
                       - np.searchsorted(above, parents[:-1], side="right") + 1)
        else:
            waiting = np.zeros(len(parents) - 1, dtype=np.int64)
        blocks = np.diff(_blocks_under(geography, level, units))
        index = nmf.level_index(job.nmf_file(level), n_children)
        plans.append(_Level(level, parents, units, f"{size}/{n_parents}/{n_children}", index, waiting, blocks))
    return plans


def _blocks_under(geography: Geography, level: str, units: np.ndarray) -> np.ndarray:
    """Block index where each of `units` (unit boundaries of `level`, increasing) begins its blocks."""
    current, bounds = level, units
    while (finer := geography.child_level(current)) is not None:
        bounds = geography.child_ranges(current)[bounds]
        current = finer
    return bounds


class _Schedule:
    """Which batches can run: a batch is ready once every batch of its parent level that it needs is solved;
    ready batches run largest subtree first (the critical path), across levels (no level barrier)."""

    def __init__(self, levels: list[_Level]):
        self.levels = levels
        self.ready: list[tuple] = []
        for b in np.flatnonzero(levels[0].waiting == 0) if levels else ():
            self._push(0, int(b))

    def _push(self, i: int, b: int) -> None:
        heapq.heappush(self.ready, (-int(self.levels[i].blocks[b]), i, b))

    def pop(self) -> tuple[int, int] | None:
        """The next batch to run, or None; a batch already solved (from a checkpoint) is skipped."""
        while self.ready:
            _, i, b = heapq.heappop(self.ready)
            if b not in self.levels[i].results:
                return i, b
        return None

    def solved(self, i: int, b: int) -> None:
        """Batch b of level i is solved: release the batches of the next level that waited only for it."""
        if i + 1 >= len(self.levels):
            return
        level, below = self.levels[i], self.levels[i + 1]
        for c in _overlapping(below.parents, int(level.units[b]), int(level.units[b + 1])):
            below.waiting[c] -= 1
            if below.waiting[c] == 0:
                self._push(i + 1, c)


def postprocess(release: str, schema: Schema, geography: Geography, invariants: Invariants, *, nmf_dir: Path,
                options: EngineOptions, start: tuple[str, sp.csr_matrix] | None = None,
                ) -> tuple[sp.csr_matrix, list[LevelReport]]:
    """Solve every level top-down from the NMF; return block histograms and per-level reports.

    `start` = (level, its solved rows) gives that level and those above it (a state of a
    partitioned run, whose nation and state the driver solved): solving begins below it.

    Each level is cut into batches of whole parents; a batch is one task (read its NMF rows,
    build and solve its parents' problems), so the driver never holds a level's noisy answers.
    A batch starts as soon as the batches that solve its parents are done, largest subtree first,
    whatever the level: no level waits for the whole level above it, and the largest parents
    start early (the critical path). Every parent's solution is the same in any order.
    With `options.rounding` NO_ROUNDING, nothing is rounded: float64 blocks, each level's fractional solution the
    parents of the next (ValueError with a checkpoint_dir). With `options.checkpoint_dir`, every solved batch
    and level is checkpointed, and a later call resumes after the deepest complete level, reusing the batches
    already solved below it.
    """
    options.check()
    checkpoints = Checkpoints(options.checkpoint_dir, release) if options.checkpoint_dir else None
    levels = geography.levels
    first = 0 if start is None else levels.index(start[0]) + 1  # the first level solved here
    solved, reports = _resumed_levels(checkpoints, levels[first:])
    if solved is None and start is not None:
        solved = start[1]
    clock = time.perf_counter()
    job = _Release(release, schema, geography, invariants, nmf_dir, options)
    if first + len(reports) == 0:
        solved, root = _solve_root(job, clock)
        reports.append(root)
        _checkpoint_level(checkpoints, release, root, solved)
    below = list(levels[first + len(reports):])
    if not below:
        return solved, reports
    solved, more = _solve_levels(job, below, solved, checkpoints=checkpoints, clock=clock)
    return solved, reports + more


def _resumed_levels(checkpoints: Checkpoints | None, levels: tuple[str, ...]) -> tuple[sp.csr_matrix | None, list]:
    """The levels (the first of `levels` on) that an earlier, interrupted call checkpointed whole: the deepest
    one's solved rows (None: none) and each one's report."""
    solved, reports = None, []
    for level in levels[:checkpoints.last_complete(levels) + 1] if checkpoints else ():
        solved, records, meta = load_solved(checkpoints.level_path(level))
        reports.append(LevelReport(level, meta["parents"], meta["seconds"], _events(records), meta.get("l2", {}),
                                   meta.get("tasks", []), tuple(meta.get("span", ()))))
    return solved, reports


def _solve_root(job: _Release, clock: float) -> tuple[sp.csr_matrix, LevelReport]:
    """The top geounit, from its own noisy answers and its only descendants', and its bounds."""
    geography, root = job.geography, job.geography.levels[0]
    answers = nmf.read_level(nmf_level_path(job.nmf_dir, job.name, root), geography.units(root))
    finer = read_single_children(single_child_chains(geography, job.nmf_file, root, lo=0, hi=1))
    solution = solve_root(job.schema, list(answers.values()),
                          level_bounds(job.schema, job.invariants, geography, level=root, lo=0, hi=1),
                          settings=job.options.settings(root), descendants=finer)
    solved = sp.csr_matrix(solution.counts.reshape(1, -1))
    return solved, LevelReport(root, 1, time.perf_counter() - clock, list(solution.events),
                               merge_certificates([solution.certificate]))


def _solve_levels(job: _Release, names: list[str], top: sp.csr_matrix, *, checkpoints: Checkpoints | None,
                  clock: float) -> tuple[sp.csr_matrix, list[LevelReport]]:
    """The levels `names` below the solved rows `top`, in batches on the executor: the last level's rows and
    each level's report."""
    options = job.options
    executor = options.executor or local_executor(options.workers)
    try:
        batches = _Batches(job, _plan_levels(job, names, getattr(executor, "slots", 1)), top, checkpoints)
        plans = batches.plans
        with bar(total=sum(p.n_batches for p in plans), initial=sum(len(p.results) for p in plans),
                 desc=f"post-processing {job.name}", unit="batch", shown=options.progress, leave=False) as progress:
            while len(batches.reports) < len(plans):
                batches.submit_ready(executor)
                for future in first_done(executor, list(batches.running)) if batches.running else ():
                    batches.collect(future)
                    progress.update()
                batches.report_complete(clock)
        return plans[-1].solution(job.schema), batches.reports
    finally:
        if options.executor is None:
            executor.close()


class _Batches:
    """The batches of the levels being solved: those an interrupted call solved count as solved; the others run as
    soon as their parents are solved, are checkpointed as they finish, and a level is reported once all are."""

    def __init__(self, job: _Release, plans: list[_Level], top: sp.csr_matrix, checkpoints: Checkpoints | None):
        self.job, self.plans, self.top, self.checkpoints = job, plans, top, checkpoints
        self.schedule = _Schedule(plans)
        self.running: dict = {}  # future -> (level index, batch)
        self.indexes: dict = {}  # NMF indexes of the finer levels the batches' single-child chains read
        self.reports: list[LevelReport] = []  # one per complete level, in order
        for i, plan in enumerate(plans if checkpoints else ()):
            for b, (solved, records, l2) in sorted(checkpoints.load_batches(plan.name, plan.n_batches, plan.key).items()):
                plan.results[b] = (solved, _events(records), l2, {})
                self.schedule.solved(i, b)

    def submit_ready(self, executor) -> None:
        """Start the ready batches (largest subtree first) while fewer than two per slot run."""
        slots = getattr(executor, "slots", 1)
        while len(self.running) < 2 * slots and (ready := self.schedule.pop()) is not None:
            i, b = ready
            plan = self.plans[i]
            p0, p1 = int(plan.parents[b]), int(plan.parents[b + 1])
            parent_solved = self.top[p0:p1] if i == 0 else self.plans[i - 1].rows(p0, p1)
            task = _batch_task(self.job, plan, b, parent_solved, indexes=self.indexes)
            plan.started = plan.started if plan.started is not None else time.perf_counter()
            self.running[executor.submit(timed_solve_batch, task)] = (i, b)
        if not self.running and not self.plans[len(self.reports)].complete:
            raise RuntimeError(f"{self.job.name}: no batch can run, yet levels remain unsolved (a scheduling bug)")

    def collect(self, future) -> None:
        """A finished batch: kept and checkpointed; the batches of the next level that waited only for it are ready."""
        i, b = self.running.pop(future)
        plan = self.plans[i]
        plan.results[b] = future.result()
        if self.checkpoints:
            solved, events, l2, figures = plan.results[b]
            save_solved(self.checkpoints.batch_path(plan.name, b), solved, _records(events),
                        {"batch": b, "batch_key": plan.key, "l2": l2, "task": figures})
            crash_point(f"solve:{self.job.name}:{plan.name}")
        self.schedule.solved(i, b)

    def report_complete(self, clock: float) -> None:
        """Report (and checkpoint) each level whose batches are all solved, in order; the level above it is then
        no longer needed (its rows went into this level's tasks)."""
        while len(self.reports) < len(self.plans) and self.plans[len(self.reports)].complete:
            finished = len(self.reports)
            plan = self.plans[finished]
            self.reports.append(_level_report(plan, self.job.geography, clock))
            if self.checkpoints:
                _checkpoint_level(self.checkpoints, self.job.name, self.reports[-1], plan.solution(self.job.schema))
            if finished > 0:
                self.plans[finished - 1].results.clear()


def _events(records: list[dict]) -> list[FailsafeEvent]:
    return [FailsafeEvent.of_record(r) for r in records]


def _records(events: list[FailsafeEvent]) -> list[dict]:
    return [e.record() for e in events]


def _level_report(plan: _Level, geography: Geography, clock: float) -> LevelReport:
    """A complete level's report: its events and certificate in batch order, and its tasks' figures."""
    results = [plan.results[b] for b in range(plan.n_batches)]
    now = time.perf_counter()
    started = plan.started if plan.started is not None else now
    return LevelReport(plan.name, geography.n_units(geography.parent_level(plan.name)), now - started,
                       [e for r in results for e in r[1]], merge_certificates(r[2] for r in results),
                       [r[3] for r in results if r[3]], (started - clock, now - clock))


def _checkpoint_level(checkpoints: Checkpoints | None, release: str, report: LevelReport, solved) -> None:
    if checkpoints is None:
        return
    checkpoints.save_level(report.level, solved, _records(report.failsafe_events),
                           {"parents": report.parents, "seconds": report.seconds, "l2": report.certificate,
                            "tasks": report.tasks, "span": list(report.span)})
    crash_point(f"level:{release}:{report.level}")
