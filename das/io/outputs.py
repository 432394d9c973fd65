"""The outputs registry: every kind of release file as one object, so a new format is one registration.

An output writes one state's part of its files (`write_part`: on a worker in a partitioned run) and
builds the release's files from the states' parts (`assemble`, streaming), names its files
(`patterns`, relative to the run directory: what `--overwrite` may remove and what the validator knows
as das's), and says which of the validator's checks prove it (`checks`, names of das.validate's
registered checks). There is no other way to write one: a release held in memory (a whole run, `das
synth`, `das postprocess`) is written as its states' parts and assembled too (das.io.parts.write_release),
so every release file is made by one protocol, in registration order.

    register(MyOutput())        # written, assembled, listed in the manifest and validated from then on
"""

from __future__ import annotations

import itertools
import shutil
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import scipy.sparse as sp

from das.core import atomic
from das.core.registry import add_named
from das.frame.rundir import RunDir
from das.io import mdf as mdf_io
from das.io import pl94171
from das.io.invariants import write_block_invariants
from das.io.tables import (
    TABLE_COMPRESSION,
    TABLE_ROWS,
    TableSpec,
    arrow_table,
    level_rows,
    table_answers,
    table_slices,
)
from das.model.geography import Geography
from das.model.levels import DEFAULT_LEVELS, NATION
from das.model.schema import Schema
from das.model.spine import spine_table

_HERE = RunDir(".")  # file patterns relative to a run directory, from RunDir's layout
ROW_GROUP_ROWS = TABLE_ROWS  # a table part's row groups, and the assembled tables' (P2: 10 MB)


@dataclass(frozen=True)
class OutputPlan:
    """What a release writes, the same for every state: tables, their levels (nation first), PL 94-171
    files or not, the MDF layout, and the metadata every Parquet output carries."""

    tables: tuple[TableSpec, ...]
    metadata: dict[bytes, bytes]
    levels: tuple[str, ...] = DEFAULT_LEVELS
    pl94171: bool = False
    mdf_layout: str = "parquet"
    mdf_kinds: tuple[str, ...] = mdf_io.KINDS  # a synthetic release (das synth) has no units MDF
    nmf: bool = True  # the release was measured (TopDown): its NMF is one of its outputs
    spine: bool = False  # measured on a spine other than the standard one (das.model.spine): it is published

    @property
    def part_levels(self) -> tuple[str, ...]:
        """The levels a state's parts hold: all but the nation."""
        if self.levels[0] != NATION:
            raise ValueError(f"levels must start at the nation: {self.levels}")
        return self.levels[1:]


@dataclass(frozen=True)
class SolvedRelease:
    """What the writers need of a release: its geography, schemas and solved block histograms (both keyed by
    release, "persons" and "units"), and the invariants per block its units MDF lists: the GQ facilities (None:
    a release without a units MDF) and the housing units (a release without a units histogram lists them as
    they are, das.io.mdf.unit_mdf)."""

    geography: Geography
    schemas: dict[str, Schema]
    solved: dict[str, sp.csr_matrix]
    gq_facilities: np.ndarray | None = None
    spine: Geography | None = None  # the engine's geography, when not `geography` (das.model.spine)
    housing_units: np.ndarray | None = None

    def by_schema(self) -> dict[str, tuple[Schema, sp.csr_matrix]]:
        """(schema, histograms) keyed by schema name, as the tables name them."""
        return {self.schemas[name].name: (self.schemas[name], h) for name, h in self.solved.items()}


@dataclass(frozen=True)
class NationRelease:
    """What the partitioned driver holds when it assembles: the schemas and the nation's solved histograms."""

    schemas: dict[str, Schema]
    histograms: dict[str, object]  # release -> (1 x cells)


@dataclass(frozen=True)
class Part:
    """One state's part of every output, as the driver assembles it: the part directory (laid out as a
    release, RunDir) and each output's record of what it wrote there (small, JSON)."""

    state: str
    directory: RunDir
    levels: tuple[str, ...]
    records: dict[str, dict]


class Output:
    """One kind of release file. `manifest_field`: where the manifest lists its files' digests."""

    name = ""
    manifest_field = "outputs"

    def patterns(self) -> tuple[str, ...]:
        raise NotImplementedError

    def checks(self, plan: OutputPlan) -> tuple[str, ...]:
        return ()

    def wanted(self, plan: OutputPlan) -> bool:
        return True

    def write_part(self, part: RunDir, release: SolvedRelease, plan: OutputPlan) -> dict:
        raise NotImplementedError

    def assemble(self, run_dir: RunDir, parts: list[Part], nation: NationRelease, plan: OutputPlan) -> list[Path]:
        raise NotImplementedError


OUTPUTS: dict[str, Output] = {}


def register(output: Output) -> Output:
    """Add an output kind: every release that wants it writes, assembles, lists and validates it from now on."""
    return add_named(OUTPUTS, output, "an output")


def unregister(name: str) -> None:
    OUTPUTS.pop(name, None)


def wanted(plan: OutputPlan) -> list[Output]:
    return [o for o in OUTPUTS.values() if o.wanted(plan)]


def release_patterns() -> tuple[str, ...]:
    """Every file a release may hold, as patterns relative to its directory (`*` matches across '/')."""
    return tuple(p for o in OUTPUTS.values() for p in o.patterns())


def checks_of(plan: OutputPlan) -> tuple[str, ...]:
    """What the validator checks of a release's outputs (each output's checks, in registration order)."""
    return tuple(dict.fromkeys(c for o in wanted(plan) for c in o.checks(plan)))


# ---------------------------------------------------------------------------------------------
# The MDFs


def _numbered(parts: list[Part]) -> Iterator[pa.Table]:
    """The persons parts' records in state order, EPNUM renumbered 1..N over all of them."""
    first = 1
    for part in parts:
        for table in mdf_io.row_groups(part.directory.mdf("persons")):
            epnum = pa.array(np.arange(first, first + table.num_rows, dtype=np.int64))
            first += table.num_rows
            yield table.set_column(table.schema.get_field_index("EPNUM"), "EPNUM", epnum)


class MdfOutput(Output):
    """The microdata detail files: persons (EPNUM 1..N) and units with GQ facilities; Parquet, and the
    pipe-delimited text layout beside it when the spec asks."""

    name = "mdf"

    def patterns(self) -> tuple[str, ...]:
        return tuple(_HERE.relative(_HERE.mdf(k, layout)) for k in mdf_io.KINDS for layout in ("parquet", "pipe"))

    def checks(self, plan: OutputPlan) -> tuple[str, ...]:
        return ("mdf_codes", "units_mdf") if "units" in plan.mdf_kinds else ("mdf_codes",)

    def _write(self, kind: str, release: SolvedRelease, path: Path, plan: OutputPlan) -> Path:
        """One MDF built and written a block range at a time (das.io.mdf.mdf_slices): memory of a slice."""
        slices = mdf_io.mdf_slices(kind, release.schemas, release.geography.blocks, release.solved,
                                   gq_facilities=release.gq_facilities, housing_units=release.housing_units)
        return mdf_io.write_slices(slices, path, metadata=plan.metadata)

    def _pipe(self, run_dir: RunDir, kinds, plan: OutputPlan) -> list[Path]:
        if plan.mdf_layout != "pipe":
            return []
        return [mdf_io.pipe_copy(run_dir.mdf(kind), run_dir.mdf(kind, "pipe")) for kind in kinds]

    def write_part(self, part: RunDir, release: SolvedRelease, plan: OutputPlan) -> dict:
        rows = {}
        for kind in plan.mdf_kinds:
            path = self._write(kind, release, part.mdf(kind), plan)
            rows[kind] = pq.read_metadata(path).num_rows
        return {"rows": rows}

    def assemble(self, run_dir: RunDir, parts: list[Part], nation: NationRelease, plan: OutputPlan) -> list[Path]:
        kinds = plan.mdf_kinds
        sources = {"persons": lambda: _numbered(parts),
                   "units": lambda: (t for p in parts for t in mdf_io.row_groups(p.directory.mdf("units")))}

        def write(kind: str) -> Path:
            schema = pq.read_schema(parts[0].directory.mdf(kind)).remove_metadata()
            return mdf_io.write_batches(sources[kind](), schema, run_dir.mdf(kind), metadata=plan.metadata)

        return mdf_io.side_by_side(write, kinds) + self._pipe(run_dir, kinds, plan)


# ---------------------------------------------------------------------------------------------
# The tables


def level_groups(rows: Iterable[int], level: int) -> list[int]:
    """The row groups of a table part that hold its `level`-th level: each level starts a row group and
    fills groups of ROW_GROUP_ROWS rows (one, empty, if the level has no rows)."""
    groups = [max(1, -(-n // ROW_GROUP_ROWS)) for n in rows]
    first = sum(groups[:level])
    return list(range(first, first + groups[level]))


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


def nation_rows(schema: Schema, spec: TableSpec, nation_histogram):
    """The nation's row of a table (the columns of das.io.tables.compute_table) from its histogram
    (schema.size values, dense or a 1-row sparse matrix)."""
    histogram = sp.csr_matrix(nation_histogram).reshape(1, schema.size)
    return level_rows(schema, spec, NATION, np.array([""]), answers=table_answers(schema, spec, histogram))


class TablesOutput(Output):
    """Tables P1..P5, H1 (the spec's table set): one Parquet file each, a row per geounit of every level."""

    name = "tables"

    def patterns(self) -> tuple[str, ...]:
        return (_HERE.relative(_HERE.table("*")),)

    def checks(self, plan: OutputPlan) -> tuple[str, ...]:
        return ("tables_match_mdf",)

    def write_part(self, part: RunDir, release: SolvedRelease, plan: OutputPlan) -> dict:
        """Each table level by level below the nation, each level in row groups of at most ROW_GROUP_ROWS rows
        (so the driver reads a few MB at a time whatever the state); the rows per level."""
        by_schema = release.by_schema()
        part.tables_dir.mkdir(parents=True)
        rows = {}
        for spec in plan.tables:
            if spec.schema not in by_schema:
                continue
            schema, histograms = by_schema[spec.schema]
            groups = table_slices(schema, spec, release.geography, histograms, levels=plan.part_levels, rows=ROW_GROUP_ROWS)
            mdf_io.write_slices(groups, part.table(spec.name), metadata=plan.metadata, compression=TABLE_COMPRESSION,
                                whole=True)
            rows[spec.name] = [release.geography.n_units(level) for level in plan.part_levels]
        return {"rows": rows}

    def _level_slices(self, parts: list[Part], name: str) -> Iterator[pa.Table]:
        """A table's parts level by level, and within a level state by state, a row group at a time."""
        for level in range(len(parts[0].levels)):
            for part in parts:
                rows = part.records[self.name]["rows"]
                if name not in rows:
                    raise ValueError(f"state {part.state} has no part of table {name}")
                parquet = pq.ParquetFile(part.directory.table(name))
                for group in level_groups(rows[name], level):
                    yield parquet.read_row_group(group)

    def assemble(self, run_dir: RunDir, parts: list[Part], nation: NationRelease, plan: OutputPlan) -> list[Path]:
        """Each table: the nation rows, then level by level each state's rows, as `write` orders them."""
        by_schema = {nation.schemas[name].name: (nation.schemas[name], h) for name, h in nation.histograms.items()}

        def write(spec: TableSpec, directory: Path) -> Path:
            schema, histogram = by_schema[spec.schema]
            top = arrow_table(nation_rows(schema, spec, histogram))
            rows = _gathered(itertools.chain([top], self._level_slices(parts, spec.name)))
            return mdf_io.write_batches(rows, top.schema, directory / run_dir.table(spec.name).name,
                                        metadata=plan.metadata, compression=TABLE_COMPRESSION)

        with atomic.replacing(run_dir.tables_dir, directory=True) as tmp:
            written = mdf_io.side_by_side(lambda spec: write(spec, tmp), [s for s in plan.tables if s.schema in by_schema])
        return [run_dir.tables_dir / p.name for p in written]


# ---------------------------------------------------------------------------------------------
# The PL 94-171 summary files


class Pl94171Output(Output):
    """The 2020 PL 94-171 legacy summary files (four per state), when the spec asks for them."""

    name = "pl94171"

    def patterns(self) -> tuple[str, ...]:
        return (_HERE.relative(_HERE.pl94171_dir / "*.pl"),)

    def wanted(self, plan: OutputPlan) -> bool:
        return plan.pl94171

    def write_part(self, part: RunDir, release: SolvedRelease, plan: OutputPlan) -> dict:
        written = pl94171.write_release(part.pl94171_dir, release.geography, release.solved, release.schemas)
        return {"files": [p.name for p in written]}

    def assemble(self, run_dir: RunDir, parts: list[Part], nation: NationRelease, plan: OutputPlan) -> list[Path]:
        """Every state's files into one directory; file names are per state, checked not to collide."""
        missing = [p.state for p in parts if not p.records.get(self.name, {}).get("files")]
        if missing:
            raise ValueError(f"states {missing} have no PL 94-171 files in their parts")
        with atomic.replacing(run_dir.pl94171_dir, directory=True) as tmp:
            written = []
            for part in parts:
                for name in part.records[self.name]["files"]:
                    target = tmp / name
                    if target.exists():
                        raise ValueError(f"PL 94-171 file {name} of state {part.state} collides with another state's")
                    shutil.copyfile(part.directory.pl94171_dir / name, target)
                    written.append(target)
        return [run_dir.pl94171_dir / p.name for p in written]


# ---------------------------------------------------------------------------------------------
# The noisy measurement file


class NmfOutput(Output):
    """The noisy measurement file: written by the measurement itself (das.topdown.measure), straight into place
    (a partitioned run's states write their own files of the levels below the state); listed apart."""

    name = "nmf"
    manifest_field = "nmf"

    def patterns(self) -> tuple[str, ...]:
        return (_HERE.relative(_HERE.nmf_level("*", "*")), _HERE.relative(_HERE.nmf_level("*", "*", "*")))

    def checks(self, plan: OutputPlan) -> tuple[str, ...]:
        return ("nmf_matches_certificate",)

    def wanted(self, plan: OutputPlan) -> bool:
        return plan.nmf

    def write_part(self, part: RunDir, release: SolvedRelease, plan: OutputPlan) -> dict:
        return {}

    def assemble(self, run_dir: RunDir, parts: list[Part], nation: NationRelease, plan: OutputPlan) -> list[Path]:
        return run_dir.nmf_files()


# ---------------------------------------------------------------------------------------------
# The spine


def write_spine(run_dir: RunDir, spine: Geography | None, metadata: dict) -> Path:
    """The spine a release is measured on (not the standard one), as its spine.parquet."""
    if spine is None or spine.standard:
        raise ValueError("a release planned on a spine was made without one")
    table = pa.Table.from_pandas(spine_table(spine), preserve_index=False)
    return mdf_io.write_table(table, run_dir.spine, metadata=metadata)


def concatenate_parts(file_of: Callable[[RunDir], Path], run_dir: RunDir, part_dirs: list[RunDir],
                      metadata: dict) -> Path:
    """One Parquet file of a release from the states' parts of it (`file_of` a run directory: where the file is), their
    rows in the parts' order: the spine, the invariants per block."""
    tables = [pq.read_table(file_of(part)) for part in part_dirs]
    if not tables:
        raise ValueError(f"no state part holds {file_of(_HERE).name}")
    return mdf_io.write_table(pa.concat_tables(tables), file_of(run_dir), metadata=metadata)


def assemble_spine(run_dir: RunDir, part_dirs: list[RunDir], metadata: dict) -> Path:
    """The states' parts of the spine (each written by `write_spine`), in their order, as the release's spine.parquet."""
    return concatenate_parts(lambda d: d.spine, run_dir, part_dirs, metadata)


class ConcatenatedOutput(Output):
    """One Parquet file, written as a state's part of its rows, the parts concatenated in state order: its
    name, the validator's check that proves it, where it is in a run directory, which releases want it, its writer."""

    def __init__(self, name: str, *, check: str, file: Callable[[RunDir], Path], wanted_by: Callable[[OutputPlan], bool],
                 write_file: Callable[[RunDir, SolvedRelease, OutputPlan], Path]):
        self.name, self.check, self.file, self.wanted_by, self.write_file = name, check, file, wanted_by, write_file

    def patterns(self) -> tuple[str, ...]:
        return (_HERE.relative(self.file(_HERE)),)

    def checks(self, plan: OutputPlan) -> tuple[str, ...]:
        return (self.check,)

    def wanted(self, plan: OutputPlan) -> bool:
        return self.wanted_by(plan)

    def write_part(self, part: RunDir, release: SolvedRelease, plan: OutputPlan) -> dict:
        return {"rows": pq.read_metadata(self.write_file(part, release, plan)).num_rows}

    def assemble(self, run_dir: RunDir, parts: list[Part], nation: NationRelease, plan: OutputPlan) -> list[Path]:
        return [concatenate_parts(self.file, run_dir, [part.directory for part in parts], plan.metadata)]


def _invariants_of(run_dir: RunDir, release: SolvedRelease, plan: OutputPlan) -> Path:
    if release.housing_units is None or release.gq_facilities is None:
        raise ValueError("a TopDown release's outputs need its housing units and GQ facilities per block")
    return write_block_invariants(run_dir, release.geography.blocks, release.housing_units, release.gq_facilities,
                                  metadata=plan.metadata)


# The spine a release was measured and solved on, when not the standard one (das.model.spine): every block and its
# unit at the levels the spine re-forms, so the NMF's geounits of those levels can be read.
SPINE = ConcatenatedOutput("spine", check="spine", file=lambda d: d.spine, wanted_by=lambda plan: plan.spine,
                           write_file=lambda run_dir, release, plan: write_spine(run_dir, release.spine, plan.metadata))
# The invariants held exactly per block (das.io.invariants): housing units and GQ facilities by type (the units MDF
# lists them too), published so that anyone can post-process a TopDown release's NMF again from its public files.
BLOCK_INVARIANTS = ConcatenatedOutput("invariants", check="block_invariants", file=lambda d: d.block_invariants,
                                      wanted_by=lambda plan: plan.nmf, write_file=_invariants_of)


for _output in (MdfOutput(), TablesOutput(), NmfOutput(), Pl94171Output(), SPINE, BLOCK_INVARIANTS):
    register(_output)
