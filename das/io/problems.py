"""What is wrong with an input file, row by row: a Problem names the file, row, column, the value and what was
expected; a Collector gathers a file's, the first few rows of each check and a count of the rest."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from das.model.specfile import shown

MAX_ROWS_LISTED = 5  # rows listed per check, then a count of the rest


@dataclass(frozen=True)
class Problem:
    """One thing wrong with an input file: where (file, 1-based data row, column), the value
    found and what was expected. Never a whole row.

    >>> print(Problem("persons.csv", 17, "CENRACE", "64", "one of '01'..'63'", csv=True))
    persons.csv row 17 (line 18), column CENRACE: '64' is not valid (expected one of '01'..'63')
    """

    file: str
    row: int | None  # 1-based data row (the CSV header is line 1, so row r is line r + 1)
    column: str | None
    value: str | None
    expected: str  # what was expected; without a value, the whole description of the problem
    csv: bool = False  # say the CSV line number too
    unreadable: bool = False  # the file could not be opened or parsed at all

    def __str__(self) -> str:
        # a file that cannot be opened is named in full (which one was looked for?); others by name
        where = self.file if self.unreadable else Path(self.file).name
        if self.row is not None:
            where += f" row {self.row}" + (f" (line {self.row + 1})" if self.csv else "")
        if self.column is not None:
            where += f", column {self.column}"
        if self.value is not None:  # cut to a readable length: a bad value may be megabytes long
            return f"{where}: {shown(self.value)} is not valid (expected {self.expected})"
        return f"{where}: {self.expected}"


class Collector:
    """Problems of one file (or of an input held in memory: das.io.tabular.InMemory, its rows without CSV lines)."""

    def __init__(self, path):
        self.path = str(path)
        self.csv = not isinstance(path, Path) or path.suffix.lower() == ".csv"  # its cells are text
        self.lines = self.csv and isinstance(path, Path)  # a problem says the file's line too
        self.problems: list[Problem] = []

    def add(self, expected: str, *, column: str | None = None, rows=None, values=None,
            unreadable: bool = False) -> None:
        """One problem per offending row (the first few), then a count of the rest.
        `rows` are 0-based data rows; `values` (optional) the offending value of each."""
        if rows is None:
            self.problems.append(Problem(self.path, None, column, None, expected, self.lines, unreadable))
            return
        rows = np.asarray(rows)
        for i, r in enumerate(rows[:MAX_ROWS_LISTED]):
            value = None if values is None else str(values[i])
            self.problems.append(Problem(self.path, int(r) + 1, column, value, expected, self.lines))
        if len(rows) > MAX_ROWS_LISTED:
            self.problems.append(Problem(self.path, None, column, None,
                                         f"... and {len(rows) - MAX_ROWS_LISTED:,} more rows with the "
                                         f"same problem (expected {expected})", self.lines))
