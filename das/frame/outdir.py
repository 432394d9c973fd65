"""Every directory a das command writes: whose it is, what the command may delete there, and where
it may not write at all. One policy for `run`, `measure`, `synth`, `metrics`, `replicate`,
`compare`, `attack`, `tables`, `report` and `audit-privacy`:

- das never deletes a file it did not write. A directory is a command's own when it holds that
  command's ownership record: for a release (`das run`, `das measure`, `das synth`) its
  manifest.json (kind "das run"); for every other command `das-output.json`, written before the
  command writes anything else (so an interrupted command's files are still recognised), naming
  the command, whether what it holds is confidential, its file patterns and the files it wrote.
- A non-empty directory that is not the command's own, or that holds any file the command does
  not write, is refused (OutDirError: the directory, up to 5 of those files, what to do), before
  anything is computed. So is a path that is a file, an --out equal to, inside or holding the
  command's spec or an input, and an --out inside a release (a release holds only its own files)
  other than the release `run`/`measure`/`synth` write themselves.
- A confidential command's directory (metrics, replicate, report, compare, attack: computed against the
  confidential input) is its owner's only: 0700 from the start, and every directory 0700 and file 0600 in it
  when the command finishes, like a release's operator/.
- A command's own earlier output: a command that spends budget or hours replaces it only with
  `--overwrite` (or continues it: `resume`); a deterministic one (metrics, report, tables)
  replaces it. Either way only the command's own files are deleted: those its record lists and
  those its patterns name.

>>> import tempfile; folder = Path(tempfile.mkdtemp()) / "out"
>>> owner = Owner("das example", "example", ("result.json",), replaces=True)
>>> claim = check(folder, owner); claim.start(); _ = (folder / "result.json").write_text("{}"); claim.finish()
['result.json']
>>> _ = (folder / "notes.txt").write_text("mine")
>>> try:
...     check(folder, owner, overwrite=True)
... except OutDirError as e:
...     print(str(e).split(";")[0].replace(str(folder), "OUT"))
output directory OUT holds files das example did not write (notes.txt)
"""

from __future__ import annotations

import fnmatch
import json
import os
from dataclasses import dataclass
from pathlib import Path

import das
from das.core import atomic
from das.core.errors import OutDirError, option
from das.frame.records import RunDirError
from das.frame.rundir import RunDir
from das.io.outputs import release_patterns
from das.model.specfile import real_path

RECORD = "das-output.json"
RECORD_KIND = "das output"
SHOWN = 5  # files named in a refusal
CONFIDENTIAL_KEY = b"das.confidential"
CONFIDENTIAL_MARK = ("CONFIDENTIAL: computed against the confidential input (true counts, or scores against them); "
                     "NOT a privacy-protected release, keep it with the data owner")



def release_internal() -> tuple[str, ...]:
    """A release's files besides its listed outputs (das.frame.rundir.RunDir's: manifest, operator files,
    checkpoints, committed parts, temporaries): fnmatch patterns relative to the run directory, `*`
    matching across '/'."""
    return RunDir.internal_patterns()


def release_outputs() -> tuple[str, ...]:
    """A release's outputs before its manifest lists them (stopped before it said `complete`): every
    registered output's patterns (das.io.outputs)."""
    return release_patterns()


def run_files() -> tuple[str, ...]:
    """Every file a release may hold: its internal files and its outputs."""
    return release_internal() + release_outputs()


@dataclass(frozen=True)
class Owner:
    """A command that writes a directory of its own: its name, its files, and the fate of its earlier output."""

    command: str  # "das metrics"
    what: str  # one output of it, in a message: "study", "comparison", "attack"...
    files: tuple[str, ...]  # its files: fnmatch patterns relative to the directory (`*` matches across '/')
    confidential: bool = False  # holds values computed against the confidential input
    replaces: bool = False  # deterministic: its own earlier output is replaced without --overwrite
    nested: tuple[tuple[str, str], ...] = ()  # (subdirectory, command): another command's output it includes


@dataclass(frozen=True)
class Claim:
    """An output directory a command may write: its own earlier files to delete first, and its record."""

    path: Path
    owner: Owner
    remove: tuple[Path, ...] = ()
    earlier: dict | None = None  # its own earlier record, when it continues that output (resume)

    def start(self) -> None:
        """Delete the earlier files it replaces, create the directory (a confidential one open to its owner only,
        0700, before anything is written in it), write the record (status running)."""
        remove_files(self.path, self.remove)
        self.path.mkdir(parents=True, exist_ok=True)
        if self.owner.confidential:
            atomic.owner_only_tree(self.path)
        kept = [f for f in (self.earlier or {}).get("files", []) if (self.path / f).is_file()]
        _write_record(self.path, self.owner, "running", kept)

    def finish(self) -> list[str]:
        """The record completed, listing every file of the command now in the directory; returns that list."""
        ours, _ = _split(self.path, self.owner, read_record(self.path))
        nested = tuple(sub + "/" for sub, _ in self.owner.nested)  # their own records list them
        files = sorted(r for p in ours if (r := p.relative_to(self.path).as_posix()) != RECORD and not r.startswith(nested))
        _write_record(self.path, self.owner, "complete", files)
        if self.owner.confidential:  # true counts and scores against them: 0700 directories, 0600 files, as operator/
            atomic.owner_only_tree(self.path)
        return files


def _write_record(path: Path, owner: Owner, status: str, files: list[str]) -> None:
    record = {"kind": RECORD_KIND, "command": owner.command, "confidential": owner.confidential,
              **({"notice": CONFIDENTIAL_MARK} if owner.confidential else {}), "status": status,
              "das_version": das.__version__, "patterns": list(owner.files), "files": files}
    atomic.write_text(path / RECORD, json.dumps(record, indent=2) + "\n")


def read_record(path: Path) -> dict | None:
    """The ownership record of a directory (das-output.json), or None when it has none, or one that is
    not a das record (a directory without a readable record is nobody's: nothing in it is deleted)."""
    try:
        record = json.loads((Path(path) / RECORD).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or record.get("kind") != RECORD_KIND:
        return None
    names = [record.get(key, []) for key in ("files", "patterns")]
    return record if all(isinstance(v, list) and all(isinstance(n, str) for n in v) for v in names) else None


def holds(path, owner: Owner) -> dict | None:
    """The record of `owner`'s own earlier output in `path`, or None."""
    record = read_record(Path(path))
    return record if record is not None and record.get("command") == owner.command else None


# ---------------------------------------------------------------------------------------------
# Which files are whose


def _files(path: Path) -> list[Path]:
    """Every file under path, and every symlink (never followed), sorted."""
    found = []
    for folder, dirs, files in os.walk(path):
        base = Path(folder)
        found += [base / d for d in dirs if (base / d).is_symlink()]
        found += [base / f for f in files]
    return sorted(found)


def _matches(relative: str, record: dict | None, patterns) -> bool:
    """Whether a file (relative path) is listed in a record or named by one of the patterns."""
    return relative in (record or {}).get("files", ()) or any(fnmatch.fnmatchcase(relative, p) for p in patterns)


def _patterns(owner: Owner, record: dict | None) -> tuple[str, ...]:
    """A command's file patterns: its record, its own, and those its earlier record names."""
    return (RECORD, *owner.files, *(record or {}).get("patterns", ()))


def _split(path: Path, owner: Owner, record: dict | None, patterns=None) -> tuple[list[Path], list[Path]]:
    """(the owner's files, every other file) under path: its record's list and its patterns, and
    the files of the nested outputs it includes (by their own records). A symlink is never its own."""
    patterns = _patterns(owner, record) if patterns is None else patterns
    nested = {sub: inner for sub, command in owner.nested
              if (inner := holds(path / sub, Owner(command, "", ()))) is not None}
    ours, foreign = [], []
    for file in _files(path):
        relative = file.relative_to(path).as_posix()
        sub = next((s for s in nested if relative.startswith(s + "/")), None)
        if sub is not None:
            own = _matches(relative[len(sub) + 1:], nested[sub], (RECORD, *nested[sub].get("patterns", ())))
        else:
            own = _matches(relative, record, patterns)
        (ours if own and not file.is_symlink() else foreign).append(file)
    return ours, foreign


def _shown(path: Path, files: list[Path]) -> str:
    names = ", ".join(p.relative_to(path).as_posix() for p in files[:SHOWN])
    return names + (f" and {len(files) - SHOWN} more" if len(files) > SHOWN else "")


def _entries(path: Path) -> list[Path]:
    """What a directory holds (files, or at least its top-level entries), [] when it is empty or absent."""
    if not path.is_dir():
        return []
    return _files(path) or sorted(path.iterdir())


# ---------------------------------------------------------------------------------------------
# Where nothing may be written


def release_above(path, *, itself: bool = True) -> Path | None:
    """The das release directory `path` is inside (or is, with itself=True), or None."""
    path = Path(os.path.abspath(path))
    seen = []
    for start in (path, real_path(path)):
        seen += ([start] if itself else []) + list(start.parents)
    return next((p for p in seen if RunDir(p).is_das_run()), None)


def refuse_unwritable(path, *, protected=(), inputs: str = "an input", itself: bool = True,
                      argument: str = "out") -> None:
    """OutDirError when path is a file, is inside a release (or is one, with itself=True), or equals,
    is inside or holds a protected path (a spec or an input); the message names the command's `argument`."""
    path, choose = Path(path), option(argument)
    if path.exists() and not path.is_dir():
        raise OutDirError(f"output directory {path} is a file, not a directory; choose another {choose}")
    if path.is_symlink() and not path.exists():
        raise OutDirError(f"output directory {path} is a symbolic link that reaches no directory (a loop, or its "
                          f"target does not exist); choose another {choose}")
    release = release_above(path, itself=itself)
    if release is not None:
        where = "is" if Path(os.path.abspath(path)) in (release, real_path(release)) else "is inside"
        raise OutDirError(f"output directory {path} {where} the das release {release}: a release must hold only its "
                          f"own files (or `das validate` fails); choose another {choose}, outside it")
    out = real_path(path)
    for item in protected:
        if not isinstance(item, (str, os.PathLike)):  # None, or an input held in memory (das.io.tabular.InMemory)
            continue
        item = real_path(item)
        relation = ("is" if item == out else "holds" if out in item.parents else
                    "is inside" if item in out.parents else None)
        if relation:
            raise OutDirError(f"output directory {path} {relation} {item}, {inputs}; das never writes over or "
                              f"around its own inputs: choose another {choose}")


# ---------------------------------------------------------------------------------------------
# Every command but a release's


def check(path, owner: Owner, *, overwrite: bool = False, resume: bool = False, protected=()) -> Claim:
    """May `owner` write `path`, and what must it delete first? Refused (OutDirError) when it may not.

    A directory holding anything but the owner's own files is refused. Its own earlier output is
    replaced when the owner `replaces` or with overwrite=True, continued with resume=True (nothing
    deleted), and refused otherwise.
    """
    path = Path(path)
    refuse_unwritable(path, protected=protected, inputs=f"an input of {owner.command}")
    entries = _entries(path)
    if not entries:
        return Claim(path, owner)
    record = holds(path, owner)
    if record is None:
        other = read_record(path)
        held = f", but the output of {other.get('command')}" if other else ""
        raise OutDirError(f"output directory {path} is not empty and is not an output of {owner.command} (no {RECORD} "
                          f"naming it{held}); it holds {_shown(path, entries)}. das deletes only files it wrote: "
                          f"choose another {option('out')}, or move those files away")
    ours, foreign = _split(path, owner, record)
    if foreign:
        raise OutDirError(f"output directory {path} holds files {owner.command} did not write ({_shown(path, foreign)}); "
                          f"das never deletes them: move them away or choose another {option('out')}")
    if overwrite or owner.replaces:
        return Claim(path, owner, remove=tuple(ours))
    if resume:
        return Claim(path, owner, earlier=record)
    raise OutDirError(f"output directory {path} is not empty: it holds another {owner.what} (the earlier output of "
                      f"{owner.command}); choose another {option('out')}, or pass {option('overwrite', True)} to replace "
                      f"it (only {owner.command}'s own files are deleted)")


def remove_files(path, files) -> None:
    """Delete exactly `files`, then the directories that leaves empty (never path itself)."""
    path = Path(path)
    folders = set()
    for file in files:
        file.unlink(missing_ok=True)
        folders.update(p for p in file.parents if path in p.parents)
    for folder in sorted(folders, key=lambda p: len(p.parts), reverse=True):
        try:
            folder.rmdir()
        except OSError:
            pass


# ---------------------------------------------------------------------------------------------
# A release: `das run`, `das measure`, `das synth`


def check_release(path, *, overwrite: bool, protected=()) -> list[Path]:
    """May a release be written to `path`? The files --overwrite deletes there first (only a das
    run's own); OutDirError when it may not: a file, its spec or inputs, inside another release,
    or a non-empty directory that is not a das run, holds other files, or is not to be overwritten."""
    path = Path(path)
    refuse_unwritable(path, protected=protected, inputs="an input or the spec of this run", itself=False)
    entries = _entries(path)
    if not entries:
        return []
    if overwrite:
        return release_files(path)
    if not RunDir(path).is_das_run():
        raise OutDirError(f"output directory {path} is not empty and is not a das run (it holds {_shown(path, entries)}); "
                          f"das deletes only files it wrote: choose another {option('out')}, or move those files away")
    owner, hint = "", ""
    try:
        held = RunDir(path).read()
        owner = f" (it holds run {held.spec_name!r})"
        if not held.complete:
            owner = f" (it holds an unfinished run of {held.spec_name!r}, status {held.status!r})"
            hint = f", continue it with `das run --resume {path}`"
    except RunDirError:
        pass
    _, foreign = _release_split(path)
    if foreign:
        raise OutDirError(f"output directory {path} is not empty{owner} and holds files a das run does not write "
                          f"({_shown(path, foreign)}), which das never deletes: choose another {option('out')}, or move them "
                          "away")
    raise OutDirError(f"output directory {path} is not empty{owner}; choose another{hint} or pass "
                      f"{option('overwrite', True)}")


def _release_split(path: Path) -> tuple[list[Path], list[Path]]:
    """(a release's own files, every other file): those its manifest lists, its internal patterns
    (and its outputs', while it is unfinished). A manifest das cannot read owns nothing."""
    try:
        manifest = RunDir(path).read()
    except RunDirError as e:
        raise OutDirError(f"{path}: its manifest is not readable as a das run's ({e}); das deletes only files it "
                          f"knows it wrote: choose another {option('out')}, or move the directory away") from None
    patterns = release_internal() + (() if manifest.complete else release_outputs())
    return _split(path, Owner("das run", "run", patterns), {"files": list(manifest.listed())}, patterns)


def release_files(path) -> list[Path]:
    """The files --overwrite may delete in a release directory: its own (the manifest's list and
    the patterns); OutDirError when it is not a das run or holds any other file."""
    path = Path(path)
    if not RunDir(path).is_das_run():
        raise OutDirError(f"{option('overwrite', True)} refused: {path} is not a das run directory (no das manifest.json; "
                          f"it holds {_shown(path, _entries(path))}); das deletes only files it wrote: choose another "
                          f"{option('out')}, or move those files away")
    ours, foreign = _release_split(path)
    if foreign:
        raise OutDirError(f"{option('overwrite', True)} refused: {path} holds files a das run does not write "
                          f"({_shown(path, foreign)}); move them away or choose another {option('out')}")
    return ours


# ---------------------------------------------------------------------------------------------
# A bundle: `das publish` (its record is its manifest, as a release's; it holds no operator file)


def check_bundle(path, *, overwrite: bool, protected=()) -> list[Path]:
    """May a bundle be written to directory `path`? The files of an earlier bundle there that --overwrite
    replaces (only its own: its manifest, the files it lists, the signature); OutDirError when it may not: a
    file, inside a release, holding or inside the run published, a run directory, or a non-empty directory
    that is not a bundle, holds other files, or is not to be overwritten."""
    path = Path(path)
    refuse_unwritable(path, protected=protected, inputs="the release it publishes", itself=False, argument="to")
    entries = _entries(path)
    if not entries:
        return []
    run = RunDir(path)
    if not run.is_das_run() or run.is_run_directory():
        what = "a das run directory (it holds operator files)" if run.is_das_run() else "not a das bundle"
        raise OutDirError(f"output directory {path} is not empty and is {what}; it holds {_shown(path, entries)}. das "
                          f"deletes only files it wrote: choose another {option('to')}, or move those files away")
    try:
        manifest = run.read()
    except RunDirError as e:
        raise OutDirError(f"{path}: its manifest is not readable as a das release's ({e}); choose another "
                          f"{option('to')}") from None
    public = RunDir.public_files(manifest)
    ours, foreign = _split(path, Owner("das publish", "bundle", public), {"files": list(public)}, public)
    if foreign:
        raise OutDirError(f"output directory {path} holds files das publish did not write ({_shown(path, foreign)}); "
                          f"das never deletes them: move them away or choose another {option('to')}")
    if not overwrite:
        raise OutDirError(f"output directory {path} holds a bundle (of {manifest.spec_name!r}); choose another "
                          f"{option('to')}, or pass {option('overwrite', True)} to replace it (only its own files are deleted)")
    return ours


def check_bundle_archive(path, *, overwrite: bool) -> None:
    """May a bundle's tar archive be written to `path`? Refused (OutDirError) when it is inside a release (the
    run published included), or exists and is not replaced with --overwrite, or is not a das bundle's archive (a
    tar whose first member is a directory holding nothing but a bundle's names)."""
    path = Path(path)
    refuse_unwritable(path.parent, itself=True, argument="to")
    if not path.exists() and not path.is_symlink():
        return
    if path.is_dir() or path.is_symlink():
        raise OutDirError(f"{path} is a directory or a symbolic link, not a bundle's archive; choose another {option('to')}")
    if not overwrite:
        raise OutDirError(f"{path} exists; choose another {option('to')}, or pass {option('overwrite', True)} to replace it "
                          "(only a bundle's archive is replaced)")
    import tarfile

    try:
        with tarfile.open(path, "r:") as tar:
            names = tar.getnames()
    except (tarfile.TarError, OSError) as e:
        raise OutDirError(f"{option('overwrite', True)} refused: {path} is not a tar archive das publish wrote ({e}); das "
                          "deletes only files it wrote") from None
    top = names[0] if names else ""
    if not names or f"{top}/manifest.json" not in names or any(n != top and not n.startswith(top + "/") for n in names):
        raise OutDirError(f"{option('overwrite', True)} refused: {path} is not a bundle's archive (a directory holding "
                          "manifest.json); das deletes only files it wrote")


# ---------------------------------------------------------------------------------------------
# What confidential outputs say about themselves


def confidential_metadata() -> dict[bytes, bytes]:
    """Key-value metadata for a Parquet file holding values computed against the confidential input."""
    return {CONFIDENTIAL_KEY: CONFIDENTIAL_MARK.encode()}


def mark_confidential(table):
    """An Arrow table whose schema metadata says it is confidential (its other metadata kept)."""
    return table.replace_schema_metadata({**(table.schema.metadata or {}), **confidential_metadata()})
