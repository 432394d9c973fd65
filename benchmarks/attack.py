"""Reconstruction audit cost: RAP-Rank (+ IP certainty) on one block and on a 50-block tract."""

from __future__ import annotations

import resource
import time
from pathlib import Path

import numpy as np

from benchmarks._harness import Bench

ROOT = Path(__file__).resolve().parents[1]
GRAND_ISLE = ROOT / "geography_fixtures" / "vt_grand_isle" / "persons.parquet"
VERMONT = ROOT / "geography_fixtures" / "vt" / "persons.parquet"
BLOCK = "500130201001031"  # Grand Isle, 49 persons (the upper quartile of its block sizes)
TRACT = "50011010800"  # Franklin County VT, 51 blocks with people, 3,467 persons


def _attack(persons: Path, level: str, geocode: str) -> dict:
    from das.attack.audit import AuditOptions, attack_geounit
    from das.attack.data import read_persons
    from das.attack.rank import match_rate_at
    from das.attack.rap import RapConfig
    from das.attack.workload import load_attack_tables
    from das.model.schema import load_schema

    schema = load_schema("dhc_persons")
    truth = read_persons(persons, schema)
    options = AuditOptions(level=level, runs=100, rap=RapConfig(n_relaxed=1000, steps=1000), workers=2,
                           baselines=("county",))
    t0, cpu0 = time.perf_counter(), _cpu_seconds()
    result = attack_geounit(geocode, truth, truth, options, tables=load_attack_tables("dhc_persons"))

    seconds, cpu = time.perf_counter() - t0, _cpu_seconds() - cpu0
    u = max(result.distinct_true, 1)
    return {"seconds": seconds, "cpu_seconds": cpu, "queries": float(result.n_queries), "persons": float(result.published_total),
            "match_rate_at_u": match_rate_at(result.hits["rap_rank"], u),
            "baseline_county_at_u": match_rate_at(result.hits["baseline_county"], u),
            "certain_of_top50": float(np.sum(result.certainty >= 1)) if result.certainty is not None else float("nan")}


def _cpu_seconds() -> float:
    """CPU time of this process and its finished children (the RAP worker processes)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def block_attack() -> dict:
    return _attack(GRAND_ISLE, "block", BLOCK)


def tract_attack() -> dict:
    return _attack(VERMONT, "tract", TRACT)


BENCHES = [
    Bench("attack.block", "das attack, one Grand Isle block (49 persons), exact DHC tables: 761 queries, "
          "K = 1000, 1000 Adam steps, 100 RAP runs on 2 worker processes, ranking, county baseline, "
          "IP certainty of the top 50",
          block_attack, key="seconds", repeats=1, target="< 300 s on 2 cores"),
    Bench("attack.tract", "das attack, one Vermont tract (51 blocks, 3,467 persons), exact DHC tables: "
          "block tables of every block + tract PCT12 tables (39,507 queries), K = 1000, 1000 steps, 100 runs, "
          "2 worker processes",
          tract_attack, key="seconds", repeats=1, target="< 1800 s on 2 cores"),
]
