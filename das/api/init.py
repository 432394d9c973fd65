"""`das.init_spec`: a commented run spec for your own two input files (`das init`)."""

from __future__ import annotations

import os

from das import arguments
from das.arguments import checked


@checked(persons=arguments.path, units=arguments.path)
def init_spec(persons: str | os.PathLike, units: str | os.PathLike, *, out: str | os.PathLike, name: str | None = None,
              schema: str = "pl94_persons") -> str:
    """Read the two input files (every problem listed, as InputError, when das cannot release them), then write a
    commented run spec for them to `out` (a new .toml file; an existing one is never replaced) and return its text.
    schema: pl94_persons (the redistricting data) or dhc_persons (sex and single year of age too)."""
    from das.newspec import write_spec

    return write_spec(persons, units, out, name=name, schema=schema)
