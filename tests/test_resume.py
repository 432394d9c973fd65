"""Checkpoints and resume: kill -9 at chosen and at random points, resume, compare with an uninterrupted run.

Seeded mode makes a redraw invisible in the outputs (same stream, same noise), so every resume
here also records the random streams it draws from and checks that none was committed before.
"""

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from fractions import Fraction
from pathlib import Path

import pandas as pd
import pytest
from conftest import ROOT, disk_full_at, resume_recording_draws

import das.io.nmf
import das.topdown.measure
from das.core.errors import OutDirError, RunError
from das.driver.run import resume_run, run
from das.frame.bundle import read_process

FIXTURES = ROOT / "geography_fixtures"
SEED = 7


def _spec(tmp: Path, fixture: str) -> Path:
    """A copy of the tiny spec over a copy of `fixture`'s files in tmp (so inputs can be changed)."""
    tmp.mkdir(parents=True, exist_ok=True)
    suffix = "csv" if fixture == "tiny" else "parquet"
    for name in ("persons", "units"):
        shutil.copy(FIXTURES / fixture / f"{name}.{suffix}", tmp / f"{name}.{suffix}")
    text = (ROOT / "specs/runs/tiny.toml").read_text().replace("../../geography_fixtures/tiny/", "")
    text = text.replace("persons.csv", f"persons.{suffix}").replace("units.csv", f"units.{suffix}")
    (tmp / "spec.toml").write_text(text.replace('name = "tiny"', f'name = "{fixture}"'))
    return tmp / "spec.toml"


@pytest.fixture(scope="module")
def county(tmp_path_factory):
    """Perry County AL (511 blocks): its spec and an uninterrupted seeded reference run."""
    tmp = tmp_path_factory.mktemp("perry")
    spec = _spec(tmp / "inputs", "al_perry")
    reference = run(spec, tmp / "reference", seed=SEED, workers=1, progress=False)
    assert reference.valid
    return spec, reference.manifest.to_dict()


def _same_content(manifest: dict, reference: dict) -> None:
    assert manifest["status"] == "complete" and manifest["validation"]["valid"]
    assert manifest["outputs"] == reference["outputs"]  # MDF and tables, byte for byte
    assert manifest["nmf"] == reference["nmf"]
    assert manifest["failsafe_events"] == reference["failsafe_events"]
    assert manifest["privacy"] == reference["privacy"]  # the certificate: the original's cost
    # nothing public says the run was interrupted (when, or what it had done by then): the operator's record does
    assert {k: v for k, v in manifest.items() if k != "engine"} == {k: v for k, v in reference.items() if k != "engine"}


def _cli_run(spec: Path, out: Path, crash: str | None = None, batch_children: int = 64) -> subprocess.Popen:
    env = {**os.environ, "DAS_BATCH_CHILDREN": str(batch_children)}
    env.pop("DAS_TEST_CRASH_AT", None)
    if crash:
        env["DAS_TEST_CRASH_AT"] = crash
    return subprocess.Popen([sys.executable, "-m", "das.cli", "run", str(spec), "--out", str(out), "--seed", str(SEED),
                             "--workers", "2", "--no-progress"], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)


def _committed_streams(out: Path) -> tuple[set[str], set[str]]:
    """(levels whose NMF file is complete, streams of committed chunks of unfinished levels) per release."""
    levels, streams = set(), set()
    for release_dir in (out / "nmf").iterdir():
        for f in release_dir.glob("*.parquet"):
            levels.add(f"{release_dir.name}/{f.stem}")
        for parts in release_dir.glob("*.parquet.parts"):
            level = parts.name.removesuffix(".parquet.parts")
            if (release_dir / f"{level}.parquet").is_file():  # complete: killed while its parts were being removed
                continue
            if not (parts / "plan.json").exists():  # killed between the mkdir and the plan: no chunk committed
                assert not list(parts.glob("*.nmfpart"))
                continue
            plan = json.loads((parts / "plan.json").read_text())
            for part in parts.glob("*.nmfpart"):
                q, c = part.stem.split("-")
                streams.add(f"/{release_dir.name}/{level}/{plan[int(q[1:])][0]}/{int(c[1:])}")
    return levels, streams


def _resume_recording_draws(out: Path, monkeypatch) -> tuple[dict, list[str]]:
    result, drawn = resume_recording_draws(out, monkeypatch)
    return result.manifest.to_dict(), drawn


def _no_second_draw(levels: set[str], streams: set[str], drawn: list[str]) -> None:
    assert len(drawn) == len(set(drawn)), "a stream was drawn twice in the resumed run"
    for key in drawn:
        _, release, level, *_ = key.split("/")
        assert f"{release}/{level}" not in levels, f"{key}: its level was already complete in the NMF"
        assert key not in streams, f"{key}: this chunk was committed before the kill and drawn again"


@pytest.mark.slow  # 5 cases of 15-30 s on 2 loaded cores
@pytest.mark.parametrize("point, drawn_on_resume", [
    ("measure:persons:block#3", True),    # during measurement: 3 chunks of the block level committed
    ("solve:persons:block#2", False),     # mid-level: 2 batches of block parents solved
    ("level:persons:tract", False),       # between levels: tract solved and checkpointed, block not started
])
def test_kill_and_resume_gives_identical_output_without_redrawing(county, tmp_path, monkeypatch, point,
                                                                  drawn_on_resume):
    spec, reference = county
    out = tmp_path / "run"
    proc = _cli_run(spec, out, crash=point)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == -signal.SIGKILL, err
    before = json.loads((out / "manifest.json").read_text())
    assert before["status"] == "running"  # killed: nothing says complete
    assert not (out / "mdf_persons.parquet").exists()
    levels, streams = _committed_streams(out)
    if point.startswith("measure"):
        assert len(streams) >= 3  # 3 seen by the driver, maybe more committed by workers before they exited
    if point.startswith("solve"):
        assert len(list((out / "checkpoints/persons/block.parts").glob("b*.npz"))) == 2

    manifest, drawn = _resume_recording_draws(out, monkeypatch)
    _same_content(manifest, reference)
    _no_second_draw(levels, streams, drawn)
    assert bool(drawn) == drawn_on_resume
    record = read_process(out)["interruptions"][0]
    assert record["previous_status"] == "running"
    if point.startswith("measure"):
        block = record["measurement"]["persons"]["block"]
        assert block["reused_chunks"] == len(streams) and block["drawn_chunks"] > 0
    if point.startswith("solve"):
        assert record["found"]["persons"]["solved_batches"] == {"block": 2}
    assert not (out / "checkpoints").exists()  # removed once the outputs are complete


def test_a_run_stopped_by_an_error_in_post_processing_resumes_without_drawing(county, tmp_path, monkeypatch, capsys):
    """An error of das's own after the noise was drawn (the infinite duality gap that stopped vt_demo's root with an
    OverflowError, issue 41) is a clean stop: RunStopped (rc 1 from the CLI) saying how to continue, nothing
    released; the fixed code then resumes from the NMF, drawing nothing, to the uninterrupted run's release."""
    import das.topdown.optimality
    from das.cli import main
    from das.core.errors import RunStopped

    spec, reference = county
    out = tmp_path / "run"

    def overflow(value, grid):
        raise OverflowError("cannot convert float infinity to integer")

    with monkeypatch.context() as broken:
        broken.setattr(das.topdown.optimality, "on_grid", overflow)
        with pytest.raises(RunStopped, match="das run --resume") as stopped:
            run(spec, out, seed=SEED, workers=1, progress=False)
        assert isinstance(stopped.value.__cause__, OverflowError)
        assert main(["run", "--resume", str(out), "--workers", "1", "--no-progress"]) == 1
        err = capsys.readouterr().err
        assert "OverflowError" in err and f"das run --resume {out}" in err and "Traceback" not in err
    before = json.loads((out / "manifest.json").read_text())
    assert before["status"] == "interrupted" and not (out / "mdf_persons.parquet").exists()
    assert "OverflowError" in read_process(out)["error"]  # the operator's record says why
    manifest, drawn = _resume_recording_draws(out, monkeypatch)
    _same_content(manifest, reference)
    assert drawn == []  # every level was measured before the stop


def test_batching_and_workers_leave_the_manifest_unchanged(county, tmp_path):
    """The CLI's batches of 64 parents on two workers (how an interrupted run's checkpointed levels were solved) and
    the reference's one worker give the same manifest: a level's certificate sums are exact (optimality.on_grid), where
    they once differed in the last bit and so told a resumed run from an uninterrupted one."""
    spec, reference = county
    out = tmp_path / "run"
    proc = _cli_run(spec, out)
    assert proc.wait(timeout=300) == 0
    _same_content(json.loads((out / "manifest.json").read_text()), reference)


def test_kill_at_a_random_moment_then_resume(county, tmp_path, monkeypatch):
    """A real kill -9 from outside, at a random moment after measurement has started."""
    spec, reference = county
    out = tmp_path / "run"
    proc = _cli_run(spec, out)
    deadline = time.monotonic() + 60
    while not (out / "nmf").exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(random.Random().uniform(0.0, 2.0))
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=60)
    before = json.loads((out / "manifest.json").read_text())
    levels, streams = _committed_streams(out)
    manifest, drawn = _resume_recording_draws(out, monkeypatch)
    _same_content(manifest, reference)
    _no_second_draw(levels, streams, drawn)
    if before["status"] != "complete":
        assert read_process(out)["interruptions"][0]["previous_status"] == "running"


def test_torn_measurement_chunk_is_discarded_and_recorded(county, tmp_path, monkeypatch):
    """A chunk whose write was cut (never renamed) is deleted unread, drawn anew, and named in the manifest."""
    spec, reference = county
    out = tmp_path / "run"
    proc = _cli_run(spec, out, crash="measure:persons:block#2")
    proc.communicate(timeout=120)
    parts = out / "nmf/persons/block.parquet.parts"
    torn = parts / "q002-c0000000.nmfpart.partial"
    torn.write_bytes(b"PAR1 cut short")
    manifest, drawn = _resume_recording_draws(out, monkeypatch)
    _same_content(manifest, reference)
    block = read_process(out)["interruptions"][0]["measurement"]["persons"]["block"]
    assert block["torn_chunks_discarded"] == [torn.name]
    assert block["reused_chunks"] >= 2


@pytest.fixture
def tiny(tmp_path):
    return _spec(tmp_path / "inputs", "tiny")


@pytest.mark.slow  # > 10 s (20-40 s on 2 loaded cores)
def test_a_directory_is_never_continued_by_another_run(tiny, tmp_path):
    out = tmp_path / "run"
    proc = _cli_run(tiny, out, crash="level:persons:county")
    proc.communicate(timeout=120)
    with pytest.raises(OutDirError, match="unfinished run of 'tiny'.*--resume"):
        run(tiny, out, seed=SEED, progress=False)  # a fresh run into it: refused
    other = _spec(tmp_path / "other", "al_perry")
    with pytest.raises(RunError, match="belongs to another run: the run spec differs"):
        resume_run(out, spec_path=other, progress=False)
    with pytest.raises(RunError, match="seed 8 differs"):
        resume_run(out, seed=8, progress=False)
    persons = tiny.parent / "persons.csv"
    original = persons.read_bytes()
    persons.write_bytes(original.replace(b"\n", b"\r\n", 1))  # same data, other bytes: still refused
    with pytest.raises(RunError, match="persons input changed"):
        resume_run(out, progress=False)
    persons.write_bytes(original)
    with pytest.raises(RunError, match="manifest.json not found"):
        resume_run(tmp_path / "nothing-here", progress=False)
    code = subprocess.run([sys.executable, "-m", "das.cli", "run", str(other), "--out", str(out)],
                          capture_output=True, text=True, timeout=60)
    assert code.returncode == 2 and "not empty" in code.stderr
    assert resume_run(out, progress=False).valid  # the rightful owner continues


def test_disk_full_ends_clearly_and_resumably(tiny, tmp_path, monkeypatch):
    reference = run(tiny, tmp_path / "reference", seed=SEED, progress=False).manifest.to_dict()
    out, original = tmp_path / "run", das.io.nmf.write_part
    disk_full_at(5, monkeypatch)
    with pytest.raises(RunError, match=r"disk full .*das run --resume"):
        run(tiny, out, seed=SEED, progress=False)
    assert json.loads((out / "manifest.json").read_text())["status"] == "interrupted"
    assert "No space left" in read_process(out)["error"]  # the operator's record, never the manifest
    monkeypatch.setattr(das.io.nmf, "write_part", original)
    manifest = resume_run(out, progress=False).manifest.to_dict()
    _same_content(manifest, reference)
    process = read_process(out)
    assert process["interruptions"][0]["previous_status"] == "interrupted" and process["error"] is None


def test_unreadable_input_on_resume_leaves_the_run_resumable(tiny, tmp_path):
    out = tmp_path / "run"
    proc = _cli_run(tiny, out, crash="level:persons:state")
    proc.communicate(timeout=120)
    persons = tiny.parent / "persons.csv"
    persons.rename(persons.with_suffix(".moved"))
    before = (out / "manifest.json").read_text()
    code = subprocess.run([sys.executable, "-m", "das.cli", "run", "--resume", str(out)],
                          capture_output=True, text=True, timeout=60)
    assert code.returncode == 2 and "persons.csv" in code.stderr and "not found" in code.stderr
    assert (out / "manifest.json").read_text() == before  # untouched
    persons.with_suffix(".moved").rename(persons)
    assert resume_run(out, progress=False).valid


@pytest.mark.slow  # > 10 s (20-40 s on 2 loaded cores)
def test_partial_outputs_never_look_complete(tiny, tmp_path):
    out = tmp_path / "run"
    proc = _cli_run(tiny, out, crash="outputs")
    proc.communicate(timeout=120)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "running" and "outputs" not in manifest
    assert not (out / "tables").exists()
    assert not list(out.rglob("*.partial"))  # nothing half-written under a final name either
    mdf = pd.read_parquet(out / "mdf_persons.parquet")  # what exists is whole
    assert len(mdf) == 145
    assert resume_run(out, progress=False).valid


def test_a_resume_with_another_command_line_budget_is_refused(tmp_path):
    from das.driver.runspec import Budget

    out = tmp_path / "run"
    assert run("tiny", out, seed=SEED, workers=1, progress=False, budget=Budget(rho=Fraction(1, 2))).valid
    manifest = (out / "manifest.json").read_text()
    with pytest.raises(RunError, match=r"the run spec differs .*--rho, --eps or --delta counts: give the same"):
        resume_run(out, spec_path="tiny", budget=Budget(rho=Fraction(1, 3)), progress=False)
    with pytest.raises(RunError, match="the run spec differs"):
        resume_run(out, spec_path="tiny", progress=False)
    assert (out / "manifest.json").read_text() == manifest


def test_das_measure_stopped_by_an_error_of_its_own_stops_cleanly_and_resumes(tiny, tmp_path, monkeypatch):
    """The rule of `das run` holds for `das measure`: an error of das's own while drawing is a RunStopped naming how
    to continue, the directory marked interrupted; `das run --resume` then finishes it, never redrawing a committed
    measurement."""
    from das.core.errors import RunStopped
    from das.driver.run import measure_only

    out = tmp_path / "measured"
    original, calls = das.topdown.measure.discrete_gaussian, []

    def failing(variance, n, stream):
        calls.append(stream.key)
        if len(calls) == 5:
            raise ZeroDivisionError("a bug in the sampler")
        return original(variance, n, stream)

    with monkeypatch.context() as broken:
        broken.setattr(das.topdown.measure, "discrete_gaussian", failing)
        with pytest.raises(RunStopped, match=f"das run --resume {out}") as stopped:
            measure_only(tiny, out, seed=SEED)
    assert isinstance(stopped.value.__cause__, ZeroDivisionError)
    assert json.loads((out / "manifest.json").read_text())["status"] == "interrupted"
    levels, streams = _committed_streams(out)
    result, drawn = resume_recording_draws(out, monkeypatch)
    assert result.valid
    _no_second_draw(levels, streams, drawn)
