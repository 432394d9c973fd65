"""Bias by block composition: the signed error of block total population, by true size and by the share of
the block's largest race/ethnicity group (Kenny et al., Science Advances 2021: mixed blocks lose population).

The groups are the eight of the PL 94-171 tables' Hispanic-by-race split: Hispanic or Latino (any race), and
not Hispanic by `cenrace`: each of the six races alone (White, Black, AIAN, Asian, NHPI, some other race) and
two or more races. A block's share is its largest group's true count over its true population; a block of no
persons has none and is left out. A schema without `hispanic` and `cenrace` has no composition.

>>> share_bin(np.array([0.3, 0.5, 0.89, 0.9, 1.0, np.nan])).tolist()
[0, 1, 1, 2, 2, -1]
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from das.model.schema import Schema, cenrace_to_flags
from das.research.estimators import answers
from das.research.metrics import combine, error_stats, metrics, signed_error_test

GROUPS = ("Hispanic", "NH White alone", "NH Black alone", "NH AIAN alone", "NH Asian alone", "NH NHPI alone",
          "NH some other race alone", "NH two or more races")
SHARE_BINS = ("0-0.5", "0.5-0.9", "0.9-1")  # [0, 0.5), [0.5, 0.9), [0.9, 1]
SHARE_EDGES = np.array([0.0, 0.5, 0.9])
HISPANIC_CODE = 2  # CENHISP: 1 not Hispanic or Latino, 2 Hispanic or Latino


def has_groups(schema: Schema) -> bool:
    """Whether the schema has the attributes the groups are made of (hispanic, cenrace of 63 combinations)."""
    return ({"hispanic", "cenrace"} <= set(schema.names) and schema.factor_size("cenrace") == 63
            and HISPANIC_CODE in schema.attribute("hispanic").codes)


def group_counts(schema: Schema, histograms) -> np.ndarray:
    """(units x 8) counts of GROUPS from (units x cells) histograms of a schema with hispanic and cenrace."""
    cells = answers(schema, histograms, "hispanic x cenrace")  # row-major: hispanic, then cenrace
    n_race = schema.factor_size("cenrace")
    hispanic = list(schema.attribute("hispanic").codes).index(HISPANIC_CODE)
    by_origin = cells.reshape(cells.shape[0], -1, n_race)
    not_hispanic = np.delete(by_origin, hispanic, axis=1).sum(axis=1)
    group = np.array([flags.index(True) + 1 if sum(flags) == 1 else len(GROUPS) - 1
                      for flags in map(cenrace_to_flags, range(n_race))])
    counts = np.zeros((cells.shape[0], len(GROUPS)))
    counts[:, 0] = by_origin[:, hispanic, :].sum(axis=1)
    for g in range(1, len(GROUPS)):
        counts[:, g] = not_hispanic[:, group == g].sum(axis=1)
    return counts


def largest_share(counts: np.ndarray) -> np.ndarray:
    """Per unit, the largest group's share of its population (NaN for a unit of no persons)."""
    counts = np.asarray(counts, dtype=np.float64)
    total = counts.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(total > 0, counts.max(axis=1) / total, np.nan)


def share_bin(share: np.ndarray) -> np.ndarray:
    """Index into SHARE_BINS of each share (-1: no share, a unit of no persons)."""
    share = np.asarray(share, dtype=np.float64)
    return np.where(np.isnan(share), -1, np.searchsorted(SHARE_EDGES, np.nan_to_num(share), side="right") - 1)


def composition_stats(truth: np.ndarray, estimates: Mapping[str, np.ndarray], shares: np.ndarray) -> pd.DataFrame:
    """Sufficient statistics (das.research.metrics) of block total population per estimator, share bin and true
    size bin: `truth` and each estimate are per-block totals, `shares` each block's share bin."""
    truth = np.asarray(truth).reshape(-1)
    frames = []
    for estimator, estimate in estimates.items():
        estimate = np.asarray(estimate, dtype=np.float64).reshape(-1)
        for k, label in enumerate(SHARE_BINS):
            inside = shares == k
            if inside.any():
                stats = error_stats(estimate[inside, None], truth[inside, None])
                frames.append(stats.assign(estimator=estimator, share=label))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def composition_table(stats: pd.DataFrame) -> pd.DataFrame:
    """Block total population's signed error per (rho, estimator, share bin, true size bin): blocks (per
    replicate), mean signed error, its s.e. and t (das.research.metrics.signed_error_test), MAE."""
    keys = ["rho", "estimator", "share", "bin"]
    pooled = metrics(combine(stats, keys))
    replicates = stats.groupby(keys, sort=False, observed=True)["replicate"].nunique().rename("replicates")
    test = signed_error_test(stats, by=keys)[[*keys, "se", "t", "se_basis"]]
    table = pooled.merge(replicates.reset_index(), on=keys).merge(test, on=keys)
    table["blocks"] = (table["n"] / table["replicates"]).round().astype(np.int64)
    return table[[*keys, "blocks", "replicates", "mean_error", "se", "t", "se_basis", "mae"]]
