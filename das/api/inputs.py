"""What the Python API takes: a spec as a shipped name, a path or a dict; inputs as paths or DataFrames.

A DataFrame is read exactly as a CSV file of the same values would be (the one validating reader,
das.io.microdata, with the same checks and the same errors): it is written as CSV into a private
temporary directory (readable by this user only) and read from there; the directory is removed when
the work is done. A problem is reported in the DataFrame's terms: "the persons DataFrame row 3,
column CENRACE: '64' is not valid (...)", row 1 being the first row. A dict spec is a run spec's
content (the TOML's tables as dicts, exact numbers as strings "1/2") and is checked whole like a file;
an error about the spec written for a call is said of what the caller gave: "the spec dict", "the spec
'tiny'". No message names the temporary directory.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from das.core.arguments import is_frame
from das.core.errors import DasError, InputError, SpecError
from das.model.schema import resolve_spec
from das.model.specfile import load_toml, real_path, toml_text

Input = str | os.PathLike | object  # a path, or a pandas DataFrame


@dataclass(frozen=True)
class Prepared:
    """A spec file and the input files a command reads, and what each temporary input file stands for."""

    spec: str | os.PathLike  # the spec as given, or a spec file written for the call
    frames: dict[str, str]  # a temporary file's path -> what it stands for: "the persons DataFrame", "the spec dict"


def _write_frame(frame, path: Path) -> Path:
    """A DataFrame as the CSV text a file of its values would hold (no index, empty cells for missing values)."""
    frame.to_csv(path, index=False)
    return path


def _spec_data(spec) -> tuple[dict, Path | None]:
    """A spec's content and its file (None for a dict): input paths stay relative to that file."""
    if isinstance(spec, Mapping):
        return dict(spec), None
    if not isinstance(spec, (str, os.PathLike)):
        raise SpecError(f"spec must be a shipped name, a path to a .toml file or a dict, not {type(spec).__name__}")
    path = resolve_spec(spec, "runs")
    return load_toml(path), path.resolve()


def _resolved(paths: Mapping, root: Path) -> dict:
    return {key: str(real_path(root / value)) if isinstance(value, str) and value and not Path(value).is_absolute()
            else value for key, value in paths.items()}


def _absolute(data: dict, base: Path | None) -> dict:
    """The spec's [input] paths and [geography] area files made absolute: relative to the spec's file, or (a
    dict) to the working directory."""
    root = base.parent if base is not None else Path.cwd()
    section, geography = data.get("input"), data.get("geography")
    if isinstance(section, Mapping):
        data = {**data, "input": _resolved(section, root)}
    if isinstance(geography, Mapping) and isinstance(geography.get("areas"), Mapping):
        data = {**data, "geography": {**geography, "areas": _resolved(geography["areas"], root)}}
    return data


@contextlib.contextmanager
def prepared(spec, *, persons: Input | None = None, units: Input | None = None, name: str | None = None
             ) -> Iterator[Prepared]:
    """The spec as a file a command reads, with `persons` and `units` (paths or DataFrames) as its [input]:
    the spec file itself when nothing is replaced, else a spec written into a private temporary directory
    (removed on leaving the block) beside any DataFrame written there."""
    data, path = _spec_data(spec)
    if path is not None and persons is None and units is None:
        yield Prepared(spec, {})  # as given: a shipped name stays a name (a study records it)
        return
    with tempfile.TemporaryDirectory(prefix="das-inputs-") as tmp:  # mode 0700: this user only
        tmp = Path(tmp)
        frames: dict[str, str] = {}
        given = {}
        for key, value in (("persons", persons), ("units", units)):
            if value is None:
                continue
            if is_frame(value):
                file = _write_frame(value, tmp / f"{key}.csv")
                frames[str(file)] = f"the {key} DataFrame"
                given[key] = str(file)
            else:
                given[key] = str(real_path(value))
        data = _absolute(data, path)
        if given:
            data = {**data, "input": {**(data.get("input") or {}), **given}}
        if "name" not in data:
            data = {**data, "name": name or (path.stem if path is not None else "spec")}
        written = tmp / "spec.toml"
        written.write_text(toml_text(data))
        frames[str(written)] = "the spec dict" if path is None else f"the spec {os.fspath(spec)!r}"
        yield Prepared(written, frames)


@contextlib.contextmanager
def input_files(persons: Input, units: Input) -> Iterator[tuple[tuple[Path, Path], dict[str, str]]]:
    """Two input files (paths as given, DataFrames written to a private temporary directory) and what each
    temporary file stands for."""
    with frame_files({"persons": persons, "units": units}) as (files, frames):
        yield (files["persons"], files["units"]), frames


@contextlib.contextmanager
def frame_files(inputs: Mapping[str, Input]) -> Iterator[tuple[dict[str, Path], dict[str, str]]]:
    """Named input files (a path as given; a DataFrame written to a private temporary directory as NAME.csv,
    removed on leaving the block; None stays None) and what each temporary file stands for ("the NAME
    DataFrame")."""
    if not any(is_frame(value) for value in inputs.values()):
        yield {key: None if value is None else Path(value) for key, value in inputs.items()}, {}
        return
    with tempfile.TemporaryDirectory(prefix="das-inputs-") as tmp:  # mode 0700: this user only
        files, frames = {}, {}
        for key, value in inputs.items():
            if is_frame(value):
                files[key] = _write_frame(value, Path(tmp) / f"{key}.csv")
                frames[str(files[key])] = f"the {key} DataFrame"
            else:
                files[key] = None if value is None else Path(value)
        yield files, frames


def in_frame_terms(error: InputError, frames: dict[str, str]) -> InputError:
    """An input error about temporary files, said of the DataFrames they hold (row r: the r-th row, from 1)."""
    if not frames:
        return error
    problems = [replace(p, file=frames[p.file], csv=False, unreadable=False) if p.file in frames else p
                for p in error.problems]
    return InputError(problems)


def reworded(text: str, frames: dict[str, str]) -> str:
    """A message about temporary files said of what each stands for (the longest path first, so a directory's
    path never cuts a file's)."""
    for file in sorted(frames, key=len, reverse=True):
        text = text.replace(file, frames[file])
    return text


@contextlib.contextmanager
def said_of_frames(frames: dict[str, str]):
    """Inside the block, a das error about a temporary file (an input, the spec written for the call) is re-raised
    about what it stands for: "the persons DataFrame", "the spec dict"."""
    try:
        yield
    except InputError as e:
        if not frames:
            raise
        raise in_frame_terms(e, frames) from None
    except DasError as e:
        if frames and len(e.args) == 1 and isinstance(e.args[0], str):
            e.args = (reworded(e.args[0], frames),)  # the same error, its message in the caller's terms
        raise
