"""Accuracy where users look: the least-squares optimum (certified), one-child levels, persons vs units."""

import re
from fractions import Fraction
from pathlib import Path

import cvxpy as cp
import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
from conftest import ROOT

from das.driver.run import run
from das.io.nmf import NoisyAnswers
from das.model.rules import Bounds, Invariants, block_bounds
from das.model.schema import load_schema
from das.privacy.accounting import allocate
from das.privacy.strategy import load_strategy
from das.topdown import engine, matrices, optimality, solve
from das.topdown.problem import ChildAnswers, measured, parent_problem, root_problem
from das.validate import validate_run

FIXTURES = ROOT / "geography_fixtures"


@pytest.fixture(scope="module")
def state_root():
    """A state-sized root problem: 600k persons in few of PL94's 2016 cells, the production nation queries."""
    schema = load_schema("pl94_persons")
    rng = np.random.default_rng(5)
    truth = np.zeros(schema.size, dtype=np.int64)
    occupied = rng.choice(schema.size, 160, replace=False)
    truth[occupied] = np.maximum(1, rng.pareto(0.7, 160) * 40).astype(np.int64)
    truth[occupied[0]] += 600_000 - truth.sum() if truth.sum() < 600_000 else 0
    allocation = allocate(load_strategy("pl94_production_2020"), load_strategy("pl94_production_2020").rho)
    noisy = []
    for item in allocation.items:
        if item.level == "state":
            answers = schema.query(item.query).matrix @ truth
            answers = answers + rng.normal(0, float(item.sigma2) ** 0.5, answers.shape)
            noisy.append(NoisyAnswers(item.query, "state", np.array(["44"]), answers.reshape(1, -1), item.sigma2))
    total = int(truth.sum())
    bounds = [Bounds("total", np.array([[total]]), np.array([[float(total)]]))]
    return schema, truth, noisy, bounds


@pytest.fixture(scope="module")
def root_solved(state_root):
    """das's root solution, and the same problem as a ParentProblem: (solution, problem, columns, terms)."""
    schema, truth, noisy, bounds = state_root
    problem = root_problem(schema, measured(noisy), bounds)
    columns = matrices.variables(problem)
    return solve.solve_root(schema, noisy, bounds), problem, columns, matrices.weighted_terms(problem, columns, problem.queries)


@pytest.mark.filterwarnings("ignore:Solution may be inaccurate")
def test_root_least_squares_reaches_a_tight_independent_optimum(state_root, root_solved):
    schema, truth, noisy, bounds = state_root
    solution, problem, columns, terms = root_solved
    ours, _ = matrices.objective(terms, solution.l2.ravel()[columns])
    # independent: SCS (operator splitting, not interior point) on the unscaled problem in counts
    x = cp.Variable(len(columns), nonneg=True)
    cost = sum(w * cp.sum_squares(a @ x - y) for a, y, w in terms)
    cp.Problem(cp.Minimize(cost), [cp.sum(x) == truth.sum()]).solve(solver="SCS", eps=1e-9, max_iters=100_000)
    reference, _ = matrices.objective(terms, np.clip(x.value, 0, None))
    assert abs(ours - reference) <= 1e-6 * reference, (ours, reference)
    assert solution.certificate["max_rel_gap"] <= optimality.GAP_TOL and solution.certificate["uncertified"] == 0
    # the optimum leaves empty cells (almost) empty: no mass spread over the 1,856 cells with nobody
    assert (solution.l2.ravel()[truth == 0] < 0.05).mean() > 0.8


def test_the_certificate_bounds_the_suboptimality_and_flags_spread_mass(state_root, root_solved):
    schema, truth, noisy, bounds = state_root
    solution, problem, columns, terms = root_solved
    b = matrices.bound_rows(problem, columns)
    best = solution.l2.ravel()[columns]
    f_best, gap_best = optimality.certify(problem, columns, terms, best, parent_sums=None, bounds=b, fixed=[])
    assert gap_best <= optimality.GAP_TOL * f_best
    rng = np.random.default_rng(1)
    for _ in range(5):  # any feasible point: objective - gap is a lower bound on the optimum
        point = rng.dirichlet(np.ones(len(columns))) * truth.sum() * 0.5 + best * 0.5
        f, gap = optimality.certify(problem, columns, terms, point, parent_sums=None, bounds=b, fixed=[])
        assert f - gap <= f_best + 1e-6 * f_best
    # the defect of the shipped solver: a little mass on every empty cell, the total kept
    spread = best.copy()
    empty = spread < 0.05
    spread[empty] += 0.3
    spread[np.argmax(spread)] -= 0.3 * empty.sum()
    f, gap = optimality.certify(problem, columns, terms, spread, parent_sums=None, bounds=b, fixed=[])
    assert f > f_best and gap > optimality.GAP_TOL * f and f - gap <= f_best


def _one_child_strategy(tmp_path: Path) -> Path:
    """Nation and county measured with huge noise, the levels below almost without noise."""
    shares = {"nation": "1/1000000000", "state": "1/4", "county": "1/1000000000", "tract": "1/4",
              "block_group": "1/4", "block": "249999998/1000000000"}
    text = ['name = "one_child"', 'schema = "pl94_persons"', 'rho = "1000000"', 'delta = "1e-10"']
    for level, share in shares.items():
        text += [f"[levels.{level}]", f'rho_share = "{share}"', f"[levels.{level}.queries]", '"detailed" = "1"']
    path = tmp_path / "one_child.toml"
    path.write_text("\n".join(text) + "\n")
    return path


def _tiny_spec(tmp_path: Path, strategy: Path) -> Path:
    spec = (ROOT / "specs/runs/tiny.toml").read_text()
    spec = spec.replace("../../geography_fixtures/tiny/", str(FIXTURES / "tiny") + "/")
    spec = re.sub(r'strategy = "pl94_six_level".*', f'strategy = "{strategy}"', spec)
    spec = spec[: spec.index("[postprocess.passes_by_level]")]  # its GQ queries are not measured here
    assert str(strategy) in spec
    path = tmp_path / "spec.toml"
    path.write_text(spec)
    return path


def _detailed_by(frame: pd.DataFrame, digits: int, schema) -> pd.DataFrame:
    geocode = (frame["TABBLKST"].astype(str) + frame["TABBLKCOU"].astype(str) + frame["TABTRACTCE"].astype(str)
               + frame["TABBLK"].astype(str)).str.slice(0, digits)
    keys = ["GQTYPE_PL", "VOTING_AGE", "CENHISP", "CENRACE"]
    return frame.assign(geo=geocode.to_numpy())[["geo", *keys]].astype(str).value_counts().sort_index()


def test_a_one_child_chain_uses_the_childs_measurements(tmp_path, monkeypatch):
    """tiny: the state is the nation's only child, county 44003 has one tract, tract 44001000200 one block
    group. Their nearly noise-free measurements must decide the estimate, not the noisy parents'."""
    spec = _tiny_spec(tmp_path, _one_child_strategy(tmp_path))
    schema = load_schema("pl94_persons")
    truth = pd.read_csv(FIXTURES / "tiny/persons.csv", dtype=str)

    def published_matches(out: Path) -> dict:
        mdf = pd.read_parquet(out / "mdf_persons.parquet")
        found = {}
        for name, digits, code in (("state", 2, "44"), ("county", 5, "44003"), ("tract", 11, "44001000200")):
            pub = _detailed_by(mdf, digits, schema)
            true = _detailed_by(truth, digits, schema)
            pub = pub[pub.index.get_level_values(0) == code]
            true = true[true.index.get_level_values(0) == code]
            pub, true = pub.align(true, fill_value=0)
            found[name] = bool((pub == true).all())
        return found

    # rho 1e6 keeps the lower levels' noise negligible: acknowledged, as the preflight asks
    result = run(spec, tmp_path / "with", seed=4, workers=1, progress=False, allow_large_rho=True)
    assert result.valid, result.manifest.validation.violations[:5]
    assert published_matches(tmp_path / "with") == {"state": True, "county": True, "tract": True}
    # the same run with the chains switched off is decided by the noisy parents: the test can fail
    monkeypatch.setattr(engine, "single_child_chains", lambda *args, **kwargs: [])
    without = run(spec, tmp_path / "without", seed=4, workers=1, progress=False, allow_large_rho=True)
    assert not any(published_matches(tmp_path / "without").values())
    assert without.manifest.nmf == result.manifest.nmf  # the same measurements, only used differently


def test_household_persons_bound_the_occupied_units_of_every_block():
    schema = load_schema("h1_units")
    invariants = Invariants(housing_units=np.array([0, 3, 3, 1]), gq_facilities=np.zeros((4, 7), np.int64),
                            total_population={}, household_persons=np.array([0, 0, 2, 5]))
    (rule,) = [b for b in block_bounds(schema, invariants) if b.query == "detailed"]
    assert rule.lower[:, 0].tolist() == [0, 0, 1, 1] and rule.upper[:, 0].tolist() == [0, 0, 2, 1]
    assert (rule.lower[:, 1] == 0).all() and np.isinf(rule.upper[:, 1]).all()  # vacant: the invariant decides
    with pytest.raises(ValueError, match="household persons"):
        block_bounds(schema, Invariants(np.array([1]), np.zeros((1, 7), np.int64), {}))


def test_persons_and_units_agree_at_every_level_of_a_real_county(tmp_path):
    result = run("al_perry", tmp_path / "perry", seed=9, workers=1, progress=False)
    assert result.valid, result.manifest.validation.violations[:5]
    assert any("household_persons" in c and c.startswith("ok") for c in result.manifest.validation.checks)
    persons = pd.read_parquet(tmp_path / "perry" / "mdf_persons.parquet")
    units_path = tmp_path / "perry" / "mdf_units.parquet"
    units = pd.read_parquet(units_path)
    for frame in (persons, units):
        frame["geocode"] = (frame["TABBLKST"].astype(str) + frame["TABBLKCOU"].astype(str)
                            + frame["TABTRACTCE"].astype(str) + frame["TABBLK"].astype(str))
    p1 = pd.read_parquet(tmp_path / "perry" / "tables" / "P1.parquet", columns=["level"])
    assert "block_group" in set(p1["level"])  # the 2020 spine: tables at block-group level
    for report in result.manifest.levels_report["persons"]:
        assert report.l2_certificate["uncertified"] == 0
    # tampering: an occupied unit in a block without household persons is caught
    occupied = units.index[(units["RTYPE"] == 2) & (units["HH_STATUS"] == 2)]
    households = set(persons.loc[persons["GQTYPE_PL"] == 0, "geocode"])
    target = next(i for i in occupied if units.at[i, "geocode"] not in households)
    units.loc[target, "HH_STATUS"] = 1
    units.drop(columns="geocode").to_parquet(units_path)
    assert any("is 1, above the household_persons rule's 0..0" in v
               for v in validate_run(tmp_path / "perry").violations)


def test_validator_reports_the_persons_units_rule(tmp_path):
    """validate_run re-derives the rule from the files (the run above passes; here a changed MDF fails)."""
    result = run("tiny", tmp_path / "tiny", seed=2, workers=1, progress=False)
    units_path = tmp_path / "tiny" / "mdf_units.parquet"
    units = pd.read_parquet(units_path)
    housing = units.index[units["RTYPE"] == 2]
    units.loc[housing, "HH_STATUS"] = 2  # every unit vacant: household persons live nowhere
    units.to_parquet(units_path)
    report = validate_run(tmp_path / "tiny")
    assert not report.ok
    assert any("below the household_persons rule" in v for v in report.violations)
    assert result.valid


def test_parent_problem_keeps_the_descendant_rows():
    schema = load_schema("h1_units")
    answers = [NoisyAnswers("detailed", "tract", np.array(["a", "b"]), np.array([[3, 1], [2, 2]]), Fraction(4))]
    finer = [ChildAnswers(NoisyAnswers("detailed", "block", np.array(["b1"]), np.array([[2, 1]]), Fraction(1, 3)),
                          np.array([1]))]
    problem = parent_problem(schema, "p", np.array(["a", "b"]), np.array([5, 3]), answers=measured(answers, finer),
                             bounds=[])
    assert [q.rows for q in problem.queries][0] is None
    extra = problem.queries[1]
    assert extra.rows.tolist() == [1] and extra.noisy.variance == Fraction(1, 3) and extra.noisy.geocodes.tolist() == ["b1"]
    columns = matrices.variables(problem)
    rows = matrices.query_rows(problem, extra, columns)
    assert sp.csr_matrix.toarray(rows).tolist() == [[0, 0, 1, 0], [0, 0, 0, 1]]


def test_passes_by_level_are_read_checked_and_used_for_their_level(tmp_path):
    from das.core.errors import SpecError
    from das.driver.runspec import load_run_spec

    spec = load_run_spec("vt_demo")
    assert spec.passes == ((),) and spec.passes_by_level == {"nation": (("hhgq", "hhinstlevels"), ())}
    options = engine.EngineOptions(passes=spec.passes, passes_by_level=spec.passes_by_level)
    assert options.passes_for("nation") == (("hhgq", "hhinstlevels"), ()) and options.passes_for("block") == ((),)
    text = (ROOT / "specs/runs/vt_demo.toml").read_text().replace("../../geography_fixtures/vt/", "")
    for bad, message in (('nation = [["hhgq"], []]', None), ('county_x = [["hhgq"], []]', "not levels of this run"),
                         ('nation = ["hhgq"]', "list of lists")):
        path = tmp_path / "spec.toml"
        path.write_text(text.replace('nation = [["hhgq", "hhinstlevels"], []]', bad))
        if message is None:
            assert load_run_spec(path).passes_by_level == {"nation": (("hhgq",), ())}
        else:
            with pytest.raises(SpecError, match=message):
                load_run_spec(path)


def test_two_pass_root_with_held_answers_solves_on_a_real_county(tmp_path):
    """Perry County AL, seed 11: the direct path called the second root pass infeasible (its held hhgq
    answers repeat the total invariant); the previous pass's solution proves it feasible."""
    for name in ("persons", "units"):
        (tmp_path / f"{name}.parquet").write_bytes((FIXTURES / "al_perry" / f"{name}.parquet").read_bytes())
    spec = (ROOT / "specs/runs/tiny.toml").read_text().replace("../../geography_fixtures/tiny/", "")
    (tmp_path / "spec.toml").write_text(spec.replace(".csv", ".parquet"))
    result = run(tmp_path / "spec.toml", tmp_path / "out", seed=11, workers=1, progress=False)
    assert result.valid, result.manifest.validation.violations[:5]
    assert result.manifest.levels_report["persons"][0].l2_certificate["uncertified"] == 0
