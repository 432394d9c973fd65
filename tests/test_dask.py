"""The Dask engine: a LocalCluster on 127.0.0.1 (no dashboard, no outside network) gives the local pool's seeded outputs."""

import shutil
import subprocess
import sys

import pytest

from das.executors import ordered_map
from das.run import run

pytest.importorskip("distributed")
from conftest import ROOT

from das.distributed import DaskExecutor  # noqa: E402


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
    code = "import sys, das.run, das.cli, das.executors; sys.exit('distributed' in sys.modules or 'dask' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], timeout=60).returncode == 0


def test_scheduler_without_dask_engine_is_refused(tmp_path):
    from das.run import RunError

    with pytest.raises(RunError, match="--scheduler needs --engine dask"):
        run("tiny", tmp_path / "x", seed=1, progress=False, scheduler="tcp://127.0.0.1:1")
    assert not (tmp_path / "x").exists()
