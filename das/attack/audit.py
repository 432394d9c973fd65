"""The reconstruction audit: attack each chosen geounit, score against the truth, write the results.

Per geounit: the published workload's counts (from the exact truth or from a release's MDF),
RAP-Rank candidates, baseline rankings, Match-Rate@k curves against k and k/u (u = distinct
true records of the geounit), and for blocks the integer-programming certainty of the top
candidates. The truth is read only to score; logs carry aggregate figures only. The outputs hold
scores against the truth: they say they are confidential (summary.json, das-output.json,
candidates.parquet's `das.confidential`) and go to a directory of their own (das.frame.outdir).
"""

from __future__ import annotations

import json
import logging
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from das.attack import ip
from das.attack.baselines import frequency_ranking, reference_levels, spread_over_blocks
from das.attack.data import GEOCODE_DIGITS, AttackError, PersonRecords
from das.attack.rank import Candidates, expected_hits, match_rate_at, matches, rank_samples, rap_runs
from das.attack.rap import RapConfig
from das.attack.workload import build_workload, load_attack_tables
from das.core.progress import bar, step
from das.frame import outdir
from das.model.levels import BLOCK, COUNTY, TRACT

logger = logging.getLogger(__name__)

REPORT_K = (1, 5, 10, 25, 50, 100)
REPORT_FRACTIONS = (0.1, 0.25, 0.5, 0.75, 1.0)
ATTACK = outdir.Owner("das attack", "attack", ("candidates.parquet", "match_rate.csv", "match_rate.png", "certainty.csv",
                                               "summary.json", "summary.md"), confidential=True)


@dataclass(frozen=True)
class AuditOptions:
    level: str = BLOCK  # BLOCK or TRACT
    runs: int = 100
    rap: RapConfig = field(default_factory=RapConfig)
    seed: int = 0
    workers: int = 2
    min_confidence: float = 0.0
    multiset: bool = False
    baselines: tuple[str, ...] = (TRACT, COUNTY)
    ip_top: int = 50  # candidates whose certainty the IP attack decides (blocks)
    ip_max_persons: int = 60  # solution variability for blocks up to this size
    ip_time_limit: float = 20.0
    tables: str | None = None  # attack workload spec; default: the schema's name


@dataclass
class GeounitResult:
    geocode: str
    published_total: int
    true_total: int
    distinct_true: int
    n_queries: int
    rap_rmse: float
    seconds: float
    hits: dict  # method -> expected hit per ranked position (ties averaged), best candidate first
    candidates: Candidates
    matched: np.ndarray  # per RAP-Rank candidate, True when it is in the truth
    certainty: np.ndarray | None = None
    variability: ip.Variability | None = None


def auto_geounits(published: PersonRecords, level: str, count: int, rng: np.random.Generator) -> list[str]:
    """`count` geounits across the size range: nonempty ones sorted by published population,
    taken at evenly spaced ranks (smallest to largest), ties among equal sizes at random."""
    codes = published.geocodes(level)
    distinct, sizes = np.unique(codes, return_counts=True)
    if len(distinct) == 0:
        raise AttackError("the published data holds no persons: nothing to attack")
    order = np.lexsort((rng.random(len(distinct)), sizes))
    picks = np.unique(np.rint(np.linspace(0, len(distinct) - 1, min(count, len(distinct)))).astype(int))
    return sorted(distinct[order[picks]].tolist())


def _geounit_records(records: PersonRecords, level: str, geocode: str, blocks: np.ndarray | None) -> np.ndarray:
    """Levels of the geounit's records; tract attacks prepend the block (index into `blocks`, -1 outside)."""
    inside = records.within(level, geocode)
    levels = records.levels[inside]
    if blocks is None:
        return levels
    codes = records.blocks[records.block[inside]]
    position = np.searchsorted(blocks, codes)
    position = np.where((position < len(blocks)) & (blocks[np.minimum(position, len(blocks) - 1)] == codes), position, -1)
    return np.column_stack([position, levels])


def attack_geounit(geocode: str, published: PersonRecords, truth: PersonRecords, options: AuditOptions, *,
                   tables, holdout: PersonRecords | None = None) -> GeounitResult:
    """RAP-Rank, the baselines and (blocks) the IP attack on one geounit, scored against the truth."""
    t0 = time.perf_counter()
    schema = published.schema
    level = options.level
    rng = np.random.default_rng([options.seed, int(geocode)])
    blocks = None
    if level == TRACT:
        inside = published.within(level, geocode)
        blocks = np.unique(published.blocks[published.block[inside]])
    workload = build_workload(schema, tables, None if blocks is None else len(blocks))
    published_levels = _geounit_records(published, level, geocode, blocks)
    counts = workload.answers(published_levels)
    n = len(published_levels)
    true_levels = _geounit_records(truth, level, geocode, blocks)
    distinct_true = len(np.unique(true_levels, axis=0)) if len(true_levels) else 0
    candidates = Candidates(np.zeros((0, len(workload.sizes)), np.int64), np.zeros(0, np.int64),
                            np.zeros(0, np.int64), options.runs)
    # nothing published here: no candidates, every k asked for is a miss
    hits, rmse = {"rap_rank": np.zeros(0)}, float("nan")
    matched = np.zeros(0, dtype=bool)
    if n > 0:
        samples, rmses = rap_runs(workload, counts / n, n, runs=options.runs, config=options.rap,
                                  seed=int(rng.integers(2**63)), workers=options.workers)
        rmse = float(np.mean(rmses))
        candidates = rank_samples(samples, options.min_confidence, options.multiset)
        matched = matches(candidates, true_levels)
        hits["rap_rank"] = expected_hits(matched, candidates.tie)
    for scope in options.baselines:
        if level == TRACT and scope == TRACT:
            continue
        reference = reference_levels(truth, level, geocode, scope, holdout=holdout)
        ranking = frequency_ranking(reference)
        if blocks is not None:
            block_totals = np.bincount(published_levels[:, 0], minlength=len(blocks))
            ranking = spread_over_blocks(ranking, block_totals, limit=max(20 * n, 1000))
        hits[f"baseline_{scope}"] = expected_hits(matches(ranking, true_levels), ranking.tie)
    result = GeounitResult(geocode, n, len(true_levels), distinct_true, workload.n_queries, rmse, 0.0, hits,
                           candidates, matched)
    if level == BLOCK and n > 0 and options.ip_top > 0:
        solver = ip.Solver(ip.build_problem(workload, counts), options.ip_time_limit)
        first = solver.feasible()
        if first is not None:
            result.certainty = ip.certainty(solver, candidates.records[:options.ip_top], first)
            if n <= options.ip_max_persons:
                result.variability = ip.variability(solver, first)
    result.seconds = time.perf_counter() - t0
    return result


def check_geounits(geounits: list[str], level: str) -> None:
    """AttackError unless every geocode is one of `level` (its digits, and digits only): das attack checks
    --geounits so before it reads anything or claims its output directory."""
    for geocode in geounits:
        if len(geocode) != GEOCODE_DIGITS[level] or not (geocode.isascii() and geocode.isdigit()):
            raise AttackError(f"geounit {geocode!r}: expected a {GEOCODE_DIGITS[level]}-digit {level} geocode")


def run_audit(truth: PersonRecords, published: PersonRecords, geounits: list[str], options: AuditOptions, *,
              holdout: PersonRecords | None = None) -> list[GeounitResult]:
    """Every geounit attacked and scored, in order; a progress bar (a terminal) or a line per geounit (logging)."""
    tables = load_attack_tables(options.tables or published.schema.name)
    check_geounits(geounits, options.level)
    results = []
    with bar(total=len(geounits), desc=f"{options.level}s attacked", unit=options.level) as progress:
        for geocode in geounits:
            r = attack_geounit(geocode, published, truth, options, tables=tables, holdout=holdout)
            rates = ", ".join(f"{m} {match_rate_at(h, max(1, r.distinct_true)):.2f}" for m, h in r.hits.items())
            step(progress, logger, f"{options.level} {geocode}: {r.published_total} published persons, "
                                   f"{r.n_queries} queries, {r.seconds:.1f} s; Match-Rate@u: {rates}")
            results.append(r)
    return results


# ---------------------------------------------------------------------------------------------
# Scores and outputs


def pooled_hits(results: list[GeounitResult], method: str, k_of) -> tuple[float, int]:
    """Match-Rate's one definition, pooled over geounits: (expected hits among the top k candidates, k asked), summed
    over the geounits `method` ranked, k = k_of(geounit) (None: that geounit left out). Rate = hits / asked."""
    hits, asked = 0.0, 0
    for r in results:
        k = k_of(r) if method in r.hits else None
        if k is not None:
            hits += float(r.hits[method][:k].sum())
            asked += k
    return hits, asked


def k_at_fraction(fraction: float):
    """k of a geounit at k/u = fraction: at least 1; None (left out) for a geounit of no true records."""
    return lambda r: max(1, math.ceil(fraction * r.distinct_true)) if r.distinct_true else None


def pooled_rates(results: list[GeounitResult]) -> dict:
    """Per method: Match-Rate pooled over geounits (`pooled_hits`) at each k and each k/u (None: nothing asked)."""
    def rate(hits: float, asked: int) -> float | None:
        return hits / asked if asked else None

    methods = sorted({m for r in results for m in r.hits})
    return {m: {"k": {str(k): rate(*pooled_hits(results, m, lambda r, k=k: k)) for k in REPORT_K},
                "k_over_u": {str(f): rate(*pooled_hits(results, m, k_at_fraction(f))) for f in REPORT_FRACTIONS}}
            for m in methods}


def curves_frame(results: list[GeounitResult]) -> pd.DataFrame:
    """Long table: geounit, method, k, k/u, Match-Rate@k, for k up to twice the largest geounit's
    population (the same k for every geounit; missing candidates are misses)."""
    frames = []
    k_max = max([max(2 * r.published_total, 2 * r.distinct_true) for r in results] + [10])
    for r in results:
        for m, h in r.hits.items():
            k = np.arange(1, k_max + 1)
            padded = np.zeros(k_max, dtype=float)
            padded[:min(len(h), k_max)] = h[:k_max]
            frames.append(pd.DataFrame({
                "geocode": r.geocode, "method": m, "k": k,
                "k_over_u": k / r.distinct_true if r.distinct_true else np.nan,
                "match_rate": np.cumsum(padded) / k}))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(
        columns=["geocode", "method", "k", "k_over_u", "match_rate"])


def candidates_frame(results: list[GeounitResult], published: PersonRecords, level: str) -> pd.DataFrame:
    """The ranked RAP-Rank candidates with input codes, frequency, confidence, match, IP certainty."""
    schema = published.schema
    frames = []
    for r in results:
        c = r.candidates
        if len(c) == 0:
            continue
        frame = pd.DataFrame({"geocode": r.geocode, "rank": np.arange(1, len(c) + 1)})
        offset = 0
        if level == TRACT:
            blocks = np.unique(published.blocks[published.block[published.within(level, r.geocode)]])
            frame[BLOCK] = blocks[c.records[:, 0]]
            offset = 1
        for a, attribute in enumerate(schema.attributes):
            frame[attribute.column] = np.asarray(attribute.codes, dtype=object)[c.records[:, a + offset]]
        frame["count"] = c.count
        frame["confidence"] = c.confidence
        if c.copy is not None:
            frame["copy"] = c.copy
        frame["matched"] = r.matched
        if r.certainty is not None:
            certain = np.full(len(c), -2, dtype=np.int64)  # -2: not decided (beyond the top)
            certain[:len(r.certainty)] = r.certainty
            frame["ip_min_count"] = certain
        frames.append(frame)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def _pooled_curve(results: list[GeounitResult], method: str, k_ofs: list) -> tuple[np.ndarray, np.ndarray]:
    """(hits, asked) pooled over the geounits (`pooled_hits`) at each k rule of `k_ofs`: a curve's points."""
    points = np.array([pooled_hits(results, method, k_of) for k_of in k_ofs], dtype=float).reshape(-1, 2)
    return points[:, 0], points[:, 1]


def _plot(results: list[GeounitResult], path: Path, title: str) -> None:
    """Match-Rate@k against k and against k/u, pooled over the geounits attacked (the summary's and AttackResult's
    definition), with a band of the Wilson interval at z = 2 over the candidates asked (honest for one geounit),
    each method in its das.research.series colour and style, named as a reader names it, with n."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from das.research import series
    from das.research.figures import fit_text, wilson, wilson_note

    fig, axes = plt.subplots(1, 2, figsize=(10.4, 4.2), layout="constrained")
    k_max = max([max(2 * r.published_total, 2 * r.distinct_true) for r in results] + [10])
    ks = np.arange(1, k_max + 1)
    fractions = np.union1d(np.linspace(0.02, 2.0, 100), REPORT_FRACTIONS)
    for method in sorted({m for r in results for m in r.hits}, key=lambda m: (m != "rap_rank", m)):
        n = sum(method in r.hits for r in results)
        style = {"color": series.color(method), "ls": series.line(method), "lw": 1.8,
                 "label": f"{series.label(method)} (n = {n} geounit{'s' if n != 1 else ''})"}
        for ax, x, k_ofs in ((axes[0], ks, [lambda r, k=k: int(k) for k in ks]),
                             (axes[1], fractions, [k_at_fraction(f) for f in fractions])):
            hits, asked = _pooled_curve(results, method, k_ofs)
            shown = asked > 0
            if not shown.any():
                continue
            low, high = wilson(hits[shown], asked[shown])
            ax.plot(x[shown], hits[shown] / asked[shown], **style)
            ax.fill_between(x[shown], low, high, color=series.color(method), alpha=0.15, lw=0)
    axes[0].set(xscale="log", xlabel="k (top candidates asked for, log scale)",
                ylabel="Match-Rate@k (pooled: hits / candidates asked)")
    axes[1].set(xlabel="k / u (u = distinct true records of the geounit)",
                ylabel="Match-Rate@k (pooled: hits / candidates asked)")
    for ax in axes:
        ax.set_ylim(0, 1.02)
        ax.grid(alpha=0.3)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncol=min(len(labels), 3), fontsize=8, frameon=False)
    fig.suptitle(f"{title}, pooled over the geounits\n{wilson_note('the candidates asked')}", fontsize=10)
    fit_text(fig)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_outputs(out_dir: Path, results: list[GeounitResult], published: PersonRecords, options: AuditOptions, *,
                  source: str, seconds: float) -> dict:

    """candidates.parquet, match_rate.csv/.png, certainty.csv, summary.json/.md into `out_dir`."""
    out_dir.mkdir(parents=True, exist_ok=True)
    candidates = pa.Table.from_pandas(candidates_frame(results, published, options.level), preserve_index=False)
    pq.write_table(outdir.mark_confidential(candidates), out_dir / "candidates.parquet")
    curves = curves_frame(results)
    curves.to_csv(out_dir / "match_rate.csv", index=False)
    _plot(results, out_dir / "match_rate.png", f"Match-Rate@k, {options.level} attack on {source}")
    rows = []
    for r in results:
        v = r.variability
        c = r.certainty if r.certainty is not None else np.zeros(0, np.int64)
        m = r.matched[:len(c)]
        rows.append({"geocode": r.geocode, "published_total": r.published_total,
                     "candidates_checked": len(c), "certain": int((c >= 1).sum()),
                     "certain_and_matched": int(((c >= 1) & m).sum()), "unproven": int((c < 0).sum()),
                     "ip_variables": None if v is None else v.n_variables,
                     "solution_cells": None if v is None else v.support,
                     "certain_records": None if v is None else v.certain_records,
                     "unique_solution": None if v is None else v.unique})
    pd.DataFrame(rows).to_csv(out_dir / "certainty.csv", index=False)
    summary = {
        "confidential": True, "notice": outdir.CONFIDENTIAL_MARK,
        "published": source, "schema": published.schema.name, "level": options.level,
        "options": {**{k: v for k, v in asdict(options).items() if k != "rap"}, "rap": asdict(options.rap)},
        "seconds": round(seconds, 1),
        "geounits": [{"geocode": r.geocode, "published_total": r.published_total, "true_total": r.true_total,
                      "distinct_true": r.distinct_true, "queries": r.n_queries, "candidates": len(r.candidates),
                      "rap_rmse": None if math.isnan(r.rap_rmse) else r.rap_rmse,
                      "seconds": round(r.seconds, 1)} for r in results],
        "match_rate": pooled_rates(results),
        "certainty": rows,
    }
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=2, default=_json_default) + "\n")
    (out_dir / "summary.md").write_text(summary_markdown(summary))
    return summary


def _json_default(value):
    if isinstance(value, (np.integer, np.bool_)):
        return value.item()
    if isinstance(value, np.floating):
        return float(value)
    if isinstance(value, tuple):
        return list(value)
    raise TypeError(type(value))


def summary_markdown(summary: dict) -> str:
    """The summary as Markdown: what was attacked, Match-Rate tables, IP certainty."""
    lines = [f"# Reconstruction audit: {summary['level']} attack on {summary['published']}", "",
             *([f"> {summary['notice']}", ""] if summary.get("notice") else []),
             f"Schema `{summary['schema']}`, {len(summary['geounits'])} geounits, "
             f"{summary['options']['runs']} RAP runs each (K = {summary['options']['rap']['n_relaxed']}, "
             f"{summary['options']['rap']['steps']} steps), {summary['seconds']} s.", "",
             "Match-Rate pooled over geounits (hits among the top k candidates / k asked; u = distinct true "
             "records of a geounit).", ""]
    rates = summary["match_rate"]
    if rates:
        fr = list(next(iter(rates.values()))["k_over_u"])
        ks = list(next(iter(rates.values()))["k"])
        lines += ["| method | " + " | ".join(f"k/u={f}" for f in fr) + " | " + " | ".join(f"k={k}" for k in ks) + " |",
                  "|---" * (1 + len(fr) + len(ks)) + "|"]
        for m, v in rates.items():
            cells = [v["k_over_u"][f] for f in fr] + [v["k"][k] for k in ks]
            lines.append(f"| {m} | " + " | ".join("-" if c is None else f"{c:.3f}" for c in cells) + " |")
    lines += ["", "| geounit | published persons | distinct true records | queries | RAP rmse | s |", "|---|---|---|---|---|---|"]
    for g in summary["geounits"]:
        lines.append(f"| {g['geocode']} | {g['published_total']} | {g['distinct_true']} | {g['queries']} | "
                     f"{'-' if g['rap_rmse'] is None else format(g['rap_rmse'], '.4f')} | {g['seconds']} |")
    cert = [c for c in summary["certainty"] if c["candidates_checked"]]
    if cert:
        lines += ["", "Integer programming: of the top candidates checked, those present in every solution "
                  "(certain), and for small blocks whether the published tables have one solution.", "",
                  "| geounit | checked | certain | certain and true | unique solution | records in every solution |",
                  "|---|---|---|---|---|---|"]
        for c in cert:
            lines.append(f"| {c['geocode']} | {c['candidates_checked']} | {c['certain']} | {c['certain_and_matched']} | "
                         f"{'-' if c['unique_solution'] is None else c['unique_solution']} | "
                         f"{'-' if c['certain_records'] is None else c['certain_records']} |")
    return "\n".join(lines) + "\n"
