"""`das init PERSONS UNITS`: a commented run spec written from the inputs it is given.

The inputs are read first, whole, by the validating reader (das.io.microdata), with the schema chosen
(pl94_persons, or dhc_persons when asked): inputs das cannot release are refused with every problem
(file, row, column, value, what was expected), and no spec is written. From what was read, the spec
says what das needs and what the inputs showed: their paths (relative to the spec), the schema,
strategy and tables that go with it, the levels, the budget (the strategy's, with the lines to change
it as eps at delta), and in comments the persons, blocks, states, counties and tracts found. The spec
is checked by das's own spec reader before it is written. Nothing is written over an existing file.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from das.core.errors import InputError, SpecError, option
from das.driver.runspec import DEFAULT_DELTA, load_run_spec
from das.io.microdata import read_inputs
from das.io.problems import Problem
from das.model.levels import BLOCK, BLOCK_GROUP, COUNTY, DEFAULT_LEVELS, LEVEL_DIGITS, STATE, TRACT
from das.model.schema import load_schema
from das.model.specfile import real_path
from das.privacy.accounting import eps_for_delta
from das.privacy.certificate import fraction_text
from das.privacy.strategy import load_strategy


@dataclass(frozen=True)
class Kind:
    """What goes with a persons schema: its strategies (persons, units), levels and table set."""

    schema: str
    strategy: str
    units_strategy: str
    levels: tuple[str, ...]
    tables: str
    about: str


KINDS = {
    "pl94_persons": Kind("pl94_persons", "pl94_six_level", "h1_units", DEFAULT_LEVELS, "pl94",
                         "the 2020 PL 94-171 redistricting data: voting age x Hispanic origin x race x group quarters "
                         "type; the 2020 production spine and budget"),
    "dhc_persons": Kind("dhc_persons", "dhc_persons_small", "h1_units_five_level",
                        tuple(lv for lv in DEFAULT_LEVELS if lv != BLOCK_GROUP), "dhc",
                        "sex x single year of age x Hispanic origin x race x group quarters type (DHC-style tables P12, "
                        "P2, P5, H1); a small five-level strategy"),
}
DEFAULT_KIND = "pl94_persons"


def _relative(path: Path, spec_dir: Path) -> str:
    """An input path as the spec writes it: relative to the spec's directory (how das reads it), or absolute."""
    path = real_path(path)
    try:
        return os.path.relpath(path, real_path(spec_dir))
    except ValueError:  # another drive
        return str(path)


def _counts(blocks) -> dict[str, int]:
    """Geounits of each level the blocks' geocodes name."""
    return {level: len({str(b)[:LEVEL_DIGITS[level]] for b in blocks}) for level in (STATE, COUNTY, TRACT, BLOCK)}


def _read(persons: Path, units: Path, kind: Kind):
    """The inputs read whole (every problem at once), or InputError; a directory (one file per state) refused."""
    for path in (persons, units):
        if path.is_dir():
            raise InputError([Problem(str(path), None, None, None, "a directory: das init reads two files (Parquet or "
                                      "CSV); for one file per state write the spec by hand (docs/scale.md)", unreadable=True)])
    return read_inputs(persons, units, load_schema(kind.schema), load_schema("h1_units"))


def spec_text(persons, units, *, spec_path, name: str | None = None, schema: str = DEFAULT_KIND) -> str:
    """The commented run spec for two input files, checked by das's spec reader; InputError (the inputs cannot be
    released: every problem listed) or SpecError (an unknown schema) before anything is written."""
    if schema not in KINDS:
        raise SpecError(f"{option('schema', repr(schema))}: expected one of {', '.join(KINDS)}")
    kind = KINDS[schema]
    persons, units, spec_path = Path(persons), Path(units), Path(spec_path)
    inputs = _read(persons, units, kind)
    counts = _counts(inputs.inventory.blocks)
    population = int(inputs.person_histograms.sum())
    strategy = load_strategy(kind.strategy)
    eps = eps_for_delta(strategy.rho, DEFAULT_DELTA)
    name = name or spec_path.stem
    lines = [
        f"# A das run spec written by `das init` from {persons.name} and {units.name}:",
        f"# {population:,} persons in {counts[BLOCK]:,} blocks with housing units or group quarters, "
        f"{counts[TRACT]:,} tract(s), {counts[COUNTY]:,} county(ies), {counts[STATE]:,} state(s).",
        "# Every key is explained in docs/formats.md; `das privacy THIS_FILE` prints the privacy certificate,",
        "# `das run THIS_FILE --out DIR` makes the release (docs/walkthrough.md).",
        f'name = "{name}"',
        f'description = "{persons.name} and {units.name}, {kind.schema}"',
        f"levels = [{', '.join(repr(lv).replace(chr(39), chr(34)) for lv in kind.levels)}]"
        "   # the geographic spine, nation to block",
        "",
        "[input]   # the confidential files; paths relative to this spec",
        f'persons = "{_relative(persons, spec_path.parent)}"',
        f'units = "{_relative(units, spec_path.parent)}"',
        "",
        f"[persons]   # {kind.about}",
        f'schema = "{kind.schema}"',
        f'strategy = "{kind.strategy}"   # budget shares by level and query (specs/strategies)',
        f"# The budget: the strategy's own, rho = {fraction_text(strategy.rho)}, that is eps = {eps} at delta = 1e-10.",
        '# To choose it as eps at [privacy] delta (das spends the largest rho certified within it):',
        '# eps = "4"',
        '# ... or as rho (exact):',
        '# rho = "1/2"',
        "",
        "[units]   # occupied and vacant housing units (table H1)",
        'schema = "h1_units"',
        f'strategy = "{kind.units_strategy}"',
        "",
        "[privacy]",
        'delta = "1e-10"',
        "# seed = 1   # replication mode: reproducible noise, outputs labelled NOT private; leave it out to release",
        "",
        "[output]",
        f'tables = "{kind.tables}"   # the table set (specs/tables)',
        "# pl94171 = true   # also the 2020 PL 94-171 summary files",
        "",
        "# [geography]   # areas off the spine (places, towns...): one file per type, GEOID and area (docs/spine.md)",
        '# areas = { place = "places.csv" }',
        '# spine = "optimized"   # re-cut the level above the block so each area is a union of whole units',
        "",
    ]
    if schema == DEFAULT_KIND and {"QSEX", "QAGE"} <= _columns(persons):
        lines.insert(4, "# The persons file also has QSEX and QAGE: `das init --schema dhc_persons` writes a DHC-style spec.")
    return "\n".join(lines)


def _columns(path: Path) -> set[str]:
    """The column names of a persons file (its header), to mention what else the inputs allow."""
    if path.suffix.lower() == ".parquet":
        import pyarrow.parquet as pq

        return set(pq.read_schema(path).names)
    with open(path, encoding="utf-8-sig") as f:
        return {c.strip() for c in f.readline().rstrip("\r\n").split(",")}


def write_spec(persons, units, out, *, name: str | None = None, schema: str = DEFAULT_KIND) -> str:
    """`das init`: the spec for the inputs written to `out` (a new file: an existing one is refused), checked by das's
    spec reader once written (removed again if it is refused); returns its text."""
    out = Path(out)
    if out.suffix != ".toml":
        raise SpecError(f"{option('out', out)}: a spec file's name ends in .toml")
    if out.exists() or out.is_symlink():
        raise SpecError(f"{option('out', out)} exists: das init writes a new spec and never replaces a file; choose another name")
    text = spec_text(persons, units, spec_path=out, name=name, schema=schema)
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "x") as f:  # "x": a file created meanwhile is not replaced either
        f.write(text)
    try:
        load_run_spec(out)  # das's own reader: the spec says exactly what das will read
    except SpecError:
        out.unlink()
        raise
    return text
