"""Reading microdata: histograms equal hand counts; every bad input gets its own located message."""

from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from das.cli import main as das_main
from das.geography import Geography
from das.io.microdata import InputError, read_inputs, read_records, read_units
from das.io.validation import validate_input
from das.schema import load_schema

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "geography_fixtures" / "tiny"
PL94 = load_schema("pl94_persons")


def tiny_frames():
    return (pd.read_csv(TINY / "persons.csv", dtype=str, keep_default_na=False),
            pd.read_csv(TINY / "units.csv", dtype=str, keep_default_na=False))


def test_csv_and_parquet_give_identical_histograms():
    a = read_inputs(TINY / "persons.csv", TINY / "units.csv", PL94, load_schema("h1_units"))
    b = read_inputs(TINY / "persons.parquet", TINY / "units.parquet", PL94, load_schema("h1_units"))
    assert (a.person_histograms != b.person_histograms).nnz == 0
    assert (a.unit_histograms != b.unit_histograms).nnz == 0
    assert np.array_equal(a.inventory.gq_facilities, b.inventory.gq_facilities)


def test_histograms_equal_hand_counts_at_every_level():
    persons, units = tiny_frames()
    inputs = read_inputs(TINY / "persons.csv", TINY / "units.csv", PL94)
    geo = Geography.from_blocks(inputs.inventory.blocks)
    geocode = persons["TABBLKST"] + persons["TABBLKCOU"] + persons["TABTRACTCE"] + persons["TABBLK"]
    cells = PL94.cell_index((persons["GQTYPE_PL"].astype(int).to_numpy(), persons["VOTING_AGE"].astype(int).to_numpy() - 1,
                             persons["CENHISP"].astype(int).to_numpy() - 1, persons["CENRACE"].astype(int).to_numpy() - 1))
    for level, digits in (("block", 15), ("tract", 11), ("county", 5), ("state", 2)):
        agg = geo.aggregate(inputs.person_histograms, level).toarray()
        for u, code in enumerate(geo.units(level)):
            mine = cells[(geocode.str.slice(0, digits) == code).to_numpy()]
            assert np.array_equal(agg[u], np.bincount(mine, minlength=PL94.size)), (level, code)
    hu = units[units["RTYPE"] == "2"].groupby(units["TABBLK"]).size()
    assert inputs.inventory.housing_units.sum() == hu.sum()


def test_every_schema_reads():
    blocks = read_units(TINY / "units.parquet").blocks
    for name, path in (("pl94_persons", "persons.parquet"), ("dhc_persons", "persons.parquet"), ("h1_units", "units.parquet")):
        schema = load_schema(name)
        records = read_records(TINY / path, schema, blocks)
        assert records.cells.max() < schema.size
    assert len(read_records(TINY / "units.parquet", load_schema("h1_units"), blocks).cells) == \
        int(read_units(TINY / "units.parquet").housing_units.sum())


def problems_for(tmp_path, persons=None, units=None, persons_name="persons.csv", units_name="units.csv", schema=PL94):
    p, u = tiny_frames()
    persons = p if persons is None else persons
    units = u if units is None else units
    ppath, upath = tmp_path / persons_name, tmp_path / units_name
    for frame, path in ((persons, ppath), (units, upath)):
        if isinstance(frame, (str, bytes)):
            path.write_bytes(frame if isinstance(frame, bytes) else frame.encode())
        elif path.suffix == ".parquet":
            pq.write_table(frame if isinstance(frame, pa.Table) else pa.Table.from_pandas(frame, preserve_index=False), path)
        else:
            frame.to_csv(path, index=False)
    problems = [str(x) for x in validate_input(ppath, upath, schema)]
    assert problems, "expected problems"
    with pytest.raises(InputError):
        read_inputs(ppath, upath, schema)
    return "\n".join(problems)


def edit(frame, row, column, value):
    frame = frame.copy()
    frame.loc[row, column] = value
    return frame


def test_missing_column(tmp_path):
    p, _ = tiny_frames()
    msg = problems_for(tmp_path, persons=p.drop(columns=["CENHISP"]))
    assert "persons.csv" in msg and "missing column CENHISP" in msg


@pytest.mark.parametrize("column,value,expected", [
    ("CENRACE", "64", "'01'..'63'"), ("VOTING_AGE", "3", "one of 1, 2"), ("GQTYPE_PL", "9", "one of 0, 1"),
])
def test_unknown_code(tmp_path, column, value, expected):
    p, _ = tiny_frames()
    msg = problems_for(tmp_path, persons=edit(p, 4, column, value))
    assert f"persons.csv row 5 (line 6), column {column}: '{value}' is not valid" in msg and expected in msg


def test_wrong_geocode_width_and_non_digits(tmp_path):
    p, _ = tiny_frames()
    msg = problems_for(tmp_path, persons=edit(edit(p, 2, "TABBLK", "12"), 3, "TABBLKCOU", "0a1"))
    assert "row 3 (line 4), column TABBLK: '12' is not valid: expected 4 digits" in msg
    assert "row 4 (line 5), column TABBLKCOU: '0a1' is not valid: expected 3 digits" in msg


def test_person_in_block_absent_from_units(tmp_path):
    p, _ = tiny_frames()
    msg = problems_for(tmp_path, persons=edit(p, 0, "TABBLK", "1999"))
    assert "row 1" in msg and "'440010001001999'" in msg and "a block present in the units file" in msg


def test_gq_person_without_facility_and_household_person_without_housing(tmp_path):
    p, _ = tiny_frames()
    hh = p.index[p["GQTYPE_PL"] == "0"][0]
    p2 = edit(edit(p, hh, "GQTYPE_PL", "6"), hh, "RTYPE", "5")
    msg = problems_for(tmp_path, persons=p2)
    assert f"row {hh + 1}" in msg and "a GQ facility of this type" in msg
    dorm = p.index[p["GQTYPE_PL"] == "5"][0]
    p3 = edit(edit(p, dorm, "GQTYPE_PL", "0"), dorm, "RTYPE", "3")
    assert "a housing unit in the person's block" in problems_for(tmp_path, persons=p3)


def test_child_in_nursing_facility(tmp_path):
    p, _ = tiny_frames()
    nursing = p.index[p["GQTYPE_PL"] == "3"][0]
    msg = problems_for(tmp_path, persons=edit(p, nursing, "VOTING_AGE", "1"))
    assert f"row {nursing + 1}" in msg and "nobody under 18 in a nursing facility" in msg


def test_rtype_gqtype_disagreement(tmp_path):
    p, u = tiny_frames()
    msg = problems_for(tmp_path, persons=edit(p, 0, "RTYPE", "5"))
    assert "row 1 (line 2), column RTYPE: '5' is not valid: expected RTYPE consistent with GQTYPE_PL" in msg
    msg = problems_for(tmp_path, units=edit(u, 0, "GQTYPE_PL", "2"))
    assert "units.csv row 1" in msg and "GQTYPE_PL 0 for a housing unit" in msg
    msg = problems_for(tmp_path, units=edit(u, 0, "HH_STATUS", "0"))
    assert "HH_STATUS 1 (occupied) or 2 (vacant)" in msg


def test_duplicate_header(tmp_path):
    text = (TINY / "persons.csv").read_text().splitlines()
    text[0] = text[0].replace("QAGE", "CENRACE")
    msg = problems_for(tmp_path, persons="\n".join(text) + "\n")
    assert "duplicate column name(s) ['CENRACE']" in msg


def test_empty_files(tmp_path):
    assert "empty (0 bytes)" in problems_for(tmp_path, persons="")
    header = (TINY / "units.csv").read_text().splitlines()[0] + "\n"
    assert "units file has no rows" in problems_for(tmp_path, units=header)


def test_non_numeric_and_negative_values(tmp_path):
    p, _ = tiny_frames()
    msg = problems_for(tmp_path, persons=edit(p, 1, "CENHISP", "abc"))
    assert "column CENHISP: 'abc' is not valid: expected an integer" in msg
    msg = problems_for(tmp_path, persons=edit(p, 1, "VOTING_AGE", "-1"))
    assert "'-1' is not valid: expected a nonnegative code" in msg


def test_wrong_delimiter(tmp_path):
    text = (TINY / "persons.csv").read_text().replace(",", "|")
    msg = problems_for(tmp_path, persons=text)
    assert "looks '|'-delimited" in msg


def test_parquet_with_wrong_dtype_and_corrupt_parquet(tmp_path):
    table = pq.read_table(TINY / "persons.parquet")
    bad = table.set_column(table.column_names.index("RTYPE"), "RTYPE", table["RTYPE"].cast(pa.string()))
    msg = problems_for(tmp_path, persons=bad, persons_name="persons.parquet")
    assert "column RTYPE has type string, expected an integer type" in msg
    blk = table.set_column(table.column_names.index("TABBLK"), "TABBLK", pa.array(np.arange(table.num_rows)))
    msg = problems_for(tmp_path, persons=blk, persons_name="persons.parquet")
    assert "column TABBLK has type int64, expected a string of digits" in msg
    assert "not a readable Parquet file" in problems_for(tmp_path, persons=b"PAR1 not really", persons_name="persons.parquet")


def test_nulls_duplicates_unknown_extension_and_missing_file(tmp_path):
    p, _ = tiny_frames()
    assert "EPNUM repeats" in problems_for(tmp_path, persons=edit(p, 3, "EPNUM", p.loc[2, "EPNUM"]))
    table = pq.read_table(TINY / "persons.parquet")
    nulls = table.set_column(table.column_names.index("QSEX"), "QSEX",
                             pa.array([None] + table["QSEX"].to_pylist()[1:], pa.int8()))
    assert "column QSEX: 'null'" in problems_for(tmp_path, persons=nulls, persons_name="persons.parquet",
                                                  schema=load_schema("dhc_persons"))
    assert "unknown file type '.txt'" in problems_for(tmp_path, persons="x", persons_name="persons.txt")
    assert "file not found" in "\n".join(str(x) for x in validate_input(tmp_path / "nope.csv", TINY / "units.csv", PL94))


def test_cli_validate_input(capsys, tmp_path):
    assert das_main(["validate-input", str(TINY / "persons.csv"), str(TINY / "units.csv")]) == 0
    assert "ok: 145 persons" in capsys.readouterr().out
    p, _ = tiny_frames()
    edit(p, 4, "CENRACE", "64").to_csv(tmp_path / "p.csv", index=False)
    assert das_main(["validate-input", str(tmp_path / "p.csv"), str(TINY / "units.csv")]) == 1
    out = capsys.readouterr().out
    assert "p.csv row 5 (line 6), column CENRACE: '64'" in out
    assert "44,001" not in out  # never a whole row
