"""das validate end to end on the tiny release: the checks keep their order (the NMF check beside the MDF
checks, failing first), the comparison with inputs that are not the release's names what differs, and
what a release is held to (the registered checks of its claims; a TopDown release every TopDown claim,
whatever its manifest says)."""

import json
import shutil

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import TINY

from das.core.errors import ValidationError
from das.driver.run import run
from das.validate import GEO, NMF_HOLDS, SYNTHETIC_HOLDS, TOPDOWN_HOLDS, validate_run
from das.validate.registry import select


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return run("tiny", tmp_path_factory.mktemp("tiny") / "run", seed=3, workers=1, progress=False).out_dir


def test_the_nmf_check_beside_the_mdf_checks_keeps_its_place_and_fails_first(tiny, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(tiny, broken)
    tract = broken / "nmf" / "persons" / "tract.parquet"
    table = pq.read_table(tract)
    cell = table["cell"].to_numpy().copy()
    cell[-1] = cell[-2]  # in the widest query's last geounit
    pq.write_table(table.set_column(3, "cell", pa.array(cell)), tract)
    p1 = broken / "tables" / "P1.parquet"
    written = pq.read_table(p1)
    pq.write_table(written.set_column(2, written.column_names[2], pa.array(written.column(2).to_numpy() + 1)), p1)
    report = validate_run(broken)
    names = [c.split(" ", 1)[1].strip() for c in report.checks]
    nmf_at = names.index("NMF: exactly the certified measurements")
    assert names[nmf_at - 1].startswith("MDF units: valid codes") and names[nmf_at + 1].startswith("MDF persons: in")
    assert report.checks[nmf_at].startswith("FAIL")
    first_nmf = next(i for i, v in enumerate(report.violations) if v.startswith("NMF"))
    first_table = next(i for i, v in enumerate(report.violations) if v.startswith("table P1"))
    assert first_nmf < first_table
    tract.unlink()
    p1.write_bytes(b"not parquet")  # a later check's error: the NMF one comes first, as in order
    with pytest.raises(ValidationError, match="tract.parquet is missing"):
        validate_run(broken)


@pytest.mark.parametrize("suffix", ["csv", "parquet"])
def test_the_comparison_with_the_inputs_names_what_differs_from_them(tiny, tmp_path, suffix):
    """A release checked against inputs that are not its own: one person and one housing unit fewer in the
    inputs make the population (nation, state) and housing-unit invariants fail, naming the unit's block."""
    assert validate_run(tiny).ok
    read = (lambda path: pd.read_csv(path, dtype=str)) if suffix == "csv" else pd.read_parquet
    persons, units = read(TINY / f"persons.{suffix}"), read(TINY / f"units.{suffix}")
    dropped = units.index[units["RTYPE"].astype(int) == 2][0]
    block = "".join(str(units.loc[dropped, c]) for c in GEO)
    for frame, name in ((persons.iloc[1:], "persons"), (units.drop(dropped), "units")):
        path = tmp_path / f"{name}.{suffix}"
        frame.to_csv(path, index=False) if suffix == "csv" else frame.to_parquet(path, index=False)
    report = validate_run(tiny, inputs=(tmp_path / f"persons.{suffix}", tmp_path / f"units.{suffix}"))
    assert not report.ok
    population = [v for v in report.violations if v.startswith("total population invariant against the inputs")]
    assert any("nation" in v for v in population) and any("state" in v for v in population)
    assert any(v.startswith("housing units per block invariant") and block in v for v in report.violations)
    assert not any(v.startswith("GQ facilities per block invariant") for v in report.violations)


def test_a_release_runs_the_checks_of_its_claims_in_registration_order():
    names = [c.name for c in select(SYNTHETIC_HOLDS)]
    assert names == ["signature", "checksums", "manifest", "metadata", "charges_sum_to_rho", "certificate",
                     "least_squares", "mdf_codes", "tables_match_mdf"]
    topdown = [c.name for c in select(TOPDOWN_HOLDS)]
    assert topdown == ["signature", "checksums", "manifest", "metadata", "certificate", "least_squares", "units_mdf",
                       "nmf_matches_certificate",
                       "persons_in_universe", "mdf_codes", "tables_match_mdf", "invariants", "schema_constraints",
                       "block_invariants", "matches_inputs"]
    every = ["signature", "checksums", "manifest", "metadata", "certificate", "least_squares"]  # every release's
    assert [c.name for c in select(["mdf_codes"])] == [*every, "mdf_codes"]
    # an NMF release (das measure): the checks that read no MDF or table, whatever it claims
    assert [c.name for c in select([*NMF_HOLDS, "mdf_codes"], nmf_release=True)] == [*every, "nmf_matches_certificate"]


def test_a_topdown_release_is_held_to_every_topdown_claim_whatever_its_manifest_says(tiny, tmp_path):
    """Its manifest edited to claim only its codes and tables, a TopDown release (no mechanism) is still
    checked for everything TopDown holds: a wrong published population is still caught."""
    edited = tmp_path / "edited"
    shutil.copytree(tiny, edited)
    for signed in ("manifest.sig", "release.pub"):  # an unsigned release (edited: the signature would not verify)
        (edited / signed).unlink()
    manifest = json.loads((edited / "manifest.json").read_text())
    manifest["holds"] = ["mdf_codes", "tables_match_mdf"]
    (edited / "manifest.json").write_text(json.dumps(manifest))
    assert validate_run(edited).checks == [c for c in validate_run(tiny).checks if " signature: " not in c]
    manifest["invariants"]["total_population"]["nation"][""] += 1
    (edited / "manifest.json").write_text(json.dumps(manifest))
    assert [v for v in validate_run(edited).violations if v.startswith("total population invariant (published)")] == [
        f"total population invariant (published): nation '': population {manifest['counts']['persons']} differs from "
        f"the published invariant {manifest['counts']['persons'] + 1}"]
