"""`rap`: Relaxed Adaptive Projection (Aydore et al., ICML 2021, Algorithm 2) per tract.

Geography: one run per tract (parallel composition), on the tract's full domain: the block is an attribute of a
record, beside the schema's. The workload is the tables the release must serve as product queries (das.attack
.workload, the same the reconstruction audit attacks): every cell of the schema's block tables (P1-P5 for
`pl94_persons`) in every block of the tract, and every cell of the tract's detailed histogram.

Budget (rho, exact): TOTAL_SHARE measures the tract total (discrete Gaussian), which fixes the scale n of the
relaxed records' answers (the paper's n is public; here it is measured); the rest is split into 2 T K equal parts,
as the paper's rho / (2 T K): in each of T rounds, K times, the query worst answered by the current relaxed records
is selected with the exponential mechanism (the paper's report-noisy-max, exact: scores are integers in units of
2^-SCORE_BITS; eps^2/8 each) among those not yet selected, and measured with discrete Gaussian noise. After each
round the relaxed projection (das.attack.rap.project, shared with the attack) fits the relaxed records, from the
previous round's, to every measured answer so far. Output: the relaxed records' mixture over the tract's domain,
scaled to the noisy total and rounded to integers by controlled rounding (rounding.round_by_block), as MWEM's.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from das.attack.rap import RapConfig, initial_logits, mask_operators, project, relaxed_answers, softmax
from das.attack.workload import AttackTable, Workload, build_workload, load_attack_tables
from das.mechanisms.base import Ledger, Plan, Public, RoundSchedule, Synthesis, SynthesisInput, selection_eps
from das.mechanisms.domain import fit_per_geounit, noisy_total
from das.mechanisms.rounding import round_by_block
from das.model.levels import BLOCK, TRACT
from das.model.schema import Schema
from das.privacy.exponential import exponential_mechanism, exponential_rho
from das.privacy.sampler import discrete_gaussian

LEVEL = TRACT
ROUNDS = 10  # T
# K, the queries selected and measured in a round. Grand Isle at the 2020 budget, seed 0, T = 10: K = 3, 5, 10, 20,
# 50 gave block MAE 12.6, 10.9, 11.3, 13.5, 13.4 (docs/mechanisms.md): 5 is the best of them
PER_ROUND = 5
TOTAL_SHARE = Fraction(1, 20)
SCORE_BITS = 16  # scores |true - relaxed answer| in integer units of 2^-16 (the relaxed answers rounded: public)
# A query's score moves by at most 1 when one record changes (within the tract) and by at most 1 when one is added
# or removed (a record moving between two tracts): calibrated to Delta = 99/70 >= sqrt(2), the add/remove bound is
# 70/99 Delta, whose square is at most 1/2 (base.Ledger.exponential: eps^2/8 covers both).
SENSITIVITY = Fraction(99, 70)
ADD_REMOVE = Fraction(70, 99)
PROJECTION = RapConfig(n_relaxed=1000, steps=200, learning_rate=0.05, batch_size=PER_ROUND * ROUNDS, refresh=50)


def workload(schema: Schema, n_blocks: int) -> Workload:
    """The tract's queries: the schema's block tables (specs/attack/<schema>.toml) in every block, then the tract's
    detailed cells (every attribute crossed)."""
    tables = tuple(t for t in load_attack_tables(schema.name) if t.level == BLOCK)
    detailed = AttackTable("detailed", "detailed cells", TRACT, (" x ".join(schema.names),))
    return build_workload(schema, (*tables, detailed), n_blocks)


def records(counts: np.ndarray, schema: Schema, n_blocks: int) -> np.ndarray:
    """The tract's persons as (block, attribute levels) rows from its domain counts (block-major)."""
    cells = np.repeat(np.arange(counts.size), counts.astype(np.int64))
    blocks, inner = np.divmod(cells, schema.size)
    return np.column_stack([blocks, *schema.cell_levels(inner)]) if cells.size else np.zeros((0, 1 + len(schema.shape)))


def mixture(probs: list[np.ndarray], schema: Schema) -> np.ndarray:
    """The relaxed records' mean product distribution over the domain (block-major, schema cells in C order)."""
    inner = probs[1]
    for p in probs[2:]:  # (cells x K) outer (d x K) per record, cells in C order of the schema's attributes
        inner = (inner[:, None, :] * p[None, :, :]).reshape(-1, p.shape[1])
    joint = probs[0].astype(np.float64) @ inner.astype(np.float64).T / probs[0].shape[1]  # n_blocks x schema cells
    return joint.ravel()


@dataclass(frozen=True)
class Schedule(RoundSchedule):
    """RAP's schedule: T rounds of K selections and measurements."""

    per_round: int = PER_ROUND


def _scores(truth: np.ndarray, relaxed: np.ndarray, total: int) -> np.ndarray:
    """|true count - relaxed answer x n| in units of 2^-SCORE_BITS, exact integers (the relaxed side rounded)."""
    scale = 1 << SCORE_BITS
    return np.abs(truth.astype(np.int64) * scale - np.rint(relaxed * total * scale).astype(np.int64))


def synthesize_unit(counts: np.ndarray, schema: Schema, n_blocks: int, *, schedule: Schedule, rng,
                    config: RapConfig) -> np.ndarray:
    """RAP on one tract's domain counts: integer counts over the domain."""
    queries = workload(schema, n_blocks)
    operators = mask_operators(queries, config.dtype)
    truth = np.rint(queries.answers(records(counts, schema, n_blocks))).astype(np.int64)
    total = noisy_total(counts, schedule.sigma2_total, rng)
    generator = np.random.default_rng(rng.uint64(4).tolist())  # post-processing randomness, from the same source
    logits = initial_logits(queries, config, generator)
    targets = np.zeros(queries.n_queries)
    measured: list[int] = []
    waiting = np.ones(queries.n_queries, dtype=bool)
    for _ in range(schedule.rounds):
        relaxed = relaxed_answers(queries, operators, [softmax(z) for z in logits])
        scores = _scores(truth, relaxed, total)
        for _ in range(schedule.per_round):
            candidates = np.flatnonzero(waiting)
            if candidates.size == 0:
                break
            chosen = int(candidates[exponential_mechanism(scores[candidates], schedule.eps,
                                                          SENSITIVITY * (1 << SCORE_BITS), rng)])
            waiting[chosen] = False
            noisy = int(truth[chosen]) + int(discrete_gaussian(schedule.sigma2, 1, rng)[0])
            targets[chosen] = noisy / total if total else 0.0
            measured.append(chosen)
        logits = project(queries, operators, logits, targets, config=config, rng=generator, queries=np.asarray(measured))
    expected = mixture([softmax(z) for z in logits], schema)
    return round_by_block(expected, n_blocks, total)


def plan(public: Public, ledger: Ledger) -> Plan:
    """TOTAL_SHARE for the total at `level`; the rest in 2 T K equal parts: T rounds (`public.rounds`, default ROUNDS)
    of K = PER_ROUND selections (eps^2/8 each, eps exact within its part) and K measurements (discrete Gaussian, each
    its part and what its selection left of its own): exactly the budget."""
    level, rounds = public.level, public.rounds or ROUNDS
    sigma2_total = ledger.gaussian(level, "total", public.budget * TOTAL_SHARE)
    part = public.budget * (1 - TOTAL_SHARE) / (2 * rounds * PER_ROUND)
    eps = selection_eps(part)  # the largest multiple of 2^-20 within its part; the measurement takes what is left
    sigma2 = None
    for r in range(1, rounds + 1):
        for k in range(1, PER_ROUND + 1):
            ledger.exponential(level, f"round {r} select {k}", eps, SENSITIVITY, add_remove=ADD_REMOVE)
            sigma2 = ledger.gaussian(level, f"round {r} measure {k}", 2 * part - exponential_rho(eps))
    return Plan(Schedule(sigma2_total, eps, sigma2, rounds, PER_ROUND), {
        "level": level, "rounds": rounds, "queries_per_round": PER_ROUND, "eps_select": str(eps),
        "sigma2_measure": str(sigma2), "workload": f"block tables of specs/attack/{public.schema.name}.toml in every "
        "block, and the tract's detailed cells",
        "relaxed_records": PROJECTION.n_relaxed, "steps_per_round": PROJECTION.steps,
        "learning_rate": PROJECTION.learning_rate})


def run(data: SynthesisInput, level: str | None = None, rounds: int = ROUNDS) -> Synthesis:
    def unit(counts, domain, schedule, rng):
        return synthesize_unit(counts, domain.schema, domain.n_blocks, schedule=schedule, rng=rng, config=PROJECTION)

    return fit_per_geounit(data, plan, unit, preferred=LEVEL, level=level, rounds=rounds)


DETAILS = {"level": "parameter: the geounits fitted", "rounds": "parameter: T, the rounds of the schedule",
           "queries_per_round": "parameter: K, the queries selected and measured in a round",
           "eps_select": "parameter: each selection's eps", "sigma2_measure": "parameter: each measurement's variance",
           "workload": "parameter: the queries", "relaxed_records": "parameter: relaxed records fitted",
           "steps_per_round": "parameter: Adam steps of each round's projection",
           "learning_rate": "parameter: Adam's learning rate"}
