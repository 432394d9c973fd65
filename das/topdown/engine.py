"""TopDown engine: solve the nation, then level by level one problem per parent, in parallel.

For each parent the engine gathers, from the NMF of the child level, the children's noisy
answers restricted to the cells that are nonzero in the solved parent; from the invariants, the
children's structural zeros and bounds; and hands the problem to `solve_parent` (the unit of
parallel work). Children's solutions become the parents of the next level.
"""

from __future__ import annotations

import os
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from fractions import Fraction
from multiprocessing import get_context
from pathlib import Path

import numpy as np
import scipy.sparse as sp
from tqdm import tqdm

from das.geography import Geography
from das.io import nmf
from das.schema import Schema
from das.topdown.constraints import Bounds, Invariants, block_bounds, level_bounds
from das.topdown.problem import ChildConstraints, ParentProblem, QueryAnswers
from das.topdown.solve import solve_parent, solve_root


@dataclass
class EngineOptions:
    workers: int = 1
    solver: str = "CLARABEL"
    rounding: str = "auto"
    progress: bool = True
    passes: tuple[tuple[str, ...], ...] = ((),)  # query names per L2 pass; () = all remaining


@dataclass
class LevelReport:
    level: str
    parents: int
    seconds: float
    failsafe_events: list = field(default_factory=list)


def _limit_threads() -> None:
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = "1"


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


def _level_tasks(schema, parents, children, offsets, solved, noisy, bounds, options):
    """One (problem, solver, rounding) task per parent, built lazily in parent order."""
    for p in range(len(parents)):
        lo, hi = offsets[p], offsets[p + 1]
        counts = solved[p].toarray().ravel()
        child_noisy = {k: (v[0][lo:hi], v[1]) for k, v in noisy.items()}
        child_bounds = [Bounds(b.query, b.lower[lo:hi], b.upper[lo:hi]) for b in bounds]
        problem = parent_problem(schema, parents[p], children[lo:hi], counts, child_noisy, child_bounds,
                                 options.passes)
        yield problem, options.solver, options.rounding


def _solve(args):
    problem, solver, rounding = args
    return solve_parent(problem, solver=solver, rounding=rounding)


def postprocess(
    release: str,
    schema: Schema,
    geography: Geography,
    invariants: Invariants,
    nmf_dir: Path,
    options: EngineOptions,
) -> tuple[sp.csr_matrix, list[LevelReport]]:
    """Solve every level top-down from the NMF; return block histograms and per-level reports."""
    families = block_bounds(schema, invariants)
    reports: list[LevelReport] = []
    t0 = time.perf_counter()
    root = geography.levels[0]
    noisy = nmf.read_level(nmf.level_path(nmf_dir, release, root), geography.units(root))
    root_solution = solve_root(
        schema, {k: (v[0][0], v[1]) for k, v in noisy.items()},
        level_bounds(schema, invariants, geography, root, families), solver=options.solver,
        rounding=options.rounding, passes=options.passes,
    )
    solved = sp.csr_matrix(root_solution.counts.reshape(1, -1))
    reports.append(LevelReport(root, 1, time.perf_counter() - t0, list(root_solution.events)))

    pool = None
    if options.workers > 1:
        pool = ProcessPoolExecutor(options.workers, mp_context=get_context("spawn"), initializer=_limit_threads)
    try:
        for parent_level, level in zip(geography.levels, geography.levels[1:]):
            t0 = time.perf_counter()
            children = geography.units(level)
            offsets = geography.child_ranges(parent_level)
            noisy = nmf.read_level(nmf.level_path(nmf_dir, release, level), children)
            bounds = level_bounds(schema, invariants, geography, level, families)
            parents = geography.units(parent_level)

            tasks = _level_tasks(schema, parents, children, offsets, solved, noisy, bounds, options)
            results = pool.map(_solve, tasks, chunksize=1) if pool else map(_solve, tasks)
            progress = tqdm(results, total=len(parents), desc=f"{release} {level}", unit="parent",
                            disable=None if options.progress else True, leave=False)
            data, indices, indptr_counts, events = [], [], [], []
            for p, solution in enumerate(progress):
                cells = np.flatnonzero(solved[p].toarray().ravel())
                block = sp.csr_matrix(solution.counts)
                data.append(block.data)
                indices.append(cells[block.indices])
                indptr_counts.append(np.diff(block.indptr))
                events.extend(solution.events)
            indptr = np.r_[0, np.cumsum(np.concatenate(indptr_counts) if indptr_counts else [])]
            solved = sp.csr_matrix(
                (np.concatenate(data) if data else np.array([], np.int64),
                 np.concatenate(indices) if indices else np.array([], np.int64), indptr),
                shape=(len(children), schema.size),
            )
            reports.append(LevelReport(level, len(parents), time.perf_counter() - t0, events))
    finally:
        if pool:
            pool.shutdown()
    return solved, reports
