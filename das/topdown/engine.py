"""TopDown engine: solve the nation, then every parent of every level, in parallel, top-down.

For each parent the engine gathers, from the NMF of the child level, the children's noisy
answers restricted to the cells that are nonzero in the solved parent; from the invariants, the
children's structural zeros and bounds; and hands the problem to `solve_parent`. Children's
solutions become the parents of the next level. A level is cut into batches of whole parents;
a batch is the unit of parallel work (`solve_batch`, on a local pool or Dask: das.executors) and
of checkpointing (das.checkpoint), so neither the driver nor a worker holds a whole level's
noisy answers. A batch starts as soon as the batches that solve its parents are done (no level
barrier), the batch with the most blocks below it first: the critical path starts early.
"""

from __future__ import annotations

import heapq
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path

import numpy as np
import scipy.sparse as sp
from tqdm import tqdm

from das.checkpoint import Checkpoints, crash_point, load_solved, save_solved
from das.executors import IN_FLIGHT_PER_SLOT, first_done, local_executor
from das.geography import Geography
from das.io import nmf
from das.rules import Bounds, Invariants, block_range, level_bounds, population_total, unit_bounds
from das.schema import Schema
from das.topdown.problem import DEFAULT_PASSES, measured, parent_problem
from das.topdown.solve import DEFAULT_ROUNDING, DEFAULT_SOLVER, merge_certificates, solve_parent, solve_root

BATCH_CHILDREN = int(os.environ.get("DAS_BATCH_CHILDREN", "2048"))  # children per batch (read, checkpoint)


@dataclass
class EngineOptions:
    workers: int = 1
    solver: str = DEFAULT_SOLVER
    rounding: str = DEFAULT_ROUNDING
    progress: bool = True
    passes: tuple[tuple[str, ...], ...] = DEFAULT_PASSES  # query names per L2 pass; () = all remaining
    passes_by_level: dict = field(default_factory=dict)  # level -> its own passes (e.g. the root's)
    executor: object | None = None  # das.executors (local pool, Dask); None: a local pool of `workers`
    checkpoint_dir: Path | None = None  # solved levels and batches, for resume; None: no checkpoints
    batch_children: int = BATCH_CHILDREN  # children read and checkpointed together
    state: str | None = None  # a state of a partitioned run: read its own NMF files (das.io.nmf.state_path)


    def passes_for(self, level: str) -> tuple[tuple[str, ...], ...]:
        """The L2 passes of the problems that solve the geounits of `level`."""
        return self.passes_by_level.get(level, self.passes)


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


def parent_batches(offsets: np.ndarray, batch_children: int) -> np.ndarray:
    """Boundaries (in parents) of consecutive batches of whole parents with about `batch_children` children each."""
    bounds = [0]
    n_parents = len(offsets) - 1
    while bounds[-1] < n_parents:
        p0 = bounds[-1]
        p1 = int(np.searchsorted(offsets, offsets[p0] + batch_children, side="right")) - 1
        bounds.append(min(n_parents, max(p1, p0 + 1)))
    return np.asarray(bounds, dtype=np.int64)


@dataclass(frozen=True)
class SingleChildReads:
    """Geounits of a finer level that are the only descendant of a child of the batch (same blocks)."""

    index: nmf.LevelIndex  # that level's NMF
    units: np.ndarray      # their indices at that level, sorted
    geocodes: np.ndarray   # their geocodes
    rows: np.ndarray       # the child (0-based in the batch) each one is


def single_child_chains(geography: Geography, nmf_file: Callable[[str], Path], level: str, lo: int, hi: int,
                        levels_read: dict | None = None) -> list[SingleChildReads]:
    """For the geounits lo..hi-1 of `level`: at each finer level, those whose chain of only children reaches it.

    A geounit with one child is that child measured twice; the child's measurements (and its only
    child's, and so on) enter the geounit's own estimate, so no level's budget is wasted on it.
    """
    chains = []
    units, rows = np.arange(lo, hi), np.arange(hi - lo)
    current = level
    while (finer := geography.child_level(current)) is not None and len(units):
        offsets = geography.child_ranges(current)
        single = offsets[units + 1] - offsets[units] == 1
        units, rows = offsets[units[single]], rows[single]
        current = finer
        if not len(units):
            break
        if levels_read is None or current not in levels_read:
            index = nmf.level_index(nmf_file(current), geography.n_units(current))
            if levels_read is not None:
                levels_read[current] = index
        else:
            index = levels_read[current]
        chains.append(SingleChildReads(index, units, geography.units(current)[units], rows))
    return chains


def read_single_children(chains: list[SingleChildReads]) -> list[tuple[str, np.ndarray, Fraction, np.ndarray]]:
    """(query, answers, variance, batch rows) of every chain's geounits, reading runs of consecutive units."""
    found = []
    for chain in chains:
        breaks = np.flatnonzero(np.diff(chain.units) != 1) + 1
        parts: dict[str, list] = {}
        for run in np.split(np.arange(len(chain.units)), breaks):
            u0, u1 = int(chain.units[run[0]]), int(chain.units[run[-1]]) + 1
            for name, (answers, variance) in nmf.read_range(chain.index, u0, u1, chain.geocodes[run]).items():
                parts.setdefault(name, [variance, []])[1].append(answers)
        for name, (variance, blocks) in parts.items():
            found.append((name, np.vstack(blocks), variance, chain.rows))
    return found


@dataclass
class BatchTask:
    """Everything a worker needs to solve a batch of parents: no geography, no country-sized array."""

    schema: Schema
    parents: np.ndarray          # geocodes of the batch's parents
    children: np.ndarray         # geocodes of their children, in order
    offsets: np.ndarray          # children of parent i are children[offsets[i]:offsets[i+1]]
    parent_solved: sp.csr_matrix  # the parents' solved histograms
    nmf: nmf.LevelIndex          # the child level's NMF; the batch reads rows lo..hi-1 of it
    lo: int
    hi: int
    facts: Invariants | None     # the published facts of the children's blocks
    unit_of_block: np.ndarray | None  # child (0-based in the batch) of each of those blocks
    total: np.ndarray | None     # total-population invariant of the children, where it binds
    solver: str
    rounding: str
    passes: tuple
    chains: list = field(default_factory=list)  # SingleChildReads of the children's only descendants
    bounds: list | None = None   # the children's Bounds, given (the states of a partitioned run) instead of facts


def solve_batch(task: BatchTask) -> tuple[sp.csr_matrix, list, dict]:
    """Read the batch's noisy answers, build each parent's problem and solve it: (children's histograms, events,
    L2 certificate)."""
    noisy = nmf.read_range(task.nmf, task.lo, task.hi, task.children)
    bounds = task.bounds if task.bounds is not None else unit_bounds(task.schema, task.facts, task.unit_of_block,
                                                                      task.hi - task.lo, task.total)
    finer = read_single_children(task.chains)
    data, indices, indptr_counts, events, certificates = [], [], [], [], []
    for p in range(len(task.parents)):
        c0, c1 = task.offsets[p], task.offsets[p + 1]
        counts = task.parent_solved[p].toarray().ravel()
        own = [(name, answers[(rows >= c0) & (rows < c1)], variance, rows[(rows >= c0) & (rows < c1)] - c0)
               for name, answers, variance, rows in finer]
        problem = parent_problem(task.schema, task.parents[p], task.children[c0:c1], counts,
                                 measured({k: (v[0][c0:c1], v[1]) for k, v in noisy.items()}, own),
                                 [Bounds(b.query, b.lower[c0:c1], b.upper[c0:c1], b.rule) for b in bounds],
                                 task.passes)
        solution = solve_parent(problem, solver=task.solver, rounding=task.rounding)
        block = sp.csr_matrix(solution.counts)
        data.append(block.data)
        indices.append(problem.cells[block.indices])
        indptr_counts.append(np.diff(block.indptr))
        events.extend(solution.events)
        certificates.append(solution.certificate)
    indptr = np.r_[0, np.cumsum(np.concatenate(indptr_counts))]
    solved = sp.csr_matrix((np.concatenate(data), np.concatenate(indices), indptr),
                           shape=(task.hi - task.lo, task.schema.size))
    return solved, events, merge_certificates(certificates)


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
        return nmf.state_path(self.nmf_dir, self.name, level, self.options.state)


def _batch_task(job: _Release, level: str, index: nmf.LevelIndex, parent_solved: sp.csr_matrix, parents: tuple,
                indexes: dict) -> BatchTask:
    """The BatchTask of parents p0..p1-1 of `level`'s parent level (slices only); `parent_solved` holds their rows."""
    schema, geography, invariants, options = job.schema, job.geography, job.invariants, job.options
    p0, p1 = parents
    parent_level = geography.parent_level(level)
    offsets = geography.child_ranges(parent_level)
    lo, hi = int(offsets[p0]), int(offsets[p1])
    b0, b1 = block_range(geography, level, lo, hi)
    return BatchTask(
        schema=schema, parents=geography.units(parent_level)[p0:p1], children=geography.units(level)[lo:hi],
        offsets=offsets[p0:p1 + 1] - lo, parent_solved=parent_solved, nmf=index, lo=lo, hi=hi,
        facts=invariants.blocks(b0, b1), unit_of_block=geography.block_to_unit(level)[b0:b1] - lo,
        total=population_total(schema, invariants, level, lo, hi),
        solver=options.solver, rounding=options.rounding, passes=options.passes_for(level),
        chains=single_child_chains(geography, job.nmf_file, level, lo, hi, indexes),
    )


def timed_solve_batch(task: BatchTask) -> tuple[sp.csr_matrix, list, dict, dict]:
    """solve_batch, plus the task's size and the worker's wall and CPU seconds on it (for the critical path)."""
    t0, c0 = time.perf_counter(), time.process_time()
    solved, events, l2 = solve_batch(task)
    return solved, events, l2, {"parents": len(task.parents), "children": task.hi - task.lo,
                                "seconds": time.perf_counter() - t0, "cpu_seconds": time.process_time() - c0}


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

    def rows(self, lo: int, hi: int) -> sp.csr_matrix:
        """Solved rows lo..hi-1 of this level, from the batches that hold them (all solved)."""
        parts = [self.results[j][0][max(lo, self.units[j]) - self.units[j]:min(hi, self.units[j + 1]) - self.units[j]]
                 for j in _overlapping(self.units, lo, hi)]
        return parts[0] if len(parts) == 1 else sp.vstack(parts, format="csr")


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


def postprocess(
    release: str,
    schema: Schema,
    geography: Geography,
    invariants: Invariants,
    nmf_dir: Path,
    options: EngineOptions,
    start: tuple[str, sp.csr_matrix] | None = None,
) -> tuple[sp.csr_matrix, list[LevelReport]]:
    """Solve every level top-down from the NMF; return block histograms and per-level reports.

    `start` = (level, its solved rows) gives that level and those above it (a state of a
    partitioned run, whose nation and state the driver solved): solving begins below it.

    Each level is cut into batches of whole parents; a batch is one task (read its NMF rows,
    build and solve its parents' problems), so the driver never holds a level's noisy answers.
    A batch starts as soon as the batches that solve its parents are done, largest subtree first,
    whatever the level: no level waits for the whole level above it, and the largest parents
    start early (the critical path). Every parent's solution is the same in any order.
    With `options.checkpoint_dir`, every solved batch and level is checkpointed, and a later call
    resumes after the deepest complete level, reusing the batches already solved below it.
    """
    checkpoints = Checkpoints(options.checkpoint_dir, release) if options.checkpoint_dir else None
    levels = geography.levels
    reports: list[LevelReport] = []
    first = 0 if start is None else levels.index(start[0]) + 1  # the first level solved here
    done = first - 1 + (checkpoints.last_complete(levels[first:]) + 1 if checkpoints else 0)
    solved = None if start is None else start[1]
    for level in levels[first: done + 1]:
        solved, events, meta = load_solved(checkpoints.level_path(level))
        reports.append(LevelReport(level, meta["parents"], meta["seconds"], events, meta.get("l2", {}),
                                   meta.get("tasks", []), tuple(meta.get("span", ()))))
    clock = time.perf_counter()
    job = _Release(release, schema, geography, invariants, nmf_dir, options)
    if done < 0:
        root = levels[0]
        noisy = nmf.read_level(nmf.level_path(nmf_dir, release, root), geography.units(root))
        finer = read_single_children(single_child_chains(geography, job.nmf_file, root, 0, 1))
        root_solution = solve_root(
            schema, {k: (v[0][0], v[1]) for k, v in noisy.items()},
            level_bounds(schema, invariants, geography, root, 0, 1), solver=options.solver,
            rounding=options.rounding, passes=options.passes_for(root), descendants=finer,
        )
        solved = sp.csr_matrix(root_solution.counts.reshape(1, -1))
        reports.append(LevelReport(root, 1, time.perf_counter() - clock, list(root_solution.events),
                                   merge_certificates([root_solution.certificate])))
        _checkpoint_level(checkpoints, release, reports[-1], solved)
        done = 0
    if done == len(levels) - 1:
        return solved, reports

    executor = options.executor or local_executor(options.workers)
    slots = getattr(executor, "slots", 1)
    plans = _plan_levels(job, list(levels[done + 1:]), slots)
    schedule = _Schedule(plans)
    for i, plan in enumerate(plans):  # batches solved before an interruption count as solved now
        if checkpoints:
            for b, result in sorted(checkpoints.load_batches(plan.name, plan.n_batches, plan.key).items()):
                plan.results[b] = (*result, {})
                schedule.solved(i, b)
    progress = tqdm(total=sum(p.n_batches for p in plans), initial=sum(len(p.results) for p in plans),
                    desc=f"{release} post-processing", unit="batch", disable=None if options.progress else True,
                    leave=False)
    indexes: dict = {}
    running: dict = {}  # future -> (level index, batch)
    finished = 0  # levels complete (reported), in order
    try:
        while finished < len(plans):
            while len(running) < 2 * slots and (ready := schedule.pop()) is not None:
                i, b = ready
                plan = plans[i]
                p0, p1 = int(plan.parents[b]), int(plan.parents[b + 1])
                parent_solved = solved[p0:p1] if i == 0 else plans[i - 1].rows(p0, p1)
                task = _batch_task(job, plan.name, plan.index, parent_solved, (p0, p1), indexes)
                plan.started = plan.started if plan.started is not None else time.perf_counter()
                running[executor.submit(timed_solve_batch, task)] = (i, b)
            if not running and len(plans[finished].results) < plans[finished].n_batches:
                raise RuntimeError(f"{release}: no batch can run, yet levels remain unsolved (a scheduling bug)")
            for future in first_done(executor, list(running)) if running else ():
                i, b = running.pop(future)
                plans[i].results[b] = future.result()
                if checkpoints:
                    batch_solved, events, l2, figures = plans[i].results[b]
                    save_solved(checkpoints.batch_path(plans[i].name, b), batch_solved, events,
                                {"batch": b, "batch_key": plans[i].key, "l2": l2, "task": figures})
                    crash_point(f"solve:{release}:{plans[i].name}")
                schedule.solved(i, b)
                progress.update()
            while finished < len(plans) and len(plans[finished].results) == plans[finished].n_batches:
                reports.append(_level_report(plans[finished], geography, clock))
                if checkpoints:
                    _checkpoint_level(checkpoints, release, reports[-1], _level_solution(plans[finished], schema))
                if finished > 0:
                    plans[finished - 1].results.clear()  # its rows went into the tasks of this level
                finished += 1
    finally:
        progress.close()
        if options.executor is None:
            executor.close()
    return _level_solution(plans[-1], schema), reports


def _level_solution(plan: _Level, schema: Schema) -> sp.csr_matrix:
    return _stack([plan.results[b][0] for b in range(plan.n_batches)], schema.size)


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
    checkpoints.save_level(report.level, solved, report.failsafe_events,
                           {"parents": report.parents, "seconds": report.seconds, "l2": report.certificate,
                            "tasks": report.tasks, "span": list(report.span)})
    crash_point(f"level:{release}:{report.level}")
