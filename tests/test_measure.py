"""Measurements: the plan spends exactly its budget, every charge comes before the first draw, and
the NMF holds each answer once at its certified variance."""

from fractions import Fraction

import numpy as np
import pytest

import das.topdown.measure
from das.core.errors import BudgetError
from das.io import nmf
from das.privacy.accounting import PrivacyAccountant, allocate
from das.privacy.randomness import SeededRandomSource
from das.privacy.strategy import load_strategy
from das.topdown.measure import Measured, Target, measure_release


def _plan(rho=None):
    return allocate(load_strategy("pl94_five_level"), rho)


def test_the_plan_spends_exactly_its_budget(perry):
    allocation = _plan(Fraction(7, 3))
    assert sum(1 / m.sigma2 for m in allocation.items) == Fraction(7, 3) == allocation.rho
    assert all(m.sigma2 == 1 / m.rho for m in allocation.items)


def test_an_overspending_plan_stops_before_the_first_draw(perry, tmp_path, monkeypatch):
    schema, geography, _, histograms = perry
    allocation = _plan()
    drawn = []
    monkeypatch.setattr(das.topdown.measure, "discrete_gaussian", lambda *a: drawn.append(a) or np.zeros(a[1], np.int64))
    smaller = PrivacyAccountant(allocation.rho / 2)
    with pytest.raises(BudgetError, match="over the budget"):
        measure_release(Measured("persons", schema, allocation), geography, histograms, rng=SeededRandomSource(1),
                        target=Target(tmp_path), accountant=smaller)
    assert drawn == [] and not any(tmp_path.rglob("*.parquet"))


def test_each_answer_is_written_once_at_its_certified_variance(perry, tmp_path):
    schema, geography, _, histograms = perry
    allocation = _plan()
    accountant = PrivacyAccountant.for_allocation(allocation)
    written = measure_release(Measured("persons", schema, allocation), geography, histograms, rng=SeededRandomSource(2),
                              target=Target(tmp_path), accountant=accountant)
    assert accountant.spent == allocation.rho and set(written) == set(geography.levels)
    for level, path in written.items():
        answers = nmf.read_level(path, geography.units(level))
        assert {q: a.variance for q, a in answers.items()} == {m.query: m.sigma2 for m in allocation.level(level)}
        for m in allocation.level(level):
            a = answers[m.query]
            assert a.answers.shape == (geography.n_units(level), schema.query(m.query).size) and a.level == level
            assert a.geocodes.tolist() == geography.units(level).tolist()


def test_in_memory_measurements_are_noisy_answers_of_every_trial(perry, monkeypatch):
    """What the privacy audit draws: one NoisyAnswers per planned measurement, in plan order, each
    (trials x geounits x cells) at the certified variance; with the noise taken away, the true answers."""
    schema, geography, _, histograms = perry
    allocation = _plan()
    drawn = das.topdown.measure.measure_in_memory(geography, histograms, schema, allocation, rng=SeededRandomSource(4), trials=3)
    assert [(a.level, a.query, a.variance) for a in drawn] == [
        (level, m.query, m.sigma2) for level in geography.levels for m in allocation.level(level)]
    for a in drawn:
        assert a.answers.shape == (3, geography.n_units(a.level), schema.query(a.query).size)
        assert a.geocodes.tolist() == geography.units(a.level).tolist()
    assert all(not np.array_equal(a.answers[0], a.answers[1]) for a in drawn if a.answers[0].size > 100)  # own noise
    monkeypatch.setattr(das.topdown.measure, "discrete_gaussian", lambda variance, n, rng: np.zeros(n, np.int64))
    exact = das.topdown.measure.measure_in_memory(geography, histograms, schema, allocation, rng=SeededRandomSource(4), trials=2)
    for a in exact:
        truth = das.topdown.measure.true_answers(geography.aggregate(histograms, a.level), schema, a.query)
        assert np.array_equal(a.answers[1], truth) and np.array_equal(a.rows(0, 2).answers[0], truth[:2])
