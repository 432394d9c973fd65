"""The national projection from a big state's figures (benchmarks/projection.py): every term listed and summed,
the critical path a floor of the state that holds the largest county, the cluster's divisible work spread."""

import pytest

from benchmarks.projection import (
    CLUSTER,
    LARGEST_COUNTIES,
    MACHINE,
    PARENT_EXPONENT,
    critical_paths,
    disk_rate,
    project,
    project_from,
    rates,
    validation_paths,
)


def _figures(**changes) -> dict:
    f = {"persons": 1e6, "driver_cpu_s": 3.0, "read_cpu_s": 0.5, "states_cpu_s": 1.0, "validate_cpu_s": 0.5,
         "assemble_cpu_s": 0.5, "top_measure_cpu_s": 0.1, "top_solve_cpu_s": 0.1, "driver_peak_mb": 400.0,
         "bytes_read": 1e9, "bytes_written": 5e8, "driver_bytes_read": 1e8, "driver_bytes_written": 1e8,
         "state_A_cpu_s": 2.0, "state_B_cpu_s": 40.0, "state_C_cpu_s": 8.0, "state_V_cpu_s": 6.0,
         "state_A_kb_per_person": 0.3, "state_B_kb_per_person": 0.3, "state_C_kb_per_person": 0.2,
         "state_V_kb_per_person": 0.6, "persons_county_cpu_s": 1.0, "persons_tract_cpu_s": 5.0,
         "persons_block_cpu_s": 25.0, "units_tract_cpu_s": 1.0, "units_block_cpu_s": 4.0,
         "persons_tract_largest_task_s": 100.0, "persons_tract_largest_children": 2400.0,
         "persons_block_group_largest_task_s": 2.0, "persons_block_largest_task_s": 5.0, "largest_parent_peak_mb": 2300.0,
         "largest_parent_children": 2400.0, "state_V_seconds": 3.0, "largest_county_tracts": 2400.0,
         "persons_block_batches": 100.0}
    return {**f, **changes}


@pytest.mark.parametrize("target", [MACHINE, CLUSTER])
def test_every_term_is_listed_and_summed(target):
    out = project(rates(_figures()), target)
    terms = [f"stage_{s}_s" for s in "ABCV"] + [f"serial_{n}_s" for n in ("top", "driver", "io", "dask_tasks")]
    assert out["h"] * 3600 == pytest.approx(sum(out[t] for t in terms))
    # the workers' bytes are inside their tasks' measured seconds: the driver's own (200 a person) are serial
    assert out["serial_io_s"] == pytest.approx(200 * sum(target.persons_m.values()) * 1e6 / (target.disk_gb_s * 1e9))
    assert out["fits"] == 1.0 and out["largest_task_gb"] < target.memory_gb_per_worker


def test_the_largest_countys_chain_is_a_floor_of_its_states_measurement_and_solve():
    paths = critical_paths(rates(_figures()))
    la = 100.0 * (LARGEST_COUNTIES["Los Angeles CA"][1] / 2400) ** PARENT_EXPONENT + 7.0
    assert paths["CA"] == pytest.approx(la) and set(paths) == {"CA", "IL", "TX", "AZ"}
    slow = project(rates(_figures(persons_tract_largest_task_s=5000.0)), MACHINE)
    fast = project(rates(_figures()), MACHINE)
    assert slow["stage_B_largest_s"] >= 2.0 / 1e6 * 39.54e6 + 5000.0  # CA's reading, then LA's chain
    assert slow["stage_B_s"] > fast["stage_B_s"] and slow["critical_path_s"] > 5000.0


def test_the_clusters_divisible_work_spreads_over_every_core():
    r = rates(_figures(persons_tract_largest_task_s=1.0, persons_block_largest_task_s=0.1))
    small = project(r, CLUSTER)
    double = project(r, type(CLUSTER)("x", workers=16, cores_per_worker=16, memory_gb_per_worker=32.0))
    assert double["stage_B_s"] < small["stage_B_s"]


def test_the_one_machine_is_projected_at_the_disk_rate_measured_here(tmp_path):
    slow = project_from({**_figures(), "disk_gb_s": 0.1})
    fast = project_from({**_figures(), "disk_gb_s": 10.0})
    assert slow["national_machine_serial_io_s"] == pytest.approx(100 * fast["national_machine_serial_io_s"])
    assert slow["national_cluster_serial_io_s"] == fast["national_cluster_serial_io_s"]  # its storage: assumed
    rate = disk_rate(tmp_path, gb=0.07)
    assert 0 < rate < 1000 and not list(tmp_path.iterdir())  # measured, and its file removed


def test_validation_spreads_over_its_shards_and_waits_for_the_largest_county():
    """A state's validation is shards of whole counties run as tasks: on many cores it takes its largest county's
    shard (grown in tracts from the measured one), not the state's CPU on one core."""
    r = rates(_figures(state_V_seconds=30.0))
    codes, persons = ["CA", "VT"], [39.5e6, 0.64e6]
    la = 30.0 * LARGEST_COUNTIES["Los Angeles CA"][1] / 2400  # above any other state's shard of 2M (12 s)
    assert validation_paths(r, codes, persons) == pytest.approx([la, 6.0 / 1e6 * 0.64e6])
    out = project(r, CLUSTER)
    assert out["stage_V_largest_s"] == pytest.approx(la)  # 6 us a person spread over 128 cores: CA's LA shard holds it
    one_core = project(r, type(CLUSTER)("x", workers=1, cores_per_worker=1, memory_gb_per_worker=1024.0))
    assert one_core["stage_V_s"] == pytest.approx(6.0 / 1e6 * sum(CLUSTER.persons_m.values()) * 1e6, rel=1e-6)


def test_the_assembly_is_serial_for_its_wall_time_and_the_rest_of_the_driver_for_its_cpu():
    """The files are assembled side by side in threads: the serial term takes the assembly's wall seconds (CPU
    seconds above them are other cores'), and the driver's other work (here 3.0 - 0.5 - 1.0 - 0.5) its CPU."""
    threaded = rates(_figures(assemble_s=0.3, assemble_cpu_s=0.6))
    assert threaded["serial_per_person"] == pytest.approx((0.3 + 0.5 + 1.0) / 1e6)
