"""The driver of every TopDown run: a run is its partitions, the driver holds the top above them.

A partitioned run's partitions are its states' files (das.io.partitions); a whole run's one partition
is the whole input, rooted at the nation, and held in the driver's process. A run goes

    per partition  A  read and check the inputs: the partition's top (its states' true histograms and bounds)
    driver            charge the whole plan; measure and solve the top (persons): the nation and the states
    per partition  B  measure the levels below the top into its NMF files, solve persons below the top
    driver            solve the units' top (their bounds need the persons' household persons)
    per partition  C  solve units below the top, write its output parts
    driver            write the release: assemble the files from the states' parts, streaming (das.io.parts),
                      or the whole input's solution cut into its states' parts and assembled (das.io.parts.write_release)

A whole run has no top: the driver charges the plan and its partition does the rest in the driver's
process, with the run's pool, its inputs read once. A partitioned run's state tasks go to the workers,
so the driver's memory follows the number of states and a worker's the largest state; a large state
solves on several slots (a pool of its own, `widths`), so few large states still use every core. No
noise is drawn before every partition has passed A. A state's chunks draw from streams named by the
state, the whole input's from the run's; on resume every NMF file and committed chunk, solved level
and batch, and state's parts is reused, never drawn or solved again. The operator files of each state
(its facts, its solution, its parts) live under checkpoints/states/<state>/ and go with the checkpoints;
the whole input's solved levels and batches under checkpoints/<release>/.
"""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from das.core.executors import largest_first
from das.driver import preflight
from das.driver.admission import (
    input_records,
    task_budget_mb,
    task_sizes,
    widths,
    worker_budgets,
)
from das.driver.inputs import Confidential
from das.driver.pipeline import Pipeline
from das.driver.states import (
    TOP,
    Held,
    StateTop,
    Work,
    finish_state,
    measure_partition,
    measure_state_task,
    read_state,
    record_report,
    report_record,
    solve_state,
)
from das.frame.checkpoint import crash_point, load_solved, save_solved
from das.frame.records import PublishedInvariants, SpineRecord
from das.frame.rundir import RunDir, nmf_level_path
from das.io import nmf
from das.io import parts as state_parts
from das.io.outputs import NationRelease, assemble_spine, concatenate_parts
from das.io.partitions import PartitionError, StateInputs, is_partitioned, state_inputs
from das.model.levels import NATION, STATE
from das.model.rules import Bounds
from das.model.schema import Schema
from das.topdown.batch import BatchReads, BatchTask, ChildLimits, Family, timed_solve_batch
from das.topdown.engine import EngineOptions, LevelReport
from das.topdown.measure import Target, measure_level
from das.topdown.optimality import merge_certificates
from das.topdown.solve import solve_root

logger = logging.getLogger(__name__)


@dataclass
class Tops:
    """The partitions of a run after A, in FIPS order (the whole input: one): what the driver holds."""

    inputs: list[StateInputs]
    states: list[StateTop]

    def published_invariants(self) -> PublishedInvariants:
        """The partitions' totals held exactly: the nation's summed, the states' side by side."""
        merged: dict[str, dict[str, int]] = {}
        for top in self.states:
            for level, totals in top.published.total_population.items():
                if level == NATION:
                    merged[NATION] = {"": merged.get(NATION, {}).get("", 0) + totals[""]}
                else:
                    merged.setdefault(level, {}).update(totals)
        return PublishedInvariants(merged)

    @property
    def n_blocks(self) -> int:
        return sum(s.blocks for s in self.states)

    @property
    def persons(self) -> list[int]:
        return [s.population for s in self.states]

    @property
    def spine_record(self) -> SpineRecord | None:
        """The spine the partitions are measured on (every state reads the same area files)."""
        return self.states[0].spine if self.states else None

    @property
    def held(self) -> Confidential | None:
        """The whole input, held in the driver's process (None: a partitioned run)."""
        return self.states[0].kept if len(self.states) == 1 else None


def partitions(spec) -> list[StateInputs]:
    """A run's partitions: one pair of files per state (das.io.partitions), or the whole input (state None)."""
    if is_partitioned(spec.persons_path, spec.units_path):
        check_levels(spec.levels)
        return state_inputs(spec.persons_path, spec.units_path)
    return [StateInputs(None, spec.persons_path, spec.units_path)]


def check_levels(levels: tuple[str, ...]) -> None:
    if tuple(levels[:len(TOP)]) != TOP or len(levels) <= len(TOP):
        raise PartitionError(f"a partitioned run needs the levels to start {' > '.join(TOP)} (the driver solves "
                             f"those, the states the rest); this spec has {' > '.join(levels)}")


# ---------------------------------------------------------------------------------------------
# A: read and check each state's inputs (workers)


def read_states(pipe: Pipeline, run_dir: RunDir, executor=None, memory_gb: float | None = None) -> Tops:
    """A for every partition: the states largest first on the workers, the whole input in this process (before
    the pool starts); no noise is drawn until all have passed."""
    t0 = time.perf_counter()
    inputs = partitions(pipe.spec)
    work = Work.of(pipe, run_dir, inputs, memory_mb=task_budget_mb(memory_gb, executor), executor=executor)
    if work.top:
        persons = [input_records(si.persons) for si in inputs]
        tops = Tops(inputs, largest_first(executor, read_state, [(work, si) for si in inputs], sizes=persons,
                                          limit=work.persons_limit, places=worker_budgets(executor),
                                          desc="reading the states"))
    else:
        logger.info(f"reading and checking the inputs ({inputs[0].persons.name}, {inputs[0].units.name})")
        tops = Tops(inputs, [read_state((work, inputs[0]))])
    where = preflight.nearest_existing(run_dir.path)  # every partition's files together, before any noise
    preflight.check_space(preflight.SpaceEstimate(sum(s.bytes_needed for s in tops.states),
                                                  shutil.disk_usage(where).free, where), run_dir.path,
                          pl94171=work.outputs.pl94171)
    pipe.timings["read_inputs"] = time.perf_counter() - t0
    logger.info(f"read {sum(tops.persons):,} persons in {tops.n_blocks:,} blocks"
                + (f" of {len(inputs)} state(s)" if work.top else "") + f" ({pipe.timings['read_inputs']:.1f} s)")
    return tops


# ---------------------------------------------------------------------------------------------
# The driver's top: measure and solve the nation and the states


def measure_top(pipe: Pipeline, tops: Tops, nmf_dir: Path) -> None:
    """Charge each release's whole plan (before any draw), then measure the driver's top (a partitioned run's
    nation and states; nothing above a whole run's one partition)."""
    pipe.charge()  # every level's, the partitions' below included
    if tops.held is not None:
        return
    codes = np.array([s.state for s in tops.states])
    for name, r in pipe.releases.items():
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
# das measure


def measure_states(pipe: Pipeline, run_dir: RunDir, tops: Tops, executor) -> list[Path]:
    """`das measure`: the top, then every partition's levels below it, largest first; and the invariants per block
    and the spine they were measured on, when not the standard one (a partitioned run's assembled from the states'
    parts of them): their files."""
    work, t0 = Work.of(pipe, run_dir, tops.inputs, executor=executor), time.perf_counter()
    measure_top(pipe, tops, run_dir.nmf_dir)
    if tops.held is not None:
        _, facts = measure_partition(work, tops.inputs[0], tops.held, executor=executor)
        pipe.timings["measure"] = time.perf_counter() - t0
        return facts
    largest_first(executor, measure_state_task, [(work, si) for si in tops.inputs], sizes=tops.persons,
                  desc="measuring the states")
    pipe.timings["measure"] = time.perf_counter() - t0
    parts = [work.part(si.state) for si in tops.inputs]
    invariants = concatenate_parts(lambda d: d.block_invariants, run_dir, parts, work.metadata)
    return [invariants] if work.spine == "standard" else [assemble_spine(run_dir, parts, work.metadata), invariants]


# ---------------------------------------------------------------------------------------------
# The driver


def merge_reports(top: list[LevelReport], states: list[list[LevelReport]]) -> list[LevelReport]:
    """One report per level: the driver's top levels, then each level below summed over the partitions (one
    partition's as they are)."""
    if len(states) == 1:
        return [*top, *states[0]]
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


@dataclass(frozen=True)
class Driving:
    """How the driver sends the partitions' tasks: the run's executor, its memory budget, and the whole input's
    progress bars and measurement record (held in this process)."""

    executor: object
    memory_gb: float | None = None
    progress: bool = False
    measured: Callable[[dict], None] | None = None  # receives what the held partition's measurement reused and drew


def _each(work: Work, driving: Driving, fn: Callable, tasks: list, *, sizes: list[int], width: list[int],
          desc: str) -> list:
    """A task per partition: a state's on the workers, largest first within the memory budget; the whole input's
    in this process (its chunks and batches on the run's pool)."""
    if not work.top:
        return [fn(task) for task in tasks]
    return largest_first(driving.executor, fn, tasks, sizes=task_sizes(sizes, width), limit=work.persons_limit,
                         widths=width, places=worker_budgets(driving.executor), desc=desc)


def _top(work: Work, pipe: Pipeline, name: str, tops: Tops, *, bounds: list) -> tuple[list, list[LevelReport]]:
    """A release's top solved by the driver (the nation and the states), each partition's rows; none above a
    whole run's partition."""
    if not work.top:
        return [None] * len(tops.states), []
    codes = np.array([s.state for s in tops.states])
    solved, reports = solve_top(name, pipe.schemas[name], codes, bounds, nmf_dir=work.nmf_dir,
                                options=pipe.engine_options(), checkpoint=work.files.solution(name))
    return [solved[i] for i in range(len(codes))], reports


def run_states(pipe: Pipeline, run_dir: RunDir, tops: Tops, driving: Driving) -> tuple[dict, dict[str, list[LevelReport]],
                                                                                      dict[str, list[Path]]]:
    """Everything after A: the top measured and solved, B and C per partition, the release written.
    Returns the nation's solved histograms (per release), the level reports and the files written
    (by manifest field)."""
    executor = driving.executor
    work = Work.of(pipe, run_dir, tops.inputs, memory_mb=task_budget_mb(driving.memory_gb, executor),
                   executor=executor, progress=driving.progress)
    held = None if tops.held is None else Held(tops.held, executor, driving.measured)
    width = widths(tops.persons, executor) if work.top else [getattr(executor, "slots", 1)]

    t0 = time.perf_counter()
    measure_top(pipe, tops, work.nmf_dir)
    rows, top_persons = _top(work, pipe, "persons", tops, bounds=[s.bounds for s in tops.states])
    solved_b = _each(work, driving, solve_state, [(work, si, rows[i], width[i], held) for i, si in enumerate(tops.inputs)],
                     sizes=tops.persons, width=width, desc="measuring and solving the states")
    pipe.timings["measure_and_postprocess_persons"] = time.perf_counter() - t0
    for key in ("measure", "postprocess_persons"):  # the longest partition's
        pipe.timings[key] = max(s.seconds.get(key, 0.0) for s in solved_b)
    logger.info(f"measured and post-processed persons in {len(tops.inputs)} partition(s) "
                f"({pipe.timings['measure_and_postprocess_persons']:.1f} s)")
    reports = {"persons": merge_reports(top_persons, [s.reports for s in solved_b])}

    t0 = time.perf_counter()
    units_rows, top_units = [None] * len(tops.inputs), []
    if "units" in pipe.releases:
        units_rows, top_units = _top(work, pipe, "units", tops, bounds=[s.units_bounds for s in solved_b])
    done = _each(work, driving, finish_state, [(work, s, units_rows[i], width[i], held) for i, s in enumerate(solved_b)],
                 sizes=tops.persons, width=width, desc="writing the states")
    if "units" in pipe.releases:
        reports["units"] = merge_reports(top_units, [d.reports for d in done])
    pipe.timings["postprocess_units_and_parts"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    logger.info("writing the release: microdata, tables, noisy measurements")
    nation, outputs = _write(work, pipe, tops, done, rows={"persons": rows, "units": units_rows})
    pipe.timings["write_outputs"] = time.perf_counter() - t0
    return nation, reports, outputs


def _write(work: Work, pipe: Pipeline, tops: Tops, done: list, *, rows: dict) -> tuple[dict, dict[str, list[Path]]]:
    """The release's files: the whole input's solution written, or the states' parts assembled (das.io.parts)
    with the nation's rows (the sum of the states' solved `rows`, by release); and the nation's solved histograms."""
    if tops.held is not None:
        solved = done[0].solved
        outputs = state_parts.write_release(work.files, tops.held.solved_release(pipe.schemas, solved), work.outputs,
                                            after=lambda name: crash_point("outputs"))
        return {name: sp.csr_matrix(h.sum(axis=0)) for name, h in solved.items()}, outputs
    nation = {name: sp.csr_matrix(sp.vstack(rows[name], format="csr").sum(axis=0)) for name in pipe.releases}
    return nation, state_parts.assemble(work.files, [d.parts for d in done], NationRelease(pipe.schemas, nation),
                                        work.outputs)
