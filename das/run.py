"""`das run SPEC`: a whole release, from confidential microdata to validated outputs.

The stages are das.pipeline's; this module keeps the run directory around them: the output
directory checks, the manifest (written before any noise is drawn, completed at the end), the
operator files that let an interrupted run resume without drawing noise twice, and the
independent validation of what was written.
"""

from __future__ import annotations

import platform
import shutil
import time
from dataclasses import asdict, dataclass, field
from fractions import Fraction
from pathlib import Path

from das import bundle, outdir, preflight
from das.checkpoint import file_sha256, is_disk_full
from das.executors import make_executor
from das.io.nmf import level_files as nmf_level_files
from das.measure import Target
from das.partitioned import TASK_MB_PER_PERSON, Tops, measure_states, read_states, run_states, task_budget_mb
from das.partitions import PartitionError, is_partitioned
from das.pipeline import NOT_PRIVATE, Confidential, Pipeline, RunError, code_version
from das.rundir import Manifest, RunDir, RunDirError
from das.runspec import RunSpec, load_run_spec
from das.topdown.engine import task_summary
from das.validate import validate_run

__all__ = ["NOT_PRIVATE", "RunError", "RunOptions", "RunResult", "code_version", "measure_only", "resume_run", "run"]


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


@dataclass
class RunResult:
    out_dir: Path
    manifest: dict
    valid: bool
    summary: str


def protected_paths(spec: RunSpec) -> list[Path]:
    """What an output directory may neither be, hold nor be inside: the run's spec and inputs."""
    return [spec.path, spec.persons_path, spec.units_path]


def operator_fingerprint(spec: RunSpec, key: bytes) -> dict:
    """What must not change between a run and its resumption: spec, seed, inputs (keyed digests, operator only)."""
    return {
        "spec_sha256": bundle.spec_digest(spec.text),
        "seed": spec.seed,
        "inputs": {name: bundle.keyed_fingerprint(key, p)
                   for name, p in (("persons", spec.persons_path), ("units", spec.units_path)) if p is not None},
    }


def published_invariants(confidential: Confidential | Tops) -> dict:
    """The invariants published exactly (outside the budget) that a validator checks from the bundle alone."""
    if isinstance(confidential, Tops):
        return confidential.published_invariants()
    geography = confidential.geography
    return {"total_population": {level: dict(zip(geography.units(level).tolist(), map(int, totals)))
                                 for level, totals in confidential.invariants.total_population.items()}}


def start_run_dir(pipe: Pipeline, run_dir: RunDir, overwrite: bool, confidential: Confidential | Tops) -> Manifest:
    """A new run directory: the operator files (paths, keyed fingerprints, key), then the public
    manifest, which says what runs (spec, certificate, invariants) before any noise is drawn."""
    spec = pipe.spec
    key = bundle.new_key()
    fingerprint = operator_fingerprint(spec, key)
    outdir.remove_files(run_dir.path, outdir.check_release(run_dir.path, overwrite=overwrite,
                                                           protected=protected_paths(spec)))
    run_dir.path.mkdir(parents=True, exist_ok=True)
    bundle.write_operator(run_dir.path, {"spec_path": str(spec.path),
                                         "inputs": {"persons": str(spec.persons_path), "units": str(spec.units_path)},
                                         "fingerprint": fingerprint}, key)
    text, digest = pipe.public_spec()
    manifest = Manifest(
        das_version=code_version(), spec_name=spec.name, spec_text=text, spec_sha256=digest, status="running",
        private=pipe.rng.private,
        randomness="operating-system CSPRNG" if pipe.rng.private else f"seeded (seed {spec.seed})",
        levels=list(spec.levels), tables=spec.tables,
        persons={"schema": spec.persons.schema, "strategy": spec.persons.strategy},
        units={"schema": spec.units.schema, "strategy": spec.units.strategy} if spec.units else None,
        privacy=pipe.certificates, python=platform.python_version(), seed=spec.seed,
        invariants=published_invariants(confidential),
    )
    if not pipe.rng.private:
        manifest.warning = NOT_PRIVATE
        pipe.log(f"WARNING: {NOT_PRIVATE}")
    run_dir.write(manifest)
    return manifest


def measure_only(spec_path, out_dir, seed=None, overwrite=False, log=print, *, allow_large_rho: bool = False) -> dict:
    """`das measure`: the NMF and a manifest, no post-processing."""
    pipe = Pipeline.prepare(spec_path, seed, allow_large_rho=allow_large_rho, log=log)
    run_dir = RunDir(out_dir)
    preflight.check_writable(run_dir.path)
    outdir.check_release(run_dir.path, overwrite=overwrite, protected=protected_paths(pipe.spec))
    if _partitioned(pipe.spec):
        executor = make_executor("local", 1)
        confidential = _read_states(pipe, run_dir, executor)  # nothing written yet
        manifest = start_run_dir(pipe, run_dir, overwrite, confidential)
        measure_states(pipe, run_dir, confidential, executor)
    else:
        confidential = pipe.read_inputs(run_dir.path)  # nothing written yet
        manifest = start_run_dir(pipe, run_dir, overwrite, confidential)
        pipe.measure(confidential, Target(run_dir.nmf_dir))
    manifest.status, manifest.timings_seconds = "measured", pipe.timings
    manifest.nmf = _digests(run_dir, run_dir.nmf_files())
    run_dir.write(manifest)
    return manifest.to_dict()


def _digests(run_dir: RunDir, paths) -> dict[str, str]:
    return {str(p.relative_to(run_dir.path)): file_sha256(p) for p in paths}


def _progress_found(run_dir: RunDir, pipe: Pipeline) -> dict:
    """What an interrupted run left: NMF levels complete or in committed chunks, checkpointed levels and batches."""
    found: dict = {}
    levels = pipe.spec.levels
    for name in pipe.releases:
        nmf_dir, ckpt = run_dir.nmf_dir / name, run_dir.checkpoints_dir / name
        files = {lv: nmf_level_files(run_dir.nmf_dir, name, lv) for lv in levels}
        chunks = {lv: sorted(nmf_dir.glob(f"{lv}.parquet.parts") if (nmf_dir / f"{lv}.parquet.parts").is_dir()
                             else nmf_dir.glob(f"{lv}/*.parquet.parts")) for lv in levels}
        found[name] = {
            # a level in one file, or (a partitioned run) the states whose file of the level is complete
            "nmf_levels": [lv for lv in levels if files[lv] and files[lv][0][1] is None],
            "nmf_states": {lv: [s for _, s in files[lv]] for lv in levels if files[lv] and files[lv][0][1] is not None},
            "nmf_levels_in_chunks": {lv: sum(len(list(p.glob("*.nmfpart"))) for p in chunks[lv])
                                     for lv in levels if chunks[lv]},
            "solved_levels": [lv for lv in levels if (ckpt / f"{lv}.npz").exists()],
            "solved_batches": {lv: len(list((ckpt / f"{lv}.parts").glob("b*.npz")))
                               for lv in levels if (ckpt / f"{lv}.parts").is_dir()},
        }
    return found


@dataclass
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
        problems.append("the run spec differs from the one the run started with")
    if what == "spec" and stored.get("seed") != current["seed"]:
        problems.append(f"seed {current['seed']} differs from the run's {stored.get('seed')}")
    if what == "inputs":
        for name, files in current["inputs"].items():
            if stored.get("inputs", {}).get(name) != files:
                problems.append(f"the {name} input changed since the run started (keyed fingerprint differs)")
    if problems:
        raise RunError(f"{out_dir} belongs to another run: " + "; ".join(problems)
                       + ". Resume with the same spec, seed and inputs, or start a new run in another directory")


def resume_run(run_dir: str | Path, spec_path: str | Path | None = None, seed: int | None = None,
               log=print, **settings) -> RunResult:
    """`das run --resume RUN_DIR`: continue an interrupted run from its stored NMF and checkpoints."""
    stored = _load_stored(RunDir(run_dir))
    stored_seed = stored.operator["fingerprint"].get("seed")
    if seed is not None and seed != stored_seed:
        raise RunError(f"{run_dir} belongs to another run: seed {seed} differs from the run's {stored_seed}")
    if spec_path is not None:
        given = load_run_spec(spec_path, seed=stored_seed)
        _check_fingerprint(Path(run_dir), stored.operator["fingerprint"],
                           {"spec_sha256": bundle.spec_digest(given.text), "seed": stored_seed}, "spec")
    return run(spec_path or stored.operator["spec_path"], run_dir, seed=stored_seed, log=log, resume=True, **settings)


def run(spec_path: str | Path, out_dir: str | Path, seed: int | None = None, *, log=print, resume: bool = False,
        **settings) -> RunResult:
    """A whole release into out_dir; with resume=True, continue the interrupted run in out_dir.
    `settings` are RunOptions fields (workers, engine, scheduler, progress, overwrite, allow_large_rho).

    Order: the spec preflight (no file read), the output directory, the inputs and their
    preflight; only then the worker pool starts and the first noise is drawn. A resumed run
    reuses every noisy measurement already committed (never drawing it again), every solved
    level and batch of parents, and records the interruption in the manifest.
    """
    options = RunOptions(**settings)
    t_start = time.perf_counter()
    run_dir = RunDir(out_dir)
    stored = _load_stored(run_dir) if resume else None
    if stored and stored.manifest.complete and stored.manifest.validation is not None:
        log(f"{run_dir.path} already holds a complete run; nothing to resume")
        manifest = stored.manifest.to_dict()
        return RunResult(run_dir.path, manifest, manifest["validation"]["valid"], render_summary(manifest))
    pipe = Pipeline.prepare(spec_path, seed, workers=options.workers, engine=options.engine,
                            allow_large_rho=options.allow_large_rho, log=log)
    spec = pipe.spec
    if stored:
        current = {"spec_sha256": bundle.spec_digest(spec.text), "seed": spec.seed}
        _check_fingerprint(run_dir.path, stored.operator["fingerprint"], current, "spec")
        for name, path in (("persons", spec.persons_path), ("units", spec.units_path)):
            if not Path(path).exists():  # the keyed fingerprint, before reading: the bytes read are the bytes fingerprinted
                raise RunError(f"cannot resume {run_dir.path}: the {name} input {path} is not found")
        _check_fingerprint(run_dir.path, stored.operator["fingerprint"], operator_fingerprint(spec, stored.key),
                           "inputs")
    else:
        preflight.check_writable(run_dir.path)
        outdir.check_release(run_dir.path, overwrite=options.overwrite, protected=protected_paths(spec))
    partitioned = _partitioned(spec)
    confidential = None if partitioned else pipe.read_inputs(run_dir.path)  # nothing written yet
    try:  # the pool starts only now: every refusal above left no process behind
        # a partitioned run's tasks are whole states: each in a new process, so a worker holds one state's memory
        executor = make_executor(options.engine, options.workers, options.scheduler, fresh=partitioned)
    except (ValueError, RuntimeError) as e:
        raise RunError(str(e)) from None
    try:
        task_budget_mb(options.memory_gb, executor)  # a budget the driver and workers alone exceed: refused now
        if partitioned:  # each state's inputs are read on the workers, and nothing is written before all pass
            confidential = _read_states(pipe, run_dir, executor, options.memory_gb)
        job = _Job(pipe, run_dir, options, executor, t_start)
        return job.start_or_resume(stored, confidential)
    finally:
        executor.close()


def _partitioned(spec: RunSpec) -> bool:
    """Inputs given as directories of one file per state: a partitioned run (das/partitioned.py)."""
    try:
        return is_partitioned(spec.persons_path, spec.units_path)
    except PartitionError as e:
        raise RunError(str(e)) from None


def _read_states(pipe: Pipeline, run_dir: RunDir, executor, memory_gb: float | None = None) -> Tops:
    try:
        return read_states(pipe, run_dir, executor, memory_gb)
    except PartitionError as e:
        raise RunError(str(e)) from None


@dataclass
class _Job:
    """A run under way: its pipeline, directory, options and worker pool, and the manifest it keeps."""

    pipe: Pipeline
    run_dir: RunDir
    options: RunOptions
    executor: object
    t_start: float
    manifest: Manifest | None = None
    interruption: dict | None = None  # the record of this resumption, if it is one
    solved: dict = field(default_factory=dict)

    def start_or_resume(self, stored: Stored | None, confidential: Confidential | Tops) -> RunResult:
        if stored:
            self.manifest = stored.manifest
            self.interruption = {"resumed_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                                 "previous_status": self.manifest.status,
                                 "found": _progress_found(self.run_dir, self.pipe)}
            self.manifest.interruptions = (self.manifest.interruptions or []) + [self.interruption]
            self.pipe.log(f"resuming {self.run_dir.path} (was {self.manifest.status}): reusing the stored NMF and "
                          "checkpoints, no noise is drawn again for a committed measurement")
            self.manifest.status = "running"
            self.run_dir.write(self.manifest)
        else:
            self.manifest = start_run_dir(self.pipe, self.run_dir, self.options.overwrite, confidential)
        try:
            return self.finish(confidential)
        except BaseException as e:
            self._mark_interrupted(e)
            if is_disk_full(e):
                raise RunError(f"disk full while writing to {self.run_dir.path} ({e.strerror}: "
                               f"{e.filename or 'an output file'}); everything committed so far is kept: free some "
                               f"space and continue with `das run --resume {self.run_dir.path}`") from e
            raise

    def _persons_limit(self) -> float | None:
        """--memory-gb as persons of the states in flight (das.partitioned's estimate per person)."""
        budget = task_budget_mb(self.options.memory_gb, self.executor)
        return None if budget is None else budget / TASK_MB_PER_PERSON

    def _mark_interrupted(self, error: BaseException) -> None:
        """Best effort (the disk may be full): say in the manifest that the run stopped and why."""
        try:
            self.manifest.status = "interrupted"
            self.manifest.error = f"{type(error).__name__}: {error}"[:500]
            self.run_dir.write(self.manifest)
        except OSError:
            pass

    def finish(self, confidential: Confidential | Tops) -> RunResult:
        pipe, run_dir, manifest = self.pipe, self.run_dir, self.manifest
        if isinstance(confidential, Tops):
            nation, level_reports, outputs = run_states(pipe, run_dir, confidential, self.executor,
                                                        self.options.memory_gb)
            counts = {"persons": int(nation["persons"].sum()), "blocks": confidential.n_blocks}
            return self.complete(level_reports, outputs, counts)
        measured: dict = {}
        pipe.measure(confidential, Target(run_dir.nmf_dir, executor=self.executor, report=measured))
        if self.interruption is not None:
            self.interruption["measurement"] = measured
            run_dir.write(manifest)
        # the true counts are not needed past this point
        confidential = Confidential(confidential.geography, confidential.invariants, {})
        options = pipe.engine_options(workers=self.options.workers, progress=self.options.progress,
                                      executor=self.executor, checkpoint_dir=run_dir.checkpoints_dir)
        solved, level_reports = pipe.postprocess(confidential, run_dir.nmf_dir, options)
        outputs = pipe.write_outputs(run_dir, confidential, solved)
        counts = {"persons": int(solved["persons"].sum()), "blocks": confidential.geography.n_blocks}
        return self.complete(level_reports, outputs, counts)

    def complete(self, level_reports: dict, outputs: list[Path], counts: dict) -> RunResult:
        """The manifest completed (reports, digests, counts), the checkpoints removed, the release validated."""
        pipe, run_dir, manifest = self.pipe, self.run_dir, self.manifest
        events = [
            {"release": name, "level": r.level, **(asdict(e) if hasattr(e, "__dataclass_fields__") else dict(e))}
            for name, reports in level_reports.items() for r in reports for e in r.failsafe_events
        ]
        manifest.status = "complete"
        manifest.engine = {"engine": self.options.engine, "workers": self.options.workers}
        manifest.timings_seconds = {**pipe.timings, "total": time.perf_counter() - self.t_start}
        manifest.levels_report = {name: [{"level": r.level, "parents": r.parents, "seconds": r.seconds,
                                          "failsafe_events": len(r.failsafe_events), "l2_certificate": r.certificate,
                                          "tasks": task_summary(r)}
                                         for r in reports]
                                  for name, reports in level_reports.items()}
        manifest.failsafe_events = events
        manifest.outputs = _digests(run_dir, outputs)
        manifest.nmf = _digests(run_dir, run_dir.nmf_files())
        manifest.counts = counts
        manifest.error = None
        run_dir.write(manifest)
        _remove_checkpoints(run_dir)  # derived from the outputs now written

        t0 = time.perf_counter()
        report = validate_run(run_dir.path, executor=self.executor, persons_limit=self._persons_limit())
        manifest.timings_seconds["validate"] = time.perf_counter() - t0
        manifest.validation = {"valid": report.ok, "checks": report.checks, "violations": report.violations[:100]}
        run_dir.write(manifest)
        data = manifest.to_dict()
        return RunResult(run_dir.path, data, report.ok, render_summary(data))


def _remove_checkpoints(run_dir: RunDir) -> None:
    shutil.rmtree(run_dir.checkpoints_dir, ignore_errors=True)


def render_summary(manifest: dict) -> str:
    cert = manifest["privacy"]["persons"]
    lines = [
        f"das run {manifest['spec_name']}: {manifest['counts']['persons']:,} persons in "
        f"{manifest['counts']['blocks']:,} blocks, levels {' > '.join(manifest['levels'])}",
        f"privacy (persons): rho = {cert['rho']} ({float(Fraction(cert['rho'])):.4f}), "
        f"eps = {cert['eps']} at delta = {cert['delta']}; randomness: {manifest['randomness']}",
    ]
    if "units" in manifest["privacy"]:
        u = manifest["privacy"]["units"]
        lines.append(f"privacy (units): rho = {u['rho']}, eps = {u['eps']} at delta = {u['delta']}")
    t = manifest["timings_seconds"]
    lines.append("time: " + ", ".join(f"{k} {v:.1f}s" for k, v in t.items()))
    events = manifest["failsafe_events"]
    lines.append(f"failsafe: {len(events)} event(s)" + (
        " at " + ", ".join(sorted({f"{e['release']}/{e['level']}/{e.get('parent', '?')}" for e in events})[:10])
        if events else ""))
    certs = [r.get("l2_certificate", {}) for reports in manifest.get("levels_report", {}).values() for r in reports]
    if certs:
        worst = max(c.get("max_rel_gap", 0.0) for c in certs)
        lines.append(f"least squares: {sum(c.get('problems', 0) for c in certs):,} problems, largest relative "
                     f"duality gap {worst:.1e}, {sum(c.get('retried', 0) for c in certs)} retried, "
                     f"{sum(c.get('uncertified', 0) for c in certs)} above tolerance")
    v = manifest.get("validation", {})
    lines.append(f"validation: {'PASSED' if v.get('valid') else 'FAILED'} ({len(v.get('checks', []))} checks)")
    lines.append("outputs: " + ", ".join(sorted(manifest["outputs"])) + ", nmf/, manifest.json")
    if not manifest["private"]:
        lines.append("NOTE: " + NOT_PRIVATE)
    return "\n".join(lines)
