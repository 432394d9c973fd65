"""The validator's table recount equals a group-by count of the records, on the real persons of Perry County."""

import numpy as np
import pandas as pd
import pytest
from conftest import FIXTURES

from das.io.tables import load_tables
from das.schema import load_schema
from das.validate.reading import decode, geocode
from das.validate.tables import recount_table


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
            mine = recount[recount["level"] == geo_level].set_index("geocode").sort_index().drop(columns="level")
            unit = frame["geocode"].astype(str).str.slice(0, k)[keep]
            expected = []
            for qname in spec.queries:
                q = schema.query(qname)
                cell = (pd.Series(np.ravel_multi_index([levels[f].to_numpy() for f in q.factors], q.shape))
                        if q.factors else pd.Series(np.zeros(len(frame), dtype=np.int64)))[keep]
                counts = pd.crosstab(unit.to_numpy(), cell.to_numpy()).reindex(columns=range(q.size), fill_value=0)
                expected.append(counts.to_numpy())
            assert mine.index.tolist() == sorted(unit.unique())
            assert np.array_equal(mine.to_numpy(), np.hstack(expected))
