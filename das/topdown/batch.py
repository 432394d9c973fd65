"""A batch of parents, the unit of parallel work: what it reads (the parents' families, single-child chains),
its limits, and its solve."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from das.io import nmf
from das.io.nmf import NoisyAnswers
from das.model.geography import Geography
from das.model.rules import Bounds, Invariants, unit_bounds
from das.model.schema import Schema
from das.topdown.optimality import merge_certificates
from das.topdown.problem import ChildAnswers, measured, parent_problem
from das.topdown.solve import SolveSettings, solve_parent

BATCH_CHILDREN = int(os.environ.get("DAS_BATCH_CHILDREN", "2048"))  # children per batch (read, checkpoint)


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


def only_children(geography: Geography, level: str, *, lo: int, hi: int) -> list[tuple[str, np.ndarray, np.ndarray]]:
    """For the geounits lo..hi-1 of `level`, at each finer level: (that level, the geounits whose chain of only
    children reaches it, the row 0..hi-lo-1 each descends from)."""
    chains = []
    units, rows = np.arange(lo, hi), np.arange(hi - lo)
    current = level
    while (finer := geography.child_level(current)) is not None and len(units):
        offsets = geography.child_ranges(current)
        single = offsets[units + 1] - offsets[units] == 1
        units, rows = offsets[units[single]], rows[single]
        current = finer
        if len(units):
            chains.append((current, units, rows))
    return chains


def single_child_chains(geography: Geography, nmf_file: Callable[[str], Path], level: str, *, lo: int, hi: int,
                        levels_read: dict | None = None) -> list[SingleChildReads]:
    """For the geounits lo..hi-1 of `level`: at each finer level, those whose chain of only children reaches it.

    A geounit with one child is that child measured twice; the child's measurements (and its only
    child's, and so on) enter the geounit's own estimate, so no level's budget is wasted on it.
    """
    chains = []
    for current, units, rows in only_children(geography, level, lo=lo, hi=hi):
        if levels_read is None or current not in levels_read:
            index = nmf.level_index(nmf_file(current), geography.n_units(current))
            if levels_read is not None:
                levels_read[current] = index
        else:
            index = levels_read[current]
        chains.append(SingleChildReads(index, units, geography.units(current)[units], rows))
    return chains


def read_single_children(chains: list[SingleChildReads]) -> list[ChildAnswers]:
    """The noisy answers of every chain's geounits, each row the batch's child it descends from (reading runs of
    consecutive units)."""
    found = []
    for chain in chains:
        breaks = np.flatnonzero(np.diff(chain.units) != 1) + 1
        parts: dict[str, list[NoisyAnswers]] = {}
        for run in np.split(np.arange(len(chain.units)), breaks):
            u0, u1 = int(chain.units[run[0]]), int(chain.units[run[-1]]) + 1
            for name, answers in nmf.read_range(chain.index, u0, u1, chain.geocodes[run]).items():
                parts.setdefault(name, []).append(answers)
        found += [ChildAnswers(NoisyAnswers.stacked(runs), chain.rows) for runs in parts.values()]
    return found


@dataclass(frozen=True)
class Family:
    """What a batch solves: parents, with their solved histograms, and their children."""

    schema: Schema
    parents: np.ndarray      # geocodes of the batch's parents
    solved: sp.csr_matrix    # the parents' solved histograms, a row each
    children: np.ndarray     # geocodes of their children, in order
    offsets: np.ndarray      # children of parent i are children[offsets[i]:offsets[i+1]]

    def children_of(self, parent: int) -> tuple[int, int]:
        """The range c0..c1-1 of the children of the batch's parent number `parent`."""
        return int(self.offsets[parent]), int(self.offsets[parent + 1])


@dataclass(frozen=True)
class BatchReads:
    """Where a batch's noisy answers are: geounits lo..hi-1 (its children) of the child level's NMF, and the rows
    of finer levels that are the only descendants of some of them."""

    index: nmf.LevelIndex
    lo: int
    hi: int
    chains: tuple[SingleChildReads, ...] = ()

    def read(self, children: np.ndarray) -> list[ChildAnswers]:
        """The children's own noisy answers (their geocodes `children`), then their only descendants' (`measured`)."""
        own = nmf.read_range(self.index, self.lo, self.hi, children)
        return measured(list(own.values()), read_single_children(list(self.chains)))


@dataclass(frozen=True)
class ChildLimits:
    """The children's bounds: built on the worker from the published facts of their blocks, or given (the states
    of a partitioned run, whose bounds the driver holds)."""

    facts: Invariants | None = None          # the published facts of the children's blocks
    unit_of_block: np.ndarray | None = None  # child (0-based in the batch) of each of those blocks
    total: np.ndarray | None = None          # total-population invariant of the children, where it binds
    given: list[Bounds] | None = None

    def bounds(self, schema: Schema, n_children: int) -> list[Bounds]:
        if self.given is not None:
            return self.given
        return unit_bounds(schema, self.facts, self.unit_of_block, n_children, total=self.total)


@dataclass(frozen=True)
class BatchTask:
    """Everything a worker needs to solve a batch of parents: no geography, no country-sized array."""

    family: Family          # what is solved
    reads: BatchReads       # where its noisy answers are
    limits: ChildLimits     # the children's bounds
    settings: SolveSettings  # solver, rounding, L2 passes


def solve_batch(task: BatchTask) -> tuple[sp.csr_matrix, list, dict]:
    """Read the batch's noisy answers, build each parent's problem and solve it: (children's histograms, events,
    L2 certificate)."""
    family, settings = task.family, task.settings
    answers = task.reads.read(family.children)
    bounds = task.limits.bounds(family.schema, len(family.children))
    data, indices, indptr_counts, events, certificates = [], [], [], [], []
    for p in range(len(family.parents)):
        c0, c1 = family.children_of(p)
        problem = parent_problem(family.schema, family.parents[p], family.children[c0:c1],
                                 family.solved[p].toarray().ravel(), answers=[a.within(c0, c1) for a in answers],
                                 bounds=[Bounds(b.query, b.lower[c0:c1], b.upper[c0:c1], b.rule) for b in bounds],
                                 passes=settings.passes, dtype=settings.counts_dtype)
        solution = solve_parent(problem, solver=settings.solver, rounding=settings.rounding)
        block = sp.csr_matrix(solution.counts)
        data.append(block.data)
        indices.append(problem.cells[block.indices])
        indptr_counts.append(np.diff(block.indptr))
        events.extend(solution.events)
        certificates.append(solution.certificate)
    indptr = np.r_[0, np.cumsum(np.concatenate(indptr_counts))]
    solved = sp.csr_matrix((np.concatenate(data), np.concatenate(indices), indptr),
                           shape=(len(family.children), family.schema.size))
    return solved, events, merge_certificates(certificates)


def timed_solve_batch(task: BatchTask) -> tuple[sp.csr_matrix, list, dict, dict]:
    """solve_batch, plus the task's size and the worker's wall and CPU seconds on it (for the critical path)."""
    t0, c0 = time.perf_counter(), time.process_time()
    solved, events, l2 = solve_batch(task)
    return solved, events, l2, {"parents": len(task.family.parents), "children": len(task.family.children),
                                "seconds": time.perf_counter() - t0, "cpu_seconds": time.process_time() - c0}
