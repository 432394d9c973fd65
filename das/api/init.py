"""`das.init_spec`: a commented run spec for your own two input files (`das init`)."""

from __future__ import annotations

import os

from das.core import arguments
from das.core.arguments import checked


@checked(persons=arguments.path, units=arguments.path)
def init_spec(persons: str | os.PathLike, units: str | os.PathLike, *, out: str | os.PathLike, name: str | None = None,
              schema: str = "pl94_persons") -> str:
    """A commented run spec for your own two input files, as `das init` writes it.

    Args:
        persons, units: the confidential input files (Parquet or CSV), read whole and checked first.
        out: the new spec file (.toml); an existing file is never replaced.
        name: the release's name (default: the file's stem).
        schema: pl94_persons (the redistricting data) or dhc_persons (sex and single year of age too).

    Returns:
        The spec's text, as written to `out`.

    Raises:
        InputError: every problem with the inputs, listed, when das cannot release them. SpecError: an unknown
            schema. OutDirError: `out` exists.

    Example:
        >>> text = init_spec("geography_fixtures/tiny/persons.csv", "geography_fixtures/tiny/units.csv",
        ...                  out=getfixture("tmp_path") / "mine.toml", name="mine")
        >>> 'name = "mine"' in text
        True
    """
    from das.driver.newspec import write_spec

    return write_spec(persons, units, out, name=name, schema=schema)
