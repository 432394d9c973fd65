"""Block histograms: sparse (n_blocks x n_cells) int64 counts of records."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp


def block_histograms(records, n_blocks: int, n_cells: int) -> sp.csr_matrix:
    """Count records (block_index, cells) into a CSR matrix; duplicates are summed."""
    key = np.asarray(records.block_index, dtype=np.int64) * n_cells  # one int64 a record, sorted in place
    key += records.cells
    key.sort()
    starts = np.flatnonzero(np.r_[True, key[1:] != key[:-1]]) if len(key) else np.zeros(0, np.int64)
    counts = np.diff(np.r_[starts, len(key)]).astype(np.int64)
    entries = key[starts]
    del key
    index = np.int32 if max(n_blocks, n_cells, len(entries)) < 2**31 else np.int64
    indptr = np.searchsorted(entries // n_cells, np.arange(n_blocks + 1)).astype(index)
    return sp.csr_matrix((counts, (entries % n_cells).astype(index), indptr), shape=(n_blocks, n_cells))
