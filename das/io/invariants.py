"""invariants.parquet: a TopDown release's invariants per block, public, so that its NMF can be post-processed
again from its public files alone (das postprocess). Every block of the universe once, in geocode order, with
its housing units and its GQ facilities of each type (the counts the units MDF lists record by record)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from das.frame.rundir import RunDir
from das.io import mdf as mdf_io

BLOCK_ID = "GEOID"  # the block's 15-digit geocode, as the spine names it
HOUSING_UNITS = "HOUSING_UNITS"


def gq_column(gq_type: int) -> str:
    """The column of the GQ facilities of type `gq_type` (1..7, GQTYPE_PL's codes)."""
    return f"GQ_FACILITIES_{gq_type}"


def block_invariants_table(blocks: np.ndarray, housing_units: np.ndarray, gq_facilities: np.ndarray) -> pa.Table:
    """Every block (15-digit geocodes, sorted) with its housing units and its GQ facilities of each type."""
    return pa.table({BLOCK_ID: pa.array(np.asarray(blocks, dtype=str)),
                     HOUSING_UNITS: pa.array(np.asarray(housing_units, dtype=np.int64)),
                     **{gq_column(t + 1): pa.array(np.asarray(gq_facilities[:, t], dtype=np.int64))
                        for t in range(gq_facilities.shape[1])}})


def write_block_invariants(run_dir: RunDir, blocks: np.ndarray, housing_units: np.ndarray, gq_facilities: np.ndarray, *,
                           metadata: dict) -> Path:
    """The invariants of `blocks` (in geocode order) as the release's (or a state part's) invariants.parquet."""
    return mdf_io.write_table(block_invariants_table(blocks, housing_units, gq_facilities), run_dir.block_invariants,
                              metadata=metadata)


def read_block_invariants(path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(blocks, housing units, GQ facilities by type) of an invariants.parquet; ValueError naming what is wrong."""
    table = pq.read_table(path)
    names = table.column_names
    gq = [c for c in names if c.startswith("GQ_FACILITIES_")]
    if names[:2] != [BLOCK_ID, HOUSING_UNITS] or gq != [gq_column(t + 1) for t in range(len(gq))] or not gq:
        raise ValueError(f"{path}: expected the columns {BLOCK_ID}, {HOUSING_UNITS}, {gq_column(1)}..; found {names}")
    blocks = table.column(BLOCK_ID).to_numpy(zero_copy_only=False).astype("U15")
    counts = np.column_stack([table.column(c).to_numpy() for c in [HOUSING_UNITS, *gq]]).astype(np.int64)
    if len(blocks) and (np.any(np.char.str_len(blocks) != 15) or np.any(blocks[1:] <= blocks[:-1])):
        raise ValueError(f"{path}: {BLOCK_ID} must be every block once, as 15-digit geocodes in order")
    if np.any(counts < 0):
        raise ValueError(f"{path}: a count below 0")
    return blocks, counts[:, 0], counts[:, 1:]
