"""Constraint families: per-block bounds from invariants, summed up the hierarchy."""

import numpy as np
import scipy.sparse as sp

from das.model.geography import Geography
from das.model.rules import Invariants, block_bounds, holds, level_bounds
from das.model.schema import load_schema

PL94 = load_schema("pl94_persons")
BLOCKS = ["440010001001000", "440010001001001", "440030002002000"]


def invariants():
    facilities = np.zeros((3, 7), dtype=np.int64)
    facilities[0, 2] = 1   # block 0: a nursing facility (type 3)
    facilities[1, 4] = 2   # block 1: two college dorms (type 5)
    return Invariants(housing_units=np.array([4, 0, 2]), gq_facilities=facilities,
                      total_population={"nation": np.array([30]), "state": np.array([30])})


def test_block_bounds_follow_the_facility_rules():
    facilities, nursing = block_bounds(PL94, invariants())
    assert facilities.query == "hhgq"
    # lower bounds: >= 1 person where a facility exists
    assert facilities.lower[0].tolist() == [0, 0, 0, 1, 0, 0, 0, 0]
    assert facilities.lower[1].tolist() == [0, 0, 0, 0, 0, 1, 0, 0]
    # structural zeros: no facility => 0; no housing units => no household persons
    assert facilities.structural_zeros()[1].tolist() == [True, True, True, True, True, False, True, True]
    assert facilities.structural_zeros()[2].tolist() == [False] + [True] * 7
    # under 18 in nursing facilities is zero everywhere
    va = PL94.query("hhgq x votingage")
    assert nursing.structural_zeros()[:, np.ravel_multi_index((3, 0), va.shape)].all()


def test_bounds_sum_up_the_hierarchy_and_total_is_invariant():
    g = Geography.from_blocks(BLOCKS)
    county = level_bounds(PL94, invariants(), g, level="county")
    facilities = county[0]
    assert facilities.lower[0].tolist() == [0, 0, 0, 1, 0, 1, 0, 0]  # county 44001 = blocks 0 and 1
    assert facilities.structural_zeros()[1].tolist() == [False] + [True] * 7
    state = level_bounds(PL94, invariants(), g, level="state")
    assert state[-1].query == "total" and state[-1].lower[0, 0] == state[-1].upper[0, 0] == 30


def test_holds_reports_violations():
    g = Geography.from_blocks(BLOCKS)
    bounds = level_bounds(PL94, invariants(), g, level="block")
    good = np.zeros((3, PL94.size), dtype=np.int64)
    good[0, PL94.cell_index((3, 1, 0, 0))] = 2   # adults in the nursing home
    good[0, PL94.cell_index((0, 0, 0, 0))] = 5   # household persons where housing units exist
    good[1, PL94.cell_index((5, 1, 0, 3))] = 7
    assert holds(PL94, bounds, sp.csr_matrix(good)) == []
    bad = good.copy()
    bad[1, PL94.cell_index((0, 1, 0, 0))] = 1    # household person in a block without housing units
    bad[0, PL94.cell_index((3, 0, 0, 0))] = 1    # a child in a nursing facility
    problems = holds(PL94, bounds, sp.csr_matrix(bad))
    assert len(problems) == 2 and all("above its upper bound" in p for p in problems)
