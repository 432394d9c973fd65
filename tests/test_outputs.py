"""MDF, tables and NMF writers: round trips and consistency."""

from fractions import Fraction

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
import scipy.sparse as sp

from das.frame.rundir import nmf_level_path
from das.io import mdf as mdf_io
from das.io import nmf
from das.io.tables import column_names, compute_table, load_tables
from das.model.geography import Geography
from das.model.schema import load_schema

BLOCKS = np.array(["440010001001000", "440010001001001", "440030002002000", "440030002003000"])
PL94 = load_schema("pl94_persons")
H1 = load_schema("h1_units")


def random_histograms(schema, n_blocks, seed=0, density=0.02):
    rng = np.random.default_rng(seed)
    dense = rng.integers(0, 4, size=(n_blocks, schema.size)) * (rng.random((n_blocks, schema.size)) < density)
    return sp.csr_matrix(dense.astype(np.int64))


def histograms_from_mdf(table, schema, blocks):
    frame = table.to_pandas()
    geocode = (frame["TABBLKST"].astype(str) + frame["TABBLKCOU"].astype(str)
               + frame["TABTRACTCE"].astype(str) + frame["TABBLK"].astype(str)).to_numpy()
    block_index = np.searchsorted(blocks, geocode)
    levels = [np.array([a.codes.index(v) for v in frame[a.column].astype(type(a.codes[0]))]) for a in schema.attributes]
    cells = schema.cell_index(levels)
    return sp.csr_matrix((np.ones(len(cells), dtype=np.int64), (block_index, cells)),
                         shape=(len(blocks), schema.size))


@pytest.mark.parametrize("schema_name", ["pl94_persons", "dhc_persons"])
def test_mdf_written_then_read_back_gives_the_same_histograms(tmp_path, schema_name):
    schema = load_schema(schema_name)
    hist = random_histograms(schema, len(BLOCKS), density=0.02 if schema.size < 5000 else 0.0005)
    path = mdf_io.write_table(mdf_io.person_mdf(schema, BLOCKS, hist), tmp_path / "mdf.parquet")
    table = pq.read_table(path)
    assert table.num_rows == hist.sum()
    assert list(table["EPNUM"].to_numpy()) == list(range(1, table.num_rows + 1))
    back = histograms_from_mdf(table, schema, BLOCKS)
    assert (back != hist).nnz == 0
    frame = table.to_pandas()
    gq = frame["GQTYPE_PL"].to_numpy()
    assert np.array_equal(frame["RTYPE"].to_numpy(), np.where(gq == 0, 3, 5))


def test_pipe_layout(tmp_path):
    hist = random_histograms(PL94, len(BLOCKS))
    path = mdf_io.write_table(mdf_io.person_mdf(PL94, BLOCKS, hist), tmp_path / "mdf.txt", layout="pipe")
    lines = path.read_text().splitlines()
    assert lines[0].split("|")[:5] == ["TABBLKST", "TABBLKCOU", "TABTRACTCE", "TABBLKGRPCE", "TABBLK"]
    assert len(lines) == hist.sum() + 1
    assert lines[1].split("|")[-1] in PL94.attribute("cenrace").codes
    assert not list(tmp_path.glob("*.partial"))


def test_unit_mdf_holds_housing_units_and_facilities():
    occupancy = sp.csr_matrix(np.array([[3, 1], [0, 2], [5, 0], [0, 0]], dtype=np.int64))
    facilities = np.zeros((4, 7), dtype=np.int64)
    facilities[1, 2] = 1
    facilities[3, 0] = 2
    frame = mdf_io.unit_mdf(H1, BLOCKS, occupancy, facilities).to_pandas()
    assert (frame["RTYPE"] == 2).sum() == 11
    assert (frame["RTYPE"] == 4).sum() == 3
    gq = frame[frame["RTYPE"] == 4]
    assert sorted(gq["GQTYPE_PL"].tolist()) == [1, 1, 3]
    assert (gq["HH_STATUS"] == 0).all()
    assert set(frame.loc[frame["RTYPE"] == 2, "HH_STATUS"]) == {1, 2}


def test_block_slices_cover_every_block_within_the_limit():
    records = np.array([0, 3, 4, 0, 9, 1, 1, 0, 2])
    cuts = mdf_io.block_slices(records, limit=5)
    assert cuts[0][0] == 0 and cuts[-1][1] == len(records)
    assert all(a[1] == b[0] for a, b in zip(cuts, cuts[1:]))  # consecutive, no block twice or missed
    for lo, hi in cuts:  # at most the limit, unless a single block holds more
        assert records[lo:hi].sum() <= 5 or hi - lo == 1
    assert (4, 5) in cuts  # the block of 9 records alone
    assert mdf_io.block_slices(np.zeros(0, np.int64)) == [(0, 0)]


@pytest.mark.parametrize("kind", ["persons", "units"])
@pytest.mark.parametrize("invariant_units", [False, True])
def test_mdf_built_in_slices_is_the_whole_mdf(tmp_path, kind, invariant_units):
    """A writer holds one block range of records at a time; the file is the same records, EPNUM running on."""
    rng = np.random.default_rng(4)
    blocks = np.array([f"44001000100{i:04d}" for i in range(40)])
    solved = {"persons": random_histograms(PL94, len(blocks), seed=1, density=0.01)}
    if not invariant_units:
        solved["units"] = sp.csr_matrix(rng.integers(0, 3, size=(len(blocks), H1.size)).astype(np.int64))
    facilities = (rng.random((len(blocks), 7)) < 0.1).astype(np.int64)
    housing = rng.integers(0, 4, size=len(blocks))
    schemas = {"persons": PL94, "units": H1}
    whole = mdf_io.release_mdf(kind, schemas, blocks, solved, gq_facilities=facilities, housing_units=housing)
    pieces = list(mdf_io.mdf_slices(kind, schemas, blocks, solved, gq_facilities=facilities, housing_units=housing,
                                    limit=7))
    assert len(pieces) > 3 and whole.num_rows > 20
    assert all(p.num_rows <= 7 or len(set(p["TABBLK"].to_pylist())) == 1 for p in pieces)
    path = mdf_io.write_batches(pieces, pieces[0].schema, tmp_path / "mdf.parquet")
    assert pq.read_table(path).to_pandas().equals(whole.to_pandas())


def test_tables_at_every_level_are_consistent_with_histograms():
    g = Geography.from_blocks(BLOCKS)
    hist = random_histograms(PL94, len(BLOCKS), seed=4)
    specs = {t.name: t for t in load_tables("pl94")}
    p1 = compute_table(PL94, specs["P1"], g, hist)
    assert list(p1["level"].unique()) == list(g.levels)
    blocks = p1[p1["level"] == "block"]
    assert np.array_equal(blocks["total"].to_numpy(), np.asarray(hist.sum(axis=1)).ravel())
    nation = p1[p1["level"] == "nation"].iloc[0]
    assert nation["total"] == hist.sum()
    race_cols = [c for c in column_names(PL94, specs["P1"]) if c.startswith("cenrace=")]
    assert len(race_cols) == 63
    assert nation[race_cols].sum() == nation["total"]
    # P3 counts only the 18+ population
    p3 = compute_table(PL94, specs["P3"], g, hist)
    adults = PL94.levels_of("votingage", np.arange(PL94.size)) == 1
    assert p3[p3["level"] == "nation"]["total"].iloc[0] == hist[:, adults].sum()


def test_nmf_round_trip_is_bit_exact(tmp_path):
    rng = np.random.default_rng(1)
    geocodes = np.array(["44001", "44003", "44005"])
    path = nmf_level_path(tmp_path, "persons", "county")
    writer = nmf.LevelWriter(path)
    written = {}
    for query, width, variance in (("total", 1, Fraction(4099, 3)), ("cenrace", 63, Fraction(10**12 + 39, 7))):
        noisy = rng.integers(-10**6, 10**6, size=(3, width))
        written[query] = (noisy, variance)
        answers = nmf.NoisyAnswers(query, "county", geocodes, noisy, variance)
        writer.write(nmf.measurement_batch(answers.rows(0, 2)))
        writer.write(nmf.measurement_batch(answers.rows(2, 3)))
    assert path.with_name(path.name + ".partial").exists() and not path.exists()
    writer.close()
    back = nmf.read_level(path, geocodes)
    assert set(back) == set(written)
    for query, (noisy, variance) in written.items():
        assert np.array_equal(back[query].answers, noisy)
        assert back[query].variance == variance
    frame = pd.read_parquet(path)
    assert list(frame.columns) == ["level", "geocode", "query", "cell", "noisy", "variance_num", "variance_den"]
    with pytest.raises(ValueError, match="expected geounits"):
        nmf.read_level(path, geocodes[::-1])
