"""The NMF files: range reads of a level equal the whole level's, in row groups of any size; noisy answers
(das.io.nmf.NoisyAnswers) slice by geounit and cell and keep their exact variance through the file."""

from fractions import Fraction

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
    path = measure_level(what, "block", histograms, geography.units("block"), rng=SeededRandomSource(1),
                         target=Target(tmp_path))
    assert pq.ParquetFile(path).num_row_groups > 20
    assert not das.measure.parts_dir(path).exists()
    whole = nmf.read_level(path, geography.units("block"))
    reader = nmf.LevelReader(path, geography.units("block"))
    for lo, hi in ((0, 511), (0, 1), (2, 3), (1, 400), (250, 511), (510, 511)):
        part = reader.read(lo, hi)
        assert part.keys() == whole.keys()
        for q in whole:
            assert np.array_equal(part[q].answers, whole[q].answers[lo:hi]) and part[q].variance == whole[q].variance
            assert part[q].geocodes.tolist() == whole[q].rows(lo, hi).geocodes.tolist() and part[q].level == "block"
    with pytest.raises(ValueError, match="whole number per geounit"):
        nmf.LevelReader(path, geography.units("block")[:-1])


@pytest.mark.parametrize("low, high", [(-5, 100), (-300, 2000), (-70000, 5), (-(2**62), 2**62), (0, 0)])
def test_parts_read_back_exactly_whatever_type_they_are_stored_in(tmp_path, low, high):
    rng = np.random.default_rng(3)
    noisy = rng.integers(low, high, size=(40, 7), endpoint=True, dtype=np.int64)
    noisy[0, 0], noisy[-1, -1] = low, high  # the extremes decide the stored type
    path = tmp_path / "q000-c0000000.nmfpart"
    nmf.write_part(path, noisy)
    back = nmf.read_part(path)
    assert back.dtype == np.int64 and np.array_equal(back, noisy)
    nmf.write_part(path, noisy[:0])
    assert nmf.read_part(path).shape == (0, 7)


def test_a_part_committed_before_parts_were_narrowed_still_reads(tmp_path):
    """The first format (int64 shape, then the zstd int64 answers): a run interrupted under it resumes."""
    import pyarrow as pa

    noisy = np.arange(-6, 6, dtype=np.int64).reshape(3, 4)
    path = tmp_path / "old.nmfpart"
    path.write_bytes(np.asarray(noisy.shape, dtype=np.int64).tobytes()
                     + pa.Codec("zstd", compression_level=1).compress(noisy.tobytes(), asbytes=True))
    assert np.array_equal(nmf.read_part(path), noisy)


def test_row_groups_hold_whole_geounits_of_one_query_and_their_own_geocodes(tmp_path, monkeypatch):
    monkeypatch.setattr(nmf, "ROW_GROUP_ROWS", 20)
    geocodes = np.array([f"5000{i:02d}" for i in range(11)])
    rng = np.random.default_rng(5)
    written = {"total": rng.integers(-9, 9, (11, 1)), "cenrace": rng.integers(-9, 9, (11, 7)),
               "wide": rng.integers(-9, 9, (11, 30))}  # a geounit wider than a row group is one by itself
    path = nmf.level_path(tmp_path, "persons", "tract")
    writer = nmf.LevelWriter(path, {b"das.privacy": b"private"})
    for query, noisy in written.items():
        writer.write_answers(nmf.NoisyAnswers(query, "tract", geocodes, noisy, Fraction(7, 3)))
    writer.close()
    parquet = pq.ParquetFile(path)
    assert parquet.schema_arrow.metadata[b"das.privacy"] == b"private"
    units_seen = {q: [] for q in written}
    for g in range(parquet.num_row_groups):
        group = parquet.read_row_group(g)
        (query,) = set(group["query"].to_pylist())
        width = written[query].shape[1]
        assert group.num_rows % width == 0 and (group.num_rows <= 20 or group.num_rows == width)
        geocode = group["geocode"].combine_chunks()
        assert len(geocode.dictionary) == group.num_rows // width  # just this group's geounits
        units_seen[query] += geocode.dictionary.to_pylist()
        stats = parquet.metadata.row_group(g)
        assert stats.column(2).statistics.min == query and stats.column(4).statistics is None
    assert all(seen == geocodes.tolist() for seen in units_seen.values())
    back = nmf.read_level(path, geocodes)
    assert all(np.array_equal(back[q].answers, written[q]) and back[q].variance == Fraction(7, 3) for q in written)
    reader = nmf.LevelReader(path, geocodes)
    for lo, hi in ((0, 11), (3, 4), (2, 9), (10, 11)):
        assert all(np.array_equal(reader.read(lo, hi)[q].answers, written[q][lo:hi]) for q in written)

