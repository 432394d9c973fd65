"""`das compare`: the same input, budget and seeds through several mechanisms, side by side.

For each mechanism and seed a release is made in a child process (TopDown: `das run`; the others:
`das.mechanisms.synthesize`), timed, and its peak memory taken over the child's whole process
tree. Each release is scored against the truth by level and true-size bin (`das.research.metrics`);
TopDown's noisy measurements also give the raw noisy and the unconstrained WLS estimates of the
same draw. The reconstruction attack (`das.attack.audit`) runs on the same blocks of the first
`attack_seeds` releases of each mechanism, and once on exact tables as the unprotected reference.

    OUT/compare.json                  what was compared, blocks attacked, status
    OUT/releases/<mechanism>/seed<k>/ each release (a `das run` directory)
    OUT/parts/<mechanism>/seed<k>.*   scores, timings and attack results per release; a rerun
                                      with the same settings skips every part already written
    OUT/stats|metrics|bias|runs|attack.parquet, comparison.parquet/.md, report/
Everything is scored against the confidential input: research output, not a release, and it says
so (compare.json, das-output.json, each Parquet file's `das.confidential`). The directory is the
comparison's own (das.frame.outdir): a rerun with the same settings continues it, other settings are
refused unless --overwrite, which deletes only the comparison's own files.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import asdict, dataclass
from fractions import Fraction
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from das.core import arguments, atomic
from das.core.errors import SpecError, StudyError, option
from das.core.progress import bar, step
from das.driver import preflight
from das.frame import outdir
from das.frame.rundir import RunDir
from das.model.levels import BLOCK, COUNTY, TRACT
from das.model.specfile import toml_text
from das.privacy.certificate import fraction_text
from das.privacy.strategy import parse_fraction
from das.research import release_child
from das.research.compare_report import REPORT_FILES, build_compare_report, render_table
from das.research.estimators import DEFAULT_ESTIMATORS, ESTIMATORS, from_nmf
from das.research.metrics import bias_table, combine, metrics
from das.research.release_child import TOPDOWN
from das.research.replicate import CONFIDENTIAL, DEFAULT_QUERIES, RELEASE, score, scored_queries
from das.research.resources import run_measured

logger = logging.getLogger(__name__)
EXACT = "exact"  # the attack on exact tables: no protection, the reference an attack can reach
LEVELS = (BLOCK, TRACT, COUNTY)
BLOCK_BINS = ("0", "1-9", "10-99", "100-999")
SUMMARIES = ("stats", "metrics", "bias", "runs", "attack", "attack_rates", "comparison")  # OUT/<name>.parquet
COMPARE = outdir.Owner(
    "das compare", "comparison",
    ("compare.json", "topdown_spec.toml", "spec.toml", "inputs/*", "comparison.md", "*.partial",
     *(f"{name}.parquet" for name in SUMMARIES),
     "parts/*/seed[0-9]*.json", "parts/*/seed[0-9]*.stats.parquet", "parts/*/seed[0-9]*.attack.parquet",
     *REPORT_FILES, *(f"releases/*/seed[0-9][0-9][0-9][0-9]/{p}" for p in outdir.run_files())),
    confidential=True)


def _registry() -> dict:
    try:
        from das.mechanisms import MECHANISMS
    except ImportError:
        return {}
    return MECHANISMS


def mechanism_names() -> tuple[str, ...]:
    """TopDown and every mechanism of `das.mechanisms.MECHANISMS` that can run here."""
    return (TOPDOWN, *(name for name, m in _registry().items() if name != TOPDOWN and m.available()))


def unavailable_mechanisms() -> dict[str, str]:
    """Registered mechanisms that cannot run here, with the pip extra each needs."""
    return {name: str(m.extra) for name, m in _registry().items() if not m.available()}


@dataclass(frozen=True)
class Comparison:
    """What `das compare` runs: a spec, mechanisms, seeds 0..seeds-1, a budget and attack settings."""

    spec: str  # a shipped name or a path; or what a spec held in memory is called (das.api: a dict, DataFrames)
    mechanisms: tuple[str, ...] = (TOPDOWN,)
    seeds: int = 20
    rho: str | None = None  # an exact fraction as text; None: the spec's own budget
    attack_blocks: int = 10
    attack_seeds: int | None = None  # attack the releases of seeds 0..attack_seeds-1; None: all
    attack_runs: int = 20
    attack_relaxed: int = 300
    attack_steps: int = 300
    attack_tables: str | None = None  # attack workload spec; None: the schema's own
    queries: tuple[str, ...] = DEFAULT_QUERIES
    allow_large_rho: bool = False  # acknowledges a budget above das.driver.preflight.MAX_RHO (not a setting of the parts)
    inputs_sha256: str | None = None  # a spec held in memory: the digest of its text and inputs (das.api.inputs)

    def check(self) -> None:
        known, missing = mechanism_names(), unavailable_mechanisms()
        needs = [f"{m} (pip install 'das[{missing[m]}]')" for m in self.mechanisms if m in missing]
        if needs:
            raise StudyError(f"mechanism(s) {', '.join(needs)} cannot run without their optional extra")
        unknown = [m for m in self.mechanisms if m not in known]
        if unknown or not self.mechanisms:
            raise StudyError(f"unknown mechanism(s) {unknown}; available: {', '.join(known)}")
        arguments.count(self.seeds, "seeds")  # das.core.arguments: the rules of the API and the command line alike
        arguments.nonnegative(self.attack_blocks, "attack_blocks")
        if self.attack_seeds is not None:
            arguments.nonnegative(self.attack_seeds, "attack_seeds")
        for name in ("attack_runs", "attack_relaxed", "attack_steps"):
            arguments.count(getattr(self, name), name)
        if self.rho is not None:
            rho = parse_fraction(self.rho, option("rho", python="rho"))
            preflight.check_rho_cap(rho, allow_large_rho=self.allow_large_rho, what=f"{option('rho', self.rho)}:")

    @property
    def attacked_seeds(self) -> int:
        return self.seeds if self.attack_seeds is None else min(self.attack_seeds, self.seeds)

    def settings(self) -> dict:
        """The settings every part depends on: a rerun must keep them (mechanisms and seeds may grow)."""
        keep = ("spec", "rho", "attack_blocks", "attack_runs", "attack_relaxed", "attack_steps", "attack_tables",
                "queries", "inputs_sha256")
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(self).items() if k in keep}


# ---------------------------------------------------------------------------------------------
# Releases


def rho_spec_text(spec, rho: str | None = None, **inputs: Path) -> str:
    """The text of a copy of a run spec (a name, a path, a dict or a RunSpec) that reads the same files from
    anywhere (das.driver.runspec.portable_data; `inputs` in place of its own), with the persons budget set to
    `rho` (an `eps` it gives dropped: the rho replaces it, as --rho does in das run); read back to check it, so a
    spec it cannot be derived from is refused (StudyError) before anything is written."""
    from das.driver.runspec import load_run_spec, portable_data

    original = load_run_spec(spec)
    data = portable_data(original, **inputs)
    if rho is not None:
        persons = {k: v for k, v in (data.get("persons") or {}).items() if k not in ("rho", "eps")}
        data["persons"] = {**persons, "rho": str(Fraction(rho))}
    try:
        derived = load_run_spec(data)
    except SpecError as e:
        raise StudyError(f"{original.origin}: could not derive a spec with rho {rho}: {e}") from None
    if derived.levels != original.levels or (rho is not None and derived.persons.rho != Fraction(rho)):
        raise StudyError(f"{original.origin}: could not derive a spec with rho {rho}")
    return toml_text(data)


# ---------------------------------------------------------------------------------------------
# Scoring and attacking one release


def _write_parquet(frame: pd.DataFrame, path: Path) -> None:
    """A research Parquet file, whole or not at all (a resumed comparison trusts any part it finds), marked
    confidential in its own metadata (das.frame.outdir)."""
    with atomic.replacing(path) as tmp:
        pq.write_table(outdir.mark_confidential(pa.Table.from_pandas(frame, preserve_index=False)), tmp)


def score_release(ctx, run_dir: Path, mechanism: str, *, queries, seed: int) -> pd.DataFrame:
    """Error statistics of a release's MDF (and, for TopDown, of its NMF's noisy and WLS estimates)."""
    from das.io.microdata import block_histograms, read_records

    release = RunDir(run_dir)
    manifest = release.read()
    records = read_records(release.mdf("persons"), ctx.schema, ctx.geography.blocks)
    released = block_histograms(records, ctx.geography.n_blocks, ctx.schema.size).tocsr()
    estimators = [TOPDOWN]
    nmf_dir = None
    cert = manifest.certificate(RELEASE)
    if mechanism == TOPDOWN:
        nmf_dir = release.nmf_dir
        measured = cert.queries_by_level(ctx.geography.levels)
        estimators += [e for e in from_nmf(DEFAULT_ESTIMATORS) if ESTIMATORS[e].unsupported(ctx.schema, measured) is None]
    rho = fraction_text(cert.rho if cert.rho is not None else cert.budget)  # the budget given ((eps, delta)-DP: no rho)
    stats = score(ctx, nmf_dir, released, estimators=tuple(estimators), queries=queries, keep=(),
                  tags={"rho": rho, "replicate": seed}).stats
    stats["estimator"] = stats["estimator"].replace({TOPDOWN: mechanism})
    return stats


def attack_release(published, truth, blocks: list[str], *, options, tables) -> pd.DataFrame:
    """Per attacked block and method: expected hits among the top u (u = distinct true records) and top 10."""
    from das.attack.audit import attack_geounit

    rows = []
    for geocode in blocks:
        r = attack_geounit(geocode, published, truth, options, tables=tables)
        u = max(1, r.distinct_true)
        for method, hits in r.hits.items():
            rows.append({"geocode": geocode, "method": method, "published_total": r.published_total,
                         "true_total": r.true_total, "u": u, "hits_at_u": float(np.sum(hits[:u])),
                         "hits_at_10": float(np.sum(hits[:10])), "seconds": r.seconds})
    return pd.DataFrame(rows)


# ---------------------------------------------------------------------------------------------
# The study


def _part(out_dir: Path, mechanism: str, seed: int, kind: str) -> Path:
    return out_dir / "parts" / mechanism / f"seed{seed:04d}.{kind}"


def _open(comparison: Comparison, out_dir: Path, overwrite: bool, protected) -> tuple[outdir.Claim, dict]:
    """The claim on out_dir (das.frame.outdir) and the earlier compare.json when the same comparison is continued."""
    old = {}
    if outdir.holds(out_dir, COMPARE):
        try:
            old = json.loads((out_dir / "compare.json").read_text())
        except (OSError, ValueError):
            old = {}
    same = isinstance(old, dict) and old.get("settings") == comparison.settings() and not overwrite
    claim = outdir.check(out_dir, COMPARE, overwrite=overwrite, resume=same, protected=protected)
    return claim, (old if same else {})


@dataclass(frozen=True)
class _Work:
    """What every release and attack of a comparison shares: settings, truth, the attacked blocks."""

    comparison: Comparison
    out_dir: Path
    workers: int
    ctx: object  # das.research.replicate.Context of the truth
    queries: tuple
    spec_file: str  # what the releases read: the spec as given, or its files in the comparison's directory
    topdown_spec: str
    truth: object  # the true persons (das.attack.data)
    blocks: list
    tables: tuple
    rap: object  # das.attack.rap.RapConfig


def run_comparison(comparison: Comparison, out_dir, *, workers: int = 1, overwrite: bool = False,
                   given=None) -> dict:
    """Make, score and attack every release not yet done, then summarize; returns compare.json's content.
    `given`: the RunSpec itself when it is held in memory (das.api: a dict spec, DataFrames)."""
    from das.driver.pipeline import code_version

    work, claim, earlier, spec = _prepare(comparison, Path(out_dir), workers=workers, overwrite=overwrite, given=given)
    ctx = work.ctx
    meta = {
        "settings": comparison.settings(), "mechanisms": sorted(set(earlier.get("mechanisms", [])) | set(comparison.mechanisms)),
        "seeds": max(earlier.get("seeds", 0), comparison.seeds), "attack_blocks": work.blocks,
        "spec_name": spec.name, "schema": ctx.schema.name, "levels": list(ctx.geography.levels),
        "n_blocks": ctx.geography.n_blocks, "units": {lv: int(ctx.geography.n_units(lv)) for lv in ctx.geography.levels},
        "das_version": code_version(), "randomness": "seeded (seeds 0..N-1): NOT private", "notice": CONFIDENTIAL,
        "confidential": True, "status": "running",
    }
    (work.out_dir / "compare.json").write_text(json.dumps(meta, indent=2))
    t0 = time.perf_counter()
    failures = []
    tasks = [(m, s) for m in comparison.mechanisms for s in range(comparison.seeds)]
    progress = bar(total=len(tasks) + bool(work.blocks), desc="releases and attacks", unit="task")
    for mechanism, seed in tasks:
        said = _release_and_attack(work, mechanism, seed, failures)
        if said:
            step(progress, logger, f"{mechanism} seed {seed}: {'; '.join(said)}")
        else:
            progress.update()
    if _attack_exact(work):
        step(progress, logger, f"exact tables: attack on {len(work.blocks)} blocks")
    elif work.blocks:
        progress.update()
    progress.close()
    meta.update(status="incomplete" if failures else "complete", failures=failures, workers=workers)
    (work.out_dir / "compare.json").write_text(json.dumps(meta, indent=2))  # the report reads it
    meta.update(summarize(work.out_dir, comparison), wall_seconds_this_call=time.perf_counter() - t0)
    (work.out_dir / "compare.json").write_text(json.dumps(meta, indent=2))
    claim.finish()
    return meta


def _prepare(comparison: Comparison, out_dir: Path, *, workers, overwrite: bool, given=None):
    """The comparison checked and its directory claimed (nothing drawn yet), the truth read, the blocks chosen."""
    from das.attack.audit import auto_geounits
    from das.attack.data import read_persons
    from das.attack.rap import RapConfig
    from das.attack.workload import load_attack_tables
    from das.driver.pipeline import Pipeline
    from das.driver.runspec import load_run_spec
    from das.frame.lifecycle import protected_paths
    from das.research.evaluate import truth_context

    comparison.check()
    arguments.workers(workers)
    spec = load_run_spec(given if given is not None else comparison.spec)
    if comparison.rho is None:  # the spec's own budget, under the same cap
        Pipeline.prepare(spec, None, allow_large_rho=comparison.allow_large_rho)
    claim, earlier = _open(comparison, out_dir, overwrite, protected_paths(spec))
    ctx = truth_context(spec.persons_path, spec.units_path, spec.persons.schema, spec.levels)
    queries = scored_queries(ctx.schema, comparison.queries)
    tables = load_attack_tables(comparison.attack_tables or ctx.schema.name)  # --tables, and --rho below: refused
    rho_spec = None if comparison.rho is None else rho_spec_text(spec, comparison.rho)  # before the claim
    claim.start()  # its own earlier files deleted (--overwrite), its record written
    spec_file = str(comparison.spec) if given is None else _spec_files(spec, out_dir)
    topdown_spec = spec_file
    if rho_spec is not None:
        topdown_spec = str(out_dir / "topdown_spec.toml")
        Path(topdown_spec).write_text(rho_spec_text(spec_file, comparison.rho))
    truth = read_persons(spec.persons_path, ctx.schema)
    blocks = earlier.get("attack_blocks")
    if blocks is None:
        blocks = auto_geounits(truth, BLOCK, comparison.attack_blocks, np.random.default_rng(0)) \
            if comparison.attack_blocks else []
    rap = RapConfig(n_relaxed=comparison.attack_relaxed, steps=comparison.attack_steps)
    work = _Work(comparison, out_dir, workers, ctx, queries, spec_file, topdown_spec, truth, blocks, tables, rap)
    return work, claim, earlier, spec


def _spec_files(spec, out_dir: Path) -> str:
    """A spec held in memory (das.api: a dict, DataFrames) as files in the comparison's own directory, which its
    releases read, each in a process of its own: DIR/spec.toml and the DataFrames' CSV text as DIR/inputs/NAME.csv
    (confidential, as the directory is, and kept with it: a rerun continues from them)."""
    from das.io.tabular import InMemory

    folder = out_dir / "inputs"
    folder.mkdir(mode=0o700, exist_ok=True)
    files = {}
    for name, given in (("persons", spec.persons_path), ("units", spec.units_path)):
        if isinstance(given, InMemory):
            files[name] = folder / f"{name}.csv"
            atomic.write_bytes(files[name], given.csv)
    path = out_dir / "spec.toml"
    atomic.write_text(path, rho_spec_text(spec, **files))
    return str(path)


def _release_and_attack(work: _Work, mechanism: str, seed: int, failures: list) -> list[str]:
    """One seed of one mechanism: its release made and scored, then attacked, each unless done before;
    what was done (empty: nothing left to do, or the release failed and is recorded in `failures`)."""
    from das.attack.audit import AuditOptions

    comparison, out_dir = work.comparison, work.out_dir
    run_dir = out_dir / "releases" / mechanism / f"seed{seed:04d}"
    done = _part(out_dir, mechanism, seed, "json")
    attack_path = _part(out_dir, mechanism, seed, "attack.parquet")
    want_attack = bool(work.blocks) and seed < comparison.attacked_seeds
    said: list[str] = []
    if done.exists() and (attack_path.exists() or not want_attack):
        return said
    done.parent.mkdir(parents=True, exist_ok=True)
    if not done.exists():
        spec_for = work.topdown_spec if mechanism == TOPDOWN else work.spec_file
        measured = run_measured(release_child.command(spec_for, mechanism, run_dir, seed=seed, rho=comparison.rho,
                                                workers=work.workers, allow_large_rho=comparison.allow_large_rho))
        if measured.returncode != 0:  # recorded and skipped: a rerun tries it again
            failures.append({"mechanism": mechanism, "seed": seed, "exit": measured.returncode, "stderr": measured.stderr})
            logger.warning(f"{mechanism} seed {seed}: the release FAILED (exit {measured.returncode}): "
                           f"{measured.stderr.splitlines()[-1] if measured.stderr else ''}")
            return said
        stats = score_release(work.ctx, run_dir, mechanism, queries=work.queries, seed=seed)
        _write_parquet(stats, _part(out_dir, mechanism, seed, "stats.parquet"))
        done.write_text(json.dumps({"mechanism": mechanism, "seed": seed, "seconds": measured.seconds,
                                    "cpu_seconds": measured.cpu_seconds, "peak_tree_mb": measured.peak_tree_mb}))
        said.append(f"release {measured.seconds:.1f} s, peak {measured.peak_tree_mb:.0f} MB (process tree)")
    if want_attack and not attack_path.exists():
        from das.attack.data import read_release

        options = AuditOptions(runs=comparison.attack_runs, rap=work.rap, seed=seed, workers=work.workers, ip_top=0)
        frame = attack_release(read_release(run_dir, work.ctx.schema), work.truth, work.blocks, options=options,
                               tables=work.tables)
        _write_parquet(frame.assign(mechanism=mechanism, seed=seed), attack_path)
        said.append(f"attack on {len(work.blocks)} blocks, {frame.drop_duplicates('geocode')['seconds'].sum():.0f} s")
    return said


def _attack_exact(work: _Work) -> bool:
    """The exact tables attacked on the same blocks (once), the reference every release is read against."""
    from das.attack.audit import AuditOptions

    exact_path = _part(work.out_dir, EXACT, 0, "attack.parquet")
    if not work.blocks or exact_path.exists():
        return False
    exact_path.parent.mkdir(parents=True, exist_ok=True)
    options = AuditOptions(runs=work.comparison.attack_runs, rap=work.rap, seed=0, workers=work.workers, ip_top=0)
    frame = attack_release(work.truth, work.truth, work.blocks, options=options, tables=work.tables)
    _write_parquet(frame.assign(mechanism=EXACT, seed=0), exact_path)
    return True


# ---------------------------------------------------------------------------------------------
# Summaries


def _read_parts(out_dir: Path, pattern: str) -> pd.DataFrame:
    frames = [pd.read_parquet(p) for p in sorted((out_dir / "parts").glob(pattern))]
    frames = [f for f in frames if len(f)]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def attack_rates(attack: pd.DataFrame) -> pd.DataFrame:
    """Match-Rate pooled over attacked blocks and seeds: expected hits / candidates asked for."""
    if attack.empty:
        return pd.DataFrame(columns=["mechanism", "method", "seeds", "blocks", "rate_at_u", "rate_at_10"])
    grouped = attack.groupby(["mechanism", "method"], sort=False)
    table = grouped.agg(seeds=("seed", "nunique"), blocks=("geocode", "nunique"), hits_at_u=("hits_at_u", "sum"),
                        u=("u", "sum"), hits_at_10=("hits_at_10", "sum"), n=("u", "size")).reset_index()
    table["rate_at_u"] = table["hits_at_u"] / table["u"]
    table["rate_at_10"] = table["hits_at_10"] / (10 * table["n"])
    return table[["mechanism", "method", "seeds", "blocks", "rate_at_u", "rate_at_10"]]


def comparison_table(pooled: pd.DataFrame, runs: pd.DataFrame, rates: pd.DataFrame, mechanisms) -> pd.DataFrame:
    """One row per estimator: total-population MAE and mean signed error at block, tract, county;
    block mean signed error by true size; release time and peak memory; attack Match-Rate@u."""
    total = pooled[pooled["query"] == "total"]
    estimators = list(dict.fromkeys([*mechanisms, *[e for e in ("wls", "noisy") if e in set(total["estimator"])]]))
    if rates is not None and EXACT in set(rates["mechanism"]):
        estimators.append(EXACT)
    rows = []
    for estimator in estimators:
        row: dict = {"estimator": estimator}
        mine = total[total["estimator"] == estimator]
        for level in LEVELS:
            cell = mine[(mine["level"] == level) & (mine["bin"] == "all")]
            row[f"mae_{level}"] = float(cell["mae"].iloc[0]) if len(cell) else np.nan
            row[f"bias_{level}"] = float(cell["mean_error"].iloc[0]) if len(cell) else np.nan
        for b in BLOCK_BINS:
            cell = mine[(mine["level"] == BLOCK) & (mine["bin"] == b)]
            row[f"bias_block_{b.replace('-', '_')}"] = float(cell["mean_error"].iloc[0]) if len(cell) else np.nan
        mine_runs = runs[runs["mechanism"] == estimator] if len(runs) else runs
        row["seeds"] = int(mine_runs["seed"].nunique()) if len(mine_runs) else int(mine["seeds"].max() if len(mine) else 0)
        row["release_seconds"] = float(mine_runs["seconds"].median()) if len(mine_runs) else np.nan
        row["release_cpu_seconds"] = float(mine_runs["cpu_seconds"].median()) if len(mine_runs) else np.nan
        row["peak_tree_mb"] = float(mine_runs["peak_tree_mb"].median()) if len(mine_runs) else np.nan
        attacked = rates[rates["mechanism"] == estimator] if len(rates) else rates
        row["attack_seeds"] = int(attacked["seeds"].max()) if len(attacked) else 0
        for method in ("rap_rank", "baseline_tract", "baseline_county"):
            cell = attacked[attacked["method"] == method] if len(attacked) else attacked
            row[f"{method}_at_u"] = float(cell["rate_at_u"].iloc[0]) if len(cell) else np.nan
        rows.append(row)
    return pd.DataFrame(rows)




def summarize(out_dir: Path, comparison: Comparison) -> dict:
    """Pool the parts into the Parquet tables, comparison.parquet/.md and the report."""
    stats = _read_parts(out_dir, "*/*.stats.parquet")
    if stats.empty:  # no release was made (each failed, recorded in compare.json): nothing to pool
        return {"rows": 0, "seeds_scored": 0, "seeds_attacked": 0}
    runs = pd.DataFrame([json.loads(p.read_text()) for p in sorted((out_dir / "parts").glob("*/*.json"))])
    attack = _read_parts(out_dir, "*/*.attack.parquet")
    pooled = metrics(combine(stats, ["estimator", "level", "query", "bin"]))
    pooled = pooled.merge(stats.groupby("estimator")["replicate"].nunique().rename("seeds").reset_index(), on="estimator")
    bias = bias_table(stats)
    rates = attack_rates(attack)
    mechanisms = [m for m in mechanism_names() if m in set(runs["mechanism"])] if len(runs) else []
    table = comparison_table(pooled, runs, rates, mechanisms)
    for name, frame in zip(SUMMARIES, (stats, pooled, bias, runs, attack, rates, table)):
        _write_parquet(frame, out_dir / f"{name}.parquet")
    (out_dir / "comparison.md").write_text(render_table(table) + "\n")
    build_compare_report(out_dir)
    return {"rows": len(table), "seeds_scored": int(stats["replicate"].nunique()),
            "seeds_attacked": int(attack["seed"].nunique()) if len(attack) else 0}


def short_table(table: pd.DataFrame) -> pd.DataFrame:
    """The comparison as the terminal shows it: per estimator, MAE of total population at block, tract and county,
    the median seconds of a release and RAP-Rank's Match-Rate@u (comparison.md has every column)."""
    columns = {"estimator": "estimator", **{f"mae_{lv}": f"MAE {lv}" for lv in LEVELS},
               "release_seconds": "s/release", "rap_rank_at_u": "RAP@u"}
    return table[[c for c in columns if c in table.columns]].rename(columns=columns)
