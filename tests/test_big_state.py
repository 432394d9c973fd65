"""scripts/make_big_state: real tracts replicated and re-coded under one state, GQ kept in a chosen share of tracts,
the same files for the same arguments, inputs das reads as one partitioned state."""

import importlib.util
import sys
from importlib.machinery import SourceFileLoader
from pathlib import Path

import numpy as np
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from conftest import ROOT

from das.io.microdata import read_inputs
from das.model.schema import load_schema

_loader = SourceFileLoader("make_big_state", str(ROOT / "scripts" / "make_big_state"))
make_big_state = importlib.util.module_from_spec(importlib.util.spec_from_loader("make_big_state", _loader))
sys.modules["make_big_state"] = make_big_state  # its dataclasses look their module up
_loader.exec_module(make_big_state)
ARGS = ["--big", "12,5", "--small", "", "--tracts-from", "vt:007", "--gq-share", "0.25", "--state", "44"]


def _write(out: Path) -> dict:
    assert make_big_state.main([str(out), *ARGS]) == 0
    return make_big_state.json.loads((out / "summary.json").read_text())


def test_tracts_are_real_tracts_replicated_under_one_state(tmp_path):
    summary = _write(tmp_path / "a")
    persons = pq.read_table(tmp_path / "a" / "persons" / "persons_44.parquet")
    units = pq.read_table(tmp_path / "a" / "units" / "units_44.parquet")
    assert pc.unique(persons["TABBLKST"].cast("string")).to_pylist() == ["44"]
    tracts = {(c, t) for c, t in zip(persons["TABBLKCOU"].cast("string").to_pylist(),
                                     persons["TABTRACTCE"].cast("string").to_pylist())}
    assert summary["largest_counties_tracts"] == [12, 5] and summary["tracts"] == 17
    assert {c for c, _ in tracts} == {"001", "003"}
    assert persons["EPNUM"].to_pylist() == list(range(1, persons.num_rows + 1))
    # a copy holds its source tract's blocks and persons: Chittenden (VT 007) tracts, GQ left out where not kept
    source = pq.read_table(ROOT / "geography_fixtures" / "vt" / "persons.parquet").to_pandas()
    chittenden = source[source["TABBLKCOU"].astype(str) == "007"]
    sizes = chittenden.groupby("TABTRACTCE", observed=True).size()
    household = chittenden[chittenden["RTYPE"] != 5].groupby("TABTRACTCE", observed=True).size()
    mine = persons.to_pandas().groupby(["TABBLKCOU", "TABTRACTCE"], observed=True).size()
    assert all(n in set(sizes) | set(household) for n in mine)
    with_gq = persons.to_pandas().groupby(["TABBLKCOU", "TABTRACTCE"], observed=True)["RTYPE"].apply(lambda r: (r == 5).any())
    assert with_gq.mean() == pytest.approx(summary["tracts_with_gq_share"], abs=1e-4) and 0 < with_gq.mean() < 0.6
    # every GQ resident's block keeps its facility; das reads the files as valid inputs
    schemas = load_schema("pl94_persons"), load_schema("h1_units")
    inputs = read_inputs(tmp_path / "a" / "persons" / "persons_44.parquet", tmp_path / "a" / "units" / "units_44.parquet",
                         *schemas)
    assert int(inputs.person_histograms.sum()) == persons.num_rows == summary["persons"]
    assert units.num_rows == summary["unit_rows"]
    assert 'levels = ["nation", "state", "county", "tract", "block_group", "block"]' in (tmp_path / "a" / "spec.toml").read_text()


def test_the_same_arguments_write_the_same_files(tmp_path):
    _write(tmp_path / "a")
    _write(tmp_path / "b")
    for kind in ("persons", "units"):
        a = pq.read_table(tmp_path / "a" / kind / f"{kind}_44.parquet")
        b = pq.read_table(tmp_path / "b" / kind / f"{kind}_44.parquet")
        assert a.equals(b)
    assert np.array_equal(*(np.frombuffer((tmp_path / d / "summary.json").read_bytes(), np.uint8) for d in "ab"))
