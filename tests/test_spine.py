"""The spine as data (issue 29): the optimized spine's units, a run measured and solved on it, its
publication, validation and resumption; a standard spine leaves a release as it was."""

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
from conftest import ROOT, disk_full_at
from hypothesis import given, settings
from hypothesis import strategies as st

from das.core.errors import RunError
from das.driver.run import resume_run, run
from das.io.areas import areas_from_frames
from das.model.geography import Geography, block_geocodes
from das.model.spine import optimized, optimized_units, spine_geography, spine_table

SEED = 11
FIXTURE = ROOT / "geography_fixtures" / "vt_grand_isle"


def _blocks(fixture: Path = FIXTURE) -> np.ndarray:
    u = pd.read_parquet(fixture / "units.parquet", columns=["TABBLKST", "TABBLKCOU", "TABTRACTCE", "TABBLK"])
    return np.unique(block_geocodes(u.TABBLKST, u.TABBLKCOU, u.TABTRACTCE, u.TABBLK))


def _runs(blocks: np.ndarray, length: int, *, every: int = 1, prefix: str = "A") -> np.ndarray:
    """Areas of `length` consecutive blocks (geocode order: they cut across tracts), every `every`-th run kept."""
    run_of = np.arange(len(blocks)) // length
    return np.where(run_of % every == 0, np.char.add(prefix, run_of.astype(str)), "")


def _spine_spec(tmp: Path, areas: dict[str, pd.DataFrame], spine: str = "optimized") -> Path:
    text = (ROOT / "specs/runs/vt_grand_isle.toml").read_text()
    text = text.replace("../../geography_fixtures", str(ROOT / "geography_fixtures"))
    tmp.mkdir(parents=True, exist_ok=True)
    for name, frame in areas.items():
        frame.to_csv(tmp / f"{name}.csv", index=False)
    listed = ", ".join(f'{name} = "{name}.csv"' for name in areas)
    path = tmp / "spec.toml"
    path.write_text(text + f'\n[geography]\nareas = {{ {listed} }}\nspine = "{spine}"\n')
    return path


def _area_frames(blocks: np.ndarray) -> dict[str, pd.DataFrame]:
    place, town = _runs(blocks, 15, every=2, prefix="P"), _runs(blocks, 70, prefix="T")
    return {"place": pd.DataFrame({"GEOID": blocks[place != ""], "area": place[place != ""]}),
            "town": pd.DataFrame({"GEOID": blocks, "area": town})}


# ---------------------------------------------------------------------------------------------
# The units


def _check_optimized(standard: Geography, areas: dict[str, np.ndarray]) -> None:
    """Inside each parent, one unit per cell of the areas; blocks in no area keep their standard units."""
    codes = optimized_units(standard, areas)["block_group"]
    tract, bg = standard.labels("tract"), standard.labels("block_group")
    key = [tuple(areas[t][i] for t in sorted(areas)) for i in range(standard.n_blocks)]
    cells: dict = {}
    for i in range(standard.n_blocks):
        in_none = all(k == "" for k in key[i])
        cells.setdefault((tract[i], key[i] if not in_none else ("", bg[i])), set()).add(codes[i])
        assert codes[i].startswith(tract[i])  # inside its tract
    assert all(len(c) == 1 for c in cells.values())  # a cell is one unit
    assert len({c for s in cells.values() for c in s}) == len(cells)  # and a unit one cell
    untouched = {tract[i] for i in range(standard.n_blocks)} - {tract[i] for i in range(standard.n_blocks)
                                                                if any(k != "" for k in key[i])}
    for i in range(standard.n_blocks):
        if tract[i] in untouched:
            assert codes[i] == bg[i]


def test_each_declared_area_is_a_union_of_whole_units_on_a_real_county():
    standard = Geography.from_blocks(_blocks())
    frames = _area_frames(standard.blocks)
    areas = {t: ids.astype(str) for t, ids in areas_from_frames(frames, standard.blocks).ids.items()}
    _check_optimized(standard, areas)
    spine = optimized(standard, areas)
    for ids in areas.values():  # every area's blocks are exactly the blocks of its units
        unit = pd.Series(spine.labels("block_group"), index=spine.blocks)
        of = pd.Series(ids, index=standard.blocks)
        for area in np.unique(ids[ids != ""]):
            units = set(unit[of.index[of == area]])
            assert set(unit.index[unit.isin(units)]) == set(of.index[of == area])
    assert sorted(spine.blocks) == list(standard.blocks)
    assert spine.n_units("tract") == standard.n_units("tract")  # tracts kept: published units, measured as before


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.integers(0, 3), st.integers(0, 2), st.sampled_from(["", "a", "b"]),
                          st.sampled_from(["", "x", "y", "z"])), min_size=1, max_size=40, unique_by=lambda t: t[:3]))
def test_optimized_units_property(rows):
    blocks = np.array([f"50001{tract:06d}{bg}{b:03d}" for tract, bg, b, _, _ in rows])
    standard = Geography.from_blocks(blocks)
    order = np.argsort(blocks)
    areas = {"place": np.array([r[3] for r in rows])[order], "town": np.array([r[4] for r in rows])[order]}
    _check_optimized(standard, areas)
    spine = optimized(standard, areas)  # nests, contiguous: from_spine checks it
    assert spine.n_units("block") == len(rows)


def test_any_level_below_the_state_may_come_from_the_table():
    blocks = ["500010001001000", "500010002001000", "500030001001000"]
    levels = ("nation", "state", "county", "tract", "block")
    g = Geography.from_spine(blocks, levels, {"county": np.array(["50-east", "50-east", "50-west"]),
                                              "tract": np.array(["e1", "e2", "w1"])})
    assert g.units("county").tolist() == ["50-east", "50-west"] and g.children_of("county", 0).tolist() == ["e1", "e2"]
    assert g.parent_index("tract").tolist() == [0, 0, 1]


def test_a_spine_that_does_not_nest_is_refused():
    blocks = ["500010001001000", "500010002001000"]
    with pytest.raises(ValueError, match="do not nest"):
        Geography.from_spine(blocks, ("nation", "state", "county", "tract", "block_group", "block"),
                             {"block_group": np.array(["X", "X"])})  # one unit in two tracts
    with pytest.raises(ValueError, match="between the state and the block"):
        Geography.from_spine(blocks, ("nation", "state", "county", "tract", "block"), {"state": np.array(["1", "2"])})
    with pytest.raises(ValueError, match="none below the county"):
        spine_geography("optimized", Geography.from_blocks(blocks, ("nation", "state", "county", "block")),
                        {"place": np.array(["a", ""])})


# ---------------------------------------------------------------------------------------------
# A release on the optimized spine


@pytest.fixture(scope="module")
def spine_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("spine")
    spec = _spine_spec(tmp / "spec", _area_frames(_blocks()))
    return run(spec, tmp / "run", seed=SEED, progress=False), spec


def test_a_release_on_the_optimized_spine_is_valid_and_keeps_the_standard_geography(spine_run):
    result, spec = spine_run
    assert result.valid, result.manifest.validation
    out = result.out_dir
    m = json.loads((out / "manifest.json").read_text())
    assert m["spine"]["kind"] == "optimized" and set(m["spine"]["areas"]) == {"place", "town"}
    assert "spine" in m["holds"] and "spine.parquet" in m["outputs"]
    text = "\n".join(p.read_text(errors="replace") for p in out.glob("*.json"))
    assert str(spec.parent) not in text  # the area files' paths stay with the operator
    published = pq.read_table(out / "spine.parquet").to_pandas()
    assert sorted(published.GEOID) == sorted(_blocks())
    # the NMF's block groups are the spine's units; the tables' are the standard block groups
    nmf = pq.read_table(out / "nmf/persons/block_group.parquet").column("geocode").unique().to_pylist()
    assert sorted(nmf) == sorted(published.block_group.unique())
    p1 = pq.read_table(out / "tables/P1.parquet").to_pandas()
    assert set(p1.loc[p1.level == "block_group", "geocode"]) <= {b[:12] for b in _blocks()}
    mdf = pd.read_parquet(out / "mdf_persons.parquet")
    assert int(len(mdf)) == result.manifest.counts.persons


def test_the_validator_catches_a_spine_that_is_tampered_with(spine_run, tmp_path, capsys):
    from das.cli import main

    result, _ = spine_run
    for change in ("cross", "drop"):
        copy = tmp_path / change
        shutil.copytree(result.out_dir, copy)
        table = pd.read_parquet(copy / "spine.parquet")
        if change == "cross":  # a unit of one tract given to a block of another
            other = table.index[table.GEOID.str[:11] != table.GEOID.iloc[0][:11]][0]
            table.loc[other, "block_group"] = table.block_group.iloc[0]
        else:
            table = table.iloc[1:]
        table.to_parquet(copy / "spine.parquet")
        assert main(["validate", str(copy)]) in (1, 2)
        said = capsys.readouterr()
        assert ("do not nest" if change == "cross" else "the spine's blocks differ") in said.out + said.err


def test_a_standard_spine_with_areas_declared_is_the_release_without_them(tmp_path):
    blocks = _blocks()
    plain = (ROOT / "specs/runs/vt_grand_isle.toml").read_text().replace("../../geography_fixtures",
                                                                          str(ROOT / "geography_fixtures"))
    (tmp_path / "plain.toml").write_text(plain)
    standard = _spine_spec(tmp_path / "declared", _area_frames(blocks), spine="standard")
    a = run(tmp_path / "plain.toml", tmp_path / "a", seed=SEED, progress=False)
    b = run(standard, tmp_path / "b", seed=SEED, progress=False)
    assert a.valid and b.valid
    for name in ("mdf_persons.parquet", "mdf_units.parquet", "tables/P1.parquet", "nmf/persons/block_group.parquet"):
        assert pq.read_table(a.out_dir / name).equals(pq.read_table(b.out_dir / name))
    assert "spine" not in json.loads((b.out_dir / "manifest.json").read_text())


def test_a_bad_area_file_is_refused_before_anything_is_drawn(tmp_path, capsys):
    from das.cli import main

    frames = _area_frames(_blocks())
    frames["place"].loc[3, "GEOID"] = "500139999999999"
    spec = _spine_spec(tmp_path / "spec", frames)
    assert main(["run", str(spec), "--out", str(tmp_path / "out"), "--seed", "1"]) == 2
    err = capsys.readouterr().err
    assert "place.csv" in err and "500139999999999" in err and "row 4" in err
    assert not (tmp_path / "out" / "nmf").exists()


def test_a_resume_with_a_changed_area_file_is_refused(tmp_path, monkeypatch):
    spec = _spine_spec(tmp_path / "spec", _area_frames(_blocks()))
    reference = run(spec, tmp_path / "reference", seed=SEED, progress=False)
    out = tmp_path / "run"
    disk_full_at(4, monkeypatch)
    with pytest.raises(RunError, match="disk full"):
        run(spec, out, seed=SEED, progress=False)
    monkeypatch.undo()
    town = spec.parent / "town.csv"
    kept = town.read_bytes()
    town.write_bytes(kept.replace(b"T0", b"T1", 1))
    with pytest.raises(RunError, match="town areas input changed"):
        resume_run(out, progress=False)
    town.write_bytes(kept)
    resumed = resume_run(out, progress=False)
    assert resumed.valid and resumed.manifest.outputs == reference.manifest.outputs


def test_the_published_spine_reads_back_as_the_engine_geography(spine_run):
    result, _ = spine_run
    table = pd.read_parquet(result.out_dir / "spine.parquet")
    again = Geography.from_spine(table.GEOID.to_numpy(), tuple(result.manifest.levels),
                                 {"block_group": table.block_group.to_numpy()})
    assert spine_table(again).equals(table)


def test_a_partitioned_run_reads_each_state_s_rows_of_the_area_files(tmp_path):
    from test_partitioned import FIXTURES, two_states

    from das.core.errors import InputError

    spec = two_states(tmp_path / "inputs")
    blocks = np.concatenate([_blocks(FIXTURES / "al_perry"), _blocks()])  # two states in one area file
    frames = _area_frames(np.sort(blocks))
    for name, frame in frames.items():
        frame.to_csv(tmp_path / "inputs" / f"{name}.csv", index=False)
    spec.write_text(spec.read_text() + '\n[geography]\nareas = { place = "place.csv", town = "town.csv" }\n'
                    'spine = "optimized"\n')
    result = run(spec, tmp_path / "out", seed=SEED, progress=False)
    assert result.valid, result.manifest.validation
    published = pd.read_parquet(result.out_dir / "spine.parquet")
    standard = Geography.from_blocks(np.sort(blocks))
    ids = {t: ids.astype(str) for t, ids in areas_from_frames(frames, standard.blocks).ids.items()}
    assert spine_table(optimized(standard, ids)).equals(published)  # the states' parts are the whole spine
    # a block of no state of the run is refused by every state, before anything is drawn
    frames["town"].loc[0, "GEOID"] = "020010001001000"
    frames["town"].to_csv(tmp_path / "inputs" / "town.csv", index=False)
    with pytest.raises(InputError, match="020010001001000"):
        run(spec, tmp_path / "again", seed=SEED, progress=False)
    assert not (tmp_path / "again" / "nmf").exists()


def test_a_study_on_the_optimized_spine_scores_the_declared_areas(spine_run, tmp_path):
    from das.cli import main

    _, spec = spine_run
    out = tmp_path / "study"
    assert main(["replicate", str(spec), "--runs", "2", "--seed", "3", "--estimators", "topdown", "--workers", "1",
                 "--areas", f"place={spec.parent / 'place.csv'}", "--out", str(out)]) == 0
    areas = pd.read_parquet(out / "areas.parquet")
    assert "place" in set(areas.astype(str).stack())  # the declared type scored, on blocks in the spine's order


def test_das_metrics_scores_a_release_made_on_the_optimized_spine(spine_run, tmp_path):
    from das.cli import main

    result, spec = spine_run
    out = tmp_path / "metrics"
    assert main(["metrics", str(result.out_dir), "--out", str(out), "--areas", f"town={spec.parent / 'town.csv'}"]) == 0
    stats = pd.read_parquet(out / "stats.parquet")
    assert {"tract", "block_group", "block"} <= set(stats.astype(str).stack())
    assert "town" in set(pd.read_parquet(out / "areas.parquet").astype(str).stack())


def test_the_api_takes_a_dict_spec_whose_area_files_are_relative_to_the_working_directory(tmp_path, monkeypatch):
    import das
    from das.model.specfile import load_toml

    for name, frame in _area_frames(_blocks()).items():
        frame.to_csv(tmp_path / f"{name}.csv", index=False)
    data = load_toml(ROOT / "specs/runs/vt_grand_isle.toml")
    data["input"] = {k: str(FIXTURE / f"{k}.parquet") for k in ("persons", "units")}
    data["geography"] = {"areas": {"place": "place.csv", "town": "town.csv"}, "spine": "optimized"}
    monkeypatch.chdir(tmp_path)
    release = das.run(data, out=tmp_path / "out", seed=SEED, workers=1, progress=False)
    assert release.validate().ok and (tmp_path / "out" / "spine.parquet").is_file()


def test_das_measure_publishes_the_spine_beside_the_nmf(tmp_path, capsys):
    from das.cli import main

    spec = _spine_spec(tmp_path / "spec", _area_frames(_blocks()))
    assert main(["measure", str(spec), "--out", str(tmp_path / "m"), "--seed", "2"]) == 0
    assert "spine.parquet" in capsys.readouterr().out
    manifest = json.loads((tmp_path / "m" / "manifest.json").read_text())
    published = pd.read_parquet(tmp_path / "m" / "spine.parquet")
    nmf = pq.read_table(tmp_path / "m" / "nmf/persons/block_group.parquet").column("geocode").unique().to_pylist()
    assert sorted(nmf) == sorted(published.block_group.unique()) and "spine.parquet" in manifest["outputs"]


def test_das_measure_of_a_partitioned_input_assembles_the_states_spines(tmp_path):
    from test_partitioned import FIXTURES, two_states

    from das.driver.run import measure_only

    spec = two_states(tmp_path / "inputs")
    blocks = np.sort(np.concatenate([_blocks(FIXTURES / "al_perry"), _blocks()]))
    for name, frame in _area_frames(blocks).items():
        frame.to_csv(tmp_path / "inputs" / f"{name}.csv", index=False)
    spec.write_text(spec.read_text() + '\n[geography]\nareas = { place = "place.csv", town = "town.csv" }\n'
                    'spine = "optimized"\n')
    manifest = measure_only(spec, tmp_path / "m", seed=SEED)
    published = pd.read_parquet(tmp_path / "m" / "spine.parquet")
    assert sorted(published.GEOID) == sorted(blocks) and "spine.parquet" in manifest.outputs
    for state in ("01", "50"):
        nmf = pq.read_table(tmp_path / "m" / f"nmf/persons/block_group/{state}.parquet").column("geocode")
        assert set(nmf.unique().to_pylist()) == set(published.block_group[published.GEOID.str[:2] == state])
