"""Dask distributed executor (`pip install das[dask]`): the same tasks as the local pool, on a cluster.

`das run SPEC --engine dask --scheduler tcp://HOST:8786` sends the per-parent problems and the
measurement chunks to an existing Dask cluster; without `--scheduler` a LocalCluster of
`--workers` single-threaded worker processes starts on 127.0.0.1 with no dashboard (no outside
network). Tasks are pure functions of their arguments and every random stream is keyed by its
(release, level, query, chunk), so seeded results equal the local pool's. Dask is imported here
only, when this engine is asked for. A run given a scheduler waits up to WORKERS_WAIT_S for its first
worker and is then refused: tasks sent to a scheduler without workers would wait there forever.

A partitioned run's state task runs on one worker and `spreads` its own work: inside the task,
`TaskClient` submits the state's measurement chunks and batches of parents back to the cluster
(the task's thread leaves the worker's pool while it waits), so one large state uses every
worker. The driver admits a state task to a worker by that worker's own memory limit
(`memory_limits_mb`, das.core.executors.largest_first's `places`), and with `fresh` every task gives
its memory back to the system when it ends (Dask workers live on; the local pool starts a new
process per state task instead).
"""

from __future__ import annotations

from collections.abc import Callable

from das.core.errors import RunError, option
from das.core.memory import hand_back_memory, keep_freed_memory

WORKERS_WAIT_S = 120  # how long a run waits for the first worker of a scheduler it is given


class DaskUnavailable(RunError):
    """The dask engine was asked for but dask[distributed] is not installed."""


def released(fn: Callable, arg):
    """fn(arg), then the process's freed memory handed back to the system (glibc's malloc_trim): what a
    long-lived Dask worker keeps of a state task is then its live objects, not its peak heap. While the task
    runs, freed memory is kept for reuse (das.core.memory.keep_freed_memory)."""
    keep_freed_memory()
    try:
        return fn(arg)
    finally:
        hand_back_memory()


class DaskExecutor:
    """submit/close over a dask.distributed Client; owns the LocalCluster it starts, if any.

    `fresh`: every task runs through `released`. `spreads`: a partitioned run's state tasks submit their
    own chunks and batches to this cluster (`TaskClient`)."""

    spreads = True

    def __init__(self, scheduler: str | None = None, workers: int = 2, processes: bool = True, fresh: bool = False):
        try:
            from dask.distributed import Client, LocalCluster
        except ImportError as e:  # the base install has no dask
            raise DaskUnavailable(f"{option('engine', 'dask')} needs dask[distributed]: pip install 'das[dask]'") from e
        self.cluster = None
        self.fresh = fresh
        if scheduler:
            self.client = Client(scheduler, set_as_default=False)
            _wait_for_a_worker(self.client, scheduler)
        else:
            network = {"host": "127.0.0.1"} if processes else {}  # threads talk in process, no sockets at all
            self.cluster = LocalCluster(n_workers=max(1, workers), threads_per_worker=1, processes=processes,
                                        dashboard_address=None, worker_dashboard_address=None, **network)
            self.client = Client(self.cluster, set_as_default=False)
        self.slots = max(1, sum(self.client.nthreads().values()))

    def submit(self, fn: Callable, arg, place: str | None = None):
        """fn(arg) on the cluster; on worker `place` only, if given (a task admitted by that worker's memory)."""
        where = {} if place is None else {"workers": [place], "allow_other_workers": False}
        if self.fresh:
            return self.client.submit(released, fn, arg, pure=False, **where)
        return self.client.submit(fn, arg, pure=False, **where)

    def memory_limits_mb(self) -> dict[str, float | None]:
        """Each worker's own memory limit (MB; None: the worker has none) by its address."""
        try:
            workers = self.client.scheduler_info(n_workers=-1)["workers"]  # every worker, not the first few
        except TypeError:  # before dask 2025: always every worker
            workers = self.client.scheduler_info()["workers"]
        return {address: (info.get("memory_limit") or 0) / 2**20 or None for address, info in workers.items()}

    def wait_first(self, futures: list) -> list:
        """Those of `futures` that are done, waiting until at least one is."""
        return _wait_first(self.client, futures)

    def close(self) -> None:
        self.client.close()
        if self.cluster is not None:
            self.cluster.close()


def _wait_for_a_worker(client, scheduler: str) -> None:
    """Return once `scheduler` has a worker: tasks sent to a scheduler without one would wait forever, silently."""
    try:
        client.wait_for_workers(1, timeout=WORKERS_WAIT_S)
    except TimeoutError:  # dask raises a subclass of it (asyncio.TimeoutError is TimeoutError on Python 3.11+)
        client.close()
        raise RunError(f"{option('scheduler', scheduler)}: the Dask scheduler has no worker after {WORKERS_WAIT_S} s; "
                       f"start the workers first (`dask worker {scheduler}`, docs/scale.md)") from None


def _wait_first(client, futures: list) -> list:
    from dask.distributed import wait

    with client.as_current():  # wait looks for the current client; ours is not the default one
        return list(wait(futures, return_when="FIRST_COMPLETED").done)


class TaskClient:
    """An executor from inside a Dask task: the cluster the task runs on (`get_client`). While it is open the
    task's thread has left its worker's pool (`secede`), so the tasks it submits, and others, can run there;
    `close` takes the thread back (`rejoin`)."""

    def __init__(self):
        from dask.distributed import get_client, secede

        self.client = get_client()
        self.slots = max(1, sum(self.client.nthreads().values()))
        secede()

    def submit(self, fn: Callable, arg):
        return self.client.submit(fn, arg, pure=False)

    def wait_first(self, futures: list) -> list:
        return _wait_first(self.client, futures)

    def close(self) -> None:
        from dask.distributed import rejoin

        rejoin()
