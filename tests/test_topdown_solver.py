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


def test_highs_prints_no_banner_into_the_run_output():
    """HiGHS writes its banner to the process's stdout from its first Highs(); a run summary had it once per worker."""
    import subprocess
    import sys

    code = ("import numpy as np, scipy.sparse as sp\nfrom das.topdown import solve\n"
            "x = solve._highs_lp(np.ones(2), sp.csr_matrix(np.ones((1, 2))), np.array([1.0]), np.array([1.0]), "
            "col_upper=np.ones(2), integer=False)\nprint(float(x.sum()))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out == "1.0\n"
