"""docs/architecture.md's "where new code goes", the level row: a level is one entry in das.model.levels's
table (its name and geocode digits), and a spec and strategy that name it get it measured, solved, tabulated,
written to the NMF and validated, with no other edit."""

from fractions import Fraction

import pandas as pd
from conftest import TINY

import das
from das.model import levels

LEVELS = ["nation", "state", "county", "tract_group", "tract", "block"]
QUERIES = '{"total" = "1/2", "detailed" = "1/2"}'


def test_a_level_added_to_the_geography_table_is_released_and_validated(tmp_path, monkeypatch):
    monkeypatch.setitem(levels.LEVEL_DIGITS, "tract_group", 8)  # the one edit: state, county, 3 tract digits
    strategy = tmp_path / "toy_levels.toml"
    strategy.write_text('name = "toy_levels"\nschema = "pl94_persons"\nrho = "2"\ndelta = "1e-10"\n' + "".join(
        f'[levels.{level}]\nrho_share = "1/6"\nqueries = {QUERIES}\n' for level in LEVELS))
    spec = {"name": "toy", "levels": LEVELS, "input": {"persons": str(TINY / "persons.csv"), "units": str(TINY / "units.csv")},
            "persons": {"schema": "pl94_persons", "strategy": str(strategy)}, "privacy": {"delta": "1e-10"}}
    release = das.run(spec, out=tmp_path / "out", seed=3)
    report = das.validate(tmp_path / "out")
    assert report.violations == [] and any("NMF: exactly the certified measurements" in c for c in report.checks)
    assert release.certificate.level("tract_group").rho == Fraction(2, 6)
    assert (tmp_path / "out" / "nmf" / "persons" / "tract_group.parquet").is_file()
    p1 = pd.read_parquet(tmp_path / "out" / "tables" / "P1.parquet")
    groups = p1[p1["level"] == "tract_group"].set_index("geocode")["total"]
    blocks = p1[p1["level"] == "block"]
    assert sorted(groups.index) == sorted({g[:8] for g in blocks["geocode"]})
    assert groups.to_dict() == blocks.groupby(blocks["geocode"].str[:8])["total"].sum().to_dict()  # they nest exactly
