"""Synthetic multi-state inputs for scale tests: the real-state fixtures replicated under new state codes.

Copy i of `states` takes Vermont (even i) or Delaware (odd i) from geography_fixtures/ and gives it
the i-th state FIPS code of STATE_CODES; persons are renumbered. Written one copy (one row group)
at a time, so memory follows one state. Never commit the output: write it under /tmp.
Sizes: a VT copy has 18,660 blocks and 625,741 persons, a DE copy 17,931 and 897,934; 9 copies
(benchmarks/national.py) give 165,024 blocks and 6.72 million persons (40.7 a block; the nation
has about 41: 331 million in 8.1 million blocks).

>>> [source for source, _ in plan(3)]
['vt', 'de', 'vt']
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from das.core import atomic
from das.core.paths import FIXTURES
from das.model.geography import GEOCODE_COLUMNS

SOURCES = ("vt", "de")
STATE_CODES = ("01", "02", "04", "05", "06", "08", "09", "11", "12", "13", "15", "16", "17", "18", "19", "20",
               "21", "22", "23", "24", "25", "26", "27", "28", "29", "30", "31", "32", "33", "34", "35", "36")

SPEC = """# Synthetic multi-state input ({states} copies of the VT/DE fixtures), written by das.io.scale_inputs.
name = "synthetic_{states}"
description = "{states} state copies of the VT/DE fixtures under new state codes, PL94 persons + H1 units"
levels = ["nation", "state", "county", "tract", "block"]

[input]
persons = "persons.parquet"
units = "units.parquet"

[persons]
schema = "pl94_persons"
strategy = "pl94_five_level"

[units]
schema = "h1_units"
strategy = "h1_units_five_level"

[privacy]
delta = "1e-10"
"""


def plan(states: int) -> list[tuple[str, str]]:
    """(source fixture, new state code) for each copy."""
    if not 1 <= states <= len(STATE_CODES):
        raise ValueError(f"states must be 1..{len(STATE_CODES)}, got {states}")
    return [(SOURCES[i % len(SOURCES)], STATE_CODES[i]) for i in range(states)]


def _restate(table: pa.Table, code: str, first_epnum: int | None) -> pa.Table:
    column = pa.DictionaryArray.from_arrays(pa.array(np.zeros(table.num_rows, np.int32)), pa.array([code]))
    table = table.set_column(table.schema.get_field_index("TABBLKST"), "TABBLKST", column)
    if first_epnum is not None:
        epnum = pa.array(np.arange(first_epnum, first_epnum + table.num_rows, dtype=np.int64))
        table = table.set_column(table.schema.get_field_index("EPNUM"), "EPNUM", epnum)
    return table


def write_synthetic(out_dir: Path, states: int, fixtures: Path = FIXTURES, partitioned: bool = False) -> dict:
    """Write persons.parquet, units.parquet and spec.toml for `states` copies; returns counts.
    partitioned: the inputs as directories persons/ and units/ of one file per state (`<code>.parquet`),
    the input of a partitioned run (das/driver/partitioned.py)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    counts = {"states": states, "persons": 0, "unit_rows": 0, "blocks": 0}
    for name in ("persons", "units"):
        schema = pq.read_schema(fixtures / SOURCES[0] / f"{name}.parquet")
        if partitioned:
            (out_dir / name).mkdir(exist_ok=True)
            for source, code in plan(states):
                table = _copy(fixtures, source, name, code, counts=counts, schema=schema)
                with atomic.replacing(out_dir / name / f"{code}.parquet") as tmp:
                    pq.write_table(table, tmp, compression="zstd")
            continue
        with atomic.replacing(out_dir / f"{name}.parquet") as tmp, \
                pq.ParquetWriter(tmp, schema, compression="zstd") as writer:
            for source, code in plan(states):
                writer.write_table(_copy(fixtures, source, name, code, counts=counts, schema=schema))
    spec = SPEC.format(states=states)
    if partitioned:
        spec = spec.replace('"persons.parquet"', '"persons"').replace('"units.parquet"', '"units"')
    (out_dir / "spec.toml").write_text(spec)
    return counts


def _copy(fixtures: Path, source: str, name: str, code: str, *, counts: dict, schema: pa.Schema) -> pa.Table:

    """One state copy of a fixture's persons or units, counted into `counts`."""
    table = pq.read_table(fixtures / source / f"{name}.parquet")
    first = counts["persons"] + 1 if name == "persons" else None
    table = _restate(table, code, first).cast(schema)
    counts["persons" if name == "persons" else "unit_rows"] += table.num_rows
    if name == "units":
        geocodes = pc.binary_join_element_wise(*[table[c].cast(pa.string()) for c, _ in GEOCODE_COLUMNS], "")
        counts["blocks"] += len(pc.unique(geocodes))
    return table
