"""The release files of every release, written per state and assembled: a partitioned run's states' parts on
the workers, a release held in memory (a whole run, das synth, das postprocess) cut into its states here
(`write_release`), the same protocol either way.

A worker writes one state's *parts* (`write_state_parts`): every wanted output of the registry
(das.io.outputs) writes its part of the state into a part directory laid out as a release. The
driver, which holds only the nation and the states, then builds the final files (`assemble`), each
output copying its parts row group by row group, so its memory follows one row group or one state's
level, never the country; the files are written side by side in threads (Arrow's reading and writing
run outside the GIL), so the assembly takes about its largest file's time where the driver has cores.
The files have the same names, columns, row orders and contents whatever the run's shape (docs/outputs.md,
"How the release files are assembled from per-state parts"); the units MDF is state-major, as block-major is.

    <part_dir>/...              each output's part (mdf_persons.parquet, tables/, pl94171/ ...)
    <part_dir>/parts.json       each output's record of its part (Part), written last
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
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


def assemble(out: RunDir | Path, parts: list[Part], nation: NationRelease, plan: OutputPlan, *,
             after: Callable[[str], None] | None = None) -> dict[str, list[Path]]:
    """The release files from the states' parts (in state order) and the nation's solved histograms: each file,
    and each output's directory, appears whole. By manifest field. The outputs are assembled side by side, or
    with `after` one after another, `after` called with each output's name once its files are in place (a
    release stopped there holds whole outputs and no others: das.frame.checkpoint.crash_point's `outputs`)."""
    run_dir = out if isinstance(out, RunDir) else RunDir(out)
    parts = _in_state_order(parts)
    outputs = wanted(plan)
    if after is None:
        files = mdf_io.side_by_side(lambda output: output.assemble(run_dir, parts, nation, plan), outputs)
    else:
        files = []
        for output in outputs:
            files.append(output.assemble(run_dir, parts, nation, plan))
            after(output.name)
    written: dict[str, list[Path]] = {}
    for output, paths in zip(outputs, files):
        written.setdefault(output.manifest_field, []).extend(paths)
    return written


def _state_spine(spine: Geography, state: str) -> Geography:
    """A state's share of a release's spine (its blocks in the spine's order, their units where re-formed)."""
    mask = np.char.startswith(spine.blocks.astype("U15"), state)
    return Geography(spine.blocks[mask], spine.levels, {lv: codes[mask] for lv, codes in spine.spine.items()})


def _states(release: SolvedRelease) -> list[tuple[str, slice]]:
    """Each state of a release and the range of its blocks (blocks in geocode order: a state's are contiguous)."""
    codes = np.asarray(release.geography.blocks, dtype="U15").astype("U2")
    starts = np.flatnonzero(np.r_[True, codes[1:] != codes[:-1]])
    ends = np.r_[starts[1:], len(codes)]
    return [(str(codes[a]), slice(int(a), int(b))) for a, b in zip(starts, ends)]


def write_release(run_dir: RunDir, release: SolvedRelease, plan: OutputPlan, *,
                  after: Callable[[str], None] | None = None) -> dict[str, list[Path]]:
    """Every wanted output of a release held in memory, by manifest field ("outputs", "nmf"): its states' parts
    written into the run's operator area (`RunDir.state_parts`, removed once assembled), then assembled as a
    partitioned run's are (`after`: as `assemble`'s)."""
    parts, nation = [], {}
    for state, rows in _states(release):
        cut = None if release.spine is None else _state_spine(release.spine, state)
        parts.append(write_state_parts(
            run_dir.state_parts(state).path, release.schemas, release.geography.blocks[rows],
            {name: h[rows] for name, h in release.solved.items()}, plan=plan, spine=cut,
            gq_facilities=None if release.gq_facilities is None else release.gq_facilities[rows],
            housing_units=None if release.housing_units is None else release.housing_units[rows]))
    for name, h in release.solved.items():
        nation[name] = sp.csr_matrix(h.sum(axis=0))
    written = assemble(run_dir, parts, NationRelease(release.schemas, nation), plan, after=after)
    for part in parts:  # its files are in the release now
        shutil.rmtree(part.directory.path, ignore_errors=True)
    return written
