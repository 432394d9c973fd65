"""Area files (das.io.areas): read aligned with the run's blocks, and every problem refused before any noise,
naming the file, the row and the reason."""

import hashlib

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from das.core.errors import InputError
from das.io.areas import Areas, areas_from_frames, read_areas

BLOCKS = np.array([f"0100102010010{i:02d}" for i in range(6)])  # sorted unique, leading zero kept


def write(path, rows, header="GEOID,area"):
    path.write_text(header + "\n" + "".join(line + "\n" for line in rows))
    return path


def refused(paths, blocks=BLOCKS) -> str:
    with pytest.raises(InputError) as raised:
        read_areas(paths, blocks)
    return str(raised.value)


def test_a_csv_and_a_parquet_file_give_each_block_its_area_and_unlisted_blocks_none(tmp_path):
    places = write(tmp_path / "places.csv", [f"{BLOCKS[4]},0100124", f"{BLOCKS[0]},0100124", f"{BLOCKS[1]},0107000"])
    towns = tmp_path / "towns.parquet"
    pd.DataFrame({"GEOID": [BLOCKS[5], BLOCKS[2]], "area": ["t2", "t1"]}).to_parquet(towns)
    areas = read_areas({"place": places, "town": str(towns)}, BLOCKS)
    assert areas.types == ("place", "town")
    assert areas.ids["place"].tolist() == ["0100124", "0107000", "", "", "0100124", ""]
    assert areas.ids["town"].tolist() == ["", "", "t1", "", "", "t2"]
    assert areas.blocks is not None and areas.blocks.tolist() == BLOCKS.tolist()
    ids, index = areas.codes("place")
    assert ids.tolist() == ["0100124", "0107000"] and index.tolist() == [0, 1, -1, -1, 0, -1]
    assert areas.files["town"].path == towns and areas.files["town"].type == "town"
    assert areas.files["place"].sha256 == hashlib.sha256(places.read_bytes()).hexdigest()


def test_csv_ids_and_geocodes_keep_their_leading_zeros_and_other_columns_are_ignored(tmp_path):
    path = write(tmp_path / "p.csv", [f"Perry,{BLOCKS[3]},007,1.5"], header="NAME,GEOID,area,ALAND")
    assert read_areas({"place": path}, BLOCKS).ids["place"][3] == "007"


def test_no_area_files_and_a_header_only_file_give_blocks_in_no_area(tmp_path):
    assert read_areas({}, BLOCKS).types == ()
    areas = read_areas({"place": write(tmp_path / "p.csv", [])}, BLOCKS)
    assert areas.ids["place"].tolist() == [""] * 6 and areas.codes("place")[0].tolist() == []
    assert areas.codes("place")[1].tolist() == [-1] * 6


def test_codes_without_unlisted_blocks_index_every_block():
    areas = areas_from_frames({"county": pd.DataFrame({"GEOID": BLOCKS, "area": list("bababa")})}, BLOCKS)
    ids, index = areas.codes("county")
    assert ids.tolist() == ["a", "b"] and index.tolist() == [1, 0, 1, 0, 1, 0]


# every refusal: (rows of the file, header) -> what the message must say, with its row
REFUSALS = {
    "not a block": ([f"{BLOCKS[0]},a", "010010201001099,a"], "GEOID,area",
                    ["row 2 (line 3), column GEOID", "'010010201001099'", "no such block"]),
    "wrong width": ([f"{BLOCKS[0]},a", "10010201001001,a"], "GEOID,area",
                    ["row 2 (line 3), column GEOID", "'10010201001001'", "15 ASCII digits"]),
    "not ASCII digits": (["0100102010010\u0660\u0661,a"], "GEOID,area", ["row 1 (line 2), column GEOID", "15 ASCII digits"]),
    "empty GEOID": ([",a"], "GEOID,area", ["row 1 (line 2), column GEOID", "the cell is empty"]),
    "empty area": ([f"{BLOCKS[0]},a", f"{BLOCKS[1]},"], "GEOID,area", ["row 2 (line 3), column area", "empty"]),
    "blank area": ([f'{BLOCKS[1]},"   "'], "GEOID,area", ["row 1 (line 2), column area", "only spaces"]),
    "listed twice": ([f"{BLOCKS[1]},a", f"{BLOCKS[2]},b", f"{BLOCKS[1]},a"], "GEOID,area",
                     ["row 3 (line 4), column GEOID", f"'{BLOCKS[1]}'", "also on row 1"]),
    "no GEOID column": ([f"{BLOCKS[1]},a"], "geoid,area", ["missing column GEOID", "found 'geoid'"]),
    "no area column": ([f"{BLOCKS[1]},a"], "GEOID,place", ["missing column area"]),
}


@pytest.mark.parametrize("reason", sorted(REFUSALS))
def test_a_bad_area_file_is_refused_naming_the_file_the_row_and_the_reason(tmp_path, reason):
    rows, header, expected = REFUSALS[reason]
    message = refused({"place": write(tmp_path / "places.csv", rows, header=header)})
    assert "places.csv" in message
    for text in expected:
        assert text in message


def test_a_missing_unreadable_or_unknown_file_is_refused_naming_it(tmp_path):
    corrupt = tmp_path / "corrupt.parquet"
    corrupt.write_bytes(b"PAR1 not really")
    shapefile = tmp_path / "places.shp"
    shapefile.write_bytes(b"\0")
    message = refused({"place": tmp_path / "absent.csv", "town": corrupt, "cdp": shapefile, "dir": tmp_path})
    assert f"{tmp_path / 'absent.csv'}: file not found" in message
    assert "corrupt.parquet: not a Parquet file, or a corrupt one" in message
    assert "unknown file extension '.shp'" in message and "not a file (a directory?)" in message
    assert message.startswith("4 problem(s)")


@pytest.mark.parametrize("name", ["", "place name", "1place", "place-2", "lieu\u00e9", "a.b"])
def test_an_area_type_that_is_not_a_simple_name_is_refused(tmp_path, name):
    path = write(tmp_path / "places.csv", [f"{BLOCKS[0]},a"])
    message = refused({name: path})
    assert "places.csv" in message and "is not a simple name" in message and repr(name) in message


def test_every_problem_of_every_file_is_reported_in_one_pass(tmp_path):
    places = write(tmp_path / "places.csv", [f"{BLOCKS[0]},", "123,a", f"{BLOCKS[0]},b"])
    towns = write(tmp_path / "towns.csv", ["999999999999999,t"])
    message = refused({"place": places, "town": towns})
    assert message.startswith("4 problem(s)")
    assert "places.csv row 1" in message and "places.csv row 2" in message and "places.csv row 3" in message
    assert "towns.csv row 1" in message


def test_many_bad_rows_are_listed_a_few_then_counted(tmp_path):
    path = write(tmp_path / "places.csv", [f"0100102010010{i:02d},a" for i in range(10, 40)])
    message = refused({"place": path})
    assert "places.csv row 5 " in message and "places.csv row 6 " not in message
    assert "25 more rows with the same problem" in message


def test_a_parquet_file_must_hold_text_columns(tmp_path):
    path = tmp_path / "places.parquet"
    pd.DataFrame({"GEOID": [int(BLOCKS[0])], "area": [None]}).to_parquet(path)
    message = refused({"place": path})
    assert "column GEOID holds integer values, expected text" in message
    assert "places.parquet row 1, column area" in message and "the cell is empty" in message


def test_a_parquet_file_of_categories_reads_as_text(tmp_path):
    path = tmp_path / "places.parquet"
    pd.DataFrame({"GEOID": pd.Categorical(BLOCKS[:2]), "area": pd.Categorical(["x", "x"])}).to_parquet(path)
    assert read_areas({"place": path}, BLOCKS).ids["place"].tolist() == ["x", "x", "", "", "", ""]


def test_frames_get_the_same_checks_and_are_named_by_type():
    with pytest.raises(InputError) as raised:
        areas_from_frames({"place": pd.DataFrame({"GEOID": [BLOCKS[0], BLOCKS[0]], "area": ["a", "a"]}),
                           "town": pd.DataFrame({"GEOID": [BLOCKS[0]], "area": [7]}), "cdp": [BLOCKS[0]]}, BLOCKS)
    message = str(raised.value)
    assert "place areas row 2, column GEOID" in message and "also on row 1" in message
    assert "town areas, column area: column area holds integer values" in message
    assert "cdp areas: a pandas DataFrame" in message
    assert areas_from_frames({"place": pd.DataFrame({"GEOID": [BLOCKS[0]], "area": ["a"]})}, BLOCKS).files == {}


def test_blocks_must_be_sorted_unique_and_ids_aligned_with_them():
    with pytest.raises(ValueError, match="sorted unique"):
        read_areas({}, BLOCKS[::-1])
    with pytest.raises(ValueError, match="not aligned"):
        Areas(BLOCKS, {"place": np.array(["a"], dtype=object)}, {})


def test_a_state_sized_file_is_read_whole(tmp_path):
    """~300k blocks (a state): the checks are vectorized, so this takes about a second."""
    blocks = np.array([f"{i:015d}" for i in range(300_000)])
    path = tmp_path / "places.csv"
    listed = np.arange(0, 300_000, 3)
    pd.DataFrame({"GEOID": blocks[listed], "area": [f"{i % 977:07d}" for i in listed]}).to_csv(path, index=False)
    areas = read_areas({"place": path}, blocks)
    ids, index = areas.codes("place")
    assert len(ids) == 977 and (index >= 0).sum() == len(listed) and areas.ids["place"][3] == "0000003"


@settings(max_examples=50, deadline=None)
@given(st.dictionaries(st.integers(0, len(BLOCKS) - 1), st.text("0123456789abc_", min_size=1, max_size=4)))
def test_read_ids_are_the_listed_ones_and_codes_give_them_back(listed):
    frame = pd.DataFrame({"GEOID": [BLOCKS[b] for b in listed], "area": list(listed.values())}, dtype=object)
    areas = areas_from_frames({"place": frame}, BLOCKS)
    assert areas.ids["place"].tolist() == [listed.get(b, "") for b in range(len(BLOCKS))]
    ids, index = areas.codes("place")
    assert ids.tolist() == sorted(set(listed.values()))
    assert [ids[i] if i >= 0 else "" for i in index] == areas.ids["place"].tolist()
