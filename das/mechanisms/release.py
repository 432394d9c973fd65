"""`synthesize`: one mechanism's persons release, in the run-directory layout of `das run`.

Same reader, same randomness source, same exact accountant and writers as `das run`
(das/run.py, das/bundle.py, das/io/mdf.py, das/io/tables.py): manifest.json with the certificate,
mdf_persons.parquet, tables/, operator/ (input paths and keyed fingerprints, never published). A
synthetic release holds no TopDown invariant and writes no NMF or units MDF; its manifest says
what it holds (`holds`), and `das validate` checks exactly that.
"""

from __future__ import annotations

import platform
import time
from fractions import Fraction
from pathlib import Path

from das import atomic, bundle, outdir, preflight
from das.checkpoint import file_sha256
from das.geography import Geography
from das.io import mdf as mdf_io
from das.io.microdata import read_inputs
from das.io.tables import load_tables, write_tables
from das.mechanisms.base import Ledger, MechanismError, SynthesisInput, mechanism_certificate
from das.mechanisms.registry import MECHANISMS
from das.pipeline import NOT_PRIVATE, code_version
from das.privacy.accounting import BudgetError
from das.privacy.randomness import make_random_source
from das.privacy.strategy import load_strategy
from das.run import operator_fingerprint, protected_paths
from das.rundir import Manifest, RunDir
from das.runspec import load_run_spec
from das.schema import load_schema
from das.validate import SYNTHETIC_HOLDS, validate_run


def _budget(rho, spec) -> Fraction:
    if rho is None:
        rho = spec.persons.rho if spec.persons.rho is not None else load_strategy(spec.persons.strategy).rho
    if isinstance(rho, (float, bool)):
        raise BudgetError(f"rho must be exact (a Fraction, an int or a string 'a/b'), not {rho!r}")
    try:
        rho = Fraction(rho)
    except (TypeError, ValueError):
        raise BudgetError(f"rho must be exact (a Fraction, an int or a string 'a/b'), got {rho!r}") from None
    if rho <= 0:
        raise BudgetError(f"rho must be positive, got {rho}")
    return rho


def synthesize(spec_path, mechanism: str, out_dir, *, seed: int | None = None, rho: Fraction | None = None,
               overwrite: bool = False) -> Path:
    """Run `mechanism` on the persons input of run spec `spec_path`; write its release to out_dir.

    rho defaults to the spec's persons budget (the 2020 production budget for the shipped specs); a
    seed (or the spec's) gives the seeded replication mode, marked NOT PRIVATE as in `das run`.
    Returns out_dir. Raises MechanismError (unknown or unavailable mechanism), BudgetError, SpecError,
    InputError, OutDirError (the output directory: das.outdir).
    """
    if mechanism not in MECHANISMS:
        raise MechanismError(f"unknown mechanism {mechanism!r}; known: {', '.join(MECHANISMS)}")
    mech = MECHANISMS[mechanism]
    if not mech.available():
        raise MechanismError(f"mechanism {mechanism!r} needs the optional extra {mech.extra!r}: "
                             f"pip install 'das[{mech.extra}]'")
    t_start = time.perf_counter()
    spec = load_run_spec(spec_path, seed=seed)
    schema = load_schema(spec.persons.schema)
    budget = _budget(rho, spec)
    out_dir = Path(out_dir)
    preflight.check_writable(out_dir)
    outdir.check_release(out_dir, overwrite=overwrite, protected=protected_paths(spec))

    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    inputs = read_inputs(spec.persons_path, spec.units_path, schema)
    geography = Geography.from_blocks(inputs.inventory.blocks, spec.levels)
    timings["read_inputs"] = time.perf_counter() - t0

    rng = make_random_source(spec.seed)
    ledger = Ledger(budget)
    t0 = time.perf_counter()
    result = mech.run(SynthesisInput(schema, geography, inputs.person_histograms.tocsr(), budget, spec.delta,
                                     rng, ledger))
    timings[f"mechanism_{mechanism}"] = time.perf_counter() - t0
    del inputs  # the true counts are not needed past this point
    histograms = result.histograms.tocsr()
    if histograms.shape != (geography.n_blocks, schema.size):
        raise MechanismError(f"{mechanism}: returned histograms of shape {histograms.shape}, expected "
                             f"{(geography.n_blocks, schema.size)}")
    if histograms.nnz and (histograms.data < 0).any():
        raise MechanismError(f"{mechanism}: returned negative counts")
    cert = mechanism_certificate(mechanism, schema, spec.levels, ledger, spec.delta, rng.private)

    run_dir = RunDir(out_dir)
    outdir.remove_files(run_dir.path, outdir.check_release(run_dir.path, overwrite=overwrite,
                                                           protected=protected_paths(spec)))
    run_dir.path.mkdir(parents=True, exist_ok=True)
    key = bundle.new_key()
    bundle.write_operator(run_dir.path, {"spec_path": str(spec.path),
                                         "inputs": {"persons": str(spec.persons_path), "units": str(spec.units_path)},
                                         "fingerprint": operator_fingerprint(spec, key)}, key)
    text = bundle.public_spec_text(spec.text)
    digest = bundle.spec_digest(text)
    manifest = Manifest(
        das_version=code_version(), spec_name=spec.name, spec_text=text, spec_sha256=digest, status="running",
        private=rng.private, randomness="operating-system CSPRNG" if rng.private else f"seeded (seed {spec.seed})",
        levels=list(spec.levels), tables=spec.tables,
        persons={"schema": schema.name, "strategy": None, "mechanism": mechanism}, units=None,
        privacy={"persons": cert}, python=platform.python_version(), seed=spec.seed,
        mechanism={"name": mechanism, "summary": mech.summary, "geography": mech.geography, "budget": str(budget),
                   "details": result.details},
        holds=list(SYNTHETIC_HOLDS),
    )
    if not rng.private:
        manifest.warning = NOT_PRIVATE
    run_dir.write(manifest)

    t0 = time.perf_counter()
    metadata = bundle.parquet_metadata(rng.private, {"persons": cert}, digest, code_version())
    outputs = [mdf_io.write_table(mdf_io.person_mdf(schema, geography.blocks, histograms), run_dir.mdf("persons"),
                                  metadata=metadata)]
    with atomic.replacing(run_dir.tables_dir, directory=True) as tmp:
        written = write_tables(tmp, geography, {schema.name: histograms}, {schema.name: schema},
                               load_tables(spec.tables), metadata=metadata)
    outputs += [run_dir.tables_dir / p.name for p in written]
    timings["write_outputs"] = time.perf_counter() - t0
    manifest.status = "complete"
    manifest.timings_seconds = {**timings, "total": time.perf_counter() - t_start}
    manifest.outputs = {str(p.relative_to(run_dir.path)): file_sha256(p) for p in outputs}
    manifest.nmf = {}
    manifest.failsafe_events = []
    manifest.counts = {"persons": int(histograms.sum()), "blocks": geography.n_blocks}
    run_dir.write(manifest)

    t0 = time.perf_counter()
    report = validate_run(run_dir.path)
    manifest.validation = {"valid": report.ok, "checks": report.checks, "violations": report.violations[:100]}
    manifest.timings_seconds["validate"] = time.perf_counter() - t0
    run_dir.write(manifest)
    if not report.ok:
        raise MechanismError(f"{mechanism}: the release in {out_dir} fails validation: {report.violations[:3]}")
    return run_dir.path
