"""The Dask engine: a LocalCluster on 127.0.0.1 (no dashboard, no outside network) gives the local pool's seeded outputs."""

import shutil
import subprocess
import sys

import pytest

from das.core.executors import ordered_map
from das.driver.run import run

pytest.importorskip("distributed")
from conftest import ROOT

from das.core.distributed import DaskExecutor  # noqa: E402


def _square(x: int) -> int:
    return x * x


def test_ordered_map_on_a_threaded_local_cluster_keeps_order():
    executor = DaskExecutor(workers=2, processes=False)
    try:
        assert executor.slots == 2
        assert list(ordered_map(executor, _square, iter(range(50)), in_flight=3)) == [x * x for x in range(50)]
    finally:
        executor.close()


@pytest.mark.slow  # > 10 s (20-40 s on 2 loaded cores)
def test_dask_local_cluster_matches_the_local_pool(tmp_path):
    """Perry County AL, seeded: measurement chunks and per-parent problems on 2 Dask worker processes."""
    for name in ("persons", "units"):
        shutil.copy(ROOT / f"geography_fixtures/al_perry/{name}.parquet", tmp_path / f"{name}.parquet")
    spec = (ROOT / "specs/runs/tiny.toml").read_text().replace("../../geography_fixtures/tiny/", "")
    (tmp_path / "spec.toml").write_text(spec.replace(".csv", ".parquet"))
    local = run(tmp_path / "spec.toml", tmp_path / "local", seed=11, workers=2, progress=False)
    dask = run(tmp_path / "spec.toml", tmp_path / "dask", seed=11, workers=2, progress=False,
               engine="dask")
    assert local.valid and dask.valid
    assert dask.manifest.engine.to_dict() == {"engine": "dask", "workers": 2}
    assert dask.manifest.nmf == local.manifest.nmf
    assert dask.manifest.outputs == local.manifest.outputs
    assert dask.manifest.failsafe_events == local.manifest.failsafe_events


def test_base_install_does_not_import_dask():
    code = ("import sys, das.driver.run, das.cli, das.core.executors; "
            "sys.exit('distributed' in sys.modules or 'dask' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code], timeout=60).returncode == 0


def test_scheduler_without_dask_engine_is_refused(tmp_path):
    from das.core.errors import RunError

    with pytest.raises(RunError, match="scheduler= needs engine=dask"):
        run("tiny", tmp_path / "x", seed=1, progress=False, scheduler="tcp://127.0.0.1:1")
    assert not (tmp_path / "x").exists()


class _Places:
    """An executor of `slots` threads on named places that records, at each start, what each place holds."""

    def __init__(self, slots: int):
        import threading
        from concurrent.futures import ThreadPoolExecutor

        self.slots, self.pool, self.lock = slots, ThreadPoolExecutor(slots), threading.Lock()
        self.held: dict = {}
        self.starts: list = []  # (place, its tasks' sizes in flight after the start)

    def submit(self, fn, arg, place=None):
        with self.lock:
            self.held.setdefault(place, []).append(arg)
            self.starts.append((place, list(self.held[place])))
        return self.pool.submit(self._run, fn, arg, place)

    def _run(self, fn, arg, place):
        import time

        time.sleep(0.005 * (arg % 5))
        try:
            return fn(arg)
        finally:
            with self.lock:
                self.held[place].remove(arg)

    def close(self):
        self.pool.shutdown()


def test_state_tasks_are_admitted_by_each_workers_own_memory():
    from das.core.executors import largest_first

    sizes = [3, 9, 1, 7, 5, 2, 8, 4, 6, 12]
    executor = _Places(4)
    budgets = {"w1": 10.0, "w2": 16.0}
    results = largest_first(executor, _square, sizes, sizes=sizes, places=budgets)
    executor.close()
    assert results == [s * s for s in sizes]
    assert [s for _, held in executor.starts for s in held[-1:]] == sorted(sizes, reverse=True)  # largest first
    for place, held in executor.starts:  # within the worker's own budget, or alone on it
        assert sum(held) <= budgets[place] or len(held) == 1, (place, held)
    assert {place for place, _ in executor.starts} == {"w1", "w2"}


class _Where:
    """A scheduler plugin recording the worker each finished task ran on, by its function's name."""

    def __init__(self):
        self.ran: dict[str, set] = {}

    def transition(self, key, start, finish, *args, **kwargs):
        from dask.utils import key_split

        if finish == "memory" and kwargs.get("worker"):
            self.ran.setdefault(key_split(key), set()).add(kwargs["worker"])


@pytest.mark.slow  # about 60-90 s on 2 loaded cores
def test_a_partitioned_run_on_a_local_cluster_equals_the_local_pools_and_spreads_each_state(tmp_path):
    """Two states, seeded: the local pool of 2 against a Dask LocalCluster of 2 worker processes, on which every
    state task submits its own chunks and batches of parents back to the cluster (both workers solve them)."""
    from dask.distributed import LocalCluster
    from distributed.diagnostics.plugin import SchedulerPlugin
    from test_partitioned import two_states

    spec = two_states(tmp_path / "inputs")
    local = run(spec, tmp_path / "local", seed=7, workers=2, progress=False)
    with LocalCluster(n_workers=2, threads_per_worker=1, host="127.0.0.1", dashboard_address=None,
                      worker_dashboard_address=None) as cluster:
        where = type("Where", (_Where, SchedulerPlugin), {})()
        cluster.scheduler.add_plugin(where)
        dask = run(spec, tmp_path / "dask", seed=7, workers=2, progress=False, engine="dask",
                   scheduler=cluster.scheduler_address)
    assert local.valid and dask.valid
    assert dask.manifest.nmf == local.manifest.nmf
    assert dask.manifest.outputs == local.manifest.outputs
    assert len(where.ran.get("timed_solve_batch", ())) == 2, where.ran  # a state's parents on both workers
    assert where.ran.get("released"), where.ran  # the state tasks, each giving its memory back
