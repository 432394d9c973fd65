"""Issue 25: das's MST, AIM and MWEM (issue 37: RAP) beside their reference implementations, at the same guarantee.

The same tables (each tract of Grand Isle VT and Perry County AL: block within the tract x hhgq x
votingage x hispanic x cenrace), the same budgets (das's rho 293764/114921 and 1/4), several seeds,
scored the same way (block total-population MAE and the tract detailed histogram's cell MAE, by
das.research's scorer, against the confidential input). The references run in virtual environments
this module creates under runs/bench_references/envs (never das dependencies):

- Private-PGM (McKenna) `mechanisms/mst.py` and `mechanisms/aim.py` at the commit of a checkout named by
  DAS_PRIVATE_PGM (a work tree, or a bare git directory whose HEAD is extracted), with its own `mbi` from
  that source, and jax/jaxlib 0.7.0, chex 0.1.90, optax 0.2.5, pandas 2.3.1 (contemporary with its
  August 2025 HEAD; newer jax and pandas break it).
- SmartNoise Synth 1.0.8 from PyPI (`MSTSynthesizer`, `AIMSynthesizer`, `MWEMSynthesizer`), installed
  without its deep-learning dependencies (opacus, torch, pac-synth: only its GAN synthesizers import
  them), with mbi >= 1.1, < 2 as it requires and the rest as pip resolves it. The versions used are
  recorded beside the table.

The same guarantee, converted explicitly. das is rho-zCDP under change-one neighbours (a Gaussian
marginal costs 1/sigma^2, squared sensitivity 2; a selection eps^2/8 with its change-one sensitivity);
the references calibrate to add/remove neighbours (a Gaussian marginal 1/(2 sigma^2); a selection with
the add/remove sensitivity). Under change-one a reference's Gaussian step costs twice its add/remove
charge and its selection four times (its scores move by twice the sensitivity it assumed, so it is
2 eps-bounded-range), within one tract or across two. So at das's rho a reference gets rho_ref with
2 g rho_ref + 4 (1 - g) rho_ref = rho, g its Gaussian share: MST g = 2/3, rho_ref = 3/8 rho; AIM
g = 9/10 + 9/100 x d/T (its one-way marginals are Gaussian only; d = 5 attributes, T = 16 d),
rho_ref = rho / (4 - 2 g). Each reference is given rho_ref through its own (eps, delta) interface: the
largest eps whose rho by its own conversion (`cdp_rho`) is at most rho_ref. SmartNoise's MWEM is pure
eps-DP (Laplace measurements, an exponential mechanism), eps/(2 T) a step for T iterations: under
change-one a measurement is 2 eps_s-DP ((2 eps_s)^2 / 2 zCDP) and a selection eps_s-bounded-range
(eps_s^2 / 8), so rho = 17 eps^2 / (32 T); it gets eps = sqrt(32 T rho / 17), T = 40 (its default for a
table of 1,000 to 10,000 records, fixed here so that it does not depend on the data). Its histogram spans the
public domain: as published, `MWEMSynthesizer.fit` sizes it from each column's smallest and largest value in
the data, a bound outside its privacy accounting (on Grand Isle every person has hhgq 0, so it modelled 248
and 192 of a tract's 2,016 detailed cells and released exact zeros in the rest: detailed MAE 0.07 and 0.11
against das's 0.09 and 0.15, one seed each). Its multiplicative-weights step is run on the measured slice
only (the same update; the published loop builds a full-size mask per slice, hours a tract on the public
domain). Both changes are in _reference_driver.py (`public_domain_mwem`).

Issue 37: das's RAP (das.mechanisms.rap) beside the authors' RAP. The reference: Amazon Science's
relaxed-adaptive-projection (the RAP++ code of Vietri et al., whose `--algorithm RAP` is Aydore et al.'s RAP) at the
commit of DAS_AMAZON_RAP (default the bare git mirror, its HEAD extracted under runs/bench_references), in its own
environment: jax/jaxlib 0.4.13, numpy 1.26.4, scipy 1.11.4, pandas 2.2.3, matplotlib (its requirements pin jax 0.2.7,
which has no Python 3.11 build; jax 0.7.0 breaks it, ENVIRONMENTS says how). Run from Python as its main.py builds RAP
(`RAPpp` with one marginal module and its RAP optimizer settings: Adam at 0.003, iterations [1], no sigmoid doubling),
adaptive, with das's rap's schedule (`rap_schedule`, read from das.mechanisms.rap: T rounds as its select epochs, K
queries a round as its top_q, the relaxed rows; now T = 10, K = 5, 1,000; a reference result is redone when das's
schedule changes). Its queries are vectors: each selected by report-noisy-max on its L1 error and measured whole. Its
workload is das's rap's, cut into such vectors: in every block, P1's total, P1 (cenrace), P2 (hispanic x cenrace), P3
and P4 (the same for votingage 18+) and P5 (hhgq), the block's table one query, and the tract's detailed histogram as
16 queries of 126 cells (one per hhgq x votingage; it pads every query to the longest, with noise on the padding, and
a step costs in proportion); das's rap selects and measures the same cells one at a time (`rap_tables`; the driver's
`ExplicitMarginals`, as its `MarginalStatistics` only builds all K-way marginals). Its n is the tract's count, which
it reads from the data and takes as public (every answer normalised by it, sensitivity 1/n, delta 1/n^2, that many
records); das's tract counts are not public (a person moving between tracts changes two), so its n is n^, the count
with the noise of das's total (variance 20/rho, rho/20 under change-one) from its own `gaussian_mechanism` (add/remove
rho/40 a tract). Its release: its own sampling of the relaxed rows (run.py's 40 records a row), of which n^ are drawn.

RAP's guarantee, converted the same way. The reference splits its rho (its eps by its own conversion at delta 1/n^2)
over T epochs, half each to a one-shot Gumbel top-K of the queries' L1 errors (scale sqrt(2 K)/n over sqrt(2 rho_e),
i.e. K picks each charged as if a score moved by sqrt 2/n) and to Gaussian noise (the same sd) on every query selected
so far (each epoch measures the whole history afresh, charged as if K queries of sensitivity sqrt 2/n). Under
change-one within a tract (n^ unchanged) a query's L1 error moves by up to 2/n, so each pick is
(4/n)/beta-bounded-range and a top-K costs twice its charge; a person is in one cell of each of the m = 7 tables, so
however long the history the measured vector moves by at most sqrt(2 m)/n, and an epoch's Gaussian costs at most m/K
of its charge: rho = (1 + m/(2K)) rho_ref. Across two tracts each tract's scores move by 1/n and its vector by
sqrt(m)/n, (1/2 + m/(2K)) rho_ref in all, plus n^'s rho/20, which is less (checked). So the reference gets rho_ref =
rho / (1 + m/(2K)): 10/17 rho at K = 5 (40/47 rho at K = 20).

Long (hours on 2 shared cores): not in the default suite. Run `scripts/bench references` (`references.rap`: RAP's
rows alone, its own figures in BENCHMARKS.md); the runs are
kept per (mechanism, implementation, fixture, rho, seed) in benchmarks/recorded/references/ (with the
repository, so a rerun anywhere does only the missing ones); DAS_REFERENCES_MECHANISMS (e.g. `mst`) runs
some mechanisms only, DAS_REFERENCES_FIXTURES (e.g. `vt_grand_isle`) and DAS_REFERENCES_RHOS (e.g. `1/4`) some
fixtures and budgets only, and each family's table (benchmarks/recorded/references.md: MST, AIM, MWEM;
references_rap.md: RAP) is rewritten when its runs were made. DAS_REFERENCES_SEEDS (default 3),
DAS_REFERENCES_ROW_SEEDS (more seeds for some rows, e.g. `aim:al_perry:1/4=6`), DAS_REFERENCES_TIMEOUT
(seconds a reference may take on one tract, default 7200).
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import subprocess
import tarfile
import time
import venv
from fractions import Fraction
from io import BytesIO
from itertools import combinations
from pathlib import Path

import numpy as np

from benchmarks._harness import Bench

ROOT = Path(__file__).resolve().parents[1]
RECORDED = ROOT / "benchmarks" / "recorded"
WORK = ROOT / "runs" / "bench_references"
DRIVER = Path(__file__).resolve().parent / "_reference_driver.py"
FIXTURES = {"vt_grand_isle": "Grand Isle VT", "al_perry": "Perry County AL"}
RUN_FIXTURES = tuple(f for f in os.environ.get("DAS_REFERENCES_FIXTURES", "").split(",") if f) or tuple(FIXTURES)
RHOS = ("293764/114921", "1/4")
RUN_RHOS = tuple(r for r in os.environ.get("DAS_REFERENCES_RHOS", "").split(",") if r) or RHOS
SEEDS = int(os.environ.get("DAS_REFERENCES_SEEDS", "3"))


def row_seeds(text: str) -> dict[tuple[str, str, str], int]:
    """DAS_REFERENCES_ROW_SEEDS: more seeds for some rows, `mechanism:fixture:rho=N` separated by `;`
    (e.g. `aim:al_perry:1/4=6`), every implementation of the row, SmartNoise's MWEM included."""
    rows = {}
    for item in filter(None, (t.strip() for t in text.split(";"))):
        key, _, seeds = item.rpartition("=")
        mechanism, fixture, rho = key.split(":", 2)
        rows[(mechanism, fixture, rho)] = int(seeds)
    return rows


ROW_SEEDS = row_seeds(os.environ.get("DAS_REFERENCES_ROW_SEEDS", ""))
RESULTS = RECORDED / "references"  # a JSON file a run, kept with the repository: any later rerun does only the missing
TIMEOUT = int(os.environ.get("DAS_REFERENCES_TIMEOUT", "7200"))
DELTA = 1e-10  # what the references' (eps, delta) interface is given beside eps; their rho is what counts
MWEM_ITERATIONS = 40
AIM_MAX_CELLS = 100_000  # das's AIM workload: cliques of up to three attributes within this many cells
IMPLEMENTATIONS = {"mst": ("das", "private_pgm", "smartnoise"), "aim": ("das", "private_pgm", "smartnoise"),
                   "mwem": ("das", "smartnoise"), "rap": ("das", "amazon_rap")}
REFERENCES = {"private_pgm": "Private-PGM", "smartnoise": "SmartNoise", "amazon_rap": "RAP reference"}  # table columns
METRICS = {"block_mae": "block MAE", "tract_detailed_mae": "tract detailed MAE",
           "workload_mean": "workload mean error", "workload_max": "workload max error", "seconds": "seconds a release"}
FAMILIES = {"references.md": ("mst", "aim", "mwem"), "references_rap.md": ("rap",)}  # a recorded file each
MECHANISMS = tuple(m for m in os.environ.get("DAS_REFERENCES_MECHANISMS", "").split(",") if m) or tuple(IMPLEMENTATIONS)
ENVIRONMENTS = {
    "private_pgm": ["jax==0.7.0", "jaxlib==0.7.0", "chex==0.1.90", "optax==0.2.5", "pandas==2.3.1", "attrs", "networkx",
                    "matplotlib", "scipy"],
    "smartnoise": ["mbi>=1.1,<2", "disjoint-set>=0.9,<0.10", "faker>=17", "smartnoise-sql>=1.0.10", "networkx"],
    # what the RAP reference's modules import (dataloading_util: matplotlib). Its requirements.txt pins jax 0.2.7, which
    # has no Python 3.11 build, and its code uses jax.example_libraries (jax >= 0.2.25). jax 0.7.0 fails it: jnp.hstack
    # checks its argument by iterating it since 2023-09 (jax 0.4.17), so the generator its sparsemax_project passes
    # arrives empty ("IndexError: list index out of range"); jax 0.4.13 is the last with a Python 3.11 jaxlib before
    # that, and it wants numpy < 2
    "amazon_rap": ["jax==0.4.13", "jaxlib==0.4.13", "numpy==1.26.4", "scipy==1.11.4", "pandas==2.2.3", "matplotlib<3.10"],
}
SMARTNOISE = "smartnoise-synth==1.0.8"
VERSIONS_OF = ("mbi", "jax", "jaxlib", "numpy", "pandas", "scipy", "smartnoise-synth", "networkx", "opendp")


# ---------------------------------------------------------------------------------------------
# The same guarantee


def rap_schedule() -> tuple[int, int, int, Fraction]:
    """das's rap's T (rounds), K (queries a round), relaxed records and tract-total share, the RAP reference's too."""
    from das.mechanisms import rap

    return rap.ROUNDS, rap.PER_ROUND, rap.PROJECTION.n_relaxed, rap.TOTAL_SHARE


def rap_schedule_text() -> str:
    rounds, per_round, relaxed, share = rap_schedule()
    return f"T {rounds}, K {per_round}, {relaxed} relaxed rows, total share {share}"


def reference_rho(mechanism: str, rho: Fraction, d: int = 5) -> Fraction:
    """The add/remove rho a reference MST or AIM gets at das's change-one rho, and the rho the RAP reference is given
    (its own accounting) (module docstring)."""
    if mechanism == "rap":
        _, k, _, share = rap_schedule()
        m = len(rap_tables())
        given = rho / (1 + Fraction(m, 2 * k))  # a change within a tract: its selections 2x, its Gaussians m/K of its charge
        assert (Fraction(1, 2) + Fraction(m, 2 * k)) * given + share * rho <= rho  # across two tracts, n^ too
        return given
    if mechanism == "mst":
        gaussian = Fraction(2, 3)
    else:
        gaussian = Fraction(9, 10) + Fraction(9, 100) * Fraction(d, 16 * d)
    return rho / (2 * gaussian + 4 * (1 - gaussian))


def mwem_epsilon(rho: Fraction, iterations: int = MWEM_ITERATIONS) -> float:
    """SmartNoise MWEM's pure eps whose change-one zCDP cost, 17 eps^2 / (32 T), is das's rho."""
    return math.sqrt(32 * iterations * float(rho) / 17)


# ---------------------------------------------------------------------------------------------
# The references' environments


def _pip(python: Path, *args: str) -> None:
    subprocess.run([str(python), "-m", "pip", "install", "--disable-pip-version-check", "-q", *args], check=True,
                   capture_output=True, text=True)


def _source(given: Path, marker: str, name: str) -> tuple[Path, str]:
    """A reference's source and its commit: `given` itself when it is a work tree (it holds `marker`), else the HEAD of
    the bare git directory `given` extracted under WORK/<name>-<commit> (never into the repository)."""
    if (given / marker).exists():
        commit = subprocess.run(["git", "-C", str(given), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
        return given, commit or "unknown (not a git work tree)"
    git = ["git", f"--git-dir={given}"]
    commit = subprocess.run([*git, "rev-parse", "HEAD"], check=True, capture_output=True, text=True).stdout.strip()
    target = WORK / f"{name}-{commit[:12]}"
    if not (target / marker).exists():
        archive = subprocess.run([*git, "archive", commit], check=True, capture_output=True).stdout
        with tarfile.open(fileobj=BytesIO(archive)) as tar:
            tar.extractall(target, filter="data")
    return target, commit


def private_pgm_source() -> tuple[Path, str]:
    """Private-PGM's source at the commit DAS_PRIVATE_PGM holds."""
    return _source(Path(os.environ.get("DAS_PRIVATE_PGM", "/work/.mirror/ryan112358+private-pgm/repo")),
                   "mechanisms/mst.py", "private-pgm")


def amazon_rap_source() -> tuple[Path, str]:
    """The RAP reference (Amazon Science's relaxed-adaptive-projection, the authors' code) at the commit DAS_AMAZON_RAP
    holds."""
    return _source(Path(os.environ.get("DAS_AMAZON_RAP", "/work/.mirror/amazon-science+relaxed-adaptive-projection/repo")),
                   "mechanisms/rap_pp.py", "relaxed-adaptive-projection")


def environment(name: str, source: Path | None = None) -> Path:
    """The python of reference environment `name`, created and installed once (a stamp marks it complete)."""
    home = WORK / "envs" / name
    python = home / "bin" / "python"
    stamp = home / "das-installed.json"
    wanted = {"packages": ENVIRONMENTS[name], "source": str(source) if source else None}
    if stamp.exists() and json.loads(stamp.read_text()).get("wanted") == wanted:
        return python
    venv.EnvBuilder(with_pip=True, clear=True).create(home)
    if name == "private_pgm":
        _pip(python, *ENVIRONMENTS[name])
        _pip(python, "--no-deps", str(source))
    elif name == "amazon_rap":  # not a package: the driver puts the extracted source on sys.path
        _pip(python, *ENVIRONMENTS[name])
    else:
        _pip(python, "--no-deps", SMARTNOISE)
        _pip(python, *ENVIRONMENTS[name])
    frozen = subprocess.run([str(python), "-m", "pip", "list", "--format=json"], check=True, capture_output=True,
                            text=True).stdout
    versions = {p["name"].lower(): p["version"] for p in json.loads(frozen) if p["name"].lower() in VERSIONS_OF}
    stamp.write_text(json.dumps({"wanted": wanted, "versions": versions}, indent=1))
    return python


# ---------------------------------------------------------------------------------------------
# One release of one implementation


def truth(fixture: str):
    from das.driver.runspec import load_run_spec
    from das.research.evaluate import truth_context

    spec = load_run_spec(fixture)
    return truth_context(spec.persons_path, spec.units_path, spec.persons.schema, spec.levels)


def tract_records(ctx, block_index: np.ndarray) -> np.ndarray:
    """The tract's persons as records (local block, then the schema's attribute codes)."""
    h = ctx.blocks[block_index].tocoo()
    return np.repeat(np.column_stack([h.row, *ctx.schema.cell_levels(h.col)]), h.data, axis=0).astype(np.int64)


def workload(sizes: list[int]) -> list[list[str]]:
    """das's AIM workload on the tract: every clique of up to three attributes within AIM_MAX_CELLS cells."""
    names = ("block", "hhgq", "votingage", "hispanic", "cenrace")
    return [list(c) for k in (1, 2, 3) for c in combinations(names, k)
            if math.prod(sizes[names.index(a)] for a in c) <= AIM_MAX_CELLS]


def rap_tables(schema: str = "pl94_persons") -> list[dict]:
    """das's rap workload as the RAP reference's queries: each block table of specs/attack/<schema>.toml (das.attack
    .workload's, which das's rap answers cell by cell in every block), one query per block (its cells the table's query
    attributes crossed, its `where` levels fixed), and the tract's detailed histogram as one query per hhgq x
    votingage (126 cells: hispanic x cenrace)."""
    from das.attack.workload import load_attack_tables

    tables = []
    for t in load_attack_tables(schema):
        if t.level != "block":
            continue
        assert all(len(levels) == 1 for _, levels in t.where), t  # a slice of a marginal: one level of each factor
        where = {factor: levels[0] for factor, levels in t.where}
        for q in t.queries:
            tables.append({"name": f"{t.name} {q}", "each": ["block"], "where": where,
                           "cells": [] if q == "total" else q.split(" x ")})
    tables.append({"name": "detailed", "each": ["hhgq", "votingage"], "where": {}, "cells": ["hispanic", "cenrace"]})
    assert all(a in ("block", "hhgq", "votingage", "hispanic", "cenrace") for t in tables
               for a in (*t["each"], *t["where"], *t["cells"])), tables
    return tables


def run_reference(implementation: str, mechanism: str, ctx, *, rho: Fraction, seed: int, work: Path,
                  pythons: dict) -> tuple[object, float]:
    """One reference release (every tract), as block histograms, and its seconds."""
    import scipy.sparse as sp

    from das.mechanisms.domain import geounits

    rows, cols, vals, seconds = [], [], [], 0.0
    for geocode, block_index in geounits(ctx.geography, "tract"):
        records = tract_records(ctx, block_index)
        sizes = [len(block_index), *ctx.schema.shape]
        job = {"mechanism": f"{implementation}_{mechanism}", "records": str(work / f"{geocode}.npy"), "sizes": sizes,
               "delta": DELTA, "seed": seed, "out": str(work / f"{geocode}.out.npy"), "workload": workload(sizes),
               "max_cells": AIM_MAX_CELLS, "private_pgm": str(pythons.get("private_pgm_source", ""))}
        if mechanism == "mwem":
            job |= {"epsilon": mwem_epsilon(rho), "iterations": MWEM_ITERATIONS}
        elif mechanism == "rap":
            rounds, per_round, relaxed, share = rap_schedule()
            job |= {"rho": float(reference_rho(mechanism, rho)), "total_rho": float(rho * share / 2),
                    "rounds": rounds, "per_round": per_round, "relaxed": relaxed,
                    "tables": rap_tables(ctx.schema.name), "amazon_rap": str(pythons.get("amazon_rap_source", ""))}
        else:
            job["rho"] = float(reference_rho(mechanism, rho))
        np.save(job["records"], records)
        (work / f"{geocode}.job.json").write_text(json.dumps(job))
        # PYTHONHASHSEED: Private-PGM's AIM orders its cliques through a set of strings, so without it the same seed
        # gives a different run in every process (block MAE 2.33 to 3.20 on one Perry tract)
        subprocess.run([str(pythons[implementation]), str(DRIVER), str(work / f"{geocode}.job.json")], check=True,
                       capture_output=True, text=True, timeout=TIMEOUT, cwd=work,
                       env=os.environ | {"PYTHONHASHSEED": str(seed)})
        out = np.load(job["out"])
        seconds += json.loads(Path(job["out"]).with_suffix(".run.json").read_text())["seconds"]
        cells = ctx.schema.cell_index(tuple(out[:, 1:].T)) if len(out) else np.zeros(0, dtype=np.int64)
        rows.append(block_index[out[:, 0]])
        cols.append(cells)
        vals.append(np.ones(len(out), dtype=np.int64))
        for path in work.glob(f"{geocode}.*"):  # the tract's confidential records and outputs: not kept
            path.unlink()
    shape = (ctx.geography.n_blocks, ctx.schema.size)
    return sp.csr_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))), shape=shape), seconds


def run_das(mechanism: str, ctx, *, rho: Fraction, seed: int, delta: Fraction) -> tuple[object, float]:
    """das's release (`das synth --seed`'s mechanism step) as block histograms, and its seconds."""
    from das.mechanisms import MECHANISMS, SynthesisInput
    from das.mechanisms.base import Ledger
    from das.privacy.randomness import SeededRandomSource

    data = SynthesisInput(ctx.schema, ctx.geography, ctx.blocks, rho, delta, SeededRandomSource(seed), Ledger(rho))
    t0 = time.perf_counter()
    out = MECHANISMS[mechanism].run(data).histograms
    return out, time.perf_counter() - t0


def scores(ctx, histograms) -> dict:
    """Block total MAE, tract detailed-cell MAE, tract and county total bias, as `das compare` scores a release."""
    from das.research.metrics import metrics
    from das.research.replicate import score

    stats = score(ctx, None, histograms, estimators=("topdown",), queries=("total", "detailed"), keep=(), tags={}).stats
    table = metrics(stats)

    def pick(level, query, column):
        row = table[(table["level"] == level) & (table["query"] == query) & (table["bin"] == "all")]
        return float(row[column].iloc[0])

    return {"block_mae": pick("block", "total", "mae"), "tract_detailed_mae": pick("tract", "detailed", "mae"),
            "tract_bias": pick("tract", "total", "mean_error"), "county_bias": pick("county", "total", "mean_error"),
            "persons": int(histograms.sum())}


def workload_errors(ctx, histograms) -> dict:
    """RAP's workload (das.mechanisms.rap.workload: the block tables in every block, the tract's detailed cells)
    answered by the release and by the confidential counts, tract by tract: the largest and the mean absolute
    error over its queries, in persons."""
    from das.mechanisms.domain import geounits, unit_counts
    from das.mechanisms.rap import records, workload

    histograms = histograms.tocsr()
    worst, total, n = 0.0, 0.0, 0
    for _, block_index in geounits(ctx.geography, "tract"):
        queries = workload(ctx.schema, len(block_index))
        truth, mine = (queries.answers(records(unit_counts(h, block_index), ctx.schema, len(block_index)))
                       for h in (ctx.blocks, histograms))
        errors = np.abs(mine - truth)
        worst, total, n = max(worst, float(errors.max(initial=0.0))), total + float(errors.sum()), n + errors.size
    return {"workload_max": worst, "workload_mean": total / max(n, 1)}


# ---------------------------------------------------------------------------------------------
# The study


def _key(mechanism: str, implementation: str, fixture: str, rho: str, seed: int) -> str:
    return f"{mechanism}-{implementation}-{fixture}-{rho.replace('/', '_')}-seed{seed}"


def _das_code() -> str:
    """A digest of das's mechanism sources as this process found them (taken once, at import, so a result is never
    stamped with code edited after the mechanisms were loaded): a das result is reused only while they are unchanged."""
    import hashlib

    digest = hashlib.sha256()
    for path in sorted((ROOT / "das" / "mechanisms").glob("*.py")):
        digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


DAS_CODE = _das_code()


def _done(path: Path, implementation: str) -> bool:
    """A result to keep: made (or timed out), and for das, by the current mechanism code (for the RAP reference, at das's
    rap's current schedule); a failure is retried."""
    if not path.exists():
        return False
    result = json.loads(path.read_text())
    if not (result["status"] == "ok" or result["status"].startswith("timeout")):
        return False
    if result["status"] == "ok" and result["mechanism"] == "rap" and "workload_mean" not in result:
        return False  # made before the workload's errors were scored
    if implementation == "amazon_rap":  # run at das's rap's schedule: again when das's changes
        return result.get("rap_schedule") == rap_schedule_text()
    return implementation != "das" or result.get("das_code") == DAS_CODE


def tasks(mechanisms: tuple[str, ...] | None = None) -> list[tuple[str, str, str, str, int]]:
    """(fixture, mechanism, implementation, rho, seed) of every run of `mechanisms` (default: MECHANISMS)."""
    mechanisms = MECHANISMS if mechanisms is None else mechanisms
    return [(fixture, mechanism, implementation, rho, seed)
            for fixture in RUN_FIXTURES for mechanism, implementations in IMPLEMENTATIONS.items() if mechanism in mechanisms
            for implementation in implementations for rho in RUN_RHOS
            for seed in range(ROW_SEEDS.get((mechanism, fixture, rho), SEEDS))]


def _prepare(implementation: str, pythons: dict, commits: dict) -> None:
    """The reference's source and environment, made when a run of it is first pending (a rerun of RAP's rows alone
    needs neither Private-PGM nor SmartNoise)."""
    if implementation == "das" or implementation in pythons:
        return
    if implementation in ("private_pgm", "amazon_rap"):
        source, commits[implementation] = private_pgm_source() if implementation == "private_pgm" else amazon_rap_source()
        pythons[f"{implementation}_source"] = source
        pythons[implementation] = environment(implementation, source)
    else:
        pythons[implementation] = environment(implementation)


def run_all(log=print, mechanisms: tuple[str, ...] | None = None) -> tuple[list[dict], set[str]]:
    """Every run of `tasks(mechanisms)` not yet in RESULTS (das's: not with the current mechanism code); returns the
    results there of `mechanisms` (default: MECHANISMS), and the mechanisms this invocation ran."""
    mechanisms = MECHANISMS if mechanisms is None else mechanisms
    RESULTS.mkdir(parents=True, exist_ok=True)
    pythons: dict = {}
    commits: dict = {}
    contexts, ran = {}, set()
    for fixture, mechanism, implementation, rho, seed in tasks(mechanisms):
        path = RESULTS / f"{_key(mechanism, implementation, fixture, rho, seed)}.json"
        if _done(path, implementation):
            continue
        _prepare(implementation, pythons, commits)
        ctx = contexts.setdefault(fixture, truth(fixture))
        log(f"{mechanism} {implementation} {fixture} rho {rho} seed {seed}")
        path.write_text(json.dumps(_one(ctx, mechanism, implementation, fixture, rho=rho, seed=seed, pythons=pythons,
                                        commit=commits.get(implementation)), indent=1) + "\n")
        ran.add(mechanism)
    results = [json.loads(p.read_text()) for p in sorted(RESULTS.glob("*.json"))]
    return [r for r in results if r["mechanism"] in mechanisms], ran


def _one(ctx, mechanism: str, implementation: str, fixture: str, *, rho: str, seed: int, pythons: dict,
         commit: str | None) -> dict:
    """One release of `implementation` and its scores; `commit`: the reference source's (Private-PGM's, the RAP
    reference's), recorded with its result."""
    from das.driver.runspec import load_run_spec

    row = {"mechanism": mechanism, "implementation": implementation, "fixture": fixture, "rho": rho, "seed": seed}
    budget = Fraction(rho)
    try:
        if implementation == "das":
            histograms, seconds = run_das(mechanism, ctx, rho=budget, seed=seed, delta=load_run_spec(fixture).delta)
        else:
            work = WORK / "scratch"
            work.mkdir(parents=True, exist_ok=True)
            histograms, seconds = run_reference(implementation, mechanism, ctx, rho=budget, seed=seed, work=work,
                                                pythons=pythons)
    except subprocess.TimeoutExpired:
        return row | {"status": f"timeout after {TIMEOUT} s on a tract"}
    except subprocess.CalledProcessError as e:
        return row | {"status": "failed: " + " / ".join((e.stderr or "").strip().splitlines()[-2:])}
    given = (f"eps {mwem_epsilon(budget):.4f} (pure, T = {MWEM_ITERATIONS})" if mechanism == "mwem" and implementation != "das"
             else f"rho {float(reference_rho(mechanism, budget)):.4f} (its accounting), n^ at add/remove rho "
                  f"{float(budget * rap_schedule()[3] / 2):.4f}" if implementation == "amazon_rap"
             else f"add/remove rho {float(reference_rho(mechanism, budget)):.4f}" if implementation != "das" else f"rho {rho}")
    extra = {"amazon_rap_commit": commit, "rap_schedule": rap_schedule_text()} if implementation == "amazon_rap" else {}
    return row | scores(ctx, histograms) | (workload_errors(ctx, histograms) if mechanism == "rap" else {}) | {
        "status": "ok", "seconds": seconds, "given": given,
                                            "private_pgm_commit": commit if implementation == "private_pgm" else None,
                                            "das_code": DAS_CODE if implementation == "das" else None} | extra


def _mean_se(values: list[float], digits: int = 2) -> str:
    if not values:
        return "-"
    mean = float(np.mean(values))
    se = float(np.std(values, ddof=1) / math.sqrt(len(values))) if len(values) > 1 else float("nan")
    return f"{mean:.{digits}f}" + (f" ± {se:.{digits}f}" if se == se else "")


def table(results: list[dict], mechanisms: tuple[str, ...] = tuple(IMPLEMENTATIONS)) -> list[str]:
    """The comparison of `mechanisms` as Markdown rows: per mechanism, fixture and rho, each implementation's mean ± se
    over seeds; a column per reference of any of them."""
    used = {i for m in mechanisms for i in IMPLEMENTATIONS[m]}
    references = [r for r in REFERENCES if r in used]
    names = " | ".join(REFERENCES[r] for r in references)
    metrics = [m for m in METRICS if m in ("block_mae", "tract_detailed_mae", "seconds")
               or any(m in r for r in results if r["mechanism"] in mechanisms)]
    lines = ["| mechanism | fixture | rho | " + " | ".join(f"{METRICS[m]}: das | {names}" for m in metrics) + " |",
             "|---|---|---|" + "---|" * len(metrics) * (1 + len(references))]
    for mechanism in mechanisms:
        implementations = IMPLEMENTATIONS[mechanism]
        for fixture in FIXTURES:
            for rho in RHOS:
                cells: dict[str, list[str]] = {m: [] for m in metrics}
                for metric in cells:
                    for implementation in ("das", *references):
                        mine = [r for r in results if (r["mechanism"], r["implementation"], r["fixture"], r["rho"])
                                == (mechanism, implementation, fixture, rho)]
                        ok = [r[metric] for r in mine if r["status"] == "ok"]
                        failed = [r["status"] for r in mine if r["status"] != "ok"]
                        text = "n/a" if implementation not in implementations else (
                            (_mean_se(ok, 3 if metric in ("tract_detailed_mae", "workload_mean") else 2)
                             if metric != "seconds"
                             else (f"{np.median(ok):.0f}" if ok else "-"))
                            + (f" ({len(ok)})" if ok and metric == "block_mae" else "")
                            + (f" [{len(failed)} {failed[0].split(':')[0]}]" if failed else ""))
                        cells[metric].append(text)
                lines.append(f"| {mechanism} | {FIXTURES[fixture]} | {rho} | " + " | ".join(
                    " | ".join(cells[m]) for m in metrics) + " |")
    return lines


def worst_ratio(results: list[dict], metric: str = "block_mae") -> float:
    """max over (mechanism, fixture, rho) of das's mean `metric` over the best reference's: <= 1 means das is never
    worse on average."""
    ratios = []
    for mechanism, implementations in IMPLEMENTATIONS.items():
        for fixture in FIXTURES:
            for rho in RHOS:
                means = {}
                for implementation in implementations:
                    ok = [r[metric] for r in results if r["status"] == "ok" and (r["mechanism"], r["implementation"],
                          r["fixture"], r["rho"]) == (mechanism, implementation, fixture, rho)]
                    if ok:
                        means[implementation] = float(np.mean(ok))
                references = [v for k, v in means.items() if k != "das"]
                if "das" in means and references:
                    ratios.append(means["das"] / min(references))
    return max(ratios) if ratios else float("nan")


def record(results: list[dict], seconds: float, ran: set[str]) -> None:
    """benchmarks/recorded/references.md (MST, AIM, MWEM) and references_rap.md (RAP): each family's table, versions
    and conversions, rewritten when this invocation ran some of its mechanisms (or its file is missing)."""
    stamps = {name: WORK / "envs" / name / "das-installed.json" for name in ENVIRONMENTS}
    versions = {name: json.loads(stamp.read_text())["versions"] for name, stamp in stamps.items() if stamp.exists()}

    def listed(name: str) -> str:
        return ", ".join(f"{k} {v}" for k, v in sorted(versions.get(name, {}).items())) or "-"

    def commits(key: str) -> str:
        return ", ".join(sorted({r[key] for r in results if r.get(key)})) or "-"

    common = [
        "- command: `scripts/bench references` (`references.rap`: RAP's rows; benchmarks/references.py; not in the "
        "default suite: hours); `DAS_REFERENCES_MECHANISMS`, `DAS_REFERENCES_FIXTURES` and `DAS_REFERENCES_RHOS` "
        f"run some rows only; each run's result is kept in `{RESULTS.relative_to(ROOT)}/` (its seconds, code and "
        "versions with it), and a rerun makes only the missing ones: a row whose cell is `-` has not been run",
        f"- when: {dt.datetime.now():%Y-%m-%d %H:%M}; {seconds / 3600:.1f} h wall for the runs made by this "
        "invocation, on 2 cores shared with other jobs (a release's seconds are as loaded as the machine was then)",
        f"- the tables: each tract of the fixture, block x hhgq x votingage x hispanic x cenrace; seeds 0..{SEEDS - 1} "
        + "".join(f"(0..{n - 1} for {m} on {FIXTURES.get(f, f)} at rho {r}) " for (m, f, r), n in ROW_SEEDS.items())
        + "; MAE over all blocks (block total population) and over every tract x detailed cell, by das.research's "
        "scorer; mean ± standard error over seeds (the number of seeds in brackets)"]
    families = {
        "references.md": ["## Reference implementations at the same guarantee (issue 25)", "", *common,
            f"- Private-PGM at commit {commits('private_pgm_commit')} (`mechanisms/mst.py`, `mechanisms/aim.py`; mbi "
            f"from that source), its environment: {listed('private_pgm')}",
            f"- SmartNoise Synth: {listed('smartnoise')}",
            "- the same guarantee: das's rho-zCDP under change-one neighbours. MST references get add/remove rho 3/8 "
            f"rho, AIM references {float(reference_rho('aim', Fraction(1))):.4f} rho (their Gaussian steps cost twice "
            "under change-one, their selections four times), SmartNoise's MWEM pure eps = sqrt(32 T rho / 17) with "
            f"T = {MWEM_ITERATIONS} iterations (benchmarks/references.py says why)",
            "- SmartNoise's MWEM on the public domain (as published it reads each column's range from the data, "
            "outside its accounting; run that way on Grand Isle, one seed, its detailed MAE was 0.07 and 0.11), its "
            "multiplicative-weights step on the measured slice only (the same update, minutes instead of hours a tract)",
            "- AIM's workload every clique of up to three attributes within 100,000 cells (SmartNoise's AIM: its "
            "degree-3 workload within the same limit)",
            "- the references' releases are records sampled from their models (SmartNoise's MST, AIM and MWEM sample "
            "as many as the true count, which they read from the data); das's are the model's expected counts rounded "
            "to its noisy tract total"],
        "references_rap.md": ["## The RAP reference at the same guarantee (issue 37)", "", *common,
            "- RAP reference: Amazon Science's relaxed-adaptive-projection, `--algorithm RAP` (`RAPpp`, one marginal "
            f"module, its RAP optimizer settings) at commit {commits('amazon_rap_commit')}, its environment: "
            f"{listed('amazon_rap')}; das's rap and it: {rap_schedule_text()} (das's rap's)",
            "- its queries are whole vectors (a marginal's slice): in every block each of das's tables P1 total, "
            "P1-P5, and the tract's detailed cells as 16 queries of 126 (das's: the same tables' cells, one query "
            "each). Its n (public to it) is n^, the tract count with das's total's noise (rho/20 under change-one), "
            f"by its own Gaussian mechanism; it gets rho {float(reference_rho('rap', Fraction(1))):.4f} rho through "
            "its eps at its delta 1/n^2 (its selections cost twice its charge under change-one, its Gaussians at most "
            f"{len(rap_tables())}/K of it: a person is in one cell of {len(rap_tables())} tables; "
            "benchmarks/references.py says why); its records: its own sampling of the relaxed rows (40 a row), n^ of "
            "them drawn; das's: the relaxed rows' mixture times its noisy tract total, rounded block by block"],
    }
    for name, mechanisms in FAMILIES.items():
        path = RECORDED / name
        mine = [r for r in results if r["mechanism"] in mechanisms]
        if mine and (ran & set(mechanisms) or not path.exists()):
            path.write_text("\n".join([*families[name], "", *table(mine, mechanisms), ""]))


def _log(line: str) -> None:
    """Progress, to runs/bench_references/progress.log (the harness keeps the child's output until it ends)."""
    WORK.mkdir(parents=True, exist_ok=True)
    with open(WORK / "progress.log", "a") as f:
        f.write(f"{dt.datetime.now():%H:%M:%S} {line}\n")


def compare_references() -> dict:
    """MST, AIM and MWEM (those of DAS_REFERENCES_MECHANISMS) beside their references."""
    t0 = time.perf_counter()
    results, ran = run_all(log=_log, mechanisms=tuple(m for m in MECHANISMS if m != "rap"))
    record(results, time.perf_counter() - t0, ran)
    return {"seconds": time.perf_counter() - t0, "worst_das_over_best_reference": worst_ratio(results),
            "worst_das_over_best_reference_detailed": worst_ratio(results, "tract_detailed_mae"),
            "runs": float(len(results))}


def compare_rap() -> dict:
    """das's RAP beside the authors' (issue 37): das's mean over the reference's, per metric, at the worst (fixture,
    rho) row both have; its seconds a release, the medians."""
    t0 = time.perf_counter()
    results, ran = run_all(log=_log, mechanisms=("rap",))
    record(results, time.perf_counter() - t0, ran)
    ok = [r for r in results if r["status"] == "ok"]
    return {"seconds": time.perf_counter() - t0, "runs": float(len(results)),
            **{f"das_over_reference_{metric}": worst_ratio(results, metric)
               for metric in ("block_mae", "tract_detailed_mae", "workload_mean", "workload_max")},
            "das_release_seconds": float(np.median([r["seconds"] for r in ok if r["implementation"] == "das"])),
            "reference_release_seconds": float(np.median([r["seconds"] for r in ok if r["implementation"] != "das"]))}


BENCHES = [
    Bench("references", "das's MST, AIM and MWEM beside Private-PGM's and SmartNoise Synth's at the same guarantee, "
          "on every tract of Grand Isle VT and Perry County AL, rho 293764/114921 and 1/4, 3 seeds; "
          "table in benchmarks/recorded/references.md (hours: not in the default suite)",
          compare_references, key="worst_das_over_best_reference", repeats=1, default=False),
    Bench("references.rap", "das's RAP beside the authors' RAP (amazon-science/relaxed-adaptive-projection) at the same "
          "guarantee, on every tract of Grand Isle VT (and Perry County AL), rho 293764/114921 and 1/4, 3 seeds; "
          "table in benchmarks/recorded/references_rap.md (hours: not in the default suite)",
          compare_rap, key="das_over_reference_block_mae", repeats=1, default=False),
]
