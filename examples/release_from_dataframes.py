"""A release from pandas DataFrames, read back as DataFrames: the README's example, a little longer.

    python examples/release_from_dataframes.py [OUT_DIR]

The inputs are the shipped tiny fixture read with pandas (your own DataFrames work the same way: the
columns of docs/formats.md). seed=7 is replication mode: reproducible, NOT private; leave it out to release.
"""

import sys
from pathlib import Path

import pandas as pd

import das

FIXTURE = Path(__file__).resolve().parents[1] / "geography_fixtures" / "tiny"
out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path("runs") / "example_dataframes"

persons = pd.read_csv(FIXTURE / "persons.csv", dtype=str)  # every value as text, as a CSV file holds it
units = pd.read_csv(FIXTURE / "units.csv", dtype=str)
release = das.run("tiny", persons=persons, units=units, out=out, seed=7, workers=1, overwrite=True)

cert = release.certificate
print(f"persons budget: rho = {cert.rho} (exact), eps = {cert.eps} at delta = {float(cert.delta):g}")
p1 = release.tables["P1"]  # a row per geounit at every level, a column per cell
counties = p1[p1.level == "county"].set_index("geocode")
print(counties[["total", "cenrace=White", "cenrace=Black"]])
pl_named = release.table("P1", names="pl")  # the same cells under their PL 94-171 field names
assert (pl_named["P0010001"] == p1["total"]).all()
mdf = release.mdf  # one row per person; geography as plain strings
print(mdf.groupby(mdf.TABBLKST + mdf.TABBLKCOU).size().rename("persons"))
report = release.validate()  # the independent validator, from the files alone
print(f"valid: {report.ok} ({len(report.checks)} checks)")
