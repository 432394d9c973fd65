"""The direct nested least squares (das.topdown.l2) reaches the optimum of the cvxpy reference, in every setting."""

from fractions import Fraction

import numpy as np
import pytest
import scipy.sparse as sp
from test_topdown_solver import make_problem

from das.core.errors import SpecError
from das.driver.runspec import load_run_spec
from das.io.nmf import NoisyAnswers
from das.topdown import l2, matrices, optimality, solve, solvers
from das.topdown.problem import ChildConstraints, ParentProblem, QueryAnswers

REL = 1e-6


def tight_reference(problem: ParentProblem, events_expected: bool = False) -> float:
    """The summed pass objectives of the cvxpy path retried at gap 1e-12 (independent of the direct QP)."""
    certificate = optimality.new_certificate()
    saved = optimality.GAP_TOL
    optimality.GAP_TOL = 0.0  # every pass is retried at Clarabel's tight tolerances through cvxpy
    try:
        _, events, _, _ = solve.solve_l2(problem, "cvxpy:CLARABEL", certificate)
    finally:
        optimality.GAP_TOL = saved
    assert bool(events) == events_expected
    return certificate["objective"]


def direct(problem: ParentProblem):
    certificate = optimality.new_certificate()
    x, events, bounds, columns = solve.solve_l2(problem, "CLARABEL", certificate)
    return x, events, certificate


def assert_same_optimum(problem, events_expected=False):
    x, events, certificate = direct(problem)
    reference = tight_reference(problem, events_expected)
    assert bool(events) == events_expected
    assert abs(certificate["objective"] - reference) <= REL * max(reference, 1.0)
    assert certificate["max_rel_gap"] <= optimality.GAP_TOL and certificate["uncertified"] == 0
    assert (x >= 0).all()
    return x


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("bounds", [True, False])
def test_random_parents_reach_the_reference_optimum(seed, bounds):
    problem, _ = make_problem(n_children=3 + 9 * seed, n_cells=25 + 40 * seed, seed=seed, noise=3.0, bounds=bounds)
    x = assert_same_optimum(problem)
    columns = matrices.variables(problem)
    sums = matrices.parent_sum(problem, columns) @ x
    assert np.abs(sums - problem.parent_counts).max() <= 1e-6 * max(problem.parent_counts.max(), 1)


def test_multipass_holds_the_first_pass_totals():
    problem, _ = make_problem(n_children=10, n_cells=60, seed=7, noise=4.0)
    multipass = ParentProblem(problem.parent, problem.children, problem.cells, problem.parent_counts, problem.allowed,
                              problem.queries, problem.constraints, passes=(("total",), ()))
    assert_same_optimum(multipass)
    _, _, certificate = direct(multipass)
    assert certificate["problems"] == 1 and certificate["objective"] > 0


def test_failsafe_relaxes_the_parent_equality_as_the_reference_does():
    problem, _ = make_problem(n_children=5, n_cells=20, seed=1, zeros=0.0, noise=1.0)
    c = problem.constraints
    lower = c.lower.copy()
    lower[0, 0] = problem.parent_counts @ c.matrix.toarray()[0] + 3  # child 0 needs 3 more than exist
    infeasible = ParentProblem(problem.parent, problem.children, problem.cells, problem.parent_counts,
                               problem.allowed, problem.queries, ChildConstraints(c.matrix, lower, c.upper),
                               passes=((),))
    x = assert_same_optimum(infeasible, events_expected=True)
    columns = matrices.variables(infeasible)
    assert (matrices.bound_rows(infeasible, columns)[0] @ x)[0] >= lower[0, 0] - 1e-6


def test_a_root_held_only_by_its_bounds():
    """No parent: the total invariant is a bound row (lower == upper), as at the nation of a run."""
    problem, truth = make_problem(n_children=1, n_cells=200, seed=11, zeros=0.0, noise=30.0, bounds=False)
    n = problem.n_cells
    total = int(truth.sum())
    root = ParentProblem("", ("",), problem.cells, None, problem.allowed, problem.queries,
                         ChildConstraints(sp.csr_matrix(np.ones((1, n))), np.array([[total]]),
                                          np.array([[float(total)]])), passes=((),))
    x = assert_same_optimum(root)
    assert abs(x.sum() - total) <= 1e-6 * total
    free = ParentProblem("", ("",), problem.cells, None, problem.allowed, problem.queries, None, passes=((),))
    assert_same_optimum(free)


def test_only_child_measurements_enter_as_extra_terms():
    """`QueryAnswers.rows`: the same query measured again on some children, at its own variance."""
    problem, truth = make_problem(n_children=6, n_cells=40, seed=5, noise=2.0)
    rng = np.random.default_rng(0)
    again = []
    for q in problem.queries:
        rows = np.array([1, 4])
        answers = (truth[rows] @ q.matrix.T.toarray()) + rng.normal(0, 1.0, (2, q.matrix.shape[0]))
        only = NoisyAnswers(q.name, "block", np.array(["c1 only child", "c4 only child"]), answers, Fraction(1, 2))
        again.append(QueryAnswers(q.matrix, only, rows))
    with_descendants = ParentProblem(problem.parent, problem.children, problem.cells, problem.parent_counts,
                                     problem.allowed, problem.queries + tuple(again), problem.constraints, passes=((),))
    assert_same_optimum(with_descendants)
    x_with, _, _ = direct(with_descendants)
    x_without, _, _ = direct(problem)
    assert np.abs(x_with - x_without).max() > 1e-3  # the extra measurements change the estimate


def test_nesting_defines_coarse_answers_from_finer_ones():
    """`total` from the 4 `group` answers, `group` from the cells: about 2 nonzeros per cell, not one per query."""
    problem, _ = make_problem(n_children=8, n_cells=50, seed=2, noise=1.0)
    columns = matrices.variables(problem)
    terms = matrices.weighted_terms(problem, columns, problem.queries)
    lifted = l2.lift(terms, len(columns))
    definitions = sp.vstack([l2._pad(d, lifted.n_total) for d in lifted.definitions])
    assert lifted.n_total == len(columns) + 8 * 4 + 8
    # each group answer: itself and its cells; each total: itself and (at most) 4 group answers
    assert definitions.nnz <= (8 * 4 + len(columns)) + 8 * (1 + 4)
    # the definitions hold at the answers of any x, and the diagonal objective equals the original
    x = np.random.default_rng(1).random(len(columns)) * 3
    values = np.r_[x, np.zeros(lifted.n_total - len(columns))]
    for d in lifted.definitions:  # in order; each defines its last rows-many variables from earlier ones
        start = d.shape[1] - d.shape[0]
        values[start:d.shape[1]] = -(d[:, :start] @ values[:start])
    assert np.abs(definitions @ values).max() < 1e-9
    diagonal = float(lifted.weight @ values**2 + lifted.linear @ values + lifted.constant)
    assert diagonal == pytest.approx(matrices.objective(terms, x)[0], rel=1e-12)


def test_unknown_solvers_are_refused(tmp_path):
    problem, _ = make_problem(seed=0)
    with pytest.raises(ValueError, match="unknown least-squares solver 'OSQP'"):
        solve.solve_l2(problem, "OSQP")
    with pytest.raises(ValueError, match="no installed solver"):
        solve.solve_l2(problem, "cvxpy:NOT_A_SOLVER")
    assert solvers.check_solver("clarabel") == "CLARABEL" and solvers.check_solver("cvxpy:osqp") == "cvxpy:OSQP"
    spec = tmp_path / "bad.toml"
    spec.write_text('name = "bad"\n[input]\npersons = "p.parquet"\n[persons]\nschema = "pl94_persons"\n'
                    'strategy = "pl94_six_level"\n[postprocess]\nsolver = "gurobi"\n')
    with pytest.raises(SpecError, match="solver"):
        load_run_spec(spec)


def test_both_paths_give_valid_rounded_solutions():
    """solve_parent end to end (L2, rounding, exact checks) on the direct path and on the cvxpy reference."""
    problem, _ = make_problem(n_children=12, n_cells=70, seed=8, noise=3.0)
    direct_solution = solve.solve_parent(problem, solver="CLARABEL")
    reference_solution = solve.solve_parent(problem, solver="cvxpy:CLARABEL")
    for solution in (direct_solution, reference_solution):
        assert np.array_equal(solution.counts.sum(axis=0), problem.parent_counts)
        assert solution.certificate["uncertified"] == 0
    assert np.abs(direct_solution.l2 - reference_solution.l2).max() < 1e-3


def test_a_stalled_direct_solve_falls_back_to_the_cvxpy_path(monkeypatch):
    """Clarabel stopping short proves nothing: the cvxpy path solves it, and the certificate still checks it."""
    problem, _ = make_problem(n_children=6, n_cells=40, seed=4, noise=2.0)
    _, _, expected = direct(problem)

    def stalls(*args, **kwargs):
        raise l2.Stalled("InsufficientProgress")

    monkeypatch.setattr(l2, "solve", stalls)
    x, events, certificate = direct(problem)
    assert not events and certificate["uncertified"] == 0
    assert abs(certificate["objective"] - expected["objective"]) <= REL * expected["objective"]


def test_overlapping_bound_rows_are_written_over_answer_variables():
    """A child's total and its group bounds together (overlapping rows) over the group answers, equal at every x."""
    problem, _ = make_problem(n_children=5, n_cells=30, seed=6, noise=1.0)
    columns = matrices.variables(problem)
    terms = matrices.weighted_terms(problem, columns, problem.queries)
    lifted = l2.lift(terms, len(columns))
    rows = sp.vstack([matrices.total_matrix(problem, columns), matrices.bound_rows(problem, columns)[0]]).tocsr()
    expressed = l2.express(lifted, rows)
    assert expressed.nnz < rows.nnz / 2  # one nonzero per total, one per group: not one per cell
    x = np.random.default_rng(2).random(len(columns))
    values = np.r_[x, np.zeros(lifted.n_total - len(columns))]
    for d in lifted.definitions:
        start = d.shape[1] - d.shape[0]
        values[start:d.shape[1]] = -(d[:, :start] @ values[:start])
    assert np.allclose(expressed @ values, rows @ x, rtol=1e-12, atol=1e-9)


def _stated(problem: ParentProblem, queries=None) -> tuple[l2.Pass, np.ndarray, list]:
    """One pass of `problem` over `queries` (default: all) as the direct path states it: (pass, columns, terms)."""
    columns = matrices.variables(problem)
    terms = matrices.weighted_terms(problem, columns, problem.queries if queries is None else queries)
    parent = (matrices.parent_sum(problem, columns), problem.parent_counts.astype(float))
    return l2.Pass(terms, [], parent, matrices.bound_rows(problem, columns)), columns, terms


@pytest.mark.parametrize("seed, detailed", [(0, True), (1, True), (2, False), (3, False)])
def test_the_lagrangian_bound_is_below_the_optimum_at_any_dual_and_tight_at_the_solvers(seed, detailed):
    """dual_bound at the solver's duals certifies its point; at duals moved far from them it is still below the
    optimum (weak duality), also where x carries no weight of its own (no `detailed` query: the duals of x >= 0
    absorb what the weightless variables need)."""
    problem, _ = make_problem(n_children=12, n_cells=40, seed=seed, noise=2.0)
    queries = [q for q in problem.queries if detailed or q.name != "detailed"]
    stated, columns, terms = _stated(problem, queries)
    scale = matrices.scale_of([y for _, y, _ in terms], stated.parent)
    optimum = matrices.objective(terms, l2.solve_point(stated, len(columns), scale, tight=True).x)[0]
    point = l2.solve_point(stated, len(columns), scale)
    value = matrices.objective(terms, point.x)[0]
    assert point.lower is not None and point.lower <= optimum * (1 + 1e-9) + 1e-9
    assert value - point.lower <= optimality.GAP_TOL * max(value, 1.0)
    qp = l2.system_of(stated, len(columns), scale)
    primal = point.x / scale - qp.shift[:len(columns)]  # not the solver's: a point of x alone, answers at 0
    primal = np.r_[primal, -qp.shift[len(columns):]]
    rng = np.random.default_rng(seed)
    n_rows = qp.system.a_matrix.shape[0]
    for spread in (1e-3, 1.0, 100.0):
        dual = rng.normal(0, spread, n_rows)
        bound = l2.dual_bound(qp.system, primal, dual)
        if bound is not None:
            assert bound + qp.constant <= optimum * (1 + 1e-9) + 1e-9


def test_the_lagrangian_bound_at_a_huge_cell_is_not_multiplied_by_its_count():
    """Millions of persons in one cell over 40 children (a large county's largest cell): Frank-Wolfe's gap at the
    clipped x multiplies each gradient error by the parent count; the bound from the solver's duals does not."""
    from test_topdown_solver import _huge_cell_problem

    problem = _huge_cell_problem()
    stated, columns, terms = _stated(problem)
    point = l2.solve_point(stated, len(columns), matrices.scale_of([y for _, y, _ in terms], stated.parent))
    value = matrices.objective(terms, point.x)[0]
    sums = problem.parent_counts.astype(float)
    frank_wolfe = optimality.certify(problem, columns, terms, point.x, parent_sums=sums, bounds=stated.bounds, fixed=[])[1]
    assert value - point.lower <= optimality.GAP_TOL * value
    assert value - point.lower < frank_wolfe


def test_equalities_that_others_imply_are_left_out_finest_first():
    """hhgq-like held answers (a partition), hhinstlevels-like ones (unions of its rows), the total (all of them), and
    a row without a variable: only the partition stays; a row that is no union of it stays too."""
    groups = np.array([0, 0, 1, 1, 2, 3, 3, 4])
    n = len(groups)
    hhgq = sp.csr_matrix((np.ones(n), (groups, np.arange(n))), shape=(6, n))  # row 5: no variable (a structural zero)
    levels = sp.csr_matrix((np.ones(n), (np.array([0, 0, 0, 0, 1, 1, 1, 2]), np.arange(n))), shape=(3, n))
    total = sp.csr_matrix(np.ones((1, n)))
    odd = sp.csr_matrix(np.r_[1.0, np.zeros(n - 1)][None, :])  # half of hhgq's first row: not implied
    kept = l2._independent([(levels, np.arange(3.0)), (total, np.array([8.0])), (hhgq, np.arange(6.0)),
                            (odd, np.array([1.0]))])
    assert [a.shape[0] for a, _ in kept] == [5, 1]  # hhgq without its empty row, then the row no union gives
    assert np.array_equal(kept[0][1], np.arange(5.0)) and (kept[1][0] != odd).nnz == 0
