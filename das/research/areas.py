"""Error of total population in areas off the geographic spine (places, districts: any set of blocks), beside
the spine's levels.

An area's true and estimated totals are the sums of its blocks'; its error is scored with the same sufficient
statistics, size bins (by the area's true population) and metrics as a level's (das.research.metrics), so
replicates pool the same way. An area type is given as a per-block index into its areas (-1: a block in
none of them), as `das.io.areas.Areas.codes` and `das.research.districts` give it.

>>> area_totals(np.array([1, 2, 3, 4]), np.array([0, 1, 0, -1]), 2).tolist()
[4.0, 2.0]
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from das.research.metrics import combine, error_stats, metrics, signed_error_test

SPINE, AREA = "level", "area"  # the `kind` of a row of the table: a level of the spine, or an area type
TABLE_KEYS = ("rho", "estimator", "kind", "level", "bin")


def area_totals(block_values: np.ndarray, index: np.ndarray, n_areas: int) -> np.ndarray:
    """Per area, the sum of its blocks' values (`index`: each block's area, -1 for none)."""
    values = np.asarray(block_values, dtype=np.float64).reshape(-1)
    inside = index >= 0
    return np.bincount(index[inside], weights=values[inside], minlength=n_areas)


def area_stats(truth: np.ndarray, estimates: Mapping[str, np.ndarray], areas: Mapping[str, np.ndarray]) -> pd.DataFrame:
    """Sufficient statistics of total population per estimator, area type (column `level`) and true size bin of
    the area: `truth` and each estimate are per-block totals, `areas` maps a type to its per-block index."""
    frames = []
    for area_type, index in areas.items():
        index = np.asarray(index, dtype=np.int64)
        n_areas = int(index.max()) + 1 if index.size else 0
        if n_areas == 0:
            continue
        true_areas = area_totals(truth, index, n_areas)
        for estimator, estimate in estimates.items():
            stats = error_stats(area_totals(estimate, index, n_areas)[:, None], true_areas[:, None])
            frames.append(stats.assign(estimator=estimator, level=area_type, query="total"))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def area_table(spine_stats: pd.DataFrame, areas: pd.DataFrame, *, levels) -> pd.DataFrame:
    """Total population's error per (rho, estimator, level or area type, size bin), the spine's `levels` first:
    units (per replicate), MAE, mean signed error with its s.e. and t (das.research.metrics.signed_error_test),
    MALPE and the largest absolute error."""
    spine = spine_stats[(spine_stats["query"] == "total") & spine_stats["level"].isin(list(levels))]
    both = pd.concat([spine.assign(kind=SPINE), areas.assign(kind=AREA)], ignore_index=True)
    both = both.drop(columns=["query"])
    keys = list(TABLE_KEYS)
    pooled = metrics(combine(both, keys))
    replicates = both.groupby(keys, sort=False, observed=True)["replicate"].nunique().rename("replicates").reset_index()
    test = signed_error_test(both, by=keys)[[*keys, "se", "t", "se_basis"]]
    table = pooled.merge(replicates, on=keys).merge(test, on=keys)
    table["units"] = (table["n"] / table["replicates"]).round().astype(np.int64)
    return table[[*keys, "units", "replicates", "mae", "mean_error", "se", "t", "se_basis", "malpe",
                  "max_abs_error"]]

