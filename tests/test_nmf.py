"""The NMF files: range reads of a level equal the whole level's, in row groups of any size."""

import numpy as np
import pyarrow.parquet as pq
import pytest

import das.measure
from das.io import nmf
from das.measure import Measured, Measurement, Target, measure_level
from das.privacy.randomness import SeededRandomSource


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
