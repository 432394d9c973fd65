"""The national-shaped benchmark's pieces (benchmarks/national.py): the projection, the critical-path
summary, the per-parent fit, the real largest sizes and the task recording on a tiny run."""

import doctest
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT

from benchmarks import national
from benchmarks.national import (
    LARGEST_SHIPPED,
    LevelWork,
    Nation,
    critical_path,
    extrapolate,
    fit_cost,
    largest_in_shipped,
    national_steps,
    project,
    project_memory,
    recording_tasks,
)
from das.topdown.engine import LevelReport

CENSUS = ROOT.parent / "shared" / "data" / "census2010"


def test_doctests():
    assert doctest.testmod(national).failed == 0


def test_projection_barriered_and_per_parent_by_hand():
    # 64 cores. step a: 6400 CPU s over 64 cores = 100 s, largest task 30 s -> 100 s;
    # b: 640 / 64 = 10 s but one task of 50 s -> 50 s; c: 64 / 64 = 1 s, largest 2 s -> 2 s.
    steps = [LevelWork("a", 6400.0, 30.0), LevelWork("b", 640.0, 50.0), LevelWork("c", 64.0, 2.0)]
    r = project({"read": 60.0, "validate": 40.0}, steps, cores=64)
    assert r["serial_s"] == 100.0
    assert r["steps_s"] == {"a": 100.0, "b": 50.0, "c": 2.0}
    assert r["barriered_s"] == 100.0 + 152.0
    # no barrier: max(7104 / 64 = 111, critical path 30 + 50 + 2 = 82)
    assert r["critical_path_s"] == 82.0
    assert r["per_parent_s"] == 100.0 + 111.0
    assert r["bound_by_largest_task"] == ["b", "c"]
    # one huge parent: the critical path decides when there is no barrier too
    r = project({}, [LevelWork("a", 64.0, 500.0), LevelWork("b", 64.0, 500.0)], cores=64)
    assert (r["barriered_s"], r["per_parent_s"]) == (1000.0, 1000.0)


def test_fit_recovers_a_power_law_and_extrapolates_the_safer_way():
    children = np.array([2, 5, 10, 40, 100, 300])
    per_child, a, b = fit_cost(children, 0.002 * children ** 1.3)
    assert a == pytest.approx(0.002) and b == pytest.approx(1.3)
    # the linear fit over the larger half underestimates a superlinear cost far out; extrapolate takes the larger
    assert extrapolate(per_child, a, b, 2346) == pytest.approx(0.002 * 2346 ** 1.3)
    # sublinear (a fixed cost per parent): the linear fit is the larger
    per_child, a, b = fit_cost(children, 0.5 + 0.01 * children)
    assert b < 1 and extrapolate(per_child, a, b, 2346) == pytest.approx(per_child * 2346)
    assert fit_cost([1, 1], [0.1, 0.2]) == (0.0, 0.0, 1.0)  # single-child parents say nothing


def test_memory_projection_by_hand():
    nation = Nation(blocks=2e6, cores=8, memory_gb=64.0)
    m = project_memory(500.0, 1500.0, 1e5, 1024.0, 4096.0, nation)
    assert m["driver_peak_gb"] == pytest.approx((500 + 1000 * 20) / 1024)
    assert m["machine_peak_gb"] == pytest.approx((500 + 20000 + 7 * 1024 + 4096) / 1024)
    assert m["fits"] == 1.0
    assert project_memory(500.0, 1500.0, 1e5, 1024.0, 4096.0, Nation(blocks=1e7))["fits"] == 0.0


def test_critical_path_uses_the_engines_own_task_timings_when_a_report_has_them():
    report = LevelReport("tract", 3, 12.0)
    report.tasks = [{"parents": 2, "children": 40, "seconds": 5.0, "cpu_seconds": 4.5},
                    {"parents": 1, "children": 131, "seconds": 9.0, "cpu_seconds": 8.0}]
    recorded = [{"kind": "batch", "release": "persons", "level_digits": 11, "parents": 9, "children": 9,
                 "seconds": 99.0, "cpu_seconds": 99.0}]  # ignored: the report has its own
    path = critical_path({"persons": [LevelReport("nation", 1, 0.5), report]}, recorded)
    assert path["persons nation"] == {"level_s": 0.5, "tasks": 1, "cpu_s": 0.5, "longest_task_s": 0.5,
                                      "longest_task_cpu_s": 0.5, "longest_task_parents": 1,
                                      "longest_task_children": 1}
    assert path["persons tract"] == {"level_s": 12.0, "tasks": 2, "cpu_s": 12.5, "longest_task_s": 9.0,
                                     "longest_task_cpu_s": 8.0, "longest_task_parents": 1,
                                     "longest_task_children": 131}
    # without `tasks` (the engine today), the recorded batches of that release and level stand in
    path = critical_path({"persons": [{"level": "tract", "parents": 3, "seconds": 120.0}]}, recorded)
    assert path["persons tract"]["longest_task_s"] == 99.0 and path["persons tract"]["tasks"] == 1


def test_national_steps_size_the_largest_task_from_the_real_largest_parent():
    def batch(level_digits, parents):
        cpu = sum(p["cpu_seconds"] for p in parents)
        return {"kind": "batch", "release": "persons", "level_digits": level_digits, "parents": len(parents),
                "children": sum(p["children"] for p in parents), "seconds": cpu, "cpu_seconds": cpu + 0.1,
                "parent_solves": parents}

    tracts = [{"children": c, "cpu_seconds": 0.01 * c, "peak_over_base_mb": 0.1 * c} for c in (10, 20, 40, 80)]
    states = [{"children": 9, "cpu_seconds": 0.9, "peak_over_base_mb": 5.0}]
    recorded = [batch(11, tracts), batch(2, states), {"kind": "chunk", "release": "persons", "seconds": 1.0,
                                                        "cpu_seconds": 0.5}]
    path = critical_path({"persons": [{"level": "state", "seconds": 1.0}, {"level": "tract", "seconds": 2.0}]},
                         recorded)
    nation = Nation(blocks=1e6, largest_children={"state": 51, "tract": 2000})
    steps = {s.name: s for s in national_steps(path, recorded, blocks=1e4, nation=nation)}
    assert steps["measure"].total_cpu_s == pytest.approx(50.0) and steps["measure"].largest_task_s == 0.5
    # tract: 0.01 s a child (exactly linear), plus the batch's reading, 0.1 s over 150 children
    assert steps["persons tract"].largest_task_s == pytest.approx(2000 * (0.01 + 0.1 / 150))
    assert steps["persons tract"].total_cpu_s == pytest.approx((1.5 + 0.1) * 100)
    # state: one parent, the nation, whatever the size of the country: the total is the largest task
    assert steps["persons state"].largest_task_s == pytest.approx(51 * (0.1 + 0.1 / 9))
    assert steps["persons state"].total_cpu_s == steps["persons state"].largest_task_s
    memory = national.largest_task_memory(recorded, nation)
    assert memory["persons tract"] == pytest.approx(0.1 * 2000)


@pytest.mark.skipif(not CENSUS.exists(), reason="needs ../shared/data/census2010")
def test_the_shipped_largest_sizes_are_those_of_the_census_files():
    found = largest_in_shipped(CENSUS)
    assert {level: children for level, (children, _) in found.items()} == LARGEST_SHIPPED
    assert found["tract"][1] == "blocks_2020_HI.parquet county 003"  # Honolulu (244 tracts in 2010)
    assert found["block"][1] == "blocks_2010_HI.parquet tract 001021202"


def test_recording_times_every_task_of_a_tiny_run(tmp_path):
    from das.driver.run import run

    records: list = []
    reports: dict = {}
    with recording_tasks(records, reports):
        result = run(ROOT / "specs" / "runs" / "tiny.toml", tmp_path / "out", seed=1, workers=1, progress=False)
    assert result.valid
    import das.topdown.engine

    assert das.topdown.engine.timed_solve_batch.__module__ == "das.topdown.batch"  # put back
    assert {r["kind"] for r in records} == {"chunk", "batch"}
    assert set(reports) == {"persons", "units"}
    batches = [r for r in records if r["kind"] == "batch"]
    assert all(r["seconds"] >= 0 and r["cpu_seconds"] >= 0 and r["release"] in reports for r in batches)
    # every parent of every batch was built and solved once, its children counted
    assert sum(len(r["parent_solves"]) for r in batches) == sum(r["parents"] for r in batches)
    assert all(sum(p["children"] for p in r["parent_solves"]) == r["children"] for r in batches)
    path = critical_path(reports, records)
    assert set(path) == {f"{release} {level}" for release in reports
                         for level in ("nation", "state", "county", "tract", "block_group", "block")}
    assert path["persons block"]["tasks"] >= 1 and path["persons block"]["longest_task_s"] > 0


def test_nation_sizes_are_the_documented_ones():
    nation = Nation()
    assert (nation.blocks, nation.persons, nation.cores, nation.memory_gb) == (8.1e6, 331e6, 64, 64.0)
    assert nation.largest_children == {"state": 51, "county": 254, "tract": 2346, "block": 1491}
    assert Path(national.__file__).name == "national.py"
