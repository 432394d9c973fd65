"""Per-state parts and their assembly (das/io/parts.py, each output of das/io/outputs.py): the assembled
release equals what the outputs write from the whole country's histograms, and what a hand-written
reference writes."""

import pickle
import time
import tracemalloc

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
import scipy.sparse as sp
from conftest import FIXTURES

from das.frame.rundir import RunDir
from das.io import mdf as mdf_io
from das.io import outputs, pl94171
from das.io import parts as parts_io
from das.io.microdata import read_inputs
from das.io.outputs import NationRelease, OutputPlan, SolvedRelease
from das.io.tables import compute_table, load_tables, write_tables
from das.model.geography import Geography
from das.model.schema import load_schema

SCHEMAS = {"persons": load_schema("pl94_persons"), "units": load_schema("h1_units")}
STATES = ("al_perry", "tiny", "vt_grand_isle")  # Alabama 01, Rhode Island 44, Vermont 50: real blocks, 3 states
LEVELS = ("nation", "state", "county", "tract", "block_group", "block")
METADATA = {b"das_test": b"parts"}


def _state(name):
    """One fixture read as a state's solved release: (blocks, histograms by release, GQ facilities)."""
    inputs = read_inputs(FIXTURES / name / "persons.parquet", FIXTURES / name / "units.parquet",
                         SCHEMAS["persons"], SCHEMAS["units"])
    return (inputs.inventory.blocks, {"persons": inputs.person_histograms, "units": inputs.unit_histograms},
            inputs.inventory.gq_facilities)


@pytest.fixture(scope="module")
def states():
    return [_state(name) for name in STATES]


def _country(states):
    """The states as one country: blocks, histograms, GQ facilities (states in FIPS order, so blocks stay sorted)."""
    blocks = np.concatenate([b for b, _, _ in states])
    solved = {kind: sp.vstack([h[kind] for _, h, _ in states]).tocsr() for kind in SCHEMAS}
    return blocks, solved, np.vstack([g for _, _, g in states])


def _write_directly(run_dir, states, plan):
    """A hand-written reference of a whole release's files, from the whole country's histograms."""
    blocks, solved, gq = _country(states)
    geography = Geography.from_blocks(blocks, plan.levels)
    for kind in mdf_io.KINDS:
        mdf_io.write_table(mdf_io.release_mdf(kind, SCHEMAS, blocks, solved, gq_facilities=gq), run_dir.mdf(kind),
                           metadata=plan.metadata)
        if plan.mdf_layout == "pipe":
            mdf_io.pipe_copy(run_dir.mdf(kind), run_dir.mdf(kind, "pipe"))
    write_tables(run_dir.tables_dir, geography, {s.name: solved[k] for k, s in SCHEMAS.items()},
                 {s.name: s for s in SCHEMAS.values()}, tables=plan.tables, metadata=plan.metadata)
    pl94171.write_release(run_dir.pl94171_dir, geography, solved, SCHEMAS)


def _housing_units(solved) -> np.ndarray:
    """Housing units per block (the invariant): the fixture's units histograms' row sums."""
    return np.asarray(solved["units"].sum(axis=1)).ravel()


def _parts(part_root, states, plan, schemas=SCHEMAS):
    return [parts_io.write_state_parts(part_root / f"state{i}", schemas, blocks, {k: solved[k] for k in schemas},
                                       gq_facilities=gq, plan=plan, housing_units=_housing_units(solved))
            for i, (blocks, solved, gq) in enumerate(states)]


def _nation(states, schemas=SCHEMAS) -> NationRelease:
    return NationRelease(schemas, {kind: sp.csr_matrix(sum(np.asarray(h[kind].sum(axis=0)) for _, h, _ in states))
                                   for kind in schemas})


def _assemble(run_dir, part_root, states, plan):
    written = parts_io.assemble(run_dir, _parts(part_root, states, plan), _nation(states), plan)
    return [p for files in written.values() for p in files]


def _plan(**settings) -> OutputPlan:
    return OutputPlan(load_tables("pl94"), METADATA, LEVELS, nmf=False, **settings)


def _decoded(path):
    """A Parquet file as one Arrow table of plain values (dictionaries differ by row group, values must not)."""
    return mdf_io.plain(pq.read_table(path)).combine_chunks()


@pytest.mark.parametrize("layout", ["parquet", "pipe"])
def test_assembled_release_equals_the_whole_country_outputs(tmp_path, states, layout):
    plan = _plan(pl94171=True, mdf_layout=layout)
    direct, registry, assembled = (RunDir(tmp_path / name) for name in ("direct", "registry", "assembled"))
    for d in (direct, registry, assembled):
        d.path.mkdir()
    _write_directly(direct, states, plan)
    blocks, solved, gq = _country(states)
    parts_io.write_release(registry, SolvedRelease(Geography.from_blocks(blocks, LEVELS), SCHEMAS, solved, gq), plan)
    written = _assemble(assembled, tmp_path / "parts", states, plan)
    # a release held in memory is written as its states' parts, assembled: the same files as the states' own parts
    for name in ("mdf_persons.parquet", "mdf_units.parquet", "tables/P1.parquet", "tables/H1.parquet"):
        assert (registry.path / name).read_bytes() == (assembled.path / name).read_bytes(), name
    assert sorted(registry.pl94171_dir.iterdir()) and all(
        p.read_bytes() == (direct.pl94171_dir / p.name).read_bytes() for p in registry.pl94171_dir.iterdir())
    assert not list(registry.checkpoints_dir.glob("states/*/parts"))  # the parts, once assembled, are gone

    for kind in mdf_io.KINDS:  # same rows in the same order (units too: both are block-major)
        assert _decoded(assembled.mdf(kind)).equals(_decoded(direct.mdf(kind))), kind
        assert pq.read_schema(assembled.mdf(kind)).equals(pq.read_schema(direct.mdf(kind)), check_metadata=True)
        if layout == "pipe":
            assert assembled.mdf(kind, "pipe").read_bytes() == direct.mdf(kind, "pipe").read_bytes(), kind
    assert _decoded(assembled.mdf("persons"))["EPNUM"].to_numpy().tolist() == list(
        range(1, pq.read_metadata(assembled.mdf("persons")).num_rows + 1))
    names = sorted(p.name for p in direct.tables_dir.iterdir())
    assert sorted(p.name for p in assembled.tables_dir.iterdir()) == names
    for name in names:
        got, want = pq.read_table(assembled.tables_dir / name), pq.read_table(direct.tables_dir / name)
        assert got.equals(want), name
        assert got.schema.metadata == want.schema.metadata, name
    pl_names = sorted(p.name for p in direct.pl94171_dir.iterdir())
    assert sorted(p.name for p in assembled.pl94171_dir.iterdir()) == pl_names and len(pl_names) == 4 * len(STATES)
    for name in pl_names:
        assert (assembled.pl94171_dir / name).read_bytes() == (direct.pl94171_dir / name).read_bytes(), name
    assert all(p.exists() for p in written) and not list(assembled.path.glob("*.partial"))


@pytest.mark.parametrize("group_rows", [outputs.ROW_GROUP_ROWS, 7])
def test_a_states_table_parts_hold_each_level_in_its_own_row_groups(tmp_path, states, monkeypatch, group_rows):
    """Each level below the nation starts a row group and fills groups of at most ROW_GROUP_ROWS rows
    (forced small here, so the block level spans many): the driver reads a bounded slice at a time."""
    monkeypatch.setattr(outputs, "ROW_GROUP_ROWS", group_rows)
    plan = _plan()
    blocks, solved, gq = states[0]
    parts = parts_io.write_state_parts(tmp_path / "01", SCHEMAS, blocks, solved, gq_facilities=gq, plan=plan)
    geography = Geography.from_blocks(blocks, LEVELS)
    assert parts.state == "01" and parts.levels == LEVELS[1:] and "pl94171" not in parts.records
    assert parts.records["mdf"]["rows"] == {"persons": int(solved["persons"].sum()),
                                            "units": pq.read_metadata(parts.directory.mdf("units")).num_rows}
    for name, rows in parts.records["tables"]["rows"].items():
        file = pq.ParquetFile(parts.directory.table(name))
        assert rows == [geography.n_units(lv) for lv in LEVELS[1:]]
        for i, level in enumerate(LEVELS[1:]):
            groups = outputs.level_groups(rows, i)
            assert len(groups) == -(-rows[i] // group_rows)
            read = [file.read_row_group(g) for g in groups]
            assert all(t.num_rows <= group_rows for t in read)
            assert sum(t.num_rows for t in read) == rows[i]
            assert {v for t in read for v in t["level"].to_pylist()} == {level}
        assert file.num_row_groups == sum(len(outputs.level_groups(rows, i)) for i in range(len(rows)))
    assert pickle.loads(pickle.dumps(parts)) == parts
    assert len(pickle.dumps(parts)) < 2000  # small enough to send to the driver


def test_a_part_directory_is_complete_only_with_its_marker(tmp_path, states):
    plan = _plan(pl94171=True)
    blocks, solved, gq = states[1]
    assert parts_io.read_state_parts(tmp_path / "44") is None
    written = parts_io.write_state_parts(tmp_path / "44", SCHEMAS, blocks, solved, gq_facilities=gq, plan=plan)
    assert parts_io.read_state_parts(tmp_path / "44") == written
    files = written.records["pl94171"]["files"]
    assert files and all((tmp_path / "44" / "pl94171" / n).is_file() for n in files)
    RunDir(tmp_path / "44").parts_marker.unlink()
    assert parts_io.read_state_parts(tmp_path / "44") is None


def test_a_state_part_refuses_blocks_of_two_states(tmp_path, states):
    blocks, solved, gq = _country(states[:2])
    with pytest.raises(ValueError, match="one state"):
        parts_io.write_state_parts(tmp_path / "x", SCHEMAS, blocks, solved, gq_facilities=gq, plan=_plan())
    assert not (tmp_path / "x").exists()


def test_assembly_refuses_parts_out_of_state_order(tmp_path, states):
    parts = _parts(tmp_path, states[:2], _plan())
    with pytest.raises(ValueError, match="state order"):
        parts_io.assemble(tmp_path / "out", parts[::-1], _nation(states[:2]), _plan())


def test_nation_rows_are_the_nation_level_of_compute_table(states):
    blocks, solved, _ = _country(states)
    geography = Geography.from_blocks(blocks, LEVELS)
    for spec in load_tables("pl94"):
        kind = next(k for k, s in SCHEMAS.items() if s.name == spec.schema)
        whole = compute_table(SCHEMAS[kind], spec, geography, solved[kind])
        nation = outputs.nation_rows(SCHEMAS[kind], spec, np.asarray(solved[kind].sum(axis=0)).ravel())
        pd.testing.assert_frame_equal(nation, whole[whole["level"] == "nation"].reset_index(drop=True))


def _restated(state, code):
    blocks, solved, gq = state
    return np.array([code + b[2:] for b in blocks]), solved, gq


def _assembly_peak(tmp_path, states, plan) -> int:
    """Peak memory traced by tracemalloc (Python and numpy; Arrow's own pool is not traced) while
    assembling already written parts."""
    parts = _parts(tmp_path, states, plan)
    top = NationRelease(SCHEMAS, {k: sp.csr_matrix((1, s.size), dtype=np.int64) for k, s in SCHEMAS.items()})
    (tmp_path / "out").mkdir()
    tracemalloc.start()
    parts_io.assemble(tmp_path / "out", parts, top, plan)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak


def test_assembly_memory_does_not_follow_the_number_of_states(tmp_path, states):
    plan = _plan()
    copies = [_restated(states[0], f"{10 + i:02d}") for i in range(6)]  # Perry County as states 10..15
    few, many = _assembly_peak(tmp_path / "few", copies[:2], plan), _assembly_peak(tmp_path / "many", copies, plan)
    assert many < 1.5 * few, (few, many)


def test_the_units_mdf_without_a_units_release_lists_the_invariants(tmp_path, states):
    """A persons-only release's units MDF: every housing unit (HH_STATUS 0: occupancy not released) and GQ
    facility of the invariants, block-major, the same assembled from the states as written whole."""
    plan = _plan()
    persons_only = {"persons": SCHEMAS["persons"]}
    parts = _parts(tmp_path, states, plan, persons_only)
    out = RunDir(tmp_path / "out")
    out.path.mkdir()
    parts_io.assemble(out, parts, _nation(states, persons_only), plan)
    blocks, solved, gq = _country(states)
    want = mdf_io.plain(mdf_io.unit_mdf(SCHEMAS["units"], blocks, None, gq, housing_units=_housing_units(solved)))
    assert _decoded(out.mdf("units")).equals(want)
    units = _decoded(out.mdf("units")).to_pandas()
    housing = units[units.RTYPE == 2]
    assert len(housing) == solved["units"].sum() and (housing.HH_STATUS == 0).all()  # no occupancy released
    assert (units.RTYPE == 4).sum() == gq.sum()
    with_units = mdf_io.plain(mdf_io.unit_mdf(SCHEMAS["units"], blocks, solved["units"], gq)).to_pandas()
    geography = ["TABBLKST", "TABBLKCOU", "TABTRACTCE", "TABBLKGRPCE", "TABBLK", "RTYPE", "GQTYPE_PL"]
    assert units[geography].equals(with_units[geography])  # the same records as with units, occupancy aside
    assert "H1.parquet" not in {p.name for p in out.tables_dir.iterdir()}
    with pytest.raises(ValueError, match="housing_units"):  # never the facilities alone
        mdf_io.unit_mdf(SCHEMAS["units"], blocks, None, gq)


def test_streamed_pipe_layout_equals_the_whole_table_written_at_once(tmp_path, states):
    blocks, solved, _ = states[0]
    table = mdf_io.person_mdf(SCHEMAS["persons"], blocks, solved["persons"])
    pq.write_table(table, tmp_path / "p.parquet", row_group_size=1000)  # several row groups
    whole = mdf_io.write_table(table, tmp_path / "whole.txt", layout="pipe")
    streamed = mdf_io.pipe_copy(tmp_path / "p.parquet", tmp_path / "streamed.txt")
    assert streamed.read_bytes() == whole.read_bytes()


def test_files_written_side_by_side_come_back_in_order_and_an_error_waits_for_the_others():
    finished = []

    def write(i: int) -> int:
        if i == 1:
            raise ValueError("file 1 failed")
        time.sleep(0.2 if i == 0 else 0.0)
        finished.append(i)
        return i

    with pytest.raises(ValueError, match="file 1 failed"):
        mdf_io.side_by_side(write, range(4))
    assert sorted(finished) == [0, 2, 3]  # the slow one ended before the error was raised
    assert mdf_io.side_by_side(lambda i: i * i, range(5)) == [0, 1, 4, 9, 16]
