"""The NMF files: range reads of a level equal the whole level's, in row groups of any size; noisy answers
(das.io.nmf.NoisyAnswers) slice by geounit and cell and keep their exact variance through the file."""

from fractions import Fraction

import numpy as np
import pyarrow.parquet as pq
import pytest

import das.topdown.measure
from das.frame.rundir import nmf_level_path
from das.io import nmf
from das.privacy.accounting import Allocation
from das.privacy.certificate import Measurement
from das.privacy.randomness import SeededRandomSource
from das.topdown.measure import Measured, Target, measure_level


def test_level_reader_ranges_equal_whole_level_reads(perry, tmp_path, monkeypatch):
    """Small chunks and row groups, so ranges start and end inside row groups and span several."""
    schema, geography, _, histograms = perry
    monkeypatch.setattr(das.topdown.measure, "CHUNK_CELLS", 5000)
    monkeypatch.setattr(das.topdown.measure, "CHUNK_UNITS", 150)  # caps the narrow queries' chunks too
    measurements = tuple(Measurement.allocated("block", q, Fraction(1, 3), Fraction(1, v)) for q, v in
                         (("total", 3), ("detailed", 7), ("votingage x hispanic", 5)))
    what = Measured("persons", schema, Allocation(sum(m.rho for m in measurements), measurements))
    path = measure_level(what, "block", histograms, geography.units("block"), rng=SeededRandomSource(1),
                         target=Target(tmp_path))
    assert pq.ParquetFile(path).num_row_groups > 20
    assert not das.topdown.measure.parts_dir(path).exists()
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
    path = nmf_level_path(tmp_path, "persons", "tract")
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


def _answers(n_units=5, n_cells=4, variance=Fraction(10**12 + 39, 7), seed=0) -> nmf.NoisyAnswers:
    rng = np.random.default_rng(seed)
    geocodes = np.array([f"44{i:03d}" for i in range(n_units)])
    return nmf.NoisyAnswers("cenrace", "county", geocodes, rng.integers(-500, 500, (n_units, n_cells)), variance)


def test_noisy_answers_slice_by_geounit_and_cell_and_keep_what_they_are():
    a = _answers()
    part = a.rows(1, 4)
    assert part.geocodes.tolist() == ["44001", "44002", "44003"] and np.array_equal(part.answers, a.answers[1:4])
    picked = a.take(np.array([True, False, False, True, True]))
    assert picked.geocodes.tolist() == ["44000", "44003", "44004"] and np.array_equal(picked.answers, a.answers[[0, 3, 4]])
    keep = np.array([False, True, True, False])
    assert np.array_equal(a.cells(keep).answers, a.answers[:, 1:3]) and a.cells(keep).geocodes is a.geocodes
    for b in (part, picked, a.cells(keep)):
        assert (b.query, b.level, b.variance) == (a.query, a.level, a.variance) and isinstance(b.variance, Fraction)
    again = nmf.NoisyAnswers.stacked([a.rows(0, 2), a.rows(2, 5)])
    assert again.geocodes.tolist() == a.geocodes.tolist() and np.array_equal(again.answers, a.answers)
    with pytest.raises(ValueError, match="cannot be stacked"):
        nmf.NoisyAnswers.stacked([a, nmf.NoisyAnswers(a.query, a.level, a.geocodes, a.answers, Fraction(1))])
    assert a.weight == 1.0 / float(a.variance)


def test_trials_are_leading_axes_that_slicing_leaves_alone():
    """The privacy audit holds many draws of each answer: (trials x n_units x n_cells)."""
    a = _answers()
    draws = nmf.NoisyAnswers(a.query, a.level, a.geocodes, np.stack([a.answers, -a.answers]), a.variance)
    assert draws.rows(2, 4).answers.shape == (2, 2, 4) and np.array_equal(draws.rows(2, 4).answers[1], -a.answers[2:4])
    assert draws.cells(np.array([0, 3])).answers.shape == (2, 5, 2)


@pytest.mark.parametrize("variance", [Fraction(1, 3), Fraction(10**12 + 39, 7), Fraction(2**62, 2**61 - 1), Fraction(5)])
def test_exact_variance_round_trips_through_the_nmf_file(tmp_path, variance):
    written = _answers(n_units=7, n_cells=3, variance=variance, seed=int(variance.denominator % 97))
    path = nmf_level_path(tmp_path, "persons", "county")
    writer = nmf.LevelWriter(path)
    writer.write_answers(written)
    writer.close()
    whole, ranged = nmf.read_level(path, written.geocodes), nmf.LevelReader(path, written.geocodes).read(0, 7)
    for back in (whole["cenrace"], ranged["cenrace"]):
        assert back.variance == variance and isinstance(back.variance, Fraction)
        assert (back.query, back.level) == ("cenrace", "county")
        assert back.geocodes.tolist() == written.geocodes.tolist() and np.array_equal(back.answers, written.answers)
    part = nmf.LevelReader(path, written.geocodes).read(2, 5)["cenrace"]
    assert np.array_equal(part.answers, written.rows(2, 5).answers) and part.variance == variance


def test_a_variance_too_large_for_the_file_is_refused(tmp_path):
    writer = nmf.LevelWriter(nmf_level_path(tmp_path, "persons", "county"))
    with pytest.raises(OverflowError, match="does not fit"):
        writer.write_answers(_answers(variance=Fraction(2**64, 3)))
    writer.abort()
