"""Writing and reading a state's PL 94-171 summary files (Vermont, six levels with block groups)."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from benchmarks._harness import Bench

ROOT = Path(__file__).resolve().parents[1]
VT = ROOT / "geography_fixtures" / "vt"
LEVELS = ("nation", "state", "county", "tract", "block_group", "block")


def _vt_histograms():
    """Vermont's block histograms (the input's; a release's have the same shape) and geography."""
    from das.io.microdata import read_inputs
    from das.model.geography import Geography
    from das.model.schema import load_schema

    schemas = {"persons": load_schema("pl94_persons"), "units": load_schema("h1_units")}
    inputs = read_inputs(VT / "persons.parquet", VT / "units.parquet", schemas["persons"], schemas["units"])
    geography = Geography.from_blocks(inputs.inventory.blocks, LEVELS)
    return geography, {"persons": inputs.person_histograms, "units": inputs.unit_histograms}, schemas


def write_vt() -> dict:
    from das.io.pl94171 import write_release

    geography, histograms, schemas = _vt_histograms()
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        written = write_release(Path(tmp), geography, histograms, schemas)
        seconds = time.perf_counter() - t0
        size = sum(p.stat().st_size for p in written)
        records = sum(1 for _ in open(written[0]))
    return {"seconds": seconds, "records": records, "files_mb": size / 2**20}


def read_vt() -> dict:
    from das.io.pl94171 import read_pl94171, write_release

    geography, histograms, schemas = _vt_histograms()
    with tempfile.TemporaryDirectory() as tmp:
        write_release(Path(tmp), geography, histograms, schemas)
        t0 = time.perf_counter()
        records = read_pl94171(Path(tmp))
        seconds = time.perf_counter() - t0
    return {"seconds": seconds, "records": len(records.geo)}


BENCHES = [
    Bench("pl94171.write_vt", "Vermont (18,660 blocks, six levels with block groups): every cell of P1-P5 and H1 "
          "at every summary level from block histograms, written as the four 2020 PL 94-171 files",
          write_vt, key="seconds", target="a few seconds for a state"),
    Bench("pl94171.read_vt", "read those four Vermont PL files back with every check (field counts, integers, "
          "LOGRECNO join)", read_vt, key="seconds"),
]
