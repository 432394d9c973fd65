"""das publish: a bundle holds exactly a release's public files, byte for byte the same for the same release
(the signature and its key aside), with normalized modes and times; das validate tells a bundle from a run
directory and refuses an operator file in a bundle."""

import io
import os
import shutil
import stat
import tarfile
from contextlib import redirect_stdout
from pathlib import Path

import pytest
from conftest import cli_refused

import das
from das.cli import main
from das.core.errors import OutDirError
from das.frame.publish import PublishError, publish
from das.frame.rundir import RunDir
from das.validate import validate_run
from das.validate.files import BUNDLE

SIGNATURE = {"manifest.sig", "release.pub"}  # differ between two runs: each release has a key of its own


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    """`das run tiny --seed 1` twice, into two directories."""
    out = tmp_path_factory.mktemp("runs")
    return [das.run("tiny", out=out / name, seed=1, progress=False).path for name in ("a", "b")]


def _tree(folder: Path) -> dict[str, Path]:
    return {p.relative_to(folder).as_posix(): p for p in sorted(folder.rglob("*"))}


def test_a_bundle_is_the_public_files_alone_and_the_same_for_the_same_release(two_runs, tmp_path, monkeypatch):
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    bundles = [publish(run, tmp_path / f"bundle{i}").path for i, run in enumerate(two_runs)]
    trees = [_tree(b) for b in bundles]
    files = {name for name, p in trees[0].items() if p.is_file()}
    assert files == set(RunDir.public_files(RunDir(two_runs[0]).read()))
    assert not any(name.startswith(("operator", "checkpoints")) or name.endswith((".key", ".json.partial"))
                   for name in trees[0])
    assert set(trees[0]) == set(trees[1])
    for name, path in trees[0].items():
        other = trees[1][name]
        assert stat.S_IMODE(path.stat().st_mode) == (0o755 if path.is_dir() else 0o644), name
        assert path.stat().st_mtime == other.stat().st_mtime == 1700000000, name
        if path.is_file() and name not in SIGNATURE:
            assert path.read_bytes() == other.read_bytes(), name
    assert bundles[0].stat().st_mtime == 1700000000 and stat.S_IMODE(bundles[0].stat().st_mode) == 0o755
    assert trees[0]["manifest.json"].read_bytes() == (two_runs[0] / "manifest.json").read_bytes()
    # it validates, signature included, as a bundle; the run directory as a run directory
    report = validate_run(bundles[0], public_key=bundles[0] / "release.pub")
    assert report.ok and f"ok  {BUNDLE}" in report.checks
    assert any("signed by the given public key" in line for line in report.checks)
    assert not any(BUNDLE in line for line in validate_run(two_runs[0]).checks)
    printed = io.StringIO()
    with redirect_stdout(printed):
        assert main(["validate", str(bundles[0])]) == 0
    assert printed.getvalue().rstrip().endswith("checks; a bundle)")
    with redirect_stdout(printed):
        assert main(["validate", str(two_runs[0])]) == 0
    assert "a run directory" in printed.getvalue().splitlines()[-1]


def _members(archive: Path) -> list[tuple[str, int, int, int, int, str, bytes]]:
    with tarfile.open(archive) as tar:
        return [(m.name, m.type[0], m.mode, m.mtime, m.uid, m.uname,
                 tar.extractfile(m).read() if m.isfile() else b"") for m in tar.getmembers()]


def test_a_bundle_archive_is_canonical(two_runs, tmp_path, monkeypatch):
    monkeypatch.delenv("SOURCE_DATE_EPOCH", raising=False)
    archives = [publish(run, tmp_path / f"{i}" / "tiny.tar").path for i, run in enumerate(two_runs)]
    members = [_members(a) for a in archives]
    names = [m[0] for m in members[0]]
    assert names == [m[0] for m in members[1]] and names[0] == "tiny"
    assert names == sorted(names, key=lambda n: Path(n).parts)  # the canonical order: by path, a directory first
    public = set(RunDir.public_files(RunDir(two_runs[0]).read()))
    assert {n[len("tiny/"):] for n, kind, *_ in members[0] if kind != tarfile.DIRTYPE[0]} == public
    for one, two in zip(*members):
        name, kind, mode, mtime, uid, uname, data = one
        assert (mode, mtime, uid, uname) == ((0o755 if kind == tarfile.DIRTYPE[0] else 0o644), 0, 0, "")
        assert one[:6] == two[:6]
        if Path(name).name not in SIGNATURE:
            assert data == two[6], name
    with tarfile.open(archives[0]) as tar:  # what a reader unpacks validates, signed
        tar.extractall(tmp_path / "unpacked", filter="data")
    unpacked = tmp_path / "unpacked" / "tiny"
    assert validate_run(unpacked, public_key=unpacked / "release.pub").ok


def test_a_bundle_holding_an_operator_file_is_refused_naming_it(two_runs, tmp_path):
    bundle = publish(two_runs[0], tmp_path / "bundle").path
    for name in ("operator/signing.key", "checkpoints/persons/level.npz"):
        (bundle / name).parent.mkdir(parents=True)
        shutil.copy(two_runs[0] / "operator" / "signing.key", bundle / name)
        report = validate_run(bundle)
        assert not report.ok and any(v.startswith(BUNDLE) and name in v for v in report.violations), report.violations
        shutil.rmtree(bundle / name.split("/")[0])
    assert validate_run(bundle).ok


def test_an_unsigned_or_invalid_run_is_not_published(two_runs, tmp_path, capsys):
    copy = tmp_path / "copy"
    shutil.copytree(two_runs[0], copy)
    (copy / "manifest.sig").unlink()
    with pytest.raises(PublishError, match="not signed"):
        publish(copy, tmp_path / "b")
    shutil.copy(two_runs[0] / "manifest.sig", copy / "manifest.sig")
    table = copy / "tables" / "P1.parquet"
    table.write_bytes(table.read_bytes()[:-1] + b"\x00")
    assert main(["publish", str(copy), "--to", str(tmp_path / "b")]) == 1
    assert "does not validate" in capsys.readouterr().err and not (tmp_path / "b").exists()


def test_the_bundle_directory_follows_the_output_policy(two_runs, tmp_path, capsys):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    assert "not a das bundle" in cli_refused(["publish", str(two_runs[0]), "--to", str(mine)], capsys)
    with pytest.raises(OutDirError, match="inside the das release .*choose another to=, outside it"):
        publish(two_runs[0], two_runs[0] / "bundle")
    with pytest.raises(OutDirError, match="run directory"):
        publish(two_runs[0], two_runs[1], overwrite=True)
    bundle = publish(two_runs[0], tmp_path / "bundle").path
    with pytest.raises(OutDirError, match="overwrite=True"):
        publish(two_runs[1], bundle)
    (bundle / "tables" / "mine.csv").write_text("mine")
    with pytest.raises(OutDirError, match="mine.csv"):
        publish(two_runs[1], bundle, overwrite=True)
    os.remove(bundle / "tables" / "mine.csv")
    publish(two_runs[1], bundle, overwrite=True)
    assert (bundle / "release.pub").read_bytes() == (two_runs[1] / "release.pub").read_bytes()
    (tmp_path / "other.tar").write_text("not a tar")
    with pytest.raises(OutDirError, match="not a tar archive"):
        publish(two_runs[0], tmp_path / "other.tar", overwrite=True)
    assert (tmp_path / "other.tar").read_text() == "not a tar"


def test_a_synthetic_release_is_published_too(tmp_path):
    release = das.synth("tiny", mechanism="flat", out=tmp_path / "flat", seed=1)
    bundle = das.publish(release, to=tmp_path / "bundle")
    assert set(bundle.files) == set(RunDir.public_files(release.manifest)) and not bundle.archive
    assert validate_run(bundle.path, public_key=bundle.path / "release.pub").ok
