"""The pipeline's stages, run by hand, give what `das run` gives; budgets are exact at every stage."""

from fractions import Fraction

import numpy as np
import pyarrow.parquet as pq
import pytest

from das.core.errors import BudgetError
from das.driver.pipeline import Pipeline
from das.driver.run import run
from das.model import rules
from das.topdown.measure import Target


@pytest.fixture(scope="module")
def tiny_stages(tmp_path_factory):
    """tiny, seed 3, through the stages by hand: (pipeline, confidential, solved, NMF directory)."""
    nmf_dir = tmp_path_factory.mktemp("stages") / "nmf"
    pipe = Pipeline.prepare("tiny", 3)
    confidential = pipe.read_inputs()
    pipe.measure(confidential, Target(nmf_dir))
    solved, _ = pipe.postprocess(confidential, nmf_dir, pipe.engine_options())
    return pipe, confidential, solved, nmf_dir


def test_releases_come_persons_first_with_their_certificates():
    pipe = Pipeline.prepare("tiny", 3)
    assert list(pipe.releases) == ["persons", "units"]
    persons = pipe.releases["persons"]
    assert persons.certificate.rho == persons.allocation.rho == persons.strategy.rho
    assert not pipe.rng.private and b"NOT PRIVATE" in pipe.metadata()[b"das.privacy"]


def test_another_budget_keeps_the_shares_and_certifies_the_new_total():
    pipe = Pipeline.prepare("tiny", 3)
    half = pipe.at_budget("persons", pipe.releases["persons"].allocation.rho / 2)
    assert half.certificate.rho == pipe.releases["persons"].allocation.rho / 2
    for m, full in zip(half.allocation.items, pipe.releases["persons"].allocation.items, strict=True):
        assert (m.level, m.query) == (full.level, full.query) and m.sigma2 == 2 * full.sigma2
    with pytest.raises(BudgetError):
        pipe.at_budget("persons", Fraction(0))


def test_the_stages_by_hand_give_das_runs_release(tiny_stages, tmp_path):
    pipe, confidential, solved, _ = tiny_stages
    result = run("tiny", tmp_path / "run", seed=3, workers=1, progress=False)
    assert result.valid
    mdf = pq.read_table(tmp_path / "run" / "mdf_persons.parquet")
    assert mdf.num_rows == int(solved["persons"].sum())
    assert result.manifest.counts.persons == int(confidential.histograms["persons"].sum())


def test_the_solution_holds_every_rule_at_every_level(tiny_stages):
    pipe, confidential, solved, _ = tiny_stages
    geography, invariants = confidential.geography, confidential.invariants
    for level in geography.levels:
        bounds = rules.level_bounds(pipe.schemas["persons"], invariants, geography, level=level)
        assert rules.holds(pipe.schemas["persons"], bounds, geography.aggregate(solved["persons"], level)) == []
    units = rules.household_persons(pipe.schemas["persons"], solved["persons"])
    facts = rules.Invariants(invariants.housing_units, invariants.gq_facilities, {}, units)
    assert rules.holds(pipe.schemas["units"], rules.block_bounds(pipe.schemas["units"], facts), solved["units"]) == []
    assert np.array_equal(np.asarray(solved["units"].sum(axis=1)).ravel(), invariants.housing_units)
