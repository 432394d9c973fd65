"""`das attack` as one call: a typed configuration named as the command line's flags, and a typed result.

    das attack --truth PERSONS --published RUN_DIR|exact --out DIR [--level block] [--runs 100] ...
    das.attack(truth=..., published=..., out=..., level="block", runs=100, ...)   # the same, in Python

Exact tables and a release are attacked on the same geounits and, by default, the same schema:
`geounits="auto"` picks them across the size range of the TRUE populations (the truth is read anyway,
to score), so `published="exact"` and a release of the same truth attack the same blocks; the schema
is the release's, and for exact tables `pl94_persons`, the schema of the shipped releases. The outputs
hold scores against the truth: confidential, in a directory of their own (das.frame.outdir).
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from das.attack.audit import (
    ATTACK,
    REPORT_FRACTIONS,
    REPORT_K,
    AuditOptions,
    auto_geounits,
    check_geounits,
    run_audit,
    write_outputs,
)
from das.attack.baselines import SCOPES
from das.attack.data import AttackError, check_covers, read_persons, read_release, release_schema
from das.attack.rap import RapConfig
from das.attack.workload import load_attack_tables
from das.core.errors import option
from das.frame import outdir
from das.model.levels import BLOCK, COUNTY, TRACT
from das.model.schema import load_schema

logger = logging.getLogger(__name__)
EXACT = "exact"
EXACT_SCHEMA = "pl94_persons"  # the schema of every shipped release: exact tables are attacked on it by default


@dataclass(frozen=True)
class AttackConfig:
    """What `das attack` does, each field named as its flag (`--learning-rate` is learning_rate): the truth to
    score against, what is attacked (a release directory, or "exact" tables: no protection), where the
    confidential outputs go, the geounits, and RAP-Rank's and the baselines' settings. Frozen; `check()` refuses
    a value out of range before anything is read.

    Example:
        >>> AttackConfig(truth="persons.csv", published="exact", out="audit", runs=0).check()
        Traceback (most recent call last):
        ...
        das.attack.data.AttackError: runs=0: expected at least 1
    """

    truth: str | os.PathLike | object  # the confidential persons: a file, or in Python a DataFrame; read only to score
    published: str | os.PathLike  # a release directory, or "exact" (tables computed from the truth: no protection)
    out: str | os.PathLike  # the output directory (confidential)
    schema: str | None = None  # default: the release's; for exact tables pl94_persons
    tables: str | None = None  # attack workload (specs/attack); default: the schema's name
    level: str = BLOCK  # block | tract
    geounits: str | tuple[str, ...] = "auto"  # "auto" (across the true size range) or geocodes
    count: int = 10  # geounits "auto" picks
    runs: int = 100  # RAP runs per geounit
    relaxed: int = 1000  # K relaxed records per run
    steps: int = 1000  # Adam steps per run
    batch: int = 128  # queries per step
    learning_rate: float = 0.1
    min_confidence: float = 0.0  # drop candidates sampled in fewer than this share of runs
    multiset: bool = False  # score with multiplicities
    baselines: tuple[str, ...] = (TRACT, COUNTY)
    holdout: str | os.PathLike | object | None = None  # persons (file or DataFrame) of a disjoint population
    ip_top: int = 50  # top candidates whose IP certainty is decided (0: no IP)
    ip_max_persons: int = 60  # solution variability for blocks up to this size
    workers: int = 1  # parallel RAP runs (the command line's default: every core; in Python 1)
    seed: int = 0  # of the attack's own randomness
    overwrite: bool = False

    def check(self) -> None:
        """Every option in range, or AttackError naming the flag and what was expected (nothing read yet)."""
        for name in ("runs", "relaxed", "steps", "batch", "workers", "count"):
            if getattr(self, name) < 1:
                raise AttackError(f"{option(name, getattr(self, name))}: expected at least 1")
        if self.level not in (BLOCK, TRACT):
            raise AttackError(f"{option('level', repr(self.level))}: expected block or tract")
        if not 0.0 <= self.min_confidence <= 1.0:
            raise AttackError(f"{option('min_confidence', self.min_confidence)}: expected a share between 0 and 1")
        if not self.learning_rate > 0:
            raise AttackError(f"{option('learning_rate', self.learning_rate)}: expected a positive number")
        unknown = [b for b in self.baselines if b not in SCOPES]
        if unknown:
            raise AttackError(f"{option('baselines')}: unknown scope(s) {unknown}; expected some of {SCOPES}")
        if "holdout" in self.baselines and not self.holdout:
            raise AttackError(f"{option('baselines', 'holdout')} needs {option('holdout', 'PATH')} (a disjoint persons "
                              "file)")
        if min(self.ip_top, self.ip_max_persons, self.seed) < 0:
            raise AttackError(f"{option('ip_top')}, {option('ip_max_persons')} and {option('seed')} must be nonnegative")
        self.listed_geounits()

    def listed_geounits(self) -> list[str] | None:
        """The geocodes --geounits lists, each checked against --level (None: "auto"); AttackError otherwise."""
        if self.geounits == "auto":
            return None
        listed = self.geounits.split(",") if isinstance(self.geounits, str) else list(self.geounits)
        geounits = [g.strip() for g in listed if g.strip()]
        if not geounits:
            raise AttackError(f"{option('geounits')}: expected 'auto' or a comma-separated list of geocodes")
        check_geounits(geounits, self.level)
        return geounits

    @property
    def exact(self) -> bool:
        """Whether exact tables are attacked (published="exact"), not a release."""
        return str(self.published) == EXACT

    def options(self) -> AuditOptions:
        """The audit's own options (das.attack.audit) from the flags."""
        return AuditOptions(level=self.level, runs=self.runs, seed=self.seed, workers=self.workers,
                            rap=RapConfig(n_relaxed=self.relaxed, steps=self.steps, batch_size=self.batch,
                                          learning_rate=self.learning_rate),
                            min_confidence=self.min_confidence, multiset=self.multiset, baselines=tuple(self.baselines),
                            ip_top=self.ip_top, ip_max_persons=self.ip_max_persons, tables=self.tables)


@dataclass(frozen=True)
class AttackResult:
    """What an attack found: the geounits attacked and Match-Rate pooled over them (matched records over the
    records claimed, all geounits together), keyed by k (an int) and by k/u (a float; u = distinct true records
    of a geounit), per method (rap_rank, baseline_tract, ...); `summary` is summary.json's content.

    Example:
        >>> result = AttackResult(out=Path("audit"), source="exact tables", schema="pl94_persons", geounits=("b1",),
        ...                       match_rate={"rap_rank": {1: 1.0}}, match_rate_k_over_u={}, summary={})
        >>> result.match_rate["rap_rank"][1]
        1.0
    """

    out: Path
    source: str
    schema: str
    geounits: tuple[str, ...]
    match_rate: dict[str, dict[int, float | None]]
    match_rate_k_over_u: dict[str, dict[float, float | None]]
    summary: dict  # summary.json's content

    @property
    def markdown(self) -> str:
        """summary.md: what was attacked, the Match-Rate tables, the IP certainty."""
        return (self.out / "summary.md").read_text()


def _schema(config: AttackConfig):
    if config.exact:
        return load_schema(config.schema or EXACT_SCHEMA), "exact tables (no protection)"
    schema = release_schema(config.published)
    if config.schema and config.schema != schema.name:
        raise AttackError(f"{option('schema', config.schema)}: the release {config.published} uses schema {schema.name}")
    return schema, f"release {Path(config.published).name}"


def _geounits(config: AttackConfig, truth) -> list[str]:
    listed = config.listed_geounits()
    return auto_geounits(truth, config.level, config.count, np.random.default_rng(config.seed)) if listed is None \
        else listed


def run_attack(config: AttackConfig) -> AttackResult:
    """The reconstruction audit of `config`: checks (before anything is read or written), the attack of each
    geounit (a progress bar on a terminal), and the outputs in config.out; the result, typed."""
    config.check()
    inputs = [config.truth, config.holdout, None if config.exact else config.published]
    claim = outdir.check(Path(config.out), ATTACK, overwrite=config.overwrite, protected=inputs)
    schema, source = _schema(config)
    options = config.options()
    load_attack_tables(options.tables or schema.name)  # a bad workload spec is refused before anything is written
    t0 = time.perf_counter()
    truth = read_persons(config.truth, schema)
    published = truth if config.exact else read_release(config.published, schema)
    check_covers(truth, published, truth_path=config.truth)  # a truth of another county scores 0: refused
    holdout = read_persons(config.holdout, schema) if config.holdout else None
    geounits = _geounits(config, truth)
    logger.info(f"das attack: {config.level} attack on {source}, {len(geounits)} geounits, {config.runs} runs each")
    claim.start()  # its own earlier output deleted (--overwrite), its record written
    results = run_audit(truth, published, geounits, options, holdout=holdout)
    summary = write_outputs(Path(config.out), results, published, options, source=source,
                            seconds=time.perf_counter() - t0)
    claim.finish()
    rates = summary["match_rate"]
    return AttackResult(
        Path(config.out), source, schema.name, tuple(geounits),
        {m: {k: r["k"][str(k)] for k in REPORT_K} for m, r in rates.items()},
        {m: {f: r["k_over_u"][str(f)] for f in REPORT_FRACTIONS} for m, r in rates.items()}, summary)
