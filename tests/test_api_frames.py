"""DataFrames everywhere in das's Python API (das/api/studies.py, das/api/__init__.py's attack): a release made from
DataFrames is scored against truth given as DataFrames, exactly as against the same truth as files; without its
truth it is refused, saying so; the attack and the studies take DataFrames; `Study.open` refuses what is not one."""

import json

import pandas as pd
import pytest
from conftest import TINY, cli_refused

import das
from das.attack.data import AttackError
from das.core.errors import InputError, StudyError

FILES = (TINY / "persons.csv", TINY / "units.csv")


@pytest.fixture(scope="module")
def frames():
    return tuple(pd.read_csv(path, dtype=str) for path in FILES)


@pytest.fixture(scope="module")
def frame_release(frames, tmp_path_factory):
    """A seeded release of tiny made from DataFrames (its recorded input paths: temporary files, gone)."""
    persons, units = frames
    return das.run("tiny", persons=persons, units=units, out=tmp_path_factory.mktemp("frames") / "r", seed=7,
                   workers=1, progress=False)


def test_a_release_made_from_dataframes_is_scored_against_truth_dataframes_as_against_files(frames, frame_release,
                                                                                              tmp_path):
    from_frames = das.metrics(frame_release, truth=frames, out=tmp_path / "frames")
    from_files = das.metrics(frame_release, truth=FILES, out=tmp_path / "files")
    assert len(from_files.metrics) > 0
    for name in ("metrics", "bias", "stats", "errors"):
        pd.testing.assert_frame_equal(from_frames.frame(name), from_files.frame(name))
    assert from_frames.meta["status"] == "complete" and from_frames.meta["rhos"] == from_files.meta["rhos"]


def test_a_release_made_from_dataframes_without_its_truth_says_so(frame_release, tmp_path, capsys):
    with pytest.raises(StudyError) as refused:
        das.metrics(frame_release, out=tmp_path / "m")
    message = str(refused.value)
    assert "made from pandas DataFrames (persons and units)" in message
    assert "give its truth" in message and "truth=(persons, units)" in message
    assert "das-inputs-" not in message and not (tmp_path / "m").exists()
    printed = cli_refused(["metrics", str(frame_release.path), "--out", str(tmp_path / "c")], capsys)
    assert "made from pandas DataFrames" in printed and "--truth PERSONS UNITS" in printed


def test_a_release_made_from_files_is_still_scored_against_its_own_inputs(tmp_path):
    release = das.run("tiny", out=tmp_path / "r", seed=7, workers=1, progress=False)
    assert das.metrics(release, estimators=("topdown",)).meta["kind"] == "run"


def test_truth_dataframes_are_read_by_the_validating_reader(frames, frame_release, tmp_path):
    persons, units = frames
    bad = persons.copy()
    bad.loc[2, "CENRACE"] = "99"
    with pytest.raises(InputError, match="the persons DataFrame row 3, column CENRACE: '99' is not valid"):
        das.metrics(frame_release, truth=(bad, units), out=tmp_path / "m")
    with pytest.raises(das.ArgumentError, match=r"truth= takes a pair \(persons, units\)") as refused:
        das.metrics(frame_release, truth=persons, out=tmp_path / "m")
    assert "rows x" in str(refused.value) and "TABBLKST" not in str(refused.value)  # a table said by its shape


def test_the_attack_takes_its_truth_as_a_dataframe(frames, frame_release, tmp_path):
    persons, _ = frames
    small = dict(published=frame_release.path, count=3, runs=2, relaxed=30, steps=20, ip_top=0, workers=1)
    from_frame = das.attack(truth=persons, out=tmp_path / "frame", **small)
    from_file = das.attack(truth=FILES[0], out=tmp_path / "file", **small)
    assert from_frame.geounits == from_file.geounits and from_frame.match_rate == from_file.match_rate
    other = persons[persons["TABBLKCOU"] == "001"]  # a truth that misses a county of the release
    with pytest.raises(AttackError) as refused:
        das.attack(truth=other, out=tmp_path / "other", **small)
    assert "the truth DataFrame does not cover" in str(refused.value) and "das-inputs-" not in str(refused.value)


def test_replicate_takes_its_input_as_dataframes(frames, tmp_path):
    persons, units = frames
    small = dict(runs=1, seed=4, estimators=("topdown",), queries=("total",))
    from_frames = das.replicate("tiny", persons=persons, units=units, out=tmp_path / "frames", **small)
    from_files = das.replicate("tiny", out=tmp_path / "files", **small)
    pd.testing.assert_frame_equal(from_frames.metrics, from_files.metrics)


def test_study_open_reads_a_finished_study(frame_release, frames, tmp_path):
    made = das.metrics(frame_release, truth=frames, out=tmp_path / "m")
    for study in (das.Study.open(tmp_path / "m"), das.Study.open(str(tmp_path / "m")), das.Study(str(tmp_path / "m"))):
        assert study.meta == made.meta == json.loads((tmp_path / "m" / "study.json").read_text())
        pd.testing.assert_frame_equal(study.metrics, made.metrics)


def test_study_open_refuses_what_is_not_a_study(frame_release, frames, tmp_path):
    (tmp_path / "empty").mkdir()
    (tmp_path / "stranger").mkdir()
    (tmp_path / "stranger" / "notes.txt").write_text("mine")
    das.metrics(frame_release, truth=frames, out=tmp_path / "unfinished")
    record = json.loads((tmp_path / "unfinished" / "das-output.json").read_text())
    (tmp_path / "unfinished" / "das-output.json").write_text(json.dumps({**record, "status": "running"}))
    refusals = {
        tmp_path / "missing": "does not exist: expected a directory written by das.replicate, das.metrics or das.compare",
        FILES[0]: "is a file, not a directory",
        frame_release.path: "is a release, not a study: open it with das.Release.open",
        tmp_path / "empty": "is empty: expected a directory written by das.replicate",
        tmp_path / "stranger": "holds no das study",
        tmp_path / "unfinished": "the das metrics there did not finish (status 'running')",
    }
    for path, expected in refusals.items():
        for opening in (das.Study.open, das.Study):
            with pytest.raises(StudyError) as refused:
                opening(path)
            assert str(refused.value).startswith(str(path)) and expected in str(refused.value)


def test_compare_takes_its_input_as_dataframes(frames, tmp_path):
    persons, units = frames
    small = dict(seeds=1, attack_blocks=0, mechanisms=("flat",))
    from_frames = das.compare("tiny", persons=persons, units=units, out=tmp_path / "frames", **small)
    from_files = das.compare("tiny", out=tmp_path / "files", **small)
    assert from_frames.meta["status"] == "complete" and list(from_frames.frame("comparison")["estimator"]) == ["flat"]
    scores = [c for c in from_files.metrics.columns if c != "seconds"]
    pd.testing.assert_frame_equal(from_frames.metrics[scores], from_files.metrics[scores])


def test_dataframes_and_a_dict_spec_are_read_in_memory_with_no_file_written_elsewhere(frames, frame_release, tmp_path,
                                                                                      monkeypatch):
    """das writes nothing outside the outputs it is asked for: no temporary copy of a DataFrame or a dict spec (the
    temporary directory stays empty), and the release is the one the same files make."""
    import tempfile

    from das.frame.bundle import input_paths
    from das.model.specfile import load_toml

    watched = tmp_path / "tmp"
    watched.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(watched))
    persons, units = frames
    spec = load_toml(TINY.parent.parent / "specs/runs/tiny.toml")
    del spec["input"]
    from_dict = das.run(spec, persons=persons, units=units, out=tmp_path / "d", seed=7, workers=1, progress=False)
    pd.testing.assert_frame_equal(from_dict.mdf, frame_release.mdf)
    assert from_dict.manifest.spec_name == "tiny" and from_dict.valid
    assert das.validate(from_dict, inputs=frames).ok
    assert das.synth(spec, mechanism="flat", persons=persons, units=units, out=tmp_path / "s", seed=3).valid
    with_files = {**spec, "input": {"persons": str(FILES[0]), "units": str(FILES[1])}}
    assert das.certificates(with_files)["persons"].rho == frame_release.certificate.rho
    das.metrics(from_dict, truth=frames, out=tmp_path / "m", estimators=("topdown",))
    assert list(watched.iterdir()) == []
    # the operator's record names what was read, never a temporary path
    assert input_paths(from_dict.path) == {"persons": "the persons DataFrame", "units": "the units DataFrame"}


def test_a_comparison_of_dataframes_keeps_them_and_is_continued_only_on_the_same(frames, tmp_path):
    """das compare's releases run in processes of their own: a spec held in memory is written into the comparison's
    own (confidential) directory for them, and a later call with other data is not taken for a continuation."""
    from das.core.errors import OutDirError

    persons, units = frames
    small = dict(seeds=1, attack_blocks=0, mechanisms=("flat",))
    study = das.compare("tiny", persons=persons, units=units, out=tmp_path / "c", **small)
    assert (study.path / "inputs" / "persons.csv").read_bytes() == persons.to_csv(index=False).encode()
    assert (study.path / "spec.toml").is_file() and study.meta["settings"]["inputs_sha256"]
    assert das.compare("tiny", persons=persons, units=units, out=tmp_path / "c", **small).meta["status"] == "complete"
    fewer = persons.iloc[:-1]
    with pytest.raises(OutDirError, match="overwrite=True"):
        das.compare("tiny", persons=fewer, units=units, out=tmp_path / "c", **small)
