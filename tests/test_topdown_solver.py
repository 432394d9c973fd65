"""The per-parent solver on synthetic problems: exact sums, bounds, zeros, recovery, failsafe."""

from fractions import Fraction

import numpy as np
import pytest
import scipy.sparse as sp

from das.io.nmf import NoisyAnswers
from das.topdown.problem import ChildConstraints, ParentProblem, QueryAnswers
from das.topdown.solve import solve_parent


def answers_of(name: str, answers: np.ndarray, variance) -> NoisyAnswers:
    """Answers of a synthetic problem's children ("c0", "c1", ...) at exact variance `variance`; real-valued
    answers too, which the solver takes like any others."""
    return NoisyAnswers(name, "tract", np.array([f"c{i}" for i in range(len(answers))]), answers, Fraction(variance))


def make_problem(n_children=8, n_cells=30, seed=0, noise=1.0, zeros=0.1, bounds=True, truth=None):
    rng = np.random.default_rng(seed)
    if truth is None:
        truth = rng.poisson(2.0, size=(n_children, n_cells)) * (rng.random((n_children, n_cells)) < 0.6)
    allowed = rng.random((n_children, n_cells)) >= zeros
    truth = truth * allowed
    parent = truth.sum(axis=0)
    keep = parent > 0
    truth, allowed, parent = truth[:, keep], allowed[:, keep], parent[keep]
    n = truth.shape[1]
    groups = rng.integers(0, 4, size=n)  # a 4-level marginal (like hhgq), nested in the total
    marginal = sp.csr_matrix((np.ones(n), (groups, np.arange(n))), shape=(4, n))
    identity = sp.identity(n, format="csr")
    total = sp.csr_matrix(np.ones((1, n)))
    queries = []
    for name, m, var in (("total", total, 4), ("group", marginal, 2), ("detailed", identity, 1)):
        answers = truth @ m.T.toarray()
        queries.append(QueryAnswers(m, answers_of(name, answers + noise * rng.normal(0, np.sqrt(var), answers.shape), var)))
    constraints = None
    if bounds:
        g = truth @ marginal.T.toarray()
        lower = np.where(g > 0, 1, 0).astype(np.int64)  # like "a facility holds >= 1 person"
        upper = np.full(g.shape, np.inf)
        constraints = ChildConstraints(marginal, lower, upper)
    problem = ParentProblem("p", tuple(f"c{i}" for i in range(n_children)), np.arange(n),
                            parent.astype(np.int64), allowed, tuple(queries), constraints, passes=((),))
    return problem, truth


def assert_valid(problem, counts):
    assert counts.dtype == np.int64 and (counts >= 0).all()
    assert np.array_equal(counts.sum(axis=0), problem.parent_counts)
    assert (counts[~problem.allowed] == 0).all()
    if problem.constraints is not None:
        values = counts @ problem.constraints.matrix.T.toarray()
        assert (values >= problem.constraints.lower).all() and (values <= problem.constraints.upper).all()


@pytest.mark.parametrize("seed", range(6))
def test_random_problems_give_valid_integer_solutions(seed):
    problem, _ = make_problem(n_children=2 + 7 * seed % 40, n_cells=20 + 50 * seed, seed=seed, noise=3.0)
    solution = solve_parent(problem)
    assert_valid(problem, solution.counts)
    assert solution.rounding_method in ("lp", "milp")
    assert np.abs(solution.counts - solution.l2).max() < 1 + 1e-6  # rounding moves each cell < 1
    assert not solution.events


def test_zero_noise_recovers_the_truth():
    problem, truth = make_problem(n_children=12, n_cells=80, seed=3, noise=0.0)
    assert np.array_equal(solve_parent(problem).counts, truth)


def test_totally_unimodular_rounding_needs_no_branching():
    problem, _ = make_problem(n_children=40, n_cells=200, seed=9, noise=5.0)
    assert solve_parent(problem).rounding_method == "lp"


def test_deterministic():
    problem, _ = make_problem(seed=4, noise=2.0)
    a, b = solve_parent(problem), solve_parent(problem)
    assert np.array_equal(a.counts, b.counts)


def test_one_child_copies_and_empty_parent_is_empty():
    problem, _ = make_problem(n_children=1, zeros=0.0, seed=2)
    solution = solve_parent(problem)
    assert solution.rounding_method == "copy"
    assert np.array_equal(solution.counts[0], problem.parent_counts)
    empty = ParentProblem("e", ("a", "b"), np.arange(3), np.zeros(3, np.int64), np.ones((2, 3), bool), (), None)
    assert solve_parent(empty).counts.sum() == 0


def test_infeasible_bounds_trigger_the_failsafe_with_minimal_slack():
    problem, truth = make_problem(n_children=5, n_cells=20, seed=1, zeros=0.0, noise=1.0)
    c = problem.constraints
    lower = c.lower.copy()
    lower[:, :] = np.where(c.matrix.getnnz(axis=1) > 0, 1, 0)[None, :]  # every child >= 1 in every group
    lower[0, 0] = problem.parent_counts @ c.matrix.toarray()[0] + 3     # child 0 needs 3 more than exist
    infeasible = ParentProblem(problem.parent, problem.children, problem.cells, problem.parent_counts,
                               problem.allowed, problem.queries, ChildConstraints(c.matrix, lower, c.upper),
                               passes=((),))
    solution = solve_parent(infeasible)
    assert solution.events, "the failsafe must be recorded"
    event = solution.events[0]
    assert event.stage == "l2" and "parent equality" in event.relaxed
    # the group-0 row can only be met by adding persons to the parent: at least 3 + (others' >= 1 each)
    assert event.slack >= 3 - 1e-6
    counts = solution.counts
    assert (counts >= 0).all()
    values = counts @ c.matrix.T.toarray()
    assert (values >= lower).all()  # the bounds hold; the parent sums are what was relaxed


def test_forced_milp_rounding_agrees_on_validity():
    problem, _ = make_problem(n_children=10, n_cells=40, seed=5, noise=2.0)
    solution = solve_parent(problem, rounding="milp")
    assert solution.rounding_method == "milp"
    assert_valid(problem, solution.counts)


@pytest.mark.parametrize("seed", range(4))
def test_the_lp_rounding_is_as_close_as_the_milp(seed):
    """The LP (solved without presolve) finds an integral vertex at the MILP's own L1 distance from the L2 point."""
    problem, _ = make_problem(n_children=5 + 9 * seed, n_cells=40 + 60 * seed, seed=20 + seed, noise=3.0)
    lp, milp = solve_parent(problem), solve_parent(problem, rounding="milp")
    assert lp.rounding_method == "lp" and milp.rounding_method == "milp"
    assert np.array_equal(lp.l2, milp.l2)
    distance = [np.abs(s.counts - s.l2).sum() for s in (lp, milp)]
    assert distance[0] == pytest.approx(distance[1], abs=1e-6)


def test_highs_prints_no_banner_into_the_run_output():
    """HiGHS writes its banner to the process's stdout from its first Highs(); a run summary had it once per worker."""
    import subprocess
    import sys

    code = ("import numpy as np, scipy.sparse as sp\nfrom das.topdown import solvers\n"
            "x = solvers.highs_lp(np.ones(2), sp.csr_matrix(np.ones((1, 2))), np.array([1.0]), np.array([1.0]), "
            "col_upper=np.ones(2), integer=False)\nprint(float(x.sum()))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out == "1.0\n"


def _one_pass(problem, *, tight=False):
    """The direct path's one pass of `problem`: (columns, terms, parent sums, bound rows, the solver's Point)."""
    from das.topdown import l2, matrices

    columns = matrices.variables(problem)
    terms = matrices.weighted_terms(problem, columns, problem.queries)
    parent = (matrices.parent_sum(problem, columns), problem.parent_counts.astype(float))
    bounds = matrices.bound_rows(problem, columns)
    scale = matrices.scale_of([y for _, y, _ in terms], parent)
    return columns, terms, parent[1], bounds, l2.solve_point(l2.Pass(terms, [], parent, bounds), len(columns), scale, tight)


def _huge_cell_problem(seed=0):
    """A parent whose first cell holds millions of persons spread over its children (a large county's
    largest cell), the other cells a few: the shape whose certificate failed at 10M persons (issue 26)."""
    rng = np.random.default_rng(seed)
    truth = rng.poisson(2.0, size=(40, 25)) * (rng.random((40, 25)) < 0.6)
    truth[:, 0] = rng.integers(100_000, 200_000, size=40)
    return make_problem(n_children=40, n_cells=25, seed=seed, zeros=0.0, truth=truth)[0]


@pytest.mark.parametrize("seed", range(3))
def test_the_dual_certificate_is_a_lower_bound_at_any_answers(seed):
    from das.topdown import optimality

    problem = _huge_cell_problem(seed) if seed == 0 else make_problem(seed=seed)[0]
    columns, terms, sums, bounds, tight = _one_pass(problem, tight=True)
    best, _ = optimality.certify(problem, columns, terms, tight.x, parent_sums=sums, bounds=bounds, fixed=[])
    rng = np.random.default_rng(seed)
    for spread in (1e-6, 1e-2, 1.0, 100.0):  # answers near the solver's, and far from them
        answers = [v + rng.normal(0, spread, v.shape) for v in tight.answers]
        for x in (tight.x, tight.x + rng.random(len(columns)) * spread):
            value, gap = optimality.certify(problem, columns, terms, x, parent_sums=sums, bounds=bounds, fixed=[],
                                       answers=answers)
            assert value - gap <= best * (1 + 1e-9) + 1e-9  # objective - gap never above the optimum
            frank_wolfe = optimality.certify(problem, columns, terms, x, parent_sums=sums, bounds=bounds, fixed=[])[1]
            assert gap <= max(frank_wolfe, optimality.GAP_TOL * max(value, 1.0))  # within tolerance, or the better bound


def test_the_certificate_at_the_solvers_answers_is_not_moved_by_a_shift_of_x():
    """x shifted by a little (as the clip at zero shifts it) moves every child's gradient, which the
    huge cell's parent count multiplies in Frank-Wolfe's gap; the dual at the solver's own answers is
    the same point's bound and stays within tolerance, and is still a lower bound."""
    from das.topdown import optimality

    problem = _huge_cell_problem()
    columns, terms, sums, bounds, point = _one_pass(problem)
    shifted = point.x + 2e-4 * np.random.default_rng(3).random(len(columns))
    value, frank_wolfe = optimality.certify(problem, columns, terms, shifted, parent_sums=sums, bounds=bounds, fixed=[])
    _, dual = optimality.certify(problem, columns, terms, shifted, parent_sums=sums, bounds=bounds, fixed=[],
                            answers=point.answers)
    assert frank_wolfe > optimality.GAP_TOL * value  # fails as before
    assert dual <= optimality.GAP_TOL * value < frank_wolfe
    best = optimality.certify(problem, columns, terms, _one_pass(problem, tight=True)[4].x, parent_sums=sums,
                         bounds=bounds, fixed=[])[0]
    assert value - dual <= best * (1 + 1e-9)
