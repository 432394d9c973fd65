import numpy as np
import pytest
import scipy.sparse as sp

from das.core.errors import SpecError
from das.model.schema import cenrace_to_flags, flags_to_cenrace, load_schema, race_combinations, schema_from_dict

PL94 = load_schema("pl94_persons")


def test_pl94_has_2016_cells_in_attribute_order():
    assert PL94.size == 2016
    assert PL94.shape == (8, 2, 2, 63)
    assert PL94.names == ("hhgq", "votingage", "hispanic", "cenrace")


def test_cell_index_round_trips_for_every_cell():
    cells = np.arange(PL94.size)
    assert np.array_equal(PL94.cell_index(PL94.cell_levels(cells)), cells)


@pytest.mark.parametrize("level", range(63))
def test_cenrace_recode_round_trips(level):
    flags = cenrace_to_flags(level)
    assert any(flags)
    assert flags_to_cenrace(flags) == level


def test_cenrace_order_and_labels_match_the_spec():
    combos = race_combinations()
    assert len(combos) == 63 and len(set(combos)) == 63
    assert [len(c) for c in combos] == sorted(len(c) for c in combos)
    cenrace = PL94.attribute("cenrace")
    assert cenrace.codes[0] == "01" and cenrace.codes[-1] == "63"
    assert cenrace.labels[6] == "White+Black"
    assert cenrace.labels[-1] == "White+Black+AIAN+Asian+NHPI+SOR"
    names = ["White", "Black", "AIAN", "Asian", "NHPI", "SOR"]
    for level, label in enumerate(cenrace.labels):
        assert label.split("+") == [n for n, f in zip(names, cenrace_to_flags(level)) if f]


@pytest.mark.parametrize("schema_name", ["pl94_persons", "dhc_persons", "h1_units"])
def test_every_marginal_sums_correctly_on_random_histograms(schema_name):
    schema = load_schema(schema_name)
    rng = np.random.default_rng(7)
    hist = np.zeros(schema.size, dtype=np.int64)
    hot = rng.choice(schema.size, size=min(500, schema.size), replace=False)
    hist[hot] = rng.integers(0, 50, size=len(hot))
    levels = schema.cell_levels(np.arange(schema.size))
    factors = list(schema.names) + [r.name for r in schema.recodes]
    queries = ["total", "detailed"] + factors + [f"{a} x {b}" for a in factors for b in factors
                                                 if a < b and schema.factor_size(a) * schema.factor_size(b) < 5000][:12]
    for name in queries:
        q = schema.query(name)
        answers = q.matrix @ hist
        assert answers.sum() == hist.sum(), name
        # brute force: count cells by their factor levels
        brute = np.zeros(q.size, dtype=np.int64)
        if q.factors:
            keys = np.ravel_multi_index([schema.levels_of(f, np.arange(schema.size)) for f in q.factors], q.shape)
            np.add.at(brute, keys, hist)
        else:
            brute[0] = hist.sum()
        assert np.array_equal(answers, brute), name
        assert sp.issparse(q.matrix) and q.matrix.shape == (q.size, schema.size)
    assert len(levels) == len(schema.shape)


def test_recodes():
    assert PL94.query("hhinstlevels").shape == (3,)
    assert PL94.query("numraces").shape == (6,)
    dhc = load_schema("dhc_persons")
    assert dhc.size == 2 * 116 * 2 * 63 * 8
    va = dhc.levels_of("votingage", dhc.cell_index((0, np.arange(116), 0, 0, 0)))
    assert list(va) == [0] * 18 + [1] * 98


def test_query_names_are_validated():
    with pytest.raises(SpecError, match="neither an attribute nor a recode"):
        PL94.query("votingage x age")
    with pytest.raises(SpecError, match="twice"):
        PL94.query("cenrace x cenrace")


def test_bad_schema_specs_are_refused():
    base = {"name": "s", "attributes": [{"name": "a", "column": "A", "codes": [1, 2]}]}
    assert schema_from_dict(base).size == 2
    with pytest.raises(SpecError, match=r"attributes\[0\]\.column: missing"):
        schema_from_dict({"name": "s", "attributes": [{"name": "a", "codes": [1]}]})
    with pytest.raises(SpecError, match="2 codes but 1 labels"):
        schema_from_dict({"name": "s", "attributes": [{"name": "a", "column": "A", "codes": [1, 2], "labels": ["x"]}]})
    with pytest.raises(SpecError, match="unknown attribute"):
        schema_from_dict({**base, "recodes": {"r": {"attribute": "zz", "map": [0, 0]}}})
    with pytest.raises(SpecError, match="no schema spec"):
        load_schema("no_such_schema")
