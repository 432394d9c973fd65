"""Where independent tasks run: in process, on a local process pool, or on Dask (das.core.distributed).

An executor has `submit(fn, arg) -> future` (a future has `.result()`), `slots` (tasks that can
run at once) and `close()`. `ordered_map` feeds it lazily with a bounded number of tasks in
flight and yields results in input order, so a level's problems are never all in memory.
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from contextlib import contextmanager
from multiprocessing import get_context

from das.core.errors import ArgumentError, option
from das.core.memory import keep_freed_memory
from das.core.progress import bar

IN_FLIGHT_PER_SLOT = 4


def limit_threads() -> None:
    """One BLAS/OpenMP thread per worker process: parallelism comes from the tasks."""
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = "1"


def _worker_init(parent: int) -> None:
    """Limit threads, keep freed memory for reuse, and exit when the run that started this worker is gone
    (killed with -9, say)."""
    limit_threads()
    keep_freed_memory()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(1)

    threading.Thread(target=watch, daemon=True).start()


class InlineExecutor:
    """Runs each task in this process when submitted (workers = 1)."""

    slots = 1

    def submit(self, fn: Callable, arg) -> Future:
        future: Future = Future()
        future.set_result(fn(arg))
        return future

    def close(self) -> None:
        pass


class PoolExecutor:
    """A spawn-started local process pool, one solver thread per process. Its workers may start pools of
    their own (`nests`): a large state of a partitioned run solves on several slots."""

    nests = True

    def __init__(self, workers: int, fresh: bool = False):
        """fresh: every task in a new process (a partitioned run's state tasks: each worker's memory is then
        its one state's, not what earlier states left in the process's heap)."""
        self.slots, self.fresh = workers, fresh
        self.pool = ProcessPoolExecutor(workers, mp_context=get_context("spawn"), initializer=_worker_init,
                                        initargs=(os.getpid(),), max_tasks_per_child=1 if fresh else None)

    def submit(self, fn: Callable, arg) -> Future:
        return self.pool.submit(fn, arg)

    def close(self) -> None:
        self.pool.shutdown()


@contextmanager
def lasting(executor):
    """`executor` for many smaller tasks: a local pool of the same size whose processes serve every task, in place
    of a fresh one (a new process per task). The validator's shards of a large state are such tasks: in new
    processes their imports and the first touch of their memory were a tenth of their CPU. Any other executor is
    itself."""
    if not (isinstance(executor, PoolExecutor) and executor.fresh):
        yield executor
        return
    pool = PoolExecutor(executor.slots)
    try:
        yield pool
    finally:
        pool.close()


def local_executor(workers: int, fresh: bool = False):
    return PoolExecutor(workers, fresh) if workers > 1 else InlineExecutor()


def make_executor(engine: str = "local", workers: int = 1, scheduler: str | None = None, fresh: bool = False):
    """`local` (a process pool of `workers`, or in process for 1; `fresh`: a new process per task) or `dask`
    (a scheduler address or a local cluster; `fresh`: each task's memory given back when it ends). This
    process keeps its freed memory for reuse from now on (das.core.memory.keep_freed_memory), as the pool's workers do."""
    keep_freed_memory()
    if engine == "local":
        if scheduler:
            raise ArgumentError(f"{option('scheduler')} needs {option('engine', 'dask')}")
        return local_executor(workers, fresh)
    if engine == "dask":
        from das.core.distributed import DaskExecutor

        return DaskExecutor(scheduler=scheduler, workers=workers, fresh=fresh)
    raise ValueError(f"unknown engine {engine!r}: expected 'local' or 'dask'")


def first_done(executor, futures: list) -> list:
    """Those of `futures` (submitted to `executor`) that are done, waiting until at least one is."""
    if hasattr(executor, "wait_first"):
        return executor.wait_first(futures)
    return list(wait(futures, return_when=FIRST_COMPLETED).done)


def ordered_map(executor, fn: Callable, items: Iterable, in_flight: int | None = None) -> Iterator:
    """fn over items on the executor, in order, with at most `in_flight` tasks submitted and not yet yielded."""
    limit = in_flight or max(1, IN_FLIGHT_PER_SLOT * getattr(executor, "slots", 1))
    pending: deque = deque()
    for item in items:
        pending.append(executor.submit(fn, item))
        if len(pending) >= limit:
            yield pending.popleft().result()
    while pending:
        yield pending.popleft().result()


def largest_first(executor, fn: Callable, tasks: list, *, sizes: list[float], limit: float | None = None,
                  widths: list[int] | None = None, places: dict[str, float] | None = None,
                  desc: str | None = None) -> list:
    """fn over tasks on the executor, the largest (by `sizes`) first, results in the tasks' order.

    Task i takes widths[i] slots (default 1: it may start a pool of its own that wide); tasks start
    while the slots of those in flight fit the executor's, and with a `limit` only while their sizes
    sum to at most it (a memory budget in the sizes' unit). With `places` (a budget per place, e.g.
    each Dask worker's own memory, in the same unit) a task also starts only on a place whose tasks in
    flight leave room for it, the one with the most room, or on a place where nothing runs
    (`executor.submit(fn, arg, place)`). The largest waiting task goes next, never passed over by
    smaller ones, and a task alone always starts. With `desc`, a progress bar counts the tasks done
    (weighted by their sizes, so its estimate follows the work) on a terminal.
    """
    with bar(total=float(sum(sizes)), desc=desc or "", shown=desc is not None, leave=False,
             bar_format="{desc}: {percentage:3.0f}%|{bar}| [{elapsed}<{remaining}]") as progress:
        return _largest_first(executor, fn, tasks, sizes=sizes, limit=limit, widths=widths, places=places,
                              progress=progress)


def _largest_first(executor, fn: Callable, tasks: list, *, sizes, limit, widths, places, progress) -> list:
    slots = getattr(executor, "slots", 1)
    widths = widths or [1] * len(tasks)
    waiting = sorted(range(len(tasks)), key=lambda i: -sizes[i])
    found, running, held, busy = {}, {}, 0.0, 0
    room = dict(places) if places else None
    while waiting or running:
        while waiting and (not running or busy + widths[waiting[0]] <= slots
                           and (limit is None or held + sizes[waiting[0]] <= limit)):
            i = waiting[0]
            place = _place(room, places, sizes[i])
            if place is None and room is not None:
                break  # no worker has room for it now: wait for one to finish
            waiting.pop(0)
            future = executor.submit(fn, tasks[i]) if place is None else executor.submit(fn, tasks[i], place)
            running[future] = (i, place)
            held, busy = held + sizes[i], busy + widths[i]
            if place is not None:
                room[place] -= sizes[i]
        for future in first_done(executor, list(running)):
            i, place = running.pop(future)
            found[i] = future.result()
            held, busy = held - sizes[i], busy - widths[i]
            if place is not None:
                room[place] += sizes[i]
            progress.update(float(sizes[i]))
    return [found[i] for i in range(len(tasks))]


def _place(room: dict[str, float] | None, places: dict[str, float] | None, size: float) -> str | None:
    """The place with the most room left, if the task fits there or nothing runs there (a task alone on a
    place always starts); None without places, or without room."""
    if not room:
        return None
    best = max(room, key=lambda p: room[p])
    return best if room[best] >= size or room[best] >= places[best] else None
