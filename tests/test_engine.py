"""The engine: batches of whole parents, and solutions that do not depend on how a level is cut."""

import numpy as np

from das.privacy.accounting import allocate
from das.privacy.randomness import SeededRandomSource
from das.privacy.strategy import load_strategy
from das.topdown.batch import parent_batches
from das.topdown.engine import EngineOptions, postprocess
from das.topdown.measure import Measured, Target, measure_release


def test_parent_batches_hold_whole_parents():
    offsets = np.array([0, 3, 4, 10, 11, 12, 20])
    assert parent_batches(offsets, 4).tolist() == [0, 2, 3, 5, 6]  # a parent bigger than a batch stands alone
    assert parent_batches(offsets, 100).tolist() == [0, 6]
    assert parent_batches(np.array([0]), 4).tolist() == [0]


def test_batch_size_does_not_change_the_solution(perry, tmp_path):
    schema, geography, invariants, histograms = perry
    allocation = allocate(load_strategy("pl94_five_level"), load_strategy("pl94_five_level").rho)
    measure_release(Measured("persons", schema, allocation), geography, histograms, rng=SeededRandomSource(3),
                    target=Target(tmp_path))
    solved = [postprocess("persons", schema, geography, invariants, nmf_dir=tmp_path,
                          options=EngineOptions(progress=False, batch_children=size))[0] for size in (2048, 7)]
    assert (solved[0] != solved[1]).nnz == 0


class ShuffledExecutor:
    """Holds every submitted task and finishes them one at a time in a random order: a cluster whose
    workers take very different times, so batches of several levels are in flight together."""

    def __init__(self, slots: int, seed: int):
        self.slots, self.rng, self.pending, self.most_levels = slots, np.random.default_rng(seed), {}, 0

    def submit(self, fn, arg):
        from concurrent.futures import Future

        future = Future()
        self.pending[future] = (fn, arg)
        levels = {len(a.family.children[0]) for _, a in self.pending.values()}  # geocode length names the level
        self.most_levels = max(self.most_levels, len(levels))
        return future

    def wait_first(self, futures):
        future = futures[int(self.rng.integers(len(futures)))]
        fn, arg = self.pending.pop(future)
        future.set_result(fn(arg))
        return [future]

    def close(self):
        pass


def test_no_level_barrier_and_any_completion_order_give_the_same_solution(perry, tmp_path):
    """Batches start as soon as their parents are solved, so levels overlap; the solution is the one of a
    level-by-level run, whatever order the batches finish in."""
    schema, geography, invariants, histograms = perry
    strategy = load_strategy("pl94_five_level")
    allocation = allocate(strategy, strategy.rho)
    measure_release(Measured("persons", schema, allocation), geography, histograms, rng=SeededRandomSource(5),
                    target=Target(tmp_path))
    inline, reports = postprocess("persons", schema, geography, invariants, nmf_dir=tmp_path,
                                  options=EngineOptions(progress=False, batch_children=64))
    shuffled = ShuffledExecutor(slots=3, seed=1)
    out, shuffled_reports = postprocess("persons", schema, geography, invariants, nmf_dir=tmp_path,
                                        options=EngineOptions(progress=False, batch_children=64, executor=shuffled))
    assert (inline != out).nnz == 0
    assert shuffled.most_levels >= 2  # batches of two levels were in flight at once
    assert [r.level for r in shuffled_reports] == list(geography.levels)
    for r in shuffled_reports[1:]:
        assert len(r.tasks) >= 1 and sum(t["children"] for t in r.tasks) == geography.n_units(r.level)
        assert all(t["cpu_seconds"] > 0 and t["seconds"] > 0 for t in r.tasks)
        assert 0 <= r.span[0] <= r.span[1]
    finished = [r.span[1] for r in shuffled_reports[1:]]
    assert finished == sorted(finished)  # a level completes only after the level above it


def test_schedule_releases_a_batch_only_after_every_parent_batch_and_largest_first(perry, tmp_path):
    from das.topdown.engine import _Release, _Schedule

    schema, geography, invariants, _ = perry
    job = _Release("persons", schema, geography, invariants, tmp_path, EngineOptions(batch_children=40))
    plans = _plan_levels_without_nmf(job, geography)
    schedule = _Schedule(plans)
    rng = np.random.default_rng(0)
    solved_units = {0: set()}
    order, ready = [], []
    while (nxt := schedule.pop()) is not None or ready:
        if nxt is not None:
            ready.append(nxt)
            continue
        i, b = ready.pop(int(rng.integers(len(ready))))
        plan = plans[i]
        if i > 0:  # every parent of the batch was produced by a solved batch of the level above
            needed = set(range(int(plan.parents[b]), int(plan.parents[b + 1])))
            assert needed <= solved_units[i - 1]
        solved_units.setdefault(i, set()).update(range(int(plan.units[b]), int(plan.units[b + 1])))
        plan.results[b] = None
        order.append((i, b))
        schedule.solved(i, b)
    assert sorted(order) == [(i, b) for i, p in enumerate(plans) for b in range(p.n_batches)]
    for i, plan in enumerate(plans):
        assert solved_units[i] == set(range(geography.n_units(plan.name)))
    first = plans[0]
    assert schedule.ready == []
    fresh = _Schedule(_plan_levels_without_nmf(job, geography))
    popped = [fresh.pop() for _ in range(fresh.levels[0].n_batches)]
    sizes = [int(first.blocks[b]) for _, b in popped]
    assert sizes == sorted(sizes, reverse=True)  # the largest subtree goes first


def _plan_levels_without_nmf(job, geography):
    """The engine's plan of every level below the nation, without reading NMF files (the schedule needs none)."""
    from unittest import mock

    from das.topdown import engine

    with mock.patch.object(engine.nmf, "level_index", lambda path, n: None):
        return engine._plan_levels(job, list(geography.levels[1:]), slots=2)
