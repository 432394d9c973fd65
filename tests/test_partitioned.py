"""Partitioned runs (inputs as one file per state): the release is whole and valid, the same whatever the
workers, resumable without a second draw, and bad partitions are refused before any noise."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import ROOT, resume_recording_draws

from das.core.errors import InputError, RunError
from das.driver.run import measure_only, run
from das.frame import signing
from das.frame.checkpoint import file_sha256
from das.validate import validate_run

FIXTURES = ROOT / "geography_fixtures"
SEED = 7
STATES = {"01": "al_perry", "50": "vt_grand_isle"}  # two real counties of two states (730 blocks)


def two_states(tmp: Path) -> Path:
    """A partitioned input: Perry County AL as state 01 and Grand Isle County VT as state 50, one file each."""
    for name in ("persons", "units"):
        (tmp / name).mkdir(parents=True, exist_ok=True)
        for state, fixture in STATES.items():
            shutil.copy(FIXTURES / fixture / f"{name}.parquet", tmp / name / f"{name}_{state}.parquet")
    text = (ROOT / "specs/runs/al_perry.toml").read_text()
    text = text.replace("../../geography_fixtures/al_perry/persons.parquet", "persons")
    text = text.replace("../../geography_fixtures/al_perry/units.parquet", "units")
    (tmp / "spec.toml").write_text(text.replace('name = "al_perry"', 'name = "two_states"') + "\n[output]\npl94171 = true\n")
    return tmp / "spec.toml"


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("two_states")
    spec = two_states(tmp / "inputs")
    result = run(spec, tmp / "run", seed=SEED, workers=1, progress=False)
    return spec, result


def test_a_partitioned_release_is_whole_and_valid(reference):
    spec, result = reference
    assert result.valid, result.manifest.validation.violations
    out, manifest = result.out_dir, result.manifest
    inputs = {s: pq.read_metadata(FIXTURES / f / "persons.parquet").num_rows for s, f in STATES.items()}
    assert manifest.invariants.total_population == {"nation": {"": sum(inputs.values())}, "state": inputs}
    assert manifest.counts.persons == sum(inputs.values())
    persons = pd.read_parquet(out / "mdf_persons.parquet")
    assert persons.groupby("TABBLKST").size().to_dict() == inputs  # the state totals are invariants
    assert sorted(persons["EPNUM"]) == list(range(1, len(persons) + 1))
    # the nation and the states in one file per level; below them one file per state
    for release in ("persons", "units"):
        assert (out / f"nmf/{release}/nation.parquet").is_file() and (out / f"nmf/{release}/state.parquet").is_file()
        for level in ("county", "tract", "block_group", "block"):
            assert sorted(p.name for p in (out / f"nmf/{release}/{level}").iterdir()) == ["01.parquet", "50.parquet"]
    assert sorted(p.name[:2] for p in (out / "pl94171").glob("*geo2020.pl")) == ["al", "vt"]
    assert not (out / "checkpoints").exists()
    levels = [r.level for r in manifest.levels_report["persons"]]
    assert levels == ["nation", "state", "county", "tract", "block_group", "block"]
    assert validate_run(out).ok  # the validator, again, on its own
    # signed by the driver, last, with the release's own key: proved with its public half (PL 94-171 files included)
    assert signing.public_key_pem(signing.read_private_key(out / "operator" / "signing.key")) == \
        (out / "release.pub").read_bytes()
    assert validate_run(out, public_key=out / "release.pub").ok


@pytest.mark.parametrize("wide", [False, True])
def test_the_release_does_not_depend_on_the_workers(reference, tmp_path, monkeypatch, wide):
    """2 workers, each state on one slot, or (wide) each state solving on a pool of 2 of its own."""
    import das.driver.partitioned

    if wide:
        monkeypatch.setattr(das.driver.partitioned, "widths", lambda persons, executor: [2] * len(persons))
    spec, result = reference
    again = run(spec, tmp_path / "run", seed=SEED, workers=2, progress=False)
    assert again.manifest.outputs == result.manifest.outputs
    assert again.manifest.nmf == result.manifest.nmf


def _pid(_) -> int:
    return os.getpid()


def test_the_validator_shards_run_in_lasting_processes_of_a_fresh_pool():
    """A partitioned run's pool starts a process per state task; the validator's many shard tasks run on a pool of
    the same size whose processes serve them all (a new process per shard was a tenth of their CPU)."""
    from das.core.executors import InlineExecutor, PoolExecutor, lasting

    fresh = PoolExecutor(2, fresh=True)
    try:
        assert len({fresh.submit(_pid, None).result() for _ in range(4)}) == 4
        with lasting(fresh) as pool:
            assert pool is not fresh and pool.slots == 2 and not pool.fresh
            assert len({f.result() for f in [pool.submit(_pid, None) for _ in range(8)]}) <= 2
        assert pool.pool._shutdown_thread  # closed with the block
    finally:
        fresh.close()
    inline = InlineExecutor()
    with lasting(inline) as same:
        assert same is inline


def test_a_states_width_is_its_share_of_the_slots():
    from das.core.executors import InlineExecutor, PoolExecutor
    from das.driver.admission import widths

    class Pool:  # a PoolExecutor's attributes, without its processes
        slots, nests = 8, PoolExecutor.nests

    assert widths([60, 25, 10, 5], Pool()) == [4, 2, 1, 1]  # 8 x share, at least 1
    assert widths([100], Pool()) == [8]  # one state: every slot
    assert widths([60, 40], InlineExecutor()) == [1, 1]
    Pool.nests = False  # Dask: workers cannot start pools
    assert widths([60, 40], Pool()) == [1, 1]


def _streams(out: Path) -> tuple[set[str], set[str]]:
    """(NMF files complete, streams of committed chunks of unfinished files), partitioned layout."""
    files, streams = set(), set()
    for path in (out / "nmf").rglob("*.parquet"):
        files.add(str(path.relative_to(out / "nmf").with_suffix("")))
    for parts in (out / "nmf").rglob("*.parquet.parts"):
        if not (parts / "plan.json").exists():
            continue
        plan = json.loads((parts / "plan.json").read_text())
        where = parts.relative_to(out / "nmf").as_posix().removesuffix(".parquet.parts").split("/")
        release, level = where[0], where[1]
        state = f"s{where[2]}/" if len(where) == 3 else ""
        for part in parts.glob("*.nmfpart"):
            q, c = part.stem.split("-")
            streams.add(f"/{release}/{level}/{plan[int(q[1:])][0]}/{state}{int(c[1:])}")
    return files, streams


@pytest.mark.slow  # 3 cases of 10-20 s (a killed CLI run, then its resumption)
@pytest.mark.parametrize("point", ["measure:units:block#1", "solve:persons:block#1", "level:units:tract"])
def test_kill_and_resume_reuses_every_committed_draw(reference, tmp_path, monkeypatch, point):
    spec, result = reference
    out = tmp_path / "run"
    env = {**os.environ, "DAS_TEST_CRASH_AT": point, "DAS_BATCH_CHILDREN": "64"}
    proc = subprocess.run([sys.executable, "-m", "das.cli", "run", str(spec), "--out", str(out), "--seed", str(SEED),
                           "--workers", "2", "--no-progress"], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0, proc.stdout
    assert json.loads((out / "manifest.json").read_text())["status"] != "complete"
    assert not (out / "mdf_persons.parquet").exists()
    files, streams = _streams(out)
    assert {"persons/nation", "persons/state", "units/nation", "units/state"} <= files  # the top: drawn before the kill
    if point.startswith("measure"):
        assert streams, "a chunk of the units' blocks was committed before the kill"
    resumed, drawn = resume_recording_draws(out, monkeypatch)
    assert resumed.valid
    assert resumed.manifest.outputs == result.manifest.outputs
    assert resumed.manifest.nmf == result.manifest.nmf
    assert len(drawn) == len(set(drawn))
    for key in drawn:
        _, release, level, *rest = key.split("/")
        state = rest[1][1:] if rest[1].startswith("s") else None
        assert (f"{release}/{level}/{state}" if state else f"{release}/{level}") not in files, key
        assert key not in streams, f"{key}: committed before the kill, drawn again"


def _refused(spec: Path, out: Path, match: str, error=RunError, **settings) -> None:
    with pytest.raises(error, match=match):
        run(spec, out, seed=SEED, progress=False, **{"workers": 1, **settings})
    assert not (out / "nmf").exists() and not (out / "manifest.json").exists()  # nothing drawn, nothing written


def test_bad_partitions_are_refused_before_any_noise(tmp_path):
    spec = two_states(tmp_path / "a")
    (spec.parent / "units/units_50.parquet").rename(spec.parent / "units/units_02.parquet")
    _refused(spec, tmp_path / "out_a", r"state 02 has a units file .* but no persons file")

    spec = two_states(tmp_path / "b")  # a file named for state 01 holding Vermont
    for name in ("persons", "units"):
        (spec.parent / name / f"{name}_50.parquet").rename(spec.parent / name / f"{name}_01.parquet.tmp")
        (spec.parent / name / f"{name}_01.parquet").unlink()
        (spec.parent / name / f"{name}_01.parquet.tmp").rename(spec.parent / name / f"{name}_01.parquet")
    _refused(spec, tmp_path / "out_b", r"units_01.parquet: holds blocks of state\(s\) 50; the file is named for state 01")

    spec = two_states(tmp_path / "c")
    shutil.rmtree(spec.parent / "units")
    shutil.copy(FIXTURES / "al_perry/units.parquet", spec.parent / "units")
    _refused(spec, tmp_path / "out_c", "one is a directory and the other is not")

    spec = two_states(tmp_path / "d")
    (spec.parent / "persons/notes.txt").write_text("x")
    _refused(spec, tmp_path / "out_d", r"notes.txt: not a Parquet or CSV file")


def test_a_memory_budget_the_driver_and_workers_alone_exceed_is_refused_before_anything(reference, tmp_path):
    spec, _ = reference
    _refused(spec, tmp_path / "out", r"memory_gb=0.5 leaves nothing for the state tasks: the driver and 2 workers "
                                     r"need about 1.1 GB alone", workers=2, memory_gb=0.5)


def test_an_input_error_in_one_state_names_its_file_and_row(tmp_path):
    spec = two_states(tmp_path / "in")
    path = spec.parent / "persons/persons_50.parquet"
    table = pq.read_table(path)
    codes = table["CENHISP"].to_numpy().copy()
    codes[6] = 9  # row 7: not a code of CENHISP
    pq.write_table(table.set_column(table.schema.get_field_index("CENHISP"), "CENHISP", pa.array(codes, pa.int8())), path)
    with pytest.raises(InputError, match=r"persons_50.parquet row 7, column CENHISP: '9'"):
        run(spec, tmp_path / "out", seed=SEED, workers=2, progress=False)
    assert not (tmp_path / "out/nmf").exists()


def test_das_measure_writes_the_partitioned_nmf(reference, tmp_path):
    spec, result = reference
    manifest = measure_only(spec, tmp_path / "m", seed=SEED)
    assert manifest.status == "measured"
    assert manifest.nmf == result.manifest.nmf  # the same draws as the whole run's
    assert manifest.validation.valid, manifest.validation.violations  # levels one file per state: each state's


def test_seeded_streams_are_named_by_state():
    from das.topdown.measure import Target

    assert Target(Path("x"), state="50").stream("persons", "block", "detailed", 3) == "persons/block/detailed/s50/3"
    assert Target(Path("x")).stream("persons", "block", "detailed", 3) == "persons/block/detailed/3"


class _Slots:
    """An executor of `slots` threads that records, at each start, the persons of the tasks in flight."""

    def __init__(self, slots: int):
        import threading
        from concurrent.futures import ThreadPoolExecutor

        self.slots, self.pool, self.lock = slots, ThreadPoolExecutor(slots), threading.Lock()
        self.held, self.seen, self.started = 0, [], []

    def submit(self, fn, arg):
        with self.lock:
            self.held += arg
            self.seen.append(self.held)
            self.started.append(arg)
        return self.pool.submit(self._run, fn, arg)

    def _run(self, fn, arg):
        try:
            return fn(arg)
        finally:
            with self.lock:
                self.held -= arg

    def close(self):
        self.pool.shutdown()


def _slow_square(x):
    import time

    time.sleep(0.01 * (x % 7))
    return x * x


def test_state_tasks_start_largest_first_within_the_memory_budget():
    from das.core.executors import largest_first

    persons = [3, 9, 1, 7, 5, 2, 8, 4, 6, 10]
    executor = _Slots(3)
    results = largest_first(executor, _slow_square, persons, sizes=persons, limit=15)  # room for 9 + 6 at once, never 10 + 9
    executor.close()
    assert results == [p * p for p in persons]  # in the tasks' order
    assert executor.started == sorted(persons, reverse=True)  # largest first, never passed over
    assert all(held <= 15 or held == started for held, started in zip(executor.seen, executor.started))
    unlimited = _Slots(3)
    largest_first(unlimited, _slow_square, persons, sizes=persons)
    unlimited.close()
    assert max(unlimited.seen) > 15  # without a budget the same tasks run together


def test_the_validator_reads_no_mdf_geography_in_the_driver(reference, tmp_path, monkeypatch):
    """In a partitioned release every MDF row group holds one state: the states of the MDFs come from
    the row-group statistics (a state the manifest does not publish is still found) and the NMF levels
    stored whole (nation, state) are checked against the states, neither reading the MDFs' geography."""
    _, result = reference
    out = shutil.copytree(result.out_dir, tmp_path / "run")
    for name in ("mdf_persons.parquet", "mdf_units.parquet"):
        meta = pq.read_metadata(out / name)
        column = meta.schema.to_arrow_schema().get_field_index("TABBLKST")
        assert all(meta.row_group(g).column(column).statistics.min == meta.row_group(g).column(column).statistics.max
                   for g in range(meta.num_row_groups))
    iter_batches = pq.ParquetFile.iter_batches

    def no_geography(self, *args, columns=None, **kwargs):
        assert not columns or "TABBLKST" not in columns, "the driver read the MDF's geography"
        return iter_batches(self, *args, columns=columns, **kwargs)

    monkeypatch.setattr(pq.ParquetFile, "iter_batches", no_geography)
    assert validate_run(out).ok
    state_nmf = out / "nmf" / "persons" / "state.parquet"
    table = pq.read_table(state_nmf)
    pq.write_table(table.filter(pa.array(table.column("geocode").to_pandas().astype(str) == "01")), state_nmf)
    manifest = json.loads((out / "manifest.json").read_text())
    del manifest["invariants"]["total_population"]["state"]["50"]
    manifest["nmf"]["nmf/persons/state.parquet"] = file_sha256(state_nmf)
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1))
    violations = validate_run(out).violations
    assert "MDF units: valid codes, housing units vs facilities: state '50': units in the MDF, but the manifest " \
           "publishes no total population for it" in violations
    assert "MDF persons: in blocks of the release universe: state '50': persons in the MDF, but no units and no " \
           "published total population" in violations
    assert not [v for v in violations if v.startswith("NMF") and "nmf/persons/state.parquet" in v]
    manifest["invariants"]["total_population"]["state"]["50"] = 1
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1))
    assert [v for v in validate_run(out).violations if v.startswith("NMF") and "state.parquet" in v][0].startswith(
        "NMF: exactly the certified measurements: nmf/persons/state.parquet")


@pytest.mark.parametrize("where", ["persons", "units", "persons/deeper"])
def test_an_output_directory_inside_a_partitioned_input_directory_is_refused(tmp_path, where):
    from das.core.errors import OutDirError

    spec = two_states(tmp_path / "inputs")
    before = sorted(p.name for p in (spec.parent / "persons").rglob("*"))
    out = spec.parent / where / "run"
    for refuse in (lambda: run(spec, out, seed=SEED, workers=1, progress=False),
                   lambda: measure_only(spec, out, seed=SEED)):
        with pytest.raises(OutDirError, match=f"is inside {spec.parent / where.split('/')[0]}, an input"):
            refuse()
    assert not out.exists() and sorted(p.name for p in (spec.parent / "persons").rglob("*")) == before
