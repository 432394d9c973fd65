"""benchmarks/stress.py: its problems are the engine's (the same answers, chains, bounds and passes), its draws are
reproducible, and a crash or an uncertified optimum is counted, never lost."""

from __future__ import annotations

import json
from dataclasses import replace
from fractions import Fraction

import numpy as np
import pytest

from benchmarks import stress
from das.driver.runspec import load_run_spec
from das.model.geography import Geography
from das.privacy.randomness import make_random_source
from das.topdown import batch, engine
from das.topdown.measure import Measured, Target, measure_release
from das.topdown.problem import ParentSolution


def _engine_chains(geography, level, lo, hi, monkeypatch):
    monkeypatch.setattr(batch.nmf, "level_index", lambda path, n_units: path)  # no NMF: the walk only
    return [(c.index, c.units.tolist(), c.rows.tolist())
            for c in batch.single_child_chains(geography, lambda finer: finer, level, lo=lo, hi=hi)]


def test_chain_walk_is_the_engines(monkeypatch):
    blocks = ["500010001001001",                      # county 001: one tract, one block group, one block
              "500030001001001", "500030001001002",  # county 003: a tract with one block group of two blocks,
              "500030002001001", "500030002002001"]  # and a tract with two block groups
    for geography in (Geography.from_blocks(blocks),
                      Geography.from_blocks(blocks, ("nation", "state", "county", "tract", "block"))):
        for level in geography.levels:
            above = geography.parent_level(level)
            offsets = geography.child_ranges(above) if above else np.array([0, 1])
            for lo, hi in [(0, geography.n_units(level)), *zip(offsets[:-1].tolist(), offsets[1:].tolist())]:
                ours = [(lv, u.tolist(), r.tolist()) for lv, u, r in stress.chain_units(geography, level, lo, hi)]
                assert ours == _engine_chains(geography, level, lo, hi, monkeypatch)
    deep = stress.chain_units(Geography.from_blocks(blocks), "county", 0, 2)
    assert [(lv, u.tolist(), r.tolist()) for lv, u, r in deep] == [("tract", [0], [0]), ("block_group", [0], [0]),
                                                                   ("block", [0], [0])]


def _same_answers(a, b):
    assert (a.query, a.level, a.variance) == (b.query, b.level, b.variance)
    assert np.array_equal(np.asarray(a.geocodes, dtype=str), np.asarray(b.geocodes, dtype=str))
    assert np.array_equal(a.answers, b.answers)


def _same_problem(a, b):
    assert (a.parent, a.children, a.passes) == (b.parent, b.children, b.passes)
    for name in ("cells", "parent_counts", "allowed"):
        assert np.array_equal(getattr(a, name), getattr(b, name)), name
    assert len(a.queries) == len(b.queries)
    for qa, qb in zip(a.queries, b.queries):
        _same_answers(qa.noisy, qb.noisy)
        assert (qa.matrix != qb.matrix).nnz == 0
        assert (qa.rows is None and qb.rows is None) or np.array_equal(qa.rows, qb.rows)
    ca, cb = a.constraints, b.constraints
    assert (ca is None) == (cb is None)
    if ca is not None:
        assert (ca.matrix != cb.matrix).nnz == 0
        assert np.array_equal(ca.lower, cb.lower) and np.array_equal(ca.upper, cb.upper)


def test_problems_are_the_engines(tmp_path, monkeypatch):
    """At a budget so large that every draw of the noise is 0, the engine (from an NMF measured by das) and the
    harness (its own draw) must hand the solver the same problems: the root's arguments and every parent's."""
    spec = load_run_spec("tiny")
    s = replace(stress.read_setup("tiny", spec.persons_path, spec.units_path, spec=spec, strategy=spec.persons.strategy,
                                  levels=spec.levels), rho=Fraction(10**6))  # variances below 0.01: every draw 0
    budget = 1
    measure_release(Measured("persons", s.schema, s.plan(budget)), s.geography, s.histograms,
                    rng=make_random_source(1), target=Target(tmp_path))
    seen = {}
    stress_root, stress_parent = engine.solve_root, batch.solve_parent

    def root(schema, answers, bounds, *, settings, descendants):
        seen["root"] = (answers, bounds, settings, descendants)
        return stress_root(schema, answers, bounds, settings=settings, descendants=descendants)

    def parent(problem, solver, rounding):
        seen[problem.parent] = (problem, solver, rounding)
        return stress_parent(problem, solver=solver, rounding=rounding)

    monkeypatch.setattr(engine, "solve_root", root)
    monkeypatch.setattr(batch, "solve_parent", parent)
    solved, _ = engine.postprocess("persons", s.schema, s.geography, s.invariants, nmf_dir=tmp_path, options=s.options)
    assert (solved != s.histograms).nnz == 0  # no noise: the truth, so the parents below are the true ones too

    ours = stress.built(stress.prepared(s, "nation", None, budget), make_random_source(2))
    answers, bounds, settings, descendants = seen["root"]
    assert settings == ours.settings and settings.passes == (("hhgq", "hhinstlevels"), ())
    assert len(answers) == len(ours.own) and len(descendants) == len(ours.finer) > 0
    for a, b in zip(answers, ours.own):
        _same_answers(a, b)
    for a, b in zip(descendants, ours.finer):
        _same_answers(a.answers, b.answers)
        assert np.array_equal(a.rows, b.rows)
    for a, b in zip(bounds, ours.prepared.bounds):
        assert a.query == b.query and np.array_equal(a.lower, b.lower) and np.array_equal(a.upper, b.upper)

    compared = 0
    for level in s.geography.levels[:-1]:
        for p, geocode in enumerate(s.geography.units(level)):
            problem, solver, rounding = seen[str(geocode)]
            mine = stress.built(stress.prepared(s, level, p, budget), make_random_source(3))
            _same_problem(problem, mine.problem)
            assert (solver, rounding) == (mine.settings.solver, mine.settings.rounding)
            compared += 1
    assert compared == sum(s.geography.n_units(level) for level in s.geography.levels[:-1])
    assert any(q.rows is not None for key, (problem, *_) in seen.items() if key != "root"
               for q in problem.queries)  # a chain below the root was compared (tiny has a one-tract county)


def test_draws_are_reproducible_and_independent():
    case = stress.find_case("roots/vt/six/1")
    a, b, c = stress.build(case, 3), stress.build(case, 3), stress.build(case, 4)
    assert all(np.array_equal(x.answers, y.answers) for x, y in zip(a.own + [f.answers for f in a.finer],
                                                                    b.own + [f.answers for f in b.finer]))
    assert not all(np.array_equal(x.answers, y.answers) for x, y in zip(a.own, c.own))
    assert stress.find_case("roots/vt/six/10").budget == 10


def test_a_crash_is_counted_and_located(monkeypatch):
    case = stress.Case("roots/vt/six/1", "vt", "six", "nation", 1)

    def boom(self):
        raise OverflowError("cannot convert float infinity to integer")

    monkeypatch.setattr(stress.Built, "solve", boom)
    record = stress.solve_draw(case, 0)
    assert record["crash"] == "OverflowError" and "infinity" in record["message"]
    assert record["where"].startswith("test_stress.py:")
    assert stress.failures([record])[0]["kinds"] == ["crash"]
    row = stress.Tally(case.name, records=[record]).row()
    assert (row["draws"], row["crashes"]) == (1, 1)


def test_uncertified_failsafe_and_fallback_are_counted(monkeypatch):
    case = stress.Case("roots/vt/six/1", "vt", "six", "nation", 1)
    certificate = {"problems": 1, "objective": 1.0, "gap": 1.0, "max_rel_gap": 2.4e-6, "retried": 1, "uncertified": 1,
                   "uncertified_at": [{"parent": "", "level": "nation"}]}
    solution = ParentSolution(np.zeros((1, 1), np.int64), np.zeros((1, 1)), [], {}, "milp", certificate)
    monkeypatch.setattr(stress.Built, "solve", lambda self: solution)
    record = stress.solve_draw(case, 0)
    assert stress.failures([record])[0]["kinds"] == ["uncertified", "fallback"]
    assert record["certificate"] == {"uncertified_at": [{"parent": "", "level": "nation"}]}
    row = stress.Tally(case.name, records=[record, {**record, "uncertified": 0, "rounding": "lp"}]).row()
    assert (row["uncertified"], row["fallbacks"], row["retried"], row["max_rel_gap"]) == (1, 1, 2, 2.4e-6)


def test_draw_counts():
    assert stress.draws_wanted("largest/big/county-2400", "largest=2") == 2  # a key given beats every default
    assert stress.draws_wanted("largest/big/county-2400", "") == 20
    assert stress.draws_wanted("roots/vt/six/1", "largest=2") == 120
    assert stress.draws_wanted("roots/vt/six/1", "roots=5,roots/vt=7") == 7  # the longest key
    assert stress.draws_wanted("roots/vtx/six/1", "roots/vt=7,roots=5") == 5  # by whole components
    names = [c.name for c in stress.root_cases()]
    stress.check_draw_keys(names, "roots", "roots=1,roots/hi/five=2,largest/big=3")
    for typo in ("root=1", "roots/vt/seven=1"):
        with pytest.raises(ValueError, match="no group"):
            stress.check_draw_keys(names, "roots", typo)


def test_no_draw_is_an_error_not_a_zero(monkeypatch):
    monkeypatch.setenv("DAS_STRESS_DRAWS", "roots=0")
    with pytest.raises(RuntimeError, match="no case has a draw"):
        stress.run_cases("roots")
    monkeypatch.setenv("DAS_STRESS_DRAWS", "roots=x")
    with pytest.raises(ValueError, match="KEY=N"):
        stress.draws_wanted("roots/vt/six/1")


def test_manifest_figures(tmp_path):
    level = {"l2_certificate": {"uncertified": 1, "retried": 2, "max_rel_gap": 3e-6}, "uncertified": [{"parent": "50"}]}
    manifest = {"status": "complete", "failsafe_events": [{"parent": "50"}],
                "levels_report": {"persons": [level, {"l2_certificate": {}}], "units": [level]},
                "validation": {"valid": False}}
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    assert stress.manifest_figures(tmp_path / "manifest.json") == {
        "status": "complete", "failsafe": 1, "uncertified": 2, "retried": 4, "max_rel_gap": 3e-6, "valid": False,
        "uncertified_at": [{"parent": "50"}, {"parent": "50"}]}
    assert stress.manifest_figures(tmp_path / "missing.json") == {}
