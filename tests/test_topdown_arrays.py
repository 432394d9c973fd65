"""The per-parent matrices, built from their arrays for speed, equal scipy's own constructions of them
(fancy indexing, kron, coo, vstack, diags, transpose): the same problems, the same QP, the same certificate."""

from fractions import Fraction

import numpy as np
import pytest
import scipy.sparse as sp
from test_topdown_solver import make_problem

from das.io.nmf import NoisyAnswers
from das.model.rules import Bounds
from das.model.schema import load_schema
from das.topdown import l2, matrices
from das.topdown.problem import ChildAnswers, ParentProblem, QueryAnswers, measured, parent_problem, restricted


def same(a, b) -> bool:
    """The same CSR matrix entry for entry, in the same order."""
    a, b = sp.csr_matrix(a), sp.csr_matrix(b)
    return (a.shape == b.shape and np.array_equal(a.indptr, b.indptr) and np.array_equal(a.indices, b.indices)
            and np.array_equal(a.data, b.data) and a.dtype == b.dtype)


@pytest.mark.parametrize("seed", range(20))
def test_restricted_is_fancy_indexing(seed):
    rng = np.random.default_rng(seed)
    m = sp.random(int(rng.integers(1, 30)), int(rng.integers(1, 60)), density=0.2, format="csr", random_state=seed)
    cells = np.flatnonzero(rng.random(m.shape[1]) < 0.5)
    position = np.full(m.shape[1], -1)
    position[cells] = np.arange(len(cells))
    rows = rng.random(m.shape[0]) < 0.6
    assert same(restricted(m, position, len(cells)), m[:, cells])
    assert same(restricted(m, position, len(cells), rows), m[rows][:, cells])


def reference_parent_problem(schema, children, parent_counts, answers, bounds):
    """The construction before it was built from arrays: scipy fancy indexing throughout."""
    cells = np.flatnonzero(parent_counts)
    allowed = np.ones((len(children), len(cells)), dtype=bool)
    rows, lower, upper = [], [], []
    for b in bounds:
        q = schema.query(b.query).matrix[:, cells].tocsr()
        zeros = b.structural_zeros()
        if zeros.any():
            allowed &= ~((sp.csr_matrix(zeros.astype(np.int64)) @ q).toarray() > 0)
        binding = b.binding()
        if binding.any():
            rows.append(q[binding])
            lower.append(b.lower[:, binding])
            upper.append(b.upper[:, binding])
    queries = []
    for a in answers:
        q = schema.query(a.query).matrix[:, cells].tocsr()
        keep = q.getnnz(axis=1) > 0
        queries.append((a.query, q[keep], a.answers.answers[:, keep], a.answers.variance, a.rows))
    matrix = sp.vstack(rows).tocsr() if rows else None
    return cells, allowed, queries, matrix, lower, upper


@pytest.mark.parametrize("seed", range(6))
def test_parent_problem_equals_the_fancy_indexing_construction(seed):
    schema = load_schema("pl94_persons")
    rng = np.random.default_rng(seed)
    n_children = int(rng.integers(1, 12))
    parent_counts = rng.poisson(3, schema.size) * (rng.random(schema.size) < 0.02 + 0.1 * seed)
    names = ["total", "hhgq", "votingage x hispanic", "detailed"]
    children = np.array([f"c{i}" for i in range(n_children)])
    noisy = [NoisyAnswers(n, "tract", children, rng.integers(-9, 9, (n_children, schema.query(n).matrix.shape[0])),
                          Fraction(3)) for n in names]
    finer = [ChildAnswers(NoisyAnswers("detailed", "block", np.array(["b0"]), rng.integers(-9, 9, (1, schema.size)),
                                       Fraction(2)), np.array([0]))]
    hhgq = schema.query("hhgq").matrix.shape[0]
    upper = np.where(rng.random((n_children, hhgq)) < 0.3, 0.0, np.inf)
    upper[:, 0] = np.where(rng.random(n_children) < 0.5, 40.0, upper[:, 0])
    lower = np.where(upper > 0, rng.integers(0, 3, (n_children, hhgq)), 0).astype(np.int64)
    total = rng.integers(0, 50, (n_children, 1))
    bounds = [Bounds("hhgq", lower, upper), Bounds("total", total, total.astype(float))]
    answers = measured(noisy, finer)
    got = parent_problem(schema, "p", children, parent_counts, answers=answers, bounds=bounds)
    cells, allowed, queries, matrix, lows, highs = reference_parent_problem(schema, children, parent_counts, answers,
                                                                            bounds)
    assert np.array_equal(got.cells, cells) and np.array_equal(got.allowed, allowed)
    assert len(got.queries) == len(queries)
    for q, (name, m, y, variance, child_rows) in zip(got.queries, queries):
        assert q.name == name and same(q.matrix, m) and np.array_equal(q.noisy.answers, y) and q.noisy.variance == variance
        assert (q.rows is None) == (child_rows is None)
    assert same(got.constraints.matrix, matrix)
    assert np.array_equal(got.constraints.lower, np.hstack(lows))
    assert np.array_equal(got.constraints.upper, np.hstack(highs))


def random_problem(seed) -> ParentProblem:
    problem, _ = make_problem(n_children=2 + seed, n_cells=10 + 7 * seed, seed=seed, zeros=0.3, noise=2.0)
    rows = np.array([0, problem.n_children - 1])  # a descendant's answers for two children
    width = problem.queries[1].matrix.shape[0]
    extra = QueryAnswers(problem.queries[1].matrix,
                         NoisyAnswers("again", "block", np.array(["d0", "d1"]), np.ones((2, width)), Fraction(5)), rows)
    return ParentProblem(problem.parent, problem.children, problem.cells, problem.parent_counts, problem.allowed,
                         problem.queries + (extra,), problem.constraints)


def kron_rows(matrix, children, n_children, columns):
    """kron(pick(children), matrix)[:, columns], as scipy builds it."""
    pick = sp.csr_matrix((np.ones(len(children)), (np.arange(len(children)), children)),
                         shape=(len(children), n_children))
    return sp.kron(pick, sp.csr_matrix(matrix, dtype=float), format="csr")[:, columns].tocsr()


@pytest.mark.parametrize("seed", range(8))
def test_matrices_over_the_variables_equal_scipy_kron_and_coo(seed):
    problem = random_problem(seed)
    columns = matrices.variables(problem)
    n, k = problem.n_cells, problem.n_children
    parent_sum = sp.csr_matrix((np.ones(len(columns)), (columns % n, np.arange(len(columns)))), shape=(n, len(columns)))
    assert same(matrices.parent_sum(problem, columns), parent_sum)
    assert same(matrices.total_matrix(problem, columns), kron_rows(np.ones((1, n)), np.arange(k), k, columns))
    assert same(matrices.bound_rows(problem, columns).matrix,
                kron_rows(problem.constraints.matrix, np.arange(k), k, columns))
    x = np.random.default_rng(seed).random(len(columns))
    terms = matrices.weighted_terms(problem, columns, problem.queries)
    assert len(terms) == len(problem.queries)
    for q, (a, y, w) in zip(problem.queries, terms):
        children = np.arange(k) if q.rows is None else q.rows
        full = kron_rows(q.matrix, children, k, columns)
        keep = full.getnnz(axis=1) > 0
        assert same(a, full[keep]) and same(matrices.query_rows(problem, q, columns), full)
        assert np.array_equal(y, q.noisy.answers.ravel()[keep]) and w == 1.0 / float(q.noisy.variance)
    value, grad = matrices.objective(terms, x)
    reference = sum((2.0 * w) * (a.T @ (a @ x - y)) for a, y, w in terms)
    assert np.array_equal(grad, np.zeros(len(x)) + reference)  # bit for bit: the same order of sums
    assert value == sum(w * float((a @ x - y) @ (a @ x - y)) for a, y, w in terms)


@pytest.mark.parametrize("seed", range(10))
def test_the_qp_pieces_equal_vstack_fancy_rows_and_diags(seed, monkeypatch):
    rng = np.random.default_rng(seed)
    blocks = [sp.random(int(rng.integers(0, 6)), int(rng.integers(1, 20)), density=0.3, format="csr",
                        random_state=seed + i) for i in range(4)]
    width = max(b.shape[1] for b in blocks) + 3
    assert same(l2._stacked(blocks, width), sp.vstack([l2._pad(b, width) for b in blocks], format="csr"))
    m = blocks[-1]
    rows = rng.random(m.shape[0]) < 0.5
    assert same(l2._picked(m, rows, -1.0), -m[rows]) and same(l2._picked(m, rows), m[rows])
    captured = {}

    def capture(p, q, a, b, cones, settings):
        captured["p"] = p
        raise StopIteration

    monkeypatch.setattr(l2.clarabel, "DefaultSolver", capture)
    a = sp.csr_matrix(np.eye(12)[rng.random(12) < 0.6])  # some variables in no term: zero weight
    terms = [(a, rng.random(a.shape[0]), 1.0)]
    with pytest.raises(StopIteration):
        l2.solve(l2.Pass(terms), 12, 1.0)
    assert same(captured["p"].tocsr(), sp.diags(2.0 * l2.lift(terms, 12).weight, format="csc").tocsr())


def test_a_batch_s_answers_split_into_each_parent_s_children():
    """`ChildAnswers.within`: a parent's own rows of the batch, and its children's only descendants renumbered
    from its first child; the exact variance and the geocodes go along."""
    children = np.array([f"c{i}" for i in range(6)])
    own = ChildAnswers(NoisyAnswers("total", "tract", children, np.arange(6).reshape(6, 1), Fraction(7, 3)))
    finer = ChildAnswers(NoisyAnswers("total", "block", np.array(["b1", "b3", "b4"]), np.array([[10], [30], [40]]),
                                      Fraction(1, 9)), np.array([1, 3, 4]))
    first, second = own.within(0, 3), own.within(3, 6)
    assert first.rows is None and first.answers.answers.ravel().tolist() == [0, 1, 2]
    assert second.answers.geocodes.tolist() == ["c3", "c4", "c5"] and second.answers.variance == Fraction(7, 3)
    mine = finer.within(3, 6)
    assert mine.rows.tolist() == [0, 1] and mine.answers.geocodes.tolist() == ["b3", "b4"]
    assert mine.answers.answers.ravel().tolist() == [30, 40] and mine.answers.variance == Fraction(1, 9)
    assert finer.within(0, 1).rows.tolist() == []  # no descendant of child 0: the problem leaves it out
    schema = load_schema("h1_units")
    problem = parent_problem(schema, "p", children[:1], np.array([2, 0]), answers=measured(
        [own.answers.rows(0, 1)], [finer.within(0, 1)]), bounds=[])
    assert [q.name for q in problem.queries] == ["total"] and problem.queries[0].rows is None
