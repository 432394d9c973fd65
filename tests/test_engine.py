"""The engine: batches of whole parents, and solutions that do not depend on how a level is cut."""

import numpy as np

from das.measure import Measured, Measurement, Target, measure_release
from das.privacy.accounting import allocate
from das.privacy.randomness import SeededRandomSource
from das.privacy.strategy import load_strategy
from das.topdown.engine import EngineOptions, parent_batches, postprocess


def test_parent_batches_hold_whole_parents():
    offsets = np.array([0, 3, 4, 10, 11, 12, 20])
    assert parent_batches(offsets, 4).tolist() == [0, 2, 3, 5, 6]  # a parent bigger than a batch stands alone
    assert parent_batches(offsets, 100).tolist() == [0, 6]
    assert parent_batches(np.array([0]), 4).tolist() == [0]


def test_batch_size_does_not_change_the_solution(perry, tmp_path):
    schema, geography, invariants, histograms = perry
    allocation = allocate(load_strategy("pl94_five_level"), load_strategy("pl94_five_level").rho)
    plan = {lv: [] for lv in geography.levels}
    for item in allocation.items:
        plan[item.level].append(Measurement(item.level, item.query, item.sigma2))
    measure_release(Measured("persons", schema, plan), geography, histograms, SeededRandomSource(3),
                                Target(tmp_path))
    solved = [postprocess("persons", schema, geography, invariants, tmp_path,
                          EngineOptions(progress=False, batch_children=size))[0] for size in (2048, 7)]
    assert (solved[0] != solved[1]).nnz == 0
