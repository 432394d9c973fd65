"""`das postprocess BUNDLE --out DIR`: a TopDown release's post-processing done again from its public files alone.

It reads the bundle's manifest (its published spec pins the schemas, strategies and tables; its certificates;
the population totals it publishes), its NMF, its invariants per block (invariants.parquet) and its spine if it
has one; no confidential input and no operator file. Post-processing draws no noise and is deterministic given
those, so for a release made by the same code the MDF and tables come out as the published ones (`das validate
--reproduce` checks that), and an NMF release (`das measure`, or a run stopped in post-processing, published)
is finished without its input. The new release holds the NMF as it was published, names the manifest it was
post-processed from (`postprocessed_from`), and is validated and signed as `das run`'s releases are.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import time
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import tomli_w

from das.core import atomic
from das.core.errors import RunError, SpecError
from das.driver import preflight
from das.driver.inputs import Confidential
from das.driver.pipeline import Pipeline, ReleasePlan, code_version
from das.driver.run import RunOptions, RunResult, completion, log_levels
from das.driver.runspec import DICT_SPEC, ReleaseSpec, RunSpec, load_run_spec
from das.frame import outdir
from das.frame.checkpoint import file_sha256
from das.frame.lifecycle import ReleaseFrame, check_out_dir, complete, holds, output_plan, release_valid
from das.frame.manifest import Manifest
from das.frame.records import Counts, EngineRecord, RunDirError
from das.frame.rundir import RunDir
from das.frame.summary import render_summary
from das.io.invariants import read_block_invariants
from das.model.geography import Geography
from das.model.rules import Invariants
from das.model.specfile import load_toml
from das.model.spine import from_table
from das.privacy.accounting import allocate, certificate

logger = logging.getLogger(__name__)

__all__ = ["Published", "Reproduction", "Settings", "postprocess", "public_facts", "read_published", "read_settings",
           "reproduce"]


@dataclass(frozen=True)
class _Replayed:
    """The randomness of a post-processing: none is drawn; privacy as the NMF's noise was drawn."""

    private: bool


@dataclass(frozen=True)
class Published:
    """What das postprocess reads of a release: its manifest, its pipeline as the published spec pins it, and the
    public facts the post-processing holds (geography on its spine, invariants per block and population totals)."""

    source: RunDir
    manifest: Manifest
    pipeline: Pipeline
    facts: Confidential  # no true counts: the geography and invariants only
    nmf: tuple[str, ...]  # the NMF files, relative to the source
    settings: Settings | None = None  # post-processing settings in place of the published spec's


def _refused(bundle: RunDir, why: str) -> RunError:
    return RunError(f"cannot post-process {bundle.path}: {why}")


STOPPED = ("running", "interrupted")  # an operator's `das run` that stopped (in post-processing, if its NMF is whole)


def _manifest(bundle: RunDir) -> Manifest:
    if bundle.path.suffix == ".tar" and bundle.path.is_file():
        raise _refused(bundle, "an archive; extract it first (tar -xf) and give its directory")
    try:
        manifest = bundle.read()
    except RunDirError as e:
        raise _refused(bundle, str(e)) from None
    if manifest.mechanism is not None:
        raise _refused(bundle, f"a synthetic release (das synth --mechanism {manifest.mechanism.name}) publishes no "
                               "noisy measurements to post-process")
    stopped = manifest.status in STOPPED and bundle.is_run_directory()
    if not stopped and (manifest.status not in ("measured", "complete") or not manifest.nmf):
        raise _refused(bundle, f"its manifest is {manifest.status!r} with no NMF listed; expected a complete release, "
                               "an NMF release (das measure) or the run directory of a `das run` that stopped")
    return manifest


def _whole_levels(bundle: RunDir, manifest: Manifest) -> list[str]:
    """The NMF files, one per release and level (relative names); refused when a level is in one file per state."""
    names = []
    for release in manifest.releases():
        for level in manifest.levels:
            files = bundle.nmf_level_files(release, level)
            if any(state is not None for _, state in files):
                raise _refused(bundle, "its NMF is in one file per state (a partitioned run): das postprocess reads "
                                       "whole levels")
            if not files:
                raise _refused(bundle, f"it has no NMF file of the {release} release's {level} level: its measurement "
                                       f"did not finish; continue it with `das run --resume {bundle.path}`")
            names.append(bundle.relative(files[0][0]))
    return names


def _checked_files(bundle: RunDir, manifest: Manifest) -> tuple[str, ...]:
    """The NMF files read (relative names). A release's are the ones its manifest lists, unchanged (their SHA-256),
    as are its invariants and spine; a stopped run lists none yet: its files are the operator's own, as it left them."""
    wanted = [bundle.relative(bundle.block_invariants)] + ([bundle.relative(bundle.spine)] if manifest.spine else [])
    if manifest.status in STOPPED:
        missing = [name for name in wanted if not (bundle.path / name).is_file()]
        if missing:
            raise _refused(bundle, f"{missing[0]} is missing (a run made before das wrote it beside the NMF: continue "
                                   f"it with `das run --resume {bundle.path}`)")
        return tuple(_whole_levels(bundle, manifest))
    listed = manifest.listed()
    for name in [*wanted, *manifest.nmf]:
        path = bundle.path / name
        if name not in listed:
            raise _refused(bundle, f"its manifest lists no {name}" + (
                " (a release made before das published its invariants per block: post-process it with the das "
                "that made it, or make it again)" if path == bundle.block_invariants else ""))
        if not path.is_file():
            raise _refused(bundle, f"{name} is missing")
        if file_sha256(path) != listed[name]:
            raise _refused(bundle, f"{name} is not the file its manifest lists (SHA-256 differs): it was changed")
    nmf = _whole_levels(bundle, manifest)
    if sorted(nmf) != sorted(manifest.nmf):
        raise _refused(bundle, f"its NMF files are not the ones its manifest lists ({sorted(set(nmf) ^ set(manifest.nmf))[0]})")
    return tuple(nmf)


def _spec(data: dict, source: str) -> RunSpec:
    try:
        return load_run_spec({k: v for k, v in data.items() if k != "specs"})  # pinned: read from the manifest
    except SpecError as e:
        raise SpecError(str(e).replace(DICT_SPEC, source)) from None


def _pipeline(manifest: Manifest, settings: Settings | None = None) -> Pipeline:
    """The releases as the published spec pins them (schemas, strategies, tables), their allocations and
    certificates recomputed, each equal to the published one; post-processed as the spec says, or as `settings`."""
    try:
        data = tomllib.loads(manifest.spec_text)
    except tomllib.TOMLDecodeError as e:
        raise RunError(f"the published spec (manifest spec_text) is not TOML: {e}") from None
    try:
        spec = _spec(data, "the published spec (manifest spec_text)")
    except SpecError as e:
        raise RunError(str(e)) from None
    releases = {}
    for name in ("persons", "units"):
        info, published = getattr(manifest, name), manifest.privacy.get(name)
        if info is None:
            continue
        schema, strategy = manifest.schema_of(name), manifest.strategy_of(name)
        allocation = allocate(strategy, published.rho)
        cert = certificate(strategy, allocation, published.delta, manifest.levels, schema_name=schema.name,
                           randomness_private=manifest.private)
        if cert != published:
            raise RunError(f"the {name} certificate recomputed from the published spec differs from the manifest's")
        release = getattr(spec, name) or ReleaseSpec(info.schema, info.strategy, published.rho)
        releases[name] = ReleasePlan(name, release, schema, strategy, allocation, cert)
    pipe = Pipeline(replace(spec, text=manifest.spec_text), releases, _Replayed(manifest.private), manifest.table_set())
    if pipe.public_spec()[1] != manifest.spec_sha256:
        raise RunError("the published spec (manifest spec_text) does not have the manifest's spec_sha256")
    if settings is None:
        return pipe
    other = _spec({**data, "postprocess": settings.table}, settings.source)
    preflight.check_spec(replace(other, path=Path(settings.source)), {n: r.schema for n, r in releases.items()},
                         {n: r.strategy for n, r in releases.items()}, {n: r.allocation for n, r in releases.items()})
    return replace(pipe, spec=replace(pipe.spec, solver=other.solver, rounding=other.rounding, passes=other.passes,
                                      passes_by_level=other.passes_by_level))


@dataclass(frozen=True)
class Settings:
    """Post-processing settings in place of the published spec's: a [postprocess] table (solver, rounding, passes,
    passes_by_level) and where it comes from (for messages)."""

    table: dict
    source: str

    @property
    def text(self) -> str:
        """As the new release's manifest states it (`postprocessed_with`)."""
        return tomli_w.dumps({"postprocess": self.table}, multiline_strings=True)


def read_settings(given: str | Path | Mapping) -> Settings:
    """A TOML file holding a [postprocess] table and nothing else, or the table as a dict (das.api)."""
    if isinstance(given, Mapping):
        return Settings(dict(given), "the settings dict")
    data = load_toml(Path(given))
    if set(data) != {"postprocess"}:
        raise SpecError(f"{given}: expected a [postprocess] table (solver, rounding, passes, passes_by_level) and "
                        f"nothing else; found {', '.join(sorted(data)) or 'nothing'}")
    return Settings(data["postprocess"], str(given))


def public_facts(directory: str | Path, manifest: Manifest) -> Confidential:
    """The geography (on the release's spine) and the invariants of a release's public files in `directory`: per
    block from invariants.parquet, the population totals from the manifest (no true counts: das postprocess, and
    das metrics --against)."""
    bundle = RunDir(Path(directory))
    try:
        blocks, housing_units, gq_facilities = read_block_invariants(bundle.block_invariants)
    except (ValueError, OSError) as e:
        raise RunError(f"{bundle.path}: {e}") from None
    geography = Geography.from_blocks(blocks, manifest.levels)
    totals = {}
    for level, published in manifest.invariants.total_population.items():
        units = geography.units(level).tolist()
        missing = [u for u in units if u not in published]
        if missing or len(published) != len(units):
            raise RunError(f"{bundle.path}: the manifest's {level} population totals are not those of the blocks of "
                           f"invariants.parquet (e.g. {(missing or sorted(set(published) - set(units)))[0]!r})")
        totals[level] = np.array([published[u] for u in units], dtype=np.int64)
    facts = Confidential(geography, Invariants(housing_units, gq_facilities, totals), {})
    if manifest.spine is None:
        return facts
    spine = from_table(pd.read_parquet(bundle.spine), tuple(manifest.levels))
    return facts.on_spine(spine, manifest.spine)


def read_published(bundle: str | Path, settings: str | Path | Mapping | None = None) -> Published:
    """A release's public files as das postprocess reads them, every one checked against its manifest; post-processed
    with `settings` (read_settings) or, when it states them, the settings the release was post-processed with."""
    source = RunDir(Path(bundle))
    manifest = _manifest(source)
    nmf = _checked_files(source, manifest)
    if settings is not None:
        settings = read_settings(settings)
    elif manifest.postprocessed_with is not None:
        settings = Settings(tomllib.loads(manifest.postprocessed_with)["postprocess"], "the manifest's postprocessed_with")
    return Published(source, manifest, _pipeline(manifest, settings), public_facts(source.path, manifest), nmf, settings)


def postprocess(bundle: str | Path | Published, out: str | Path, *, settings: str | Path | Mapping | None = None,
                workers: int = 1, overwrite: bool = False, progress: bool = False,
                signing_key: Path | None = None) -> RunResult:
    """The release of `bundle`'s NMF post-processed again into `out`, from the bundle's public files alone (a bundle
    already read, `read_published`, is not read again), as its spec says or with other `settings` (a [postprocess]
    table: TopDown with other passes, solver or rounding; the manifest says so in `postprocessed_with`)."""
    t_start = time.perf_counter()
    published = bundle if isinstance(bundle, Published) else read_published(bundle, settings)
    if isinstance(bundle, Published) and settings is not None:
        chosen = read_settings(settings)
        published = replace(published, pipeline=_pipeline(published.manifest, chosen), settings=chosen)
    run_dir = RunDir(Path(out))
    earlier = check_out_dir(run_dir.path, overwrite, [published.source.path] + ([signing_key] if signing_key else []))
    pipe, manifest = published.pipeline, published.manifest
    plan = output_plan(pipe.spec, pipe.tables, pipe.metadata())
    outdir.remove_files(run_dir.path, earlier)  # a das release there, --overwrite: its own files only
    run_dir.path.mkdir(parents=True, exist_ok=True)
    for name in published.nmf:  # the noisy measurements as published: nothing is drawn
        target = run_dir.path / name
        target.parent.mkdir(parents=True, exist_ok=True)
        with atomic.replacing(target) as tmp:
            shutil.copyfile(published.source.path / name, tmp)
    opening = _opening(manifest, file_sha256(published.source.manifest_path), holds(plan, synthetic=False),
                       published.settings)
    frame = ReleaseFrame(run_dir, opening, plan, signing_key).recorded(opening)
    options = RunOptions(workers=workers, progress=progress)
    facts = published.facts
    solved, reports = pipe.postprocess(facts, run_dir.nmf_dir, pipe.engine_options(workers=workers, progress=progress))
    log_levels(reports, facts.geography)
    written = frame.write(facts.solved_release(pipe.schemas, solved))
    done = completion(written, reports, Counts(int(solved["persons"].sum()), facts.n_blocks),
                      timings={**pipe.timings, "total": time.perf_counter() - t_start},
                      engine=EngineRecord(options.engine, options.workers))
    frame = complete(frame, done)
    return RunResult(run_dir.path, frame.manifest, release_valid(frame), render_summary(frame))


def _opening(manifest: Manifest, origin: str, claims: tuple[str, ...], settings: Settings | None) -> Manifest:
    """The new release's manifest before its outputs: the published one's spec, certificates, invariants and
    randomness, this code's version, what a TopDown release claims, the manifest it comes from, and the
    post-processing settings used in place of its spec's (None: the spec's own)."""
    return manifest.but(status="running", das_version=code_version(), outputs=None, nmf=None, validation=None,
                        engine=None, levels_report=None, failsafe_events=None, counts=None, holds=claims,
                        postprocessed_from=origin, postprocessed_with=None if settings is None else settings.text)


@dataclass(frozen=True)
class Reproduction:
    """A release's files against the ones its NMF post-processes to again: those compared, those that differ."""

    compared: tuple[str, ...]
    differ: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return not self.differ


def same_content(a: Path, b: Path) -> bool:
    """Whether two release files say the same: a Parquet file's rows and columns (not its metadata, which names the
    code's version), any other file's bytes."""
    if a.suffix == ".parquet":
        first, second = (pq.read_table(p).replace_schema_metadata(None) for p in (a, b))
        return first.equals(second)
    return a.read_bytes() == b.read_bytes()


def reproduce(bundle: str | Path, *, workers: int = 1) -> Reproduction:
    """`das validate --reproduce`: the release's NMF post-processed again (into a directory of das's own, removed
    after), and every output file the manifest lists compared with the reproduction's by content."""
    published = read_published(bundle)
    with tempfile.TemporaryDirectory(prefix="das-reproduce-") as scratch:
        again = postprocess(published, Path(scratch) / "release", workers=workers)
        theirs = dict(published.manifest.outputs or {})
        compared = tuple(sorted(theirs))
        differ = tuple(name for name in compared
                       if not (again.out_dir / name).is_file()
                       or not same_content(published.source.path / name, again.out_dir / name))
    return Reproduction(compared, differ)
