"""`synthesize`: one mechanism's persons release, in the run-directory layout of `das run`.

Same reader, same randomness source, same exact accountant and the same release frame as `das run`
(das/frame/lifecycle.py: operator files, manifest with the certificate, the outputs registry's writers,
validation): manifest.json, mdf_persons.parquet, tables/, operator/ (input paths and keyed
fingerprints, never published). A synthetic release holds no TopDown invariant and writes no NMF or
units MDF; its manifest says what it holds (`holds`), and `das validate` checks exactly that.
"""

from __future__ import annotations

import logging
import time
from fractions import Fraction
from pathlib import Path

from das.core.errors import BudgetError, RunStopped, option
from das.driver import preflight
from das.driver.pipeline import code_version, release_rho
from das.driver.run import EXPECTED
from das.driver.runspec import Budget, load_run_spec
from das.frame import bundle, signing
from das.frame.lifecycle import (
    Completion,
    Opening,
    ReleaseFrame,
    check_out_dir,
    complete,
    holds,
    open_frame,
    output_plan,
    protected_paths,
)
from das.frame.records import Counts, MechanismRecord, PublishedInvariants, ReleaseInfo
from das.frame.rundir import RunDir
from das.io.microdata import read_inputs
from das.io.outputs import SolvedRelease
from das.io.tables import load_tables
from das.mechanisms.base import Ledger, Mechanism, MechanismError, SynthesisInput, mechanism_certificate
from das.mechanisms.registry import MECHANISMS
from das.model.geography import Geography
from das.model.schema import load_schema
from das.privacy.certificate import Certificate
from das.privacy.randomness import make_random_source
from das.privacy.strategy import load_strategy

logger = logging.getLogger(__name__)


def _given(rho, budget: Budget | None) -> Budget | None:
    """The command line's budget with `rho` (an exact value) over its rho or eps: the published spec states it, so
    das validate plans the mechanism's charges from the published bytes."""
    if rho is None:
        return budget
    return Budget(rho=_exact(rho), delta=budget.delta if budget else None)


def _budget(spec) -> Fraction:
    """The persons budget of the spec (the command line's over its own), as das validate reads it from spec_text."""
    return _exact(release_rho(spec.persons, load_strategy(spec.persons.strategy), spec.delta))


def _exact(rho) -> Fraction:
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
               overwrite: bool = False, allow_large_rho: bool = False, budget: Budget | None = None,
               signing_key: Path | None = None) -> Path:
    """Run `mechanism` on the persons input of run spec `spec_path`; write its release to out_dir.

    rho defaults to the spec's persons budget (the 2020 production budget for the shipped specs); a
    seed (or the spec's) gives the seeded replication mode, marked NOT PRIVATE as in `das run`. The
    release is signed with `signing_key` (the operator's, das keygen) or a key of its own (das.frame.signing).
    Returns out_dir. Raises MechanismError (unknown or unavailable mechanism), BudgetError, SpecError,
    InputError, RunError (output directory), SigningError (the key).
    """
    mech = _mechanism(mechanism)
    t_start = time.perf_counter()
    spec = load_run_spec(spec_path, seed=seed, budget=_given(rho, budget))
    bundle.public_spec(spec.text)  # a spec that cannot be redacted for publication is refused before anything
    schema = load_schema(spec.persons.schema)
    budget = _budget(spec)
    preflight.check_rho_cap(budget, allow_large_rho=allow_large_rho,  # the one cap of every command that spends budget
                            what=f"{option('rho', rho)}:" if rho is not None else
                            f"{preflight.given_budget(spec.budget)}:" if spec.budget else
                            f"{spec.origin}: [persons]")
    if signing_key is not None:  # the operator's key (das keygen), checked before anything is read
        signing.read_private_key(signing_key)
    run_dir = RunDir(out_dir)
    preflight.check_writable(run_dir.path)
    _out_dir(run_dir, overwrite, spec, signing_key)

    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    logger.info(f"reading and checking the inputs ({spec.persons_path.name}, {spec.units_path.name})")
    inputs = read_inputs(spec.persons_path, spec.units_path, schema)
    geography = Geography.from_blocks(inputs.inventory.blocks, spec.levels)
    timings["read_inputs"] = time.perf_counter() - t0
    logger.info(f"read {int(inputs.person_histograms.sum()):,} persons in {geography.n_blocks:,} blocks "
                f"({timings['read_inputs']:.1f} s); running {mechanism} (budget rho {float(budget):.4f})")

    rng = make_random_source(spec.seed)
    ledger = Ledger(budget)
    t0 = time.perf_counter()
    try:
        result = mech.run(SynthesisInput(schema, geography, inputs.person_histograms.tocsr(), budget, spec.delta,
                                         rng, ledger))
    except Exception as e:
        if isinstance(e, (MechanismError, BudgetError, *EXPECTED)):
            raise
        logger.debug("the error that stopped the mechanism", exc_info=e)
        raise RunStopped(f"{mechanism}: stopped by an error of das's own, not of the input ({type(e).__name__}: "
                         f"{str(e)[:300]}); nothing was written or released (a synthetic release keeps no "
                         "measurements to continue from: run it again). Please report the error (-v shows where "
                         "it was raised)") from e
    timings[f"mechanism_{mechanism}"] = time.perf_counter() - t0
    _log_mechanism(mech, ledger, result, timings[f"mechanism_{mechanism}"])
    del inputs  # the true counts are not needed past this point
    histograms = _checked(mechanism, result.histograms.tocsr(), (geography.n_blocks, schema.size))
    cert = mechanism_certificate(mech, schema, spec.levels, ledger, delta=spec.delta, private=rng.private)

    frame = _open(spec, run_dir, mech, result, cert=cert, overwrite=overwrite, signing_key=signing_key)
    t0 = time.perf_counter()
    written = frame.write(SolvedRelease(geography, {"persons": schema}, {"persons": histograms}))
    timings["write_outputs"] = time.perf_counter() - t0
    frame = complete(frame, Completion(written, Counts(int(histograms.sum()), geography.n_blocks),
                                       {**timings, "total": time.perf_counter() - t_start}))
    if not frame.manifest.validation.valid:
        raise MechanismError(f"{mechanism}: the release in {out_dir} fails validation: "
                             f"{list(frame.manifest.validation.violations[:3])}")
    return run_dir.path


def _log_mechanism(mech: Mechanism, ledger: Ledger, result, seconds: float) -> None:
    """The mechanism's run: a line at INFO, and with -v its charges and public parameters, a line each (stderr)."""
    if ledger.direct is not None:  # (eps, delta)-DP directly: no rho spent
        spent = f"(eps, delta)-DP directly at eps {float(ledger.direct.eps):.4f}, delta {float(ledger.direct.delta):.1e}"
    else:
        spent = f"rho {float(sum(c.rho for c in ledger.entries)):.4f} of {float(ledger.budget):.4f}"
    logger.info(f"ran {mech.name} ({seconds:.1f} s): {len(ledger.entries)} step(s), {spent} (exact in the manifest's "
                "certificate)")
    for c in ledger.entries:
        cost = "no rho" if c.rho is None else f"rho {float(c.rho):.4g}"
        logger.debug(f"  {c.step} per {c.scope} ({c.noise}): {cost}")
    for key, value in mech.public_details(result.details).items():
        logger.debug(f"  {mech.name} {key}: {value}")


def _mechanism(name: str) -> Mechanism:
    if name not in MECHANISMS:
        raise MechanismError(f"unknown mechanism {name!r}; known: {', '.join(MECHANISMS)}")
    mech = MECHANISMS[name]
    if not mech.available():
        raise MechanismError(f"mechanism {name!r} needs the optional extra {mech.extra!r}: pip install 'das[{mech.extra}]'")
    return mech


def _out_dir(run_dir: RunDir, overwrite: bool, spec, signing_key: Path | None = None) -> None:
    check_out_dir(run_dir.path, overwrite, protected_paths(spec, signing_key))


def _checked(mechanism: str, histograms, shape: tuple[int, int]):
    """A mechanism's block histograms, refused unless of the release's shape and nonnegative."""
    if histograms.shape != shape:
        raise MechanismError(f"{mechanism}: returned histograms of shape {histograms.shape}, expected {shape}")
    if histograms.nnz and (histograms.data < 0).any():
        raise MechanismError(f"{mechanism}: returned negative counts")
    return histograms


def _open(spec, run_dir: RunDir, mech: Mechanism, result, *, cert: Certificate, overwrite: bool,
          signing_key: Path | None = None) -> ReleaseFrame:
    """The release's frame: a synthetic release holds what its outputs and its certificate show."""
    public_text = bundle.public_spec_text(spec.text, budget=spec.budget_table())
    metadata = bundle.parquet_metadata(cert.private, {"persons": cert}, bundle.spec_digest(public_text), code_version())
    plan = output_plan(spec, load_tables(spec.tables), metadata, synthetic=True)
    opening = Opening({"persons": ReleaseInfo(cert.schema, None, mech.name)}, {"persons": cert}, PublishedInvariants(),
                      holds(plan, synthetic=True), private=cert.private, version=code_version(),
                      mechanism=MechanismRecord(mech.name, mech.summary, mech.geography, cert.budget,
                                                mech.public_details(result.details)))
    return open_frame(spec, run_dir, opening, plan=plan, overwrite=overwrite, signing_key=signing_key)
