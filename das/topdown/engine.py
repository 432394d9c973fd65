"""TopDown engine: solve the nation, then level by level one problem per parent, in parallel.

For each parent the engine gathers, from the NMF of the child level, the children's noisy
answers restricted to the cells that are nonzero in the solved parent; from the invariants, the
children's structural zeros and bounds; and hands the problem to `solve_parent` (the unit of
parallel work, on a local pool or Dask: das.executors). Children's solutions become the parents of
the next level. A level is streamed in batches of whole parents: only a batch's noisy answers and
bounds are in memory at once, and each solved batch can be checkpointed (das.checkpoint).
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
from das.executors import local_executor, ordered_map
from das.geography import Geography
from das.io import nmf
from das.schema import Schema
from das.topdown.constraints import Bounds, Invariants, block_bounds
from das.topdown.problem import ChildConstraints, ParentProblem, QueryAnswers
from das.topdown.solve import solve_parent, solve_root

BATCH_CHILDREN = int(os.environ.get("DAS_BATCH_CHILDREN", "2048"))  # children per batch (read, checkpoint)
BLOCK_SLICE = 1 << 16  # blocks per slice when summing block bounds into a range


@dataclass
class EngineOptions:
    workers: int = 1
    solver: str = "CLARABEL"
    rounding: str = "auto"
    progress: bool = True
    passes: tuple[tuple[str, ...], ...] = ((),)  # query names per L2 pass; () = all remaining
    executor: object | None = None  # das.executors (local pool, Dask); None: a local pool of `workers`
    checkpoint_dir: Path | None = None  # solved levels and batches, for resume; None: no checkpoints
    batch_children: int = BATCH_CHILDREN  # children read and checkpointed together


@dataclass
class LevelReport:
    level: str
    parents: int
    seconds: float
    failsafe_events: list = field(default_factory=list)


def parent_problem(
    schema: Schema,
    parent: str,
    children: np.ndarray,
    parent_counts: np.ndarray,
    noisy: dict[str, tuple[np.ndarray, Fraction]],
    bounds: list[Bounds],
    passes: tuple[tuple[str, ...], ...] = ((),),
) -> ParentProblem:
    """One parent's problem: variables are children x the parent's nonzero cells."""
    cells = np.flatnonzero(parent_counts)
    n_children = len(children)
    allowed = np.ones((n_children, len(cells)), dtype=bool)
    rows, lower, upper = [], [], []
    for b in bounds:
        q = schema.query(b.query).matrix[:, cells].tocsr()
        zeros = b.structural_zeros()
        if zeros.any():
            allowed &= ~((sp.csr_matrix(zeros.astype(np.int64)) @ q).toarray() > 0)
        binding = b.binding()
        if binding.any():
            rows.append(q[binding])
            lower.append(b.lower[:, binding])
            upper.append(b.upper[:, binding])
    constraints = None
    if rows:
        constraints = ChildConstraints(
            matrix=sp.vstack(rows).tocsr(),
            lower=np.hstack(lower).astype(np.int64),
            upper=np.hstack(upper).astype(float),
        )
    queries = []
    for name, (answers, variance) in noisy.items():
        q = schema.query(name).matrix[:, cells].tocsr()
        keep = q.getnnz(axis=1) > 0
        queries.append(QueryAnswers(
            name=name, matrix=q[keep], noisy=answers[:, keep].astype(np.float64), variance=float(variance)
        ))
    passes = tuple(tuple(q for q in names if q in noisy) for names in passes)
    passes = tuple(names for names in passes if names or names == ()) or ((),)
    return ParentProblem(
        parent=parent, children=tuple(str(c) for c in children), cells=cells,
        parent_counts=parent_counts[cells].astype(np.int64), allowed=allowed,
        queries=tuple(queries), constraints=constraints, passes=passes,
    )


def _range_bounds(
    schema: Schema, invariants: Invariants, geography: Geography, level: str, lo: int, hi: int,
) -> list[Bounds]:
    """`level_bounds` for the geounits lo..hi-1 of `level` only, from the invariants of their blocks.

    Block bounds are built per slice of blocks and summed into the range, so memory follows the
    range, not the country. Same rows, same order, same values as `level_bounds`.
    """
    block_to_unit = geography.block_to_unit(level)
    b0, b1 = int(np.searchsorted(block_to_unit, lo)), int(np.searchsorted(block_to_unit, hi))
    sums: list[list[np.ndarray]] | None = None
    queries: list[str] = []
    for s0 in range(b0, max(b1, b0 + 1), BLOCK_SLICE):
        s1 = min(b1, s0 + BLOCK_SLICE)
        part = Invariants(invariants.housing_units[s0:s1], invariants.gq_facilities[s0:s1], {})
        families = block_bounds(schema, part)
        units = block_to_unit[s0:s1] - lo
        aggregate = sp.csr_matrix((np.ones(s1 - s0, np.int64), (units, np.arange(s1 - s0))), shape=(hi - lo, s1 - s0))
        if sums is None:
            queries = [f.query for f in families]
            sums = [[np.zeros((hi - lo, f.lower.shape[1]), np.int64), np.zeros((hi - lo, f.upper.shape[1]))]
                    for f in families]
        for acc, f in zip(sums, families):
            acc[0] += aggregate @ f.lower
            acc[1] += aggregate @ f.upper
    result = [Bounds(q, lower, upper) for q, (lower, upper) in zip(queries, sums or [])]
    if level in invariants.total_population and schema.universe == "persons":
        total = invariants.total_population[level].astype(np.int64)[lo:hi, None]
        result.append(Bounds("total", total, total.astype(float)))
    return result


def parent_batches(offsets: np.ndarray, batch_children: int) -> np.ndarray:
    """Boundaries (in parents) of consecutive batches of whole parents with about `batch_children` children each."""
    bounds = [0]
    n_parents = len(offsets) - 1
    while bounds[-1] < n_parents:
        p0 = bounds[-1]
        p1 = int(np.searchsorted(offsets, offsets[p0] + batch_children, side="right")) - 1
        bounds.append(min(n_parents, max(p1, p0 + 1)))
    return np.asarray(bounds, dtype=np.int64)


def _batch_tasks(schema, parents, children, offsets, solved, reader, invariants, geography, level, batches, todo,
                 options):
    """(problem, solver, rounding) for every parent of the batches to do, built lazily, batch by batch."""
    for b in todo:
        p0, p1 = batches[b], batches[b + 1]
        lo, hi = offsets[p0], offsets[p1]
        noisy = reader.read(lo, hi)
        bounds = _range_bounds(schema, invariants, geography, level, lo, hi)
        for p in range(p0, p1):
            c0, c1 = offsets[p] - lo, offsets[p + 1] - lo
            counts = solved[p].toarray().ravel()
            child_noisy = {k: (v[0][c0:c1], v[1]) for k, v in noisy.items()}
            child_bounds = [Bounds(bd.query, bd.lower[c0:c1], bd.upper[c0:c1]) for bd in bounds]
            problem = parent_problem(schema, parents[p], children[offsets[p]:offsets[p + 1]], counts, child_noisy,
                                     child_bounds, options.passes)
            yield problem, options.solver, options.rounding
        del noisy, bounds


def _solve(args):
    problem, solver, rounding = args
    return solve_parent(problem, solver=solver, rounding=rounding)


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

    With `options.checkpoint_dir`, every solved level and every solved batch of parents is
    checkpointed, and a later call resumes after the deepest complete level, reusing the
    batches already solved in the next one (solving is deterministic: same result either way).
    """
    checkpoints = Checkpoints(options.checkpoint_dir, release) if options.checkpoint_dir else None
    levels = geography.levels
    reports: list[LevelReport] = []
    done = checkpoints.last_complete(levels) if checkpoints else -1
    solved = None
    for level in levels[: done + 1]:
        solved, events, meta = load_solved(checkpoints.level_path(level))
        reports.append(LevelReport(level, meta["parents"], meta["seconds"], events))
    if done < 0:
        t0 = time.perf_counter()
        root = levels[0]
        noisy = nmf.read_level(nmf.level_path(nmf_dir, release, root), geography.units(root))
        root_solution = solve_root(
            schema, {k: (v[0][0], v[1]) for k, v in noisy.items()},
            _range_bounds(schema, invariants, geography, root, 0, 1), solver=options.solver,
            rounding=options.rounding, passes=options.passes,
        )
        solved = sp.csr_matrix(root_solution.counts.reshape(1, -1))
        reports.append(LevelReport(root, 1, time.perf_counter() - t0, list(root_solution.events)))
        _checkpoint_level(checkpoints, release, reports[-1], solved)
        done = 0

    executor = options.executor or local_executor(options.workers)
    try:
        for parent_level, level in list(zip(levels, levels[1:]))[done:]:
            t0 = time.perf_counter()
            children = geography.units(level)
            offsets = geography.child_ranges(parent_level)
            parents = geography.units(parent_level)
            reader = nmf.LevelReader(nmf.level_path(nmf_dir, release, level), children)
            batches = parent_batches(offsets, options.batch_children)
            n_batches = len(batches) - 1
            batch_key = f"{options.batch_children}/{len(parents)}/{len(children)}"
            results = checkpoints.load_batches(level, n_batches, batch_key) if checkpoints else {}
            todo = [b for b in range(n_batches) if b not in results]
            tasks = _batch_tasks(schema, parents, children, offsets, solved, reader, invariants, geography, level,
                                 batches, todo, options)
            solutions = ordered_map(executor, _solve, tasks)
            progress = tqdm(total=len(parents), desc=f"{release} {level}", unit="parent",
                            disable=None if options.progress else True, leave=False)
            for b in todo:
                data, indices, indptr_counts, events = [], [], [], []
                for p in range(batches[b], batches[b + 1]):
                    solution = next(solutions)
                    cells = np.flatnonzero(solved[p].toarray().ravel())
                    block = sp.csr_matrix(solution.counts)
                    data.append(block.data)
                    indices.append(cells[block.indices])
                    indptr_counts.append(np.diff(block.indptr))
                    events.extend(solution.events)
                    progress.update()
                indptr = np.r_[0, np.cumsum(np.concatenate(indptr_counts))]
                batch_solved = sp.csr_matrix((np.concatenate(data), np.concatenate(indices), indptr),
                                             shape=(offsets[batches[b + 1]] - offsets[batches[b]], schema.size))
                results[b] = (batch_solved, events)
                if checkpoints:
                    save_solved(checkpoints.batch_path(level, b), batch_solved, events,
                                {"batch": b, "batch_key": batch_key})
                    crash_point(f"solve:{release}:{level}")
            progress.close()
            solved = _stack([results[b][0] for b in range(n_batches)], schema.size)
            events = [e for b in range(n_batches) for e in results[b][1]]
            del results
            reports.append(LevelReport(level, len(parents), time.perf_counter() - t0, events))
            _checkpoint_level(checkpoints, release, reports[-1], solved)
    finally:
        if options.executor is None:
            executor.close()
    return solved, reports


def _checkpoint_level(checkpoints: Checkpoints | None, release: str, report: LevelReport, solved) -> None:
    if checkpoints is None:
        return
    checkpoints.save_level(report.level, solved, report.failsafe_events,
                           {"parents": report.parents, "seconds": report.seconds})
    crash_point(f"level:{release}:{report.level}")
