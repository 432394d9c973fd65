"""The release files of a partitioned run, written per state on the workers, assembled on the driver.

A worker writes one state's *parts* (`write_state_parts`): every wanted output of the registry
(das.io.outputs) writes its part of the state into a part directory laid out as a release. The
driver, which holds only the nation and the states, then builds the final files (`assemble`), each
output copying its parts row group by row group, so its memory follows one row group or one state's
level, never the country; the files are written side by side in threads (Arrow's reading and writing
run outside the GIL), so the assembly takes about its largest file's time where the driver has cores.
The final files have the names, columns and row orders a whole release's have (docs/outputs.md,
"Partitioned runs"), except that the units MDF is state-major.

    <part_dir>/...              each output's part (mdf_persons.parquet, tables/, pl94171/ ...)
    <part_dir>/parts.json       each output's record of its part (Part), written last
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from das.core import atomic
from das.frame.rundir import RunDir
from das.io import mdf as mdf_io
from das.io.outputs import NationRelease, OutputPlan, Part, SolvedRelease, wanted
from das.model.geography import Geography
from das.model.levels import STATE
from das.model.schema import Schema


def state_of(blocks: np.ndarray) -> str:
    """The one state of `blocks` (15-digit geocodes); ValueError if they span several or none."""
    states = np.unique(np.asarray(blocks, dtype="U15").astype("U2"))
    if len(states) != 1:
        raise ValueError(f"a state's parts need the blocks of one state; these are in {states.tolist() or 'none'}")
    return str(states[0])


def write_state_parts(part_dir: Path, schemas: dict[str, Schema], blocks: np.ndarray,
                      solved: dict[str, sp.csr_matrix], *, gq_facilities: np.ndarray, plan: OutputPlan,
                      spine: Geography | None = None, housing_units: np.ndarray | None = None) -> Part:
    """One state's parts from its solved block histograms (keyed by release, like `schemas`; `spine`: the
    state's spine, when not the standard one); the directory appears whole, with parts.json last, so a
    present parts.json means complete parts."""
    geography = Geography.from_blocks(blocks, plan.levels)
    if not np.array_equal(geography.blocks, np.asarray(blocks, dtype="U15")):
        raise ValueError("a state's blocks must be sorted (the rows of its histograms follow them)")
    state = state_of(blocks)
    release = SolvedRelease(geography, schemas, solved, gq_facilities, spine=spine, housing_units=housing_units)
    with atomic.replacing(Path(part_dir), directory=True) as tmp:
        part = RunDir(tmp)
        records = {output.name: output.write_part(part, release, plan) for output in wanted(plan)}
        atomic.write_text(part.parts_marker, json.dumps({STATE: state, "levels": list(plan.part_levels),
                                                         "records": records}, indent=2))
    return Part(state, RunDir(part_dir), plan.part_levels, records)


def read_state_parts(part_dir: Path) -> Part | None:
    """The parts of a complete part directory (one with parts.json), or None."""
    part = RunDir(part_dir)
    if not part.parts_marker.is_file():
        return None
    data = json.loads(part.parts_marker.read_text())
    return Part(data[STATE], part, tuple(data["levels"]), data["records"])


def _in_state_order(parts: list[Part]) -> list[Part]:
    states = [p.state for p in parts]
    if not parts or states != sorted(set(states)):
        raise ValueError(f"parts must be one per state, in state order: got {states}")
    levels = {p.levels for p in parts}
    if len(levels) != 1:
        raise ValueError(f"the states' parts hold different levels: {sorted(levels)}")
    return parts


def assemble(out: RunDir | Path, parts: list[Part], nation: NationRelease, plan: OutputPlan) -> dict[str, list[Path]]:
    """The release files of a partitioned run from the states' parts (in state order) and the nation's
    solved histograms: each file, and each output's directory, appears whole. By manifest field."""
    run_dir = out if isinstance(out, RunDir) else RunDir(out)
    parts = _in_state_order(parts)
    outputs = wanted(plan)
    files = mdf_io.side_by_side(lambda output: output.assemble(run_dir, parts, nation, plan), outputs)
    written: dict[str, list[Path]] = {}
    for output, paths in zip(outputs, files):
        written.setdefault(output.manifest_field, []).extend(paths)
    return written
