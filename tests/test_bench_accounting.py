"""The benchmarks' accounting (benchmarks/scale.py, benchmarks/big_state.py): what the pollers use is theirs after
they end, and a reaped child's bytes are the workers', not the driver's, though Linux adds them to its parent's."""

import subprocess
import sys
import time

from benchmarks.big_state import counting_io
from benchmarks.scale import pollers_cpu, pollers_io, polling

MB = 1 << 20


def _busy(stop, seconds: float, path) -> None:
    path.read_bytes()
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass
    stop.wait()


def test_an_ended_pollers_cpu_and_bytes_stay_the_pollers(tmp_path):
    data = tmp_path / "data"
    data.write_bytes(b"x" * (4 * MB))
    cpu0, (read0, _) = pollers_cpu(), pollers_io()
    with polling(_busy, 0.3, data):
        time.sleep(0.05)
    assert pollers_cpu() - cpu0 >= 0.25
    assert pollers_io()[0] - read0 >= 4 * MB


def test_a_reaped_childs_bytes_are_the_workers_and_the_drivers_own_are_its_own(tmp_path):
    child, own = tmp_path / "child", tmp_path / "own"
    child.write_bytes(b"c" * (16 * MB))
    own.write_bytes(b"d" * (3 * MB))
    figures: dict = {}
    with counting_io(figures):
        subprocess.run([sys.executable, "-c", f"open({str(child)!r}, 'rb').read()"], check=True)
        own.read_bytes()
        with polling(_busy, 0.0, child):  # a poller's reads are nobody's
            pass
    assert 3 * MB <= figures["driver_bytes_read"] < 4 * MB
    assert 16 * MB <= figures["workers_bytes_read"] < 40 * MB  # the child's file and its interpreter's start
    assert figures["bytes_read"] == figures["driver_bytes_read"] + figures["workers_bytes_read"]


def test_the_process_tree_is_every_descendant_and_its_memory(monkeypatch):
    """The tree walked down /proc's children lists is the one every process's parent gives (the fallback), a
    grandchild included, and its resident memory counts a child holding 64 MB."""
    import os

    import benchmarks._harness as harness

    holder = subprocess.Popen([sys.executable, "-c", "import subprocess, sys, time; b = bytearray(64 << 20); "
                               "c = subprocess.Popen(['sleep', '30']); print(c.pid, flush=True); time.sleep(30)"],
                              stdout=subprocess.PIPE, text=True)
    grandchild = None
    try:
        grandchild = int(holder.stdout.readline())
        walked = harness.process_tree(os.getpid())
        assert {holder.pid, grandchild} <= walked
        assert harness.rss_kb(holder.pid) >= 64 << 10
        assert harness.tree_rss_kb() >= harness.rss_kb(os.getpid()) + (64 << 10)
        monkeypatch.setattr(harness, "_children", lambda pid: None)  # a kernel without children lists
        assert harness.process_tree(os.getpid()) == walked
    finally:
        if grandchild:
            os.kill(grandchild, 9)
        holder.kill()
        holder.wait()
