"""Streaming pieces of the engine: range reads of the NMF, range bounds, batches, synthetic multi-state inputs."""

import numpy as np
import pyarrow.parquet as pq
import pytest

import das.measure
from das.geography import Geography
from das.io import nmf
from das.io.microdata import read_inputs
from das.measure import Measured, Measurement, Target, measure_level
from das.privacy.randomness import SeededRandomSource
from das.rules import INVARIANT_LEVELS, Invariants, block_bounds, level_bounds
from das.schema import load_schema
from das.synth import write_synthetic
from das.topdown.engine import EngineOptions, parent_batches, postprocess


@pytest.fixture(scope="module")
def perry():
    schema = load_schema("pl94_persons")
    inputs = read_inputs("geography_fixtures/al_perry/persons.parquet", "geography_fixtures/al_perry/units.parquet",
                         schema)
    geography = Geography.from_blocks(inputs.inventory.blocks)
    invariants = Invariants(
        inputs.inventory.housing_units, inputs.inventory.gq_facilities,
        {lv: np.asarray(geography.aggregate(inputs.person_histograms, lv).sum(axis=1)).ravel()
         for lv in INVARIANT_LEVELS},
    )
    return schema, geography, invariants, inputs.person_histograms


def test_range_bounds_equal_whole_level_sums_on_any_range(perry, monkeypatch):
    """Bounds of a range of geounits, summed slice by slice, equal the block bounds aggregated whole."""
    schema, geography, invariants, _ = perry
    monkeypatch.setattr("das.rules.BLOCK_SLICE", 37)  # ranges cross block slices
    rng = np.random.default_rng(0)
    families = block_bounds(schema, invariants)
    for level in geography.levels:
        full = [(f.query, np.asarray(geography.aggregate(f.lower, level)), np.asarray(geography.aggregate(f.upper, level)))
                for f in families]
        if level in invariants.total_population:
            total = invariants.total_population[level][:, None]
            full.append(("total", total, total.astype(float)))
        n = geography.n_units(level)
        for lo, hi in [(0, n), *((int(a), int(b) + 1) for a, b in np.sort(rng.integers(0, n, (3, 2)), axis=1))]:
            part = level_bounds(schema, invariants, geography, level, lo, hi)
            assert [b.query for b in part] == [q for q, _, _ in full]
            for p, (_, lower, upper) in zip(part, full):
                assert np.array_equal(p.lower, lower[lo:hi]) and np.array_equal(p.upper, upper[lo:hi])


def test_level_reader_ranges_equal_whole_level_reads(perry, tmp_path, monkeypatch):
    """Small chunks and row groups, so ranges start and end inside row groups and span several."""
    schema, geography, _, histograms = perry
    monkeypatch.setattr(das.measure, "CHUNK_CELLS", 5000)
    monkeypatch.setattr(das.measure, "CHUNK_UNITS", 150)  # caps the narrow queries' chunks too
    measurements = [Measurement("block", q, v) for q, v in
                    (("total", 3), ("detailed", 7), ("votingage x hispanic", 5))]
    what = Measured("persons", schema, {"block": measurements})
    path = measure_level(what, "block", histograms, geography.units("block"), SeededRandomSource(1), Target(tmp_path))
    assert pq.ParquetFile(path).num_row_groups > 20
    assert not das.measure.parts_dir(path).exists()
    whole = nmf.read_level(path, geography.units("block"))
    reader = nmf.LevelReader(path, geography.units("block"))
    for lo, hi in ((0, 511), (0, 1), (2, 3), (1, 400), (250, 511), (510, 511)):
        part = reader.read(lo, hi)
        assert part.keys() == whole.keys()
        for q in whole:
            assert np.array_equal(part[q][0], whole[q][0][lo:hi]) and part[q][1] == whole[q][1]
    with pytest.raises(ValueError, match="whole number per geounit"):
        nmf.LevelReader(path, geography.units("block")[:-1])


def test_parent_batches_hold_whole_parents():
    offsets = np.array([0, 3, 4, 10, 11, 12, 20])
    assert parent_batches(offsets, 4).tolist() == [0, 2, 3, 5, 6]  # a parent bigger than a batch stands alone
    assert parent_batches(offsets, 100).tolist() == [0, 6]
    assert parent_batches(np.array([0]), 4).tolist() == [0]


def test_batch_size_does_not_change_the_solution(perry, tmp_path):
    schema, geography, invariants, histograms = perry
    from das.privacy.accounting import allocate
    from das.privacy.strategy import load_strategy

    allocation = allocate(load_strategy("pl94_five_level"), load_strategy("pl94_five_level").rho)
    plan = {lv: [] for lv in geography.levels}
    for item in allocation.items:
        plan[item.level].append(Measurement(item.level, item.query, item.sigma2))
    das.measure.measure_release(Measured("persons", schema, plan), geography, histograms, SeededRandomSource(3),
                                Target(tmp_path))
    solved = [postprocess("persons", schema, geography, invariants, tmp_path,
                          EngineOptions(progress=False, batch_children=size))[0] for size in (2048, 7)]
    assert (solved[0] != solved[1]).nnz == 0


def test_synthetic_states_replicate_the_fixtures_under_new_codes(tmp_path):
    counts = write_synthetic(tmp_path, 2)
    assert counts == {"states": 2, "persons": 625_741 + 897_934, "unit_rows": 322_723 + 397_963,
                      "blocks": 18_660 + 17_931}
    persons = pq.read_table(tmp_path / "persons.parquet", columns=["TABBLKST", "EPNUM"])
    assert sorted(set(persons["TABBLKST"].to_pylist())) == ["01", "02"]
    assert np.array_equal(persons["EPNUM"].to_numpy(), np.arange(1, counts["persons"] + 1))
    assert (tmp_path / "spec.toml").read_text().count("synthetic_2") == 1
