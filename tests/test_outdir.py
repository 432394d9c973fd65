"""One output-directory policy for every command that writes (das/frame/outdir.py): das never deletes a
file it did not write, a directory that is not the command's own is refused with rc 2, --overwrite
removes only the command's own files, nothing writes inside a release, and a release stays valid
after every command that reads it ran."""

import json
import os
import re
import shutil
import stat

import pyarrow.parquet as pq
import pytest
from conftest import ROOT, TINY

from das.cli import main as das_main
from das.frame import outdir
from das.frame.manifest import Manifest
from das.frame.rundir import RunDir
from das.validate import validate_run

OWNER = outdir.Owner("das example", "example", ("result.json", "parts/*.json"))
REPLACES = outdir.Owner("das example", "example", ("result.json", "parts/*.json"), replaces=True)


def _write(claim: outdir.Claim, *names: str) -> None:
    claim.start()
    for name in names:
        (claim.path / name).parent.mkdir(parents=True, exist_ok=True)
        (claim.path / name).write_text("{}")
    claim.finish()


def _tree(folder) -> dict:
    """Every file under folder with its bytes' size and mtime: what a refused command must leave as it was."""
    return {p.relative_to(folder).as_posix(): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in sorted(folder.rglob("*")) if p.is_file()}


# --- the policy, on its own ------------------------------------------------------------------


def test_a_new_directory_gets_a_record_naming_the_command_and_its_files(tmp_path):
    claim = outdir.check(tmp_path / "out", OWNER)
    assert claim.remove == () and not (tmp_path / "out").exists()  # nothing is written by a check
    _write(claim, "result.json", "parts/a.json")
    record = json.loads((tmp_path / "out" / outdir.RECORD).read_text())
    assert record["command"] == "das example" and record["status"] == "complete" and record["confidential"] is False
    assert record["files"] == ["parts/a.json", "result.json"] and "notice" not in record


def _modes(folder) -> dict:
    """Every directory and file under folder (itself included) with its permission bits."""
    return {p.relative_to(folder).as_posix(): stat.S_IMODE(p.lstat().st_mode) for p in [folder, *folder.rglob("*")]}


def _owner_only(folder) -> list:
    """What under folder is not its owner's only (directories 0700, files 0600)."""
    return [(name, oct(mode)) for name, mode in _modes(folder).items()
            if mode != (0o700 if (folder / name).is_dir() else 0o600)]


def test_a_confidential_directory_is_its_owners_only_from_start_to_finish(tmp_path):
    secret = outdir.Owner("das example", "example", ("result.json", "parts/*.json"), confidential=True)
    old = os.umask(0o022)  # a common umask: files 0644, directories 0755 unless das says otherwise
    try:
        claim = outdir.check(tmp_path / "out", secret)
        claim.start()
        assert stat.S_IMODE((tmp_path / "out").stat().st_mode) == 0o700  # before anything is written in it
        (tmp_path / "out" / "parts").mkdir()
        (tmp_path / "out" / "parts" / "a.json").write_text("{}")
        (tmp_path / "out" / "result.json").write_text("{}")
        claim.finish()
        assert _owner_only(tmp_path / "out") == []
        _write(outdir.check(tmp_path / "public", OWNER), "result.json")  # not confidential: the umask's modes
        assert stat.S_IMODE((tmp_path / "public" / "result.json").stat().st_mode) == 0o644
    finally:
        os.umask(old)


def test_a_users_file_is_never_deleted_with_or_without_overwrite(tmp_path):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("precious")
    for owner in (OWNER, REPLACES):
        for overwrite in (False, True):
            with pytest.raises(outdir.OutDirError, match=rf"{out} is not empty and is not an output of das example.*notes\.txt"):
                outdir.check(out, owner, overwrite=overwrite)
    _write(outdir.Claim(tmp_path / "ours", OWNER), "result.json")
    (tmp_path / "ours" / "parts").mkdir()
    (tmp_path / "ours" / "parts" / "notes.txt").write_text("mine too")
    for owner in (OWNER, REPLACES):
        for overwrite in (False, True):
            with pytest.raises(outdir.OutDirError, match=r"holds files das example did not write \(parts/notes\.txt\)"):
                outdir.check(tmp_path / "ours", owner, overwrite=overwrite)
    assert (out / "notes.txt").read_text() == "precious" and (tmp_path / "ours" / "parts" / "notes.txt").exists()


def test_its_own_earlier_output_is_refused_replaced_or_continued(tmp_path):
    out = tmp_path / "out"
    _write(outdir.check(out, OWNER), "result.json", "parts/a.json")
    with pytest.raises(outdir.OutDirError, match="holds another example .* pass overwrite=True"):
        outdir.check(out, OWNER)
    continued = outdir.check(out, OWNER, resume=True)
    assert continued.remove == ()
    continued.start()  # nothing deleted, the earlier list kept while it runs
    assert (out / "parts" / "a.json").exists()
    assert json.loads((out / outdir.RECORD).read_text())["files"] == ["parts/a.json", "result.json"]
    replaced = outdir.check(out, REPLACES)  # a deterministic command replaces its own output unasked
    assert sorted(p.relative_to(out).as_posix() for p in replaced.remove) == [outdir.RECORD, "parts/a.json", "result.json"]
    overwritten = outdir.check(out, OWNER, overwrite=True)
    overwritten.start()
    assert sorted(p.name for p in out.rglob("*")) == [outdir.RECORD]  # parts/ removed once empty


def test_an_interrupted_commands_files_and_an_older_records_list_are_still_its_own(tmp_path):
    out = tmp_path / "out"
    outdir.check(out, OWNER).start()  # the record first: then the command stops half way
    (out / "parts").mkdir()
    (out / "parts" / "b.json").write_text("{}")
    assert json.loads((out / outdir.RECORD).read_text())["status"] == "running"
    assert {p.name for p in outdir.check(out, OWNER, overwrite=True).remove} == {outdir.RECORD, "b.json"}
    record = json.loads((out / outdir.RECORD).read_text())
    (out / "renamed.json").write_text("{}")  # a file an older version wrote and listed, under a name no pattern has
    (out / outdir.RECORD).write_text(json.dumps({**record, "files": ["renamed.json"], "patterns": []}))
    assert "renamed.json" in {p.name for p in outdir.check(out, OWNER, overwrite=True).remove}


def test_a_record_that_is_not_das_does_not_make_a_directory_its_own(tmp_path):
    out = tmp_path / "out"
    _write(outdir.check(out, OWNER), "result.json")
    record = json.loads((out / outdir.RECORD).read_text())
    for junk in ({**record, "files": "result.json notes.txt"}, {**record, "kind": "mine"}, ["not", "a", "record"]):
        (out / outdir.RECORD).write_text(json.dumps(junk))
        with pytest.raises(outdir.OutDirError, match="is not an output of das example"):
            outdir.check(out, OWNER, overwrite=True)
    assert (out / "result.json").exists()


def test_another_commands_directory_is_not_this_ones(tmp_path):
    out = tmp_path / "out"
    _write(outdir.check(out, OWNER), "result.json")
    other = outdir.Owner("das other", "other", ("result.json",), replaces=True)
    with pytest.raises(outdir.OutDirError, match="but the output of das example"):
        outdir.check(out, other, overwrite=True)
    assert (out / "result.json").exists()


def test_a_symlink_is_never_its_own_and_what_it_points_to_is_kept(tmp_path):
    out = tmp_path / "out"
    _write(outdir.check(out, OWNER), "result.json")
    outside = tmp_path / "outside.json"
    outside.write_text("elsewhere")
    os.symlink(outside, out / "parts.json")
    (out / "parts").mkdir()
    os.symlink(outside, out / "parts" / "linked.json")  # matches parts/*.json, but a link
    with pytest.raises(outdir.OutDirError, match="linked.json"):
        outdir.check(out, OWNER, overwrite=True)
    assert outside.read_text() == "elsewhere"


def test_a_refusal_names_at_most_five_files(tmp_path):
    for i in range(8):
        (tmp_path / f"f{i}.txt").write_text("x")
    with pytest.raises(outdir.OutDirError, match=r"f0.txt, f1.txt, f2.txt, f3.txt, f4.txt and 3 more") as e:
        outdir.check(tmp_path, OWNER)
    assert "f5.txt" not in str(e.value)


def test_a_file_a_spec_or_input_and_a_release_are_no_place_to_write(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(outdir.OutDirError, match="is a file"):
        outdir.check(tmp_path / "file", OWNER)
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    (inputs / "persons.csv").write_text("x")
    for out, relation in ((inputs, "is"), (inputs / "sub", "is inside"), (tmp_path, "holds")):
        with pytest.raises(outdir.OutDirError, match=f"{relation} {inputs}, an input of das example"):
            outdir.check(out, OWNER, protected=[inputs])
    with pytest.raises(outdir.OutDirError, match=r"holds .*persons.csv, an input of das example"):
        outdir.check(tmp_path, OWNER, protected=[inputs / "persons.csv"])
    release = tmp_path / "release"
    release.mkdir()
    RunDir(release).write(Manifest(spec_name="x", status="complete", levels=["nation"], persons={"schema": "s"},
                                   privacy={}))
    for out in (release, release / "metrics", release / "a" / "b"):
        with pytest.raises(outdir.OutDirError, match=f"the das release {release}: a release must hold only its own"):
            outdir.check(out, OWNER)
    with pytest.raises(outdir.OutDirError, match="is inside the das release"):
        outdir.check_release(release / "sub", overwrite=True)


def test_a_symlink_loop_is_compared_by_its_name_and_is_no_output_directory(tmp_path):
    """A protected path (an input) that is a symbolic link loop is no error here (Path.resolve would raise
    RuntimeError): the reader that opens it refuses it by name. An --out that is one is refused."""
    loop = tmp_path / "inputs" / "loop.csv"
    loop.parent.mkdir()
    loop.symlink_to(loop.name)
    outdir.check(tmp_path / "out", OWNER, protected=[loop])
    outdir.check_release(tmp_path / "run", overwrite=False, protected=[loop])
    with pytest.raises(outdir.OutDirError, match=r"holds .*loop.csv, an input of das example"):
        outdir.check(tmp_path, OWNER, protected=[loop])  # still compared, by its name
    for check in (lambda: outdir.check(loop, OWNER), lambda: outdir.check_release(loop, overwrite=True)):
        with pytest.raises(outdir.OutDirError, match=f"output directory {loop} is a symbolic link that reaches no "
                                                     "directory"):
            check()


def _loop_spec(folder):
    """A loop (loop.csv -> loop.csv) and tiny's spec reading it as its persons, by a relative path."""
    folder.mkdir(exist_ok=True)
    loop = folder / "loop.csv"
    loop.symlink_to(loop.name)
    text = (ROOT / "specs/runs/tiny.toml").read_text()
    text = text.replace("../../geography_fixtures/tiny/persons.csv", "loop.csv")
    (folder / "spec.toml").write_text(text.replace("../../geography_fixtures", str(TINY.parent)))
    return loop, folder / "spec.toml"


LOOP_COMMANDS = {  # every command that takes input paths: its argv (LOOP: the loop, SPEC: a spec reading it)
    "run": ["run", "SPEC", "--seed", "1", "--workers", "1", "--out", "OUT"],
    "measure": ["measure", "SPEC", "--seed", "1", "--out", "OUT"],
    "synth": ["synth", "SPEC", "--mechanism", "flat", "--seed", "1", "--out", "OUT"],
    "init": ["init", "LOOP", "UNITS", "--out", "OUT.toml"],
    "validate-input": ["validate-input", "LOOP", "UNITS"],
    "attack": ["attack", "--truth", "LOOP", "--published", "exact", "--workers", "1", "--out", "OUT"],
}


@pytest.mark.parametrize("command", LOOP_COMMANDS)
def test_an_input_that_is_a_symlink_loop_is_refused_by_name_before_anything(command, tmp_path, capsys):
    loop, spec = _loop_spec(tmp_path / "inputs")
    out = tmp_path / "out"
    names = {"SPEC": str(spec), "LOOP": str(loop), "UNITS": str(TINY / "units.csv"), "OUT": str(out),
             "OUT.toml": str(out) + ".toml"}
    before = _tree(tmp_path)
    assert das_main([names.get(a, a) for a in LOOP_COMMANDS[command]]) == 2
    printed = capsys.readouterr()
    said = printed.out + printed.err
    assert "Traceback" not in said and "RuntimeError" not in said, said
    assert f"{loop}: a symbolic link loop (it never reaches a file): expected a .parquet or .csv file" in said, said
    assert not out.exists() and _tree(tmp_path) == before  # nothing drawn, nothing written (init's spec neither)


def test_the_api_refuses_an_input_that_is_a_symlink_loop_by_name(tmp_path, monkeypatch):
    import das
    from das.core.errors import InputError
    from das.model.specfile import load_toml

    loop, spec = _loop_spec(tmp_path)
    expected = re.escape(f"{loop}: a symbolic link loop (it never reaches a file): expected a .parquet or .csv file")
    with pytest.raises(InputError, match=expected):
        das.run("tiny", persons=loop, units=TINY / "units.csv", out=tmp_path / "a", seed=1, progress=False)
    monkeypatch.chdir(tmp_path)  # a dict's relative paths are the working directory's
    data = {**load_toml(spec), "input": {"persons": "loop.csv", "units": str(TINY / "units.csv")}}
    with pytest.raises(InputError, match=expected):
        das.run(data, out=tmp_path / "b", seed=1, progress=False)
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_removing_keeps_a_users_empty_directory(tmp_path):
    out = tmp_path / "out"
    _write(outdir.check(out, OWNER), "parts/a.json")
    (out / "empty").mkdir()
    outdir.check(out, OWNER, overwrite=True).start()
    assert (out / "empty").is_dir() and not (out / "parts").exists()


def test_nested_output_is_its_own_by_its_record(tmp_path):
    study = outdir.Owner("das study", "study", ("study.json",), nested=(("report", "das example"),))
    out = tmp_path / "study"
    _write(outdir.check(out, study), "study.json")
    _write(outdir.check(out / "report", OWNER), "result.json")
    assert json.loads((out / outdir.RECORD).read_text())["files"] == ["study.json"]
    removed = {p.relative_to(out).as_posix() for p in outdir.check(out, study, overwrite=True).remove}
    assert removed == {outdir.RECORD, "study.json", f"report/{outdir.RECORD}", "report/result.json"}
    (out / "report" / "notes.txt").write_text("mine")
    with pytest.raises(outdir.OutDirError, match="report/notes.txt"):
        outdir.check(out, study, overwrite=True)


# --- a release's own files (`das run`, `das measure`, `das synth`) ---------------------------


def _a_run(folder, status="complete"):
    RunDir(folder).write(Manifest(spec_name="x", status=status, levels=["nation", "block"], persons={"schema": "s"},
                                  privacy={}, outputs={"mdf_persons.parquet": "0"}, nmf={}))
    (folder / "mdf_persons.parquet").write_bytes(b"PAR1")


def test_overwrite_deletes_only_what_a_run_wrote(tmp_path):
    _a_run(tmp_path)
    files = outdir.release_files(tmp_path)
    assert sorted(p.name for p in files) == ["manifest.json", "mdf_persons.parquet"]
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(outdir.OutDirError, match="notes.txt"):
        outdir.release_files(tmp_path)
    (tmp_path / "notes.txt").unlink()
    (tmp_path / outdir.RECORD).write_text("{}")  # another command's record is not a run's file
    with pytest.raises(outdir.OutDirError, match=outdir.RECORD):
        outdir.release_files(tmp_path)


def test_overwrite_refuses_a_directory_that_is_not_a_run_or_holds_its_spec(tmp_path):
    (tmp_path / "manifest.json").write_text(json.dumps({"something": "else"}))
    with pytest.raises(outdir.OutDirError, match="not a das run directory .*manifest.json"):
        outdir.check_release(tmp_path, overwrite=True)
    with pytest.raises(outdir.OutDirError, match="is not empty and is not a das run .*manifest.json"):
        outdir.check_release(tmp_path, overwrite=False)
    run = tmp_path / "run"
    run.mkdir()
    _a_run(run)
    with pytest.raises(outdir.OutDirError, match="an input or the spec of this run"):
        outdir.check_release(run, overwrite=True, protected=[run / "spec.toml"])
    states = tmp_path / "persons"  # a partitioned run's input: a directory of one file per state
    states.mkdir()
    for out in (states, states / "run"):
        with pytest.raises(outdir.OutDirError, match=f"{states}, an input or the spec of this run"):
            outdir.check_release(out, overwrite=False, protected=[states])
    assert not (states / "run").exists()


# --- every command, on the command line ------------------------------------------------------


@pytest.fixture(scope="module")
def release(tmp_path_factory):
    """A tiny seeded release, and its metrics beside it (for `das report`)."""
    from das.driver.run import run
    from das.research.evaluate import evaluate_run, metrics_dir

    result = run("tiny", tmp_path_factory.mktemp("outdir") / "run", seed=7, workers=1, progress=False)
    assert result.valid
    evaluate_run(result.out_dir, estimators=("topdown",))
    return result.out_dir, metrics_dir(result.out_dir)


ATTACK = ["--runs", "2", "--relaxed", "50", "--steps", "20", "--count", "1", "--ip-top", "0", "--workers", "1",
          "--baselines", "county"]


def _commands(run_dir, metrics):
    """Each command's argv writing to OUT, and whether it takes --overwrite."""
    return {
        "run": (["run", "tiny", "--seed", "1", "--no-progress", "--workers", "1"], True),
        "measure": (["measure", "tiny", "--seed", "1"], True),
        "synth": (["synth", "tiny", "--mechanism", "flat", "--seed", "1"], True),
        "metrics": (["metrics", str(run_dir), "--estimators", "topdown"], False),
        "replicate": (["replicate", "tiny", "--runs", "1", "--seed", "1", "--workers", "1"], True),
        "compare": (["compare", "tiny", "--seeds", "1", "--workers", "1", "--attack-blocks", "0"], True),
        "attack": (["attack", "--truth", str(TINY / "persons.csv"), "--published", str(run_dir), *ATTACK], True),
        "tables": (["tables", str(run_dir)], False),
        "report": (["report", str(metrics)], False),
        "audit-privacy": (["audit-privacy", "tiny", "--trials", "400", "--seed", "1"], True),
    }


COMMANDS = ("run", "measure", "synth", "metrics", "replicate", "compare", "attack", "tables", "report", "audit-privacy")


def _owner(command: str):
    """The record of each non-release command (a release's is its manifest)."""
    from das.attack.audit import ATTACK as ATTACK_OWNER
    from das.attack.privacy import AUDIT
    from das.io.pl94171 import load_layout
    from das.io.summary_files import tables_owner
    from das.research.compare import COMPARE
    from das.research.evaluate import METRICS
    from das.research.replicate import STUDY
    from das.research.report import REPORT

    return {"metrics": METRICS, "replicate": STUDY, "compare": COMPARE, "attack": ATTACK_OWNER,
            "tables": tables_owner(load_layout()), "report": REPORT, "audit-privacy": AUDIT}[command]


def _refused(argv, out, capsys, *expected) -> str:
    before = _tree(out.parent)
    assert das_main([*argv, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert str(out) in err and "Traceback" not in err, err
    for text in expected:
        assert text in err, err
    assert _tree(out.parent) == before  # nothing written, nothing deleted
    return err


@pytest.mark.parametrize("command", COMMANDS)
def test_no_command_deletes_a_users_file(command, release, tmp_path, capsys):
    argv, takes_overwrite = _commands(*release)[command]
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("precious")
    for flags in ([], ["--overwrite"]) if takes_overwrite else ([],):
        _refused([*argv, *flags], out, capsys, "notes.txt")
    # its own earlier output, with a user's file beside it: still refused, nothing deleted
    (out / "notes.txt").unlink()
    if command in ("run", "measure", "synth"):
        shutil.rmtree(out)
        shutil.copytree(release[0], out)
    else:
        _write(outdir.check(out, _owner(command)))
    (out / "notes.txt").write_text("precious")
    for flags in ([], ["--overwrite"]) if takes_overwrite else ([],):
        _refused([*argv, *flags], out, capsys, "notes.txt")


@pytest.mark.parametrize("command", COMMANDS)
def test_no_command_writes_inside_a_release(command, release, capsys):
    argv, _ = _commands(*release)[command]
    run_dir = release[0]
    before = _tree(run_dir)
    assert das_main([*argv, "--out", str(run_dir / "sub")]) == 2
    err = capsys.readouterr().err
    assert f"is inside the das release {run_dir}: a release must hold only its own files" in err, err
    assert _tree(run_dir) == before and not (run_dir / "sub").exists()


def test_a_release_stays_valid_after_metrics_attack_tables_and_report(tmp_path, capsys):
    from das.driver.run import run

    run_dir = run("tiny", tmp_path / "run", seed=3, workers=1, progress=False).out_dir
    before = _tree(run_dir)
    assert das_main(["metrics", str(run_dir), "--estimators", "topdown,noisy"]) == 0
    metrics = tmp_path / "run-metrics"
    assert (metrics / "metrics.parquet").exists() and not (run_dir / "metrics").exists()
    assert das_main(["attack", "--truth", str(TINY / "persons.csv"), "--published", str(run_dir), *ATTACK,
                     "--out", str(tmp_path / "attack")]) == 0
    assert das_main(["tables", str(run_dir), "--out", str(tmp_path / "pl")]) == 0
    assert das_main(["report", str(metrics)]) == 0
    assert (metrics / "report" / "index.html").exists()
    assert _tree(run_dir) == before
    assert validate_run(run_dir).ok
    capsys.readouterr()
    assert das_main(["validate", str(run_dir)]) == 0
    # what holds values computed against the truth says so, in each file's own metadata
    for folder in (metrics, tmp_path / "attack", metrics / "report"):
        record = json.loads((folder / outdir.RECORD).read_text())
        assert record["confidential"] is True and record["notice"] == outdir.CONFIDENTIAL_MARK, folder
    assert json.loads((tmp_path / "pl" / outdir.RECORD).read_text())["confidential"] is False
    assert json.loads((metrics / "study.json").read_text())["confidential"] is True
    assert json.loads((tmp_path / "attack" / "summary.json").read_text())["confidential"] is True
    for path in [*metrics.rglob("*.parquet"), tmp_path / "attack" / "candidates.parquet"]:
        assert pq.read_schema(path).metadata[outdir.CONFIDENTIAL_KEY] == outdir.CONFIDENTIAL_MARK.encode(), path
    # and nobody but their owner may read them: 0700 directories, 0600 files, like a release's operator/
    assert _owner_only(metrics) == [] and _owner_only(tmp_path / "attack") == []
    assert stat.S_IMODE((tmp_path / "pl").stat().st_mode) != 0o700  # the public tables are not

