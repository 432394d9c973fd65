"""`das.synthesizer` (das/api/synthesizer.py): a mechanism of `das synth` fit on DataFrames and sampled, the
release das.synth writes (one path underneath), its noise drawn once per fit."""

import pandas as pd
import pytest
from conftest import TINY, mechanism_params

import das
from das.core.errors import SpecError, StudyError
from das.mechanisms import MechanismError


def _frames():
    return pd.read_csv(TINY / "persons.csv", dtype=str), pd.read_csv(TINY / "units.csv", dtype=str)


def test_a_flat_synthesizer_is_das_synth_with_the_same_seed(tmp_path):
    persons, units = _frames()
    fitted = das.synthesizer("flat", eps=1.0, out=tmp_path / "api", seed=11)  # a float: converted exactly
    assert fitted.fit(persons, units) is fitted  # fit returns the synthesizer, as the ecosystem's do
    release = fitted.sample()
    direct = das.synth("tiny", mechanism="flat", eps=1, out=tmp_path / "synth", seed=11)
    assert isinstance(release, das.Release) and release.valid and release.validate().ok
    assert release.certificate == direct.certificate and release.certificate.eps == 1
    pd.testing.assert_frame_equal(release.mdf, direct.mdf)  # the same noise: the same records
    for name, table in direct.tables.items():
        pd.testing.assert_frame_equal(release.tables[name], table)
    assert release.manifest.spec_sha256 == direct.manifest.spec_sha256


def test_sampling_again_draws_no_new_noise(tmp_path):
    persons, units = _frames()
    fitted = das.synthesizer("flat", eps=1, out=tmp_path / "r").fit(persons, units)  # OS randomness
    first = fitted.sample()
    mdf, manifest = first.mdf, (first.path / "manifest.json").read_bytes()
    second = fitted.sample()
    assert second is first and (second.path / "manifest.json").read_bytes() == manifest
    pd.testing.assert_frame_equal(second.mdf, mdf)
    refit = das.synthesizer("flat", eps=1, out=tmp_path / "r2").fit(persons, units).sample()  # a new fit: new noise
    assert (refit.path / "manifest.json").read_bytes() != manifest


@pytest.mark.parametrize("mechanism", mechanism_params())
def test_every_mechanism_fits_and_samples_a_valid_release(mechanism, tmp_path):
    persons, units = _frames()
    release = das.synthesizer(mechanism, eps="1", out=tmp_path / mechanism, seed=3).fit_sample(persons, units)
    assert release.valid and release.certificate.eps == 1 and release.manifest.spec_name == "tiny"
    assert len(release.mdf) > 0 and release.units_mdf is None


def test_a_synthesizer_is_checked_before_it_reads_anything(tmp_path):
    with pytest.raises(MechanismError, match="unknown mechanism 'nope'; choose from flat, stability"):
        das.synthesizer("nope", eps=1)
    with pytest.raises(SpecError, match="eps"):
        das.synthesizer("flat", eps="one")
    with pytest.raises(MechanismError, match=r"not fit: call .fit\(persons, units\) first"):
        das.synthesizer("flat", eps=1, out=tmp_path / "never").sample()
    assert not (tmp_path / "never").exists()


def test_a_synthesizer_release_from_dataframes_is_scored_with_its_truth(tmp_path):
    persons, units = _frames()
    release = das.synthesizer("flat", eps=1, out=tmp_path / "r", seed=2).fit(persons, units).sample()
    with pytest.raises(StudyError, match=r"made from pandas DataFrames .*give its truth.*truth=\(persons, units\)"):
        das.metrics(release, estimators=("topdown",))
    study = das.metrics(release, truth=(persons, units), estimators=("topdown",), out=tmp_path / "m")
    assert study.meta["kind"] == "run" and len(study.metrics) > 0
