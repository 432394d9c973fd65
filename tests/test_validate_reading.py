"""The validator's reads on distinct values equal the per-row formulations they replaced, on the real
persons of Perry County (and on frames made to trip them: missing values, joins that coincide)."""

import numpy as np
import pandas as pd
import pytest
from conftest import FIXTURES

from das.model.schema import load_schema
from das.validate.reading import GEO, blocks_in, decode, geocode, present


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
    codes = geocode(frame)
    assert isinstance(codes.dtype, pd.CategoricalDtype)
    assert np.array_equal(codes.to_numpy(dtype=str), _joined(frame))
    assert np.array_equal(present(codes), np.unique(_joined(frame)))
    universe = np.unique(_joined(frame))[::3]  # some geocodes are not in it: their insertion points
    assert np.array_equal(blocks_in(universe, codes), np.searchsorted(universe, _joined(frame)))
    assert np.array_equal(blocks_in(universe, codes[::7]), np.searchsorted(universe, _joined(frame)[::7]))


def test_geocode_joins_that_coincide_are_one_geocode_and_a_missing_part_makes_it_nan():
    frame = pd.DataFrame({GEO[0]: ["1", "12", "1", None], GEO[1]: ["23", "3", "23", "4"],
                          GEO[2]: ["x", "x", "y", "z"], GEO[3]: ["0", "0", "0", "0"]})
    codes = geocode(frame)
    assert np.array_equal(codes.to_numpy(dtype=str)[:3], _joined(frame[:3]))
    assert codes.cat.codes[0] == codes.cat.codes[1]
    assert present(codes).tolist() == ["123x0", "123y0", "nan"]


@pytest.mark.parametrize("encoding", ["as read", "categorical"])
def test_decoded_levels_of_distinct_values_equal_the_per_row_lookup(persons, encoding):
    schema = load_schema("pl94_persons")
    if encoding == "categorical":  # as das's MDF is read: Parquet dictionary columns
        persons = persons.assign(**{a.column: persons[a.column].astype(str).astype("category")
                                    for a in schema.attributes})
    levels, per_row = decode(persons, schema), _levels_per_row(persons, schema)
    for a in schema.attributes:
        assert np.array_equal(levels[a.name].to_numpy(), per_row[a.name])
    broken = persons.copy()
    column = schema.attributes[1].column
    broken[column] = broken[column].astype(str).where(broken.index != 17, "77")
    if encoding == "categorical":
        broken[column] = broken[column].astype("category")
    with pytest.raises(ValueError, match=f"column {column} holds '77', not a code"):
        decode(broken, schema)


@pytest.mark.parametrize("column", [
    pd.Series(pd.Categorical(["b", "a", None, "b"], categories=["a", "b", "z"])),  # unused, missing
    pd.Series(pd.Categorical(["01", "01"])),
    pd.Series(["b", "a", None, "b"], dtype=object),
    pd.Series(np.array([3, 1, 3], dtype=np.int8)),
])
def test_distinct_codes_each_row_as_factorize_does(column):
    """A categorical's own codes stand for pd.factorize's hash of every row: each row's value (a missing one as
    missing) is the same, and rows are equal exactly where their codes are."""
    from das.validate.reading import distinct

    codes, values = distinct(column)
    theirs, their_values = pd.factorize(column, use_na_sentinel=False)
    mine = pd.Series(np.asarray(values, dtype=object)[codes]).astype(str).tolist()
    assert mine == pd.Series(np.asarray(their_values, dtype=object)[theirs]).astype(str).tolist()
    assert (codes[:, None] == codes[None, :]).tolist() == (theirs[:, None] == theirs[None, :]).tolist()
