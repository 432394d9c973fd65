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

import logging
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from das.core.errors import RunError
from das.core.executors import largest_first
from das.driver import preflight
from das.driver.admission import (
    input_records,
    task_budget_mb,
    task_sizes,
    widths,
    worker_budgets,
)
from das.driver.pipeline import Pipeline
from das.driver.states import (
    TOP,
    StateTop,
    Work,
    finish_state,
    measure_state_task,
    read_state,
    record_report,
    report_record,
    solve_state,
)
from das.frame.checkpoint import load_solved, save_solved
from das.frame.records import PublishedInvariants, SpineRecord
from das.frame.rundir import RunDir, nmf_level_path
from das.io import nmf
from das.io import parts as state_parts
from das.io.outputs import NationRelease, assemble_spine, concatenate_parts
from das.io.partitions import PartitionError, StateInputs, state_inputs
from das.model.levels import NATION, STATE
from das.model.rules import Bounds
from das.model.schema import Schema
from das.privacy.accounting import PrivacyAccountant
from das.topdown.batch import BatchReads, BatchTask, ChildLimits, Family, timed_solve_batch
from das.topdown.engine import EngineOptions, LevelReport
from das.topdown.measure import Target, charge, measure_level
from das.topdown.optimality import merge_certificates
from das.topdown.solve import solve_root

logger = logging.getLogger(__name__)


@dataclass
class Tops:
    """The states of a partitioned run after A, in FIPS order: what the driver holds."""

    inputs: list[StateInputs]
    states: list[StateTop]

    def published_invariants(self) -> PublishedInvariants:
        totals = {s.state: s.population for s in self.states}
        return PublishedInvariants({NATION: {"": sum(totals.values())}, STATE: totals})

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
        charge(accountant, r.allocation, pipe.spec.levels)  # every level's, the states' below included
        if accountant.spent != r.allocation.rho:
            raise RunError(f"{name}: planned rho {accountant.spent} differs from the certified {r.allocation.rho}")
        states = sp.vstack([s.truth[name] for s in tops.states], format="csr")
        truth = {NATION: sp.csr_matrix(states.sum(axis=0)), STATE: states}
        for level, geocodes in ((NATION, np.array([""])), (STATE, codes)):
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
        return states, [record_report(r) for r in meta["reports"]]
    t0 = time.perf_counter()
    noisy = nmf.read_level(nmf_level_path(nmf_dir, name, NATION), np.array([""]))
    root = solve_root(schema, list(noisy.values()), _summed(bounds), settings=options.settings(NATION))
    nation = sp.csr_matrix(root.counts.reshape(1, -1))
    reports = [LevelReport(NATION, 1, time.perf_counter() - t0, list(root.events),
                           merge_certificates([root.certificate]))]
    t1 = time.perf_counter()
    index = nmf.level_index(nmf_level_path(nmf_dir, name, STATE), len(codes))
    task = BatchTask(Family(schema, np.array([""]), nation, codes, np.array([0, len(codes)])),
                     BatchReads(index, 0, len(codes)), ChildLimits(given=_stacked(bounds)), options.settings(STATE))
    states, events, l2, figures = timed_solve_batch(task)
    reports.append(LevelReport(STATE, 1, time.perf_counter() - t1, events, l2, [figures]))
    save_solved(checkpoint, states, [], {"reports": [report_record(r) for r in reports]})
    return states, reports


# ---------------------------------------------------------------------------------------------
# B and C: each state below the top (workers)


def measure_states(pipe: Pipeline, run_dir: RunDir, tops: Tops, executor) -> list[Path]:
    """`das measure` of a partitioned run: the top, then every state's levels below it, largest first; and the
    invariants per block and the spine they were measured on, when not the standard one (the states' parts of
    them assembled): their files."""
    work = Work.of(pipe, run_dir)
    measure_top(pipe, tops, run_dir.nmf_dir)
    largest_first(executor, measure_state_task, [(work, si) for si in tops.inputs], sizes=tops.persons,
                  desc="measuring the states")
    parts = [RunDir(work.files.state_dir(si.state)) for si in tops.inputs]
    invariants = concatenate_parts(lambda d: d.block_invariants, run_dir, parts, work.metadata)
    return [invariants] if work.spine == "standard" else [assemble_spine(run_dir, parts, work.metadata), invariants]


# ---------------------------------------------------------------------------------------------
# The driver


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
                             sizes=task_sizes(tops.persons, width), limit=work.persons_limit, widths=width,
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
                         sizes=task_sizes(tops.persons, width), limit=work.persons_limit, widths=width,
                         places=places, desc="writing the states")
    if "units" in pipe.releases:
        reports["units"] = merge_reports(top_units, [d.reports for d in done])
    pipe.timings["postprocess_units_and_parts"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    outputs = state_parts.assemble(run_dir, [d.parts for d in done], NationRelease(pipe.schemas, nation), work.outputs)
    pipe.timings["write_outputs"] = time.perf_counter() - t0
    return nation, reports, outputs

