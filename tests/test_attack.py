"""Reconstruction audit: workload, RAP gradients, RAP-Rank, baselines, integer programming, CLI."""

from __future__ import annotations

import json
import os

import numpy as np
import pandas as pd
import pytest
from conftest import ROOT

from das.attack import ip, rap
from das.attack.baselines import frequency_ranking, reference_levels, spread_over_blocks
from das.attack.data import PersonRecords
from das.attack.rank import expected_hits, match_rate_at, match_rate_curve, matches, rank_by, rank_samples, rap_runs
from das.attack.workload import build_workload, load_attack_tables
from das.cli import main
from das.core.errors import SpecError
from das.model.schema import load_schema

GRAND_ISLE = ROOT / "geography_fixtures" / "vt_grand_isle" / "persons.parquet"


@pytest.fixture(scope="module")
def dhc():
    return load_schema("dhc_persons")


@pytest.fixture(scope="module")
def block_workload(dhc):
    return build_workload(dhc, load_attack_tables("dhc_persons"))


def _histogram(schema, records):
    return np.bincount(schema.cell_index(tuple(records.T)), minlength=schema.size)


def _people(rng, n, ages=(0, 90), races=3):
    """Random DHC records: sex, age, hispanic, cenrace (first `races` codes), household."""
    return np.column_stack([rng.integers(0, 2, n), rng.integers(*ages, n), rng.integers(0, 2, n),
                            rng.integers(0, races, n), np.zeros(n, dtype=int)])


# ---------------------------------------------------------------------------------------------
# Workload


def test_workload_answers_equal_schema_marginals(dhc, block_workload):
    rng = np.random.default_rng(1)
    people = _people(rng, 200)
    answers = dict(zip(block_workload.labels, block_workload.answers(people)))
    hist = _histogram(dhc, people)
    p12 = dhc.query("sex x agecat").matrix @ hist
    assert [answers[f"P12:sex={s}|agecat={a}"] for s in dhc.factor_labels("sex")
            for a in dhc.factor_labels("agecat")] == list(p12)
    # a `where` restriction: P12I counts only White alone, not Hispanic
    keep = (people[:, 3] == 0) & (people[:, 2] == 0)
    p12i = dhc.query("sex x agecat").matrix @ _histogram(dhc, people[keep])
    assert [answers[f"P12I:sex={s}|agecat={a}"] for s in dhc.factor_labels("sex")
            for a in dhc.factor_labels("agecat")] == list(p12i)
    assert answers["P1:total"] == 200
    # P14 keeps the 40 cells under 20 only; no cell is empty by construction
    assert sum(label.startswith("P14:") for label in block_workload.labels) == 40


def test_tract_workload_has_block_attribute(dhc):
    tables = load_attack_tables("dhc_persons")
    w = build_workload(dhc, tables, n_blocks=3)
    assert w.attributes[0] == "block" and w.sizes[0] == 3
    n_block = len(build_workload(dhc, tables).labels)
    n_tract = sum(t.level == "tract" for t in tables)
    assert w.n_queries == 3 * n_block + sum(1 for lab in w.labels if not lab.startswith("block"))
    assert n_tract == 3
    rng = np.random.default_rng(2)
    people = np.column_stack([rng.integers(0, 3, 50), _people(rng, 50)])
    answers = dict(zip(w.labels, w.answers(people)))
    assert answers["block1:P1:total"] == (people[:, 0] == 1).sum()
    assert answers["PCT12:sex=Male|age=30"] == ((people[:, 1] == 0) & (people[:, 2] == 30)).sum()


def test_sf1_2010_workload_has_the_published_lines(dhc):
    """The paper's workload: each table has as many counts as its SF1 lines (less the 'total races
    tallied' sums), and restricted lines count the right people."""
    tables = load_attack_tables("dhc_sf1_2010")
    w = build_workload(dhc, tables, n_blocks=1)
    per_table = {}
    for label in w.labels:
        table = label.removeprefix("block0:").split(":")[0].split("_")[0]
        per_table[table] = per_table.get(table, 0) + 1
    assert per_table == {"P1": 1, "P6": 6, "P7": 12, "P9": 73, "P11": 73, "P12": 49, "P14": 43,
                         **{f"P12{x}": 49 for x in "ABCDEFGHI"}, **{f"PCT12{x}": 209 for x in "ABCDEFGHIJKLMN"}}
    rng = np.random.default_rng(3)
    people = np.column_stack([rng.integers(0, 2, 400), rng.integers(0, 116, 400), rng.integers(0, 2, 400),
                              rng.integers(0, 63, 400), np.zeros(400, dtype=int)])
    answers = dict(zip(w.labels, w.answers(np.column_stack([np.zeros(400, dtype=int), people]))))
    races = [dhc.factor_labels("cenrace")[c].split("+") for c in people[:, 3]]
    white = np.array(["White" in r for r in races])
    several = np.array([len(r) > 1 for r in races])
    assert answers["block0:P6_White:total"] == white.sum()
    assert answers["block0:P7_White:hispanic=Hispanic or Latino"] == (white & (people[:, 2] == 1)).sum()
    assert answers["block0:P11_not_hispanic_two_or_more:total"] == (
        several & (people[:, 2] == 0) & (people[:, 1] >= 18)).sum()
    assert answers["PCT12H_110:sex=Female"] == ((people[:, 0] == 1) & (people[:, 2] == 1) & (people[:, 1] >= 110)).sum()
    assert answers["PCT12A:total"] == (people[:, 3] == 0).sum()


def test_bad_workload_spec_is_named(tmp_path, dhc):
    bad = tmp_path / "bad.toml"
    bad.write_text('[block.X]\nqueries = ["sex x colour"]\n')
    with pytest.raises(SpecError, match="colour"):
        build_workload(dhc, load_attack_tables(bad))
    bad.write_text('[county.X]\nqueries = ["sex"]\n')
    with pytest.raises(SpecError, match="county"):
        load_attack_tables(bad)


# ---------------------------------------------------------------------------------------------
# RAP


@pytest.mark.parametrize("method", ["sparse", "dense", "intervals"])
def test_mask_operator_matches_dense_masks(block_workload, method):
    rng = np.random.default_rng(3)
    for masks, d in zip(block_workload.masks, block_workload.sizes):
        probs = rap.softmax(rng.standard_normal((d, 7)))
        op = rap.MaskOperator.from_masks(masks, np.float64, method)
        expected = masks.astype(float) @ probs
        expected[0] = 1.0
        assert np.allclose(op.apply(probs), expected)
        # the adjoint is the transpose (row 0, the constant, has no gradient)
        g = rng.standard_normal((masks.shape[0], 7))
        g0 = g.copy()
        g0[0] = 0
        assert np.allclose(op.adjoint(g.copy()), masks.T.astype(float) @ g0)
    ages = block_workload.masks[block_workload.attributes.index("age")]
    op = rap.MaskOperator.from_masks(ages, np.float64, "intervals")
    assert op.general is None and op.intervals.nnz > 0  # age groups and single years are intervals


@pytest.mark.parametrize("n_blocks, method", [(None, "sparse"), (None, "dense"), (None, "intervals"), (3, "auto")])
def test_gradient_matches_finite_differences(dhc, n_blocks, method):
    w = build_workload(dhc, load_attack_tables("dhc_persons"), n_blocks=n_blocks)
    rng = np.random.default_rng(4)
    ops = rap.mask_operators(w, "float64", method)
    logits = [rng.standard_normal((d, 6)) for d in w.sizes]
    targets = rng.random(w.n_queries) * 0.2
    batch = rng.choice(w.n_queries, 60, replace=False)
    loss, grads = rap.loss_and_gradient(w, ops, logits, targets, batch=batch)
    assert loss > 0
    eps = 1e-6
    for a in range(len(logits)):
        for _ in range(6):
            i, k = rng.integers(logits[a].shape[0]), rng.integers(6)
            up = [z.copy() for z in logits]
            down = [z.copy() for z in logits]
            up[a][i, k] += eps
            down[a][i, k] -= eps
            numeric = (rap.loss_and_gradient(w, ops, up, targets, batch=batch)[0]
                       - rap.loss_and_gradient(w, ops, down, targets, batch=batch)[0]) / (2 * eps)

            assert grads[a][i, k] == pytest.approx(numeric, rel=1e-5, abs=1e-9)


def test_relaxed_answers_of_one_hot_records_are_exact(block_workload):
    rng = np.random.default_rng(5)
    people = _people(rng, 40)
    probs = [np.eye(d)[:, people[:, a]] for a, d in enumerate(block_workload.sizes)]
    ops = rap.mask_operators(block_workload, "float64")
    relaxed = rap.relaxed_answers(block_workload, ops, probs)
    assert np.allclose(relaxed * 40, block_workload.answers(people))


def test_fit_reduces_error_and_samples_valid_records(block_workload):
    rng = np.random.default_rng(6)
    people = _people(rng, 15)
    targets = block_workload.answers(people) / 15
    config = rap.RapConfig(n_relaxed=200, steps=300)
    ops = rap.mask_operators(block_workload, config.dtype)
    start = [rap.softmax(rng.standard_normal((d, 200)).astype(np.float32)) for d in block_workload.sizes]
    before = np.sqrt(np.mean((rap.relaxed_answers(block_workload, ops, start) - targets) ** 2))
    probs, rmse = rap.fit(block_workload, targets, config, rng)
    assert rmse < before / 10
    sample = rap.sample_records(probs, 500, rng)
    assert sample.shape == (500, 5)
    assert ((sample >= 0) & (sample < np.array(block_workload.sizes))).all()


# ---------------------------------------------------------------------------------------------
# Ranking and scoring


def test_rank_by_frequency_ties_grouped_and_confidence():
    a, b, c = [0, 1], [1, 1], [2, 0]
    samples = [np.array([a, a, b]), np.array([a, c]), np.array([a, b])]
    ranked = rank_samples(samples)
    assert ranked.records[0].tolist() == a and ranked.count.tolist() == [4, 2, 1]
    assert ranked.confidence.tolist() == [1.0, 2 / 3, 1 / 3] and ranked.tie.tolist() == [0, 1, 2]
    assert len(rank_samples(samples, min_confidence=0.5)) == 2
    ties = [np.array([[i, 0]]) for i in range(6)]
    assert rank_samples(ties).tie.tolist() == [0] * 6  # six records seen once: one tie group


def test_rank_by_orders_by_keys_and_groups_ties():
    order, tie = rank_by(np.array([2, 5, 2, 2, 7]), np.array([0, 0, 1, 0, 0]))
    assert order.tolist() == [4, 1, 2, 0, 3] and tie.tolist() == [0, 1, 2, 3, 3]
    order, tie = rank_by(np.zeros(0))
    assert order.tolist() == [] and tie.tolist() == []


def test_multiset_scores_copies():
    rec = [3, 3]
    samples = [np.array([rec, rec]), np.array([rec]), np.array([rec, rec, rec])]
    ranked = rank_samples(samples, multiset=True)
    assert ranked.copy.tolist() == [1, 2, 3] and ranked.count.tolist() == [3, 2, 1]
    truth = np.array([rec, rec, [0, 0]])
    assert matches(ranked, truth).tolist() == [True, True, False]
    set_ranked = rank_samples(samples)
    assert matches(set_ranked, truth).tolist() == [True]


def test_match_rate():
    hits = np.array([True, False, True, True])
    assert match_rate_curve(hits).tolist() == [1.0, 0.5, 2 / 3, 0.75]
    assert match_rate_at(hits, 2) == 0.5
    assert match_rate_at(hits, 8) == 3 / 8  # missing candidates are misses


def test_match_rate_is_the_expected_value_over_ties():
    """Scores 5, 3, 3, 3, 1 with hits on the first, one of the three tied, and the last: the tie
    group holds 1 hit in 3 slots, so @2 expects 1 + 1/3 hits, @3 1 + 1/3 + 1/3, @4 2."""
    hits = np.array([True, True, False, False, True])
    expected = expected_hits(hits, np.array([0, 1, 1, 1, 2]))
    assert match_rate_at(expected, 1) == 1.0
    assert match_rate_at(expected, 2) == pytest.approx((1 + 1 / 3) / 2)
    assert match_rate_at(expected, 3) == pytest.approx((1 + 2 / 3) / 3)
    assert match_rate_at(expected, 4) == pytest.approx(2 / 4)
    assert match_rate_at(expected, 5) == pytest.approx(3 / 5)
    assert match_rate_at(expected, 10) == pytest.approx(3 / 10)
    # the order of the hits inside the tie group does not matter
    moved = expected_hits(np.array([True, False, False, True, True]), np.array([0, 1, 1, 1, 2]))
    assert np.array_equal(moved, expected)
    # agrees with averaging over every order of the tied positions
    from itertools import permutations

    by_order = [match_rate_at(np.concatenate([[True], np.array(p), [True]]), 3)
                for p in permutations([True, False, False])]
    assert match_rate_at(expected, 3) == pytest.approx(np.mean(by_order))


def test_baseline_ranking_ties_are_averaged():
    """Reference counts 3, 1, 1, 1, 1: k = 3 takes the top record and 2 of the 4 tied ones."""
    reference = np.array([[0, 0]] * 3 + [[1, 0], [2, 0], [3, 0], [4, 0]])
    ranking = frequency_ranking(reference)
    assert ranking.tie.tolist() == [0, 1, 1, 1, 1]
    truth = np.array([[0, 0], [2, 0], [9, 9]])
    rate = match_rate_at(expected_hits(matches(ranking, truth), ranking.tie), 3)
    assert rate == pytest.approx((1 + 1 * 2 / 4) / 3)


def test_spread_over_blocks_keeps_whole_tie_groups():
    ranking = frequency_ranking(np.array([[0, 0], [0, 0], [1, 0], [2, 0]]))  # counts 2, 1, 1
    spread = spread_over_blocks(ranking, np.array([3, 3]), limit=3)
    # scores 6, 6 (record 0 in either block), then 3 x 4: the limit falls in the second group
    assert spread.count.tolist() == [6, 6, 3, 3, 3, 3] and spread.tie.tolist() == [0, 0, 1, 1, 1, 1]
    assert len(spread_over_blocks(ranking, np.array([3, 3]), limit=2)) == 2


def _records(schema, blocks, block, levels):
    return PersonRecords(schema, np.asarray(blocks), np.asarray(block), np.asarray(levels))


def test_baselines_leave_the_geounit_out(dhc):
    blocks = ["500010000011000", "500010000011001", "500010000021000"]  # two tracts
    levels = np.array([[0, 1, 0, 0, 0], [0, 1, 0, 0, 0], [1, 2, 0, 0, 0], [1, 3, 0, 0, 0], [1, 3, 0, 0, 0]])
    truth = _records(dhc, blocks, [0, 0, 1, 2, 2], levels)
    rest_of_tract = reference_levels(truth, "block", blocks[0], "tract")
    assert rest_of_tract.tolist() == [[1, 2, 0, 0, 0]]
    rest_of_county = reference_levels(truth, "block", blocks[0], "county")
    ranking = frequency_ranking(rest_of_county)
    assert ranking.records[0].tolist() == [1, 3, 0, 0, 0] and ranking.count.tolist() == [2, 1]
    spread = spread_over_blocks(ranking, np.array([1, 5]))
    assert spread.records[0].tolist() == [1, 1, 3, 0, 0, 0]  # the biggest block, the commonest record


def test_rap_rank_beats_tract_baseline_on_exact_tables(dhc):
    """A synthetic block: exact tables let RAP-Rank find its records; the rest of the tract does not."""
    rng = np.random.default_rng(7)
    rest = _people(rng, 400, ages=(0, 90), races=6)
    block = _people(rng, 12, ages=(0, 90), races=6)
    workload = build_workload(dhc, load_attack_tables("dhc_persons"))
    samples, _ = rap_runs(workload, workload.answers(block) / 12, 12, runs=8,
                          config=rap.RapConfig(n_relaxed=300, steps=400), seed=1, workers=1)
    ranked = rank_samples(samples)
    baseline = frequency_ranking(rest)
    u = len(np.unique(block, axis=0))
    rap_rate = match_rate_at(expected_hits(matches(ranked, block), ranked.tie), u)
    base_rate = match_rate_at(expected_hits(matches(baseline, block), baseline.tie), u)
    # adults' single-year ages are published only in age groups, so perfection is not expected
    assert base_rate <= 0.1 and rap_rate >= base_rate + 0.3


def test_parallel_runs_equal_serial_runs(block_workload):
    rng = np.random.default_rng(8)
    people = _people(rng, 5)
    config = rap.RapConfig(n_relaxed=50, steps=20)
    args = (block_workload, block_workload.answers(people) / 5, 5)
    serial, _ = rap_runs(*args, runs=2, config=config, seed=3, workers=1)
    parallel, _ = rap_runs(*args, runs=2, config=config, seed=3, workers=2)
    assert all(np.array_equal(s, p) for s, p in zip(serial, parallel))


# ---------------------------------------------------------------------------------------------
# Integer programming


def test_ip_recovers_unique_block_and_certainty(block_workload, dhc):
    """Everyone under 20 (P14 publishes sex by single-year age), one race, households: unique."""
    people = np.array([[0, 3, 0, 0, 0], [0, 3, 0, 0, 0], [1, 7, 0, 0, 0], [1, 15, 0, 0, 0], [0, 19, 0, 0, 0]])
    problem = ip.build_problem(block_workload, block_workload.answers(people))
    solver = ip.Solver(problem)
    first = solver.feasible()
    recovered = np.repeat(problem.cells, first, axis=0)
    assert sorted(map(tuple, recovered)) == sorted(map(tuple, people))
    v = ip.variability(solver, first)
    assert v.unique is True and v.certain_records == 5
    cert = ip.certainty(solver, np.array([[0, 3, 0, 0, 0], [1, 7, 0, 0, 0], [1, 8, 0, 0, 0]]), first)
    assert cert.tolist() == [2, 1, 0]


def test_ip_ambiguous_block_is_not_certain(block_workload):
    """Ages 30 and 33 fall in one published age group (30-34): neither age is certain."""
    people = np.array([[0, 30, 0, 0, 0], [0, 33, 0, 0, 0]])
    problem = ip.build_problem(block_workload, block_workload.answers(people))
    solver = ip.Solver(problem)
    first = solver.feasible()
    assert first.sum() == 2 and np.array_equal(problem.matrix @ first, problem.counts)
    v = ip.variability(solver, first)
    assert v.unique is False and v.certain_records == 0
    assert ip.certainty(solver, people, first).tolist() == [0, 0]


# ---------------------------------------------------------------------------------------------
# Command line


def test_cli_attack_writes_outputs(tmp_path, capsys):
    out = tmp_path / "audit"
    code = main(["attack", "--truth", str(GRAND_ISLE), "--published", "exact", "--schema", "dhc_persons", "--geounits",
                 "500130202002042", "--runs", "2", "--steps", "60", "--relaxed", "100", "--workers", "1",
                 "--baselines", "tract,county", "--out", str(out)])
    assert code == 0
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary["match_rate"]) == {"rap_rank", "baseline_tract", "baseline_county"}
    assert summary["geounits"][0]["published_total"] == 18
    candidates = pd.read_parquet(out / "candidates.parquet")
    assert {"QSEX", "QAGE", "CENHISP", "CENRACE", "GQTYPE_PL", "confidence", "matched", "ip_min_count"} <= set(candidates)
    assert (candidates["rank"].diff().dropna() == 1).all()
    curves = pd.read_csv(out / "match_rate.csv")
    assert curves["match_rate"].between(0, 1).all()
    for name in ("match_rate.png", "certainty.csv", "summary.md"):
        assert (out / name).stat().st_size > 0


def test_cli_attack_with_the_sf1_2010_tables(tmp_path):
    out = tmp_path / "audit"
    code = main(["attack", "--truth", str(GRAND_ISLE), "--published", "exact", "--schema", "dhc_persons",
                 "--geounits", "500130202002042", "--tables", "dhc_sf1_2010", "--runs", "2", "--steps", "30",
                 "--relaxed", "60", "--workers", "1", "--baselines", "county", "--ip-top", "5", "--out", str(out)])
    assert code == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["options"]["tables"] == "dhc_sf1_2010" and summary["geounits"][0]["queries"] == 698


@pytest.mark.parametrize("args, message", [
    (["--published", "/nonexistent/run"], "no manifest.json"),
    (["--published", "exact", "--geounits", "5001302"], "15-digit block geocode"),
    (["--published", "exact", "--baselines", "planet"], "unknown scope"),
    (["--published", "exact", "--runs", "0"], "argument --runs: expected an integer of at least 1, got 0"),
])
def test_cli_errors_are_clear(tmp_path, capsys, args, message):
    try:
        code = main(["attack", "--truth", str(GRAND_ISLE), "--out", str(tmp_path / "o"), "--workers", "1", *args])
    except SystemExit as stopped:  # refused while parsing
        code = stopped.code
    assert code == 2
    assert message in capsys.readouterr().err


def test_cli_missing_truth_file(tmp_path, capsys):
    code = main(["attack", "--truth", str(tmp_path / "none.parquet"), "--published", "exact",
                 "--out", str(tmp_path / "o")])
    assert code == 2
    assert "file not found" in capsys.readouterr().err


def test_block_with_nothing_published_counts_as_misses(dhc):
    from das.attack.audit import AuditOptions, attack_geounit, pooled_rates

    blocks = ["500010000011000", "500010000011001"]
    people = np.array([[0, 40, 0, 0, 0], [1, 41, 0, 0, 0], [1, 42, 0, 0, 0]])
    truth = _records(dhc, blocks, [0, 0, 1], people)
    release = _records(dhc, blocks, [1, 1, 1], people)  # the release moved everyone to block 1
    result = attack_geounit(blocks[0], release, truth, AuditOptions(runs=2, workers=1, baselines=("tract",)),
                            tables=load_attack_tables("dhc_persons"))
    assert result.published_total == 0 and result.true_total == 2 and len(result.candidates) == 0
    rates = pooled_rates([result])
    assert rates["rap_rank"]["k"]["1"] == 0.0 and rates["rap_rank"]["k_over_u"]["1.0"] == 0.0
    assert rates["baseline_tract"]["k"]["1"] == 0.0  # the rest of the tract is someone aged 42


def test_equal_reference_populations_give_equal_rates(dhc):
    """A county of one tract: the rest of the tract and of the county are the same people, so the
    two baselines score the same, whatever the attack's seed and RAP ranking."""
    from das.attack.audit import AuditOptions, attack_geounit

    rng = np.random.default_rng(5)
    blocks = ["500010000011000", "500010000011001", "500010000011002"]
    people = _people(rng, 90, ages=(0, 6), races=2)
    truth = _records(dhc, blocks, rng.integers(0, 3, 90), people)
    rates = []
    for seed in (0, 1):
        options = AuditOptions(runs=2, workers=1, seed=seed, rap=rap.RapConfig(n_relaxed=40, steps=20),
                               baselines=("tract", "county"), ip_top=0)
        result = attack_geounit(blocks[0], truth, truth, options, tables=load_attack_tables("dhc_persons"))
        u = result.distinct_true
        assert np.array_equal(result.hits["baseline_tract"], result.hits["baseline_county"])
        rates.append([match_rate_at(result.hits[m], k) for m in ("baseline_tract", "baseline_county") for k in (1, 5, u)])
    assert rates[0] == rates[1] and 0 < max(rates[0]) <= 1


def test_cli_tract_attack_on_a_release(tmp_path):
    """A PL94 release of the tiny fixture, attacked a tract at a time: block-located candidates."""
    from das.driver.run import run

    release = tmp_path / "release"
    run(ROOT / "specs/runs/tiny.toml", release, seed=1, workers=1, progress=False)
    out = tmp_path / "audit"
    code = main(["attack", "--truth", str(ROOT / "geography_fixtures/tiny/persons.csv"), "--published", str(release),
                 "--level", "tract", "--count", "1", "--runs", "2", "--steps", "30", "--relaxed", "50",
                 "--workers", "1", "--baselines", "county", "--out", str(out)])
    assert code == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["schema"] == "pl94_persons" and summary["level"] == "tract"
    assert summary["published"].startswith("release") and len(summary["geounits"]) == 1
    tract = summary["geounits"][0]["geocode"]
    candidates = pd.read_parquet(out / "candidates.parquet")
    assert candidates["block"].str.startswith(tract).all() and candidates["block"].str.len().eq(15).all()
    assert {"CENRACE", "CENHISP", "GQTYPE_PL", "VOTING_AGE"} <= set(candidates)
    assert set(summary["match_rate"]) == {"rap_rank", "baseline_county"}


def test_cli_attack_output_is_confidential_its_own_and_outside_the_release(tmp_path, capsys):
    import pyarrow.parquet as pq

    from das.driver.run import run
    from das.frame import outdir
    from das.validate import validate_run

    release = run(ROOT / "specs/runs/tiny.toml", tmp_path / "release", seed=1, workers=1, progress=False).out_dir
    out = tmp_path / "audit"
    argv = ["attack", "--truth", str(ROOT / "geography_fixtures/tiny/persons.csv"), "--published", str(release),
            "--count", "1", "--runs", "2", "--steps", "20", "--relaxed", "50", "--ip-top", "0", "--workers", "1",
            "--baselines", "county", "--out", str(out)]
    assert main(argv) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["confidential"] is True and summary["notice"] == outdir.CONFIDENTIAL_MARK
    assert pq.read_schema(out / "candidates.parquet").metadata[outdir.CONFIDENTIAL_KEY] == outdir.CONFIDENTIAL_MARK.encode()
    assert (out / "summary.md").read_text().count(outdir.CONFIDENTIAL_MARK) == 1
    record = json.loads((out / outdir.RECORD).read_text())
    assert record["confidential"] is True and set(record["files"]) == {"candidates.parquet", "match_rate.csv",
                                                                        "match_rate.png", "certainty.csv",
                                                                        "summary.json", "summary.md"}
    capsys.readouterr()
    assert main(argv) == 2 and "pass --overwrite" in capsys.readouterr().err  # an attack is not redone unasked
    (out / "summary.json").write_text("{}")
    assert main([*argv, "--overwrite"]) == 0
    assert json.loads((out / "summary.json").read_text())["match_rate"] == summary["match_rate"]  # seeded: the same
    assert validate_run(release).ok  # nothing was written into the release


def test_the_attack_plot_names_its_series_with_n_and_uncertainty(tmp_path, monkeypatch):
    import matplotlib.figure

    from das.attack.audit import GeounitResult, _plot
    from das.attack.rank import Candidates
    from das.research import series

    drawn = []
    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", lambda fig, *a, **k: drawn.append(fig))
    nothing = Candidates(np.zeros((0, 2), np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64), 1)
    results = [GeounitResult(g, 4, 4, 4, 10, 0.1, 0.0, {m: np.array([1.0, 0, 0, 0]) for m in ("rap_rank", "baseline_tract")},
                             nothing, np.zeros(0, bool)) for g in ("1", "2", "3")]
    _plot(results, tmp_path / "m.png", "Match-Rate@k, block attack on release r1")
    fig = drawn[0]
    labels = [t.get_text() for legend in fig.legends for t in legend.get_texts()]
    assert labels == ["RAP-Rank (n = 3 geounits)", "baseline: rest of the tract (n = 3 geounits)"]
    assert all(len(ax.collections) == 2 for ax in fig.axes)  # a band (Wilson, z = 2) per series
    assert "Wilson score intervals at z = 2" in fig.get_suptitle()
    assert fig.axes[0].get_lines()[0].get_color() == series.color("rap_rank")
    assert str(tmp_path) not in fig.get_suptitle()


def test_no_solver_banner_reaches_the_attack_output(tmp_path):
    import subprocess
    import sys

    truth = str(ROOT / "geography_fixtures/tiny/persons.csv")
    done = subprocess.run([sys.executable, "-m", "das.cli", "attack", "--truth", truth,
                           "--published", "exact", "--out", str(tmp_path / "a"), "--runs", "2", "--relaxed", "30",
                           "--steps", "20", "--count", "2", "--workers", "1"], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0 and "HiGHS" not in done.stdout + done.stderr  # the IP ran (--ip-top 50) in a fresh process
    assert "certain" in done.stdout
