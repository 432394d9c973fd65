"""`das validate-input PERSONS UNITS`: every problem in the input files, or an all-clear."""

from __future__ import annotations

import sys

from das.io.microdata import Problem, collect_problems
from das.schema import load_schema


def validate_input(persons_path, units_path, schema) -> list[Problem]:
    problems, _ = collect_problems(persons_path, units_path, schema)
    return problems


def validate_input_main(persons, units, schema_name: str = "pl94_persons", out=None) -> int:
    out = out or sys.stdout
    schema = load_schema(schema_name)
    problems, inputs = collect_problems(persons, units, schema)
    if problems:
        print(f"{len(problems)} problem(s):", file=out)
        for p in problems:
            print(f"  - {p}", file=out)
        return 1
    n = int(inputs.person_histograms.sum())
    print(f"ok: {n:,} persons in {len(inputs.inventory.blocks):,} blocks "
          f"({int(inputs.inventory.housing_units.sum()):,} housing units, "
          f"{int(inputs.inventory.gq_facilities.sum()):,} GQ facilities), schema {schema.name}", file=out)
    return 0
