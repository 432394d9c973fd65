"""Reading microdata: histograms equal hand counts at every level, CSV = Parquet, every schema
reads (pl94_persons, dhc_persons, h1_units). Bad inputs: tests/test_validate_input.py."""


import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import TINY

from das.core.errors import InputError
from das.io.microdata import Records, read_inputs, read_records, read_units
from das.model.geography import Geography
from das.model.histogram import block_histograms
from das.model.schema import load_schema

PL94, DHC, H1 = load_schema("pl94_persons"), load_schema("dhc_persons"), load_schema("h1_units")
LEVELS = (("state", 2), ("county", 5), ("tract", 11), ("block_group", 12), ("block", 15))


def tiny_frames():
    return (pd.read_csv(TINY / "persons.csv", dtype=str, keep_default_na=False),
            pd.read_csv(TINY / "units.csv", dtype=str, keep_default_na=False))


def geocodes(frame: pd.DataFrame) -> pd.Series:
    return frame["TABBLKST"] + frame["TABBLKCOU"] + frame["TABTRACTCE"] + frame["TABBLK"]


def codes(frame, column) -> np.ndarray:
    return frame[column].astype(int).to_numpy()


def test_block_histograms_counts_records():
    records = Records(np.array([0, 2, 2, 0, 2]), np.array([1, 0, 0, 1, 3]))
    h = block_histograms(records, 3, 4)
    assert h.dtype == np.int64 and h.shape == (3, 4)
    assert h.toarray().tolist() == [[0, 2, 0, 0], [0, 0, 0, 0], [2, 0, 0, 1]]


def test_csv_and_parquet_give_identical_results():
    a = read_inputs(TINY / "persons.csv", TINY / "units.csv", PL94, H1)
    b = read_inputs(TINY / "persons.parquet", TINY / "units.parquet", PL94, H1)
    assert (a.person_histograms != b.person_histograms).nnz == 0
    assert (a.unit_histograms != b.unit_histograms).nnz == 0
    for field in ("blocks", "housing_units", "occupied", "gq_facilities"):
        assert np.array_equal(getattr(a.inventory, field), getattr(b.inventory, field)), field
    mixed = read_inputs(TINY / "persons.parquet", TINY / "units.csv", DHC)
    assert (mixed.person_histograms != read_inputs(TINY / "persons.csv", TINY / "units.parquet", DHC)
            .person_histograms).nnz == 0


def test_unit_inventory_equals_hand_counts():
    _, units = tiny_frames()
    inventory = read_units(TINY / "units.csv")
    blocks = np.sort(geocodes(units).unique())
    assert inventory.blocks.tolist() == blocks.tolist()
    assert inventory.gq_facilities.shape == (len(blocks), 7) and inventory.gq_facilities.dtype == np.int64
    for i, block in enumerate(blocks):
        mine = units[(geocodes(units) == block).to_numpy()]
        assert inventory.housing_units[i] == (mine["RTYPE"] == "2").sum()
        assert inventory.occupied[i] == ((mine["RTYPE"] == "2") & (mine["HH_STATUS"] == "1")).sum()
        for g in range(1, 8):
            assert inventory.gq_facilities[i, g - 1] == ((mine["RTYPE"] == "4") & (mine["GQTYPE_PL"] == str(g))).sum()


@pytest.mark.parametrize("schema", [PL94, DHC], ids=lambda s: s.name)
def test_histograms_equal_hand_counts_at_every_level(schema):
    persons, _ = tiny_frames()
    inputs = read_inputs(TINY / "persons.csv", TINY / "units.csv", schema)
    levels = {"GQTYPE_PL": codes(persons, "GQTYPE_PL"), "VOTING_AGE": codes(persons, "VOTING_AGE") - 1,
              "CENHISP": codes(persons, "CENHISP") - 1, "CENRACE": codes(persons, "CENRACE") - 1,
              "QSEX": codes(persons, "QSEX") - 1, "QAGE": codes(persons, "QAGE")}
    cells = schema.cell_index(tuple(levels[a.column] for a in schema.attributes))
    geo = Geography.from_blocks(inputs.inventory.blocks, ("nation", "state", "county", "tract", "block_group", "block"))
    geocode = geocodes(persons)
    assert inputs.person_histograms.dtype == np.int64
    for level, digits in LEVELS:
        aggregated = geo.aggregate(inputs.person_histograms, level).tocsr()
        for u, code in enumerate(geo.units(level)):
            mine = cells[(geocode.str.slice(0, digits) == code).to_numpy()]
            expected = np.bincount(mine, minlength=schema.size)
            row = aggregated[u].toarray().ravel()
            assert np.array_equal(row, expected), (level, code)
    assert geo.aggregate(inputs.person_histograms, "nation").sum() == len(persons)


def test_every_schema_reads_with_read_records():
    _, units = tiny_frames()
    blocks = read_units(TINY / "units.parquet").blocks
    for schema, path in ((PL94, "persons.parquet"), (DHC, "persons.csv"), (H1, "units.parquet"), (H1, "units.csv")):
        records = read_records(TINY / path, schema, blocks)
        assert records.block_index.dtype == np.int64 and records.cells.dtype == np.int64
        assert 0 <= records.cells.min() and records.cells.max() < schema.size
        assert records.block_index.max() < len(blocks)
    h1 = read_records(TINY / "units.csv", H1, blocks)
    housing = units[units["RTYPE"] == "2"]
    assert len(h1.cells) == len(housing)  # the record filter keeps housing units only
    assert np.bincount(h1.cells, minlength=2).tolist() == [(housing["HH_STATUS"] == "1").sum(),
                                                           (housing["HH_STATUS"] == "2").sum()]
    inputs = read_inputs(TINY / "persons.csv", TINY / "units.csv", PL94, H1)
    assert np.array_equal(np.asarray(inputs.unit_histograms.sum(axis=1)).ravel(), inputs.inventory.housing_units)
    assert np.array_equal(inputs.unit_histograms[:, 0].toarray().ravel(), inputs.inventory.occupied)


def test_read_records_needs_the_blocks_of_the_universe():
    blocks = read_units(TINY / "units.csv").blocks
    with pytest.raises(InputError, match="a block that appears in the units file"):
        read_records(TINY / "persons.csv", PL94, blocks[1:])


def test_plain_and_dictionary_columns_and_any_int_width_read_the_same(tmp_path):
    table = pq.read_table(TINY / "persons.parquet")
    plain = pa.table({name: (table[name].cast(pa.string()) if pa.types.is_dictionary(table[name].type)
                             else table[name].cast(pa.int64() if name != "VOTING_AGE" else pa.uint8()))
                      for name in table.column_names})
    plain = plain.set_column(0, "TABBLKST", plain["TABBLKST"].cast(pa.large_string()))
    plain = plain.set_column(1, "TABBLKCOU", plain["TABBLKCOU"].cast(pa.string_view()))
    pq.write_table(plain, tmp_path / "persons.parquet", use_dictionary=False)
    a = read_inputs(tmp_path / "persons.parquet", TINY / "units.parquet", PL94)
    b = read_inputs(TINY / "persons.parquet", TINY / "units.parquet", PL94)
    assert (a.person_histograms != b.person_histograms).nnz == 0


def test_optional_columns_may_be_absent(tmp_path):
    persons, _ = tiny_frames()
    persons.drop(columns=["EPNUM", "TABBLKGRPCE", "QSEX", "QAGE"]).to_csv(tmp_path / "persons.csv", index=False)
    inputs = read_inputs(tmp_path / "persons.csv", TINY / "units.csv", PL94)
    assert inputs.person_histograms.sum() == len(persons)


def test_a_persons_file_with_a_header_and_no_rows_is_legal(tmp_path):
    header = (TINY / "persons.csv").read_text().splitlines()[0] + "\n"
    (tmp_path / "persons.csv").write_text(header)
    inputs = read_inputs(tmp_path / "persons.csv", TINY / "units.csv", PL94, H1)
    assert inputs.person_histograms.shape == (12, PL94.size) and inputs.person_histograms.nnz == 0
    table = pq.read_table(TINY / "persons.parquet").slice(0, 0)
    pq.write_table(table, tmp_path / "persons.parquet")
    assert read_inputs(tmp_path / "persons.parquet", TINY / "units.parquet", DHC).person_histograms.nnz == 0
