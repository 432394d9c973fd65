"""Noisy measurements: for every level, every geounit and every query of the strategy, the true
answer plus exact discrete-Gaussian noise, streamed to the NMF in chunks of geounits.

True answers exist only inside one chunk at a time; only noisy answers leave this module.
Each (release, level, query, chunk) draws from its own random stream, so seeded runs are
reproducible whatever the order of work, and a level already in the NMF is never drawn again.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from das.geography import Geography
from das.io import nmf
from das.privacy.sampler import discrete_gaussian
from das.schema import Schema

CHUNK_CELLS = 1 << 23  # answers per chunk (~64 MB of int64 true answers at most)


@dataclass(frozen=True)
class Measurement:
    """One query measured at one level with noise of exact variance `variance` (= 1/rho_q)."""

    level: str
    query: str
    variance: Fraction


def true_answers(histograms: sp.csr_matrix, schema: Schema, query: str) -> np.ndarray:
    """(n_units x n_query_cells) int64 answers of a query for each row of `histograms`."""
    if query == "detailed":
        return histograms.toarray().astype(np.int64)
    return (histograms @ schema.query(query).matrix.T).toarray().astype(np.int64)


def measure_level(
    release: str,
    level: str,
    geography: Geography,
    level_histograms: sp.csr_matrix,
    schema: Schema,
    measurements: list[Measurement],
    rng,
    out_path: Path,
) -> Path:
    """Measure every query at one level and write that level's NMF file (atomically)."""
    geocodes = geography.units(level)
    n_units = len(geocodes)
    writer = nmf.LevelWriter(out_path)
    try:
        for m in measurements:
            width = schema.query(m.query).size
            chunk = max(1, CHUNK_CELLS // max(width, 1))
            for number, start in enumerate(range(0, max(n_units, 1), chunk)):
                stop = min(n_units, start + chunk)
                if stop <= start:
                    break
                truth = true_answers(level_histograms[start:stop], schema, m.query)
                stream = rng.spawn(f"{release}/{level}/{m.query}/{number}")
                noise = discrete_gaussian(m.variance, truth.size, stream).reshape(truth.shape)
                noisy = truth + noise
                del truth
                writer.write(nmf.measurement_batch(level, geocodes[start:stop], m.query, noisy, m.variance))
    except BaseException:
        writer.abort()
        raise
    return writer.close()


def measure_release(
    release: str,
    geography: Geography,
    block_histograms: sp.csr_matrix,
    schema: Schema,
    plan: dict[str, list[Measurement]],
    rng,
    nmf_dir: Path,
    on_level=None,
    accountant=None,
) -> dict[str, Path]:
    """Measure every level of `plan` (level -> measurements), skipping levels already written.

    Every measurement is charged to `accountant` (if given) before any noise is drawn, so a plan
    that would overspend, or measure a (level, query) twice, stops before the first draw.
    """
    if accountant is not None:
        for level in geography.levels:
            for m in plan.get(level, []):
                accountant.charge(level, m.query, 1 / m.variance)
    written = {}
    for level in geography.levels:
        path = nmf.level_path(nmf_dir, release, level)
        if path.exists():  # a complete level from an earlier, interrupted run: never redraw
            written[level] = path
            continue
        histograms = geography.aggregate(block_histograms, level)
        written[level] = measure_level(
            release, level, geography, histograms, schema, plan.get(level, []), rng, path
        )
        if on_level is not None:
            on_level(level)
    return written
