"""The validator's recounts on distinct values equal the per-row formulations they replaced, on the
real persons of Perry County (and on frames made to trip them: missing values, joins that coincide)."""

import numpy as np
import pandas as pd
import pytest
from conftest import FIXTURES

from das.schema import load_schema
from das.validate import GEO, _blocks_in, _geocode, _levels, _present


def _joined(frame: pd.DataFrame) -> np.ndarray:
    """The per-row formulation: every record's four geography columns as strings, joined."""
    parts = [frame[c].astype(str) for c in GEO]
    return (parts[0] + parts[1] + parts[2] + parts[3]).to_numpy(dtype=str)


def _levels_per_row(frame: pd.DataFrame, schema) -> dict[str, np.ndarray]:
    out = {}
    for a in schema.attributes:
        lookup = {str(code): i for i, code in enumerate(a.codes)}
        out[a.name] = frame[a.column].astype(str).map(lookup).astype(np.int64).to_numpy()
    return out


@pytest.fixture(scope="module")
def persons():
    return pd.read_parquet(FIXTURES / "al_perry/persons.parquet")


@pytest.mark.parametrize("encoding", ["as read", "categorical", "plain strings"])
def test_geocode_of_distinct_values_equals_the_per_row_join(persons, encoding):
    frame = persons.copy()
    if encoding != "as read":
        for c in GEO:
            frame[c] = frame[c].astype("category" if encoding == "categorical" else str)
    frame = frame.sample(frac=1.0, random_state=2).reset_index(drop=True)  # records in no block order
    geocode = _geocode(frame)
    assert isinstance(geocode.dtype, pd.CategoricalDtype)
    assert np.array_equal(geocode.to_numpy(dtype=str), _joined(frame))
    assert np.array_equal(_present(geocode), np.unique(_joined(frame)))
    universe = np.unique(_joined(frame))[::3]  # some geocodes are not in it: their insertion points
    assert np.array_equal(_blocks_in(universe, geocode), np.searchsorted(universe, _joined(frame)))
    assert np.array_equal(_blocks_in(universe, geocode[::7]), np.searchsorted(universe, _joined(frame)[::7]))


def test_geocode_joins_that_coincide_are_one_geocode_and_a_missing_part_makes_it_nan():
    frame = pd.DataFrame({GEO[0]: ["1", "12", "1", None], GEO[1]: ["23", "3", "23", "4"],
                          GEO[2]: ["x", "x", "y", "z"], GEO[3]: ["0", "0", "0", "0"]})
    geocode = _geocode(frame)
    assert np.array_equal(geocode.to_numpy(dtype=str)[:3], _joined(frame[:3]))
    assert geocode.cat.codes[0] == geocode.cat.codes[1]
    assert _present(geocode).tolist() == ["123x0", "123y0", "nan"]


def test_levels_of_distinct_values_equal_the_per_row_lookup(persons):
    schema = load_schema("pl94_persons")
    levels, per_row = _levels(persons, schema), _levels_per_row(persons, schema)
    for a in schema.attributes:
        assert np.array_equal(levels[a.name].to_numpy(), per_row[a.name])
    broken = persons.copy()
    column = schema.attributes[1].column
    broken[column] = broken[column].astype(str).where(broken.index != 17, "77")
    with pytest.raises(ValueError, match=f"column {column} holds '77', not a code"):
        _levels(broken, schema)


def test_recount_table_equals_a_group_by_count_of_the_records(persons):
    from das.io.tables import load_tables
    from das.validate import recount_table

    schema = load_schema("pl94_persons")
    frame = persons.sample(frac=1.0, random_state=4).reset_index(drop=True)
    frame["geocode"] = _geocode(frame)
    levels = _levels(frame, schema)
    digits = {"county": 5, "tract": 11, "block": 15}
    specs = [s for s in load_tables("pl94") if s.schema == schema.name]
    assert any(s.where for s in specs)
    for spec in specs:
        recount = recount_table(frame, levels, schema, spec, list(digits))
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


def test_the_nmf_check_beside_the_mdf_checks_keeps_its_place_and_fails_first(tmp_path):
    import shutil

    import pyarrow as pa
    import pyarrow.parquet as pq
    from conftest import quiet

    from das.run import run
    from das.validate import ValidationError, validate_run

    out = tmp_path / "tiny"
    run("tiny", out, seed=3, workers=1, progress=False, log=quiet)
    broken = tmp_path / "broken"
    shutil.copytree(out, broken)
    tract = broken / "nmf" / "persons" / "tract.parquet"
    table = pq.read_table(tract)
    cell = table["cell"].to_numpy().copy()
    cell[-1] = cell[-2]  # in the widest query's last geounit
    pq.write_table(table.set_column(3, "cell", pa.array(cell)), tract)
    p1 = broken / "tables" / "P1.parquet"
    written = pq.read_table(p1)
    pq.write_table(written.set_column(2, written.column_names[2], pa.array(written.column(2).to_numpy() + 1)), p1)
    report = validate_run(broken)
    names = [c.split(" ", 1)[1].strip() for c in report.checks]
    nmf_at = names.index("NMF: exactly the certified measurements")
    assert names[nmf_at - 1].startswith("MDF units: valid codes") and names[nmf_at + 1].startswith("MDF persons: in")
    assert report.checks[nmf_at].startswith("FAIL")
    first_nmf = next(i for i, v in enumerate(report.violations) if v.startswith("NMF"))
    first_table = next(i for i, v in enumerate(report.violations) if v.startswith("table P1"))
    assert first_nmf < first_table
    tract.unlink()
    p1.write_bytes(b"not parquet")  # a later check's error: the NMF one comes first, as in order
    with pytest.raises(ValidationError, match="tract.parquet is missing"):
        validate_run(broken)


@pytest.mark.parametrize("suffix", ["csv", "parquet"])
def test_the_comparison_with_the_inputs_names_what_differs_from_them(tmp_path, suffix):
    """A release checked against inputs that are not its own: one person and one housing unit fewer in the
    inputs make the population (nation, state) and housing-unit invariants fail, naming the unit's block."""
    from conftest import TINY, quiet

    from das.run import run
    from das.validate import validate_run

    result = run("tiny", tmp_path / "run", seed=2, workers=1, progress=False, log=quiet)
    assert validate_run(result.out_dir).ok
    read = (lambda path: pd.read_csv(path, dtype=str)) if suffix == "csv" else pd.read_parquet
    persons, units = read(TINY / f"persons.{suffix}"), read(TINY / f"units.{suffix}")
    dropped = units.index[units["RTYPE"].astype(int) == 2][0]
    block = "".join(str(units.loc[dropped, c]) for c in GEO)
    for frame, name in ((persons.iloc[1:], "persons"), (units.drop(dropped), "units")):
        path = tmp_path / f"{name}.{suffix}"
        frame.to_csv(path, index=False) if suffix == "csv" else frame.to_parquet(path, index=False)
    report = validate_run(result.out_dir, inputs=(tmp_path / f"persons.{suffix}", tmp_path / f"units.{suffix}"))
    assert not report.ok
    population = [v for v in report.violations if v.startswith("total population invariant against the inputs")]
    assert any("nation" in v for v in population) and any("state" in v for v in population)
    assert any(v.startswith("housing units per block invariant") and block in v for v in report.violations)
    assert not any(v.startswith("GQ facilities per block invariant") for v in report.violations)
