"""`das run SPEC`: a whole release, from confidential microdata to validated outputs.

read + validate inputs -> block histograms and invariants -> noisy measurements (NMF, written
before any post-processing) -> true histograms dropped -> TopDown per release -> MDF, tables,
manifest (with the privacy certificate) -> independent validation.
"""

from __future__ import annotations

import hashlib
import json
import platform
import shutil
import subprocess
import time
from dataclasses import asdict, dataclass
from fractions import Fraction
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

import das
from das.geography import Geography
from das.io import mdf as mdf_io
from das.io.microdata import read_inputs
from das.io.tables import load_tables, write_tables
from das.measure import Measurement, measure_release
from das.privacy.accounting import PrivacyAccountant, allocate, certificate
from das.privacy.randomness import make_random_source
from das.privacy.strategy import load_strategy, validate_strategy
from das.runspec import RunSpec, load_run_spec
from das.schema import load_schema
from das.topdown.constraints import INVARIANT_LEVELS, Invariants
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


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


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


def check_out_dir(out_dir: Path, overwrite: bool) -> None:
    """Refuse a non-empty output directory unless asked to overwrite it."""
    if out_dir.exists() and any(out_dir.iterdir()) and not overwrite:
        manifest = out_dir / "manifest.json"
        owner = ""
        if manifest.exists():
            owner = f" (it holds run {json.loads(manifest.read_text()).get('spec_name')!r})"
        raise RunError(f"output directory {out_dir} is not empty{owner}; choose another or pass --overwrite")


def prepare_out_dir(out_dir: Path, spec: RunSpec, overwrite: bool) -> None:
    check_out_dir(out_dir, overwrite)
    if out_dir.exists() and any(out_dir.iterdir()):
        shutil.rmtree(out_dir)
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


def prepare(spec_path: str | Path, seed: int | None) -> Prepared:
    spec = load_run_spec(spec_path, seed=seed)
    persons_schema = load_schema(spec.persons.schema)
    releases = [("persons", spec.persons, persons_schema)]
    if spec.units:
        releases.append(("units", spec.units, load_schema(spec.units.schema)))
    plans, allocations, certificates = {}, {}, {}
    rng = make_random_source(spec.seed)
    for name, release, schema in releases:
        strategy = load_strategy(release.strategy)
        validate_strategy(strategy, schema, spec.levels)
        rho = release.rho if release.rho is not None else strategy.rho
        plans[name], allocations[name] = plan_for(strategy, rho, spec.levels)
        certificates[name] = certificate(strategy, rho, spec.delta, spec.levels, schema.name, rng.private)
    return Prepared(spec, releases, plans, allocations, certificates, rng, load_tables(spec.tables))


def start_manifest(prep: Prepared, out_dir: Path, log) -> dict:
    spec = prep.spec
    manifest = {
        "das_version": code_version(),
        "spec_name": spec.name,
        "spec_path": str(spec.path),
        "spec_text": spec.text,
        "status": "running",
        "private": prep.rng.private,
        "randomness": "operating-system CSPRNG" if prep.rng.private else f"seeded (seed {spec.seed})",
        "inputs": {"persons": str(spec.persons_path), "units": str(spec.units_path)},
        "levels": list(spec.levels),
        "tables": spec.tables,
        "persons": {"schema": spec.persons.schema, "strategy": spec.persons.strategy},
        "units": {"schema": spec.units.schema, "strategy": spec.units.strategy} if spec.units else None,
        "privacy": prep.certificates,
        "python": platform.python_version(),
    }
    if not prep.rng.private:
        manifest["warning"] = NOT_PRIVATE
        log(f"WARNING: {NOT_PRIVATE}")
    _write_json(out_dir / "manifest.json", manifest)
    return manifest


def read_confidential(prep: Prepared, timings: dict, log):
    """Read and validate the inputs: (geography, invariants, true block histograms per release)."""
    spec = prep.spec
    schemas = {name: schema for name, _, schema in prep.releases}
    t0 = time.perf_counter()
    inputs = read_inputs(spec.persons_path, spec.units_path, schemas["persons"], schemas.get("units"))
    geography = Geography.from_blocks(inputs.inventory.blocks, spec.levels)
    invariants = Invariants(
        housing_units=inputs.inventory.housing_units,
        gq_facilities=inputs.inventory.gq_facilities,
        total_population={
            level: np.asarray(geography.aggregate(inputs.person_histograms, level).sum(axis=1)).ravel()
            for level in INVARIANT_LEVELS if level in spec.levels
        },
    )
    histograms = {"persons": inputs.person_histograms, "units": inputs.unit_histograms}
    timings["read_inputs"] = time.perf_counter() - t0
    log(f"read {int(inputs.person_histograms.sum()):,} persons in {geography.n_blocks:,} blocks "
        f"({timings['read_inputs']:.1f} s)")
    return geography, invariants, histograms


def measure_all(prep: Prepared, geography: Geography, histograms: dict, out_dir: Path, timings: dict, log) -> None:
    """Measure every release into out_dir/nmf, charging the accountant before any draw."""
    spec = prep.spec
    for name, _, schema in prep.releases:
        t0 = time.perf_counter()
        # refuses any measurement that is not in the certified plan, or with another variance
        accountant = PrivacyAccountant.for_allocation(prep.allocations[name])
        budget = prep.allocations[name].rho
        measure_release(name, geography, histograms[name], schema, prep.plans[name], prep.rng, out_dir / "nmf",
                        accountant=accountant)
        if accountant.spent != budget:
            raise RunError(f"{name}: measured rho {accountant.spent} differs from the certified {budget}")
        timings[f"measure_{name}"] = time.perf_counter() - t0
        log(f"measured {name}: {sum(len(v) for v in prep.plans[name].values())} queries over "
            f"{len(spec.levels)} levels ({timings[f'measure_{name}']:.1f} s)")


def measure_only(spec_path, out_dir, seed=None, overwrite=False, log=print) -> dict:
    """`das measure`: the NMF and a manifest, no post-processing."""
    prep = prepare(spec_path, seed)
    out_dir = Path(out_dir)
    check_out_dir(out_dir, overwrite)
    timings: dict[str, float] = {}
    geography, _, histograms = read_confidential(prep, timings, log)  # bad input: nothing written
    prepare_out_dir(out_dir, prep.spec, overwrite)
    manifest = start_manifest(prep, out_dir, log)
    measure_all(prep, geography, histograms, out_dir, timings, log)
    nmf_dir = out_dir / "nmf"
    manifest.update({"status": "measured", "timings_seconds": timings,
                     "nmf": {str(p.relative_to(out_dir)): _sha256(p) for p in sorted(nmf_dir.rglob("*.parquet"))}})
    _write_json(out_dir / "manifest.json", manifest)
    return manifest


def run(
    spec_path: str | Path,
    out_dir: str | Path,
    seed: int | None = None,
    workers: int = 1,
    overwrite: bool = False,
    progress: bool = True,
    log=print,
) -> RunResult:
    t_start = time.perf_counter()
    prep = prepare(spec_path, seed)
    spec = prep.spec
    out_dir = Path(out_dir)
    check_out_dir(out_dir, overwrite)
    timings: dict[str, float] = {}
    geography, invariants, histograms = read_confidential(prep, timings, log)  # bad input: nothing written
    prepare_out_dir(out_dir, spec, overwrite)
    manifest = start_manifest(prep, out_dir, log)
    measure_all(prep, geography, histograms, out_dir, timings, log)
    del histograms  # the true counts are not needed past this point
    nmf_dir = out_dir / "nmf"

    options = EngineOptions(workers=workers, solver=spec.solver, rounding=spec.rounding, progress=progress,
                            passes=spec.passes)
    solved, level_reports = {}, {}
    for name, _, schema in prep.releases:
        t0 = time.perf_counter()
        solved[name], reports = postprocess(name, schema, geography, invariants, nmf_dir, options)
        level_reports[name] = reports
        timings[f"postprocess_{name}"] = time.perf_counter() - t0
        per_level = ", ".join(f"{r.level} {r.seconds:.1f}s" for r in reports)
        log(f"post-processed {name} ({timings[f'postprocess_{name}']:.1f} s: {per_level})")

    t0 = time.perf_counter()
    schemas = {name: schema for name, _, schema in prep.releases}
    persons_schema, units_schema = schemas["persons"], schemas.get("units")
    outputs = [mdf_io.write_table(mdf_io.person_mdf(persons_schema, geography.blocks, solved["persons"]),
                                  out_dir / "mdf_persons.parquet")]
    outputs.append(mdf_io.write_table(
        mdf_io.unit_mdf(units_schema or load_schema("h1_units"), geography.blocks, solved.get("units"),
                        invariants.gq_facilities),
        out_dir / "mdf_units.parquet"))
    if spec.mdf_layout == "pipe":
        for kind in ("persons", "units"):
            outputs.append(mdf_io.write_table(pq.read_table(out_dir / f"mdf_{kind}.parquet"),
                                              out_dir / f"mdf_{kind}.txt", layout="pipe"))
    by_schema = {schemas[name].name: solved[name] for name in solved}
    outputs += write_tables(out_dir / "tables", geography, by_schema,
                            {s.name: s for s in schemas.values()}, prep.tables)
    timings["write_outputs"] = time.perf_counter() - t0

    events = [
        {"release": name, "level": r.level, **(asdict(e) if hasattr(e, "__dataclass_fields__") else dict(e))}
        for name, reports in level_reports.items() for r in reports for e in r.failsafe_events
    ]
    manifest.update({
        "status": "complete",
        "timings_seconds": {**timings, "total": time.perf_counter() - t_start},
        "levels_report": {name: [{"level": r.level, "parents": r.parents, "seconds": r.seconds,
                                  "failsafe_events": len(r.failsafe_events)} for r in reports]
                          for name, reports in level_reports.items()},
        "failsafe_events": events,
        "outputs": {str(p.relative_to(out_dir)): _sha256(p) for p in outputs},
        "nmf": {str(p.relative_to(out_dir)): _sha256(p) for p in sorted(nmf_dir.rglob("*.parquet"))},
        "counts": {"persons": int(solved["persons"].sum()), "blocks": geography.n_blocks},
    })
    _write_json(out_dir / "manifest.json", manifest)

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
    v = manifest.get("validation", {})
    lines.append(f"validation: {'PASSED' if v.get('valid') else 'FAILED'} ({len(v.get('checks', []))} checks)")
    lines.append("outputs: " + ", ".join(sorted(manifest["outputs"])) + ", nmf/, manifest.json")
    if not manifest["private"]:
        lines.append("NOTE: " + NOT_PRIVATE)
    return "\n".join(lines)
