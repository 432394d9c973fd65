"""das validate shard by shard: a state cut into runs of whole counties (das.validate.shards) gives the report
of one pass over the state, line for line, for a valid release and for releases tampered in one county or
across counties (a persons record, EPNUM, a code that is not one, a table cell, the state's row, a units record
removed), in turn or on an executor; a shard reads only its counties' records."""

import shutil

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from das.driver.run import run
from das.validate import validate_run
from das.validate.reading import read_state
from das.validate.shards import Shard, plan

SHARDED = 100  # the tiny release's state (145 persons: 79 in county 001, 66 in 003) in two shards


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return run("tiny", tmp_path_factory.mktemp("shards") / "run", seed=3, workers=1, progress=False).out_dir


def _rewrite(path, change) -> None:
    """Rewrite a Parquet file through pandas (keeping its schema and metadata): change(frame) -> frame."""
    table = pq.read_table(path)
    frame = change(table.to_pandas())
    pq.write_table(pa.Table.from_pandas(frame.reset_index(drop=True), schema=table.schema, preserve_index=False), path)


def _copy(run_dir, to):
    shutil.copytree(run_dir, to)
    return to


def _same(run_dir) -> object:
    """The report of the state in two shards, which must be the report of the whole state."""
    whole = validate_run(run_dir, shard_persons=None)
    assert validate_run(run_dir, shard_persons=SHARDED) == whole
    return whole


def test_the_state_is_cut_into_runs_of_whole_counties(tiny):
    mdf = tiny / "mdf_persons.parquet"
    assert plan(mdf, ["44"], SHARDED) == {"44": [Shard("44", (None, "003"), 0, 79), Shard("44", ("003", None), 1, 66)]}
    assert plan(mdf, ["44"], 145) == {"44": [Shard("44")]}  # at most the limit: the whole state
    assert plan(mdf, ["44"], 10) == plan(mdf, ["44"], SHARDED)  # a county over the limit is a shard of its own
    frame, rows = read_state(mdf, "44", counties=("003", None))
    whole, all_rows = read_state(mdf, "44")
    assert (frame["TABBLKCOU"] == "003").all() and len(frame) == 66
    assert (rows == all_rows[whole["TABBLKCOU"].to_numpy() == "003"]).all()  # each record's row in the file


def test_a_valid_release_gives_the_same_report_in_shards(tiny):
    assert _same(tiny).ok


def _flip(frame, county, n):
    """The first n household persons of the county with the RTYPE of a person in group quarters (RTYPE is
    derived from GQTYPE_PL)."""
    where = np.flatnonzero((frame["TABBLKCOU"].astype(str).to_numpy() == county) & (frame["RTYPE"] == 3).to_numpy())[:n]
    frame.loc[where, "RTYPE"] = 5
    return frame


def _epnum_repeated(frame):
    """A record of county 003 takes the EPNUM of one of county 001 (and the last EPNUM goes missing)."""
    first = np.flatnonzero(frame["TABBLKCOU"].astype(str).to_numpy() == "003")[0]
    frame.loc[first, "EPNUM"] = frame.loc[4, "EPNUM"]
    return frame


def _not_a_code(frame):
    last = np.flatnonzero(frame["TABBLKCOU"].astype(str).to_numpy() == "003")[-1]
    frame.loc[last, "CENHISP"] = 7
    return frame


PERSONS = {
    "derived column in one county": (lambda f: _flip(f, "003", 5), "MDF persons: valid codes, derived"),
    "derived column in both": (lambda f: _flip(_flip(f, "001", 2), "003", 4), "MDF persons: valid codes, derived"),
    "EPNUM across counties": (_epnum_repeated, "MDF persons: valid codes, derived columns, unique EPNUM: row"),
    "a code that is not one": (_not_a_code, "MDF persons: valid codes: column CENHISP"),
}


@pytest.mark.parametrize("name", list(PERSONS))
def test_a_persons_record_tampered_gives_the_same_report_in_shards(tiny, tmp_path, name):
    change, expected = PERSONS[name]
    broken = _copy(tiny, tmp_path / "broken")
    _rewrite(broken / "mdf_persons.parquet", change)
    report = _same(broken)
    assert any(v.startswith(expected) for v in report.violations), report.violations


def _table_cell(level, county):
    def change(frame):
        where = np.flatnonzero((frame["level"] == level).to_numpy()
                               & frame["geocode"].astype(str).str.startswith("44" + county).to_numpy())[0]
        frame.loc[where, "total"] += 1
        return frame
    return change


@pytest.mark.parametrize("level, county", [("tract", "003"), ("county", "003"), ("block", "001"), ("state", "")])
def test_a_table_cell_tampered_gives_the_same_report_in_shards(tiny, tmp_path, level, county):
    broken = _copy(tiny, tmp_path / "broken")
    _rewrite(broken / "tables" / "P1.parquet", _table_cell(level, county))
    report = _same(broken)
    assert any(v.startswith("table P1 equals the MDF recount") for v in report.violations), report.violations
    assert any(v.startswith("table P1 hierarchy sums") for v in report.violations), report.violations


@pytest.mark.parametrize("county", ["001", "003"])
def test_a_units_record_removed_gives_the_same_report_in_shards(tiny, tmp_path, county):
    broken = _copy(tiny, tmp_path / "broken")
    _rewrite(broken / "mdf_units.parquet",
             lambda f: f.drop(index=np.flatnonzero(f["TABBLKCOU"].astype(str).to_numpy() == county)[0]))
    report = _same(broken)
    assert any(v.startswith("housing units per block invariant") or v.startswith("GQ facilities per block")
               for v in report.violations), report.violations


def test_the_shards_on_an_executor_give_the_same_report(tiny, tmp_path):
    from das.core.executors import local_executor

    broken = _copy(tiny, tmp_path / "broken")
    _rewrite(broken / "mdf_persons.parquet", lambda f: _flip(f, "003", 2))
    executor = local_executor(2)
    try:
        assert validate_run(broken, executor=executor, shard_persons=SHARDED) == validate_run(broken, shard_persons=None)
    finally:
        executor.close()
