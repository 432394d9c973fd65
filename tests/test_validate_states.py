"""das validate state by state: a one-state run reports what the whole-file validator reported, a
two-state run the same with or without an executor, and with its states cut into shards of one county
(das.validate.shards), and a fault in one state is named by its state's
geocodes (the MDF, a table, the nation row against the states', EPNUM across states, a state's own NMF
file, a state missing from the manifest, a state's own input files)."""

import json
import re
import shutil

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import ROOT, TINY

from das.core.errors import ValidationError
from das.driver.run import run
from das.frame.checkpoint import file_sha256
from das.validate import validate_run

STATES = ("44", "45")

# What `das validate` printed for the tiny run (seed 3) before it went state by state (and the signature and
# certificate checks since).
TINY_CHECKS = [
    "the release claims mdf_codes, tables_match_mdf, nmf_matches_certificate, units_mdf, invariants, "
    "schema_constraints, block_invariants; those are checked",
    "signature: manifest.sig verifies with the release.pub beside it (not a proof of origin)",
    "checksums of every output and NMF file",
    "manifest: every field declared in das/frame/published.py, of its declared type",
    "manifest: its counts are the published files' (persons, blocks, parents per level)",
    "privacy mode, certificate and spec digest in every Parquet file",
    "certificate: rho per level and per query sums exactly to the total, each variance is exactly 1/its rho, eps is "
    "re-derived from rho and delta",
    "certificate: what the release's strategy, budget and delta give (recomputed from its spec)",
    "certificate: the run's total guarantee is its releases' certificates composed (zCDP: rho adds; recomputed exactly)",
    "least squares: each level's duality-gap certificate agrees with its list of uncertified optima",
    "MDF units: valid codes, housing units vs facilities",
    "NMF: exactly the certified measurements",
    "MDF persons: in blocks of the release universe",
    "MDF persons: valid codes, derived columns, unique EPNUM",
    *(f"table {t} {c}" for t in ("P1", "P2", "P3", "P4", "P5", "H1") for c in ("equals the MDF recount", "hierarchy sums")),
    "total population invariant (published)",
    "rules of schema pl94_persons (persons: facilities, structural_zero)",
    "rules of schema h1_units (units: housing_units, household_persons)",
    "block invariants: the housing units and GQ facilities per block the units MDF holds",
    "total population invariant against the inputs (nation, state)",
    "housing units per block invariant",
    "GQ facilities per block invariant",
]


def _names(report) -> list[str]:
    return [c.split(" ", 1)[1].strip() for c in report.checks]


def _set(path, name, change) -> None:
    """Rewrite one column of a Parquet file (keeping its metadata): change(values) -> values."""
    table = pq.read_table(path)
    i = table.schema.get_field_index(name)
    field = table.schema.field(i)
    pq.write_table(table.set_column(i, field, pa.array(change(table.column(i).to_numpy().copy()), field.type)), path)


def _copy(run_dir, to):
    shutil.copytree(run_dir, to)
    return to


def _write_manifest(run_dir, change) -> None:
    """The manifest changed, and its signature dropped (it would not verify): an unsigned release."""
    for signed in ("manifest.sig", "release.pub"):
        (run_dir / signed).unlink(missing_ok=True)
    path = run_dir / "manifest.json"
    manifest = json.loads(path.read_text())
    change(manifest)
    path.write_text(json.dumps(manifest, indent=1))


@pytest.fixture(scope="module")
def one_state(tmp_path_factory):
    return run("tiny", tmp_path_factory.mktemp("one") / "run", seed=3, workers=1, progress=False).out_dir


def _two_state_inputs(name: str) -> pd.DataFrame:
    """The tiny fixture's persons or units twice, as states 44 and 45 (EPNUM renumbered 1..N over both)."""
    frame = pd.read_parquet(TINY / f"{name}.parquet")
    both = pd.concat([frame.assign(TABBLKST=s) for s in STATES], ignore_index=True)
    if name == "persons":
        both["EPNUM"] = np.arange(1, len(both) + 1)
    return both


@pytest.fixture(scope="module")
def two_states(tmp_path_factory):
    """A run (seed 3) of the two-state tiny inputs."""
    inputs = tmp_path_factory.mktemp("inputs")
    for name in ("persons", "units"):
        _two_state_inputs(name).to_parquet(inputs / f"{name}.parquet", index=False)
    spec = (ROOT / "specs/runs/tiny.toml").read_text()
    spec = re.sub(r'persons = ".*?"', 'persons = "persons.parquet"', spec, count=1)
    spec = re.sub(r'units = ".*?"', 'units = "units.parquet"', spec, count=1)
    (inputs / "spec.toml").write_text(spec)
    result = run(inputs / "spec.toml", inputs.parent / "two", seed=3, workers=1, progress=False)
    assert result.manifest.invariants.total_population["state"].keys() == set(STATES)
    return result.out_dir


def test_a_one_state_run_reports_the_checks_of_the_whole_file_validator(one_state, tmp_path):
    report = validate_run(one_state)
    assert report.ok and _names(report) == TINY_CHECKS
    broken = _copy(one_state, tmp_path / "broken")
    _set(broken / "mdf_persons.parquet", "EPNUM", lambda e: np.r_[e[:10], e[3], e[11:-1], e[0]])
    report = validate_run(broken)
    assert _names(report) == TINY_CHECKS
    assert [v for v in report.violations if v.startswith("MDF persons")] == [
        f"MDF persons: valid codes, derived columns, unique EPNUM: row {r}: EPNUM {e} appears on an earlier row too"
        for r, e in ((11, 4), (145, 1))]


def test_two_states_give_the_same_report_with_and_without_an_executor(two_states, tmp_path):
    from das.core.executors import local_executor

    assert validate_run(two_states).ok
    broken = _copy(two_states, tmp_path / "broken")
    _set(broken / "tables" / "P1.parquet", "total", lambda v: v + 1)  # every row of both states
    executor = local_executor(2)
    try:
        assert validate_run(broken, executor=executor) == validate_run(broken)
    finally:
        executor.close()


def test_a_fault_in_one_state_names_that_state(two_states, tmp_path):
    broken = _copy(two_states, tmp_path / "broken")
    p1 = broken / "tables" / "P1.parquet"
    written = pd.read_parquet(p1)
    block = written.index[(written["level"] == "block") & written["geocode"].str.startswith("45")][-1]
    _set(p1, "total", lambda v: np.where(np.arange(len(v)) == block, v + 2, v))
    units = broken / "mdf_units.parquet"
    state = pd.read_parquet(units, columns=["TABBLKST"])["TABBLKST"].astype(str).to_numpy()
    housing = np.flatnonzero((state == "45") & (pd.read_parquet(units, columns=["RTYPE"])["RTYPE"].to_numpy() == 2))
    _set(units, "GQTYPE_PL", lambda v: np.where(np.arange(len(v)) == housing[0], 3, v))
    report = _sharded(broken)
    geocode = written.loc[block, "geocode"]
    assert f"table P1 equals the MDF recount: block {geocode!r} column 'total': table " \
           f"{written.loc[block, 'total'] + 2}, MDF recount {written.loc[block, 'total']}" in report.violations
    assert f"table P1 hierarchy sums: block rows of block_group {geocode[:12]!r} do not sum to it" in report.violations
    assert f"MDF units: valid codes, housing units vs facilities: row {housing[0] + 1}: 3 (expected GQTYPE_PL 0 " \
           "for a housing unit)" in report.violations
    assert not any("'44" in v for v in report.violations)


def test_the_nation_row_must_be_the_sum_of_the_state_rows(two_states, tmp_path):
    broken = _copy(two_states, tmp_path / "broken")
    p2 = broken / "tables" / "P2.parquet"
    nation = int(pd.read_parquet(p2).query("level == 'nation'")["total"].iloc[0])
    _set(p2, "total", lambda v: np.where(np.arange(len(v)) == 0, v - 1, v))
    report = _sharded(broken)
    assert "table P2 hierarchy sums: state rows of nation '' do not sum to it" in report.violations
    assert f"table P2 equals the MDF recount: nation '' column 'total': table {nation - 1}, MDF recount {nation}" \
        in report.violations
    assert not any(v.startswith("table P2") and "state '" in v for v in report.violations)


def test_an_epnum_of_one_state_repeated_in_another_is_caught(two_states, tmp_path):
    broken = _copy(two_states, tmp_path / "broken")
    persons = broken / "mdf_persons.parquet"
    state = pd.read_parquet(persons, columns=["TABBLKST"])["TABBLKST"].astype(str).to_numpy()
    first_of_45 = int(np.flatnonzero(state == "45")[0])
    _set(persons, "EPNUM", lambda e: np.where(np.arange(len(e)) == first_of_45 + 5, 7, e))  # 7 is a 44's
    report = _sharded(broken)
    assert f"MDF persons: valid codes, derived columns, unique EPNUM: row {first_of_45 + 6}: EPNUM 7 appears on " \
           "an earlier row too" in report.violations
    # no repeat, but a gap: the range says so
    _set(persons, "EPNUM", lambda e: np.where(np.arange(len(e)) == first_of_45 + 5, len(e) + 1, e))
    report = _sharded(broken)
    assert f"MDF persons: valid codes, derived columns, unique EPNUM: EPNUM runs 1..{len(state) + 1}, expected " \
           f"1..{len(state)}" in report.violations


def _sharded(run_dir, **kw):
    """The report, which must be the same with each state cut into shards of one county (das.validate.shards)."""
    report = validate_run(run_dir, **kw)
    assert validate_run(run_dir, shard_persons=70, **kw) == report
    return report


def _nmf_per_state(run_dir) -> None:
    """The NMF levels below the state as one file per state (a partitioned run's layout), listed in the manifest."""
    digests = {}
    for whole in sorted((run_dir / "nmf").glob("*/*.parquet")):
        if whole.stem in ("nation", "state"):
            digests[whole.relative_to(run_dir).as_posix()] = file_sha256(whole)
            continue
        table = pq.read_table(whole)
        state = np.asarray(table.column("geocode").to_pylist(), dtype=str).astype("U2")
        (whole.parent / whole.stem).mkdir()
        for s in STATES:
            path = whole.parent / whole.stem / f"{s}.parquet"
            pq.write_table(table.filter(pa.array(state == s)), path)
            digests[path.relative_to(run_dir).as_posix()] = file_sha256(path)
        whole.unlink()
    _write_manifest(run_dir, lambda m: m.update(nmf=digests))


def test_the_nmf_stored_one_file_per_state_is_checked_per_state(two_states, tmp_path):
    split = _copy(two_states, tmp_path / "split")
    _nmf_per_state(split)
    assert (split / "nmf" / "persons" / "county" / "45.parquet").is_file()
    assert _sharded(split).ok
    tract = split / "nmf" / "persons" / "tract" / "45.parquet"
    _set(tract, "cell", lambda c: np.r_[c[:-1], c[-2]])
    _write_manifest(split, lambda m: m["nmf"].update({"nmf/persons/tract/45.parquet": file_sha256(tract)}))
    report = _sharded(split)
    assert [v for v in report.violations if v.startswith("NMF")] == [
        "NMF: exactly the certified measurements: nmf/persons/tract/45.parquet detailed: rows are not each (geocode, cell) "
        "of the level once, in order"]
    county = split / "nmf" / "persons" / "county" / "44.parquet"
    county.unlink()
    _write_manifest(split, lambda m: m["nmf"].pop("nmf/persons/county/44.parquet"))
    with pytest.raises(ValidationError, match="nmf/persons/county/44.parquet is missing"):
        validate_run(split)


def test_a_state_of_the_mdf_the_manifest_does_not_publish_is_a_violation(two_states, tmp_path):
    broken = _copy(two_states, tmp_path / "broken")
    _write_manifest(broken, lambda m: m["invariants"]["total_population"]["state"].pop("45"))
    report = _sharded(broken)
    assert "MDF units: valid codes, housing units vs facilities: state '45': units in the MDF, but the manifest " \
           "publishes no total population for it" in report.violations


def test_inputs_given_one_file_per_state_are_compared_state_by_state(two_states, tmp_path):
    """Inputs as directories (a partitioned run) give the report the files give; one unit fewer in
    state 45's own file names its block."""
    units = _two_state_inputs("units")
    for name, frame in (("persons", _two_state_inputs("persons")), ("units", units)):
        (tmp_path / name).mkdir()
        for s in STATES:
            frame[frame["TABBLKST"] == s].to_parquet(tmp_path / name / f"{name}_{s}.parquet", index=False)
    directories = (tmp_path / "persons", tmp_path / "units")
    assert _sharded(two_states, inputs=directories) == _sharded(two_states)
    assert _sharded(two_states).checks[-3:] == ["ok  " + n for n in TINY_CHECKS[-3:]]
    dropped = units.index[(units["TABBLKST"] == "45") & (units["RTYPE"] == 2)][0]
    units.drop(dropped)[lambda f: f["TABBLKST"] == "45"].to_parquet(tmp_path / "units" / "units_45.parquet", index=False)
    block = "".join(str(units.loc[dropped, c]) for c in ("TABBLKST", "TABBLKCOU", "TABTRACTCE", "TABBLK"))
    housing = int(((units["RTYPE"] == 2) & (_blocks(units) == block)).sum())
    assert _sharded(two_states, inputs=directories).violations == [
        f"housing units per block invariant: block {block}: {housing} housing units, input has {housing - 1}"]


def _blocks(frame: pd.DataFrame) -> pd.Series:
    return frame["TABBLKST"].astype(str) + frame["TABBLKCOU"].astype(str) + frame["TABTRACTCE"].astype(str) \
        + frame["TABBLK"].astype(str)


def test_a_release_without_a_state_level_checks_the_nation_against_its_children(one_state, tmp_path):
    """Levels nation, county, ...: the nation's recount is still the states' sum, and its children (the
    counties, summed per state) must add up to it."""
    broken = _copy(one_state, tmp_path / "broken")
    _write_manifest(broken, lambda m: m.update(levels=[lv for lv in m["levels"] if lv != "state"]))
    for path in (broken / "tables").glob("*.parquet"):
        table = pq.read_table(path)
        pq.write_table(table.filter(pa.array(table.column("level").to_numpy(zero_copy_only=False) != "state")), path)
    assert not [v for v in _sharded(broken).violations if v.startswith("table")]
    nation = int(pd.read_parquet(broken / "tables" / "P3.parquet").query("level == 'nation'")["total"].iloc[0])
    _set(broken / "tables" / "P3.parquet", "total", lambda v: np.where(np.arange(len(v)) == 0, v + 1, v))
    assert [v for v in _sharded(broken).violations if v.startswith("table")] == [
        f"table P3 equals the MDF recount: nation '' column 'total': table {nation + 1}, MDF recount {nation}",
        "table P3 hierarchy sums: county rows of nation '' do not sum to it"]


def test_the_population_against_inputs_given_one_file_per_state_names_the_state(two_states, tmp_path):
    """Each state counts its own persons file: one record fewer in state 45's names state 45 (and the
    nation); the files of a state the run does not have are counted by the driver."""
    persons, units = _two_state_inputs("persons"), _two_state_inputs("units")
    for name, frame in (("persons", persons), ("units", units)):
        (tmp_path / name).mkdir()
        for s in STATES:
            frame[frame["TABBLKST"] == s].to_parquet(tmp_path / name / f"{name}_{s}.parquet", index=False)
    directories = (tmp_path / "persons", tmp_path / "units")
    own = persons[persons["TABBLKST"] == "45"]
    own.iloc[1:].to_parquet(tmp_path / "persons" / "persons_45.parquet", index=False)
    name = "total population invariant against the inputs (nation, state)"
    assert [v for v in _sharded(two_states, inputs=directories).violations if v.startswith(name)] == [
        f"{name}: nation '': population {len(persons)} differs from the input",
        f"{name}: state '45': population {len(own)} differs from the input"]
    own.to_parquet(tmp_path / "persons" / "persons_45.parquet", index=False)
    for name_, frame in (("persons", persons), ("units", units)):
        frame[frame["TABBLKST"] == "44"].head(3).assign(TABBLKST="46").to_parquet(
            tmp_path / name_ / f"{name_}_46.parquet", index=False)
    found = [v for v in _sharded(two_states, inputs=directories).violations if v.startswith(name)]
    assert found[0] == f"{name}: nation '': population {len(persons)} differs from the input"
    assert [v.split(": population")[0] for v in found[1:]] == [f"{name}: state '46'"]  # 0 (0.0 after the align)
