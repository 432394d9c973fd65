"""das/mechanisms/release.py: a mechanism's release written through the release frame (das.frame.lifecycle), as
`das run` writes its own; a mechanism's output is checked before anything is written."""

from dataclasses import replace

import numpy as np
import pytest
import scipy.sparse as sp

from das.frame import bundle
from das.frame.rundir import RunDir
from das.mechanisms import MECHANISMS
from das.mechanisms.base import MechanismError, Synthesis
from das.mechanisms.release import synthesize


def _swapped(monkeypatch, name: str, run) -> None:
    from das.mechanisms import registry

    mech = MECHANISMS[name]
    monkeypatch.setitem(registry.MECHANISMS, name, replace(mech, run=run))


def test_a_synthetic_release_has_a_release_layout_and_no_topdown_files(tmp_path):
    out = RunDir(synthesize("tiny", "flat", tmp_path / "r", seed=4))
    manifest = out.read()
    assert manifest.complete and manifest.validation.valid and manifest.mechanism.name == "flat"
    assert manifest.persons.mechanism == "flat" and manifest.persons.strategy is None and manifest.units is None
    assert manifest.nmf == {} and not out.nmf_dir.exists() and not out.mdf("units").exists()
    assert set(manifest.outputs) == {out.relative(out.mdf("persons"))} | {
        out.relative(out.table(t)) for t in ("P1", "P2", "P3", "P4", "P5")}  # no H1: no units release
    record, _ = bundle.read_operator(out.path)  # the operator files of a das run: paths and keyed fingerprints
    assert set(record) == {"spec_path", "inputs", "fingerprint", "signing_key"}
    assert str(record["inputs"]["persons"]) not in out.manifest_path.read_text()
    assert manifest.certificate("persons").synthetic and manifest.certificate("persons").budget == manifest.mechanism.budget


@pytest.mark.parametrize(("returned", "message"), [
    (lambda h: sp.csr_matrix(h.shape[:1] + (3,), dtype=np.int64), "returned histograms of shape"),
    (lambda h: sp.csr_matrix(-np.ones(h.shape, dtype=np.int64)), "returned negative counts"),
])
def test_a_mechanism_returning_a_bad_histogram_is_refused_and_nothing_is_written(tmp_path, monkeypatch, returned,
                                                                                  message):
    _swapped(monkeypatch, "flat", lambda data: Synthesis(returned(data.histograms)))
    with pytest.raises(MechanismError, match=message):
        synthesize("tiny", "flat", tmp_path / "out", seed=1)
    assert not (tmp_path / "out").exists()


def test_a_release_that_fails_its_own_validation_is_an_error(tmp_path, monkeypatch):
    """A mechanism whose charges do not add up to what it certifies cannot pass as a release."""
    flat = MECHANISMS["flat"]

    def overcharged(data):
        out = flat.run(data)
        data.ledger.entries.append(data.ledger.entries[0])  # listed twice, charged once: the sum is not rho
        return out

    _swapped(monkeypatch, "flat", overcharged)
    with pytest.raises(MechanismError, match="fails validation"):
        synthesize("tiny", "flat", tmp_path / "out", seed=1)
    assert not RunDir(tmp_path / "out").read().validation.valid  # and the manifest says so
