"""Synthetic multi-state inputs for the scale benchmarks (das.io.scale_inputs)."""

import numpy as np
import pyarrow.parquet as pq
import pytest

from das.io.scale_inputs import write_synthetic


def test_synthetic_states_replicate_the_fixtures_under_new_codes(tmp_path):
    counts = write_synthetic(tmp_path, 2)
    assert counts == {"states": 2, "persons": 625_741 + 897_934, "unit_rows": 322_723 + 397_963,
                      "blocks": 18_660 + 17_931}
    persons = pq.read_table(tmp_path / "persons.parquet", columns=["TABBLKST", "EPNUM"])
    assert sorted(set(persons["TABBLKST"].to_pylist())) == ["01", "02"]
    assert np.array_equal(persons["EPNUM"].to_numpy(), np.arange(1, counts["persons"] + 1))
    assert (tmp_path / "spec.toml").read_text().count("synthetic_2") == 1


@pytest.mark.slow  # about 10 s: writes 6.7 million persons
def test_nine_copies_give_a_national_shaped_input_of_over_150k_unique_blocks(tmp_path):
    counts = write_synthetic(tmp_path, 9)
    assert counts["states"] == 9 and counts["blocks"] == 5 * 18_660 + 4 * 17_931 >= 150_000
    units = pq.read_table(tmp_path / "units.parquet", columns=["TABBLKST", "TABBLKCOU", "TABTRACTCE", "TABBLK"])
    states = units["TABBLKST"].to_numpy().astype(str)
    assert len(set(states)) == 9
    geocodes = np.char.add(np.char.add(states, units["TABBLKCOU"].to_numpy().astype(str)),
                           np.char.add(units["TABTRACTCE"].to_numpy().astype(str),
                                       units["TABBLK"].to_numpy().astype(str)))
    assert len(np.unique(geocodes)) == counts["blocks"]
