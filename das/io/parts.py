"""The release files of a partitioned run, written per state on the workers, assembled on the driver.

A worker writes one state's *parts* (`write_state_parts`): its MDF rows, its rows of every table
from the state level down (one Parquet row group per level), its PL 94-171 files. The driver, which
holds only the nation and the states, then writes the final files (`assemble`) by copying the parts
row group by row group, so its memory follows one row group or one state's level, never the country.
The final files have the names, columns and row orders `Pipeline.write_outputs` gives (docs/outputs.md,
"Partitioned runs"), except that the units MDF is state-major.

    <part_dir>/mdf_persons.parquet, mdf_units.parquet   the state's MDF (EPNUM 1..n of the state)
    <part_dir>/tables/<table>.parquet                    the state's rows, row group i = level i (state..block)
    <part_dir>/pl94171/                                  the state's PL 94-171 files
    <part_dir>/parts.json                                what the driver needs (StateParts), written last
"""

from __future__ import annotations

import itertools
import json
import shutil
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import scipy.sparse as sp

from das import atomic
from das.geography import DEFAULT_LEVELS, Geography
from das.io import mdf as mdf_io
from das.io import pl94171
from das.io.tables import TableSpec, arrow_table, level_frames, level_rows, table_answers
from das.rundir import RunDir
from das.schema import Schema

PARTS_FILE = "parts.json"
TABLE_COMPRESSION = "snappy"  # what das.io.tables.write_tables writes (pyarrow's default)
ROW_GROUP_ROWS = 1 << 14  # the assembled tables gather small slices (a state's one state row) up to this (P2: 10 MB)


@dataclass(frozen=True)
class OutputPlan:
    """What a run writes, the same for every state: tables, their levels (nation first), PL 94-171
    files or not, the MDF layout, and the metadata every Parquet output carries."""

    tables: tuple[TableSpec, ...]
    metadata: dict[bytes, bytes]
    levels: tuple[str, ...] = DEFAULT_LEVELS
    pl94171: bool = False
    mdf_layout: str = "parquet"

    @property
    def part_levels(self) -> tuple[str, ...]:
        """The levels a state's parts hold: all but the nation."""
        if self.levels[0] != "nation":
            raise ValueError(f"levels must start at the nation: {self.levels}")
        return self.levels[1:]


@dataclass(frozen=True)
class StateParts:
    """One state's parts as written: small and picklable, all the driver needs to assemble them."""

    state: str
    directory: Path
    rows: dict[str, int]  # MDF kind -> rows
    levels: tuple[str, ...]  # the levels of every table part, in order (`level_groups` finds their row groups)
    table_rows: dict[str, tuple[int, ...]]  # table name -> rows per level
    pl94171: tuple[str, ...] = ()  # file names in pl94171/

    def mdf(self, kind: str) -> Path:
        return self.directory / f"mdf_{kind}.parquet"

    def table(self, name: str) -> Path:
        return self.directory / "tables" / f"{name}.parquet"

    def level_groups(self, name: str, level: int) -> list[int]:
        """The row groups of table `name`'s part that hold levels[level]: each level starts a row group
        and fills groups of ROW_GROUP_ROWS rows (one, empty, if the level has no rows)."""
        groups = [max(1, -(-n // ROW_GROUP_ROWS)) for n in self.table_rows[name]]
        first = sum(groups[:level])
        return list(range(first, first + groups[level]))

    def to_json(self) -> str:
        return json.dumps({**asdict(self), "directory": None}, indent=2)

    @classmethod
    def from_json(cls, text: str, directory: Path) -> StateParts:
        data = json.loads(text)
        return cls(data["state"], Path(directory), data["rows"], tuple(data["levels"]),
                   {k: tuple(v) for k, v in data["table_rows"].items()}, tuple(data["pl94171"]))


def state_of(blocks: np.ndarray) -> str:
    """The one state of `blocks` (15-digit geocodes); ValueError if they span several or none."""
    states = np.unique(np.asarray(blocks, dtype="U15").astype("U2"))
    if len(states) != 1:
        raise ValueError(f"a state's parts need the blocks of one state; these are in {states.tolist() or 'none'}")
    return str(states[0])


def write_state_parts(part_dir: Path, schemas: dict[str, Schema], blocks: np.ndarray,
                      solved: dict[str, sp.csr_matrix], gq_facilities: np.ndarray, plan: OutputPlan) -> StateParts:
    """One state's parts from its solved block histograms (keyed by release, like `schemas`); the
    directory appears whole, with parts.json last, so a present parts.json means complete parts."""
    part_dir = Path(part_dir)
    geography = Geography.from_blocks(blocks, plan.levels)
    if not np.array_equal(geography.blocks, np.asarray(blocks, dtype="U15")):
        raise ValueError("a state's blocks must be sorted (the rows of its histograms follow them)")
    state = state_of(blocks)
    with atomic.replacing(part_dir, directory=True) as tmp:
        rows = {}
        for kind in mdf_io.KINDS:
            path = mdf_io.write_table(mdf_io.release_mdf(kind, schemas, geography.blocks, solved, gq_facilities),
                                      tmp / f"mdf_{kind}.parquet", metadata=plan.metadata)
            rows[kind] = pq.read_metadata(path).num_rows
        table_rows = _write_table_parts(tmp / "tables", geography, schemas, solved, plan)
        pl_files = pl94171.write_release(tmp / "pl94171", geography, solved, schemas) if plan.pl94171 else []
        parts = StateParts(state, part_dir, rows, plan.part_levels, table_rows, tuple(p.name for p in pl_files))
        atomic.write_text(tmp / PARTS_FILE, parts.to_json())
    return parts


def _by_schema(schemas: dict[str, Schema], histograms: dict) -> dict[str, tuple[Schema, object]]:
    """Histograms keyed by release as (schema, histogram) keyed by schema name, as tables name them."""
    return {schemas[name].name: (schemas[name], h) for name, h in histograms.items()}


def _write_table_parts(out_dir: Path, geography: Geography, schemas: dict[str, Schema],
                       solved: dict[str, sp.csr_matrix], plan: OutputPlan) -> dict[str, tuple[int, ...]]:
    """Each table whose schema has histograms, level by level below the nation, each level in row groups of
    at most ROW_GROUP_ROWS rows (so the driver reads a few MB at a time whatever the state); rows per level."""
    by_schema = _by_schema(schemas, solved)
    out_dir.mkdir(parents=True)
    rows = {}
    for spec in plan.tables:
        if spec.schema not in by_schema:
            continue
        schema, histograms = by_schema[spec.schema]
        frames = [arrow_table(f) for f in level_frames(schema, spec, geography, histograms, plan.part_levels)]
        groups = (f.slice(i, ROW_GROUP_ROWS) for f in frames for i in range(0, max(f.num_rows, 1), ROW_GROUP_ROWS))
        mdf_io.write_batches(groups, frames[0].schema, out_dir / f"{spec.name}.parquet", metadata=plan.metadata,
                             compression=TABLE_COMPRESSION, whole=True)
        rows[spec.name] = tuple(f.num_rows for f in frames)
    return rows


def read_state_parts(part_dir: Path) -> StateParts | None:
    """The parts of a complete part directory (one with parts.json), or None."""
    marker = Path(part_dir) / PARTS_FILE
    return StateParts.from_json(marker.read_text(), Path(part_dir)) if marker.is_file() else None


# ---------------------------------------------------------------------------------------------
# The driver: nation rows, then the assembly


def nation_rows(schema: Schema, spec: TableSpec, nation_histogram) -> pd.DataFrame:
    """The nation's row of a table (the columns of das.io.tables.compute_table) from its histogram
    (schema.size values, dense or a 1-row sparse matrix)."""
    histogram = sp.csr_matrix(nation_histogram).reshape(1, schema.size)
    return level_rows(schema, spec, "nation", np.array([""]), table_answers(schema, spec, histogram))


def nation_tables(schemas: dict[str, Schema], nation_histograms: dict[str, object],
                  tables: tuple[TableSpec, ...]) -> dict[str, pd.DataFrame]:
    """The nation rows of every table whose schema has a histogram (keyed by release, like `schemas`)."""
    by_schema = _by_schema(schemas, nation_histograms)
    return {spec.name: nation_rows(by_schema[spec.schema][0], spec, by_schema[spec.schema][1])
            for spec in tables if spec.schema in by_schema}


def _in_state_order(parts: list[StateParts]) -> list[StateParts]:
    states = [p.state for p in parts]
    if not parts or states != sorted(set(states)):
        raise ValueError(f"parts must be one per state, in state order: got {states}")
    levels = {p.levels for p in parts}
    if len(levels) != 1:
        raise ValueError(f"the states' parts hold different levels: {sorted(levels)}")
    return parts


def _numbered(parts: list[StateParts]) -> Iterator[pa.Table]:
    """The persons parts' row groups in state order, EPNUM renumbered 1..N over all of them."""
    first = 1
    for part in parts:
        for table in mdf_io.row_groups(part.mdf("persons")):
            epnum = pa.array(np.arange(first, first + table.num_rows, dtype=np.int64))
            first += table.num_rows
            yield table.set_column(table.schema.get_field_index("EPNUM"), "EPNUM", epnum)


def _level_slices(parts: list[StateParts], name: str) -> Iterator[pa.Table]:
    """A table's parts level by level, and within a level state by state, a row group (at most
    ROW_GROUP_ROWS rows) at a time: a big state's block level is hundreds of MB of int64 cells."""
    for level in range(len(parts[0].levels)):
        for part in parts:
            if name not in part.table_rows:
                raise ValueError(f"state {part.state} has no part of table {name}")
            parquet = pq.ParquetFile(part.table(name))
            for group in part.level_groups(name, level):
                yield parquet.read_row_group(group)


def _gathered(tables: Iterable[pa.Table], rows: int = ROW_GROUP_ROWS) -> Iterator[pa.Table]:
    """Consecutive small tables joined until `rows` rows, so tiny slices do not each make a row group."""
    held: list[pa.Table] = []
    held_rows = 0
    for table in tables:
        held.append(table)
        held_rows += table.num_rows
        if held_rows >= rows:
            yield pa.concat_tables(held)
            held, held_rows = [], 0
    if held:
        yield pa.concat_tables(held)


def _assemble_tables(out_dir: Path, parts: list[StateParts], top_tables: dict, metadata: dict) -> list[Path]:
    """Each table: the nation rows, then level by level each state's rows, as write_tables orders them."""
    written = []
    for name, nation in top_tables.items():
        top = nation if isinstance(nation, pa.Table) else arrow_table(nation)
        rows = _gathered(itertools.chain([top], _level_slices(parts, name)))
        written.append(mdf_io.write_batches(rows, top.schema, out_dir / f"{name}.parquet", metadata=metadata,
                                            compression=TABLE_COMPRESSION))
    return written


def _copy_pl94171(out_dir: Path, parts: list[StateParts]) -> list[Path]:
    """Every state's PL 94-171 files into one directory; file names are per state, checked not to collide."""
    written = []
    for part in parts:
        for name in part.pl94171:
            target = out_dir / name
            if target.exists():
                raise ValueError(f"PL 94-171 file {name} of state {part.state} collides with another state's")
            shutil.copyfile(part.directory / "pl94171" / name, target)
            written.append(target)
    return written


def assemble(out: RunDir | Path, parts: list[StateParts], top_tables: dict, plan: OutputPlan) -> list[Path]:
    """The release files of a partitioned run from the states' parts (in state order) and the nation
    rows of each table (`nation_tables`): each file, the tables and the PL 94-171 directories appear whole."""
    run_dir = out if isinstance(out, RunDir) else RunDir(out)
    parts = _in_state_order(parts)
    sources = {"persons": _numbered(parts),
               "units": (t for p in parts for t in mdf_io.row_groups(p.mdf("units")))}
    outputs = []
    for kind in mdf_io.KINDS:
        schema = pq.read_schema(parts[0].mdf(kind)).remove_metadata()
        outputs.append(mdf_io.write_batches(sources[kind], schema, run_dir.mdf(kind), metadata=plan.metadata))
    if plan.mdf_layout == "pipe":
        outputs += [mdf_io.pipe_copy(run_dir.mdf(kind), run_dir.mdf(kind, "pipe")) for kind in mdf_io.KINDS]
    with atomic.replacing(run_dir.tables_dir, directory=True) as tmp:
        written = _assemble_tables(tmp, parts, top_tables, plan.metadata)
    outputs += [run_dir.tables_dir / p.name for p in written]
    if plan.pl94171:
        missing = [p.state for p in parts if not p.pl94171]
        if missing:
            raise ValueError(f"states {missing} have no PL 94-171 files in their parts")
        with atomic.replacing(run_dir.pl94171_dir, directory=True) as tmp:
            written = _copy_pl94171(tmp, parts)
        outputs += [run_dir.pl94171_dir / p.name for p in written]
    return outputs
