"""The shipped fixtures agree with the real published block counts, block by block."""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data" / "census2010"
FIXTURES = ROOT / "geography_fixtures"


def real(name: str) -> pd.DataFrame:
    path = SHARED / name
    if not path.exists():
        pytest.fail(f"{path} is missing: the fixture tests need ../shared/data/census2010 beside the repo")
    return pd.read_parquet(path).set_index("geoid")


def persons(state: str) -> pd.DataFrame:
    p = pd.read_parquet(FIXTURES / state / "persons.parquet")
    for c in p.columns:
        if isinstance(p[c].dtype, pd.CategoricalDtype):
            p[c] = p[c].astype(str)
    p["geoid"] = p["TABBLKST"] + p["TABBLKCOU"] + p["TABTRACTCE"] + p["TABBLK"]
    return p


def counts(p: pd.DataFrame, mask=None) -> pd.Series:
    sel = p if mask is None else p[mask]
    return sel.groupby("geoid").size()


def compare(real_counts: pd.Series, mine: pd.Series, what: str):
    mine = mine.reindex(real_counts.index, fill_value=0)
    bad = real_counts.index[real_counts.to_numpy() != mine.to_numpy()]
    assert len(bad) == 0, f"{what}: {len(bad)} blocks differ, e.g. {bad[0]}: real {real_counts[bad[0]]}, fixture {mine[bad[0]]}"


RACE_FLAGS = None


def race_group(cenrace: pd.Series) -> np.ndarray:
    """0..5 for the six races alone, 6 for two or more."""
    level = cenrace.astype(int).to_numpy() - 1
    return np.where(level < 6, level, 6)


def test_vermont_fixture_matches_every_block():
    b = real("blocks_2010_VT.parquet")
    p = persons("vt")
    assert len(p) == 625_741 == b["total_pop"].sum()
    compare(b["total_pop"], counts(p), "population")
    compare(b["vap"], counts(p, p["VOTING_AGE"] == 2), "18+")
    compare(b["hisp"], counts(p, p["CENHISP"] == 2), "Hispanic")
    group = race_group(p["CENRACE"])
    for g, col in enumerate(["race_white_alone", "race_black_alone", "race_aian_alone", "race_asian_alone",
                             "race_nhpi_alone", "race_sor_alone", "race_two_or_more"]):
        compare(b[col], counts(p, group == g), col)


def test_delaware_fixture_matches_every_block():
    b = real("blocks_2010_DE.parquet")
    p = persons("de")
    assert len(p) == 897_934 == b["total_pop"].sum()
    hisp = p["CENHISP"] == 2
    adult = p["VOTING_AGE"] == 2
    group = race_group(p["CENRACE"])
    compare(b["total_pop"], counts(p), "population")
    compare(b["vap"], counts(p, adult), "18+")
    compare(b["hisp"], counts(p, hisp), "Hispanic")
    compare(b["vap_hisp"], counts(p, hisp & adult), "18+ Hispanic")
    names = ["white", "black", "aian", "asian", "nhpi", "other", "two"]
    for g, name in enumerate(names):
        compare(b[f"nh_{name}"], counts(p, ~hisp & (group == g)), f"nh_{name}")
        compare(b[f"vap_nh_{name}"], counts(p, ~hisp & adult & (group == g)), f"vap_nh_{name}")


@pytest.mark.parametrize("state", ["vt", "de", "tiny"])
def test_fixture_consistency_rules(state):
    p = persons(state)
    u = pd.read_parquet(FIXTURES / state / "units.parquet")
    for c in u.columns:
        if isinstance(u[c].dtype, pd.CategoricalDtype):
            u[c] = u[c].astype(str)
    u["geoid"] = u["TABBLKST"] + u["TABBLKCOU"] + u["TABTRACTCE"] + u["TABBLK"]
    assert set(p["geoid"]) <= set(u["geoid"])
    assert ((p["GQTYPE_PL"] == 0) == (p["RTYPE"] == 3)).all()
    assert ((p["VOTING_AGE"] == 2) == (p["QAGE"] >= 18)).all()
    assert not ((p["GQTYPE_PL"] == 3) & (p["VOTING_AGE"] == 1)).any()
    facilities = set(map(tuple, u.loc[u["RTYPE"] == 4, ["geoid", "GQTYPE_PL"]].to_numpy()))
    gq_persons = set(map(tuple, p.loc[p["GQTYPE_PL"] > 0, ["geoid", "GQTYPE_PL"]].to_numpy()))
    assert gq_persons == facilities  # every facility holds someone, every GQ person has a facility
    occupied = set(u.loc[(u["RTYPE"] == 2) & (u["HH_STATUS"] == 1), "geoid"])
    household = set(p.loc[p["GQTYPE_PL"] == 0, "geoid"])
    assert household == occupied


def test_vermont_housing_units_are_the_real_ones():
    b = real("blocks_2010_VT.parquet")
    u = pd.read_parquet(FIXTURES / "vt" / "units.parquet")
    geoid = u["TABBLKST"].astype(str) + u["TABBLKCOU"].astype(str) + u["TABTRACTCE"].astype(str) + u["TABBLK"].astype(str)
    hu = geoid[u["RTYPE"] == 2].value_counts()
    compare(b.loc[b["hu_total"] > 0, "hu_total"], hu, "housing units")


def test_tiny_csv_and_parquet_agree_and_generation_is_deterministic(tmp_path):
    for name in ("persons", "units"):
        a = pd.read_csv(FIXTURES / "tiny" / f"{name}.csv", dtype=str)
        b = pd.read_parquet(FIXTURES / "tiny" / f"{name}.parquet").astype(str)
        assert a.equals(b[a.columns])
    subprocess.run([sys.executable, str(ROOT / "scripts" / "make_fixtures"), "--only", "tiny", "--out", str(tmp_path)],
                   check=True, capture_output=True)
    for name in ("persons.csv", "units.csv"):
        assert (tmp_path / "tiny" / name).read_bytes() == (FIXTURES / "tiny" / name).read_bytes()
