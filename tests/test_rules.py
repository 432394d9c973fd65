"""das.model.rules: one interpreter of the schema's constraint kinds, honoured by every stage.

A kind taught to das in one place (`rules.register`) and named by a schema is held by the
post-processing, enforced on the inputs, and checked by the independent validator, with no
other code change.
"""


import numpy as np
import pandas as pd
import pytest
from conftest import TINY

from das.core.errors import SpecError
from das.driver.run import run
from das.io.microdata import collect_problems
from das.io.validation import notes
from das.model import rules
from das.model.rules import block_bounds, level_bounds
from das.model.schema import load_schema, resolve_spec
from das.validate import validate_run

PER_UNIT = {"limit": 3}  # the new rule's parameter, changed by the tests below


def _crowding(c, query, facts, *, lower, upper):

    """At most PER_UNIT['limit'] household persons (hhgq cell 0) per housing unit in a block."""
    upper[:, 0] = np.minimum(upper[:, 0], PER_UNIT["limit"] * facts.housing_units)


@pytest.fixture
def crowding(tmp_path):
    """A copy of the PL94 schema with one more rule, of a kind registered here only."""
    rules.register("crowding", rules.Kind(_crowding, lambda c, s, cell: "no more household persons than the "
                                                                         "crowding rule allows per housing unit"))
    text = resolve_spec("pl94_persons", "schemas").read_text()
    path = tmp_path / "pl94_crowding.toml"
    path.write_text(text + '\n[[constraints]]\nkind = "crowding"\nquery = "hhgq"\n')
    yield load_schema(path)
    del rules.KINDS["crowding"]
    PER_UNIT["limit"] = 3


def test_the_shipped_kinds_are_registered_and_an_unknown_kind_is_refused(tmp_path):
    assert {"facilities", "structural_zero", "housing_units", "household_persons"} <= set(rules.KINDS)
    path = tmp_path / "bad.toml"
    path.write_text(resolve_spec("pl94_persons", "schemas").read_text()
                    + '\n[[constraints]]\nkind = "no_such_rule"\nquery = "hhgq"\n')
    with pytest.raises(SpecError, match="no_such_rule"):
        load_schema(path)


def test_a_new_kind_gives_bounds(crowding):
    facts = rules.Invariants(np.array([4, 0, 1]), np.zeros((3, 7), np.int64), {})
    families = rules.block_bounds(crowding, facts)
    assert [f.rule.kind for f in families] == ["facilities", "structural_zero", "crowding"]
    assert families[-1].upper[:, 0].tolist() == [12, 0, 3]
    assert np.isinf(families[-1].upper[:, 1:]).all() and (families[-1].lower == 0).all()


def test_the_input_check_names_the_records_beyond_a_new_rule(crowding):
    PER_UNIT["limit"] = 2  # tiny has blocks with 2.5 to 3 household persons per housing unit
    problems, _ = collect_problems(TINY / "persons.csv", TINY / "units.csv", crowding)
    beyond = [p for p in problems if "crowding rule" in str(p)]
    assert beyond[0].row is not None and all(p.column == "GQTYPE_PL" for p in beyond)
    PER_UNIT["limit"] = 3  # every block within 3 per unit: the same file passes
    problems, inputs = collect_problems(TINY / "persons.csv", TINY / "units.csv", crowding)
    assert problems == [] and inputs is not None


def test_a_shortfall_note_comes_from_the_kind(crowding):
    _, inputs = collect_problems(TINY / "persons.csv", TINY / "units.csv", crowding)
    rules.register("crowding", rules.Kind(_crowding, lambda c, s, cell: "", lambda blocks, pairs: f"{blocks} crowded"))
    assert not any(n.endswith("crowded") for n in notes(inputs, crowding))  # an upper-bound-only rule: no shortfall


def test_post_processing_holds_a_new_rule_and_the_validator_checks_it(crowding, tmp_path):
    spec = tmp_path / "tiny_crowding.toml"
    text = resolve_spec("tiny", "runs").read_text()
    text = text.replace('schema = "pl94_persons"', f'schema = "{tmp_path / "pl94_crowding.toml"}"')
    text = text.replace("../../geography_fixtures/tiny/", f"{TINY.resolve()}/")
    spec.write_text(text)
    result = run(spec, tmp_path / "out", seed=5, workers=1, progress=False)
    assert result.valid, result.manifest.validation.violations[:3]
    assert any("crowding" in c and c.startswith("ok") for c in result.manifest.validation.checks)
    mdf = pd.read_parquet(tmp_path / "out" / "mdf_persons.parquet")
    units = pd.read_parquet(tmp_path / "out" / "mdf_units.parquet")
    geocode = ["TABBLKST", "TABBLKCOU", "TABTRACTCE", "TABBLK"]
    household = mdf[mdf["GQTYPE_PL"] == 0].groupby(geocode).size()
    housing = units[units["RTYPE"] == 2].groupby(geocode).size()
    household, housing = household.align(housing, fill_value=0)
    assert (household <= 3 * housing).all()
    PER_UNIT["limit"] = 1  # the same release against a stricter rule: the validator reads it from the registry
    if (household <= housing).all():
        pytest.fail("the release has no block above one household person per housing unit")
    report = validate_run(tmp_path / "out")
    assert any("above the crowding rule" in v for v in report.violations)


def test_records_beyond_a_bound_are_those_past_it_in_file_order():
    bounds = rules.Bounds("q", np.zeros((2, 2), np.int64), np.array([[2, np.inf], [0, 1]]))
    block = np.array([0, 0, 0, 1, 0, 0, 1, 1])
    cells = np.array([0, 0, 1, 0, 0, 0, 1, 1])
    assert rules.excess_records(bounds, block, cells).tolist() == [False, False, False, True, True, True, False, True]


def test_range_bounds_equal_whole_level_sums_on_any_range(perry, monkeypatch):
    """Bounds of a range of geounits, summed slice by slice, equal the block bounds aggregated whole."""
    schema, geography, invariants, _ = perry
    monkeypatch.setattr("das.model.rules.BLOCK_SLICE", 37)  # ranges cross block slices
    rng = np.random.default_rng(0)
    families = block_bounds(schema, invariants)
    for level in geography.levels:
        full = [(f.query, np.asarray(geography.aggregate(f.lower, level)), np.asarray(geography.aggregate(f.upper, level)))
                for f in families]
        if level in invariants.total_population:
            total = invariants.total_population[level][:, None]
            full.append(("total", total, total.astype(float)))
        n = geography.n_units(level)
        for lo, hi in [(0, n), *((int(a), int(b) + 1) for a, b in np.sort(rng.integers(0, n, (3, 2)), axis=1))]:
            part = level_bounds(schema, invariants, geography, level=level, lo=lo, hi=hi)
            assert [b.query for b in part] == [q for q, _, _ in full]
            for p, (_, lower, upper) in zip(part, full):
                assert np.array_equal(p.lower, lower[lo:hi]) and np.array_equal(p.upper, upper[lo:hi])
