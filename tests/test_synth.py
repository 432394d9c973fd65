"""Synthetic multi-state inputs for the scale benchmarks (das.synth)."""

import numpy as np
import pyarrow.parquet as pq

from das.synth import write_synthetic


def test_synthetic_states_replicate_the_fixtures_under_new_codes(tmp_path):
    counts = write_synthetic(tmp_path, 2)
    assert counts == {"states": 2, "persons": 625_741 + 897_934, "unit_rows": 322_723 + 397_963,
                      "blocks": 18_660 + 17_931}
    persons = pq.read_table(tmp_path / "persons.parquet", columns=["TABBLKST", "EPNUM"])
    assert sorted(set(persons["TABBLKST"].to_pylist())) == ["01", "02"]
    assert np.array_equal(persons["EPNUM"].to_numpy(), np.arange(1, counts["persons"] + 1))
    assert (tmp_path / "spec.toml").read_text().count("synthetic_2") == 1
