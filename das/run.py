"""`das run SPEC`: a whole release, from confidential microdata to validated outputs.

read + validate inputs -> block histograms and invariants -> noisy measurements (NMF, written
before any post-processing) -> true histograms dropped -> TopDown per release -> MDF, tables,
manifest (with the privacy certificate) -> independent validation.
"""

from __future__ import annotations

import json
import platform
import shutil
import subprocess
import time
from dataclasses import asdict, dataclass, replace
from fractions import Fraction
from pathlib import Path

import pyarrow.parquet as pq

import das
from das import bundle, preflight
from das.checkpoint import crash_point, file_sha256, is_disk_full
from das.executors import make_executor
from das.geography import Geography
from das.io import mdf as mdf_io
from das.io import pl94171
from das.io.microdata import read_inputs
from das.io.tables import load_tables, write_tables
from das.measure import Measurement, measure_release
from das.privacy.accounting import PrivacyAccountant, allocate, certificate
from das.privacy.randomness import make_random_source
from das.privacy.strategy import load_strategy, validate_strategy
from das.rules import Invariants, household_persons
from das.runspec import RunSpec, load_run_spec
from das.schema import load_schema
from das.topdown.engine import EngineOptions, postprocess
from das.validate import validate_run

NOT_PRIVATE = ("SEEDED REPLICATION MODE: the noise was drawn from a seeded pseudo-random "
               "generator. These outputs are NOT private and must not be released.")


class RunError(RuntimeError):
    """A run cannot start or continue (bad output directory, spec mismatch...)."""


@dataclass
class RunResult:
    out_dir: Path
    manifest: dict
    valid: bool
    summary: str


def code_version() -> str:
    """das version, plus the git commit when running from a checkout (and '+dirty' if modified)."""
    root = Path(__file__).resolve().parents[1]
    try:
        commit = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True,
                                text=True, timeout=5, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=5, check=True).stdout.strip()
        return f"{das.__version__} (git {commit}{'+dirty' if dirty else ''})"
    except (OSError, subprocess.SubprocessError):
        return das.__version__


def _write_json(path: Path, data: dict) -> None:
    tmp = path.with_name(path.name + ".partial")
    tmp.write_text(json.dumps(data, indent=2, default=str))
    tmp.replace(path)


def plan_for(strategy, rho: Fraction, levels) -> tuple[dict[str, list[Measurement]], object]:
    allocation = allocate(strategy, rho)
    plan = {level: [] for level in levels}
    for item in allocation.items:
        plan[item.level].append(Measurement(item.level, item.query, item.sigma2))
    return plan, allocation


def check_out_dir(out_dir: Path, overwrite: bool, protected: list[Path] = ()) -> list[Path]:
    """Refuse a non-empty output directory unless asked to overwrite a das run there; the files
    --overwrite will delete (only files a das run writes, never `protected` ones: spec, inputs)."""
    if out_dir.exists() and not out_dir.is_dir():
        raise RunError(f"output directory {out_dir} is a file, not a directory")
    if out_dir.exists() and any(out_dir.iterdir()) and overwrite:
        try:
            return bundle.removable_run_files(out_dir, list(protected))
        except bundle.BundleError as e:
            raise RunError(str(e)) from None
    if out_dir.exists() and any(out_dir.iterdir()) and not overwrite:
        manifest = out_dir / "manifest.json"
        owner, hint = "", ""
        if manifest.exists():
            try:
                held = json.loads(manifest.read_text())
            except (OSError, ValueError):
                held = {}
            owner = f" (it holds run {held.get('spec_name')!r})"
            if held.get("status") not in (None, "complete"):
                owner = f" (it holds an unfinished run of {held.get('spec_name')!r}, status {held.get('status')!r})"
                hint = f", continue it with `das run --resume {out_dir}`"
        raise RunError(f"output directory {out_dir} is not empty{owner}; choose another{hint} or pass --overwrite")
    return []


def protected_paths(spec: RunSpec) -> list[Path]:
    """What --overwrite must never delete: the run's spec and inputs."""
    return [spec.path, spec.persons_path, spec.units_path]


def prepare_out_dir(out_dir: Path, spec: RunSpec, overwrite: bool) -> None:
    """Create the output directory; with --overwrite, first delete the files of the das run there (only those)."""
    files = check_out_dir(out_dir, overwrite, protected_paths(spec))
    if files:
        bundle.remove_run_files(out_dir, files)
    out_dir.mkdir(parents=True, exist_ok=True)


@dataclass
class Prepared:
    """Everything checked before any data is read or any noise drawn."""

    spec: RunSpec
    releases: list  # (name, Release, Schema)
    plans: dict
    allocations: dict
    certificates: dict
    rng: object
    tables: tuple


def prepare(spec_path: str | Path, seed: int | None, *, workers: int = 1, engine: str = "local",
            allow_large_rho: bool = False) -> Prepared:
    """Load the spec and pass the spec preflight (das/preflight.py): no input file is opened here."""
    spec = load_run_spec(spec_path, seed=seed)
    persons_schema = load_schema(spec.persons.schema)
    releases = [("persons", spec.persons, persons_schema)]
    if spec.units:
        releases.append(("units", spec.units, load_schema(spec.units.schema)))
    plans, allocations, strategies, certificates = {}, {}, {}, {}
    for name, release, schema in releases:
        strategy = strategies[name] = load_strategy(release.strategy)
        validate_strategy(strategy, schema, spec.levels)
        rho = release.rho if release.rho is not None else strategy.rho
        plans[name], allocations[name] = plan_for(strategy, rho, spec.levels)
    preflight.check_spec(spec, {name: schema for name, _, schema in releases}, strategies, allocations,
                         workers=workers, engine=engine, allow_large_rho=allow_large_rho)
    rng = make_random_source(spec.seed)
    for name, _, schema in releases:
        certificates[name] = certificate(strategies[name], allocations[name].rho, spec.delta, spec.levels, schema.name,
                                         rng.private)
    return Prepared(spec, releases, plans, allocations, certificates, rng, load_tables(spec.tables))


def public_spec(prep: Prepared) -> tuple[str, str]:
    """The spec text as published (input paths redacted) and its SHA-256."""
    text = bundle.public_spec_text(prep.spec.text)
    return text, bundle.spec_digest(text)


def output_metadata(prep: Prepared) -> dict[bytes, bytes]:
    """Metadata every Parquet output of this run carries (privacy mode, certificate, spec digest, version)."""
    return bundle.parquet_metadata(prep.rng.private, prep.certificates, public_spec(prep)[1], code_version())


def operator_fingerprint(spec: RunSpec, key: bytes) -> dict:
    """What must not change between a run and its resumption: spec, seed, inputs (keyed digests, operator only)."""
    return {
        "spec_sha256": bundle.spec_digest(spec.text),
        "seed": spec.seed,
        "inputs": {name: bundle.keyed_fingerprint(key, p)
                   for name, p in (("persons", spec.persons_path), ("units", spec.units_path)) if p is not None},
    }


def start_manifest(prep: Prepared, out_dir: Path, log, *, extra: dict | None = None) -> dict:
    spec = prep.spec
    text, digest = public_spec(prep)
    manifest = {
        "kind": bundle.RUN_KIND,
        "das_version": code_version(),
        "spec_name": spec.name,
        "spec_text": text,
        "spec_sha256": digest,
        "status": "running",
        "private": prep.rng.private,
        "randomness": "operating-system CSPRNG" if prep.rng.private else f"seeded (seed {spec.seed})",
        "levels": list(spec.levels),
        "tables": spec.tables,
        "persons": {"schema": spec.persons.schema, "strategy": spec.persons.strategy},
        "units": {"schema": spec.units.schema, "strategy": spec.units.strategy} if spec.units else None,
        "privacy": prep.certificates,
        "python": platform.python_version(),
        **(extra or {}),
    }
    if not prep.rng.private:
        manifest["warning"] = NOT_PRIVATE
        log(f"WARNING: {NOT_PRIVATE}")
    _write_json(out_dir / "manifest.json", manifest)
    return manifest


def read_confidential(prep: Prepared, timings: dict, log, *, out_dir: Path | None = None):
    """Read and validate the inputs: (geography, invariants, true block histograms per release).

    With `out_dir`, the input preflight runs too (feasibility of the invariants, disk space):
    everything here happens before any noise is drawn.
    """
    spec = prep.spec
    schemas = {name: schema for name, _, schema in prep.releases}
    t0 = time.perf_counter()
    inputs = read_inputs(spec.persons_path, spec.units_path, schemas["persons"], schemas.get("units"))
    geography = Geography.from_blocks(inputs.inventory.blocks, spec.levels)
    if out_dir is not None:
        preflight.check_inputs(schemas, inputs, geography, prep.plans, out_dir)
    invariants = Invariants.from_inputs(inputs.inventory, inputs.person_histograms, geography)
    histograms = {"persons": inputs.person_histograms, "units": inputs.unit_histograms}
    timings["read_inputs"] = time.perf_counter() - t0
    log(f"read {int(inputs.person_histograms.sum()):,} persons in {geography.n_blocks:,} blocks "
        f"({timings['read_inputs']:.1f} s)")
    return geography, invariants, histograms


def published_invariants(invariants: Invariants, geography: Geography) -> dict:
    """The invariants published exactly (outside the budget) that a validator checks from the bundle alone."""
    return {"total_population": {level: dict(zip(geography.units(level).tolist(), map(int, totals)))
                                 for level, totals in invariants.total_population.items()}}


def measure_all(prep: Prepared, geography: Geography, histograms: dict, out_dir: Path, timings: dict, log,
                *, executor=None, report: dict | None = None) -> None:
    """Measure every release into out_dir/nmf, charging the accountant before any draw.

    Levels and chunks already committed (an interrupted run) are reused, never drawn again;
    `report` (if given) receives, per release and level, what was reused and what was drawn.
    """
    spec = prep.spec
    metadata = output_metadata(prep)
    for name, _, schema in prep.releases:
        t0 = time.perf_counter()
        # refuses any measurement that is not in the certified plan, or with another variance
        accountant = PrivacyAccountant.for_allocation(prep.allocations[name])
        budget = prep.allocations[name].rho
        release_report: dict = {}
        measure_release(name, geography, histograms[name], schema, prep.plans[name], prep.rng, out_dir / "nmf",
                        accountant=accountant, executor=executor, report=release_report, metadata=metadata)
        if report is not None:
            report[name] = release_report
        if accountant.spent != budget:
            raise RunError(f"{name}: measured rho {accountant.spent} differs from the certified {budget}")
        timings[f"measure_{name}"] = time.perf_counter() - t0
        log(f"measured {name}: {sum(len(v) for v in prep.plans[name].values())} queries over "
            f"{len(spec.levels)} levels ({timings[f'measure_{name}']:.1f} s)")


def start_run_dir(prep: Prepared, out_dir: Path, overwrite: bool, invariants, geography, log) -> dict:
    """A new run directory: the public manifest, and the operator files (paths, keyed fingerprints, key)."""
    spec = prep.spec
    key = bundle.new_key()
    fingerprint = operator_fingerprint(spec, key)
    prepare_out_dir(out_dir, spec, overwrite)
    bundle.write_operator(out_dir, {"spec_path": str(spec.path),
                                    "inputs": {"persons": str(spec.persons_path), "units": str(spec.units_path)},
                                    "fingerprint": fingerprint}, key)
    return start_manifest(prep, out_dir, log, extra={"seed": spec.seed,
                                                     "invariants": published_invariants(invariants, geography)})


def measure_only(spec_path, out_dir, seed=None, overwrite=False, log=print, *, allow_large_rho: bool = False) -> dict:
    """`das measure`: the NMF and a manifest, no post-processing."""
    prep = prepare(spec_path, seed, allow_large_rho=allow_large_rho)
    out_dir = Path(out_dir)
    preflight.check_writable(out_dir)
    check_out_dir(out_dir, overwrite, protected_paths(prep.spec))
    timings: dict[str, float] = {}
    geography, invariants, histograms = read_confidential(prep, timings, log, out_dir=out_dir)  # nothing written yet
    manifest = start_run_dir(prep, out_dir, overwrite, invariants, geography, log)
    measure_all(prep, geography, histograms, out_dir, timings, log)
    nmf_dir = out_dir / "nmf"
    manifest.update({"status": "measured", "timings_seconds": timings,
                     "nmf": {str(p.relative_to(out_dir)): file_sha256(p) for p in sorted(nmf_dir.rglob("*.parquet"))}})
    _write_json(out_dir / "manifest.json", manifest)
    return manifest


def _progress_found(out_dir: Path, prep: Prepared) -> dict:
    """What an interrupted run left: NMF levels complete or in committed chunks, checkpointed levels and batches."""
    found: dict = {}
    for name, _, _ in prep.releases:
        nmf_dir, ckpt = out_dir / "nmf" / name, out_dir / "checkpoints" / name
        found[name] = {
            "nmf_levels": [lv for lv in prep.spec.levels if (nmf_dir / f"{lv}.parquet").exists()],
            "nmf_levels_in_chunks": {lv: len(list((nmf_dir / f"{lv}.parquet.parts").glob("*.nmfpart")))
                                     for lv in prep.spec.levels if (nmf_dir / f"{lv}.parquet.parts").is_dir()},
            "solved_levels": [lv for lv in prep.spec.levels if (ckpt / f"{lv}.npz").exists()],
            "solved_batches": {lv: len(list((ckpt / f"{lv}.parts").glob("b*.npz")))
                               for lv in prep.spec.levels if (ckpt / f"{lv}.parts").is_dir()},
        }
    return found


@dataclass
class Stored:
    """A run directory to continue: its public manifest and its operator record and key."""

    manifest: dict
    operator: dict
    key: bytes


def _load_manifest(out_dir: Path) -> Stored:
    path = out_dir / "manifest.json"
    if not path.is_file():
        raise RunError(f"cannot resume {out_dir}: {path} not found (expected the directory of an interrupted "
                       "`das run`, which writes manifest.json before it measures anything)")
    try:
        manifest = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise RunError(f"cannot resume {out_dir}: {path} is not readable JSON ({e})") from None
    if not isinstance(manifest, dict) or "status" not in manifest:
        raise RunError(f"cannot resume {out_dir}: {path} has no status (it was not written by a resumable `das run`)")
    try:
        operator, key = bundle.read_operator(out_dir)
    except bundle.BundleError as e:
        raise RunError(f"cannot resume {out_dir}: {e} (it was not written by a resumable `das run`)") from None
    missing = [k for k in ("spec_path", "fingerprint") if k not in operator]
    if missing:
        raise RunError(f"cannot resume {out_dir}: its operator record has no {', '.join(missing)}")
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


def resume_run(run_dir: str | Path, spec_path: str | Path | None = None, seed: int | None = None, **kwargs) -> RunResult:
    """`das run --resume RUN_DIR`: continue an interrupted run from its stored NMF and checkpoints."""
    stored = _load_manifest(Path(run_dir))
    stored_seed = stored.operator["fingerprint"].get("seed")
    if seed is not None and seed != stored_seed:
        raise RunError(f"{run_dir} belongs to another run: seed {seed} differs from the run's {stored_seed}")
    if spec_path is not None:
        given = load_run_spec(spec_path, seed=stored_seed)
        _check_fingerprint(Path(run_dir), stored.operator["fingerprint"],
                           {"spec_sha256": bundle.spec_digest(given.text), "seed": stored_seed}, "spec")
    return run(spec_path or stored.operator["spec_path"], run_dir, seed=stored_seed, resume=True, **kwargs)


def run(
    spec_path: str | Path,
    out_dir: str | Path,
    seed: int | None = None,
    workers: int = 1,
    overwrite: bool = False,
    progress: bool = True,
    log=print,
    *,
    resume: bool = False,
    engine: str = "local",
    scheduler: str | None = None,
    allow_large_rho: bool = False,
) -> RunResult:
    """A whole release into out_dir; with resume=True, continue the interrupted run in out_dir.

    Order: the spec preflight (no file read), the output directory, the inputs and their
    preflight; only then the worker pool starts and the first noise is drawn. A resumed run
    reuses every noisy measurement already committed (never drawing it again), every solved
    level and batch of parents, and records the interruption in the manifest.
    """
    t_start = time.perf_counter()
    out_dir = Path(out_dir)
    stored = _load_manifest(out_dir) if resume else None
    if stored and stored.manifest["status"] == "complete" and "validation" in stored.manifest:
        log(f"{out_dir} already holds a complete run; nothing to resume")
        return RunResult(out_dir, stored.manifest, stored.manifest["validation"]["valid"],
                         render_summary(stored.manifest))
    prep = prepare(spec_path, seed, workers=workers, engine=engine, allow_large_rho=allow_large_rho)
    spec = prep.spec
    if stored:
        current = {"spec_sha256": bundle.spec_digest(spec.text), "seed": spec.seed}
        _check_fingerprint(out_dir, stored.operator["fingerprint"], current, "spec")
    else:
        preflight.check_writable(out_dir)
        check_out_dir(out_dir, overwrite, protected_paths(spec))
    timings: dict[str, float] = {}
    if stored:  # the keyed fingerprint, before reading: the bytes read are the bytes fingerprinted
        for name, path in (("persons", spec.persons_path), ("units", spec.units_path)):
            if not Path(path).exists():
                raise RunError(f"cannot resume {out_dir}: the {name} input {path} is not found")
        _check_fingerprint(out_dir, stored.operator["fingerprint"], operator_fingerprint(spec, stored.key), "inputs")
    geography, invariants, histograms = read_confidential(prep, timings, log, out_dir=out_dir)  # nothing written yet
    try:  # the pool starts only now: every refusal above left no process behind
        executor = make_executor(engine, workers, scheduler)
    except (ValueError, RuntimeError) as e:
        raise RunError(str(e)) from None
    try:
        return _start_or_resume(prep, out_dir, stored, overwrite, executor, engine, workers, progress,
                                log, t_start, (geography, invariants, histograms), timings)
    finally:
        executor.close()


def _start_or_resume(prep, out_dir, stored, overwrite, executor, engine, workers, progress, log,
                     t_start, read, timings) -> RunResult:
    geography, invariants, histograms = read
    if stored:
        manifest = stored.manifest
        record = {"resumed_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "previous_status": manifest["status"],
                  "found": _progress_found(out_dir, prep)}
        manifest.setdefault("interruptions", []).append(record)
        log(f"resuming {out_dir} (was {manifest['status']}): reusing the stored NMF and checkpoints, no noise is "
            "drawn again for a committed measurement")
        manifest["status"] = "running"
        _write_json(out_dir / "manifest.json", manifest)
    else:
        manifest = start_run_dir(prep, out_dir, overwrite, invariants, geography, log)
        record = None
    try:
        return _continue_run(prep, out_dir, manifest, record, geography, invariants, histograms, timings,
                             executor, engine, workers, progress, log, t_start)
    except BaseException as e:
        _mark_interrupted(out_dir, manifest, e)
        if is_disk_full(e):
            raise RunError(f"disk full while writing to {out_dir} ({e.strerror}: {e.filename or 'an output file'}); "
                           f"everything committed so far is kept: free some space and continue with "
                           f"`das run --resume {out_dir}`") from e
        raise


def _mark_interrupted(out_dir: Path, manifest: dict, error: BaseException) -> None:
    """Best effort (the disk may be full): say in the manifest that the run stopped and why."""
    try:
        manifest["status"] = "interrupted"
        manifest["error"] = f"{type(error).__name__}: {error}"[:500]
        _write_json(out_dir / "manifest.json", manifest)
    except OSError:
        pass


def _continue_run(prep, out_dir, manifest, record, geography, invariants, histograms, timings, executor, engine,
                  workers, progress, log, t_start) -> RunResult:
    spec = prep.spec
    measured: dict = {}
    measure_all(prep, geography, histograms, out_dir, timings, log,
                executor=executor, report=measured)
    if record is not None:
        record["measurement"] = measured
        _write_json(out_dir / "manifest.json", manifest)
    del histograms  # the true counts are not needed past this point
    nmf_dir = out_dir / "nmf"

    options = EngineOptions(workers=workers, solver=spec.solver, rounding=spec.rounding, progress=progress,
                            passes=spec.passes, passes_by_level=spec.passes_by_level, executor=executor,
                            checkpoint_dir=out_dir / "checkpoints")
    solved, level_reports = {}, {}
    for name, _, schema in prep.releases:  # persons first: the units are bounded by its household persons
        t0 = time.perf_counter()
        if name == "units":
            invariants = replace(invariants, household_persons=household_persons(prep.releases[0][2], solved["persons"]))
        solved[name], reports = postprocess(name, schema, geography, invariants, nmf_dir, options)
        level_reports[name] = reports
        timings[f"postprocess_{name}"] = time.perf_counter() - t0
        per_level = ", ".join(f"{r.level} {r.seconds:.1f}s" for r in reports)
        log(f"post-processed {name} ({timings[f'postprocess_{name}']:.1f} s: {per_level})")

    t0 = time.perf_counter()
    schemas = {name: schema for name, _, schema in prep.releases}
    persons_schema, units_schema = schemas["persons"], schemas.get("units")
    metadata = output_metadata(prep)
    outputs = [mdf_io.write_table(mdf_io.person_mdf(persons_schema, geography.blocks, solved["persons"]),
                                  out_dir / "mdf_persons.parquet", metadata=metadata)]
    outputs.append(mdf_io.write_table(
        mdf_io.unit_mdf(units_schema or load_schema("h1_units"), geography.blocks, solved.get("units"),
                        invariants.gq_facilities),
        out_dir / "mdf_units.parquet", metadata=metadata))
    crash_point("outputs")
    if spec.mdf_layout == "pipe":
        for kind in ("persons", "units"):
            outputs.append(mdf_io.write_table(pq.read_table(out_dir / f"mdf_{kind}.parquet"),
                                              out_dir / f"mdf_{kind}.txt", layout="pipe"))
    by_schema = {schemas[name].name: solved[name] for name in solved}
    tables_tmp, tables_dir = out_dir / "tables.partial", out_dir / "tables"
    shutil.rmtree(tables_tmp, ignore_errors=True)
    written = write_tables(tables_tmp, geography, by_schema, {s.name: s for s in schemas.values()}, prep.tables,
                           metadata=metadata)
    shutil.rmtree(tables_dir, ignore_errors=True)
    tables_tmp.replace(tables_dir)  # the tables appear all at once, complete
    outputs += [tables_dir / p.name for p in written]
    if spec.pl94171:  # the redistricting summary files, also appearing all at once
        pl_tmp, pl_dir = out_dir / "pl94171.partial", out_dir / "pl94171"
        shutil.rmtree(pl_tmp, ignore_errors=True)
        written = pl94171.write_release(pl_tmp, geography, solved, schemas)
        shutil.rmtree(pl_dir, ignore_errors=True)
        pl_tmp.replace(pl_dir)
        outputs += [pl_dir / p.name for p in written]
    timings["write_outputs"] = time.perf_counter() - t0

    events = [
        {"release": name, "level": r.level, **(asdict(e) if hasattr(e, "__dataclass_fields__") else dict(e))}
        for name, reports in level_reports.items() for r in reports for e in r.failsafe_events
    ]
    manifest.update({
        "status": "complete",
        "engine": {"engine": engine, "workers": workers},
        "timings_seconds": {**timings, "total": time.perf_counter() - t_start},
        "levels_report": {name: [{"level": r.level, "parents": r.parents, "seconds": r.seconds,
                                  "failsafe_events": len(r.failsafe_events), "l2_certificate": r.certificate}
                                 for r in reports]
                          for name, reports in level_reports.items()},
        "failsafe_events": events,
        "outputs": {str(p.relative_to(out_dir)): file_sha256(p) for p in outputs},
        "nmf": {str(p.relative_to(out_dir)): file_sha256(p) for p in sorted(nmf_dir.rglob("*.parquet"))},
        "counts": {"persons": int(solved["persons"].sum()), "blocks": geography.n_blocks},
    })
    manifest.pop("error", None)
    _write_json(out_dir / "manifest.json", manifest)
    shutil.rmtree(out_dir / "checkpoints", ignore_errors=True)  # derived from the outputs now written

    t0 = time.perf_counter()
    report = validate_run(out_dir)
    timings["validate"] = time.perf_counter() - t0
    manifest["validation"] = {"valid": report.ok, "checks": report.checks, "violations": report.violations[:100]}
    manifest["timings_seconds"]["validate"] = timings["validate"]
    _write_json(out_dir / "manifest.json", manifest)
    return RunResult(out_dir, manifest, report.ok, render_summary(manifest))


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
