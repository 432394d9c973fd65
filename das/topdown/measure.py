"""Noisy measurements: for every level, every geounit and every query of the strategy, the true
answer plus exact discrete-Gaussian noise, streamed to the NMF in chunks of geounits.

True answers exist only inside one chunk at a time; only noisy answers leave this module.
Each (release, level, query, chunk) draws from its own random stream, so seeded runs are
reproducible whatever the order of work (or the machine it runs on), and a level or a chunk
already committed to the NMF is never drawn again.
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from dataclasses import dataclass, replace
from fractions import Fraction
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from das.core import atomic
from das.core.executors import ordered_map
from das.core.progress import bar
from das.frame.checkpoint import crash_point
from das.frame.rundir import nmf_level_path
from das.io import nmf
from das.io.nmf import NoisyAnswers
from das.model.geography import Geography
from das.model.schema import Schema
from das.privacy.accounting import Allocation
from das.privacy.sampler import discrete_gaussian

logger = logging.getLogger(__name__)

CHUNK_CELLS = 1 << 23  # answers per chunk (~64 MB of int64 true answers at most)
# geounits per chunk (levels with fewer units, e.g. any state fixture's blocks, are one chunk per query).
# The chunks name the random streams: changing either constant changes every seeded release.
CHUNK_UNITS = 1 << 16


@dataclass(frozen=True)
class Measured:
    """A release to measure: its name (the random streams' and NMF files' prefix), schema and allocation (its
    measurements, das.privacy.certificate.Measurement)."""

    release: str
    schema: Schema
    allocation: Allocation


@dataclass(frozen=True)
class Target:
    """Where measurements go: the NMF directory, their Parquet metadata, the executor that draws
    the chunks (None: in this process), and a dict receiving what was reused and drawn."""

    nmf_dir: Path
    metadata: dict | None = None
    executor: object | None = None
    report: dict | None = None
    state: str | None = None  # a state of a partitioned run: its own NMF files and random streams

    def level_path(self, release: str, level: str) -> Path:
        """The NMF file this target writes for a level (das.io.nmf: one per level, or per state)."""
        return nmf_level_path(self.nmf_dir, release, level, self.state)

    def stream(self, release: str, level: str, query: str, chunk: int) -> str:
        """The name of a chunk's random stream (a state's chunks are named by the state too)."""
        where = "" if self.state is None else f"s{self.state}/"
        return f"{release}/{level}/{query}/{where}{chunk}"


def true_answers(histograms: sp.csr_matrix, schema: Schema, query: str) -> np.ndarray:
    """(n_units x n_query_cells) int64 answers of a query for each row of `histograms`."""
    return _answers(histograms, None if query == "detailed" else schema.query(query).matrix)


def _answers(histograms: sp.csr_matrix, matrix: sp.csr_matrix | None) -> np.ndarray:
    """`true_answers` from the query's matrix (None: the detailed query, the histograms themselves)."""
    if matrix is None:
        return histograms.toarray().astype(np.int64)
    return (histograms @ matrix.T).toarray().astype(np.int64)


def noisy_answers(truth: np.ndarray, variance: Fraction, rng) -> np.ndarray:
    """The mechanism: every true answer plus its own exact discrete-Gaussian draw of variance `variance`.

    `truth` may carry leading axes (the privacy audit stacks many trials of one answer vector).
    """
    truth = np.asarray(truth, dtype=np.int64)
    return truth + discrete_gaussian(variance, truth.size, rng).reshape(truth.shape)


def _measure_chunk(task) -> Path:
    """Truth (from the chunk's sparse histograms: a fraction of the dense answers' size to send to a
    worker) + exact discrete-Gaussian noise from the chunk's own stream, committed to its part file."""
    histograms, matrix, variance, stream, path = task
    nmf.write_part(path, noisy_answers(_answers(histograms, matrix), variance, stream))
    return path


def charge(accountant, allocation: Allocation, levels) -> None:
    """Charge every measurement of the allocation to `accountant` (None: no accounting), before any draw:
    one that would overspend, or measure a (level, query) twice, stops here. The charge is what the noise
    costs (1/sigma^2, CONVENTION), so a measurement whose variance is not its rho's is charged as drawn."""
    if accountant is not None:
        for level in levels:
            for m in allocation.level(level):
                accountant.charge(level, m.query, 1 / m.sigma2)


def measure_in_memory(geography: Geography, block_histograms: sp.csr_matrix, schema: Schema,
                      allocation: Allocation, *, rng, trials: int = 1, accountant=None) -> list[NoisyAnswers]:
    """The measurement of `measure_release` (same plan order, true answers, noise and charging),
    repeated `trials` times and kept in memory instead of the NMF: what the privacy audit runs.
    Each measurement's answers are (trials x n_units x n_cells)."""
    charge(accountant, allocation, geography.levels)
    out = []
    for level in geography.levels:
        histograms = geography.aggregate(block_histograms, level)
        for m in allocation.level(level):
            truth = true_answers(histograms, schema, m.query)
            stream = rng.spawn(f"audit/{level}/{m.query}/{len(out)}")
            noisy = noisy_answers(np.broadcast_to(truth, (trials, *truth.shape)), m.sigma2, stream)
            out.append(NoisyAnswers(m.query, level, geography.units(level), noisy, m.sigma2))
    return out


def parts_dir(out_path: Path) -> Path:
    """Where a level's committed (query, chunk) parts live until the level file is assembled."""
    return out_path.with_name(out_path.name + ".parts")


def _part_path(parts: Path, query_number: int, chunk_number: int) -> Path:
    return parts / f"q{query_number:03d}-c{chunk_number:07d}.nmfpart"


def _check_plan(parts: Path, plan: list) -> None:
    """A parts directory belongs to one plan of (query, variance, chunk size, geounits); refuse another."""
    stored = parts / "plan.json"
    if stored.exists():
        if json.loads(stored.read_text()) != plan:
            raise ValueError(f"{parts}: committed measurement chunks were made with another plan "
                             f"(queries, variances, chunking or geounits differ); expected {plan}")
        return
    atomic.write_text(stored, json.dumps(plan))


def measure_level(what: Measured, level: str, level_histograms: sp.csr_matrix, geocodes: np.ndarray, *, rng,
                  target: Target) -> Path:
    """Measure every query at one level and write that level's NMF file (atomically, with `metadata`).

    Each (query, chunk) is committed to `<level>.parquet.parts/` as soon as it is drawn; a chunk
    committed by an earlier, interrupted run is reused and never drawn again. A chunk whose write
    was torn (a `.partial` file: never renamed, never read, never used) is deleted and drawn; see
    docs/scale.md for why that keeps the privacy accounting honest. `report` (if given) receives
    counts of reused and drawn chunks and the names of torn ones. `executor` draws the chunks
    elsewhere (das.core.executors); the streams are the same, so seeded results are too.
    """
    release, schema, measurements = what.release, what.schema, what.allocation.level(level)
    executor, report, out_path = target.executor, target.report, target.level_path(release, level)
    n_units = len(geocodes)
    parts = parts_dir(out_path)
    parts.mkdir(parents=True, exist_ok=True)
    chunks = [max(1, min(CHUNK_UNITS, CHUNK_CELLS // max(schema.query(m.query).size, 1))) for m in measurements]
    _check_plan(parts, [[m.query, str(m.sigma2), c, n_units] for m, c in zip(measurements, chunks)])
    torn = sorted(p.name for p in parts.glob("*.partial"))
    for name in torn:
        (parts / name).unlink()
    todo, reused = [], 0
    for qi, (m, chunk) in enumerate(zip(measurements, chunks)):
        for number, start in enumerate(range(0, n_units, chunk)):
            if _part_path(parts, qi, number).exists():
                reused += 1
            else:
                todo.append((qi, m, number, start, min(n_units, start + chunk)))

    def tasks():
        for qi, m, number, start, stop in todo:
            matrix = None if m.query == "detailed" else schema.query(m.query).matrix
            yield (level_histograms[start:stop], matrix, m.sigma2, rng.spawn(target.stream(release, level, m.query, number)),
                   _part_path(parts, qi, number))

    # a chunk's histograms (and so its truth) leave this process only inside its task; the worker returns
    # the committed path.
    # The level file is assembled, in plan order, from each part as soon as it is committed (read back
    # from disk: what is written is what was committed), while the workers draw the next chunks.
    committed = iter(ordered_map(executor, _measure_chunk, tasks(), in_flight=getattr(executor, "slots", 1) + 1)
                     if executor else map(_measure_chunk, tasks()))
    drawn = {(qi, number) for qi, _, number, _, _ in todo}
    writer = nmf.LevelWriter(out_path, target.metadata)
    try:
        for qi, (m, chunk) in enumerate(zip(measurements, chunks)):
            for number, start in enumerate(range(0, n_units, chunk)):
                if (qi, number) in drawn:
                    next(committed)
                    crash_point(f"measure:{release}:{level}")
                noisy = nmf.read_part(_part_path(parts, qi, number))
                stop = min(n_units, start + chunk)
                if noisy.shape != (stop - start, schema.query(m.query).size):
                    raise ValueError(f"{_part_path(parts, qi, number)}: holds {noisy.shape} answers, expected "
                                     f"{(stop - start, schema.query(m.query).size)}")
                writer.write_answers(NoisyAnswers(m.query, level, geocodes[start:stop], noisy, m.sigma2))
    except BaseException:
        writer.abort()
        raise
    if report is not None:
        report.update({"reused_chunks": reused, "drawn_chunks": len(todo), "torn_chunks_discarded": torn})
    path = writer.close()
    shutil.rmtree(parts, ignore_errors=True)
    return path


def measure_release(what: Measured, geography: Geography, block_histograms: sp.csr_matrix, *, rng, target: Target,
                    accountant=None, levels: tuple[str, ...] | None = None) -> dict[str, Path]:
    """Measure every level of the allocation, or those in `levels`, skipping levels already written.

    Every measurement is charged to `accountant` (if given) before any noise is drawn, so an allocation
    that would overspend, or measure a (level, query) twice, stops before the first draw.
    """
    charge(accountant, what.allocation, geography.levels)
    written, report = {}, target.report
    for level in bar(levels or geography.levels, desc=f"measuring {what.release}", unit="level", leave=False):
        path = target.level_path(what.release, level)
        if path.exists():  # a complete level from an earlier, interrupted run: never redraw
            shutil.rmtree(parts_dir(path), ignore_errors=True)  # left if killed just after the rename
            written[level] = path
            if report is not None:
                report[level] = {"reused_level": True}
            continue
        t0 = time.perf_counter()
        histograms = geography.aggregate(block_histograms, level)
        level_report: dict = {}
        written[level] = measure_level(what, level, histograms, geography.units(level), rng=rng,
                                       target=replace(target, report=level_report))
        if report is not None:
            report[level] = level_report
        queries = what.allocation.level(level)  # the operator's -v detail (stderr): the plan, its sizes and the time
        named = ", ".join(m.query for m in queries[:6]) + (", ..." if len(queries) > 6 else "")
        logger.debug(f"measured {what.release}/{level}: {len(queries)} queries ({named}) "
                     f"on {geography.n_units(level):,} geounits, {level_report.get('drawn_chunks', 0)} chunk(s) drawn, "
                     f"{level_report.get('reused_chunks', 0)} reused ({time.perf_counter() - t0:.2f} s)")
    return written
