"""The release frame: what every release command does around its mechanism, in one place.

`das run`, its partitioned driver and `das synth` differ in how they turn confidential microdata
into solved histograms; around that they do the same things, here:

    open_frame   the output directory checked, the operator files (input paths, keyed fingerprints,
                 the key), then the public manifest saying what runs (spec, certificates, invariants,
                 what the release holds) before any noise is drawn
    write        every wanted output of the registry (das.io.outputs) for a whole release
    complete     digests of what was written, the manifest completed, the checkpoints removed, the
                 release validated by das.validate and the result recorded; then the manifest signed
                 (das.frame.signing: the operator's key, or the release's own), the signature written last
    complete_measurement   the same for `das measure`'s NMF release (status "measured": the NMF alone)

A frame is a frozen value: each step returns the frame with its new manifest, written atomically.
"""

from __future__ import annotations

import logging
import platform
import shutil
import time
from dataclasses import dataclass, replace
from pathlib import Path

from das.driver.runspec import RunSpec
from das.frame import bundle, outdir, pinned, signing
from das.frame.checkpoint import crash_point, file_sha256
from das.frame.manifest import Manifest
from das.frame.records import Counts, MechanismRecord, PublishedInvariants, ReleaseInfo, SpineRecord, ValidationRecord
from das.frame.rundir import RunDir
from das.io.outputs import OutputPlan, SolvedRelease, checks_of
from das.io.parts import write_release
from das.privacy.guarantee import combined
from das.validate import NMF_HOLDS, validate_run

NOT_PRIVATE = ("SEEDED REPLICATION MODE: the noise was drawn from a seeded pseudo-random "
               "generator. These outputs are NOT private and must not be released.")
TOPDOWN_CLAIMS = ("invariants", "schema_constraints")  # what TopDown holds beyond its outputs' checks
SYNTHETIC_CLAIMS = ("charges_sum_to_rho",)
logger = logging.getLogger(__name__)


# ---------------------------------------------------------------------------------------------
# The output directory


def protected_paths(spec: RunSpec, signing_key: Path | None = None) -> list[Path]:
    """What an output directory may neither be, hold nor be inside: the run's spec and inputs, and the
    operator's signing key (a dict spec's None and an input held in memory are no place: outdir passes them)."""
    return [spec.path, spec.persons_path, spec.units_path] + ([Path(signing_key)] if signing_key else [])


def check_out_dir(out_dir: Path, overwrite: bool, protected: list[Path] = ()) -> list[Path]:
    """The output directory's policy for a release (das.frame.outdir.check_release): refused (OutDirError)
    unless empty, or a das run to --overwrite; the files --overwrite deletes (only a das run's own)."""
    return outdir.check_release(out_dir, overwrite=overwrite, protected=protected)


def operator_fingerprint(spec: RunSpec, key: bytes) -> dict:
    """What must not change between a run and its resumption: spec, seed, inputs (keyed digests, operator only)."""
    return {
        "spec_sha256": bundle.spec_digest(spec.fingerprint_text),
        "seed": spec.seed,
        "inputs": {name: bundle.keyed_fingerprint(key, p)
                   for name, p in (("persons", spec.persons_path), ("units", spec.units_path),
                                   *((f"{t} areas", path) for t, path in spec.areas.items())) if p is not None},
    }


# ---------------------------------------------------------------------------------------------
# The frame


@dataclass(frozen=True)
class ReleaseFrame:
    """A release being written: its directory, its manifest so far, what its outputs are written with."""

    run_dir: RunDir
    manifest: Manifest
    plan: OutputPlan
    signing_key: Path | None = None  # the operator's private key; None: the release's own (das.frame.signing)

    def recorded(self, manifest: Manifest) -> ReleaseFrame:
        """The frame with `manifest`, written (atomically); a signature of the manifest it replaces is removed."""
        signing.unsign(self.run_dir)
        self.run_dir.write(manifest)
        return replace(self, manifest=manifest)

    def noted(self, **fields) -> ReleaseFrame:
        """The operator's record of how the run goes (timings, interruptions, errors) with `fields` set:
        das.frame.bundle.record_process, never the public manifest."""
        bundle.record_process(self.run_dir.path, **fields)
        return self

    def write(self, release: SolvedRelease) -> dict[str, list[Path]]:
        """Every wanted output of a whole release, by manifest field ("outputs", "nmf")."""
        return write_release(self.run_dir, release, self.plan, after=lambda name: crash_point("outputs"))


def output_plan(spec: RunSpec, tables: tuple, metadata: dict, *, synthetic: bool = False) -> OutputPlan:
    """What a release of `spec` writes: tables, levels, PL 94-171 files, the MDF layout; a TopDown release
    its NMF and a units MDF too, a synthetic one (das synth) the persons MDF alone."""
    return OutputPlan(tables, metadata, spec.levels, spec.pl94171 and not synthetic, spec.mdf_layout,
                      mdf_kinds=("persons",) if synthetic else ("persons", "units"), nmf=not synthetic,
                      spine=not synthetic and spec.spine != "standard")


def holds(plan: OutputPlan, *, synthetic: bool) -> tuple[str, ...]:
    """What a release claims (and das validate checks): its outputs' checks, and its kind's claims."""
    return checks_of(plan) + (SYNTHETIC_CLAIMS if synthetic else TOPDOWN_CLAIMS)


@dataclass(frozen=True)
class Opening:
    """What a release says of itself before anything is drawn: its releases' schemas, certificates,
    published invariants, what it claims to hold, and (a synthetic release) its mechanism."""

    releases: dict[str, ReleaseInfo]
    certificates: dict
    invariants: PublishedInvariants
    holds: tuple[str, ...]
    private: bool  # the randomness: the OS CSPRNG, or seeded (NOT private)
    version: str  # of the code (das.driver.pipeline.code_version)
    mechanism: MechanismRecord | None = None
    spine: SpineRecord | None = None  # a spine other than the standard one


def open_frame(spec: RunSpec, run_dir: RunDir, opening: Opening, *, plan: OutputPlan, overwrite: bool = False,
               signing_key: Path | None = None) -> ReleaseFrame:
    """A new release directory: the operator files (paths, keyed fingerprints, keys), then the public
    manifest, which says what runs (spec, certificates, invariants) before any noise is drawn.
    `signing_key`: the operator's Ed25519 key to sign the release with (checked first); None: a key of
    the release's own, in its operator files."""
    if signing_key is not None:
        signing.read_private_key(signing_key)
    key = bundle.new_key()
    fingerprint = operator_fingerprint(spec, key)
    files = check_out_dir(run_dir.path, overwrite, protected_paths(spec, signing_key))
    if files:
        outdir.remove_files(run_dir.path, files)
    run_dir.path.mkdir(parents=True, exist_ok=True)
    bundle.write_operator(run_dir.path, {"spec_path": None if spec.path is None else str(spec.path),
                                         "inputs": {"persons": str(spec.persons_path), "units": str(spec.units_path)},
                                         "fingerprint": fingerprint,
                                         "signing_key": None if signing_key is None else str(Path(signing_key).resolve())},
                          key)
    signing_key = signing.signing_key(run_dir, signing_key)
    text = bundle.public_spec_text(spec.text, budget=spec.budget_table())
    private = opening.private
    manifest = Manifest(
        das_version=opening.version, spec_name=spec.name, spec_text=text, spec_sha256=bundle.spec_digest(text),
        status="running", private=private,
        randomness="operating-system CSPRNG" if private else f"seeded (seed {spec.seed})",
        levels=tuple(spec.levels), tables=pinned.published_name(spec.tables, "tables"), persons=opening.releases["persons"],
        units=opening.releases.get("units"), privacy=dict(opening.certificates), python=platform.python_version(),
        seed=spec.seed, invariants=opening.invariants, mechanism=opening.mechanism, holds=opening.holds,
        spine=opening.spine, guarantee=combined(opening.certificates),
        warning=None if private else NOT_PRIVATE,
    )
    if not private:
        logger.warning(NOT_PRIVATE)
    return ReleaseFrame(run_dir, manifest, plan, signing_key).recorded(manifest)


def _digests(run_dir: RunDir, paths) -> dict[str, str]:
    return {run_dir.relative(p): file_sha256(p) for p in paths}


@dataclass(frozen=True)
class Completion:
    """What a release's mechanism reports when its outputs are written: the manifest's closing fields, and
    the operator's (run times, per stage and per level: they may depend on the data outside the noise)."""

    written: dict[str, list[Path]]  # manifest field -> files
    counts: Counts
    timings: dict[str, float]  # operator only
    levels_report: dict | None = None
    failsafe_events: tuple = ()
    engine: object = None
    level_timings: dict | None = None  # operator only: release -> [{level, seconds, tasks}]


# The validator's checks that compare a release with the confidential inputs (das.validate, given the operator
# files): their result is the operator's; the public record holds only what the published files show.
def split_report(report) -> tuple[ValidationRecord, ValidationRecord]:
    """A validator's report as (what the published files show, what the comparison with the inputs found)."""
    public, against = report.split()
    return (ValidationRecord(public.ok, tuple(public.checks), tuple(public.violations[:100])),
            ValidationRecord(against.ok, tuple(against.checks), tuple(against.violations[:100])))


def complete(frame: ReleaseFrame, completion: Completion, *, validate: dict | None = None) -> ReleaseFrame:
    """The manifest completed (digests, counts, reports), the checkpoints removed, the release validated
    (`validate`: keyword arguments of das.validate.validate_run, e.g. the executor) and the result recorded:
    what the published files show in the manifest, the comparison with the confidential inputs and the
    run times in the operator's record; then the manifest, final, signed: the signature is the release's last file."""
    run_dir = frame.run_dir
    frame = frame.recorded(frame.manifest.but(
        status="complete", engine=completion.engine, levels_report=completion.levels_report,
        failsafe_events=tuple(completion.failsafe_events),
        outputs=_digests(run_dir, completion.written.get("outputs", [])),
        nmf=_digests(run_dir, completion.written.get("nmf", [])), counts=completion.counts))
    shutil.rmtree(run_dir.checkpoints_dir, ignore_errors=True)  # derived from the outputs now written
    t0 = time.perf_counter()
    public, against_inputs = split_report(validate_run(run_dir.path, **(validate or {})))
    frame.noted(timings_seconds={**completion.timings, "validate": time.perf_counter() - t0},
                levels=completion.level_timings or {}, error=None, validation_against_inputs=against_inputs.to_dict())
    frame = frame.recorded(frame.manifest.but(validation=public))
    sign(frame)
    return frame


def sign(frame: ReleaseFrame) -> str:
    """Sign the frame's manifest as it is now (das.frame.signing: the operator's key, or the release's own): its last
    file. Returns the public key's fingerprint."""
    return signing.sign_release(frame.run_dir, frame.signing_key or signing.signing_key(frame.run_dir, None))


def complete_measurement(frame: ReleaseFrame, nmf: list[Path], outputs: list[Path], *, timings: dict) -> ReleaseFrame:
    """`das measure`'s release, an NMF release: the manifest says "measured", lists the NMF (and the spine, when
    not the standard one) and claims what an NMF shows (das.validate.NMF_HOLDS); then, as a complete release,
    validated from its files (recorded in the manifest; the operator's record gets the time) and signed, last."""
    run_dir = frame.run_dir
    frame = frame.recorded(frame.manifest.but(status="measured", nmf=_digests(run_dir, nmf),
                                              outputs=_digests(run_dir, outputs) or None, holds=NMF_HOLDS))
    t0 = time.perf_counter()
    public, _ = split_report(validate_run(run_dir.path, use_operator=False))
    frame.noted(timings_seconds={**timings, "validate": time.perf_counter() - t0})
    frame = frame.recorded(frame.manifest.but(validation=public))
    sign(frame)
    return frame


def release_valid(frame: ReleaseFrame) -> bool:
    """Whether a completed release is valid: what its files show, and (the operator's) against the inputs."""
    against = bundle.read_process(frame.run_dir.path).get("validation_against_inputs") or {}
    return bool(frame.manifest.validation and frame.manifest.validation.valid and against.get("valid", True))
