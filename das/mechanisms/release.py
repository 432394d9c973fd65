"""`synthesize`: one mechanism's persons release, in the run-directory layout of `das run`.

Same reader, same randomness source, same exact accountant and writers as `das run`
(das/run.py, das/bundle.py, das/io/mdf.py, das/io/tables.py): manifest.json with the certificate,
mdf_persons.parquet, tables/, operator/ (input paths and keyed fingerprints, never published). A
synthetic release holds no TopDown invariant and writes no NMF or units MDF; its manifest says
what it holds (`holds`), and `das validate` checks exactly that.
"""

from __future__ import annotations

import shutil
import time
from fractions import Fraction
from pathlib import Path

from das import bundle, preflight
from das.checkpoint import file_sha256
from das.geography import Geography
from das.io import mdf as mdf_io
from das.io.microdata import read_inputs
from das.io.tables import load_tables, write_tables
from das.mechanisms.base import Ledger, MechanismError, SynthesisInput, mechanism_certificate
from das.privacy.accounting import BudgetError
from das.privacy.randomness import make_random_source
from das.privacy.strategy import load_strategy
from das.run import (
    Prepared,
    _write_json,
    check_out_dir,
    operator_fingerprint,
    output_metadata,
    prepare_out_dir,
    protected_paths,
    start_manifest,
)
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
    InputError, RunError (output directory).
    """
    from das.mechanisms import MECHANISMS

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
    check_out_dir(out_dir, overwrite, protected_paths(spec))

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

    prep = Prepared(spec, [("persons", spec.persons, schema)], {}, {}, {"persons": cert}, rng, load_tables(spec.tables))
    prepare_out_dir(out_dir, spec, overwrite)
    key = bundle.new_key()
    bundle.write_operator(out_dir, {"spec_path": str(spec.path),
                                    "inputs": {"persons": str(spec.persons_path), "units": str(spec.units_path)},
                                    "fingerprint": operator_fingerprint(spec, key)}, key)
    manifest = start_manifest(prep, out_dir, lambda _message: None, extra={
        "seed": spec.seed,
        "persons": {"schema": schema.name, "strategy": None, "mechanism": mechanism},
        "units": None,
        "mechanism": {"name": mechanism, "summary": mech.summary, "geography": mech.geography,
                      "budget": str(budget), "details": result.details},
        "holds": list(SYNTHETIC_HOLDS),
    })

    t0 = time.perf_counter()
    metadata = output_metadata(prep)
    outputs = [mdf_io.write_table(mdf_io.person_mdf(schema, geography.blocks, histograms),
                                  out_dir / "mdf_persons.parquet", metadata=metadata)]
    tables_tmp, tables_dir = out_dir / "tables.partial", out_dir / "tables"
    shutil.rmtree(tables_tmp, ignore_errors=True)
    written = write_tables(tables_tmp, geography, {schema.name: histograms}, {schema.name: schema}, prep.tables,
                           metadata=metadata)
    shutil.rmtree(tables_dir, ignore_errors=True)
    tables_tmp.replace(tables_dir)
    outputs += [tables_dir / p.name for p in written]
    timings["write_outputs"] = time.perf_counter() - t0
    manifest.update({
        "status": "complete",
        "timings_seconds": {**timings, "total": time.perf_counter() - t_start},
        "outputs": {str(p.relative_to(out_dir)): file_sha256(p) for p in outputs},
        "nmf": {},
        "failsafe_events": [],
        "counts": {"persons": int(histograms.sum()), "blocks": geography.n_blocks},
    })
    _write_json(out_dir / "manifest.json", manifest)

    t0 = time.perf_counter()
    report = validate_run(out_dir)
    manifest["validation"] = {"valid": report.ok, "checks": report.checks, "violations": report.violations[:100]}
    manifest["timings_seconds"]["validate"] = time.perf_counter() - t0
    _write_json(out_dir / "manifest.json", manifest)
    if not report.ok:
        raise MechanismError(f"{mechanism}: the release in {out_dir} fails validation: {report.violations[:3]}")
    return out_dir
