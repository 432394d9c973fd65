"""RAP as a synthesizer (das/mechanisms/rap.py): its charges, its workload, the relaxed records' mixture, and the
relaxed projection it shares with the reconstruction attack (das/attack/rap.py)."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
import scipy.sparse as sp

from das.attack.rap import RapConfig, fit, initial_logits, mask_operators, project, relaxed_answers, softmax
from das.mechanisms import MECHANISMS, SynthesisInput, rap
from das.mechanisms.base import Ledger, Public
from das.mechanisms.domain import Domain
from das.model.geography import Geography
from das.model.schema import load_schema
from das.privacy.randomness import SeededRandomSource

PL94 = load_schema("pl94_persons")


def test_the_plan_spends_the_budget_exactly_in_2TK_equal_parts_beside_the_total():
    rho = Fraction(293764, 114921)
    ledger = Ledger(rho)
    planned = rap.plan(Public(rho, Fraction(1, 10**10), PL94, "tract", 3), ledger)
    assert ledger.spent == sum((c.rho for c in ledger.entries), Fraction(0)) == rho
    total, *steps = ledger.entries
    assert total.rho == rho * rap.TOTAL_SHARE and len(steps) == 2 * 3 * rap.PER_ROUND
    selections = [c for c in steps if c.noise == "exponential mechanism"]
    measurements = [c for c in steps if c.noise == "discrete Gaussian"]
    part = rho * (1 - rap.TOTAL_SHARE) / (2 * 3 * rap.PER_ROUND)
    assert len(selections) == len(measurements) == 3 * rap.PER_ROUND
    # each selection's eps is a multiple of 2^-20 within its part, its measurement takes the rest of the pair's
    assert all(part - Fraction(1, 10**4) * part < c.rho <= part for c in selections)
    assert all(c.rho == 2 * part - s.rho for c, s in zip(measurements, selections))
    assert planned.details["rounds"] == 3 and planned.details["queries_per_round"] == rap.PER_ROUND
    assert set(planned.details) == set(rap.DETAILS)


def test_a_query_score_moves_by_at_most_its_declared_share_of_delta():
    """A count moves by at most 1 when a record is added, removed or changed: 1 <= (70/99) x (99/70) and
    (70/99)^2 <= 1/2, so a record moving between two tracts is covered by eps^2/8 (Ledger.exponential)."""
    assert rap.ADD_REMOVE * rap.SENSITIVITY == 1 and rap.ADD_REMOVE ** 2 <= Fraction(1, 2)
    truth = np.array([0, 3, 7, 10])
    relaxed = np.array([0.001, 0.004, 0.0071, 0.2])
    for change in (-1, 1):
        moved = rap._scores(truth + change, relaxed, 1000) - rap._scores(truth, relaxed, 1000)
        assert np.abs(moved).max() <= 1 << rap.SCORE_BITS


def test_the_workload_is_every_block_table_cell_in_every_block_and_the_tracts_detailed_cells():
    queries = rap.workload(PL94, 3)
    labels = queries.labels
    block_cells = sum(1 for label in labels if label.startswith("block0:"))
    assert block_cells == sum(1 for label in labels if label.startswith("block2:")) > 0
    assert sum(1 for label in labels if label.startswith("detailed:")) == PL94.size
    assert queries.n_queries == 3 * block_cells + PL94.size
    assert queries.attributes == ("block", *PL94.names)


def test_the_mixture_answers_every_query_as_the_relaxed_records_do():
    """The histogram the release is rounded from is the relaxed records' own distribution: each workload query's
    sum over it equals the relaxed answer (das.attack.rap.relaxed_answers)."""
    n_blocks = 3
    queries = rap.workload(PL94, n_blocks)
    config = RapConfig(n_relaxed=50, dtype="float64")
    rng = np.random.default_rng(0)
    probs = [softmax(z) for z in initial_logits(queries, config, rng)]
    joint = rap.mixture(probs, PL94)
    assert joint.shape == (Domain(PL94, n_blocks).size,) and joint.sum() == pytest.approx(1.0)
    cells = np.arange(joint.size)
    records = np.column_stack([cells // PL94.size, *PL94.cell_levels(cells % PL94.size)])
    inside = np.ones((queries.n_queries, joint.size), dtype=bool)
    for a, masks in enumerate(queries.masks):
        inside &= masks[queries.index[:, a]][:, records[:, a]]
    expected = relaxed_answers(queries, mask_operators(queries, "float64"), probs)
    assert inside.astype(float) @ joint == pytest.approx(expected, abs=1e-9)


def test_the_projection_fits_the_measured_queries_and_leaves_the_attacks_fit_as_it_was():
    """The shared relaxed projection: from a random start, Adam on a subset of queries brings their relaxed
    answers to the targets; the attack's fit is that projection over every query from the same start."""
    queries = rap.workload(PL94, 2)
    operators = mask_operators(queries, "float32")
    rng = np.random.default_rng(1)
    targets = relaxed_answers(queries, operators, [softmax(z) for z in initial_logits(queries, RapConfig(), rng)])
    subset = np.sort(rng.choice(queries.n_queries, 40, replace=False))
    config = RapConfig(n_relaxed=200, steps=400, learning_rate=0.05, batch_size=40)
    start = initial_logits(queries, config, np.random.default_rng(2))
    before = np.abs(relaxed_answers(queries, operators, [softmax(z) for z in start], queries=subset) - targets[subset])
    fitted = project(queries, operators, [z.copy() for z in start], targets, config=config,
                     rng=np.random.default_rng(3), queries=subset)
    after = np.abs(relaxed_answers(queries, operators, [softmax(z) for z in fitted], queries=subset) - targets[subset])
    assert np.sqrt(np.mean(after ** 2)) < 0.2 * np.sqrt(np.mean(before ** 2))
    short = RapConfig(n_relaxed=200, steps=50)
    probs, _ = fit(queries, targets, short, np.random.default_rng(4))
    same = np.random.default_rng(4)
    again = project(queries, operators, initial_logits(queries, short, same), targets, config=short, rng=same)
    assert all(np.array_equal(p, softmax(z)) for p, z in zip(probs, again))


def test_a_tract_released_at_a_large_budget_is_close_to_the_truth():
    """At rho 1000 the noise is negligible: the release's block totals and tract total follow the truth (the error
    left is the relaxed fit's, over T K measured queries)."""
    rng = np.random.default_rng(5)
    n_blocks = 4
    truth = np.zeros((n_blocks, PL94.size), dtype=np.int64)
    cells = [PL94.cell_index((0, va, 0, race)) for va in (0, 1) for race in (0, 1)]
    for block, cell in zip(rng.choice(n_blocks, 400, p=[0.4, 0.3, 0.2, 0.1]), rng.choice(cells, 400)):
        truth[block, cell] += 1
    geocodes = np.array([f"50013000100{1000 + b:04d}" for b in range(n_blocks)])
    rho = Fraction(1000)
    data = SynthesisInput(PL94, Geography.from_blocks(geocodes), sp.csr_matrix(truth), rho, Fraction(1, 10**10),
                          SeededRandomSource(0), Ledger(rho))
    out = MECHANISMS["rap"].run(data).histograms.toarray()
    assert abs(int(out.sum()) - 400) <= 2
    assert np.abs(out.sum(axis=1) - truth.sum(axis=1)).max() <= 12
    assert data.ledger.spent == rho
