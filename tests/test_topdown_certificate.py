"""The duality-gap certificate of the least-squares passes (das.topdown.optimality.certify): always finite, a lower bound
on the optimum whichever way it was computed, and an optimum it cannot certify named wherever a run reports.

The shared case (tests/data/root-certificate-vt-demo: the persons NMF of the top two levels of a `das run vt_demo`
with OS randomness, from ../shared/cases) crashed the run at its root: the answers held from the first pass put a
GQ type 1.6e-4 below its bound of at least one person, the LP of the second pass's certificate had no solution and
the gap was infinite (OverflowError in on_grid).
"""

from __future__ import annotations

import functools
import math
import shutil
import time
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from conftest import ROOT
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from das.driver.pipeline import Pipeline
from das.io.nmf import NoisyAnswers
from das.model.rules import level_bounds
from das.privacy.randomness import make_random_source
from das.topdown import engine, l2, matrices, optimality, solve
from das.topdown.measure import noisy_answers, true_answers
from das.topdown.problem import ChildAnswers, ParentProblem

CASE = Path(__file__).parent / "data" / "root-certificate-vt-demo"
RUNS = ROOT / "specs" / "runs"


@functools.lru_cache(maxsize=8)
def inputs(spec: Path):
    """The spec's pipeline (seeded) and its inputs as read: read once per test session."""
    pipe = Pipeline.prepare(spec, 1)
    return pipe, pipe.read_inputs()


def test_the_shared_case_root_is_certified(tmp_path):
    """The root as the engine solves it from the shared case's NMF: a certified optimum, no crash."""
    pipe, confidential = inputs(RUNS / "vt_demo.toml")
    (tmp_path / "persons").mkdir()
    for name in ("nation.parquet", "state.parquet"):
        shutil.copy(CASE / name, tmp_path / "persons" / name)
    job = engine._Release("persons", pipe.schemas["persons"], confidential.geography, confidential.invariants,
                          tmp_path, pipe.engine_options())
    solved, report = engine._solve_root(job, time.perf_counter())
    cert = report.certificate
    assert cert["problems"] == 1 and cert["uncertified"] == 0 and not cert["uncertified_at"]
    assert cert["retried"] == 0  # the held answers meet the bounds: the direct path solves the second pass at once
    assert math.isfinite(cert["gap"]) and 0 <= cert["max_rel_gap"] <= optimality.GAP_TOL
    assert solved.sum() == confidential.invariants.total_population["nation"][0]


# ---------------------------------------------------------------------------------------------
# A problem whose stated set is empty: the answers held from pass 1 contradict a bound row


def _held_below_a_bound():
    """One geounit (a root), cells 0-1 a GQ type with a facility (bound: at least 1 person), the total held at 10
    (a bound row too), pass 1's answer for the GQ type held at 0.9998: no point meets both exactly."""
    n = 3
    gq = sp.csr_matrix(np.array([[1.0, 1.0, 0.0]]))
    total = sp.csr_matrix(np.ones((1, n)))
    bounds = l2.BoundRows(sp.vstack([gq, total]).tocsr(), np.array([1.0, 10.0]), np.array([np.inf, 10.0]))
    terms = [(sp.identity(n, format="csr"), np.array([0.2, 0.3, 9.5]), 1.0)]
    fixed = [(gq, np.array([0.9998]))]
    problem = ParentProblem("", ("",), np.arange(n), None, np.ones((1, n), bool), (), None)
    x = np.array([0.44995, 0.54995, 9.0001])  # as a solver leaves it: near the held row, 1e-4 under the bound
    return problem, np.arange(n), terms, bounds, fixed, x


def _optimum_containing(terms, bounds, fixed, x, *, parent=None):
    """The optimum over the feasible set widened to contain x (a reference solve with cvxpy at tight settings)."""
    import cvxpy as cp

    b_matrix, lower, upper = bounds
    y = cp.Variable(len(x), nonneg=True)
    values = b_matrix @ x
    constraints = [b_matrix @ y >= np.minimum(lower, values), b_matrix @ y <= np.maximum(upper, values)]
    for matrix, target in fixed:
        constraints.append(cp.abs(matrix @ y - target) <= np.abs(matrix @ x - target))
    if parent is not None:
        s_matrix, sums = parent
        constraints.append(cp.abs(s_matrix @ y - sums) <= np.abs(s_matrix @ x - sums))
    cost = sum(w * cp.sum_squares(a @ y - t) for a, t, w in terms)
    problem = cp.Problem(cp.Minimize(cost), constraints)
    problem.solve(solver="CLARABEL", tol_gap_abs=1e-12, tol_gap_rel=1e-12, tol_feas=1e-12)
    return problem.value


def test_held_answers_below_a_bound_leave_the_stated_set_empty_and_the_gap_finite():
    problem, columns, terms, bounds, fixed, x = _held_below_a_bound()
    stated, widened = optimality.regions_of(problem, columns, x, parent_sums=None, bounds=bounds, fixed=fixed)
    grad = matrices.objective(terms, x)[1]
    assert optimality.min_linear(problem, columns, grad, stated) is None  # no point of the stated set: the old crash
    assert optimality.min_linear(problem, columns, grad, widened) is not None
    value, gap = optimality.certify(problem, columns, terms, x, parent_sums=None, bounds=bounds, fixed=fixed)
    assert math.isfinite(gap) and 0 <= gap <= value
    assert value - gap <= _optimum_containing(terms, bounds, fixed, x) * (1 + 1e-9) + 1e-12  # a lower bound
    assert gap <= 1e-3 * value  # x is (nearly) that set's optimum: the bound is not vacuous


def test_the_answers_held_for_the_next_pass_are_moved_within_the_rules_by_the_least_l1():
    problem, columns, terms, bounds, fixed, x = _held_below_a_bound()
    held = solve.within_rules(x, parent=None, bounds=bounds)
    values = bounds.matrix @ held
    assert (values >= bounds.lower - 1e-9).all() and (values <= bounds.upper + 1e-9).all() and (held >= 0).all()
    assert np.abs(held - x).sum() == pytest.approx(2e-4, rel=1e-6)  # 1e-4 into the GQ type, 1e-4 out of the rest
    inside = np.array([0.6, 0.5, 8.9])
    assert solve.within_rules(inside, parent=None, bounds=bounds) is inside  # nothing to move: x itself


# ---------------------------------------------------------------------------------------------
# Every way the certificate can be computed is a lower bound, and it is never infinite


def _child_problem(seed=0, n_children=6, n_cells=12):
    """A parent's problem with bound rows (the GQ-like groups), one pass, its solver's point."""
    from test_topdown_solver import make_problem

    problem, _ = make_problem(n_children=n_children, n_cells=n_cells, seed=seed, noise=2.0)
    columns = matrices.variables(problem)
    terms = matrices.weighted_terms(problem, columns, problem.queries)
    parent = (matrices.parent_sum(problem, columns), problem.parent_counts.astype(float))
    bounds = matrices.bound_rows(problem, columns)
    point = l2.solve_point(l2.Pass(terms, [], parent, bounds), len(columns), matrices.scale_of([y for _, y, _ in terms], parent))
    return problem, columns, terms, parent, bounds, point


def _no_lp(monkeypatch):
    """HiGHS gives no optimum for any LP (as for a solver error or an LP infeasible within its tolerances)."""
    monkeypatch.setattr(optimality, "highs_lp", lambda *args, **kwargs: None)


@pytest.mark.parametrize("seed", range(3))
def test_without_any_lp_a_parent_is_bounded_by_its_parent_sums_alone(seed, monkeypatch):
    problem, columns, terms, parent, bounds, point = _child_problem(seed)
    value, with_lp = optimality.certify(problem, columns, terms, point.x, parent_sums=parent[1], bounds=bounds, fixed=[])
    _no_lp(monkeypatch)
    value_again, gap = optimality.certify(problem, columns, terms, point.x, parent_sums=parent[1], bounds=bounds, fixed=[])
    assert value_again == value and math.isfinite(gap)
    assert with_lp <= gap + 1e-9 * value <= value + 1e-9 * value  # a superset: a looser bound, never a tighter one
    assert value - gap <= _optimum_containing(terms, bounds, [], point.x, parent=parent) * (1 + 1e-9)


def _root_without_total(seed=0, partition=True):
    """A root whose total is not an invariant (its set is unbounded), measured by a partition of its cells (a cap on
    the optimal total exists) or only by overlapping rows (none does)."""
    rng = np.random.default_rng(seed)
    n = 8
    truth = rng.integers(0, 50, n).astype(float)
    if partition:
        rows = [(sp.identity(n, format="csr"), truth + rng.normal(0, 2, n), 0.25)]
    else:  # two overlapping windows: no partition of the cells
        windows = sp.csr_matrix(np.array([[1.0] * 5 + [0.0] * 3, [0.0] * 3 + [1.0] * 5]))
        rows = [(windows, windows @ truth + rng.normal(0, 2, 2), 0.25)]
    problem = ParentProblem("", ("",), np.arange(n), None, np.ones((1, n), bool), (), None)
    gq = sp.csr_matrix(np.r_[np.ones(2), np.zeros(n - 2)][None, :])
    bounds = l2.BoundRows(gq, np.array([1.0]), np.array([np.inf]))
    return problem, np.arange(n), rows, bounds


def test_a_root_without_a_total_and_without_any_lp_is_bounded_within_its_provable_total(monkeypatch):
    problem, columns, terms, bounds = _root_without_total()
    stated = l2.Pass(terms, [], None, bounds)
    point = l2.solve_point(stated, len(columns), matrices.scale_of([y for _, y, _ in terms], None))
    value, with_lp = optimality.certify(problem, columns, terms, point.x, parent_sums=None, bounds=bounds, fixed=[])
    assert with_lp <= optimality.GAP_TOL * max(value, 1.0)
    _no_lp(monkeypatch)
    _, gap = optimality.certify(problem, columns, terms, point.x, parent_sums=None, bounds=bounds, fixed=[])
    assert math.isfinite(gap) and with_lp - 1e-9 <= gap <= value
    assert value - gap <= _optimum_containing(terms, bounds, [], point.x) * (1 + 1e-9) + 1e-9


def test_with_no_bound_at_all_the_gap_is_the_objective_and_the_pass_is_named_uncertified(monkeypatch):
    """Nothing computable (no LP, no cap): the optimum is at least 0, so the gap is the objective; counted and
    listed with its parent and pass, and the level's sums stay finite (on_grid)."""
    problem, columns, terms, bounds = _root_without_total(partition=False)
    _no_lp(monkeypatch)
    monkeypatch.setattr(solve, "least_squares", lambda columns, stated, solver, tight=False: l2.Point(
        np.full(len(columns), 5.0), None))
    certificate = optimality.new_certificate()
    x = solve.certified_pass(problem, columns, l2.Pass(terms, [], None, bounds), "CLARABEL", certificate=certificate,
                              index=1)
    assert x is not None
    value = matrices.objective(terms, x)[0]
    assert certificate["uncertified"] == 1 and certificate["retried"] == 1
    assert certificate["uncertified_at"] == [{"parent": "", "pass": 1, "objective": value, "gap": value}]
    assert certificate["gap"] == optimality.on_grid(value, optimality.GAP_GRID) and certificate["max_rel_gap"] == pytest.approx(
        value / max(value, 1.0))
    merged = optimality.merge_certificates([certificate, optimality.new_certificate(), certificate])
    assert merged["uncertified"] == 2 and len(merged["uncertified_at"]) == 2


@pytest.mark.parametrize("seed", range(3))
def test_the_certificate_is_a_lower_bound_at_points_far_off_the_stated_set(seed):
    """Points that break the bounds and the parent sums by a lot: the widened set is far bigger, its bound still
    below the optimum over it (and so below the stated optimum)."""
    problem, columns, terms, parent, bounds, point = _child_problem(seed)
    rng = np.random.default_rng(seed)
    x = np.clip(point.x + rng.normal(0, 3, len(columns)), 0, None)
    value, gap = optimality.certify(problem, columns, terms, x, parent_sums=parent[1], bounds=bounds, fixed=[])
    assert math.isfinite(gap) and 0 <= gap <= value
    assert value - gap <= _optimum_containing(terms, bounds, [], x, parent=parent) * (1 + 1e-9) + 1e-9


# ---------------------------------------------------------------------------------------------
# Random roots of real states: every draw certified


def _spec(tmp_dir: Path, fixture: str, five: bool) -> Path:
    """A run spec of a shipped fixture with six levels (pl94_six_level, the GQ margins first at the root) or five."""
    levels = '["nation", "state", "county", "tract", "block"]' if five else \
        '["nation", "state", "county", "tract", "block_group", "block"]'
    path = tmp_dir / f"{fixture}_{'five' if five else 'six'}.toml"
    path.write_text(f'''name = "{fixture}"
levels = {levels}
[input]
persons = "{ROOT / 'geography_fixtures' / fixture / 'persons.parquet'}"
units = "{ROOT / 'geography_fixtures' / fixture / 'units.parquet'}"
[persons]
schema = "pl94_persons"
strategy = "{'pl94_five_level' if five else 'pl94_six_level'}"
[units]
schema = "h1_units"
strategy = "{'h1_units_five_level' if five else 'h1_units'}"
[postprocess.passes_by_level]
nation = [["hhgq", "hhinstlevels"], []]
''')
    return path


def solve_random_root(spec: Path, *, divisor: int, seed: int):
    """The root of the spec's state as the engine builds it (the nation's own answers, the state as its only child
    measured again, the invariants' bounds, the spec's passes), the noise drawn at 1/divisor of the budget."""
    pipe, confidential = inputs(spec)
    persons = pipe.releases["persons"]
    allocation = pipe.at_budget("persons", persons.allocation.rho / divisor).allocation
    schema, geography = pipe.schemas["persons"], confidential.geography
    rng = make_random_source(seed)

    def measured(level):
        truth = geography.aggregate(confidential.histograms["persons"], level)
        return [NoisyAnswers(m.query, level, geography.units(level),
                             noisy_answers(true_answers(truth, schema, m.query), m.sigma2,
                                           rng.spawn(f"{level}/{m.query}")), m.sigma2) for m in allocation.level(level)]

    assert geography.n_units("state") == 1
    descendants = [ChildAnswers(a, rows=np.array([0])) for a in measured("state")]
    bounds = level_bounds(schema, confidential.invariants, geography, level="nation", lo=0, hi=1)
    return solve.solve_root(schema, measured("nation"), bounds, settings=pipe.engine_options().settings("nation"),
                            descendants=descendants), int(confidential.invariants.total_population["nation"][0])


@pytest.fixture(scope="module")
def specs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("specs")
    return {(f, five): _spec(tmp, f, five) for f in ("vt_grand_isle", "al_perry") for five in (False, True)} | {
        ("vt_demo", False): RUNS / "vt_demo.toml"}


@pytest.mark.slow
@settings(max_examples=24, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(which=st.sampled_from([("vt_grand_isle", False), ("vt_grand_isle", True), ("al_perry", False),
                              ("al_perry", True), ("vt_demo", False)]),
       divisor=st.sampled_from([1, 10, 100]), seed=st.integers(0, 2**31))
def test_random_roots_of_real_states_certify(specs, which, divisor, seed):
    solution, total = solve_random_root(specs[which], divisor=divisor, seed=seed)
    cert = solution.certificate
    assert cert["uncertified"] == 0 and cert["max_rel_gap"] <= optimality.GAP_TOL, (which, divisor, seed, cert)
    assert math.isfinite(cert["gap"]) and int(solution.counts.sum()) == total


@pytest.mark.slow
def test_das_run_vt_demo_seed_10_completes_and_validates(tmp_path):
    """The seed that reproduced the crash every time (`das run vt_demo --seed 10`, issue 41): a release, validated,
    its every least-squares optimum certified."""
    from das.api import run
    from das.frame.rundir import RunDir

    release = run("vt_demo", out=tmp_path / "run", seed=10, workers=2)
    assert release.validate().ok
    manifest = RunDir(tmp_path / "run").read()
    records = [r for levels in manifest.levels_report.values() for r in levels]
    assert all(r.l2_certificate["uncertified"] == 0 and not r.uncertified for r in records)
    assert max(r.l2_certificate["max_rel_gap"] for r in records) <= optimality.GAP_TOL


# ---------------------------------------------------------------------------------------------
# An uncertified optimum is named in the manifest, the run's summary and by the validator


def test_an_uncertified_optimum_is_named_by_the_manifest_the_summary_and_the_validator(tmp_path, monkeypatch):
    """With the tolerance below every gap (none can be met) each pass is retried, then recorded with its parent."""
    import json

    from das.driver.run import run
    from das.frame.rundir import RunDir
    from das.validate import validate_run

    monkeypatch.setattr(optimality, "GAP_TOL", -1.0)
    result = run(RUNS / "tiny.toml", tmp_path / "run", seed=3, workers=1, progress=False)
    manifest = RunDir(tmp_path / "run").read()
    records = {(name, r.level): r for name, levels in manifest.levels_report.items() for r in levels}
    tract = records[("persons", "tract")]
    assert tract.l2_certificate["uncertified"] == len(tract.uncertified) == tract.l2_certificate["problems"] > 0
    assert all(len(u.parent) == 5 and u.gap >= 0 and u.pass_index == 0 for u in tract.uncertified)  # counties
    assert records[("persons", "nation")].uncertified[0].parent == ""  # the root, both of its passes
    assert [u.pass_index for u in records[("persons", "nation")].uncertified] == [0, 1]
    assert "NOT CERTIFIED OPTIMAL: persons/nation parent (root) pass 0" in result.summary
    assert result.valid  # consistent and private: reported, not refused
    report = validate_run(tmp_path / "run")
    assert report.ok and any("not certified" in n for n in report.notes)
    assert any(f"persons/tract parent {tract.uncertified[0].parent} pass 0" in n for n in report.notes)
    path = tmp_path / "run" / "manifest.json"  # an edited manifest: the count no longer the list's length
    data = json.loads(path.read_text())
    data["levels_report"]["persons"][3]["l2_certificate"]["uncertified"] = 0
    path.write_text(json.dumps(data))
    edited = validate_run(tmp_path / "run")
    assert any("uncertified counted" in v and "persons/tract" in v for v in edited.violations)
