"""One release's pipeline: the context of a run and its stages, in the order data flows.

    Pipeline.prepare (spec, schemas, strategies, budgets, certificates, randomness; no file read)
      -> read_inputs  (confidential microdata -> geography, invariants, true block histograms)
      -> measure      (noisy measurements into the NMF, charged to an exact accountant first)
      -> postprocess  (TopDown per release, persons first: the units are bounded by its households)
      -> solved_release (what the writers of das.io.outputs take; das.frame.lifecycle writes them)

`das run` and its resume (das.run), `das measure`, and research replicates (das.research) all
run these stages; the release frame (das.frame.lifecycle) keeps the run directory around them.
"""

from __future__ import annotations

import functools
import logging
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from fractions import Fraction
from pathlib import Path

import das
from das.core.errors import RunError
from das.core.paths import CHECKOUT
from das.driver import preflight
from das.driver.inputs import Confidential, Preflight, Reader, read_partition
from das.driver.runspec import Budget, ReleaseSpec, RunSpec, load_run_spec
from das.frame import bundle
from das.io.tables import load_tables, table_widths
from das.model.rules import household_persons
from das.model.schema import Schema, load_schema
from das.model.spine import recut_level
from das.privacy.accounting import Allocation, PrivacyAccountant, allocate, certificate, rho_for_eps
from das.privacy.certificate import Certificate
from das.privacy.randomness import make_random_source
from das.privacy.strategy import Strategy, load_strategy, validate_strategy
from das.topdown.engine import EngineOptions, LevelReport, postprocess
from das.topdown.measure import Measured, Target, charge, measure_release

logger = logging.getLogger(__name__)


@functools.cache
def code_version() -> str:
    """das version, plus the git commit when running from a checkout (and '+dirty' if modified).

    Asked of git once per process, so every file a run writes carries the same version (a `git status` timed out
    under load once gave one NMF file the bare version), and without git's optional index lock (a status killed by
    the timeout left `.git/index.lock` behind, and concurrent runs contended for it)."""
    git = ["git", "--no-optional-locks", "-C", str(CHECKOUT)]
    try:
        commit = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True,
                                text=True, timeout=30, check=True).stdout.strip()
        dirty = subprocess.run([*git, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=30, check=True).stdout.strip()
        return f"{das.__version__} (git {commit}{'+dirty' if dirty else ''})"
    except (OSError, subprocess.SubprocessError):
        return das.__version__


@dataclass(frozen=True)
class ReleasePlan:
    """One release (persons or units) as planned: schema, strategy, its budget's allocation and certificate."""

    name: str
    spec: ReleaseSpec
    schema: Schema
    strategy: Strategy
    allocation: Allocation
    certificate: Certificate | None

    @property
    def measured(self) -> Measured:
        return Measured(self.name, self.schema, self.allocation)


def measure_releases(plans: dict[str, Measured], confidential: Confidential, *, rng, target: Target,
                     levels: tuple[str, ...] | None = None) -> dict:
    """Measure each release's levels (all, or `levels`) of a partition's inputs into target's NMF files; levels
    and chunks already committed are reused, never drawn again. What each release reused and drew, by release
    and level. The charge comes first, from the caller (Pipeline.charge): no accountant here."""
    report: dict = {}
    for name, measured in plans.items():
        t0 = time.perf_counter()
        report[name] = {}
        measure_release(measured, confidential.geography, confidential.histograms[name], rng=rng,
                        target=replace(target, report=report[name]), levels=levels)
        logger.info(f"measured {name}: {len(measured.allocation.items)} queries over "
                    f"{len(levels or confidential.geography.levels)} levels ({time.perf_counter() - t0:.1f} s)")
    return report


def release_rho(release: ReleaseSpec, strategy: Strategy, delta: Fraction) -> Fraction | None:
    """A release's budget: its rho, or the largest rho certified within its eps at delta, or the strategy's."""
    if release.rho is not None:
        return release.rho
    if release.eps is not None:
        return rho_for_eps(release.eps, delta)
    return strategy.rho


@dataclass
class Pipeline:
    """The context of one run: spec, releases (persons first), randomness, tables and timings."""

    spec: RunSpec
    releases: dict[str, ReleasePlan]
    rng: object
    tables: tuple
    timings: dict[str, float] = field(default_factory=dict)

    @classmethod
    def prepare(cls, spec_path: str | Path | Mapping | RunSpec, seed: int | None, *, workers: int = 1, engine: str = "local",
                allow_large_rho: bool = False, budget: Budget | None = None) -> Pipeline:
        """Load the spec and pass the spec preflight (das/driver/preflight.py): no input file is opened here.
        `budget`: the command line's persons budget and delta, over the spec's."""
        spec = load_run_spec(spec_path, seed=seed, budget=budget)
        bundle.public_spec(spec.text)  # a spec that cannot be redacted for publication is refused before anything
        wanted = [("persons", spec.persons)] + ([("units", spec.units)] if spec.units else [])
        planned = {}
        for name, release in wanted:
            schema, strategy = load_schema(release.schema), load_strategy(release.strategy)
            validate_strategy(strategy, schema, spec.levels)
            rho = release_rho(release, strategy, spec.delta)
            planned[name] = ReleasePlan(name, release, schema, strategy, allocate(strategy, rho), None)
        preflight.check_spec(spec, {n: r.schema for n, r in planned.items()},
                             {n: r.strategy for n, r in planned.items()},
                             {n: r.allocation for n, r in planned.items()},
                             workers=workers, engine=engine, allow_large_rho=allow_large_rho)
        rng = make_random_source(spec.seed)
        for name, r in planned.items():
            cert = certificate(r.strategy, r.allocation, spec.delta, spec.levels, schema_name=r.schema.name,
                               randomness_private=rng.private)
            planned[name] = replace(r, certificate=cert)
        return cls(spec, planned, rng, load_tables(spec.tables))

    @property
    def schemas(self) -> dict[str, Schema]:
        return {name: r.schema for name, r in self.releases.items()}

    @property
    def certificates(self) -> dict[str, Certificate]:
        return {name: r.certificate for name, r in self.releases.items()}

    def at_budget(self, name: str, rho: Fraction) -> ReleasePlan:
        """Release `name` planned at another total budget (research: the same strategy's shares)."""
        r = self.releases[name]
        allocation = allocate(r.strategy, rho)
        cert = certificate(r.strategy, allocation, self.spec.delta, self.spec.levels, schema_name=r.schema.name,
                           randomness_private=self.rng.private)
        return replace(r, allocation=allocation, certificate=cert)

    def public_spec(self) -> tuple[str, str]:
        """The spec text as published (input paths redacted) and its SHA-256."""
        text = bundle.public_spec_text(self.spec.text, budget=self.spec.budget_table())
        return text, bundle.spec_digest(text)

    def metadata(self) -> dict[bytes, bytes]:
        """Metadata every Parquet output of this run carries (privacy mode, certificate, spec digest, version)."""
        return bundle.parquet_metadata(self.rng.private, self.certificates, self.public_spec()[1], code_version())

    def reader(self, states: tuple[str, ...] = ()) -> Reader:
        """How this run reads its inputs, whole or (`states`: a partitioned run's) one state at a time."""
        return Reader(self.schemas, self.spec.levels, self.spec.spine, dict(self.spec.areas), states)

    def preflight(self, out_dir: Path) -> Preflight:
        """The input preflight of this run's plans into `out_dir` (feasibility of the invariants, disk space)."""
        return preflight.input_check(self.schemas, {n: r.allocation for n, r in self.releases.items()},
                                     out_dir=out_dir, table_columns=table_widths(self.tables, self.schemas),
                                     pl94171=self.spec.pl94171)

    def read_inputs(self, out_dir: Path | None = None) -> Confidential:
        """Read and validate the inputs whole (das.driver.inputs.read_partition). With `out_dir`, the input
        preflight runs too (feasibility of the invariants, disk space): everything here happens before any
        noise is drawn."""
        t0 = time.perf_counter()
        logger.info(f"reading and checking the inputs ({self.spec.persons_path.name}, {self.spec.units_path.name})")
        confidential = read_partition(self.reader(), self.spec.persons_path, self.spec.units_path,
                                      preflight=None if out_dir is None else self.preflight(out_dir)).confidential
        self.timings["read_inputs"] = time.perf_counter() - t0
        if confidential.spine_record is not None:
            spine = confidential.geography
            logger.info(f"{self.spec.spine} spine: {spine.n_units(recut_level(spine.levels)):,} units at "
                        f"{recut_level(spine.levels)} for the areas {', '.join(self.spec.areas)}")
        logger.info(f"read {int(confidential.histograms['persons'].sum()):,} persons in {confidential.n_blocks:,} "
                    f"blocks ({self.timings['read_inputs']:.1f} s)")
        return confidential

    def charge(self) -> None:
        """Charge each release's whole plan to an exact accountant before any draw: a plan that would overspend, or
        measure a (level, query) twice, or spend other than its certified rho stops here (RunError)."""
        for name, r in self.releases.items():
            accountant = PrivacyAccountant.for_allocation(r.allocation)  # refuses anything outside the plan
            charge(accountant, r.allocation, self.spec.levels)
            if accountant.spent != r.allocation.rho:
                raise RunError(f"{name}: planned rho {accountant.spent} differs from the certified {r.allocation.rho}")

    def measure(self, confidential: Confidential, target: Target) -> None:
        """Measure every release of inputs held in memory into target.nmf_dir, the plan charged first (what a
        run's partitions do, das.driver.states.measure_partition, with the driver's charge).

        Levels and chunks already committed (an interrupted run) are reused, never drawn again;
        target.report (if given) receives, per release and level, what was reused and what was drawn.
        """
        self.charge()
        t0 = time.perf_counter()
        report = measure_releases({n: r.measured for n, r in self.releases.items()}, confidential, rng=self.rng,
                                  target=replace(target, metadata=self.metadata()))
        if target.report is not None:
            target.report.update(report)
        self.timings["measure"] = time.perf_counter() - t0

    def engine_options(self, *, workers: int = 1, progress: bool = False, executor=None,
                       checkpoint_dir: Path | None = None) -> EngineOptions:
        """The post-processing settings of the spec (solver, rounding, passes), for this machine."""
        return EngineOptions(workers=workers, solver=self.spec.solver, rounding=self.spec.rounding,
                             progress=progress, passes=self.spec.passes, passes_by_level=self.spec.passes_by_level,
                             executor=executor, checkpoint_dir=checkpoint_dir)

    def postprocess(self, confidential: Confidential, nmf_dir: Path, options: EngineOptions,
                    only: tuple[str, ...] | None = None) -> tuple[dict, dict[str, list[LevelReport]]]:
        """TopDown for every release (or those in `only`) from the NMF: block histograms and level reports.
        Persons come first: their household persons bound the units release."""
        invariants, solved, reports = confidential.invariants, {}, {}
        for name, r in self.releases.items():
            if only is not None and name not in only:
                continue
            t0 = time.perf_counter()
            if name == "units":
                invariants = replace(invariants, household_persons=household_persons(self.schemas["persons"],
                                                                                      solved["persons"]))
            solved[name], reports[name] = postprocess(name, r.schema, confidential.geography, invariants,
                                                      nmf_dir=nmf_dir, options=options)
            self.timings[f"postprocess_{name}"] = seconds = time.perf_counter() - t0
            # levels overlap (a batch starts when its parents are solved): when each level was complete
            done_at = ", ".join(f"{lr.level} {(lr.span or (0, lr.seconds))[1]:.1f}" for lr in reports[name])
            logger.info(f"post-processed {name} ({seconds:.1f} s; each level complete at: {done_at} s)")
        return solved, reports
