"""Declared areas (places, towns, school districts...): which blocks make up each area, read from area files.

One file per area type, Parquet or CSV, with a column GEOID (a block's 15-digit geocode, read as
text so its leading zeros are kept) and a column `area` (the id of the area the block is in);
other columns are ignored (files exported from GIS tools carry many). A block not listed is in no
area of that type. Area files are public geography, so a file's SHA-256 may be published; its path
is the operator's and is not.

Every problem of a file is found in one pass and reported as `das.io.microdata.InputError`, before
any noise is drawn. Checks are vectorized (a state has ~300k blocks): no Python loop per row.

>>> import pandas as pd
>>> blocks = np.array(["010010201001000", "010010201001001", "010010201001002"])
>>> areas = areas_from_frames({"place": pd.DataFrame({"GEOID": ["010010201001002", "010010201001000"],
...                                                    "area": ["0100124", "0100124"]})}, blocks)
>>> areas.ids["place"].tolist()
['0100124', '', '0100124']
>>> ids, index = areas.codes("place")
>>> ids.tolist(), index.tolist()
(['0100124'], [0, -1, 0])
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa

from das.core.errors import InputError
from das.io.problems import MAX_ROWS_LISTED, Collector, Problem
from das.io.tabular import load_table
from das.model.specfile import shown

GEOID = "GEOID"  # the block's 15-digit geocode
AREA = "area"  # the id of the area the block is in
BLOCK_DIGITS = 15
TYPE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*", re.ASCII)  # an area type becomes a column name and a label
WELL_FORMED = rf"[0-9]{{{BLOCK_DIGITS}}}"  # ASCII digits only (\d would take any Unicode digit)


@dataclass(frozen=True)
class AreaFile:
    """Where one area type was read from, and a digest of the file's bytes (public geography)."""

    type: str  # the area type, e.g. "place"
    path: Path  # operator-side only: never published
    sha256: str  # hex digest of the file's bytes


@dataclass(frozen=True, eq=False)
class Areas:
    """Declared areas: per area type, each block's area id ('' where the block is in no area of that type)."""

    blocks: np.ndarray  # (n_blocks,) the 15-digit block geocodes these ids are aligned with, as given
    ids: dict[str, np.ndarray]  # type -> (n_blocks,) object array of str, '' = in no area
    files: dict[str, AreaFile]  # type -> its file (empty for areas built in memory)

    def __post_init__(self):
        wrong = [t for t, ids in self.ids.items() if len(ids) != len(self.blocks)]
        if wrong:
            raise ValueError(f"area ids of {wrong} are not aligned with the {len(self.blocks)} blocks")

    @property
    def types(self) -> tuple[str, ...]:
        """The area types, in the order they were declared."""
        return tuple(self.ids)

    def codes(self, type: str) -> tuple[np.ndarray, np.ndarray]:
        """(the sorted distinct area ids of `type`, '' left out; each block's index into them, -1 for none):
        the areas as integers, for sparse matrices and bincounts."""
        distinct, index = np.unique(self.ids[type].astype(object), return_inverse=True)
        index = index.astype(np.int64).ravel()
        if len(distinct) and distinct[0] == "":  # '' sorts first
            return distinct[1:], index - 1
        return distinct, index


@dataclass(frozen=True)
class Scope:
    """One state's share of area files that cover several (a partitioned run reads them state by state): its
    rows are checked against `state`'s blocks, rows of the run's other `states` are left to theirs, and a
    block of no state of the run is refused (by every state alike)."""

    state: str
    states: tuple[str, ...]


def read_areas(paths: Mapping[str, str | Path], blocks: np.ndarray, *, scope: Scope | None = None) -> Areas:
    """The area files (type -> path, `.parquet` or `.csv`) aligned with `blocks` (sorted unique 15-digit
    geocodes: the run's blocks, or with `scope` one state's). InputError lists every problem of every file,
    each naming the file, the row (the n-th data row, the header not counted: in a CSV file row n is line
    n + 1) and the reason."""
    sorted_blocks = _sorted_blocks(blocks)
    problems: list[Problem] = []
    ids, files = {}, {}
    for type, given in paths.items():
        path = Path(given)
        col = Collector(path)
        aligned = None
        if _type_name_ok(type, col):
            table = load_table(path, col)
            frame = None if table is None else _frame(table, col)
            aligned = None if frame is None else _aligned(frame, sorted_blocks, col, scope=scope)
        if col.problems:
            problems += col.problems
            continue
        ids[type] = aligned
        files[type] = AreaFile(type, path, _sha256(path))
    if problems:
        raise InputError(problems)
    return Areas(np.asarray(blocks), ids, files)


def areas_from_frames(frames: Mapping[str, pd.DataFrame], blocks: np.ndarray) -> Areas:
    """Areas given as DataFrames (type -> a frame with columns GEOID and area), with the checks of
    `read_areas`: for the Python API and tests. A problem names the frame as '<type> areas'."""
    sorted_blocks = _sorted_blocks(blocks)
    problems: list[Problem] = []
    ids = {}
    for type, frame in frames.items():
        col = Collector(Path(f"{type} areas"))
        if not _type_name_ok(type, col):
            pass
        elif not isinstance(frame, pd.DataFrame):
            col.add(f"a pandas DataFrame with columns {GEOID} and {AREA}, not {frame.__class__.__name__}")
        else:
            ids[type] = _aligned(frame, sorted_blocks, col)
        problems += col.problems
    if problems:
        raise InputError(problems)
    return Areas(np.asarray(blocks), ids, {})


# ---------------------------------------------------------------------------------------------
# Checks


def _sorted_blocks(blocks: np.ndarray) -> np.ndarray:
    """The run's blocks as a sorted text array, for np.searchsorted; ValueError if not sorted unique."""
    text = np.asarray(blocks).astype(str)
    if len(text) > 1 and not (text[1:] > text[:-1]).all():
        raise ValueError("blocks must be sorted unique geocodes (das.io.microdata.UnitInventory.blocks)")
    return text


def _type_name_ok(type: str, col: Collector) -> bool:
    if isinstance(type, str) and TYPE_NAME.fullmatch(type):
        return True
    col.add(f"the area type {shown(type)} is not a simple name: expected letters, digits and underscores, "
            "not starting with a digit (it becomes a column name)")
    return False


def _frame(table: pa.Table, col: Collector) -> pd.DataFrame | None:
    """The GEOID and area columns of a file (and names like them, for a hint; others ignored) as a DataFrame."""
    wanted = [name for name in table.column_names if name.strip().lower() in (GEOID.lower(), AREA.lower())]
    try:
        return table.select(wanted).to_pandas()
    except (pa.ArrowException, UnicodeDecodeError):
        col.add("text encoded as UTF-8 in columns GEOID and area (they could not be decoded)")
        return None


def _aligned(frame: pd.DataFrame, blocks: np.ndarray, col: Collector, *, scope: Scope | None = None) -> np.ndarray | None:
    """Each block's area id ('' for none) from a frame's rows, or None after reporting every problem."""
    geoid, area = _text(frame, GEOID, col), _text(frame, AREA, col)
    if geoid is not None:
        index = _block_index(geoid, blocks, col, scope=scope)
        _listed_twice(geoid, col)
    if area is not None:
        _empty_ids(area, col)
    if col.problems:
        return None
    ids = np.full(len(blocks), "", dtype=object)
    mine = index >= 0  # a row of another state of the run (scope) is -1
    ids[index[mine]] = area[mine]
    return ids


def _text(frame: pd.DataFrame, name: str, col: Collector) -> np.ndarray | None:
    """A column as an object array of str (None or NaN where empty), after checking it exists and is text."""
    if name not in frame.columns:
        near = [str(c) for c in frame.columns if str(c).strip().lower() == name.lower()]
        hint = f"; found {near[0]!r}: names are case- and space-sensitive" if near else ""
        col.add(f"missing column {name} (expected columns {GEOID}, the block, and {AREA}, its area id{hint})",
                column=name)
        return None
    values = frame[name]
    if isinstance(values, pd.DataFrame):
        col.add(f"column {name} appears more than once: every column must appear once", column=name)
        return None
    if isinstance(values.dtype, pd.CategoricalDtype):
        values = values.astype(object)
    kind = pd.api.types.infer_dtype(values, skipna=True)
    if kind not in ("string", "empty"):
        col.add(f"column {name} holds {kind} values, expected text (ids and geocodes are strings: leading "
                "zeros are part of them)", column=name)
        return None
    return values.to_numpy(dtype=object)


def _block_index(geoid: np.ndarray, blocks: np.ndarray, col: Collector, *, scope: Scope | None = None) -> np.ndarray:
    """Each row's index into `blocks` (-1: a block of another state of the run, with `scope`); rows whose
    GEOID is empty, malformed or not a block are reported."""
    missing = pd.isna(geoid)
    text = pd.Series(geoid, dtype=object).fillna("")
    formed = text.str.fullmatch(WELL_FORMED).to_numpy(dtype=bool) & ~missing
    index = np.zeros(len(geoid), dtype=np.int64)
    known = np.zeros(len(geoid), dtype=bool)
    if len(blocks):
        wanted = text[formed].to_numpy(dtype=f"U{BLOCK_DIGITS}")
        at = np.minimum(np.searchsorted(blocks, wanted), len(blocks) - 1)
        index[formed], known[formed] = at, blocks[at] == wanted
    if scope is not None:
        state = text.str.slice(0, 2)
        elsewhere = formed & (state != scope.state).to_numpy() & state.isin(scope.states).to_numpy()
        index[elsewhere], known[elsewhere] = -1, True
    unknown = formed & ~known
    for rows, expected in ((missing, "a block geocode; the cell is " + ("empty" if col.csv else "null")),
                           (~formed & ~missing, f"a block geocode of {BLOCK_DIGITS} ASCII digits 0-9, zero-padded; "
                                                "a spreadsheet may have dropped leading zeros"),
                           (unknown, "a block of the run's inputs; the units file has no such block")):
        bad = np.flatnonzero(rows)
        if len(bad):
            col.add(expected, column=GEOID, rows=bad, values=text.to_numpy(dtype=object)[bad])
    return index


def _empty_ids(area: np.ndarray, col: Collector) -> None:
    """Rows without an area id (empty, null or only spaces) are reported."""
    missing = pd.isna(area)
    blank = pd.Series(area, dtype=object).fillna("").str.strip().eq("").to_numpy(dtype=bool)
    bad = np.flatnonzero(missing | blank)
    if len(bad):
        shown_values = np.where(missing[bad], "", area[bad].astype(object))
        col.add("an area id; the cell is empty or only spaces: leave a block out to put it in no area",
                column=AREA, rows=bad, values=shown_values)


def _listed_twice(geoid: np.ndarray, col: Collector) -> None:
    """Rows whose block was listed on an earlier row are reported, naming that row."""
    codes, _ = pd.factorize(pd.Series(geoid, dtype=object))  # missing values get -1
    repeated = np.flatnonzero(pd.Series(codes).duplicated().to_numpy() & (codes >= 0))
    if not len(repeated):
        return
    distinct, first_row = np.unique(codes, return_index=True)
    first_of = dict(zip(distinct.tolist(), first_row.tolist()))  # each block's first row
    for row in repeated[:MAX_ROWS_LISTED]:
        col.problems.append(Problem(col.path, int(row) + 1, GEOID, str(geoid[row]),
                                    f"each block listed once; this block is also on row {first_of[codes[row]] + 1}",
                                    col.lines))
    if len(repeated) > MAX_ROWS_LISTED:
        col.add(f"... and {len(repeated) - MAX_ROWS_LISTED:,} more rows listing a block already listed "
                "(expected each block once)", column=GEOID)


def _sha256(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()
