"""Reading microdata into block histograms, and writing the MDF."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import pandas as pd

from benchmarks._harness import Bench

ROOT = Path(__file__).resolve().parents[1]
VT = ROOT / "geography_fixtures" / "vt"


def read_vt() -> dict:
    from das.io.microdata import read_inputs
    from das.model.schema import load_schema

    t0 = time.perf_counter()
    inputs = read_inputs(VT / "persons.parquet", VT / "units.parquet", load_schema("pl94_persons"),
                         load_schema("h1_units"))
    assert inputs.person_histograms.sum() == 625_741
    return {"seconds": time.perf_counter() - t0}


def read_vt_naive() -> dict:
    """A plain pandas way, no validation: read, concatenate geocode strings, group by block and cell."""
    t0 = time.perf_counter()
    for name, keys in (("persons", ["GQTYPE_PL", "VOTING_AGE", "CENHISP", "CENRACE"]),
                       ("units", ["RTYPE", "GQTYPE_PL", "HH_STATUS"])):
        frame = pd.read_parquet(VT / f"{name}.parquet")
        geo = (frame["TABBLKST"].astype(str) + frame["TABBLKCOU"].astype(str)
               + frame["TABTRACTCE"].astype(str) + frame["TABBLK"].astype(str))
        frame.assign(geocode=geo).groupby(["geocode"] + keys, observed=True).size()
    return {"seconds": time.perf_counter() - t0}


def write_vt_mdf() -> dict:
    from das.io import mdf
    from das.io.microdata import read_inputs
    from das.model.schema import load_schema

    schema = load_schema("pl94_persons")
    inputs = read_inputs(VT / "persons.parquet", VT / "units.parquet", schema)
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        mdf.write_table(mdf.person_mdf(schema, inputs.inventory.blocks, inputs.person_histograms),
                        Path(tmp) / "mdf_persons.parquet")
        seconds = time.perf_counter() - t0
        size = (Path(tmp) / "mdf_persons.parquet").stat().st_size
    return {"seconds": seconds, "mdf_mb": size / 2**20, "rows_per_s": 625_741 / seconds}


BENCHES = [
    Bench("io.read_vt", "read Vermont persons (626k) + units (323k) Parquet into validated block "
          "histograms (PL94 + H1) and the unit inventory, every input check included", read_vt, key="seconds",
          references={"plain pandas (string geocodes + groupby, no checks)": read_vt_naive},
          target="< 10 s, peak < 2 GB"),
    Bench("io.write_vt_mdf", "expand Vermont block histograms into the persons MDF and write it (Parquet, zstd)",
          write_vt_mdf, key="seconds"),
]
