"""Areas off the spine, synthetic districts and bias by block composition (das.research.areas, .districts,
.composition, .offspine): every expected value is recounted here with plain loops, then `das metrics --areas`
and `das report` end to end on the tiny fixture."""

import json
import math

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
from conftest import ROOT, cli_refused, cli_refused_by_parser

from das.cli import main as das_main
from das.model.schema import load_schema
from das.research.areas import area_stats, area_table
from das.research.composition import composition_stats, composition_table, group_counts, largest_share, share_bin
from das.research.districts import DISTRICT_SIZES, district_ids, district_index, synthetic_districts

# ------------------------------------------------------------------------------------------------
# A fixture of 30 blocks: true and estimated totals (two estimators), two area types


TRUTH = [0, 3, 12, 50, 7, 0, 120, 33, 9, 15, 2, 80, 40, 5, 600, 1, 18, 25, 11, 0, 70, 4, 6, 130, 21, 8, 0, 44, 13, 3]
TOPDOWN = [1, 2, 13, 47, 8, 1, 118, 35, 9, 13, 3, 82, 38, 6, 596, 2, 17, 24, 12, 1, 71, 4, 5, 128, 22, 9, 1, 42, 14, 4]
NOISY = [-1, 4, 12.5, 52, 5, 0, 121, 30, 10, 16, 1, 79, 41, 4, 603, 0, 19, 26, 10, -2, 69, 5, 7, 131, 20, 8, 2, 45, 12, 2]
PLACE = [0, 0, 0, -1, 1, 1, 1, 1, -1, 2, 2, 2, 3, 3, 3, 3, -1, -1, 4, 4, 5, 5, 5, 5, 5, 6, 6, -1, 7, 7]
WARD = [i // 6 for i in range(30)]


def size_bin_of(count: float) -> str:
    for label, low, high in (("0", 0, 0), ("1-9", 1, 9), ("10-99", 10, 99), ("100-999", 100, 999),
                             ("1000-9999", 1000, 9999)):
        if low <= count <= high:
            return label
    return "10000+"


def expected_area_rows(truth, estimate, index):
    """{bin: (n, mae, mean, se, max_abs, malpe)} of the areas of `index`, recounted with loops ("all" included)."""
    totals = {}
    for block, area in enumerate(index):
        if area >= 0:
            t, e = totals.get(area, (0.0, 0.0))
            totals[area] = (t + truth[block], e + estimate[block])
    groups = {}
    for t, e in totals.values():
        for key in (size_bin_of(t), "all"):
            groups.setdefault(key, []).append((t, e - t))
    rows = {}
    for key, items in groups.items():
        n = len(items)
        errors = [err for _, err in items]
        mean = sum(errors) / n
        se = math.sqrt(sum((x - mean) ** 2 for x in errors) / (n - 1) / n) if n > 1 else float("nan")
        positive = [err / t for t, err in items if t > 0]
        malpe = 100 * sum(positive) / len(positive) if positive else float("nan")
        rows[key] = (n, sum(abs(x) for x in errors) / n, mean, se, max(abs(x) for x in errors), malpe)
    return rows


def test_area_metrics_match_a_recount_beside_the_spine():
    truth = np.array(TRUTH, dtype=float)
    estimates = {"topdown": np.array(TOPDOWN, dtype=float), "noisy": np.array(NOISY, dtype=float)}
    areas = {"place": np.array(PLACE), "ward": np.array(WARD)}
    stats = area_stats(truth, estimates, areas).assign(rho="1", replicate=0)
    # a spine level of one geounit per 10 blocks, to stand beside them
    spine_rows = []
    for estimator, estimate in estimates.items():
        from das.research.metrics import error_stats

        tracts_t = np.array([truth[i:i + 10].sum() for i in range(0, 30, 10)])[:, None]
        tracts_e = np.array([estimate[i:i + 10].sum() for i in range(0, 30, 10)])[:, None]
        spine_rows.append(error_stats(tracts_e, tracts_t).assign(estimator=estimator, level="tract", query="total"))
    spine = pd.concat(spine_rows, ignore_index=True).assign(rho="1", replicate=0)
    table = area_table(spine, stats, levels=["tract"]).set_index(["estimator", "level", "bin"])
    assert list(dict.fromkeys(table.reset_index()["level"])) == ["tract", "place", "ward"]  # the spine first
    assert set(table.reset_index()["kind"]) == {"level", "area"}
    for estimator, estimate in estimates.items():
        for name, index in areas.items():
            for key, (n, mae, mean, se, max_abs, malpe) in expected_area_rows(TRUTH, list(estimate), index).items():
                row = table.loc[(estimator, name, key)]
                assert row["units"] == n and row["se_basis"] == "cells"
                assert row["mae"] == pytest.approx(mae) and row["mean_error"] == pytest.approx(mean)
                assert row["max_abs_error"] == pytest.approx(max_abs)
                assert row["malpe"] == pytest.approx(malpe, nan_ok=True)
                assert row["se"] == pytest.approx(se, nan_ok=True)
                if n > 1 and se > 0:
                    assert row["t"] == pytest.approx(mean / se)
        tract = expected_area_rows(TRUTH, list(estimate), [i // 10 for i in range(30)])
        assert table.loc[(estimator, "tract", "all"), "mae"] == pytest.approx(tract["all"][1])


# ------------------------------------------------------------------------------------------------
# Composition: persons per block by (hispanic, cenrace level), groups recounted by hand

PERSONS = [  # per block: (hispanic code, cenrace level 0-62, persons)
    [(1, 0, 12)],                                 # all NH White: share 1
    [(1, 0, 6), (1, 1, 6)],                       # NH White / NH Black: 0.5
    [(2, 0, 3), (2, 5, 3), (1, 0, 14)],           # Hispanic (any race) 6, NH White 14: 0.7
    [(1, 6, 4), (1, 7, 4), (1, 3, 1)],            # two or more races 8 of 9: 0.889
    [(1, 3, 9), (1, 0, 1)],                       # NH Asian 0.9
    [],                                           # empty: no share
    [(1, 2, 1), (1, 4, 1), (2, 1, 1)],            # three groups of 1: 1/3
    [(1, 0, 40), (1, 1, 25), (2, 0, 35)],         # 0.4
    [(1, 0, 150)],                                # 1.0, size 100-999
    [(1, 0, 5), (1, 62, 5)],                      # White 5, two or more 5: 0.5
]
COMPOSITION_ESTIMATE = [[13, 11, 24, 8, 11, 1, 2, 98, 149, 9], [11, 12, 21, 10, 10, 0, 4, 101, 152, 11]]


def hand_share(block) -> float | None:
    groups = {}
    for hispanic, race, persons in block:
        single = race < 6
        group = "H" if hispanic == 2 else (f"NH{race}" if single else "NH2+")
        groups[group] = groups.get(group, 0) + persons
    total = sum(groups.values())
    return max(groups.values()) / total if total else None


def hand_share_bin(share) -> str | None:
    if share is None:
        return None
    return "0-0.5" if share < 0.5 else ("0.5-0.9" if share < 0.9 else "0.9-1")


def histograms(schema):
    rows, cols, values = [], [], []
    for block, people in enumerate(PERSONS):
        for hispanic, race, persons in people:
            cell = schema.cell_index((0, 1, hispanic - 1, race))  # household, 18+, origin, race
            rows.append(block)
            cols.append(int(cell))
            values.append(persons)
    return sp.csr_matrix((values, (rows, cols)), shape=(len(PERSONS), schema.size))


def test_largest_group_shares_match_a_hand_count():
    schema = load_schema("pl94_persons")
    shares = largest_share(group_counts(schema, histograms(schema)))
    for block, people in enumerate(PERSONS):
        expected = hand_share(people)
        assert (np.isnan(shares[block]) if expected is None else shares[block] == pytest.approx(expected)), block
    bins = share_bin(shares)
    labels = ["0-0.5", "0.5-0.9", "0.9-1"]
    assert [labels[b] if b >= 0 else None for b in bins] == [hand_share_bin(hand_share(p)) for p in PERSONS]


def expected_cells(replicate_estimates):
    """{(share, size bin): (blocks, mean, se)} recounted: one release, across blocks; several, across replicates."""
    truth = [sum(n for _, _, n in p) for p in PERSONS]
    per_replicate = []
    for estimate in replicate_estimates:
        cells = {}
        for block, people in enumerate(PERSONS):
            share = hand_share_bin(hand_share(people))
            if share is not None:
                cells.setdefault((share, size_bin_of(truth[block])), []).append(estimate[block] - truth[block])
        per_replicate.append(cells)
    expected = {}
    for key in per_replicate[0]:
        if len(per_replicate) == 1:
            errors = per_replicate[0][key]
            n, mean = len(errors), sum(errors) / len(errors)
            se = math.sqrt(sum((x - mean) ** 2 for x in errors) / (n - 1) / n) if n > 1 else float("nan")
        else:
            means = [sum(cells[key]) / len(cells[key]) for cells in per_replicate]
            n, mean = len(per_replicate[0][key]), sum(means) / len(means)
            se = math.sqrt(sum((m - mean) ** 2 for m in means) / (len(means) - 1) / len(means))
        expected[key] = (n, mean, se)
    return expected


@pytest.mark.parametrize("replicates", [1, 2])
def test_composition_cells_match_a_recount(replicates):
    schema = load_schema("pl94_persons")
    hist = histograms(schema)
    truth = np.asarray(hist.sum(axis=1)).ravel()
    shares = share_bin(largest_share(group_counts(schema, hist)))
    parts = [composition_stats(truth, {"topdown": np.array(COMPOSITION_ESTIMATE[r], float)}, shares)
             .assign(rho="1", replicate=r) for r in range(replicates)]
    table = composition_table(pd.concat(parts, ignore_index=True)).set_index(["share", "bin"])
    expected = expected_cells(COMPOSITION_ESTIMATE[:replicates])
    assert set(table.index) - {(s, "all") for s in ("0-0.5", "0.5-0.9", "0.9-1")} == set(expected)
    for key, (blocks, mean, se) in expected.items():
        row = table.loc[key]
        assert row["blocks"] == blocks and row["mean_error"] == pytest.approx(mean)
        assert row["se"] == pytest.approx(se, nan_ok=True)
        assert row["se_basis"] == ("cells" if replicates == 1 else "replicates")
        if se > 0:
            assert row["t"] == pytest.approx(mean / se)


# ------------------------------------------------------------------------------------------------
# Synthetic districts


def fake_blocks(seed: int = 5):
    """Three counties of several tracts, blocks in shuffled order, populations 0-400."""
    rng = np.random.default_rng(seed)
    blocks = [f"50{county:03d}{tract:06d}{block:04d}" for county in (1, 3, 7) for tract in range(1, 9)
              for block in range(1000, 1000 + int(rng.integers(3, 15)))]
    population = rng.integers(0, 400, size=len(blocks))
    population[:: 7] = 0
    order = rng.permutation(len(blocks))
    return np.array(blocks)[order], population[order]


@pytest.mark.parametrize("size", [1000, 5000])
def test_districts_are_runs_of_about_n_persons_cutting_across_tracts(size):
    blocks, population = fake_blocks()
    index = district_index(blocks, population, size=size)
    assert np.array_equal(index, district_index(blocks, population, size=size))  # deterministic
    shuffled = np.random.default_rng(1).permutation(len(blocks))
    assert np.array_equal(district_index(blocks[shuffled], population[shuffled], size=size), index[shuffled])
    order = np.argsort(blocks)
    in_order = index[order]
    assert (np.diff(in_order) >= 0).all() and (np.diff(in_order) <= 1).all()  # runs, in geocode order, numbered 0..
    assert in_order[0] == 0
    crossing = 0
    for county in {b[:5] for b in blocks}:
        mine = order[[blocks[i][:5] == county for i in order]]
        districts = list(dict.fromkeys(index[mine]))
        assert not set(districts) & set(index[[i for i in range(len(blocks)) if blocks[i][:5] != county]])
        for k, district in enumerate(districts):
            members = mine[index[mine] == district]
            persons = int(population[members].sum())
            crossing += len({blocks[i][:11] for i in members}) > 1
            if k < len(districts) - 1:  # closed at the first block that reached the size
                assert persons >= size and persons - int(population[members[-1]]) < size
            elif len(districts) > 1:  # the county's last run: at least half the size (a smaller one joined it)
                assert persons >= size / 2
    assert crossing > 0  # not reset at tract boundaries
    ids = district_ids(blocks, index)
    assert ids[order[0]] == f"{blocks[order[0]][:5]}-1"
    assert len(set(ids)) == index.max() + 1


def test_default_district_types_cover_every_block_once():
    blocks, population = fake_blocks(9)
    districts = synthetic_districts(blocks, population)
    assert set(districts) == set(DISTRICT_SIZES) == {"district_1k", "district_5k"}
    for index in districts.values():
        assert index.shape == blocks.shape and (index >= 0).all()


# ------------------------------------------------------------------------------------------------
# das metrics --areas and das report end to end, on the tiny fixture


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    from das.driver.run import run

    return run("tiny", tmp_path_factory.mktemp("offspine") / "tiny", seed=5, workers=1, progress=False).out_dir


def tiny_places(path):
    units = pd.read_csv(ROOT / "geography_fixtures/tiny/units.csv", dtype=str)
    geoid = sorted(set(units["TABBLKST"] + units["TABBLKCOU"] + units["TABTRACTCE"] + units["TABBLK"]))
    places = {g: f"P{i % 3}" for i, g in enumerate(geoid) if i % 4 != 3}  # every fourth block in no place
    pd.DataFrame({"GEOID": list(places), "area": list(places.values())}).to_csv(path, index=False)
    return places


def test_metrics_with_an_area_file_scores_it_beside_the_spine(tiny_run, tmp_path, capsys):
    places = tiny_places(tmp_path / "place.csv")
    out = tmp_path / "m"
    assert das_main(["metrics", str(tiny_run), "--areas", f"place={tmp_path / 'place.csv'}", "--out", str(out),
                     "--estimators", "topdown"]) == 0
    printed = capsys.readouterr().out
    assert "off the spine" in printed and "place" in printed
    areas = pd.read_parquet(out / "areas.parquet").set_index(["estimator", "level", "bin"])
    # recount place totals from the MDF and the true persons
    key = ["TABBLKST", "TABBLKCOU", "TABTRACTCE", "TABBLK"]
    mdf = pd.read_parquet(tiny_run / "mdf_persons.parquet").astype({k: str for k in key})
    truth = pd.read_csv(ROOT / "geography_fixtures/tiny/persons.csv", dtype=str)
    t_place, e_place = {}, {}
    for frame, into in ((truth, t_place), (mdf, e_place)):
        for geoid in frame[key].sum(axis=1):
            if geoid in places:
                into[places[geoid]] = into.get(places[geoid], 0) + 1
    errors = [e_place.get(p, 0) - t_place.get(p, 0) for p in sorted(set(places.values()))]
    row = areas.loc[("topdown", "place", "all")]
    assert row["units"] == 3
    assert row["mae"] == pytest.approx(sum(map(abs, errors)) / 3)
    assert row["mean_error"] == pytest.approx(sum(errors) / 3)
    assert row["max_abs_error"] == pytest.approx(max(map(abs, errors)))
    assert {"tract", "block_group", "block"} <= set(areas.reset_index()["level"])  # the spine beside it
    meta = json.loads((out / "study.json").read_text())
    assert meta["areas"]["place"]["areas"] == 3 and len(meta["areas"]["place"]["sha256"]) == 64
    assert "off the spine" in (out / "metrics.md").read_text() and "composition" in (out / "metrics.md").read_text()
    assert (out / "composition.parquet").exists() and (out / "blocks.parquet").exists()
    # the report draws them, and rescoring other area files from the kept block errors gives the same place figures
    assert das_main(["report", str(out)]) == 0
    report = (out / "report" / "report.md").read_text()
    assert "areas_mae.png" in report and "composition_bias.png" in report and (out / "report" / "areas_mae.png").exists()
    assert das_main(["report", str(out), "--areas", f"town={tmp_path / 'place.csv'}"]) == 0
    assert "Area type `town`: 3 areas" in (out / "report" / "report.md").read_text()


def test_metrics_without_area_files_scores_synthetic_districts(tiny_run, tmp_path):
    out = tmp_path / "m"
    assert das_main(["metrics", str(tiny_run), "--out", str(out), "--estimators", "topdown"]) == 0
    areas = pd.read_parquet(out / "areas.parquet")
    assert {"district_1k", "district_5k"} <= set(areas["level"])
    meta = json.loads((out / "study.json").read_text())
    assert "synthetic" in meta["areas"]["district_1k"]


@pytest.mark.parametrize("argument, message", [
    ("place", "expected TYPE=PATH"), ("place=", "expected TYPE=PATH"), ("=x.csv", "is not a name"),
    ("1place=x.csv", "is not a name"),
])
def test_a_malformed_areas_argument_is_refused_while_parsing(argument, message, capsys):
    assert message in cli_refused_by_parser(["metrics", "RUN", "--areas", argument], capsys)


def test_bad_area_files_are_refused_before_anything_is_written(tiny_run, tmp_path, capsys):
    tiny_places(tmp_path / "place.csv")
    out = tmp_path / "m"
    base = ["metrics", str(tiny_run), "--out", str(out)]
    printed = cli_refused([*base, "--areas", f"tract={tmp_path / 'place.csv'}"], capsys)
    assert "is a level of the geographic spine" in printed
    printed = cli_refused([*base, "--areas", f"a={tmp_path / 'place.csv'}", "--areas", f"a={tmp_path / 'x.csv'}"],
                          capsys)
    assert "area type 'a' twice" in printed
    printed = cli_refused([*base, "--areas", f"a={tmp_path / 'missing.csv'}"], capsys)
    assert "missing.csv" in printed
    assert not out.exists()  # refused before its directory is made


def test_the_area_type_pattern_of_the_command_line_is_the_readers():
    from das.cli.args import AREA_TYPE
    from das.io.areas import TYPE_NAME

    assert AREA_TYPE == TYPE_NAME.pattern
