"""das/io/partitions.py: which inputs make a partitioned run, which state file names are accepted, and
every way the two directories can fail to pair up, each refused with the file at fault. (Runs over
partitions are in tests/test_partitioned.py.)"""

from pathlib import Path

import pytest

from das.io.partitions import PartitionError, StateInputs, is_partitioned, state_inputs


def _directory(path: Path, names: list[str]) -> Path:
    path.mkdir(parents=True)
    for name in names:
        (path / name).write_text("")
    return path


def test_files_are_a_whole_run_and_directories_a_partitioned_one(tmp_path):
    persons, units = tmp_path / "p.parquet", tmp_path / "u.parquet"
    persons.write_text(""), units.write_text("")
    assert is_partitioned(persons, units) is False
    assert is_partitioned(persons, None) is False
    assert is_partitioned(_directory(tmp_path / "pd", []), _directory(tmp_path / "ud", [])) is True


@pytest.mark.parametrize("persons_is_dir", [True, False])
def test_a_directory_beside_a_file_is_refused(tmp_path, persons_is_dir):
    directory, file = _directory(tmp_path / "d", []), tmp_path / "f.parquet"
    file.write_text("")
    persons, units = (directory, file) if persons_is_dir else (file, directory)
    with pytest.raises(PartitionError, match=f"persons {persons} and units {units}: one is a directory and the other is not"):
        is_partitioned(persons, units)


def test_a_persons_directory_without_units_is_refused(tmp_path):
    with pytest.raises(PartitionError, match="one is a directory and the other is not"):
        is_partitioned(_directory(tmp_path / "d", []), None)


def test_states_pair_by_the_fips_code_ending_each_name_and_come_sorted(tmp_path):
    persons = _directory(tmp_path / "persons", ["persons_50.parquet", "01.csv", "persons-10.PARQUET", ".DS_Store"])
    (persons / "subdirectory").mkdir()  # not a file: ignored, like hidden files
    units = _directory(tmp_path / "units", ["units_01.csv", "h1_units_10.parquet", "50.parquet"])
    found = state_inputs(persons, units)
    assert found == [StateInputs("01", persons / "01.csv", units / "units_01.csv"),
                     StateInputs("10", persons / "persons-10.PARQUET", units / "h1_units_10.parquet"),
                     StateInputs("50", persons / "persons_50.parquet", units / "50.parquet")]
    with pytest.raises(AttributeError):
        found[0].state = "02"  # frozen


@pytest.mark.parametrize("persons, units, message", [
    (["persons_50.parquet", "README.txt"], ["units_50.parquet"],
     r"README.txt: not a Parquet or CSV file; the persons directory of a partitioned run holds only one input file per state"),
    (["persons.parquet"], ["units_50.parquet"],
     r"persons.parquet: the file name must end in the state's 2-digit FIPS code \(e.g. persons_50.parquet\)"),
    (["persons_50.parquet"], ["units_5.csv"],
     r"units_5.csv: the file name must end in the state's 2-digit FIPS code \(e.g. units_50.csv\)"),
    (["persons_150.parquet"], ["units_50.parquet"],  # three digits: not state 50 (issue 24)
     r"persons_150.parquet: the file name must end in the state's 2-digit FIPS code"),
    (["persons_\uff15\uff10.parquet"], ["units_50.parquet"],  # fullwidth digits are not a FIPS code
     r"the file name must end in the state's 2-digit FIPS code"),

    (["persons_50.parquet", "50.csv"], ["units_50.parquet"], r"persons_50.parquet and .*50.csv: two persons files for state 50"),
    ([], ["units_50.parquet"], r"persons: no persons input file \(expected one Parquet or CSV file per state\)"),
    (["persons_50.parquet"], [".hidden_50.parquet"], r"units: no units input file"),
])
def test_a_directory_that_is_not_one_file_per_state_is_refused_naming_the_file(tmp_path, persons, units, message):
    with pytest.raises(PartitionError, match=message):
        state_inputs(_directory(tmp_path / "persons", persons), _directory(tmp_path / "units", units))


@pytest.mark.parametrize("persons, units, message", [
    (["persons_01.parquet", "persons_50.parquet"], ["units_50.parquet"],
     r"state 01 has a persons file \(.*persons_01.parquet\) but no units file in .*units$"),
    (["persons_50.parquet"], ["units_02.parquet", "units_50.parquet"],
     r"state 02 has a units file \(.*units_02.parquet\) but no persons file in .*persons$"),
])
def test_a_state_in_one_directory_only_is_refused(tmp_path, persons, units, message):
    with pytest.raises(PartitionError, match=message):
        state_inputs(_directory(tmp_path / "persons", persons), _directory(tmp_path / "units", units))


@pytest.mark.parametrize("target", ["persons_50.parquet", "gone.parquet"])  # a loop, a broken link
def test_a_state_file_that_is_a_link_to_nothing_is_refused_naming_it(tmp_path, target):
    """Not skipped as a non-file (which would say state 50 has no persons file): named, as a link to nothing."""
    persons = _directory(tmp_path / "persons", [])
    (persons / "persons_50.parquet").symlink_to(target)
    units = _directory(tmp_path / "units", ["units_50.parquet"])
    with pytest.raises(PartitionError, match=f"{persons / 'persons_50.parquet'}: a symbolic link that reaches no file "
                                             r"\(a loop, or its target does not exist\)"):
        state_inputs(persons, units)
