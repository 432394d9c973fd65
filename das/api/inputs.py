"""What the Python API takes: a spec as a shipped name, a path or a dict; inputs as paths or DataFrames.

Both are read directly, by the checkers that read files, and nothing is written to disk for them. A dict
spec is a run spec's content (the TOML's tables as dicts, exact numbers as strings "1/2"), checked whole by
the spec loader as a file is (das.driver.runspec.load_run_spec; its problems said of "the spec dict").
A DataFrame is read exactly as a CSV file of the same values would be: its CSV text, held in memory
(das.io.tabular.InMemory), goes through the one validating reader (das.io.microdata) with the same checks,
each problem said of it: "the persons DataFrame row 3, column CENRACE: '64' is not valid (...)", row 1
being the first row.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from pathlib import Path

from das.core.arguments import is_frame
from das.core.errors import SpecError
from das.driver.runspec import RunSpec, load_run_spec, with_inputs
from das.io.tabular import InMemory, Source
from das.model.specfile import real_path

Input = str | os.PathLike | object  # a path, or a pandas DataFrame


def source_of(name: str, value: Input | None) -> Source | None:
    """An input as das reads it: a path as a Path, a DataFrame as the CSV text a file of its values holds (no
    index, empty cells for missing values), called "the NAME DataFrame"; None stays None."""
    if value is None:
        return None
    if is_frame(value):
        return InMemory(f"the {name} DataFrame", value.to_csv(index=False).encode("utf-8"))
    return Path(value)


def sources(inputs: Mapping[str, Input | None]) -> dict[str, Source | None]:
    """Named inputs as das reads them (source_of)."""
    return {name: source_of(name, value) for name, value in inputs.items()}


def run_spec(spec, *, persons: Input | None = None, units: Input | None = None, name: str | None = None) -> RunSpec:
    """The run spec a call gives (a shipped name, a path or a dict; a dict without a name is called `name`), with
    `persons` and `units` (paths or DataFrames) as its [input] in place of the spec's, checked as a file is."""
    if isinstance(spec, Mapping):
        placed = {key: f"the {key} DataFrame" if is_frame(value) else os.fspath(value)
                  for key, value in (("persons", persons), ("units", units)) if value is not None}
        spec = {"name": name or "spec", **spec}  # [input] as the checker holds a dict to it, then replaced below
        if placed:
            table = spec.get("input")
            spec["input"] = {**(table if isinstance(table, Mapping) else {}), **placed}
    elif not isinstance(spec, (str, os.PathLike)):
        raise SpecError(f"spec must be a shipped name, a path to a .toml file or a dict, not {type(spec).__name__}")
    loaded = load_run_spec(spec)
    return with_inputs(loaded, persons=_spec_input("persons", persons), units=_spec_input("units", units))


def _spec_input(name: str, value: Input | None) -> Source | None:
    """An input given for a spec's [input]: a path made absolute (links followed), as the spec's own are."""
    found = source_of(name, value)
    return real_path(found) if isinstance(found, Path) else found


def study_spec(spec, *, persons: Input | None = None, units: Input | None = None,
               name: str) -> tuple[str, str | None, RunSpec | None]:
    """What a study (das.replicate, das.compare) runs: the spec as it records it (a shipped name or a path as
    given; else what the spec is called), a digest of what exists only in memory (a dict spec's text, the
    DataFrames' bytes: a study is continued only on the same), and the spec itself when it is not a file of
    its own inputs (None: the study reads the spec by name)."""
    if isinstance(spec, (str, os.PathLike)) and persons is None and units is None:
        return os.fspath(spec), None, None
    loaded = run_spec(spec, persons=persons, units=units, name=name)
    digest = hashlib.sha256(loaded.text.encode())
    for given in (loaded.persons_path, loaded.units_path):
        digest.update(given.csv if isinstance(given, InMemory) else str(given).encode())
    return loaded.origin, digest.hexdigest(), loaded
