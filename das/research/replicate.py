"""Replicate studies: many independent noise draws on the same input, each post-processed and
scored against the truth, kept compactly.

`das replicate SPEC --runs N --out DIR [--rho R,... | --eps E,... --delta D] [--estimators topdown,noisy,wls]`
writes
  DIR/study.json           what was run (spec, budgets: each exact rho and its eps at delta, seeds or OS
                           randomness, code version)
  DIR/parts/*.parquet      one stats file and one errors file per (budget, replicate), atomic;
                           a rerun of the same study skips the parts already written
  DIR/stats.parquet        sufficient statistics per (rho, replicate, estimator, level, query, bin)
  DIR/errors.parquet       per-geounit estimates and truth for the `keep` queries (default total)
  DIR/metrics.parquet/.md  metrics pooled over replicates, and the bias test across replicates
  DIR/areas.parquet        total population off the spine (area files, or synthetic districts) beside
                           the spine's levels; DIR/composition.parquet: bias by block composition
                           (das.research.offspine, which also writes DIR/blocks.parquet)
Every output is computed against the confidential truth: it is research output, not a release, and
says so (study.json, das-output.json, each Parquet file's `das.confidential`). The directory is the
study's own (das.frame.outdir): a rerun of the same study continues it, another study is refused unless
--overwrite, which deletes only the study's own files (and its report, `das report DIR`).
"""

from __future__ import annotations

import json
import logging
import shutil
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field
from fractions import Fraction
from multiprocessing import get_context
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import scipy.sparse as sp

from das.core import arguments, atomic
from das.core.errors import SpecError, StudyError, option
from das.core.executors import limit_threads
from das.core.progress import bar, step
from das.driver import preflight
from das.driver.pipeline import Pipeline, ReleasePlan, code_version
from das.driver.runspec import Budget, load_run_spec
from das.frame import outdir
from das.frame.lifecycle import protected_paths
from das.frame.rundir import nmf_level_path
from das.io import nmf
from das.model.geography import Geography
from das.model.levels import BLOCK
from das.model.rules import Invariants
from das.model.schema import Schema, parse_query_name
from das.privacy.accounting import PrivacyAccountant, eps_for_delta, rho_for_eps
from das.privacy.certificate import delta_text
from das.privacy.randomness import make_random_source
from das.privacy.strategy import parse_fraction
from das.research import offspine
from das.research.estimators import (
    DEFAULT_ESTIMATORS,
    ESTIMATORS,
    LevelInput,
    answers,
    estimator_problem,
    from_nmf,
    unknown_estimators,
)
from das.research.metrics import SIZE_BINS, bias_table, combine, error_stats, markdown_table, metrics
from das.topdown.engine import postprocess
from das.topdown.measure import Target, measure_release

logger = logging.getLogger(__name__)
RELEASE = "persons"
DEFAULT_QUERIES = ("total", "hhgq", "hispanic x cenrace", "votingage x hispanic x cenrace")
CONFIDENTIAL = ("Research output computed against the confidential input: it holds true counts "
                "and errors, is NOT a privacy-protected release, and must stay with the data owner.")
BIAS_COLUMNS = ["rho", "query", "level", "estimator", "bin", "replicates", "mean_error", "se", "t", "p"]
# The files of a study or metrics directory (parts in progress, a replicate's NMF while it is scored)
STUDY_FILES = ("study.json", "stats.parquet", "errors.parquet", "metrics.parquet", "bias.parquet", "metrics.md",
               "areas.parquet", "composition.parquet", "blocks.parquet", "parts/stats-rho*-rep*.parquet",
               "parts/errors-rho*-rep*.parquet", "parts/areas-rho*-rep*.parquet", "parts/composition-rho*-rep*.parquet",
               "parts/rep[0-9]*-*/*", "*.partial")
WITH_REPORT = (("report", "das report"),)  # `das report DIR` writes DIR/report: part of the study
STUDY = outdir.Owner("das replicate", "study", STUDY_FILES, confidential=True, nested=WITH_REPORT)


@dataclass(frozen=True)
class Study:
    """What a replicate study runs: one spec, budgets, replicates per budget, estimators, queries."""

    spec: str  # a shipped name or a path; or what a spec held in memory is called (das.api: a dict, DataFrames)
    rhos: tuple[str, ...] = ("spec",)  # exact fractions as text; "spec" = the spec's own budget
    eps: tuple[str, ...] = ()  # or budgets as eps at `delta` (exact text): each the largest rho certified within it
    delta: str | None = None  # exact text; None: the spec's [privacy] delta
    runs: int = 20
    estimators: tuple[str, ...] = DEFAULT_ESTIMATORS  # names in das.research.estimators.ESTIMATORS
    queries: tuple[str, ...] = DEFAULT_QUERIES
    keep: tuple[str, ...] = ("total",)  # queries whose per-geounit estimates are kept
    seed: int | None = None  # None: OS CSPRNG noise
    areas: tuple[tuple[str, str], ...] = ()  # (type, area file); none: synthetic districts (das.research.offspine)
    inputs_sha256: str | None = None  # a spec held in memory: the digest of its text and inputs (das.api.inputs)

    def check(self) -> None:
        if problem := unknown_estimators(self.estimators):
            raise StudyError(problem)
        arguments.count(self.runs, "runs")  # das.core.arguments: the rule of the API and the command line alike
        if not set(self.keep) <= set(self.queries):
            raise StudyError(f"kept queries {sorted(set(self.keep) - set(self.queries))} are not among the scored queries")
        for r in self.rhos:
            if r != "spec" and parse_fraction(r, option("rho", python="rho")) <= 0:
                raise StudyError(f"{option('rho')} must be positive, not {r}")
        if self.eps and self.rhos != ("spec",):
            raise StudyError(f"{option('rho')} and {option('eps')} both set the budgets to sweep: give one")
        for e in self.eps:
            if parse_fraction(e, option("eps", python="eps")) <= 0:
                raise StudyError(f"{option('eps')} must be positive, not {e}")
        if self.delta is not None and not 0 < parse_fraction(self.delta, option("delta", python="delta")) < 1:
            raise StudyError(f"{option('delta')} must be strictly between 0 and 1, not {self.delta}")
        check_areas(self.areas)

    def budgets(self, spec_delta: Fraction) -> tuple[str, ...]:
        """The budgets swept, as exact rho text ("spec": the spec's own): `rhos`, or for each eps the largest rho
        certified within it at the study's delta (default `spec_delta`), as `das run --eps --delta` spends."""
        if not self.eps:
            return self.rhos
        delta = spec_delta if self.delta is None else Fraction(self.delta)
        return tuple(str(rho_for_eps(Fraction(e), delta)) for e in self.eps)


def check_areas(areas) -> None:
    """Refuse area types that are no names, repeat, or name a level of the spine (StudyError, before any work)."""
    types = [t for t, _ in areas]
    repeated = sorted({t for t in types if types.count(t) > 1})
    if repeated:
        raise StudyError(f"{option('areas')} gives area type {repeated[0]!r} twice; give each type one file")
    problem = offspine.area_type_problem(types)
    if problem:
        raise StudyError(f"{option('areas')}: {problem}")


@dataclass
class Context:
    """The confidential input of a study, read once per process."""

    pipeline: Pipeline
    schema: Schema
    geography: Geography
    invariants: Invariants
    blocks: sp.csr_matrix  # true block histograms
    truth: dict = field(default_factory=dict)  # (level, query) -> true answers
    groups: offspine.BlockGroups | None = None  # areas off the spine and composition, scored at the block level

    def true_answers(self, level: str, query: str) -> np.ndarray:
        if (level, query) not in self.truth:
            self.truth[level, query] = answers(self.schema, self.geography.aggregate(self.blocks, level), query)
        return self.truth[level, query]


def load_context(spec_path, seed: int | None, *, areas=(), delta: str | None = None) -> Context:
    """The study's confidential input, with its blocks' areas (`areas`: (type, file) pairs) and composition;
    `delta` (exact text) over the spec's."""
    budget = None if delta is None else Budget(delta=Fraction(delta))
    pipe = Pipeline.prepare(spec_path, seed, allow_large_rho=True, budget=budget)  # the cap: replicate_study's, first
    confidential = pipe.read_inputs()
    ctx = Context(pipe, pipe.schemas[RELEASE], confidential.geography, confidential.invariants,
                  confidential.histograms[RELEASE].tocsr())
    return with_groups(ctx, areas)


def with_groups(ctx: Context, areas=()) -> Context:
    """The context with its blocks' areas off the spine (area files, or synthetic districts) and composition, of
    the counts scored against (a fractional reference's at 0 where it is negative: das metrics --against)."""
    counts = ctx.blocks if ctx.blocks.nnz == 0 or ctx.blocks.data.min() >= 0 else ctx.blocks.maximum(0)
    ctx.groups = offspine.block_groups(ctx.schema, ctx.geography.blocks, counts, paths=dict(areas))
    return ctx


@dataclass(frozen=True)
class Scores:
    """One draw of noise scored: stats and kept errors of the spine, and stats of areas and composition."""

    stats: pd.DataFrame
    errors: pd.DataFrame
    areas: pd.DataFrame
    composition: pd.DataFrame


def scored_queries(schema: Schema, queries) -> tuple[str, ...]:
    """The queries the schema has (a default query the schema lacks is dropped)."""
    kept = []
    for q in queries:
        try:
            parse_query_name(schema, q)
            kept.append(q)
        except SpecError:
            if q not in DEFAULT_QUERIES:
                raise
    return tuple(kept)


def _counts(values: np.ndarray) -> np.ndarray:
    """True counts as int64; a fractional reference (das metrics --against an estimate) as it is."""
    return values.astype(np.int64) if np.array_equal(values, np.rint(values)) else values


def _frames(ctx: Context, estimator: str, level: str, estimates: dict, *, keep):
    """Stats rows and kept per-geounit rows for one estimator at one level."""
    stats, errors = [], []
    for query, est in estimates.items():
        truth = ctx.true_answers(level, query)
        s = error_stats(est, truth)
        stats.append(s.assign(estimator=estimator, level=level, query=query))
        if query in keep:
            units, cells = np.indices(truth.shape)
            errors.append(pd.DataFrame({
                "estimator": estimator, "level": level, "query": query,
                "unit": units.ravel().astype(np.int32), "cell": cells.ravel().astype(np.int32),
                "truth": _counts(truth.ravel()), "estimate": np.asarray(est, np.float64).ravel(),
            }))
    return stats, errors


def score(ctx: Context, nmf_dir: Path | None, topdown_blocks, *, estimators, queries, keep, tags: dict) -> Scores:
    """Every estimator, level and query of one draw of noise scored; and, when the context groups blocks
    (`ctx.groups`), the areas off the spine and the composition, from each estimator's block totals."""
    stats, errors, block_totals = [], [], {}
    geography = ctx.geography
    carried = dict.fromkeys(estimators)  # what each estimator carries down from the level above
    for level in geography.levels:
        noisy = None
        if nmf_dir is not None and from_nmf(estimators):
            noisy = nmf.read_level(nmf_level_path(nmf_dir, RELEASE, level), geography.units(level))
        data = LevelInput(ctx.schema, geography, ctx.invariants, level, noisy, topdown_blocks)
        for estimator in estimators:
            found, carried[estimator] = ESTIMATORS[estimator].estimate(data, carried[estimator])
            s, e = _frames(ctx, estimator, level, {q: a for q in queries if (a := found(q)) is not None}, keep=keep)
            stats += s
            errors += e
            # each estimator's total population per block (the raw noisy one only where a block total was measured)
            if level == BLOCK and ctx.groups is not None and (total := found("total")) is not None:
                block_totals[estimator] = total[:, 0]
        del noisy, data
    stats = pd.concat(stats, ignore_index=True).assign(**tags)
    errors = pd.concat(errors, ignore_index=True).assign(**tags) if errors else pd.DataFrame()
    areas = composition = pd.DataFrame()
    if block_totals:
        truth = ctx.true_answers(BLOCK, "total")[:, 0]
        areas, composition = offspine.score_blocks(ctx.groups, truth, block_totals, tags)
    return Scores(stats, errors, areas, composition)


def plan_for_rho(ctx: Context, rho_text: str) -> ReleasePlan:
    """The persons release planned at a study budget ("spec": the run spec's own)."""
    planned = ctx.pipeline.releases[RELEASE]
    return planned if rho_text == "spec" else ctx.pipeline.at_budget(RELEASE, parse_fraction(rho_text, "rho"))


def run_replicate(ctx: Context, study: Study, rho_text: str, replicate: int, *, work_dir: Path):
    """One draw of noise at one budget: measure, post-process, score. Returns (Scores, seconds)."""
    t0 = time.perf_counter()
    planned = plan_for_rho(ctx, rho_text)
    rho = planned.allocation.rho
    rng = make_random_source(study.seed)
    if study.seed is not None:  # a stream of its own per (budget, replicate): reproducible in any order
        rng = rng.spawn(f"replicate/{rho}/{replicate}")
    nmf_dir = Path(tempfile.mkdtemp(prefix=f"rep{replicate}-", dir=work_dir))
    try:
        measure_release(planned.measured, ctx.geography, ctx.blocks, rng=rng, target=Target(nmf_dir),
                        accountant=PrivacyAccountant.for_allocation(planned.allocation))
        topdown = None
        timings = {"measure": time.perf_counter() - t0}
        if "topdown" in study.estimators:
            topdown, _ = postprocess(RELEASE, ctx.schema, ctx.geography, ctx.invariants, nmf_dir=nmf_dir,
                                     options=ctx.pipeline.engine_options())
        timings["postprocess"] = time.perf_counter() - t0 - timings["measure"]
        queries = scored_queries(ctx.schema, study.queries)
        scores = score(ctx, nmf_dir, topdown, estimators=study.estimators, queries=queries, keep=study.keep,
                       tags={"rho": str(rho), "replicate": replicate})
        timings["total"] = time.perf_counter() - t0
        return scores, timings
    finally:
        shutil.rmtree(nmf_dir, ignore_errors=True)


def _write_parquet(frame: pd.DataFrame, path: Path) -> None:
    """A research Parquet file, marked confidential in its own metadata (das.frame.outdir)."""
    table = outdir.mark_confidential(pa.Table.from_pandas(frame, preserve_index=False))
    with atomic.replacing(path) as tmp:
        pq.write_table(table, tmp, compression="zstd")


def _part_name(rho_index: int, replicate: int, kind: str) -> str:
    return f"{kind}-rho{rho_index}-rep{replicate:04d}.parquet"


_CONTEXT: dict = {}


def _worker(args):
    """Process-pool entry: one replicate, its parts written atomically; returns timings."""
    study, rho_index, rho_text, replicate, out_dir, given = args
    key = (study.spec, study.seed, study.areas, study.delta)
    if key not in _CONTEXT:
        _CONTEXT.clear()
        _CONTEXT[key] = load_context(_spec(study, given), study.seed, areas=study.areas, delta=study.delta)
    ctx = _CONTEXT[key]
    parts = Path(out_dir) / "parts"
    scores, timings = run_replicate(ctx, study, rho_text, replicate, work_dir=parts)
    write_parts(scores, parts, rho_index=rho_index, replicate=replicate)
    return rho_index, replicate, timings


def write_parts(scores: Scores, parts: Path, *, rho_index: int, replicate: int) -> None:
    """One replicate's part files (an empty frame, none), its stats last: that file marks the replicate done."""
    for kind in ("errors", "areas", "composition", "stats"):
        frame = getattr(scores, kind)
        if kind in ("errors", "stats") or len(frame):
            _write_parquet(frame, parts / _part_name(rho_index, replicate, kind))


def _read_parts(parts: Path, kind: str) -> pd.DataFrame:
    frames = [f for p in sorted(parts.glob(f"{kind}-*.parquet")) if len(f := pd.read_parquet(p))]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def summarize(out_dir: Path) -> dict:
    """Pool the parts into stats/errors/metrics files (and areas/composition); returns the headline figures."""
    parts = out_dir / "parts"
    stats = _read_parts(parts, "stats")
    errors = _read_parts(parts, "errors")
    _write_parquet(stats, out_dir / "stats.parquet")
    if len(errors):
        _write_parquet(errors, out_dir / "errors.parquet")
    pooled = metrics(combine(stats, ["rho", "estimator", "level", "query", "bin"]))
    bias = bias_table(stats)
    _write_parquet(pooled, out_dir / "metrics.parquet")
    _write_parquet(bias, out_dir / "bias.parquet")
    areas, composition = offspine.tables(stats, _read_parts(parts, "areas"), _read_parts(parts, "composition"),
                                         levels=list(dict.fromkeys(stats["level"])))
    for name, frame in (("areas", areas), ("composition", composition)):
        if len(frame):
            _write_parquet(frame, out_dir / f"{name}.parquet")
    (out_dir / "metrics.md").write_text(render_metrics(pooled, bias, areas=areas, composition=composition))
    return {"replicates": int(stats["replicate"].nunique()), "rows": len(stats)}


def render_metrics(pooled: pd.DataFrame, bias: pd.DataFrame, *, areas: pd.DataFrame | None = None,
                   composition: pd.DataFrame | None = None) -> str:
    """Markdown: metrics over all cells ("all" bin), the bias test by size bin, and what is off the spine."""
    lines = [f"> {CONFIDENTIAL}", "", "## Metrics, pooled over replicates (all cells)", ""]
    overall = pooled[pooled["bin"] == "all"].drop(columns=["bin"])
    lines += [markdown_table(overall), "", "## Signed error by true size (mean over replicates; t = mean / se)", ""]
    table = bias[bias["bin"] != "all"].copy()
    table["bin"] = pd.Categorical(table["bin"], SIZE_BINS, ordered=True)
    table = table.sort_values(["rho", "query", "level", "estimator", "bin"])
    lines += [markdown_table(table[BIAS_COLUMNS]), ""]
    lines += offspine.render(areas if areas is not None else pd.DataFrame(),
                             composition if composition is not None else pd.DataFrame())
    return "\n".join(lines)


def _spec(study: Study, given):
    """What the study reads its spec from: the RunSpec held in memory (das.api), or the name or path it records."""
    return given if given is not None else study.spec


def replicate_study(study: Study, out_dir: str | Path, *, workers: int = 1, overwrite: bool = False,
                    allow_large_rho: bool = False, given=None) -> dict:
    """Run (or finish) a study into out_dir; returns study.json's content. Every budget above the cap
    (das.driver.preflight.MAX_RHO) needs allow_large_rho, as in every command that spends budget. `given`: the
    RunSpec itself when it is held in memory (das.api: a dict spec, DataFrames; a pool's workers are sent it)."""
    study.check()
    arguments.workers(workers)
    spec = load_run_spec(_spec(study, given), seed=study.seed)
    budgets = study.budgets(spec.delta)  # exact rho text: --eps converted at --delta
    if "spec" in budgets:
        Pipeline.prepare(spec, study.seed, allow_large_rho=allow_large_rho)  # the spec's own budget
    for r in budgets:
        if r != "spec":
            what = f"{option('eps')} (rho {r}):" if study.eps else f"{option('rho', r)}:"
            preflight.check_rho_cap(Fraction(r), allow_large_rho=allow_large_rho, what=what)
    out_dir = Path(out_dir)
    meta_path = out_dir / "study.json"
    config = json.loads(json.dumps(asdict(study)))  # as study.json holds it: lists, not tuples
    old = _read_json(meta_path) if outdir.holds(out_dir, STUDY) else {}
    same = old.get("study") == config and not overwrite  # the same study: continued
    claim = outdir.check(out_dir, STUDY, overwrite=overwrite, resume=same,
                         protected=protected_paths(spec))
    earlier = old.get("replicate_timings", []) if same else []  # timings of an earlier invocation's replicates
    ctx = load_context(spec, study.seed, areas=study.areas, delta=study.delta)  # reads and checks the input
    queries = scored_queries(ctx.schema, study.queries)
    rhos = [str(plan_for_rho(ctx, r).allocation.rho) for r in budgets]
    allocation = plan_for_rho(ctx, budgets[0]).allocation
    measured = {lv: [m.query for m in allocation.level(lv)] for lv in ctx.geography.levels}
    if reason := estimator_problem(study.estimators, ctx.schema, measured):
        raise StudyError(reason)
    meta = {
        "study": config, "rhos": rhos, "budgets": budget_record(rhos, ctx.pipeline.spec.delta),
        "queries": list(queries), "levels": list(ctx.geography.levels),
        "spec_name": ctx.pipeline.spec.name, "schema": ctx.schema.name, "das_version": code_version(),
        "randomness": "operating-system CSPRNG" if study.seed is None else f"seeded (seed {study.seed}): NOT private",
        "notice": CONFIDENTIAL, "confidential": True, "status": "running", "n_blocks": ctx.geography.n_blocks,
        "units": {lv: int(ctx.geography.n_units(lv)) for lv in ctx.geography.levels},
        "areas": dict(ctx.groups.described), "composition": ctx.groups.shares is not None,
    }
    claim.start()  # the study's own earlier files deleted (--overwrite), its record written
    (out_dir / "parts").mkdir(parents=True, exist_ok=True)
    offspine.write_blocks(ctx.geography.blocks, out_dir, _write_parquet)
    meta_path.write_text(json.dumps(meta, indent=2))
    tasks = [(study, i, r, rep, str(out_dir), given) for i, r in enumerate(budgets) for rep in range(study.runs)
             if not (out_dir / "parts" / _part_name(i, rep, "stats")).exists()]
    logger.info(f"replicate {ctx.pipeline.spec.name}: {len(rhos)} budget(s) x {study.runs} run(s), estimators "
                f"{', '.join(study.estimators)}; {len(tasks)} to run, {len(rhos) * study.runs - len(tasks)} already done")
    t0 = time.perf_counter()
    timings = list(earlier)
    with bar(total=len(tasks), desc="replicates", unit="replicate") as progress:
        for i, rep, t in _replicates(ctx, study, tasks, workers):
            timings.append({"rho": rhos[i], "replicate": rep, **t})
            step(progress, logger, f"rho {rhos[i]} replicate {rep}: {t['total']:.1f} s")
    wall = time.perf_counter() - t0
    meta.update(summarize(out_dir))
    meta.update(status="complete", wall_seconds=wall, workers=workers, replicate_timings=timings,
                replicates_run_now=len(tasks), seconds_per_replicate=(wall / len(tasks)) if tasks else None)
    meta_path.write_text(json.dumps(meta, indent=2))
    claim.finish()
    return meta


def budget_record(rhos, delta: Fraction) -> list[dict]:
    """study.json's budgets: each rho swept (exact text) with the eps it certifies at the study's delta."""
    return [{"rho": r, "eps": eps_for_delta(Fraction(r), delta), "delta": delta_text(delta)} for r in rhos]


def _replicates(ctx: Context, study: Study, tasks: list, workers: int):
    """(budget index, replicate, timings) of each task as it finishes: in this process, or on a pool of `workers`."""
    if workers <= 1:
        _CONTEXT[(study.spec, study.seed, study.areas, study.delta)] = ctx
        yield from (_worker(t) for t in tasks)
        return
    with ProcessPoolExecutor(workers, mp_context=get_context("spawn"), initializer=limit_threads) as pool:
        futures = [pool.submit(_worker, t) for t in tasks]
        yield from (future.result() for future in as_completed(futures))


def _read_json(path: Path) -> dict:
    """A JSON object das wrote earlier, or {} when it is missing or unreadable."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def rho_list(text: str | None, flag: str = "--rho") -> tuple[str, ...]:
    """--rho "1/10,1,293764/114921" (or --eps "1,2,4") -> exact fractions as text (validated)."""
    if not text:
        return ("spec",)
    values = []
    for part in text.split(","):
        value = parse_fraction(part.strip(), flag)
        if value <= 0:
            raise StudyError(f"{flag} values must be positive, not {part.strip()}")
        values.append(str(Fraction(value)))
    return tuple(values)
