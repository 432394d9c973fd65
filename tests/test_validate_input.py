"""Every bad input gets its own message naming the file, row, column, bad value and what was
expected; never a whole row. `das validate-input` exit codes: 0 ok, 1 problems, 2 unreadable."""

import io
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import TINY

from das.cli import main as das_main
from das.core.errors import InputError
from das.io.microdata import read_inputs, read_records, read_units
from das.io.problems import Problem
from das.io.validation import validate_input, validate_input_main
from das.model.schema import load_schema

PL94, DHC = load_schema("pl94_persons"), load_schema("dhc_persons")


def tiny_frames():
    return (pd.read_csv(TINY / "persons.csv", dtype=str, keep_default_na=False),
            pd.read_csv(TINY / "units.csv", dtype=str, keep_default_na=False))


def write(data, path: Path) -> Path:
    if isinstance(data, (str, bytes)):
        path.write_bytes(data if isinstance(data, bytes) else data.encode())
    elif isinstance(data, pa.Table):
        pq.write_table(data, path)
    else:
        data.to_csv(path, index=False)
    return path


def problems_for(tmp_path, persons=None, units=None, persons_name="persons.csv", units_name="units.csv",
                 schema=PL94) -> str:
    """The report on the two files (the tiny fixture unless replaced); read_inputs must raise."""
    ppath = TINY / "persons.csv" if persons is None else write(persons, tmp_path / persons_name)
    upath = TINY / "units.csv" if units is None else write(units, tmp_path / units_name)
    problems = validate_input(ppath, upath, schema)
    assert problems and all(isinstance(p, Problem) for p in problems)
    with pytest.raises(InputError) as raised:
        read_inputs(ppath, upath, schema)
    assert raised.value.problems == problems
    return "\n".join(str(p) for p in problems)


def edit(frame, row, column, value):
    frame = frame.copy()
    frame.loc[row, column] = value
    return frame


def parquet_with(column, array, source="persons.parquet"):
    table = pq.read_table(TINY / source)
    return table.set_column(table.column_names.index(column), column, array)


# --- columns and codes -----------------------------------------------------------------------

def test_missing_column(tmp_path):
    p, u = tiny_frames()
    msg = problems_for(tmp_path, persons=p.drop(columns=["CENHISP"]))
    assert "persons.csv, column CENHISP: missing column CENHISP (needed for attribute hispanic of schema pl94_persons)" in msg
    msg = problems_for(tmp_path, persons=p.rename(columns={"CENRACE": "cenrace"}))
    assert "missing column CENRACE" in msg and "found 'cenrace'" in msg
    assert "units.csv, column HH_STATUS: missing column HH_STATUS" in problems_for(tmp_path, units=u.drop(columns=["HH_STATUS"]))
    # QSEX and QAGE are needed only by schemas that have them
    assert "missing column QAGE (needed for attribute age of schema dhc_persons)" in \
        problems_for(tmp_path, persons=p.drop(columns=["QAGE"]), schema=DHC)
    assert validate_input(write(p.drop(columns=["QAGE", "QSEX"]), tmp_path / "p.csv"), TINY / "units.csv", PL94) == []


@pytest.mark.parametrize("column,value,expected", [
    ("CENRACE", "64", "one of '01'..'63'"), ("CENRACE", "1", "one of '01'..'63'"),
    ("VOTING_AGE", "3", "one of 1, 2"), ("CENHISP", "0", "one of 1, 2"),
    ("GQTYPE_PL", "9", "one of 0, 1, 2, 3, 4, 5, 6, 7"),
])
def test_unknown_code(tmp_path, column, value, expected):
    p, _ = tiny_frames()
    msg = problems_for(tmp_path, persons=edit(p, 16, column, value))
    assert f"persons.csv row 17 (line 18), column {column}: '{value}' is not valid (expected {expected})" in msg


def test_unknown_code_in_dhc_and_units_and_parquet(tmp_path):
    p, u = tiny_frames()
    assert "row 3 (line 4), column QAGE: '116' is not valid (expected one of 0..115)" in \
        problems_for(tmp_path, persons=edit(p, 2, "QAGE", "116"), schema=DHC)
    assert "units.csv row 2 (line 3), column RTYPE: '3' is not valid (expected one of 2, 4)" in \
        problems_for(tmp_path, units=edit(u, 1, "RTYPE", "3"))
    gq = pq.read_table(TINY / "persons.parquet")["GQTYPE_PL"].to_numpy().copy()
    gq[7] = 9
    msg = problems_for(tmp_path, persons=parquet_with("GQTYPE_PL", pa.array(gq, pa.int8())), persons_name="persons.parquet")
    assert "persons.parquet row 8, column GQTYPE_PL: '9' is not valid (expected one of 0, 1" in msg
    assert "line" not in msg  # Parquet has no lines


def test_non_numeric_and_negative_values(tmp_path):
    p, _ = tiny_frames()
    msg = problems_for(tmp_path, persons=edit(p, 1, "CENHISP", "abc"))
    assert "persons.csv row 2 (line 3), column CENHISP: 'abc' is not valid (expected an integer)" in msg
    msg = problems_for(tmp_path, persons=edit(p, 1, "VOTING_AGE", "1.0"))
    assert "column VOTING_AGE: '1.0' is not valid (expected an integer)" in msg
    msg = problems_for(tmp_path, persons=edit(p, 1, "VOTING_AGE", "-1"))
    assert "row 2 (line 3), column VOTING_AGE: '-1' is not valid (expected a nonnegative code, one of 1, 2)" in msg
    msg = problems_for(tmp_path, persons=edit(p, 4, "QAGE", "-1"), schema=DHC)
    assert "row 5 (line 6), column QAGE: '-1' is not valid (expected a nonnegative code, one of 0..115)" in msg
    assert "'99999999999999999999' is not valid (expected an integer)" in \
        problems_for(tmp_path, persons=edit(p, 1, "CENHISP", "99999999999999999999"))


def test_null_and_empty_values(tmp_path):
    qsex = pq.read_table(TINY / "persons.parquet")["QSEX"].to_pylist()
    nulls = parquet_with("QSEX", pa.array([1, None] + qsex[2:], pa.int8()))
    msg = problems_for(tmp_path, persons=nulls, persons_name="persons.parquet", schema=DHC)
    assert "persons.parquet row 2, column QSEX: 'null' is not valid (expected a value; the cell is null)" in msg
    p, _ = tiny_frames()
    msg = problems_for(tmp_path, persons=edit(p, 9, "CENRACE", ""))
    assert "persons.csv row 10 (line 11), column CENRACE: '' is not valid (expected a value; the cell is empty)" in msg


def test_parquet_column_of_the_wrong_type(tmp_path):
    table = pq.read_table(TINY / "persons.parquet")
    msg = problems_for(tmp_path, persons=parquet_with("RTYPE", table["RTYPE"].cast(pa.string())),
                       persons_name="persons.parquet")
    assert "persons.parquet, column RTYPE: column RTYPE has type string, expected an integer type" in msg
    msg = problems_for(tmp_path, persons=parquet_with("TABBLK", pa.array(np.arange(table.num_rows))),
                       persons_name="persons.parquet")
    assert "column TABBLK: column TABBLK has type int64, expected string (zero-padded digits)" in msg
    msg = problems_for(tmp_path, persons=parquet_with("CENRACE", pa.array(np.ones(table.num_rows, np.int16))),
                       persons_name="persons.parquet")
    assert "column CENRACE has type int16, expected string" in msg
    msg = problems_for(tmp_path, persons=parquet_with("CENHISP", table["CENHISP"].cast(pa.float64())),
                       persons_name="persons.parquet")
    assert "column CENHISP has type double, expected an integer type" in msg


# --- geography -------------------------------------------------------------------------------

def test_wrong_geocode_width_and_non_digits(tmp_path):
    p, u = tiny_frames()
    msg = problems_for(tmp_path, persons=edit(edit(p, 2, "TABBLK", "12"), 3, "TABBLKCOU", "1"))
    assert "persons.csv row 3 (line 4), column TABBLK: '12' is not valid (expected 4 ASCII digits 0-9, zero-padded)" in msg
    assert "persons.csv row 4 (line 5), column TABBLKCOU: '1' is not valid (expected 3 ASCII digits 0-9, zero-padded)" in msg
    msg = problems_for(tmp_path, persons=edit(p, 5, "TABTRACTCE", "00a100"))
    assert "row 6 (line 7), column TABTRACTCE: '00a100' is not valid (expected 6 ASCII digits 0-9, zero-padded)" in msg
    msg = problems_for(tmp_path, units=edit(u, 0, "TABBLKST", "4 "))
    assert "units.csv row 1 (line 2), column TABBLKST: '4 ' is not valid (expected 2 ASCII digits 0-9, zero-padded)" in msg
    msg = problems_for(tmp_path, persons=edit(p, 0, "TABBLKGRPCE", "7"))
    assert "row 1 (line 2), column TABBLKGRPCE: '7' is not valid (expected the first digit of TABBLK)" in msg


def test_person_in_block_absent_from_units(tmp_path):
    p, _ = tiny_frames()
    geocode = "".join(p.loc[0, ["TABBLKST", "TABBLKCOU", "TABTRACTCE"]]) + "1999"
    msg = problems_for(tmp_path, persons=edit(p, 0, "TABBLK", "1999"))
    assert (f"persons.csv row 1 (line 2), column geocode (TABBLKST+TABBLKCOU+TABTRACTCE+TABBLK): '{geocode}' "
            "is not valid (expected a block that appears in the units file") in msg


def test_gq_person_without_a_facility_of_that_type(tmp_path):
    p, _ = tiny_frames()
    row = p.index[p["GQTYPE_PL"] == "0"][0]
    msg = problems_for(tmp_path, persons=edit(edit(p, row, "GQTYPE_PL", "6"), row, "RTYPE", "5"))
    assert (f"persons.csv row {row + 1} (line {row + 2}), column GQTYPE_PL: '6' is not valid (expected a block "
            "with a group-quarters facility of this type") in msg


def test_household_person_in_a_block_without_housing_units(tmp_path):
    p, u = tiny_frames()
    inventory = read_units(TINY / "units.csv")
    no_housing = set(inventory.blocks[inventory.housing_units == 0])
    in_block = (p["TABBLKST"] + p["TABBLKCOU"] + p["TABTRACTCE"] + p["TABBLK"]).isin(no_housing)
    row = p.index[in_block & (p["GQTYPE_PL"] != "0")][0]
    msg = problems_for(tmp_path, persons=edit(edit(p, row, "GQTYPE_PL", "0"), row, "RTYPE", "3"))
    assert (f"row {row + 1} (line {row + 2}), column GQTYPE_PL: '0' is not valid (expected a block with housing "
            "units for a household person") in msg


def test_child_in_a_nursing_facility(tmp_path):
    p, _ = tiny_frames()
    row = p.index[p["GQTYPE_PL"] == "3"][0]
    msg = problems_for(tmp_path, persons=edit(p, row, "VOTING_AGE", "1"))
    assert (f"row {row + 1} (line {row + 2}), column VOTING_AGE: '1' is not valid (expected nobody with hhgq "
            "'Nursing facilities/Skilled-nursing facilities' and votingage 'Under 18 years'") in msg
    msg = problems_for(tmp_path, persons=edit(p, row, "QAGE", "12"), schema=DHC)
    assert f"row {row + 1} (line {row + 2}), column QAGE: '12' is not valid (expected nobody with hhgq" in msg


# --- consistency within a file ---------------------------------------------------------------

def test_rtype_and_gqtype_disagree(tmp_path):
    p, u = tiny_frames()
    msg = problems_for(tmp_path, persons=edit(p, 0, "RTYPE", "5"))
    assert ("persons.csv row 1 (line 2), column RTYPE: '5' is not valid (expected RTYPE consistent with "
            "GQTYPE_PL (GQTYPE_PL 0 -> 3, 1 -> 5") in msg
    housing = u.index[u["RTYPE"] == "2"][0]
    facility = u.index[u["RTYPE"] == "4"][0]
    msg = problems_for(tmp_path, units=edit(u, housing, "GQTYPE_PL", "2"))
    assert (f"units.csv row {housing + 1} (line {housing + 2}), column GQTYPE_PL: '2' is not valid "
            "(expected GQTYPE_PL 0 for a housing unit") in msg
    msg = problems_for(tmp_path, units=edit(u, facility, "GQTYPE_PL", "0"))
    assert (f"row {facility + 1} (line {facility + 2}), column GQTYPE_PL: '0' is not valid "
            "(expected GQTYPE_PL 1..7 for a group-quarters facility") in msg


def test_hh_status_and_rtype_disagree(tmp_path):
    _, u = tiny_frames()
    housing = u.index[u["RTYPE"] == "2"][0]
    facility = u.index[u["RTYPE"] == "4"][0]
    msg = problems_for(tmp_path, units=edit(u, housing, "HH_STATUS", "0"))
    assert (f"row {housing + 1} (line {housing + 2}), column HH_STATUS: '0' is not valid "
            "(expected HH_STATUS 1 (occupied) or 2 (vacant)") in msg
    msg = problems_for(tmp_path, units=edit(u, facility, "HH_STATUS", "1"))
    assert (f"row {facility + 1} (line {facility + 2}), column HH_STATUS: '1' is not valid "
            "(expected HH_STATUS 0 for a group-quarters facility") in msg


def test_duplicate_epnum(tmp_path):
    p, _ = tiny_frames()
    msg = problems_for(tmp_path, persons=edit(p, 3, "EPNUM", p.loc[2, "EPNUM"]))
    assert f"persons.csv row 4 (line 5), column EPNUM: '{p.loc[2, 'EPNUM']}' is not valid (expected a unique EPNUM" in msg


# --- the file itself -------------------------------------------------------------------------

def test_duplicate_header(tmp_path):
    text = (TINY / "persons.csv").read_text().splitlines()
    text[0] = text[0].replace("QAGE", "CENRACE")
    msg = problems_for(tmp_path, persons="\n".join(text) + "\n")
    assert "persons.csv: duplicate column name(s) ['CENRACE'] in the header" in msg
    table = pq.read_table(TINY / "persons.parquet")
    doubled = pa.Table.from_arrays(table.columns + [table["RTYPE"]], names=table.column_names + ["RTYPE"])
    msg = problems_for(tmp_path, persons=doubled, persons_name="persons.parquet")
    assert "persons.parquet: duplicate column name(s) ['RTYPE']" in msg


def test_empty_files(tmp_path):
    assert "persons.csv: the file is empty (0 bytes)" in problems_for(tmp_path, persons="")
    assert "units.parquet: the file is empty (0 bytes)" in problems_for(tmp_path, units="", units_name="units.parquet")
    header = (TINY / "units.csv").read_text().splitlines()[0] + "\n"
    assert "units.csv: the units file has no rows" in problems_for(tmp_path, units=header)
    empty_units = pq.read_table(TINY / "units.parquet").slice(0, 0)
    assert "units.parquet: the units file has no rows" in problems_for(tmp_path, units=empty_units, units_name="units.parquet")
    assert "the first line is empty" in problems_for(tmp_path, persons="\n\n")
    # a persons file with a header and no rows is legal: tests/test_microdata.py


@pytest.mark.parametrize("delimiter,word", [("|", "pipe"), (";", "semicolon"), ("\t", "tab")])
def test_wrong_delimiter(tmp_path, delimiter, word):
    text = (TINY / "persons.csv").read_text().replace(",", delimiter)
    msg = problems_for(tmp_path, persons=text)
    assert f"persons.csv: the header is a single column containing {delimiter!r}: the file looks {word}-delimited" in msg


def test_ragged_csv_row_is_located_without_quoting_it(tmp_path):
    lines = (TINY / "persons.csv").read_text().splitlines()
    secret = lines[6]
    lines[6] = ",".join(secret.split(",")[:-1])
    msg = problems_for(tmp_path, persons="\n".join(lines) + "\n")
    n = len(lines[0].split(","))
    assert f"persons.csv row 6 (line 7): '{n - 1} fields' is not valid (expected {n} comma-separated fields" in msg
    assert lines[6] not in msg


def test_the_csv_reader_hands_arrow_no_python_callback(tmp_path, monkeypatch):
    """Arrow's pool threads release a CSV reader after read_csv returns; a Python callback released
    there during interpreter exit aborts the process (rc 134) when a run stops early on bad input."""
    import pyarrow.csv as pacsv

    calls = []
    real = pacsv.read_csv

    def spy(*args, **kwargs):
        calls.append(kwargs.get("parse_options"))
        return real(*args, **kwargs)

    monkeypatch.setattr(pacsv, "read_csv", spy)
    lines = (TINY / "persons.csv").read_text().splitlines()
    lines[3] = lines[3] + ",extra"
    msg = problems_for(tmp_path, persons="\n".join(lines) + "\n")
    assert "row 3 (line 4)" in msg  # the bad row is still located
    assert calls and all(o is None or o.invalid_row_handler is None for o in calls)


def test_unreadable_files(tmp_path):
    msg = problems_for(tmp_path, persons=b"PAR1 not really a parquet file", persons_name="persons.parquet")
    assert "persons.parquet: not a Parquet file, or a corrupt one" in msg
    msg = problems_for(tmp_path, units="x", units_name="units.txt")
    assert "units.txt: unknown file extension '.txt': expected .parquet or .csv" in msg
    problems = validate_input(tmp_path / "nope.csv", TINY / "units.csv", PL94)
    # a file that cannot be opened is named with its whole path: which one was looked for
    assert [str(p) for p in problems] == [f"{tmp_path / 'nope.csv'}: file not found"] and problems[0].unreadable
    (tmp_path / "dir.csv").mkdir()
    assert "dir.csv: not a file" in str(validate_input(tmp_path / "dir.csv", TINY / "units.csv", PL94)[0])
    latin1 = (TINY / "persons.csv").read_bytes().replace(b"\n44,", b"\n\xe944,", 1)
    assert "row 1 (line 2), column TABBLKST: text encoded as UTF-8 (this row has bytes that are not)" in \
        problems_for(tmp_path, persons=latin1)
    latin1 = (TINY / "persons.csv").read_bytes().replace(b"\n44,001,000100,1,1001", b"\n44,001,000100,1,1\xe901", 1)
    message = problems_for(tmp_path, persons=latin1)
    assert "text encoded as UTF-8" in message and "row " in message and "\xe9" not in message


def test_uint64_above_2_63_is_reported_as_itself(tmp_path):
    frame = pd.read_csv(TINY / "persons.csv", dtype=str)
    arrow = pa.Table.from_pandas(frame, preserve_index=False)
    epnum = pa.array([2**63 + 5] + list(range(2, len(frame) + 1)), pa.uint64())
    arrow = arrow.set_column(arrow.column_names.index("EPNUM"), "EPNUM", epnum)
    pq.write_table(arrow, tmp_path / "persons.parquet")
    problems = validate_input(tmp_path / "persons.parquet", TINY / "units.csv", PL94)
    text = " ".join(str(p) for p in problems)
    assert f"row 1, column EPNUM: '{2**63 + 5}' is not valid (expected an integer below 2^63)" in text
    assert "-" not in text.split("EPNUM")[1].split("is not valid")[0]


def test_every_check_runs_and_rows_are_capped(tmp_path):
    p, u = tiny_frames()
    bad = edit(p, 3, "CENHISP", "7")
    bad["CENRACE"] = "64"
    msg = problems_for(tmp_path, persons=bad, units=edit(u, 2, "RTYPE", "9"))
    assert "units.csv row 3 (line 4), column RTYPE: '9'" in msg
    assert "persons.csv row 4 (line 5), column CENHISP: '7'" in msg
    for row in range(1, 6):
        assert f"persons.csv row {row} (line {row + 1}), column CENRACE: '64'" in msg
    assert "persons.csv row 6 " not in msg
    assert f"persons.csv, column CENRACE: ... and {len(p) - 5} more rows with the same problem" in msg


def test_read_units_and_read_records_raise_located_errors(tmp_path):
    p, u = tiny_frames()
    with pytest.raises(InputError, match=r"units.csv row 1 \(line 2\), column HH_STATUS: '7'"):
        read_units(write(edit(u, 0, "HH_STATUS", "7"), tmp_path / "units.csv"))
    blocks = read_units(TINY / "units.csv").blocks
    with pytest.raises(InputError, match=r"persons.csv row 2 \(line 3\), column QSEX: '3'"):
        read_records(write(edit(p, 1, "QSEX", "3"), tmp_path / "persons.csv"), DHC, blocks)
    housing = u.index[u["RTYPE"] == "2"][1]
    with pytest.raises(InputError, match=rf"units.csv row {housing + 1} \(line {housing + 2}\), column HH_STATUS: "
                                         r"'0' is not valid \(expected one of 1, 2\)"):
        read_records(write(edit(u, housing, "HH_STATUS", "0"), tmp_path / "units.csv"), load_schema("h1_units"), blocks)


def test_input_error_lists_twenty_problems_and_counts_the_rest():
    problems = [Problem("persons.csv", i, "CENRACE", "64", "one of '01'..'63'", csv=True) for i in range(1, 31)]
    message = str(InputError(problems))
    assert message.startswith("30 problem(s) in the input:")
    assert "row 20 (line 21)" in message and "row 21 " not in message and "... and 10 more problems" in message


# --- das validate-input ----------------------------------------------------------------------

def test_validate_input_main_exit_codes(tmp_path):
    out = io.StringIO()
    assert validate_input_main(TINY / "persons.csv", TINY / "units.csv", "pl94_persons", out=out) == 0
    assert "ok: 145 persons in 12 blocks" in out.getvalue()
    p, _ = tiny_frames()
    out = io.StringIO()
    assert validate_input_main(write(edit(p, 4, "CENRACE", "64"), tmp_path / "p.csv"), TINY / "units.csv", out=out) == 1
    assert "1 problem(s):" in out.getvalue() and "p.csv row 5 (line 6), column CENRACE: '64'" in out.getvalue()
    out = io.StringIO()
    assert validate_input_main(tmp_path / "missing.parquet", TINY / "units.csv", out=out) == 2
    assert "missing.parquet: file not found" in out.getvalue()
    assert validate_input_main(TINY / "persons.csv", TINY / "units.csv", "no_such_schema", out=io.StringIO()) == 2


def test_validate_input_main_notes_an_empty_persons_file(tmp_path):
    header = (TINY / "persons.csv").read_text().splitlines()[0] + "\n"
    out = io.StringIO()
    assert validate_input_main(write(header, tmp_path / "p.csv"), TINY / "units.csv", "dhc_persons", out=out) == 0
    assert "note: the persons file has no rows" in out.getvalue()
    assert "group-quarters facility with nobody of its type" in out.getvalue()


def test_cli_never_prints_a_whole_row(capsys, tmp_path):
    assert das_main(["validate-input", str(TINY / "persons.csv"), str(TINY / "units.csv")]) == 0
    assert "ok: 145 persons" in capsys.readouterr().out
    lines = (TINY / "persons.csv").read_text().splitlines()
    fields = lines[5].split(",")
    fields[10] = "64"  # CENRACE
    lines[5] = ",".join(fields)
    write("\n".join(lines) + "\n", tmp_path / "p.csv")
    assert das_main(["validate-input", str(tmp_path / "p.csv"), str(TINY / "units.csv"), "--schema", "dhc_persons"]) == 1
    out = capsys.readouterr().out
    assert "p.csv row 5 (line 6), column CENRACE: '64'" in out
    assert lines[5] not in out and ",".join(fields[:5]) not in out


# --- issue 24: ASCII digits only, fields of any size, values cut, files that cannot be opened ----


@pytest.mark.parametrize("value", ["\uff14\uff14", "\u0664\u0664", "\u096a\u096a"])  # fullwidth, Arabic-Indic, Devanagari
def test_geocodes_of_other_digits_than_ascii_are_refused(tmp_path, value):
    p, u = tiny_frames()
    msg = problems_for(tmp_path, persons=edit(p, 0, "TABBLKST", value))
    assert f"persons.csv row 1 (line 2), column TABBLKST: {value!r} is not valid (expected 2 ASCII digits 0-9" in msg
    msg = problems_for(tmp_path, units=edit(u, 0, "RTYPE", "\uff12"))
    assert "units.csv row 1 (line 2), column RTYPE: '\uff12' is not valid (expected an integer)" in msg


@pytest.mark.parametrize("size", [300_000, 5_000_000])  # below and above Arrow's 1 MB block, and Python csv's limit
def test_a_field_of_any_size_is_read_and_refused_with_row_and_column_cut_short(tmp_path, size):
    p, _ = tiny_frames()
    msg = problems_for(tmp_path, persons=edit(p, 0, "CENRACE", "9" * size))
    assert "persons.csv row 1 (line 2), column CENRACE: '999" in msg and f"... ({size:,} characters) is not valid" in msg
    assert len(msg) < 400  # the value is cut: never echoed whole


def test_a_ragged_row_after_a_huge_field_is_still_located(tmp_path):
    text = (TINY / "persons.csv").read_text().splitlines()
    text[1] = text[1] + "," + "9" * 200_000  # one field too many, and larger than Python csv's default limit
    msg = problems_for(tmp_path, persons="\n".join(text) + "\n")
    assert "row 1 (line 2)" in msg and "13 comma-separated fields" in msg and len(msg) < 400


def test_files_that_cannot_be_opened_say_what_happened(tmp_path, monkeypatch):
    loop = tmp_path / "loop.csv"
    loop.symlink_to(loop)
    assert str(validate_input(loop, TINY / "units.csv", PL94)[0]) == (f"{loop}: a symbolic link loop (it never reaches "
                                                                      "a file): expected a .parquet or .csv file")
    broken = tmp_path / "broken.csv"
    broken.symlink_to(tmp_path / "gone.csv")
    assert "a broken symbolic link (its target does not exist)" in str(validate_input(broken, TINY / "units.csv", PL94)[0])
    locked = write((TINY / "persons.csv").read_text(), tmp_path / "locked.csv")
    real_open = open

    def denied(path, *args, **kwargs):  # a file this user may not read (tests run as root, where chmod 000 reads)
        if str(path) == str(locked):
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr("builtins.open", denied)
    problems = validate_input(locked, TINY / "units.csv", PL94)
    assert str(problems[0]) == f"{locked}: permission denied: this user may not read the file" and problems[0].unreadable


def test_unreadable_files_exit_2_from_the_command_line(tmp_path, capsys):
    loop = tmp_path / "loop.csv"
    loop.symlink_to(loop)
    assert das_main(["validate-input", str(loop), str(TINY / "units.csv")]) == 2
    assert "a symbolic link loop" in capsys.readouterr().out
    assert das_main(["validate-input", str(TINY / "persons.csv"), str(TINY / "units.csv"), "--schema", "nonesuch"]) == 2
    printed = capsys.readouterr()
    assert "das validate-input: no schema spec 'nonesuch'" in printed.err and "nonesuch" not in printed.out
