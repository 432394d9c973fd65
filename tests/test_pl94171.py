"""The 2020 P.L. 94-171 summary files (das/io/pl94171.py): layout, cells against das's Parquet
tables, round trip, reader errors, and the real client (the PL94171 R package) reading them."""

import os
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import ROOT

from das.cli import main
from das.core.errors import InputError, SpecError
from das.driver.run import run
from das.driver.runspec import load_run_spec
from das.io.pl94171 import load_layout, read_pl94171, run_records, write_pl94171

SAMPLE = ROOT.parent / "shared" / "data" / "pl94171_2018e2e_ri"
FIXTURES = ROOT / "geography_fixtures"
SUMLEV = {"state": "040", "county": "050", "tract": "140", "block_group": "150", "block": "750"}
FIELDS = {"geo": 97, "00001": 149, "00002": 152, "00003": 15}
NOT_HISP = "hispanic=Not Hispanic or Latino"
NUMRACES = ["One race", "Two races", "Three races", "Four races", "Five races", "Six races"]


@pytest.fixture(scope="module")
def layout():
    return load_layout()


def _spec(tmp: Path, fixture: str, levels: list[str], strategies: tuple[str, str], pl94171: bool) -> Path:
    spec = tmp / f"{fixture}.toml"
    spec.write_text(f"""
name = "{fixture}_pl"
levels = {levels!r}
[input]
persons = "{FIXTURES / fixture / 'persons.parquet'}"
units = "{FIXTURES / fixture / 'units.parquet'}"
[persons]
schema = "pl94_persons"
strategy = "{strategies[0]}"
[units]
schema = "h1_units"
strategy = "{strategies[1]}"
[output]
pl94171 = {str(pl94171).lower()}
""")
    return spec


@pytest.fixture(scope="module")
def bg_release(tmp_path_factory):
    """Grand Isle VT with block groups (six levels), PL files written by `das run` itself."""
    tmp = tmp_path_factory.mktemp("bg")
    spec = _spec(tmp, "vt_grand_isle", ["nation", "state", "county", "tract", "block_group", "block"],
                 ("pl94_production_2020", "h1_units"), pl94171=True)
    result = run(spec, tmp / "run", seed=16, workers=1, progress=False)
    assert result.valid
    return result.out_dir


@pytest.fixture(scope="module")
def tiny_release(tmp_path_factory):
    out = tmp_path_factory.mktemp("tiny") / "run"
    result = run("tiny", out, seed=7, workers=1, progress=False)
    assert result.valid
    return result.out_dir


# ---------------------------------------------------------------------------------------------
# The layout and the mapping


def test_layout_has_the_official_tables_and_segments(layout):
    assert {name: len(t.cells) for name, t in layout.tables.items()} == {
        "P1": 71, "P2": 73, "P3": 71, "P4": 73, "P5": 10, "H1": 3}
    assert [len(layout.segment_fields(c)) for c, _ in layout.segments] == [149, 152, 15]
    assert len(layout.geo_fields) == 97
    assert layout.segment_fields("02")[-3:] == ["H0010001", "H0010002", "H0010003"]
    assert layout.tables["P2"].fields[-1] == "P0020073"


@pytest.mark.parametrize("schema_name", ["pl94_persons", "dhc_persons"])
def test_the_mapping_partitions_histogram_cells_for_any_schema_with_its_factors(layout, schema_name):
    from das.model.schema import load_schema

    schema = load_schema(schema_name)
    p1, p2, p3, p5 = (layout.tables[t].matrix(schema).toarray() for t in ("P1", "P2", "P3", "P5"))
    assert (p1[0] == 1).all()  # total
    combos = [i - 1 for i in range(3, 72) if i not in (9, 10, 26, 47, 63, 70)]  # the 63 race cells
    assert (p1[combos].sum(axis=0) == 1).all()  # every person in exactly one race cell
    assert (p1[1] + p1[8] == 1).all() and (p1[[9, 25, 46, 62, 69]].sum(axis=0) == p1[8]).all()
    assert (p2[1] + p2[2] == 1).all() and (p2[3:] <= p2[2]).all() and (p2[3:].sum(axis=1) > 0).all()
    assert (p3 <= p1).all() and (p3[0] == schema.levels_of("votingage", np.arange(schema.size))).all()
    assert (p5[[2, 3, 4, 5, 7, 8, 9]].sum(axis=0) == p5[0]).all() and (p5[1] + p5[6] == p5[0]).all()
    assert layout.tables["H1"].matrix(load_schema("h1_units")).toarray().tolist() == [[1, 1], [1, 0], [0, 1]]
    bad = type(layout.tables["P5"])("X1", "", "X001", "persons", (), (("", (("hhgq", ("Barracks",)),)),))
    with pytest.raises(SpecError, match="hhgq has no level 'Barracks'"):
        bad.matrix(schema)


def _race_block(tables: dict, table: str, prefix: str, total: str) -> list[pd.Series]:
    """The official race layout (71 cells) from das's table columns, written out independently of
    the spec: total, one race, the six races alone, two or more, then each number of races followed
    by its combinations (das orders cenrace the same way)."""
    t = tables[table]
    races = [c for c in t.columns if c.startswith(prefix + "cenrace=")]
    counts = [t[f"{prefix}numraces={n}"] for n in NUMRACES]
    cells = [t[total], counts[0], *[t[c] for c in races[:6]], t[total] - counts[0]]
    start = 6
    for k, size in zip(range(1, 6), (15, 20, 15, 6, 1)):
        cells += [counts[k], *[t[c] for c in races[start:start + size]]]
        start += size
    return cells


def expected_from_parquet(run_dir: Path) -> dict[str, pd.DataFrame]:
    """P1-P5 and H1 in the PL layout, computed from das's own Parquet tables (not from the spec)."""
    tables = {name: pd.read_parquet(run_dir / "tables" / f"{name}.parquet") for name in ("P1", "P2", "P3", "P4",
                                                                                          "P5", "H1")}
    out = {}
    for race, hisp in (("P1", "P2"), ("P3", "P4")):
        out[race] = _race_block(tables, race, "", "total")
        h = tables[hisp]
        out[hisp] = [h["total"], h["hispanic=Hispanic or Latino"], h[NOT_HISP],
                     *_race_block(tables, hisp, NOT_HISP + "|", NOT_HISP)[1:]]
    p5 = tables["P5"]
    gq = [p5[c] for c in p5.columns if c.startswith("hhgq=")]  # household, then GQ types 1..7
    out["P5"] = [p5["total"] - p5["hhinstlevels=Household"], p5["hhinstlevels=Institutional group quarters"],
                 *gq[1:5], p5["hhinstlevels=Noninstitutional group quarters"], *gq[5:8]]
    h1 = tables["H1"]
    out["H1"] = [h1["total"], h1["occupancy=Occupied"], h1["occupancy=Vacant"]]
    frames = {}
    for name, cells in out.items():
        key = tables[name][["level", "geocode"]]
        frame = pd.concat([key, pd.DataFrame(np.column_stack(cells))], axis=1)
        frames[name] = frame[frame["level"] != "nation"].reset_index(drop=True)
    return frames


def test_every_cell_equals_das_parquet_tables_at_every_level(bg_release, layout):
    records = run_records(bg_release, layout)
    expected = expected_from_parquet(bg_release)
    for name, table in layout.tables.items():
        got = records.table(name, layout)
        want = expected[name]
        merged = want.merge(got, on=["level", "geocode"], how="outer", validate="1:1", indicator=True)
        assert (merged["_merge"] == "both").all(), name
        np.testing.assert_array_equal(merged[table.fields].to_numpy(), merged[list(range(len(table.fields)))].to_numpy(),
                                      err_msg=name)
    assert (records.geo["POP100"].astype(int) == records.cells["P1"][:, 0]).all()
    assert (records.geo["HU100"].astype(int) == records.cells["H1"][:, 0]).all()
    p1 = pd.read_parquet(bg_release / "tables" / "P1.parquet")
    per_level = p1[p1["level"] != "nation"]["level"].map(SUMLEV).value_counts().to_dict()
    assert records.geo["SUMLEV"].value_counts().to_dict() == per_level
    assert per_level["150"] > 1  # the block-group rows are there


def test_records_and_files_are_laid_out_as_in_2020(bg_release, layout):
    pl_dir = bg_release / "pl94171"
    assert sorted(p.name for p in pl_dir.iterdir()) == [
        "vt000012020.pl", "vt000022020.pl", "vt000032020.pl", "vtgeo2020.pl"]
    lines = {kind: (pl_dir / f"vt{kind}2020.pl").read_bytes().decode("ascii").split("\n") for kind in FIELDS}
    for kind, n in FIELDS.items():
        assert lines[kind][-1] == "" and "\r" not in "".join(lines[kind])  # LF line ends, last line ended
        assert {line.count("|") + 1 for line in lines[kind][:-1]} == {n}, kind
    geo = pd.DataFrame([line.split("|") for line in lines["geo"][:-1]], columns=list(layout.geo_fields))
    assert geo["LOGRECNO"].tolist() == [f"{i:07d}" for i in range(1, len(geo) + 1)]
    assert geo["SUMLEV"].tolist() == sorted(geo["SUMLEV"], key=["040", "050", "140", "150", "750"].index)
    assert (geo["GEOID"] == geo["SUMLEV"] + "0000US" + geo["GEOCODE"]).all()
    block = geo[geo["SUMLEV"] == "750"].iloc[0]
    assert (block["STATE"], block["COUNTY"], block["BLKGRP"], block["BLOCK"][0]) == ("50", "013", block["BLOCK"][0],
                                                                                      block["BLKGRP"])
    assert block["NAME"] == f"Block {block['BLOCK']}" and block["LSADC"] == "BK"
    tract = geo[geo["SUMLEV"] == "140"].iloc[0]
    assert tract["NAME"] == "Census Tract 201" and tract["TRACT"] == "020100" and tract["BLKGRP"] == ""
    state = geo.iloc[0]
    assert (state["STUSAB"], state["NAME"], state["REGION"], state["DIVISION"]) == ("VT", "Vermont", "1", "1")
    for kind in ("00001", "00002", "00003"):
        keys = [line.split("|")[:5] for line in lines[kind][:-1]]
        assert [k[4] for k in keys] == geo["LOGRECNO"].tolist()
        assert {(k[0], k[1], k[2], k[3]) for k in keys} == {("PLST", "VT", "000", kind[-2:])}


def test_round_trip_gives_identical_records_and_bytes(tiny_release, bg_release, layout, tmp_path):
    for name, release in (("tiny", tiny_release), ("bg", bg_release)):
        records = run_records(release, layout)
        written = write_pl94171(tmp_path / name, records, layout)
        back = read_pl94171(tmp_path / name, layout)
        pd.testing.assert_frame_equal(back.geo, records.geo)
        for table in layout.tables:
            np.testing.assert_array_equal(back.cells[table], records.cells[table])
        again = write_pl94171(tmp_path / f"{name}_again", back, layout)
        assert [p.read_bytes() for p in again] == [p.read_bytes() for p in written]
    # das run's own files are the same as `das tables` makes from the run directory
    assert all((bg_release / "pl94171" / p.name).read_bytes() == p.read_bytes() for p in
               write_pl94171(tmp_path / "bg_again", run_records(bg_release, layout), layout))


def test_cli_tables_writes_pl_files_and_reads_them_into_parquet(tiny_release, layout, tmp_path, capsys):
    assert main(["tables", str(tiny_release), "--format", "pl94171", "--out", str(tmp_path / "pl")]) == 0
    assert "ri000012020.pl" in capsys.readouterr().out
    assert main(["tables", str(tmp_path / "pl"), "--format", "parquet", "--names", "pl", "--out", str(tmp_path / "pq")]) == 0
    p2 = pd.read_parquet(tmp_path / "pq" / "P2.parquet")
    assert list(p2.columns[:4]) == ["level", "sumlev", "geocode", "P0020001"] and len(p2.columns) == 76
    np.testing.assert_array_equal(p2.iloc[:, 3:].to_numpy(), run_records(tiny_release, layout).cells["P2"])
    # the default: the columns named as the release's own tables name them, the cells the same
    assert main(["tables", str(tmp_path / "pl"), "--format", "parquet", "--out", str(tmp_path / "readable")]) == 0
    readable = pd.read_parquet(tmp_path / "readable" / "P2.parquet")
    np.testing.assert_array_equal(readable.iloc[:, 3:].to_numpy(), p2.iloc[:, 3:].to_numpy())
    released = pd.read_parquet(tiny_release / "tables" / "P2.parquet")
    shared = [c for c in readable.columns[3:] if c in released.columns]
    assert len(shared) == 72 and "hispanic=Not Hispanic or Latino|cenrace=White" in shared  # all but the PL's derived cell
    both = readable.merge(released, on=["level", "geocode"], suffixes=("", "_released"))
    assert len(both) == len(readable) and all((both[c] == both[f"{c}_released"]).all() for c in shared)


def test_cli_tables_replaces_its_own_tables_and_nothing_else(tiny_release, tmp_path, capsys):
    from das.frame.outdir import RECORD

    out = tmp_path / "pl"
    assert main(["tables", str(tiny_release), "--out", str(out)]) == 0
    files = sorted(p.name for p in out.iterdir())
    assert main(["tables", str(tiny_release), "--format", "parquet", "--out", str(out)]) == 0  # deterministic: replaced
    assert sorted(p.name for p in out.iterdir()) == sorted([RECORD, "P1.parquet", "P2.parquet", "P3.parquet",
                                                           "P4.parquet", "P5.parquet", "H1.parquet"])
    assert main(["tables", str(tiny_release), "--out", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == files
    (out / "notes.txt").write_text("mine")
    capsys.readouterr()
    assert main(["tables", str(tiny_release), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert str(out) in err and "notes.txt" in err and (out / "notes.txt").exists()
    assert main(["tables", str(tiny_release), "--out", str(tiny_release / "pl")]) == 2
    assert "a release must hold only its own files" in capsys.readouterr().err


def test_run_spec_option_is_checked(tmp_path):
    spec = _spec(tmp_path, "tiny", ["nation", "state", "county", "tract", "block"],
                 ("pl94_five_level", "h1_units_five_level"), pl94171=True)
    assert load_run_spec(spec).pl94171 and not load_run_spec("tiny").pl94171
    spec.write_text(spec.read_text().replace("pl94171 = true", 'pl94171 = "yes"'))
    with pytest.raises(SpecError, match=r"\[output\] pl94171: 'yes' is not valid \(expected true or false\)"):
        load_run_spec(spec)
    text = spec.read_text().replace('pl94171 = "yes"', "pl94171 = true")
    spec.write_text(text.split("[units]")[0] + "[output]\npl94171 = true\n")
    with pytest.raises(SpecError, match=r"needs a \[units\] release"):
        load_run_spec(spec)


# ---------------------------------------------------------------------------------------------
# Reading the Bureau's sample, and errors


def test_shipped_sample_parses(layout):
    records = read_pl94171(SAMPLE, layout)
    assert records.geo["SUMLEV"].value_counts().to_dict() == {"750": 569, "150": 28, "140": 7, "040": 1, "050": 1}
    p1 = records.table("P1", layout)
    state = p1[p1["level"] == "state"].iloc[0]
    assert state["geocode"] == "44" and state["P0010001"] == 614_053
    assert (records.geo["POP100"].astype(int) == records.cells["P1"][:, 0]).all()
    assert (records.cells["P2"][:, 1] + records.cells["P2"][:, 2] == records.cells["P2"][:, 0]).all()
    assert (records.cells["H1"][:, 1] + records.cells["H1"][:, 2] == records.cells["H1"][:, 0]).all()
    assert records.table("H1", layout)["level"].tolist()[:5] == ["state", "county", "tract", "tract", "tract"]


def _copy_sample(tmp_path: Path) -> Path:
    out = tmp_path / "ri"
    out.mkdir(parents=True)
    for p in SAMPLE.glob("*.pl"):
        (out / p.name).write_bytes(p.read_bytes())
    return out


def _edit_line(path: Path, line: int, field: int, value: str) -> None:
    lines = path.read_text().split("\n")
    fields = lines[line - 1].split("|")
    fields[field - 1] = value
    lines[line - 1] = "|".join(fields)
    path.write_text("\n".join(lines))


def test_reader_errors_name_the_file_line_and_field(tmp_path, capsys):
    d = _copy_sample(tmp_path)
    _edit_line(d / "ri000012018_2020Style.pl", 3, 8, "39x0")
    with pytest.raises(InputError) as e:
        read_pl94171(d)
    assert str(e.value.problems[0]) == ("ri000012018_2020Style.pl line 3, field P0010003: '39x0' is not valid "
                                        "(expected a nonnegative integer)")
    assert main(["tables", str(d), "--out", str(tmp_path / "out")]) == 2
    assert "line 3, field P0010003: '39x0'" in capsys.readouterr().err

    d = _copy_sample(tmp_path / "fields")
    path = d / "ri000032018_2020Style.pl"
    path.write_text(path.read_text().replace("\n", "|0\n", 1))
    with pytest.raises(InputError, match=r"line 1: '16 fields' is not valid \(expected 15 pipe-delimited fields"):
        read_pl94171(d)

    d = _copy_sample(tmp_path / "join")
    _edit_line(d / "ri000022018_2020Style.pl", 5, 5, "99999")
    with pytest.raises(InputError, match=r"ri000022018_2020Style.pl line 5, field LOGRECNO: '99999' is not valid "
                                         r"\(expected a LOGRECNO of rigeo2018_2020Style.pl\)"):
        read_pl94171(d)

    d = _copy_sample(tmp_path / "missing")
    (d / "ri000032018_2020Style.pl").unlink()
    with pytest.raises(InputError, match="state 'ri' has no 00003 file"):
        read_pl94171(d)
    with pytest.raises(InputError, match="no P.L. 94-171 files"):
        read_pl94171(tmp_path / "missing" / "..")
    assert main(["tables", str(tmp_path / "nowhere"), "--out", str(tmp_path / "o")]) == 2


# ---------------------------------------------------------------------------------------------
# The real client: the PL94171 R package


@pytest.fixture(scope="session")
def r_library():
    """Install (once, idempotently) R and the PL94171 reader into .venv/r-lib via scripts/r_client."""
    done = subprocess.run([str(ROOT / "scripts" / "r_client")], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.fail("the PL94171 R reader is not available, so das's PL 94-171 files cannot be checked "
                    "with the real client:\n" + done.stderr + "\nRun scripts/r_client as root (it apt-get installs "
                    "R from Debian packages), or deselect these tests with -m 'not r_client'.", pytrace=False)
    return done.stdout.strip()


def read_with_r(r_library: str, pl_dir: Path, out: Path) -> dict[str, pd.DataFrame]:
    """What PL94171::pl_read / pl_select_standard / pl_subset read from `pl_dir` (warnings are errors)."""
    done = subprocess.run(["Rscript", str(ROOT / "tests" / "pl94171_client.R"), str(pl_dir), str(out)],
                          capture_output=True, text=True, env={**os.environ, "RLIB": r_library})
    assert done.returncode == 0, f"PL94171 failed to read {pl_dir}:\n{done.stderr}"
    return {p.stem: pd.read_csv(p, dtype={"GEOID": str, "SUMLEV": str, "summary_level": str, "GEOCODE": str},
                                low_memory=False)
            for p in out.glob("*.csv")}


def check_release_with_r(r_library: str, run_dir: Path, pl_dir: Path, out: Path) -> None:
    """The real client reads the release without a problem, and its totals are das's tables."""
    read = read_with_r(r_library, pl_dir, out)
    tables = {name: pd.read_parquet(run_dir / "tables" / f"{name}.parquet") for name in ("P1", "P2", "P3", "P4", "H1")}
    n = (tables["P1"]["level"] != "nation").sum()
    shapes = read["shapes"].set_index("file")
    assert shapes.loc[list(FIELDS), "fields"].tolist() == list(FIELDS.values())
    assert (shapes["records"] == n).all() and (shapes["unnamed"] == 0).all() and (shapes["problems"] == 0).all()
    for name in FIELDS:  # the reader does not count fields: count them here
        (path,) = pl_dir.glob(f"*{name}2020.pl")
        assert {line.count("|") + 1 for line in path.read_text().splitlines()} == {FIELDS[name]}
    p1 = tables["P1"]
    levels = p1[p1["level"] != "nation"]["level"].map(SUMLEV).value_counts().sort_index()
    assert read["geo"]["SUMLEV"].value_counts().sort_index().to_dict() == levels.to_dict()
    assert len(read["subset_750"]) == levels["750"]

    std = read["standard"]
    std["level"] = std["summary_level"].map({v: k for k, v in SUMLEV.items()})
    std["geocode"] = std["GEOID"].str.slice(9)
    geo = read["geo"].set_index("LOGRECNO")
    std["HU100"] = geo.loc[std["row_id"], "HU100"].to_numpy()
    assert std["level"].notna().all()
    for prefix, race, hisp in (("pop", "P1", "P2"), ("vap", "P3", "P4")):
        h = tables[hisp]
        want = pd.DataFrame({"level": h["level"], "geocode": h["geocode"], prefix: tables[race]["total"],
                             f"{prefix}_hisp": h["hispanic=Hispanic or Latino"],
                             f"{prefix}_two": sum(h[f"{NOT_HISP}|numraces={k}"] for k in NUMRACES[1:])})
        for short, race_name in (("white", "White"), ("black", "Black"), ("aian", "AIAN"), ("asian", "Asian"),
                                 ("nhpi", "NHPI"), ("other", "SOR")):
            want[f"{prefix}_{short}"] = h[f"{NOT_HISP}|cenrace={race_name}"]
        merged = std.merge(want, on=["level", "geocode"], how="left", suffixes=("", "_das"), validate="1:1")
        for col in [c for c in want.columns if c not in ("level", "geocode")]:
            assert (merged[col] == merged[f"{col}_das"]).all(), (col, merged.loc[merged[col] != merged[f"{col}_das"]])
    h1 = tables["H1"].merge(std[["level", "geocode", "HU100"]], on=["level", "geocode"])
    assert len(h1) == n and (h1["total"] == h1["HU100"]).all()


@pytest.mark.r_client
def test_r_reader_reads_the_shipped_sample_as_das_does(r_library, layout, tmp_path):
    read = read_with_r(r_library, SAMPLE, tmp_path / "r")
    records = read_pl94171(SAMPLE, layout)
    logrecno = records.geo["LOGRECNO"].astype(int).to_numpy()
    for cifsn, tables in layout.segments:
        r_cells = read[f"000{cifsn}"].set_index("LOGRECNO").loc[logrecno]
        for t in tables:
            np.testing.assert_array_equal(r_cells[layout.tables[t].fields].to_numpy(), records.cells[t], err_msg=t)
    geo = read["geo"].set_index("LOGRECNO").loc[logrecno]
    for field in ("SUMLEV", "GEOID", "GEOCODE"):
        assert (geo[field].to_numpy() == records.geo[field].to_numpy()).all()


@pytest.mark.r_client
def test_r_reader_reads_a_release_with_block_groups(r_library, bg_release, tmp_path):
    check_release_with_r(r_library, bg_release, bg_release / "pl94171", tmp_path / "r")


@pytest.mark.r_client
def test_r_reader_reads_a_multi_county_release(r_library, tiny_release, tmp_path):
    assert main(["tables", str(tiny_release), "--out", str(tmp_path / "pl")]) == 0
    check_release_with_r(r_library, tiny_release, tmp_path / "pl", tmp_path / "r")


@pytest.mark.r_client
@pytest.mark.slow
def test_r_reader_reads_the_vermont_demo_release(r_library, tmp_path):
    """scripts/demo's release (das run vt_demo), written by `das tables`, read by PL94171."""
    result = run("vt_demo", tmp_path / "vt", seed=2020, workers=2, progress=False)
    assert result.valid
    assert main(["tables", str(result.out_dir), "--format", "pl94171", "--out", str(tmp_path / "pl")]) == 0
    check_release_with_r(r_library, result.out_dir, tmp_path / "pl", tmp_path / "r")
