"""Dask as an operator starts it (docs/scale.md, "Running on a real cluster with shared storage"): a scheduler and two
worker processes from the `dask` command line, outside the test's process, then `das run --engine dask --scheduler`
on a partitioned input. The release is the local pool's, and it validates."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("distributed")
from conftest import ROOT
from test_partitioned import two_states

SEED = 7
WAIT_S = 120  # for the scheduler's address and the workers' registration; a run gets RUN_S
RUN_S = 600
# The workers run the das under test (an editable install gives the same path), one BLAS thread per task thread.
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
       "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def dask_command(*argv: str) -> list[str]:
    """`dask ARGV...`: the entry point `pip install 'das[dask]'` puts beside this Python, else the same as a module."""
    script = Path(sys.executable).with_name("dask")
    return [str(script), *argv] if script.is_file() else [sys.executable, "-m", "dask", *argv]


class OperatorCluster:
    """A scheduler and worker processes, each started in a process group of its own (a nanny's worker process
    joins it), so that `stop` ends every process it started and nothing else."""

    def __init__(self, tmp: Path):
        self.tmp, self.processes, self.client = tmp, {}, None
        tmp.mkdir(parents=True, exist_ok=True)

    def start(self, name: str, argv: list[str]) -> None:
        with open(self.tmp / f"{name}.log", "wb") as log:
            self.processes[name] = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=ENV,
                                                    cwd=self.tmp, start_new_session=True)

    def logs(self) -> str:
        return "\n".join(f"--- {name}\n" + (self.tmp / f"{name}.log").read_text()[-3000:] for name in self.processes)

    def check_alive(self) -> None:
        for name, process in self.processes.items():
            if process.poll() is not None:
                pytest.fail(f"{name} exited with {process.returncode}\n{self.logs()}")

    def address(self) -> str:
        """The scheduler's address, from the file it writes once it listens."""
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            self.check_alive()
            try:
                return json.loads((self.tmp / "scheduler.json").read_text())["address"]
            except (FileNotFoundError, json.JSONDecodeError, KeyError):  # not yet, or half written
                time.sleep(0.2)
        pytest.fail(f"no scheduler address within {WAIT_S} s\n{self.logs()}")

    def ready(self, workers: int) -> str:
        """The scheduler's address once `workers` workers have registered with it."""
        from distributed import Client

        address = self.address()
        self.client = Client(address, timeout=WAIT_S, set_as_default=False)
        deadline = time.monotonic() + WAIT_S
        while len(self.client.scheduler_info()["workers"]) < workers:
            self.check_alive()
            if time.monotonic() > deadline:
                pytest.fail(f"{workers} workers not registered within {WAIT_S} s\n{self.logs()}")
            time.sleep(0.2)
        return address

    def stop(self) -> list[str]:
        """End every process group started here (SIGTERM, then SIGKILL after 30 s); the names of groups left."""
        if self.client is not None:
            self.client.close()
        for process in self.processes.values():
            _signal_group(process.pid, signal.SIGTERM)
        for process in self.processes.values():
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                _signal_group(process.pid, signal.SIGKILL)
                process.wait(timeout=30)
        deadline = time.monotonic() + 30
        left = [name for name, p in self.processes.items() if _signal_group(p.pid, 0)]
        while left and time.monotonic() < deadline:  # a nanny's worker process may outlive its nanny briefly
            time.sleep(0.2)
            for name in left:
                _signal_group(self.processes[name].pid, signal.SIGKILL)
            left = [name for name in left if _signal_group(self.processes[name].pid, 0)]
        return left


def _signal_group(pgid: int, signum: int) -> bool:
    """Send `signum` to process group `pgid`; False if the group has no process left."""
    try:
        os.killpg(pgid, signum)
        return True
    except ProcessLookupError:
        return False


@pytest.fixture
def operator_cluster(tmp_path):
    """docs/scale.md step 3 on 127.0.0.1: `dask scheduler` and two `dask worker` commands (two machines of one
    core each), the dashboard and HTTP endpoints on free local ports; every process ended at teardown."""
    cluster = OperatorCluster(tmp_path / "cluster")
    try:
        cluster.start("scheduler", dask_command(
            "scheduler", "--host", "127.0.0.1", "--port", "0", "--dashboard-address", "127.0.0.1:0",
            "--scheduler-file", str(cluster.tmp / "scheduler.json"), "--idle-timeout", "900"))
        address = cluster.address()
        for worker in ("worker1", "worker2"):
            cluster.start(worker, dask_command(
                "worker", address, "--host", "127.0.0.1", "--dashboard-address", "127.0.0.1:0",
                "--nworkers", "1", "--nthreads", "1", "--memory-limit", "2GB",
                "--local-directory", str(cluster.tmp / worker), "--death-timeout", "120"))
        yield cluster
    finally:
        left = cluster.stop()
        assert not left, f"processes left running: {left}"


def das_run(spec: Path, out: Path, *options: str, seed: int = SEED) -> dict:
    """`das run SPEC --out OUT --seed SEED OPTIONS` as a user types it; the release's manifest."""
    done = subprocess.run([sys.executable, "-m", "das.cli", "run", str(spec), "--out", str(out), "--seed", str(seed),
                           "--no-progress", *options], env=ENV, capture_output=True, text=True, timeout=RUN_S)
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads((out / "manifest.json").read_text())


@pytest.mark.slow  # 51 s measured (call 48.6 s + teardown 2.6 s), nice 19 on 2 cores at load 3.3: two runs of 15-20 s
def test_a_partitioned_release_on_a_cluster_started_as_the_docs_say_is_the_local_pools(operator_cluster, tmp_path):
    spec = two_states(tmp_path / "inputs")
    local = das_run(spec, tmp_path / "local", "--workers", "2")  # while the workers start
    address = operator_cluster.ready(workers=2)
    dask = das_run(spec, tmp_path / "dask", "--engine", "dask", "--scheduler", address)
    assert dask["engine"] == {"engine": "dask", "workers": 2}  # the two workers' threads
    assert dask["nmf"] == local["nmf"] and dask["outputs"] == local["outputs"]  # every file's digest
    assert {k: v for k, v in dask.items() if k != "engine"} == {k: v for k, v in local.items() if k != "engine"}
    assert dask["validation"]["valid"], dask["validation"]["violations"]
    executed = operator_cluster.client.run(lambda dask_worker: dask_worker.state.executed_count)
    assert len(executed) == 2 and all(executed.values()), executed  # both workers ran tasks of the release
    checked = subprocess.run([sys.executable, "-m", "das.cli", "validate", str(tmp_path / "dask")], env=ENV,
                             capture_output=True, text=True, timeout=RUN_S)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_a_scheduler_without_workers_is_refused_not_waited_on_forever(monkeypatch):
    """Step 4 typed before any `dask worker` has registered: a clear error after WORKERS_WAIT_S, not a silent hang
    (the state tasks would wait in the scheduler's queue for a worker that never comes)."""
    from dask.distributed import LocalCluster

    from das.core import distributed
    from das.core.errors import RunError

    monkeypatch.setattr(distributed, "WORKERS_WAIT_S", 1, raising=False)  # raising: before the fix, no such wait
    with LocalCluster(n_workers=0, processes=False, dashboard_address=None) as empty:
        started = time.monotonic()
        with pytest.raises(RunError, match=rf"scheduler={empty.scheduler_address}: the Dask scheduler has no worker after 1 s"):
            distributed.DaskExecutor(scheduler=empty.scheduler_address)
        assert time.monotonic() - started < 30
