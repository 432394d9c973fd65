"""Block histograms: sparse (n_blocks x n_cells) int64 counts of records."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp


def block_histograms(records, n_blocks: int, n_cells: int) -> sp.csr_matrix:
    """Count records (block_index, cells) into a CSR matrix; duplicates are summed."""
    h = sp.csr_matrix(
        (np.ones(len(records.cells), dtype=np.int64), (records.block_index, records.cells)),
        shape=(n_blocks, n_cells),
    )
    h.sum_duplicates()
    return h
