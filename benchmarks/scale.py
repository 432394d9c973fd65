"""Scale: `das run` on synthetic multi-state inputs (das.io.scale_inputs: VT/DE replicated under new state codes).

At 1, 2 and 4 state copies: wall and CPU seconds per 1000 blocks and per million persons, peak
memory of the driver and of the largest solver worker. The national projection is scale.national's
(benchmarks/national.py; method in docs/scale.md).
"""

from __future__ import annotations

import os
import resource
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path

from benchmarks._harness import Bench, process_tree

WORKERS = 2


def _cpu(who: int) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


POLLERS = ("(poll)", "(descendant_peaks)")  # memory pollers' thread names: scripts/bench's tree poller, ours
POLLER_PREFIX = "bench-poller "  # the threads started by `polling`: /proc readers, no work of das
_ENDED = {"cpu_s": 0.0, "read": 0, "written": 0}  # what `polling` threads that have ended used
_ENDED_LOCK = threading.Lock()
# every `polling` thread's id, added by the thread itself before it reads anything and kept after it ends: its
# /proc/self/task entry can outlive its place in threading.enumerate() by a moment after join()
POLLER_TIDS: set[int] = set()


def is_poller(thread: threading.Thread) -> bool:
    return thread.name.endswith(POLLERS) or thread.name.startswith(POLLER_PREFIX) or thread.native_id in POLLER_TIDS


def thread_io(path: str = "/proc/thread-self/io") -> tuple[int, int]:
    """(rchar, wchar) of a /proc io file: bytes a thread (task/N/io) or a process (N/io: with its ended threads and
    its reaped children) read and wrote through system calls."""
    try:
        fields = dict(line.split(": ") for line in Path(path).read_text().splitlines())
        return int(fields["rchar"]), int(fields["wchar"])
    except (OSError, KeyError, ValueError):
        return 0, 0


def _poller_body(fn, stop: threading.Event, *args) -> None:
    POLLER_TIDS.add(threading.get_native_id())
    try:
        fn(stop, *args)
    finally:  # a thread's /proc entry goes when it ends: what it used is kept here
        read, written = thread_io()
        with _ENDED_LOCK:
            _ENDED["cpu_s"] += time.thread_time()
            _ENDED["read"] += read
            _ENDED["written"] += written


@contextmanager
def polling(fn, *args):
    """`fn(stop, *args)` in a thread while the block runs, stopped and joined after; its CPU and bytes are the
    pollers' (`pollers_cpu`, `pollers_io`), not the driver's, during and after its life."""
    stop = threading.Event()
    poller = threading.Thread(target=_poller_body, args=(fn, stop, *args), daemon=True,
                              name=f"{POLLER_PREFIX}{getattr(fn, '__name__', 'poll')}")
    poller.start()
    try:
        yield
    finally:
        stop.set()
        poller.join()


def _live_pollers() -> list[int]:
    return [t.native_id for t in threading.enumerate() if is_poller(t) and t.native_id]


def pollers_cpu() -> float:
    """CPU seconds of this process's polling threads so far (live: /proc/self/task; ended: what they kept), to take
    out of the driver's: they read /proc every 50-500 ms, a few per cent of a core that is no work of das."""
    total = _ENDED["cpu_s"]
    for tid in _live_pollers():
        try:
            fields = Path(f"/proc/self/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime
    return total


def pollers_io() -> tuple[int, int]:
    """Bytes this process's polling threads read and wrote so far (/proc, not das)."""
    read, written = _ENDED["read"], _ENDED["written"]
    for tid in _live_pollers():
        r, w = thread_io(f"/proc/self/task/{tid}/io")
        read, written = read + r, written + w
    return read, written


def _reset_peak_rss() -> bool:
    """Linux: reset this process's peak RSS (VmHWM) so a stage's own peak can be read."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def _peak_rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _process_table(root: int) -> dict[int, tuple[int, float, float]]:
    """pid -> (parent pid, VmRSS MB, VmHWM MB) of every process below `root` (benchmarks._harness.process_tree)."""
    table = {}
    for pid in process_tree(root):
        try:
            text = Path(f"/proc/{pid}/status").read_text()
            fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
            table[pid] = (int(fields["PPid"]), int(fields.get("VmRSS", "0 kB").split()[0]) / 1024,
                          int(fields.get("VmHWM", "0 kB").split()[0]) / 1024)
        except (OSError, KeyError, ValueError):
            continue
    return table


def descendant_peaks(stop: threading.Event, peaks: dict, every: float = 0.25) -> None:
    """Poll every descendant of this process (pool workers, their own children, Dask's nanny and workers): each
    one's VmHWM (peak RSS of its own image, reset at exec) under its pid, and the largest sum of their current RSS
    under "workers_tree_mb".

    ru_maxrss of children cannot be used: Linux carries the pre-exec (forked) image's peak over
    exec, so every spawned worker would report at least the driver's size when it was started.
    """
    me = os.getpid()
    while True:
        table = _process_table(me)
        tree = set(table)
        for pid in tree:
            peaks[str(pid)] = max(peaks.get(str(pid), 0.0), table[pid][2])
        peaks["workers_tree_mb"] = max(peaks.get("workers_tree_mb", 0.0), sum(table[pid][1] for pid in tree))
        if stop.wait(every):
            return


def watching_descendants(peaks: dict):
    """`descendant_peaks` polling into `peaks` while the block runs (a poller thread, stopped and joined after)."""
    return polling(descendant_peaks, peaks)


@contextmanager
def _driver_cpu_by_stage(figures: dict):
    """Driver CPU seconds (process_time) and, on Linux, peak RSS of each stage of das.run, into figures."""
    from das.driver import run
    from das.driver.pipeline import Pipeline

    # figure name -> (owner, attribute): the pipeline's stages and the run's validation
    stages = {"read_confidential": (Pipeline, "read_inputs"), "measure_all": (Pipeline, "measure"),
              "postprocess": (Pipeline, "postprocess"), "write_outputs": (Pipeline, "write_outputs"),
              "validate_run": (run, "validate_run")}
    originals = {name: getattr(owner, attr) for name, (owner, attr) in stages.items()}
    overall = [0.0]

    def timed(name, fn):
        def wrapper(*args, **kwargs):
            before = _peak_rss_mb()  # the work since the previous stage
            figures[f"before_{name}_driver_peak_mb"] = max(figures.get(f"before_{name}_driver_peak_mb", 0.0), before)
            overall[0] = max(overall[0], before)
            peaks = _reset_peak_rss()
            t0 = time.process_time() - pollers_cpu()
            try:
                return fn(*args, **kwargs)
            finally:
                key = f"{name}_driver_cpu_s"
                figures[key] = figures.get(key, 0.0) + time.process_time() - pollers_cpu() - t0
                if peaks:
                    peak = _peak_rss_mb()
                    figures[f"{name}_driver_peak_mb"] = max(figures.get(f"{name}_driver_peak_mb", 0.0), peak)
                    overall[0] = max(overall[0], peak)
                    _reset_peak_rss()
        return wrapper

    for name, fn in originals.items():
        setattr(*stages[name], timed(name, fn))
    try:
        yield
    finally:
        for name, fn in originals.items():
            setattr(*stages[name], fn)
        figures["run_driver_peak_mb"] = max(overall[0], _peak_rss_mb())


def run_states(states: int, workers: int = WORKERS, engine: str = "local") -> dict:
    """One seeded `das run` of `states` state copies; figures per block, per person and per process."""
    from das.driver.run import run
    from das.frame.bundle import read_process
    from das.io.scale_inputs import write_synthetic

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        counts = write_synthetic(tmp / "input", states)
        self0, children0 = _cpu(resource.RUSAGE_SELF) - pollers_cpu(), _cpu(resource.RUSAGE_CHILDREN)
        stages: dict = {}
        children: dict = {}
        t0 = time.perf_counter()
        with watching_descendants(children), _driver_cpu_by_stage(stages):
            result = run(tmp / "input" / "spec.toml", tmp / "out", seed=2020, workers=workers, progress=False,
                         engine=engine)
        seconds = time.perf_counter() - t0
        driver_cpu = _cpu(resource.RUSAGE_SELF) - pollers_cpu() - self0
        workers_tree_mb = children.pop("workers_tree_mb", float("nan"))
        worker_cpu = _cpu(resource.RUSAGE_CHILDREN) - children0
        process = read_process(tmp / "out")  # run times are the operator's, never in the manifest
        nmf_mb = sum(p.stat().st_size for p in (tmp / "out" / "nmf").rglob("*.parquet")) / 2**20
    blocks, persons = counts["blocks"], counts["persons"]
    figures = {
        "states": float(states), "blocks": float(blocks), "persons": float(persons), "valid": float(result.valid),
        "seconds": seconds,
        "s_per_1000_blocks": seconds / blocks * 1000,
        "s_per_million_persons": seconds / persons * 1e6,
        "cpu_s": driver_cpu + worker_cpu, "driver_cpu_s": driver_cpu, "worker_cpu_s": worker_cpu,
        "cpu_ms_per_block": (driver_cpu + worker_cpu) / blocks * 1000,
        "driver_peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,  # incl. writing the input
        "worker_peak_rss_mb": max(children.values(), default=float("nan")),  # the largest worker's own peak
        "workers_tree_peak_mb": workers_tree_mb,  # every descendant together, at their largest
        "workers_seen": float(len(children)),
        "nmf_mb": nmf_mb,
        **stages,
    }
    # the driver's serial work outside validation (reading, truth, NMF assembly, batches, MDF and tables)
    figures["driver_cpu_without_validate_s"] = driver_cpu - stages.get("validate_run_driver_cpu_s", 0.0)
    for key, value in process["timings_seconds"].items():
        figures[f"{key}_s"] = value
    for r in process["levels"]["persons"]:
        figures[f"persons_{r['level']}_s"] = r["seconds"]
    return figures


def run_1_state() -> dict:
    return run_states(1)


def run_2_states() -> dict:
    return run_states(2)


def run_4_states() -> dict:
    return run_states(4)


_TARGET = "worker peak memory flat across sizes; cost per block flat (no worse than linear)"
BENCHES = [
    Bench("scale.states_1", f"das run on 1 state copy (VT, 18.7k blocks), {WORKERS} workers, seeded: cost per block "
          "and peak memory of the driver and of a solver worker", run_1_state, key="s_per_1000_blocks",
          repeats=1, target=_TARGET),
    Bench("scale.states_2", f"das run on 2 state copies (VT + DE under new codes, 36.6k blocks), {WORKERS} workers",
          run_2_states, key="s_per_1000_blocks", repeats=1, target=_TARGET),
    Bench("scale.states_4", f"das run on 4 state copies (VT, DE, VT, DE under new codes, 73.2k blocks), {WORKERS} "
          "workers", run_4_states, key="s_per_1000_blocks", repeats=1, target=_TARGET),
]
