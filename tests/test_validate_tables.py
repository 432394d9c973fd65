"""The validator's table recount equals a group-by count of the records, on the real persons of Perry County."""

import numpy as np
import pandas as pd
import pytest
from conftest import FIXTURES

from das.io.tables import column_names, load_tables
from das.model.schema import load_schema
from das.validate.reading import decode, geocode
from das.validate.tables import _aligned_differences, _merged_differences, recount_table, table_differences


@pytest.fixture(scope="module")
def persons():
    return pd.read_parquet(FIXTURES / "al_perry/persons.parquet")


def test_recount_table_equals_a_group_by_count_of_the_records(persons):
    schema = load_schema("pl94_persons")
    frame = persons.sample(frac=1.0, random_state=4).reset_index(drop=True)
    frame["geocode"] = geocode(frame)
    levels = decode(frame, schema)
    digits = {"county": 5, "tract": 11, "block": 15}
    specs = [s for s in load_tables("pl94") if s.schema == schema.name]
    assert any(s.where for s in specs)
    for spec in specs:
        recount = recount_table(frame, levels, schema, spec, geo_levels=list(digits))
        keep = np.ones(len(frame), dtype=bool)
        for factor, level in spec.where:
            keep &= levels[factor].to_numpy() == level
        for geo_level, k in digits.items():
            geocodes, recounted = recount.levels[geo_level]
            unit = frame["geocode"].astype(str).str.slice(0, k)[keep]
            expected = []
            for qname in spec.queries:
                q = schema.query(qname)
                cell = (pd.Series(np.ravel_multi_index([levels[f].to_numpy() for f in q.factors], q.shape))
                        if q.factors else pd.Series(np.zeros(len(frame), dtype=np.int64)))[keep]
                counts = pd.crosstab(unit.to_numpy(), cell.to_numpy()).reindex(columns=range(q.size), fill_value=0)
                expected.append(counts.to_numpy())
            assert geocodes.tolist() == sorted(unit.unique())
            assert np.array_equal(recounted, np.hstack(expected))


def _tampered(written: pd.DataFrame, cols, how: str, rng) -> pd.DataFrame:
    """A table as written, edited: values changed, a row dropped, a row repeated, or the rows shuffled."""
    written = written.copy()
    if how == "values":
        for _ in range(7):
            i, j = rng.integers(len(written)), rng.integers(len(cols))
            written.iloc[i, written.columns.get_loc(cols[j])] += int(rng.integers(1, 4))
    elif how == "dropped":
        written = written.drop(index=rng.choice(len(written), 3, replace=False))
    elif how == "repeated":
        written = pd.concat([written, written.iloc[[5]]], ignore_index=True)
    elif how == "shuffled":
        written = written.sample(frac=1.0, random_state=1)
    return written.reset_index(drop=True)


@pytest.mark.parametrize("how", ["none", "values", "dropped", "repeated", "shuffled"])
def test_the_row_by_row_comparison_says_what_the_merge_says(persons, how):
    """table_differences compares a table as das writes it row by row; whatever the rows, it finds what an
    outer merge of the written rows with the recount finds."""
    schema = load_schema("pl94_persons")
    frame = persons.copy()
    frame["geocode"] = geocode(frame)
    levels = decode(frame, schema)
    rng = np.random.default_rng(len(how))
    for spec in [s for s in load_tables("pl94") if s.schema == schema.name]:
        cols = column_names(schema, spec)
        recount = recount_table(frame, levels, schema, spec, geo_levels=["county", "tract", "block"])
        written = _tampered(recount.frame(cols), cols, how, rng)
        found = table_differences(written, recount, cols)
        assert (_aligned_differences(written, recount, cols) is not None) == (how in ("none", "values"))
        assert found == _merged_differences(written, recount.frame(cols), cols)
        assert bool(found) == (how in ("values", "dropped"))  # a repeated row equals its recount (the sums see it)


@pytest.mark.parametrize("empty", [True, False])
def test_a_written_geounit_without_records_is_compared_with_zeros(persons, empty):
    """A table's row for a block without records (das writes every block) is not in the recount: the row by row
    comparison takes it as zeros, as the merge does."""
    from das.validate.tables import Recount

    schema = load_schema("pl94_persons")
    frame = persons.copy()
    frame["geocode"] = geocode(frame)
    levels = decode(frame, schema)
    spec = next(s for s in load_tables("pl94") if s.schema == schema.name)
    cols = column_names(schema, spec)
    recount = recount_table(frame, levels, schema, spec, geo_levels=["county", "tract", "block"])
    written = recount.frame(cols)
    geocodes, counts = recount.levels["block"]
    gone = len(geocodes) // 2
    lacking = Recount({**recount.levels, "block": (np.delete(geocodes, gone), np.delete(counts, gone, axis=0))})
    if empty:
        row = np.flatnonzero((written["level"] == "block") & (written["geocode"] == geocodes[gone]))[0]
        written.loc[row, cols] = 0
    found = table_differences(written, lacking, cols)
    assert _aligned_differences(written, lacking, cols) is not None
    assert found == _merged_differences(written, lacking.frame(cols), cols)
    assert bool(found) == (not empty)
