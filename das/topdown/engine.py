"""TopDown engine: solve the nation, then level by level one problem per parent, in parallel.

For each parent the engine gathers, from the NMF of the child level, the children's noisy
answers restricted to the cells that are nonzero in the solved parent; from the invariants, the
children's structural zeros and bounds; and hands the problem to `solve_parent`. Children's
solutions become the parents of the next level. A level is cut into batches of whole parents;
a batch is the unit of parallel work (`solve_batch`, on a local pool or Dask: das.executors) and
of checkpointing (das.checkpoint), so neither the driver nor a worker holds a whole level's
noisy answers.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path

import numpy as np
import scipy.sparse as sp
from tqdm import tqdm

from das.checkpoint import Checkpoints, crash_point, load_solved, save_solved
from das.executors import IN_FLIGHT_PER_SLOT, local_executor, ordered_map
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


def single_child_chains(geography: Geography, nmf_dir: Path, release: str, level: str, lo: int, hi: int,
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
            index = nmf.level_index(nmf.level_path(nmf_dir, release, current), geography.n_units(current))
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
    facts: Invariants            # the published facts of the children's blocks
    unit_of_block: np.ndarray    # child (0-based in the batch) of each of those blocks
    total: np.ndarray | None     # total-population invariant of the children, where it binds
    solver: str
    rounding: str
    passes: tuple
    chains: list = field(default_factory=list)  # SingleChildReads of the children's only descendants


def solve_batch(task: BatchTask) -> tuple[sp.csr_matrix, list, dict]:
    """Read the batch's noisy answers, build each parent's problem and solve it: (children's histograms, events,
    L2 certificate)."""
    noisy = nmf.read_range(task.nmf, task.lo, task.hi, task.children)
    bounds = unit_bounds(task.schema, task.facts, task.unit_of_block, task.hi - task.lo, task.total)
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


def _batch_tasks(job: _Release, level: str, index, solved, batches, todo):
    """One BatchTask per batch to do, built lazily (slices only): `solved` holds the parent level's solution."""
    schema, geography, invariants, options = job.schema, job.geography, job.invariants, job.options
    parent_level = geography.parent_level(level)
    parents, children = geography.units(parent_level), geography.units(level)
    indexes: dict = {}
    offsets = geography.child_ranges(parent_level)
    for b in todo:
        p0, p1 = batches[b], batches[b + 1]
        lo, hi = int(offsets[p0]), int(offsets[p1])
        b0, b1 = block_range(geography, level, lo, hi)
        yield BatchTask(
            schema=schema, parents=parents[p0:p1], children=children[lo:hi], offsets=offsets[p0:p1 + 1] - lo,
            parent_solved=solved[p0:p1], nmf=index, lo=lo, hi=hi,
            facts=invariants.blocks(b0, b1), unit_of_block=geography.block_to_unit(level)[b0:b1] - lo,
            total=population_total(schema, invariants, level, lo, hi),
            solver=options.solver, rounding=options.rounding, passes=options.passes_for(level),
            chains=single_child_chains(geography, job.nmf_dir, job.name, level, lo, hi, indexes),
        )


def _stack(parts: list[sp.csr_matrix], n_cols: int) -> sp.csr_matrix:
    return sp.vstack(parts, format="csr") if parts else sp.csr_matrix((0, n_cols), dtype=np.int64)


def postprocess(
    release: str,
    schema: Schema,
    geography: Geography,
    invariants: Invariants,
    nmf_dir: Path,
    options: EngineOptions,
) -> tuple[sp.csr_matrix, list[LevelReport]]:
    """Solve every level top-down from the NMF; return block histograms and per-level reports.

    Each level is cut into batches of whole parents; a batch is one task (read its NMF rows,
    build and solve its parents' problems), so the driver never holds a level's noisy answers.
    With `options.checkpoint_dir`, every solved level and batch is checkpointed, and a later call
    resumes after the deepest complete level, reusing the batches already solved in the next
    one (solving is deterministic: same result either way).
    """
    checkpoints = Checkpoints(options.checkpoint_dir, release) if options.checkpoint_dir else None
    levels = geography.levels
    reports: list[LevelReport] = []
    done = checkpoints.last_complete(levels) if checkpoints else -1
    solved = None
    for level in levels[: done + 1]:
        solved, events, meta = load_solved(checkpoints.level_path(level))
        reports.append(LevelReport(level, meta["parents"], meta["seconds"], events, meta.get("l2", {})))
    if done < 0:
        t0 = time.perf_counter()
        root = levels[0]
        noisy = nmf.read_level(nmf.level_path(nmf_dir, release, root), geography.units(root))
        finer = read_single_children(single_child_chains(geography, nmf_dir, release, root, 0, 1))
        root_solution = solve_root(
            schema, {k: (v[0][0], v[1]) for k, v in noisy.items()},
            level_bounds(schema, invariants, geography, root, 0, 1), solver=options.solver,
            rounding=options.rounding, passes=options.passes_for(root), descendants=finer,
        )
        solved = sp.csr_matrix(root_solution.counts.reshape(1, -1))
        reports.append(LevelReport(root, 1, time.perf_counter() - t0, list(root_solution.events),
                                   merge_certificates([root_solution.certificate])))
        _checkpoint_level(checkpoints, release, reports[-1], solved)
        done = 0

    executor = options.executor or local_executor(options.workers)
    slots = getattr(executor, "slots", 1)
    try:
        for parent_level, level in list(zip(levels, levels[1:]))[done:]:
            t0 = time.perf_counter()
            n_parents, n_children = geography.n_units(parent_level), geography.n_units(level)
            index = nmf.level_index(nmf.level_path(nmf_dir, release, level), n_children)
            # enough batches to keep every slot busy, none larger than batch_children
            size = max(1, min(options.batch_children, -(-n_children // (IN_FLIGHT_PER_SLOT * slots))))
            batches = parent_batches(geography.child_ranges(parent_level), size)
            n_batches = len(batches) - 1
            batch_key = f"{size}/{n_parents}/{n_children}"
            results = checkpoints.load_batches(level, n_batches, batch_key) if checkpoints else {}
            todo = [b for b in range(n_batches) if b not in results]
            tasks = _batch_tasks(_Release(release, schema, geography, invariants, nmf_dir, options), level, index,
                                 solved, batches, todo)
            progress = tqdm(total=n_batches, initial=n_batches - len(todo), desc=f"{release} {level}", unit="batch",
                            disable=None if options.progress else True, leave=False)
            for b, (batch_solved, events, l2) in zip(todo, ordered_map(executor, solve_batch, tasks,
                                                                        in_flight=2 * slots)):
                results[b] = (batch_solved, events, l2)
                if checkpoints:
                    save_solved(checkpoints.batch_path(level, b), batch_solved, events,
                                {"batch": b, "batch_key": batch_key, "l2": l2})
                    crash_point(f"solve:{release}:{level}")
                progress.update()
            progress.close()
            solved = _stack([results[b][0] for b in range(n_batches)], schema.size)
            events = [e for b in range(n_batches) for e in results[b][1]]
            certificate = merge_certificates(results[b][2] for b in range(n_batches))
            del results
            reports.append(LevelReport(level, n_parents, time.perf_counter() - t0, events, certificate))
            _checkpoint_level(checkpoints, release, reports[-1], solved)
    finally:
        if options.executor is None:
            executor.close()
    return solved, reports


def _checkpoint_level(checkpoints: Checkpoints | None, release: str, report: LevelReport, solved) -> None:
    if checkpoints is None:
        return
    checkpoints.save_level(report.level, solved, report.failsafe_events,
                           {"parents": report.parents, "seconds": report.seconds, "l2": report.certificate})
    crash_point(f"level:{release}:{report.level}")
