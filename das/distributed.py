"""Dask distributed executor (`pip install das[dask]`): the same tasks as the local pool, on a cluster.

`das run SPEC --engine dask --scheduler tcp://HOST:8786` sends the per-parent problems and the
measurement chunks to an existing Dask cluster; without `--scheduler` a LocalCluster of
`--workers` single-threaded worker processes starts on 127.0.0.1 with no dashboard (no outside
network). Tasks are pure functions of their arguments and every random stream is keyed by its
(release, level, query, chunk), so seeded results equal the local pool's. Dask is imported here
only, when this engine is asked for.
"""

from __future__ import annotations

from collections.abc import Callable


class DaskUnavailable(RuntimeError):
    """The dask engine was asked for but dask[distributed] is not installed."""


class DaskExecutor:
    """submit/close over a dask.distributed Client; owns the LocalCluster it starts, if any."""

    def __init__(self, scheduler: str | None = None, workers: int = 2, processes: bool = True):
        try:
            from dask.distributed import Client, LocalCluster
        except ImportError as e:  # the base install has no dask
            raise DaskUnavailable("--engine dask needs dask[distributed]: pip install 'das[dask]'") from e
        self.cluster = None
        if scheduler:
            self.client = Client(scheduler, set_as_default=False)
        else:
            network = {"host": "127.0.0.1"} if processes else {}  # threads talk in process, no sockets at all
            self.cluster = LocalCluster(n_workers=max(1, workers), threads_per_worker=1, processes=processes,
                                        dashboard_address=None, worker_dashboard_address=None, **network)
            self.client = Client(self.cluster, set_as_default=False)
        self.slots = max(1, sum(self.client.nthreads().values()))

    def submit(self, fn: Callable, arg):
        return self.client.submit(fn, arg, pure=False)

    def wait_first(self, futures: list) -> list:
        """Those of `futures` that are done, waiting until at least one is."""
        from dask.distributed import wait

        with self.client.as_current():  # wait looks for the current client; ours is not the default one
            return list(wait(futures, return_when="FIRST_COMPLETED").done)

    def close(self) -> None:
        self.client.close()
        if self.cluster is not None:
            self.cluster.close()
