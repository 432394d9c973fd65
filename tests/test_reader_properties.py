"""Property-based tests of the readers (hypothesis): random corruptions of valid inputs never give
a traceback, an exit code other than 0 or 2, or an output directory that looks complete when the
run was refused."""

import io
import json
import shutil

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import ROOT, TINY
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from das.cli import main as das_main
from das.io.validation import validate_input
from das.model.schema import load_schema

PERSONS, UNITS = (TINY / "persons.csv").read_bytes(), (TINY / "units.csv").read_bytes()
PL94 = load_schema("pl94_persons")
NASTY = ["", " ", "-1", "99", "1e5", "abc", "0x10", "9" * 30, "1.0", "\u00e9", "NaN", "NULL", '"', ",", "07 "]
SETTINGS = dict(deadline=None, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def _cell(data: bytes, row: int, column: int, value: str) -> bytes:
    lines = data.decode().split("\n")
    row = 1 + row % (len([x for x in lines if x]) - 1)
    fields = lines[row].split(",")
    fields[column % len(fields)] = value
    lines[row] = ",".join(fields)
    return "\n".join(lines).encode()


@st.composite
def corruption(draw, data: bytes) -> bytes:
    """One random corruption of a CSV file's bytes."""
    kind = draw(st.sampled_from(["cell", "bytes", "truncate", "drop_line", "duplicate_line", "header"]))
    if kind == "cell":
        value = draw(st.one_of(st.sampled_from(NASTY), st.text(max_size=6).filter(lambda t: "\n" not in t)))
        return _cell(data, draw(st.integers(0, 10_000)), draw(st.integers(0, 20)), value)
    if kind == "bytes":
        out = bytearray(data)
        for _ in range(draw(st.integers(1, 4))):
            out[draw(st.integers(0, len(out) - 1))] = draw(st.integers(0, 255))
        return bytes(out)
    if kind == "truncate":
        return data[:draw(st.integers(0, len(data) - 1))]
    lines = data.split(b"\n")
    index = draw(st.integers(0, len(lines) - 1))
    if kind == "drop_line":
        return b"\n".join(lines[:index] + lines[index + 1:])
    if kind == "duplicate_line":
        return b"\n".join(lines[:index + 1] + lines[index:])
    header = lines[0].split(b",")
    i, j = draw(st.integers(0, len(header) - 1)), draw(st.integers(0, len(header) - 1))
    header[i], header[j] = header[j], header[i]
    return b"\n".join([b",".join(header)] + lines[1:])


@settings(max_examples=150, **SETTINGS)
@given(persons=corruption(PERSONS), units=corruption(UNITS), which=st.sampled_from(["persons", "units", "both"]))
def test_validate_input_never_raises_on_corrupt_csv(tmp_path, persons, units, which):
    (tmp_path / "persons.csv").write_bytes(persons if which != "units" else PERSONS)
    (tmp_path / "units.csv").write_bytes(units if which != "persons" else UNITS)
    problems = validate_input(tmp_path / "persons.csv", tmp_path / "units.csv", PL94)
    for p in problems:
        assert str(p)  # every problem renders


def test_a_carriage_return_in_the_header_is_a_problem_not_a_crash(tmp_path):
    """Found by the property above: a lone carriage return at the start of line 1 made Python's CSV reader raise."""
    (tmp_path / "persons.csv").write_bytes(b"\r" + PERSONS[1:])
    (tmp_path / "units.csv").write_bytes(UNITS)
    problems = validate_input(tmp_path / "persons.csv", tmp_path / "units.csv", PL94)
    assert any("header line" in str(p) and "carriage return" in str(p) for p in problems)


def _parquet_bytes(data: bytes) -> bytes:
    frame = pd.read_csv(io.BytesIO(data), dtype=str)
    sink = io.BytesIO()
    pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), sink)
    return sink.getvalue()


PERSONS_PARQUET = _parquet_bytes(PERSONS)


@settings(max_examples=60, **SETTINGS)
@given(data=st.data())
def test_validate_input_never_raises_on_corrupt_parquet(tmp_path, data):
    raw = bytearray(PERSONS_PARQUET)
    kind = data.draw(st.sampled_from(["bytes", "truncate", "retype"]))
    if kind == "bytes":
        for _ in range(data.draw(st.integers(1, 8))):
            raw[data.draw(st.integers(0, len(raw) - 1))] = data.draw(st.integers(0, 255))
        blob = bytes(raw)
    elif kind == "truncate":
        blob = bytes(raw[:data.draw(st.integers(0, len(raw) - 1))])
    else:
        table = pq.read_table(io.BytesIO(PERSONS_PARQUET))
        name = data.draw(st.sampled_from(table.column_names))
        target = data.draw(st.sampled_from([pa.int8(), pa.uint64(), pa.float64(), pa.string(), pa.bool_()]))
        try:
            column = table[name].cast(target)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            column = pa.array([None] * table.num_rows, target)
        sink = io.BytesIO()
        pq.write_table(table.set_column(table.column_names.index(name), name, column), sink)
        blob = sink.getvalue()
    (tmp_path / "persons.parquet").write_bytes(blob)
    for p in validate_input(tmp_path / "persons.parquet", TINY / "units.csv", PL94):
        assert str(p)


@pytest.mark.slow  # 20 whole runs
@settings(max_examples=20, **SETTINGS)
@given(persons=corruption(PERSONS), units=corruption(UNITS), which=st.sampled_from(["persons", "units"]))
def test_das_run_on_corrupt_input_exits_0_or_2_and_never_looks_complete_when_refused(tmp_path, persons, units, which):
    case = tmp_path / "case"
    shutil.rmtree(case, ignore_errors=True)
    case.mkdir()
    (case / "persons.csv").write_bytes(persons if which == "persons" else PERSONS)
    (case / "units.csv").write_bytes(units if which == "units" else UNITS)
    (case / "spec.toml").write_text((ROOT / "specs/runs/tiny.toml").read_text()
                                    .replace("../../geography_fixtures/tiny/", ""))
    out = case / "out"
    code = das_main(["run", str(case / "spec.toml"), "--out", str(out), "--seed", "1", "--workers", "1", "--no-progress"])
    assert code in (0, 2)
    manifest = out / "manifest.json"
    if code == 2:
        assert not manifest.exists() or json.loads(manifest.read_text())["status"] != "complete"
        assert not (out / "mdf_persons.parquet").exists()
    else:
        assert json.loads(manifest.read_text())["validation"]["valid"]


def test_a_text_column_holding_bytes_that_are_not_utf8_is_a_problem_with_its_row(tmp_path):
    """Found by the corrupt-Parquet property: a string column with non-UTF-8 bytes raised UnicodeDecodeError."""
    table = pq.read_table(io.BytesIO(PERSONS_PARQUET))
    blocks = table["TABBLK"].combine_chunks().cast(pa.string()).to_pylist()
    data = b"".join(b"\x80\x81ab" if i == 2 else v.encode() for i, v in enumerate(blocks))
    offsets, at = [0], 0
    for i, v in enumerate(blocks):
        at += 4 if i == 2 else len(v.encode())
        offsets.append(at)
    broken = pa.Array.from_buffers(pa.string(), len(blocks), [None, pa.py_buffer(pa.array(offsets, pa.int32()).buffers()[1]),
                                                               pa.py_buffer(data)])
    table = table.set_column(table.column_names.index("TABBLK"), "TABBLK", broken)
    pq.write_table(table, tmp_path / "persons.parquet")
    problems = [str(p) for p in validate_input(tmp_path / "persons.parquet", TINY / "units.csv", PL94)]
    assert any("row 3, column TABBLK: '\\\\x80\\\\x81ab' is not valid" in p for p in problems), problems
