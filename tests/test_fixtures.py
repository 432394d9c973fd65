"""The shipped fixtures agree with the real published block counts, block by block, and with the
input format's consistency rules; the generator is deterministic."""

import importlib.machinery
import importlib.util
import subprocess
import sys
from functools import cache
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import ROOT

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data" / "census2010"
FIXTURES = ROOT / "geography_fixtures"
SCRIPT = ROOT / "scripts" / "make_fixtures"
GEO = ["TABBLKST", "TABBLKCOU", "TABTRACTCE", "TABBLKGRPCE", "TABBLK"]
WIDTHS = dict(zip(GEO, [2, 3, 6, 1, 4], strict=True))
ALL = ["vt", "de", "tiny", "al_perry", "vt_grand_isle"]


def shared_path(name: str) -> Path:
    path = SHARED / name
    if not path.exists():
        pytest.fail(f"{path} is missing: the fixture tests need the real block counts in "
                    f"../shared/data/census2010 beside the repo (CI has them)")
    return path


@cache
def real(name: str) -> pd.DataFrame:
    return pd.read_parquet(shared_path(name)).set_index("geoid")


def _strings(frame: pd.DataFrame) -> pd.DataFrame:
    for c in frame.columns:
        if isinstance(frame[c].dtype, pd.CategoricalDtype) or c in GEO or c == "CENRACE":
            frame[c] = frame[c].astype(str)
    frame["geoid"] = frame["TABBLKST"] + frame["TABBLKCOU"] + frame["TABTRACTCE"] + frame["TABBLK"]
    return frame


@cache
def persons(state: str) -> pd.DataFrame:
    return _strings(pd.read_parquet(FIXTURES / state / "persons.parquet"))


@cache
def units(state: str) -> pd.DataFrame:
    return _strings(pd.read_parquet(FIXTURES / state / "units.parquet"))


def counts(p: pd.DataFrame, mask=None) -> pd.Series:
    sel = p if mask is None else p[mask]
    return sel.groupby("geoid").size()


def compare(real_counts: pd.Series, mine: pd.Series, what: str):
    assert set(mine.index) <= set(real_counts.index), f"{what}: fixture blocks not in the real file"
    mine = mine.reindex(real_counts.index, fill_value=0)
    bad = real_counts.index[real_counts.to_numpy() != mine.to_numpy()]
    assert len(bad) == 0, f"{what}: {len(bad)} blocks differ, e.g. {bad[0]}: real {real_counts[bad[0]]}, fixture {mine[bad[0]]}"


def race_group(cenrace: pd.Series) -> np.ndarray:
    """0..5 for the six races alone, 6 for two or more."""
    level = cenrace.astype(int).to_numpy() - 1
    return np.where(level < 6, level, 6)


def load_script():
    loader = importlib.machinery.SourceFileLoader("make_fixtures", str(SCRIPT))
    spec = importlib.util.spec_from_loader("make_fixtures", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


@pytest.fixture(autouse=True, scope="module")
def _free_cached_frames():
    yield
    for f in (real, persons, units):
        f.cache_clear()


VT_RACE = ["race_white_alone", "race_black_alone", "race_aian_alone", "race_asian_alone",
           "race_nhpi_alone", "race_sor_alone", "race_two_or_more"]


def test_vermont_fixture_matches_every_block():
    b = real("blocks_2010_VT.parquet")
    p = persons("vt")
    assert len(p) == 625_741 == b["total_pop"].sum()
    compare(b["total_pop"], counts(p), "population")
    compare(b["vap"], counts(p, p["VOTING_AGE"] == 2), "18+")
    compare(b["hisp"], counts(p, p["CENHISP"] == 2), "Hispanic")
    group = race_group(p["CENRACE"])
    for g, col in enumerate(VT_RACE):
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
    for g, name in enumerate(["white", "black", "aian", "asian", "nhpi", "other", "two"]):
        compare(b[f"nh_{name}"], counts(p, ~hisp & (group == g)), f"nh_{name}")
        compare(b[f"vap_nh_{name}"], counts(p, ~hisp & adult & (group == g)), f"vap_nh_{name}")


def test_al_perry_is_the_ppmf_persons():
    ppmf = pd.read_parquet(shared_path("ppmf_persons_2010_AL_Perry01105.parquet"))
    p = persons("al_perry")
    key = ["geoid", "RTYPE", "GQTYPE_PL", "VOTING_AGE", "CENHISP", "CENRACE"]
    mine = p.groupby(key).size()
    theirs = ppmf.rename(columns={"rtype": "RTYPE", "gqtype_pl": "GQTYPE_PL", "voting_age": "VOTING_AGE",
                                  "cenhisp": "CENHISP", "cenrace": "CENRACE"}).groupby(key).size()
    assert mine.sort_index().equals(theirs.sort_index().astype(mine.dtype))
    # CENRACE coding agrees with the PPMF block file's race groups (codes 07..63 = two or more)
    b = real("ppmf_blocks_2010_AL_Perry01105.parquet")
    group = race_group(p["CENRACE"])
    for g, col in enumerate(VT_RACE):
        compare(b[col], counts(p, group == g), col)
    for t in range(1, 8):
        compare(b[f"gq_type{t}"], counts(p, p["GQTYPE_PL"] == t), f"gq_type{t}")


def test_cenrace_order_and_learned_shares():
    mf = load_script()
    c = mf.combos()
    assert len(c) == 63 == len(set(c))
    assert c[:6] == [(i,) for i in range(6)] and c[6] == (0, 1) and c[7] == (0, 2) and c[11] == (1, 2)
    assert c[21] == (0, 1, 2) and c[62] == tuple(range(6))
    d = mf.distributions(SHARED if SHARED.exists() else shared_path(""))
    for name, n in (("multi_nh", 57), ("multi_h", 57), ("hisp63", 63), ("gq", 7)):
        assert d[name].shape == (n,) and (d[name] > 0).all() and abs(d[name].sum() - 1) < 1e-12, name
    assert ((d["p_hisp_group"] > 0) & (d["p_hisp_group"] < 1)).all()


@pytest.mark.parametrize("state", ALL)
def test_format_types_and_order(state):
    for name, cols in (("persons", GEO + ["EPNUM", "RTYPE", "GQTYPE_PL", "VOTING_AGE", "CENHISP", "CENRACE",
                                          "QSEX", "QAGE"]),
                       ("units", GEO + ["RTYPE", "GQTYPE_PL", "HH_STATUS"])):
        schema = pq.read_schema(FIXTURES / state / f"{name}.parquet")
        assert schema.names == cols
        for c in cols:
            t = schema.field(c).type
            if c in GEO or c == "CENRACE":
                assert pa.types.is_dictionary(t) and pa.types.is_string(t.value_type), (c, t)
            else:
                assert t == {"EPNUM": pa.int64(), "QAGE": pa.int16()}.get(c, pa.int8()), (c, t)
    p, u = persons(state), units(state)
    for frame in (p, u):
        for c, w in WIDTHS.items():
            assert (frame[c].str.len() == w).all() and frame[c].str.isdigit().all(), c
        assert (frame["TABBLKGRPCE"] == frame["TABBLK"].str[0]).all()
        assert frame["geoid"].is_monotonic_increasing
    assert (p["EPNUM"].to_numpy() == np.arange(1, len(p) + 1)).all()
    assert set(p["RTYPE"]) <= {3, 5} and set(p["GQTYPE_PL"]) <= set(range(8))
    assert set(p["VOTING_AGE"]) <= {1, 2} and set(p["CENHISP"]) <= {1, 2} and set(p["QSEX"]) == {1, 2}
    assert set(p["CENRACE"]) <= {f"{i:02d}" for i in range(1, 64)}
    assert p["QAGE"].between(0, 115).all()
    hu, gq = u["RTYPE"] == 2, u["RTYPE"] == 4
    assert (hu | gq).all()
    assert (u.loc[hu, "GQTYPE_PL"] == 0).all() and u.loc[hu, "HH_STATUS"].isin([1, 2]).all()
    assert u.loc[gq, "GQTYPE_PL"].between(1, 7).all() and (u.loc[gq, "HH_STATUS"] == 0).all()


@pytest.mark.parametrize("state", ALL)
def test_fixture_consistency_rules(state):
    p, u = persons(state), units(state)
    assert set(p["geoid"]) <= set(u["geoid"])  # every block with people is in the units file
    assert ((p["GQTYPE_PL"] == 0) == (p["RTYPE"] == 3)).all()
    assert ((p["VOTING_AGE"] == 2) == (p["QAGE"] >= 18)).all()
    assert not ((p["GQTYPE_PL"] == 3) & (p["VOTING_AGE"] == 1)).any()
    facilities = set(map(tuple, u.loc[u["RTYPE"] == 4, ["geoid", "GQTYPE_PL"]].to_numpy()))
    gq_persons = set(map(tuple, p.loc[p["GQTYPE_PL"] > 0, ["geoid", "GQTYPE_PL"]].to_numpy()))
    assert gq_persons == facilities  # every facility holds someone, every GQ person has a facility
    occupied = u[(u["RTYPE"] == 2) & (u["HH_STATUS"] == 1)].groupby("geoid").size()
    household = p[p["GQTYPE_PL"] == 0].groupby("geoid").size()
    assert set(household.index) == set(occupied.index)  # households <=> occupied units
    if state != "vt_grand_isle":  # a county cut keeps its own rows
        assert u.groupby("geoid").size().gt(0).all()


@pytest.mark.parametrize("state", ["de", "al_perry"])
def test_derived_housing_fits_the_household_population(state):
    p, u = persons(state), units(state)
    occupied = u[(u["RTYPE"] == 2) & (u["HH_STATUS"] == 1)].groupby("geoid").size()
    household = p[p["GQTYPE_PL"] == 0].groupby("geoid").size().reindex(occupied.index)
    assert (occupied <= household).all()
    ratio = household.sum() / occupied.sum()
    assert 2.2 < ratio < 2.9, ratio
    assert ((u["RTYPE"] == 2) & (u["HH_STATUS"] == 2)).sum() > 0


def test_vermont_housing_units_are_the_real_ones():
    b = real("blocks_2010_VT.parquet")
    p, u = persons("vt"), units("vt")
    compare(b.loc[b["hu_total"] > 0, "hu_total"], counts(u, u["RTYPE"] == 2), "housing units")
    compare(b["hu_occupied"], counts(u, (u["RTYPE"] == 2) & (u["HH_STATUS"] == 1)), "occupied")
    compare(b["hu_vacant"], counts(u, (u["RTYPE"] == 2) & (u["HH_STATUS"] == 2)), "vacant")
    gq_only = b.index[(b["total_pop"] > 0) & (b["hu_occupied"] == 0)]
    assert len(gq_only) == 41
    in_gq_only = p["geoid"].isin(gq_only)
    assert in_gq_only.sum() == 8_020 and (p.loc[in_gq_only, "GQTYPE_PL"] > 0).all()
    # the blocks with no people and no housing units are the ones left out of the units file
    universe = b.index[(b["total_pop"] > 0) | (b["hu_total"] > 0)]
    assert set(u["geoid"]) == set(universe)


@pytest.mark.parametrize("state", ["vt", "de"])
def test_group_quarters_are_plausible(state):
    p = persons(state)
    gq = p["GQTYPE_PL"]
    assert set(gq[gq > 0]) == set(range(1, 8)) if state == "vt" else {1, 3, 4, 5, 6, 7} <= set(gq[gq > 0])
    assert 0.015 < (gq > 0).mean() < 0.05
    age = p["QAGE"]
    assert (age[gq == 3] >= 65).mean() > 0.8
    assert age[(gq == 5) & (age >= 18)].between(18, 24).all() and age[gq == 5].min() >= 16
    for t in (1, 6):  # adult correctional, military: adults only
        assert (age[gq == t] >= 18).all()
    if (gq == 2).any():
        assert (age[gq == 2] < 18).mean() > 0.5
    hh_age = age[gq == 0]
    assert 30 < hh_age.mean() < 45 and (hh_age >= 65).mean() > 0.08
    assert 0.45 < (p["QSEX"] == 1).mean() < 0.52
    assert (p.loc[gq == 1, "QSEX"] == 1).mean() > 0.8


def test_tiny_has_every_kind_of_block_and_csv_agrees_with_parquet():
    p, u = persons("tiny"), units("tiny")
    assert len(p) == 145 and u["geoid"].nunique() == 12
    assert p["TABBLKST"].nunique() == 1 and p["TABBLKCOU"].nunique() == 2
    assert (p["TABBLKCOU"] + p["TABTRACTCE"]).nunique() == 3
    people = set(p["geoid"])
    hu = u[u["RTYPE"] == 2]
    occupied = set(hu.loc[hu["HH_STATUS"] == 1, "geoid"])
    assert set(u["geoid"]) - people  # blocks with units and nobody in them
    assert any(set(hu.loc[hu["geoid"] == g, "HH_STATUS"]) == {2} for g in set(u["geoid"]) - people)  # vacant only
    assert people - occupied  # a GQ-only block
    assert (p[p["GQTYPE_PL"] > 0].groupby("geoid")["GQTYPE_PL"].nunique() >= 2).any()  # several GQ types
    for name in ("persons", "units"):
        a = pd.read_csv(FIXTURES / "tiny" / f"{name}.csv", dtype=str, keep_default_na=False)
        b = pd.read_parquet(FIXTURES / "tiny" / f"{name}.parquet").astype(str)
        assert list(a.columns) == list(b.columns)
        assert a.equals(b[a.columns])
        for c, w in WIDTHS.items():
            assert (a[c].str.len() == w).all()


def test_generation_is_deterministic(tmp_path):
    """Regenerate tiny and al_perry (small; the state fixtures take the same code paths) twice
    and compare with the committed files byte for byte."""
    for out in (tmp_path / "a", tmp_path / "b"):
        subprocess.run([sys.executable, str(SCRIPT), "--only", "tiny,al_perry", "--out", str(out),
                        "--shared", str(shared_path(""))], check=True, capture_output=True)
    for d, names in (("tiny", ["persons.csv", "units.csv", "persons.parquet", "units.parquet"]),
                     ("al_perry", ["persons.parquet", "units.parquet"])):
        for name in names:
            committed = (FIXTURES / d / name).read_bytes()
            assert (tmp_path / "a" / d / name).read_bytes() == committed, f"{d}/{name} differs from the committed file"
            assert (tmp_path / "b" / d / name).read_bytes() == committed
