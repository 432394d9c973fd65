"""The release frame (das/frame/lifecycle.py): what every release command does around its mechanism."""

import json
import os
import stat

import numpy as np
import pytest
import scipy.sparse as sp

from das.core.errors import OutDirError
from das.driver.pipeline import Pipeline, code_version, release_rho
from das.frame import bundle, signing
from das.frame.checkpoint import file_sha256
from das.frame.lifecycle import Completion as FrameCompletion
from das.frame.lifecycle import Opening, complete, holds, open_frame, output_plan
from das.frame.records import Counts, MechanismRecord, PublishedInvariants, ReleaseInfo
from das.frame.rundir import RunDir
from das.io.outputs import SolvedRelease
from das.io.tables import load_tables
from das.mechanisms.base import Ledger, Public, mechanism_certificate
from das.mechanisms.registry import MECHANISMS
from das.model.geography import Geography
from das.privacy.strategy import load_strategy


def _opening(pipe: Pipeline, plan) -> Opening:
    return Opening({n: ReleaseInfo(r.spec.schema, r.spec.strategy) for n, r in pipe.releases.items()},
                   pipe.certificates, PublishedInvariants({"nation": {"": 3}}), holds(plan, synthetic=False),
                   private=pipe.rng.private, version=code_version())


@pytest.fixture
def pipe():
    return Pipeline.prepare("tiny", seed=3)


def test_opening_writes_the_operator_files_then_the_manifest_before_anything_is_drawn(pipe, tmp_path):
    plan = output_plan(pipe.spec, pipe.tables, pipe.metadata())
    frame = open_frame(pipe.spec, RunDir(tmp_path / "run"), _opening(pipe, plan), plan=plan)
    run_dir = frame.run_dir
    assert sorted(p.name for p in run_dir.path.iterdir()) == ["manifest.json", "operator"]
    manifest = run_dir.read()
    assert manifest == frame.manifest and manifest.status == "running" and not manifest.private
    assert "NOT private" in manifest.warning and manifest.certificate("persons") == pipe.certificates["persons"]
    assert manifest.holds == ("mdf_codes", "units_mdf", "tables_match_mdf", "nmf_matches_certificate",
                              "block_invariants", "invariants", "schema_constraints")
    assert str(pipe.spec.persons_path) not in run_dir.manifest_path.read_text()  # input paths: operator only
    record, key = bundle.read_operator(run_dir.path)
    assert record["inputs"]["persons"] == str(pipe.spec.persons_path) and len(key) == 32
    assert stat.S_IMODE(os.stat(run_dir.key_file).st_mode) == 0o600


@pytest.mark.parametrize("umask", [0o000, 0o022, 0o002])
def test_operator_files_are_the_owners_alone_whatever_the_umask(pipe, tmp_path, umask):
    plan = output_plan(pipe.spec, pipe.tables, pipe.metadata())
    before = os.umask(umask)
    try:
        frame = open_frame(pipe.spec, RunDir(tmp_path / "run"), _opening(pipe, plan), plan=plan)
        frame.noted(timings_seconds={"total": 1.0})
    finally:
        os.umask(before)
    run_dir = frame.run_dir
    assert stat.S_IMODE(os.stat(run_dir.operator_dir).st_mode) == 0o700
    assert sorted(p.name for p in run_dir.operator_dir.iterdir()) == ["fingerprint.key", "operator.json", "process.json",
                                                                             "signing.key"]
    for path in run_dir.operator_dir.iterdir():
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600, path
    assert bundle.read_process(run_dir.path) == {"timings_seconds": {"total": 1.0}}


def test_a_directory_holding_another_file_is_refused_and_kept(pipe, tmp_path):
    plan = output_plan(pipe.spec, pipe.tables, pipe.metadata())
    (tmp_path / "mine.txt").write_text("precious")
    for overwrite in (False, True):
        with pytest.raises(OutDirError, match="not empty|not a das run"):
            open_frame(pipe.spec, RunDir(tmp_path), _opening(pipe, plan), plan=plan, overwrite=overwrite)
    assert (tmp_path / "mine.txt").read_text() == "precious" and sorted(os.listdir(tmp_path)) == ["mine.txt"]


def test_completing_lists_every_file_written_validates_and_removes_the_checkpoints(tmp_path):
    """A synthetic persons release written through the frame by hand (flat's certificate and details, as das validate
    plans them again from the published spec; the truth itself as its MDF): the frame lists, digests and validates it."""
    pipe = Pipeline.prepare("tiny", seed=3)
    confidential = pipe.read_inputs()
    flat = MECHANISMS["flat"]
    rho = release_rho(pipe.spec.persons, load_strategy(pipe.spec.persons.strategy), pipe.spec.delta)
    ledger = Ledger(rho)
    planned = flat.plan(Public(rho, pipe.spec.delta, pipe.schemas["persons"], "block"), ledger)
    cert = mechanism_certificate(flat, pipe.schemas["persons"], pipe.spec.levels, ledger, delta=pipe.spec.delta,
                                 private=False)
    metadata = bundle.parquet_metadata(False, {"persons": cert}, pipe.public_spec()[1], code_version())
    plan = output_plan(pipe.spec, load_tables(pipe.spec.tables), metadata, synthetic=True)
    opening = Opening({"persons": ReleaseInfo("pl94_persons", None, "flat")}, {"persons": cert},
                      PublishedInvariants(), ("mdf_codes", "tables_match_mdf"), private=False, version=code_version(),
                      mechanism=MechanismRecord("flat", flat.summary, flat.geography, rho,
                                                flat.public_details(planned.details)))
    frame = open_frame(pipe.spec, RunDir(tmp_path / "run"), opening, plan=plan)
    frame.run_dir.checkpoints_dir.mkdir()
    (frame.run_dir.checkpoints_dir / "x.npz").write_bytes(b"work in progress")
    geography: Geography = confidential.geography
    truth = sp.csr_matrix(confidential.histograms["persons"])
    written = frame.write(SolvedRelease(geography, {"persons": pipe.schemas["persons"]}, {"persons": truth}))
    assert set(written) == {"outputs"}  # no NMF and no units MDF: not a measured TopDown release
    frame = complete(frame, FrameCompletion(written, Counts(int(truth.sum()), geography.n_blocks), {"total": 1.0}))
    out = frame.run_dir.path
    manifest = frame.run_dir.read()
    assert manifest.status == "complete" and manifest.validation.valid, manifest.validation.violations
    assert manifest.outputs == {frame.run_dir.relative(p): file_sha256(p) for p in written["outputs"]}
    assert set(manifest.outputs) == {"mdf_persons.parquet"} | {f"tables/{t}.parquet" for t in ("P1", "P2", "P3", "P4",
                                                                                                   "P5")}
    assert not frame.run_dir.checkpoints_dir.exists() and "validate" in bundle.read_process(out)["timings_seconds"]
    assert json.loads(frame.run_dir.manifest_path.read_text()) == manifest.to_dict()
    assert np.isclose(manifest.counts.persons, truth.sum())
    # then signed, last: the release's own key (operator only, 0600), its public half beside the release
    run_dir = frame.run_dir
    assert signing.verifies(run_dir.public_key_file.read_bytes(), run_dir.signature_file.read_bytes(),
                            run_dir.manifest_path.read_bytes())
    assert run_dir.public_key_file.read_bytes() == signing.public_key_pem(signing.read_private_key(run_dir.signing_key_file))
    assert stat.S_IMODE(os.stat(run_dir.signing_key_file).st_mode) == 0o600
    last = max(p.stat().st_mtime_ns for p in run_dir.path.rglob("*") if p.is_file() and p != run_dir.signature_file)
    assert run_dir.signature_file.stat().st_mtime_ns >= last


def test_every_file_of_a_run_carries_one_code_version_though_git_fails_after_the_first_call(pipe, monkeypatch):
    """A `git status` that timed out under load gave one NMF file the bare version (its digest differed between
    two equal seeded runs): git is asked once per process, without its optional index lock."""
    import subprocess

    import das.driver.pipeline

    calls = []
    real = subprocess.run

    def flaky(args, *a, **k):
        calls.append(list(args))
        if len(calls) > 2:
            raise subprocess.TimeoutExpired(args, 30)
        return real(args, *a, **k)

    das.driver.pipeline.code_version.cache_clear()
    monkeypatch.setattr(das.driver.pipeline.subprocess, "run", flaky)
    try:
        first = pipe.metadata()
        assert all(pipe.metadata() == first for _ in range(3))
        assert first[b"das.version"].decode() == code_version() and "(git " in code_version()
        assert 1 <= len(calls) <= 2 and all("--no-optional-locks" in c for c in calls)
    finally:
        das.driver.pipeline.code_version.cache_clear()
