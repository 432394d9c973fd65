"""A new output is one registration, and so is the check that proves it: a toy output (the release's total
persons in `toy/persons.txt`) and a toy check registered here are written by `das run` (whole, and from
the states' parts in a partitioned run), listed in the manifest, claimed, checked state by state, and the
check fails when the file is edited, even with its digest redone."""

import hashlib
import json
from pathlib import Path

import pytest
from test_partitioned import two_states

from das.driver.run import run
from das.io import outputs
from das.validate import Check, register, unregister, validate_run
from das.validate.registry import CHECKS, claims

TOY_FILE = "toy/persons.txt"
TOY_CHECK = "toy: the persons file holds the MDF's persons"


class ToyOutput(outputs.Output):
    """The release's total persons, as text; it records which of its methods das called."""

    name = "toy"

    def __init__(self):
        self.calls: list[str] = []

    def patterns(self) -> tuple[str, ...]:
        return (TOY_FILE,)

    def checks(self, plan) -> tuple[str, ...]:
        return ("toy_persons",)

    def _write(self, directory: Path, persons: int) -> Path:
        path = directory / TOY_FILE
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"{persons}\n")
        return path

    def write_part(self, part, release, plan):
        persons = int(release.solved["persons"].sum())
        self.calls.append(f"write_part {persons}")
        self._write(part.path, persons)
        return {"persons": persons}

    def assemble(self, run_dir, parts, nation, plan):
        self.calls.append("assemble")
        return [self._write(run_dir.path, sum(int((p.directory.path / TOY_FILE).read_text()) for p in parts))]


def toy_state(rows) -> int:
    """A state's part: its persons in the MDF."""
    return len(rows.persons)


def toy_combine(release, parts, report, alongside) -> None:
    """The file's number against the states' persons, added up."""
    written = int((release.run.path / TOY_FILE).read_text())
    mdf = sum(parts.values())
    report.check(TOY_CHECK, [] if written == mdf else [f"the file says {written}, the MDF holds {mdf}"])


@pytest.fixture
def toy():
    output = outputs.register(ToyOutput())
    register(Check("toy_persons", toy_combine, state=toy_state))
    try:
        yield output
    finally:
        outputs.unregister("toy")
        unregister("toy_persons")


def _edited(out: Path, persons: int) -> None:
    """The toy file says `persons`, and the manifest lists its new digest (only the check can tell; the
    signature, which would not verify, dropped)."""
    for signed in ("manifest.sig", "release.pub"):
        (out / signed).unlink()
    path = out / TOY_FILE
    path.write_text(f"{persons}\n")
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["outputs"][TOY_FILE] = hashlib.sha256(path.read_bytes()).hexdigest()
    (out / "manifest.json").write_text(json.dumps(manifest))


def _written_listed_and_checked(out: Path, manifest) -> int:
    persons = manifest.counts.persons
    assert (out / TOY_FILE).read_text() == f"{persons}\n"
    assert TOY_FILE in manifest.outputs and "toy_persons" in manifest.holds
    assert manifest.validation.valid and f"ok  {TOY_CHECK}" in manifest.validation.checks
    report = validate_run(out)
    assert report.ok and report.checks[-1] == f"ok  {TOY_CHECK}"
    assert report.checks[0].endswith("schema_constraints, block_invariants, toy_persons; those are checked")
    return persons


def test_a_registered_output_and_check_are_written_listed_and_validated(toy, tmp_path):
    result = run("tiny", tmp_path / "run", seed=3, workers=1, progress=False)
    persons = _written_listed_and_checked(result.out_dir, result.manifest)
    persons_written = [int(c.split()[1]) for c in toy.calls if c.startswith("write_part")]
    assert toy.calls == [f"write_part {persons}", "assemble"] and persons_written == [persons]  # one state: one part
    _edited(result.out_dir, persons + 1)
    assert validate_run(result.out_dir).violations == [f"{TOY_CHECK}: the file says {persons + 1}, the MDF holds {persons}"]


def test_a_registered_output_is_assembled_from_the_states_parts_and_checked_state_by_state(toy, tmp_path):
    from das.core.executors import local_executor

    result = run(two_states(tmp_path / "inputs"), tmp_path / "run", seed=7, workers=1, progress=False)
    persons = _written_listed_and_checked(result.out_dir, result.manifest)
    parts = [int(c.split()[1]) for c in toy.calls if c.startswith("write_part")]
    assert toy.calls[-1] == "assemble" and len(parts) == 2 and sum(parts) == persons
    _edited(result.out_dir, persons - 1)
    failed = f"{TOY_CHECK}: the file says {persons - 1}, the MDF holds {persons}"
    assert validate_run(result.out_dir).violations == [failed]
    executor = local_executor(2)  # the check travels with the state tasks: the workers never registered it
    try:
        assert validate_run(result.out_dir, executor=executor).violations == [failed]
    finally:
        executor.close()


def test_a_claim_no_check_proves_is_a_violation_and_unregistered_checks_are_gone(tmp_path, toy):
    assert "toy_persons" in claims()
    result = run("tiny", tmp_path / "run", seed=3, workers=1, progress=False)
    unregister("toy_persons")
    assert "toy_persons" not in CHECKS and "toy_persons" not in claims()
    report = validate_run(result.out_dir)
    assert report.violations == [f"the release claims mdf_codes, tables_match_mdf, nmf_matches_certificate, units_mdf, "
                                 f"invariants, schema_constraints, block_invariants, toy_persons; those are checked: "
                                 f"claims "
                                 f"'toy_persons', which das validate does not know (known: {', '.join(claims())})"]
    with pytest.raises(ValueError, match="taken"):
        register(CHECKS["mdf_codes"])
