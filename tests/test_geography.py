import numpy as np
import pytest
import scipy.sparse as sp

from das.model.geography import Geography, block_geocodes
from das.model.levels import DEFAULT_LEVELS

BLOCKS = ["440010001001000", "440010001001001", "440010001002000", "440010002001000",
          "440030002002000", "440030002003000", "500010001001000"]


def test_levels_units_and_parents():
    g = Geography.from_blocks(BLOCKS[::-1])  # order does not matter
    assert list(g.blocks) == BLOCKS
    assert list(g.units("nation")) == [""]
    assert list(g.units("state")) == ["44", "50"]
    assert list(g.units("county")) == ["44001", "44003", "50001"]
    assert list(g.units("tract")) == ["44001000100", "44001000200", "44003000200", "50001000100"]
    assert list(g.parent_index("tract")) == [0, 0, 1, 2]
    assert list(g.children_of("county", 0)) == ["44001000100", "44001000200"]
    assert list(g.child_ranges("state")) == [0, 2, 3]


def test_block_groups_are_optional():
    g = Geography.from_blocks(BLOCKS, levels=("nation", "state", "county", "tract", "block_group", "block"))
    assert list(g.units("block_group")[:2]) == ["440010001001", "440010001002"]
    with pytest.raises(ValueError):
        Geography.from_blocks(BLOCKS, levels=("state", "block"))
    with pytest.raises(ValueError, match="15 digits"):
        Geography.from_blocks(["4400100010010"])
    with pytest.raises(ValueError, match="repeat"):
        Geography.from_blocks(BLOCKS + BLOCKS[:1])


def test_aggregation_equals_summing_microdata_at_every_level():
    rng = np.random.default_rng(3)
    g = Geography.from_blocks(BLOCKS)
    n_people = 500
    block_of = rng.integers(0, len(BLOCKS), n_people)
    cell_of = rng.integers(0, 40, n_people)
    hist = sp.csr_matrix((np.ones(n_people, dtype=np.int64), (block_of, cell_of)), shape=(len(BLOCKS), 40))
    for level in DEFAULT_LEVELS:
        agg = g.aggregate(hist, level)
        agg = agg.toarray() if sp.issparse(agg) else agg
        units = g.units(level)
        prefixes = np.array([BLOCKS[b][: len(units[0])] for b in block_of])
        for u, code in enumerate(units):
            expected = np.bincount(cell_of[prefixes == code], minlength=40)
            assert np.array_equal(agg[u], expected), (level, code)


def test_block_geocodes_concatenates_columns():
    out = block_geocodes(["44", "50"], ["001", "003"], ["000100", "020300"], ["1000", "2001"])
    assert list(out) == ["440010001001000", "500030203002001"]
