"""An input file (Parquet or CSV) read as an Arrow table of text columns, every problem of opening and parsing it
(encoding, delimiter, width, duplicate columns) collected with its row. An input held in memory (`InMemory`: a
DataFrame given to the Python API, as the CSV text a file of its values holds) is read by the same code."""

from __future__ import annotations

import csv as pycsv
import errno
import io
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from das.io.problems import Collector

OTHER_DELIMITERS = {"|": "pipe", ";": "semicolon", "\t": "tab"}


@dataclass(frozen=True)
class InMemory:
    """An input held in memory as CSV text (a pandas DataFrame given to the Python API: das.api.inputs), read as a
    file of those bytes would be; `name` is what a problem calls it ("the persons DataFrame"), its rows counted
    from 1 without CSV line numbers."""

    name: str
    csv: bytes = field(repr=False)

    def __str__(self) -> str:
        return self.name


Source = Path | InMemory  # what an input is read from


def source(value) -> Source:
    """A path as a Path; an input held in memory as itself."""
    return value if isinstance(value, InMemory) else Path(value)


def _open(src: Source):
    return io.BytesIO(src.csv) if isinstance(src, InMemory) else open(src, "rb")


def _size(src: Source) -> int:
    return len(src.csv) if isinstance(src, InMemory) else src.stat().st_size


def load_table(path: Source, col: Collector) -> pa.Table | None:
    """A Parquet or CSV file (by extension), or CSV text in memory, as an Arrow table; CSV columns are read as
    text."""
    if isinstance(path, InMemory):
        if not path.csv:
            col.add("empty: expected a header and rows")
            return None
        return _load_csv(path, col)
    unopenable = _unopenable(path)
    if unopenable:
        col.add(unopenable, unreadable=True)
        return None
    suffix = path.suffix.lower()
    if suffix not in (".parquet", ".csv"):
        col.add(f"unknown file extension {path.suffix!r}: expected .parquet or .csv", unreadable=True)
        return None
    if path.stat().st_size == 0:
        col.add("the file is empty (0 bytes): expected a header and rows")
        return None
    return _load_parquet(path, col) if suffix == ".parquet" else _load_csv(path, col)


def _unopenable(path: Path) -> str | None:
    """Why a file cannot be opened for reading, said as what happened (None: it can be)."""
    try:
        info = path.stat()
    except FileNotFoundError:
        return ("a broken symbolic link (its target does not exist): expected a .parquet or .csv file"
                if os.path.lexists(path) else "file not found")
    except OSError as e:
        return "a symbolic link loop (it never reaches a file): expected a .parquet or .csv file" \
            if e.errno == errno.ELOOP else f"cannot be read: {e.strerror or e}"
    if stat.S_ISDIR(info.st_mode):
        return "not a file (a directory?): expected a .parquet or .csv file"
    if not stat.S_ISREG(info.st_mode):
        return "not a regular file (a pipe or a device?): expected a .parquet or .csv file"
    try:
        with open(path, "rb"):
            pass
    except PermissionError:
        return "permission denied: this user may not read the file"
    except OSError as e:
        return f"cannot be read: {e.strerror or e}"
    return None


def _duplicates(names: list[str]) -> list[str]:
    return sorted({n for n in names if names.count(n) > 1})


def _load_parquet(path: Path, col: Collector) -> pa.Table | None:
    try:
        names = pq.read_schema(path).names
    except (pa.ArrowException, OSError, UnicodeDecodeError) as e:  # a corrupt footer may hold non-UTF-8 names
        col.add(f"not a Parquet file, or a corrupt one ({str(e).splitlines()[0]})", unreadable=True)
        return None
    dupes = _duplicates(names)
    if dupes:
        col.add(f"duplicate column name(s) {dupes}: every column must appear once")
        return None
    try:
        return _ParquetColumns(pq.ParquetFile(path), names)
    except (pa.ArrowException, OSError, UnicodeDecodeError) as e:
        col.add(f"the Parquet data could not be read ({str(e).splitlines()[0]})", unreadable=True)
        return None


class _ParquetColumns:
    """A Parquet file's columns, each read when asked for (a ChunkedArray), as `pa.Table` gives them: a reader
    holds the Arrow buffers of the column it converts, not the whole file's (38M persons: 1.5 GB less)."""

    def __init__(self, parquet: pq.ParquetFile, names: list[str]):
        self.parquet, self.column_names = parquet, names
        self.num_rows = parquet.metadata.num_rows

    def __getitem__(self, name: str) -> pa.ChunkedArray:
        return self.parquet.read(columns=[name]).column(0)

    def select(self, names: list[str]) -> pa.Table:
        """Those columns as a table (the area files' two)."""
        return self.parquet.read(columns=names)


def _load_csv(path: Source, col: Collector) -> pa.Table | None:
    with _open(path) as f:
        raw_header = f.readline()
    try:
        header = raw_header.decode("utf-8-sig").rstrip("\r\n")
    except UnicodeDecodeError:
        col.add("a header line of UTF-8 text naming the columns (line 1 has bytes that are not UTF-8)",
                unreadable=True)
        return None
    if not header.strip():
        col.add("the first line is empty: expected a header line naming the columns", unreadable=True)
        return None
    try:
        names = next(pycsv.reader([header]))
    except pycsv.Error:  # e.g. a lone carriage return inside the line: Python's reader refuses it
        col.add("a header line of comma-separated column names (line 1 holds a carriage return or another "
                "character the CSV reader refuses inside a name)", unreadable=True)
        return None
    if len(names) == 1:
        for delimiter, word in OTHER_DELIMITERS.items():
            if delimiter in header:
                col.add(f"the header is a single column containing {delimiter!r}: the file looks "
                        f"{word}-delimited; expected comma-separated values")
                return None
    dupes = _duplicates(names)
    if dupes:
        col.add(f"duplicate column name(s) {dupes} in the header: every column must appear once")
        return None

    def read(block_size: int | None = None) -> pa.Table:
        return pacsv.read_csv(
            io.BytesIO(path.csv) if isinstance(path, InMemory) else path,
            read_options=pacsv.ReadOptions(block_size=block_size) if block_size else None,
            convert_options=pacsv.ConvertOptions(
                column_types={n: pa.string() for n in names}, null_values=[""],
                strings_can_be_null=True, quoted_strings_can_be_null=True),
        )

    # No Python callback (invalid_row_handler) goes to Arrow: its pool threads release the reader
    # after read_csv returns, and releasing a Python object there can run into interpreter exit
    # (std::terminate, rc 134, when a run stops early on an input error). Rows with the wrong
    # number of fields are found by a plain scan, only when Arrow refuses the file.
    try:
        try:
            return read()
        except pa.ArrowInvalid as e:
            if "straddling" not in str(e):
                raise
            # a field larger than Arrow's block (1 MB): read again in one block, so the field is read and checked
            return read(block_size=min(_size(path) + 1, 2**31 - 1))
    except UnicodeDecodeError:  # a malformed row's bytes are not UTF-8
        return _non_utf8(path, col)
    except pa.ArrowException as e:
        bad = _rows_with_wrong_width(path, len(names)) if isinstance(e, pa.ArrowInvalid) else []
        if bad:
            col.add(f"{len(names)} comma-separated fields, as many as the header",
                    rows=np.asarray([row for row, _ in bad]), values=[f"{width} fields" for _, width in bad])
            return None
        # Arrow's message can quote a record: say only which column, never the text.
        message = str(e)
        found = re.search(r"CSV column #(\d+)", message)
        column = names[int(found.group(1))] if found and int(found.group(1)) < len(names) else None
        if "UTF8" in message:
            return _non_utf8(path, col, column)
        col.add("a well-formed comma-separated file (the CSV parser stopped; its message is "
                "withheld because it may quote a record)", column=column, unreadable=True)
        return None


def _rows_with_wrong_width(path: Source, width: int, limit: int = 1000) -> list[tuple[int, int]]:
    """(data row, number of fields) of the rows whose width differs from the header's (at most `limit`)."""
    bad = []
    field_limit = pycsv.field_size_limit()
    pycsv.field_size_limit(max(field_limit, min(_size(path) + 1, 2**31 - 1)))  # a field of any size is read
    try:
        with io.TextIOWrapper(_open(path), newline="", encoding="utf-8", errors="replace") as f:
            rows = pycsv.reader(f)
            next(rows, None)
            for i, row in enumerate(rows):
                if row and len(row) != width:
                    bad.append((i, len(row)))
                    if len(bad) >= limit:
                        break
    except pycsv.Error:  # the scan cannot go on: the rows found so far (the caller reports the file otherwise)
        pass
    finally:
        pycsv.field_size_limit(field_limit)
    return bad


def _non_utf8(path: Source, col, column: str | None = None) -> None:
    """Locate the first row whose bytes are not UTF-8 (its row, never its text)."""
    line = _first_non_utf8_line(path)
    if line is None:
        col.add("text encoded as UTF-8", column=column, unreadable=True)
    else:
        col.add("text encoded as UTF-8 (this row has bytes that are not)", column=column, rows=[line - 2])
    return None


def _first_non_utf8_line(path: Source) -> int | None:
    """The 1-based line number of the first line that is not valid UTF-8, or None."""
    with _open(path) as f:
        for number, line in enumerate(f, 1):
            try:
                line.decode("utf-8")
            except UnicodeDecodeError:
                return number
    return None
