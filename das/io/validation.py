"""`das validate-input PERSONS UNITS [--schema NAME]`: every problem in the input files, or an
all-clear with a few notes. Exit code 0 ok, 1 problems, 2 a file could not be read at all (not
found, unknown extension, not Parquet, malformed CSV) or the schema is unknown."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from das.core.errors import SpecError
from das.io.microdata import Inputs, collect_problems
from das.io.problems import Problem
from das.model import rules
from das.model.schema import Schema, load_schema


def validate_input(persons_path, units_path, schema: Schema) -> list[Problem]:
    """Every problem in the persons and units files (no check stops the others); [] if none."""
    problems, _ = collect_problems(persons_path, units_path, schema)
    return problems


def notes(inputs: Inputs, schema: Schema) -> list[str]:
    """Legal but worth a look: no persons at all; inputs below a rule's lower bound, which the
    release will be raised to (e.g. a facility that holds nobody of its type)."""
    found = []
    if inputs.person_histograms.sum() == 0:
        found.append("the persons file has no rows: a release with no persons")
    facts = rules.Invariants(inputs.inventory.housing_units, inputs.inventory.gq_facilities, {})
    for bounds in rules.block_bounds(schema, facts, inputs_only=True):
        shortfall = rules.KINDS[bounds.rule.kind].shortfall
        if shortfall is None:
            continue
        answers = np.asarray((inputs.person_histograms @ schema.query(bounds.query).matrix.T).todense())
        below, _ = rules.breaches(bounds, answers)
        if below.any():
            found.append(shortfall(int(below.any(axis=1).sum()), int(below.sum())))
    return found


def validate_input_main(persons, units, schema_name: str = "pl94_persons", out=None) -> int:
    """Print a report on the two files; return the exit code (0 ok, 1 problems, 2 unreadable)."""
    out = out or sys.stdout
    try:
        schema = load_schema(schema_name)
    except SpecError as e:
        print(f"das validate-input: {e}", file=sys.stderr)  # a refusal, not the report
        return 2
    print(f"checking {persons} (persons, schema {schema.name}) and {units} (units)", file=out)
    problems, inputs = collect_problems(Path(persons), Path(units), schema)
    if problems:
        print(f"{len(problems)} problem(s):", file=out)
        for p in problems:
            print(f"  - {p}", file=out)
        return 2 if any(p.unreadable for p in problems) else 1
    for note in notes(inputs, schema):
        print(f"note: {note}", file=out)
    inventory = inputs.inventory
    print(f"ok: {int(inputs.person_histograms.sum()):,} persons in {len(inventory.blocks):,} blocks "
          f"({int(inventory.housing_units.sum()):,} housing units, {int(inventory.occupied.sum()):,} "
          f"occupied; {int(inventory.gq_facilities.sum()):,} GQ facilities)", file=out)
    return 0
