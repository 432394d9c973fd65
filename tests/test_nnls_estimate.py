"""TopDown without rounding (rounding NO_ROUNDING): nonnegative least squares carried down level by level, each
level's fractional solution the parents of the next. A research estimator of the same NMF as the integral release;
the integral path is untouched by it."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from conftest import ROOT
from test_topdown_solver import make_problem

from das.driver.pipeline import Pipeline
from das.frame.rundir import nmf_level_path
from das.io import nmf
from das.model.rules import block_bounds, level_bounds
from das.model.schema import load_schema
from das.topdown import engine
from das.topdown.batch import read_single_children, single_child_chains
from das.topdown.measure import Target
from das.topdown.problem import ChildConstraints, measured, parent_problem, root_problem
from das.topdown.rounding import NO_ROUNDING, check_engine_rounding, check_rounding, match_rows
from das.topdown.solve import solve_parent, solve_root

RUNS = ROOT / "specs" / "runs"
SPECS = ("tiny", "vt_grand_isle")
SEED = 3


def measured_spec(name: str, nmf_dir: Path):
    """The spec's pipeline (seeded), its inputs, and its NMF measured into `nmf_dir`."""
    pipe = Pipeline.prepare(RUNS / f"{name}.toml", SEED)
    confidential = pipe.read_inputs()
    pipe.measure(confidential, Target(nmf_dir))
    return pipe, confidential


@pytest.fixture(scope="module", params=SPECS)
def spec(request, tmp_path_factory):
    """(pipeline, inputs, NMF directory) of a shipped small spec, measured once per module."""
    nmf_dir = tmp_path_factory.mktemp(f"nmf-{request.param}")
    pipe, confidential = measured_spec(request.param, nmf_dir)
    return pipe, confidential, nmf_dir


def persons(spec, **changes):
    """The engine's persons blocks for the spec, with its own options changed by `changes`."""
    pipe, confidential, nmf_dir = spec
    options = replace(pipe.engine_options(), **changes)
    return engine.postprocess("persons", pipe.schemas["persons"], confidential.geography, confidential.invariants,
                              nmf_dir=nmf_dir, options=options)[0]


@pytest.fixture(scope="module")
def fractional(spec):
    return persons(spec, rounding=NO_ROUNDING)


def roots(spec):
    """The root solved as the engine does (its own answers, its only descendants', its bounds) without rounding
    and with it, and the root problem's cells (those the integral solution's `l2` is over)."""
    pipe, confidential, nmf_dir = spec
    schema, geography = pipe.schemas["persons"], confidential.geography
    root = geography.levels[0]
    answers = list(nmf.read_level(nmf_level_path(nmf_dir, "persons", root), geography.units(root)).values())
    finer = read_single_children(single_child_chains(
        geography, lambda level: nmf_level_path(nmf_dir, "persons", level), root, lo=0, hi=1))
    bounds = level_bounds(schema, confidential.invariants, geography, level=root, lo=0, hi=1)
    settings = pipe.engine_options().settings(root)
    solved = [solve_root(schema, answers, bounds, settings=replace(settings, rounding=r), descendants=finer)
              for r in (NO_ROUNDING, settings.rounding)]
    cells = root_problem(schema, measured(answers, finer), bounds, settings.passes).cells
    return solved[0], solved[1], cells


def test_fractional_blocks_are_nonnegative_floats_that_hold_every_rule(spec, fractional):
    pipe, confidential, _ = spec
    schema, geography, invariants = pipe.schemas["persons"], confidential.geography, confidential.invariants
    assert sp.isspmatrix_csr(fractional) and fractional.dtype == np.float64
    assert fractional.shape == (geography.n_blocks, schema.size)
    assert fractional.data.min(initial=0.0) >= -1e-9
    for b in block_bounds(schema, invariants):  # cells the invariants forbid are exactly 0
        answers = np.asarray((fractional @ schema.query(b.query).matrix.T).todense())
        assert (answers[b.structural_zeros()] == 0).all()
    for level in geography.levels:  # within every bound at every level, to the solver's accuracy
        histograms = geography.aggregate(fractional, level)
        for b in level_bounds(schema, invariants, geography, level=level):
            answers = np.asarray((histograms @ schema.query(b.query).matrix.T).todense())
            margin = 1e-6 * np.maximum(1.0, np.abs(answers))
            assert (answers >= b.lower - margin).all() and (answers <= b.upper + margin).all()
    for level, total in invariants.total_population.items():
        assert np.allclose(np.asarray(geography.aggregate(fractional, level).sum(axis=1)).ravel(), total,
                           rtol=0, atol=1e-6)


def test_every_parent_is_the_sum_of_its_children_down_from_the_fractional_root(spec, fractional):
    """Children sum to their parent at every level, and so the blocks sum, cell by cell, to the root solved
    without rounding on its own."""
    _, confidential, _ = spec
    geography = confidential.geography
    for parent_level, level in zip(geography.levels, geography.levels[1:]):
        parents = geography.aggregate(fractional, parent_level).toarray()
        children = geography.aggregate(fractional, level).toarray()
        offsets = geography.child_ranges(parent_level)
        sums = np.add.reduceat(children, offsets[:-1], axis=0)
        assert np.allclose(sums, parents, rtol=0, atol=1e-6)
    root, _, _ = roots(spec)
    assert np.allclose(geography.aggregate(fractional, geography.levels[0]).toarray().ravel(), root.counts,
                       rtol=0, atol=1e-6)


def test_the_fractional_solution_is_not_integral(fractional):
    assert np.abs(fractional.data - np.rint(fractional.data)).max() > 1e-3


def test_at_the_root_it_is_the_integral_paths_least_squares_before_rounding(spec):
    """The same problem, the same L2 point: apart from the solver's residue below ZERO_TOL (zeroed) and the total
    invariant then met exactly (each cell scaled by about 1e-7: tiny's largest moves by 1.2e-6), unchanged."""
    fractional_root, integral_root, cells = roots(spec)
    assert fractional_root.rounding_method in ("none", "copy") and fractional_root.counts.dtype == np.float64
    assert integral_root.counts.dtype == np.int64
    off = np.ones(len(fractional_root.counts), bool)
    off[cells] = False
    assert (fractional_root.counts[off] == 0).all()
    assert np.allclose(fractional_root.counts[cells], integral_root.l2[0], rtol=1e-6, atol=1e-6)


def test_the_integral_path_is_integral_and_repeatable(spec, fractional):
    integral = persons(spec)
    again = persons(spec)
    assert integral.dtype == np.int64 and (integral != again).nnz == 0
    assert (abs(integral - fractional) > 1e-3).nnz > 0  # two estimators of the same NMF, not one


def test_a_run_spec_cannot_ask_for_no_rounding_nor_a_checkpointed_engine(spec, tmp_path):
    with pytest.raises(ValueError, match="rounding must be one of"):
        check_rounding(NO_ROUNDING)
    assert check_engine_rounding(NO_ROUNDING) == NO_ROUNDING and check_engine_rounding("milp") == "milp"
    with pytest.raises(ValueError, match="rounding must be one of"):
        check_engine_rounding("nearest")
    with pytest.raises(ValueError, match="checkpoint"):
        persons(spec, rounding=NO_ROUNDING, checkpoint_dir=tmp_path)
    assert not any(tmp_path.iterdir())


# ---------------------------------------------------------------------------------------------
# One parent without rounding


def test_a_single_child_copies_its_fractional_parent_untruncated():
    problem, _ = make_problem(n_children=1, zeros=0.0, seed=2)
    fractional = replace(problem, parent_counts=problem.parent_counts + 0.375)
    solution = solve_parent(fractional, rounding=NO_ROUNDING)
    assert solution.rounding_method == "copy" and solution.counts.dtype == np.float64
    assert np.array_equal(solution.counts[0], fractional.parent_counts)
    schema = load_schema("pl94_persons")
    counts = np.zeros(schema.size)
    counts[[3, 7]] = [2.5, 0.25]
    built = parent_problem(schema, "p", np.array(["a"]), counts, answers=[], bounds=[], dtype=float)
    assert built.parent_counts.tolist() == [2.5, 0.25]
    assert parent_problem(schema, "p", np.array(["a"]), np.rint(counts), answers=[], bounds=[]).parent_counts.dtype \
        == np.int64


@pytest.mark.parametrize("seed", range(3))
def test_a_parent_without_rounding_is_its_matched_least_squares_point(seed):
    """The same problem: the fractional counts are the integral path's L2 point (matched to the parent), not
    rounded; children sum to the parent, nothing negative, nothing where a child's cell is a structural zero."""
    problem, _ = make_problem(n_children=3 + 4 * seed, n_cells=40, seed=seed, noise=3.0)
    fractional = solve_parent(problem, rounding=NO_ROUNDING)
    integral = solve_parent(problem)
    counts = fractional.counts
    assert counts.dtype == np.float64 and fractional.rounding_method == NO_ROUNDING
    assert np.abs(counts - integral.l2).max() < 1e-6
    assert np.allclose(counts.sum(axis=0), problem.parent_counts, rtol=1e-12, atol=0)
    assert counts.min() >= 0 and (counts[~problem.allowed] == 0).all()
    assert np.abs(counts - np.rint(counts)).max() > 1e-3


def test_children_totals_held_as_invariants_are_met_exactly_with_the_parent_sums():
    """Equality bound rows (a total invariant per child, as the states have) hold to float precision together
    with the per-cell parent sums: the solver alone meets either only to its tolerance."""
    problem, truth = make_problem(n_children=6, n_cells=50, seed=7, zeros=0.0, noise=4.0)
    c = problem.constraints
    totals = truth.sum(axis=1)[:, None]
    rows = ChildConstraints(sp.vstack([c.matrix, np.ones((1, problem.n_cells))]).tocsr(),
                            np.hstack([c.lower, totals]).astype(np.int64), np.hstack([c.upper, totals.astype(float)]))
    solution = solve_parent(replace(problem, constraints=rows), rounding=NO_ROUNDING)
    assert not solution.events
    assert np.allclose(solution.counts.sum(axis=1), totals.ravel(), rtol=1e-11, atol=0)
    assert np.allclose(solution.counts.sum(axis=0), problem.parent_counts, rtol=1e-12, atol=0)


def test_the_failsafe_without_rounding_keeps_the_relaxed_sums_unrounded():
    problem, _ = make_problem(n_children=5, n_cells=20, seed=1, zeros=0.0, noise=1.0)
    c = problem.constraints
    lower = np.repeat(np.where(c.matrix.getnnz(axis=1) > 0, 1, 0)[None, :], problem.n_children, axis=0)
    lower[0, 0] = problem.parent_counts @ c.matrix.toarray()[0] + 3  # child 0 needs 3 more than exist
    infeasible = replace(problem, constraints=ChildConstraints(c.matrix, lower.astype(np.int64), c.upper))
    solution = solve_parent(infeasible, rounding=NO_ROUNDING)
    assert solution.events and solution.events[0].slack >= 3 - 1e-6
    counts = solution.counts
    assert counts.dtype == np.float64 and counts.min() >= 0
    values = counts @ c.matrix.T.toarray()
    assert (values >= lower - 1e-6).all()
    assert np.abs(counts.sum() - problem.parent_counts.sum() - solution.events[0].slack) < 1e-4


def test_equality_rows_are_matched_by_scaling_their_variables():
    x = np.array([1.0, 2.0, 3.0, 0.0])
    disjoint = sp.csr_matrix(np.array([[1.0, 1.0, 0, 0], [0, 0, 1.0, 1.0]]))
    assert np.allclose(disjoint @ match_rows(x, disjoint, np.array([6.0, 1.5])), [6.0, 1.5], rtol=1e-15)
    assert match_rows(x, disjoint, np.array([6.0, 1.5]))[3] == 0  # a zero stays zero
    shared = sp.csr_matrix(np.array([[1.0, 1.0, 0, 0], [0, 1.0, 1.0, 0]]))  # one after the other: the last holds
    matched = match_rows(x, shared, np.array([6.0, 10.0]))
    assert matched[0] == 2.0 and np.isclose(matched[1:3].sum(), 10.0, rtol=1e-15)
