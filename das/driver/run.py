"""`das run SPEC`: a whole release, from confidential microdata to validated outputs.

The stages are das.driver.partitioned's (one driver for every run: a whole input is one partition held in this
process, a partitioned input its states on the workers), the run directory around them das.frame.lifecycle's
(manifest before any noise, outputs from the registry, completion and validation); this module keeps the order
of refusals before anything is drawn, and resumes an interrupted run without drawing noise twice.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from das.core import atomic
from das.core.errors import BudgetError, InputError, OutDirError, RunError, RunStopped, SpecError
from das.core.executors import lasting, make_executor
from das.driver import preflight
from das.driver.admission import TASK_MB_PER_PERSON, task_budget_mb
from das.driver.partitioned import Driving, Tops, measure_states, read_states, run_states
from das.driver.pipeline import Pipeline, code_version
from das.driver.runspec import Budget, RunSpec, load_run_spec
from das.frame import bundle, signing
from das.frame.checkpoint import Checkpoints, is_disk_full
from das.frame.lifecycle import (
    Completion,
    Opening,
    ReleaseFrame,
    check_out_dir,
    complete,
    complete_measurement,
    holds,
    open_frame,
    operator_fingerprint,
    output_plan,
    protected_paths,
    release_valid,
)
from das.frame.manifest import Manifest
from das.frame.records import Counts, EngineRecord, FailsafeRecord, Interruption, LevelRecord, ReleaseInfo, RunDirError
from das.frame.rundir import RunDir
from das.frame.summary import render_summary
from das.io.partitions import PartitionError, is_partitioned
from das.topdown.engine import level_detail, task_summary
from das.topdown.measure import parts_dir

logger = logging.getLogger(__name__)

__all__ = ["EXPECTED", "RunOptions", "RunResult", "measure_only", "resume_run", "run"]


@dataclass(frozen=True)
class RunOptions:
    """How to run (not what): the machine, the output directory's fate, the progress bar."""

    workers: int = 1
    engine: str = "local"  # local | dask
    scheduler: str | None = None  # a Dask scheduler address
    progress: bool = True
    overwrite: bool = False
    allow_large_rho: bool = False
    memory_gb: float | None = None  # a partitioned run's budget for its state tasks (None: no limit)
    signing_key: Path | None = None  # the operator's Ed25519 key (das keygen); None: the release's own


@dataclass(frozen=True)
class RunResult:
    out_dir: Path
    manifest: Manifest
    valid: bool
    summary: str


def _out_dir(run_dir: RunDir, overwrite: bool, spec: RunSpec, signing_key: Path | None = None) -> None:
    check_out_dir(run_dir.path, overwrite, protected_paths(spec, signing_key))


def _opening(pipe: Pipeline, tops: Tops) -> Opening:
    """What a TopDown release says of itself before any noise: schemas and strategies, certificates,
    the invariants published exactly, and what it holds (das.frame.lifecycle.holds)."""
    releases = {name: ReleaseInfo(r.schema.name, r.strategy.name)  # the names das.frame.pinned publishes them under
                for name, r in pipe.releases.items()}
    return Opening(releases, pipe.certificates, tops.published_invariants(), holds(_plan(pipe), synthetic=False),
                   private=pipe.rng.private, version=code_version(), spine=tops.spine_record)


def _plan(pipe: Pipeline):
    return output_plan(pipe.spec, pipe.tables, pipe.metadata())


def _open(pipe: Pipeline, run_dir: RunDir, tops: Tops, options: RunOptions) -> ReleaseFrame:
    return open_frame(pipe.spec, run_dir, _opening(pipe, tops), plan=_plan(pipe), overwrite=options.overwrite,
                      signing_key=options.signing_key)


def _partitioned(spec: RunSpec) -> bool:
    """Inputs given as directories of one file per state: a partitioned run (das.io.partitions)."""
    try:
        return is_partitioned(spec.persons_path, spec.units_path)
    except PartitionError as e:
        raise RunError(str(e)) from None


def _read(pipe: Pipeline, run_dir: RunDir, executor=None, memory_gb: float | None = None) -> Tops:
    """A for every partition (das.driver.partitioned.read_states): nothing is written yet."""
    try:
        return read_states(pipe, run_dir, executor, memory_gb)
    except PartitionError as e:
        raise RunError(str(e)) from None


def log_levels(level_reports: dict, geography=None) -> None:
    """With -v, each release's levels in a line each on stderr (das.topdown.engine.level_detail): problems, the
    largest parent, the largest duality gap, times. The operator's log only: the manifest keeps its own fields."""
    if not logger.isEnabledFor(logging.DEBUG):  # the largest parent is looked up only when it is said
        return
    for name, reports in level_reports.items():
        for report in reports:
            logger.debug(f"post-processed {name}/{level_detail(report, geography)}")


# ---------------------------------------------------------------------------------------------
# das measure


def measure_only(spec_path: str | Path | Mapping | RunSpec, out_dir, *, seed: int | None = None, overwrite: bool = False,
                 allow_large_rho: bool = False, budget: Budget | None = None,
                 signing_key: Path | None = None) -> Manifest:
    """`das measure`: the NMF and a manifest, no post-processing: an NMF release, validated and signed as
    `das run` signs (`signing_key`: the operator's Ed25519 key, das keygen; None: a key of the release's own)."""
    if signing_key is not None:  # the operator's key, checked before anything is read
        signing.read_private_key(signing_key)
    pipe = Pipeline.prepare(spec_path, seed, allow_large_rho=allow_large_rho, budget=budget)
    run_dir = RunDir(out_dir)
    preflight.check_writable(run_dir.path)
    _out_dir(run_dir, overwrite, pipe.spec, signing_key)
    executor = make_executor("local", 1)
    try:
        tops = _read(pipe, run_dir, executor)  # nothing written yet
        frame = _open(pipe, run_dir, tops, RunOptions(overwrite=overwrite, signing_key=signing_key))
        try:
            outputs = measure_states(pipe, run_dir, tops, executor)  # the NMF, the invariants, the spine if not standard
        except BaseException as e:
            mark_interrupted(frame, e)
            stop = stopped(e, run_dir.path)
            if stop is e:
                raise
            raise stop from e
    finally:
        executor.close()
    return complete_measurement(frame, run_dir.nmf_files(), outputs, timings=dict(pipe.timings)).manifest


# ---------------------------------------------------------------------------------------------
# Resume


def _progress_found(run_dir: RunDir, pipe: Pipeline) -> dict:
    """What an interrupted run left: NMF levels complete or in committed chunks, checkpointed levels and batches."""
    found: dict = {}
    levels = pipe.spec.levels
    for name in pipe.releases:
        ckpt = Checkpoints(run_dir.checkpoints_dir, name)
        files = {lv: run_dir.nmf_level_files(name, lv) for lv in levels}
        chunks = {lv: _chunk_dirs(run_dir, name, lv) for lv in levels}
        found[name] = {
            # a level in one file, or (a partitioned run) the states whose file of the level is complete
            "nmf_levels": [lv for lv in levels if files[lv] and files[lv][0][1] is None],
            "nmf_states": {lv: [s for _, s in files[lv]] for lv in levels if files[lv] and files[lv][0][1] is not None},
            "nmf_levels_in_chunks": {lv: sum(len(list(p.glob("*.nmfpart"))) for p in chunks[lv])
                                     for lv in levels if chunks[lv]},
            "solved_levels": [lv for lv in levels if ckpt.level_path(lv).exists()],
            "solved_batches": {lv: len(list(ckpt.parts_dir(lv).glob("b*.npz")))
                               for lv in levels if ckpt.parts_dir(lv).is_dir()},
        }
    return found


def _chunk_dirs(run_dir: RunDir, release: str, level: str) -> list[Path]:
    """The committed-chunk directories of a level being measured: its one file's, or its states' files'."""
    whole = parts_dir(run_dir.nmf_level(release, level))
    if whole.is_dir():
        return [whole]
    states = parts_dir(run_dir.nmf_level(release, level, "*"))
    return sorted(states.parent.glob(states.name))


@dataclass(frozen=True)
class Stored:
    """A run directory to continue: its public manifest and its operator record and key."""

    manifest: Manifest
    operator: dict
    key: bytes


def _load_stored(run_dir: RunDir) -> Stored:
    if not run_dir.manifest_path.is_file():
        raise RunError(f"cannot resume {run_dir.path}: {run_dir.manifest_path} not found (expected the directory of an "
                       "interrupted `das run`, which writes manifest.json before it measures anything)")
    try:
        manifest = run_dir.read()
    except RunDirError as e:
        raise RunError(f"cannot resume {run_dir.path}: {e} (it was not written by a resumable `das run`)") from None
    try:
        operator, key = bundle.read_operator(run_dir.path)
    except bundle.BundleError as e:
        raise RunError(f"cannot resume {run_dir.path}: {e} (it was not written by a resumable `das run`)") from None
    missing = [k for k in ("spec_path", "fingerprint") if k not in operator]
    if missing:
        raise RunError(f"cannot resume {run_dir.path}: its operator record has no {', '.join(missing)}")
    return Stored(manifest, operator, key)


def _check_fingerprint(out_dir: Path, stored: dict, current: dict, what: str) -> None:
    """Refuse to continue a run directory with another spec, seed or input."""
    problems = []
    if what == "spec" and stored.get("spec_sha256") != current["spec_sha256"]:
        problems.append("the run spec differs from the one the run started with (a budget given by --rho, --eps "
                        "or --delta counts: give the same)")
    if what == "spec" and stored.get("seed") != current["seed"]:
        problems.append(f"seed {current['seed']} differs from the run's {stored.get('seed')}")
    if what == "inputs":
        for name, files in current["inputs"].items():
            if stored.get("inputs", {}).get(name) != files:
                problems.append(f"the {name} input changed since the run started (keyed fingerprint differs)")
    if problems:
        raise RunError(f"{out_dir} belongs to another run: " + "; ".join(problems)
                       + ". Resume with the same spec, seed and inputs, or start a new run in another directory")


def _check_resumable(run_dir: RunDir, stored: Stored, spec: RunSpec) -> None:
    """The same spec, seed and inputs (keyed fingerprints, read before any input is read)."""
    current = {"spec_sha256": bundle.spec_digest(spec.fingerprint_text), "seed": spec.seed}
    _check_fingerprint(run_dir.path, stored.operator["fingerprint"], current, "spec")
    for name, path in (("persons", spec.persons_path), ("units", spec.units_path),
                       *((f"{t} areas", p) for t, p in spec.areas.items())):
        if isinstance(path, Path) and not path.exists():  # fingerprinted before reading: the bytes read are those
            raise RunError(f"cannot resume {run_dir.path}: the {name} input {path} is not found")
    _check_fingerprint(run_dir.path, stored.operator["fingerprint"], operator_fingerprint(spec, stored.key), "inputs")


def resume_run(run_dir: str | Path, spec_path: str | Path | Mapping | RunSpec | None = None, seed: int | None = None,
               *, budget: Budget | None = None, **settings) -> RunResult:
    """`das run --resume RUN_DIR`: continue an interrupted run from its stored NMF and checkpoints."""
    stored = _load_stored(RunDir(run_dir))
    stored_seed = stored.operator["fingerprint"].get("seed")
    if seed is not None and seed != stored_seed:
        raise RunError(f"{run_dir} belongs to another run: seed {seed} differs from the run's {stored_seed}")
    if spec_path is not None:
        given = load_run_spec(spec_path, seed=stored_seed, budget=budget)
        _check_fingerprint(Path(run_dir), stored.operator["fingerprint"],
                           {"spec_sha256": bundle.spec_digest(given.fingerprint_text), "seed": stored_seed}, "spec")
    if spec_path is None and stored.operator["spec_path"] is None:
        raise RunError(f"cannot resume {run_dir}: its spec was given as a dict, of which das keeps no file; give the "
                       "same dict again (resume_run's spec_path)")
    return run(spec_path or stored.operator["spec_path"], run_dir, seed=stored_seed, resume=True, budget=budget,
               **settings)


# ---------------------------------------------------------------------------------------------
# das run


def run(spec_path: str | Path | Mapping | RunSpec, out_dir: str | Path, seed: int | None = None, *, resume: bool = False,
        budget: Budget | None = None, **settings) -> RunResult:
    """A whole release into out_dir; with resume=True, continue the interrupted run in out_dir.
    `settings` are RunOptions fields (workers, engine, scheduler, progress, overwrite, allow_large_rho);
    `budget` the command line's persons budget and delta (--rho or --eps, --delta), over the spec's.

    Order: the spec preflight (no file read), the output directory, the inputs and their
    preflight; only then the worker pool starts and the first noise is drawn. A resumed run
    reuses every noisy measurement already committed (never drawing it again), every solved
    level and batch of parents, and records the interruption in the manifest.
    """
    options = RunOptions(**settings)
    t_start = time.perf_counter()
    if options.signing_key is not None:  # the operator's key, checked before anything is read
        signing.read_private_key(options.signing_key)
    run_dir = RunDir(out_dir)
    stored = _load_stored(run_dir) if resume else None
    if stored and stored.manifest.complete and stored.manifest.validation is not None:
        logger.info(f"{run_dir.path} already holds a complete run; nothing to resume")
        frame = ReleaseFrame(run_dir, stored.manifest, None)
        return RunResult(run_dir.path, stored.manifest, release_valid(frame), render_summary(frame))
    pipe = Pipeline.prepare(spec_path, seed, workers=options.workers, engine=options.engine,
                            allow_large_rho=options.allow_large_rho, budget=budget)
    if stored:
        _check_resumable(run_dir, stored, pipe.spec)
    else:
        preflight.check_writable(run_dir.path)
        _out_dir(run_dir, options.overwrite, pipe.spec, options.signing_key)
    partitioned = _partitioned(pipe.spec)
    tops = None if partitioned else _read(pipe, run_dir)  # the whole input, in this process: nothing written yet
    try:  # the pool starts only now: every refusal above left no process behind
        # a partitioned run's tasks are whole states: each in a new process, so a worker holds one state's memory
        executor = make_executor(options.engine, options.workers, options.scheduler, fresh=partitioned)
    except (ValueError, RuntimeError) as e:
        raise RunError(str(e)) from None
    try:
        task_budget_mb(options.memory_gb, executor)  # a budget the driver and workers alone exceed: refused now
        if partitioned:  # each state's inputs are read on the workers, and nothing is written before all pass
            tops = _read(pipe, run_dir, executor, options.memory_gb)
        job = _Job(pipe, options, executor, t_start)
        return job.start_or_resume(run_dir, stored, tops)
    finally:
        executor.close()


# errors that say what to do themselves (the CLI's refusals: input, spec, directory, disk); anything else is das's own
EXPECTED = (RunError, InputError, SpecError, BudgetError, OutDirError, PartitionError, OSError)


@dataclass
class _Job:
    """A run under way: its pipeline, options and worker pool, its frame, and this resumption's record."""

    pipe: Pipeline
    options: RunOptions
    executor: object
    t_start: float
    frame: ReleaseFrame | None = None
    interruption: Interruption | None = None

    def start_or_resume(self, run_dir: RunDir, stored: Stored | None, tops: Tops) -> RunResult:
        if stored:
            key = self.options.signing_key or stored.operator.get("signing_key")  # else the key it started with
            self.frame = ReleaseFrame(run_dir, stored.manifest, _plan(self.pipe), signing.signing_key(run_dir, key))
            self.interruption = Interruption(time.strftime("%Y-%m-%dT%H:%M:%S%z"), stored.manifest.status,
                                             _progress_found(run_dir, self.pipe))
            logger.info(f"resuming {run_dir.path} (was {stored.manifest.status}): reusing the stored NMF and "
                          "checkpoints, no noise is drawn again for a committed measurement")
            # (an NMF release of `das measure` continued: it now claims what a whole release holds)
            self.record_interruption(status="running", holds=holds(_plan(self.pipe), synthetic=False))
        else:
            self.frame = _open(self.pipe, run_dir, tops, self.options)
        atomic.owner_only_directory(run_dir.checkpoints_dir)  # work in progress (timings too): the operator's
        try:
            completion = self.release(tops)
            with lasting(self.executor) as validating:  # shards, not states: processes that serve them all
                self.frame = complete(self.frame, completion, validate={"executor": validating,
                                                                        "persons_limit": self._persons_limit()})
        except BaseException as e:
            self.frame = mark_interrupted(self.frame, e)
            stop = stopped(e, run_dir.path)
            if stop is e:
                raise
            raise stop from e
        return RunResult(run_dir.path, self.frame.manifest, release_valid(self.frame), render_summary(self.frame))

    def release(self, tops: Tops) -> Completion:
        """The release made (das.driver.partitioned.run_states) and what completes its manifest."""
        driving = Driving(self.executor, self.options.memory_gb, self.options.progress,
                          self._measured if self.interruption is not None else None)
        nation, level_reports, written = run_states(self.pipe, self.frame.run_dir, tops, driving)
        log_levels(level_reports, None if tops.held is None else tops.held.geography)  # partitioned: largest batch
        return self.completion(written, level_reports, Counts(int(nation["persons"].sum()), tops.n_blocks))

    def _measured(self, report: dict) -> None:
        """What a resumed run's measurement reused and drew, in its record."""
        self.interruption = replace(self.interruption, measurement=report)
        self.record_interruption()

    def record_interruption(self, **changes) -> None:
        """This resumption's record in the operator's files (appended once, then kept up to date); `changes`
        (the first record of this resumption) go to the manifest."""
        earlier = list(bundle.read_process(self.frame.run_dir.path).get("interruptions", []))
        record = self.interruption.to_dict()
        self.frame.noted(interruptions=[*earlier, record] if changes else [*earlier[:-1], record])
        if changes:
            self.frame = self.frame.recorded(self.frame.manifest.but(**changes))

    def completion(self, written: dict, level_reports: dict, counts: Counts) -> Completion:
        return completion(written, level_reports, counts, timings={**self.pipe.timings,
                                                                   "total": time.perf_counter() - self.t_start},
                          engine=EngineRecord(self.options.engine, self.options.workers))

    def _persons_limit(self) -> float | None:
        """--memory-gb as persons of the states in flight (das.driver.partitioned's estimate per person)."""
        budget = task_budget_mb(self.options.memory_gb, self.executor)
        return None if budget is None else budget / TASK_MB_PER_PERSON



def completion(written: dict, level_reports: dict, counts: Counts, *, timings: dict, engine: EngineRecord) -> Completion:
    """The manifest's closing fields from what a TopDown release wrote and its post-processing reports (their
    times the operator's)."""
    events = tuple(FailsafeRecord(name, r.level, e.parent, e.stage, e.relaxed, e.slack, e.detail)
                   for name, reports in level_reports.items() for r in reports for e in r.failsafe_events)
    levels = {name: tuple(LevelRecord.of(r.level, r.parents, len(r.failsafe_events), r.certificate) for r in reports)
              for name, reports in level_reports.items()}
    times = {name: [{"level": r.level, "seconds": r.seconds, "tasks": task_summary(r)} for r in reports]
             for name, reports in level_reports.items()}
    return Completion(written, counts, timings, levels, events, engine, times)


def mark_interrupted(frame: ReleaseFrame, error: BaseException) -> ReleaseFrame:
    """Best effort (the disk may be full): say in the manifest that the run stopped, and in the operator's record
    why (an error message may name data-dependent figures: never public)."""
    try:
        frame.noted(error=f"{type(error).__name__}: {error}"[:500])
        return frame.recorded(frame.manifest.but(status="interrupted"))
    except OSError:
        return frame


def stopped(error: BaseException, path: Path) -> BaseException:
    """What an error that stopped a run (or a measurement) after it opened its directory becomes: a full disk a
    RunError saying so, an error of das's own a RunStopped saying how to continue (no traceback: -v logs it), any
    other (an input's, a refusal, an interrupt) itself. Everything committed is kept; `das run --resume` goes on
    from it without drawing noise again."""
    if is_disk_full(error):
        return RunError(f"disk full while writing to {path} ({error.strerror}: {error.filename or 'an output file'}); "
                        f"everything committed so far is kept: free some space and continue with `das run --resume "
                        f"{path}`")
    if isinstance(error, Exception) and not isinstance(error, EXPECTED):
        logger.debug("the error that stopped the run", exc_info=error)
        return RunStopped(f"stopped by an error of das's own, not of the input ({type(error).__name__}: "
                          f"{str(error)[:300]}); nothing is released. What it committed (its noisy measurements, the "
                          f"levels it solved) is kept in {path}: `das run --resume {path}` continues from it without "
                          "drawing noise again. Please report the error (-v shows where it was raised)")
    return error
