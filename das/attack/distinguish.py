"""The release audit's statistics: which public features differ between neighbouring datasets other than through
the noise (deterministic, not fixed by a declaration), and the lower bound on eps the best event of the trials' scores
gives."""

from __future__ import annotations

import json
import logging
import math
import re

import numpy as np

from das.attack.detection import event_bound
from das.frame import published

logger = logging.getLogger(__name__)


STRUCTURAL = ("manifest:", "files", "parquet:")  # never different between covered neighbours but through the noise


TRIAL_FEATURES = ("manifest:seed", "manifest:randomness")  # the seed the audit gave the trial: not of the data


def _numeric(values: list) -> bool:
    return all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values if v is not None)


def feature_matrix(rows: list[dict]) -> tuple[list[str], np.ndarray]:
    """Every trial's features as one matrix (trials x columns): numbers as they are (a missing count 0, any
    other missing value below every value), anything else as one indicator column per value seen twice; the
    trial's own seed left out."""
    names = sorted({k for row in rows for k in row} - set(TRIAL_FEATURES))
    columns, data = [], []
    for name in names:
        values = [row.get(name) for row in rows]
        if _numeric(values):
            missing = 0.0 if name.startswith(("mdf:", "table:")) else -1e300
            column = np.array([missing if v is None else float(v) for v in values])
            if np.ptp(column) > 0:
                columns.append(name)
                data.append(column)
            continue
        text = [json.dumps(v, sort_keys=True, default=str) for v in values]
        for value in sorted(set(text)):
            indicator = np.array([t == value for t in text], dtype=float)
            if 2 <= indicator.sum() < len(text):
                columns.append(f"{name} == {value[:80]}")
                data.append(indicator)
    return columns, (np.column_stack(data) if data else np.zeros((len(rows), 0)))


def deterministic(side_d: list[dict], side_p: list[dict]) -> tuple[list[str], list[str]]:
    """Features the same in every trial of each dataset and different between them: (structural ones, the
    rest). With OS or independently seeded noise a feature that goes through the noise almost never does."""
    if min(len(side_d), len(side_p)) < 2:
        return [], []
    found = []
    for name in sorted({k for row in side_d + side_p for k in row}):
        d = {json.dumps(row.get(name), sort_keys=True, default=str) for row in side_d}
        p = {json.dumps(row.get(name), sort_keys=True, default=str) for row in side_p}
        if len(d) == 1 and len(p) == 1 and d != p:
            found.append(name)
    return [n for n in found if n.startswith(STRUCTURAL)], [n for n in found if not n.startswith(STRUCTURAL)]


FIXED_SOURCES = ("parameter", "public fact", "invariant")  # das.frame.published: the same for covered neighbours


def fixed(name: str, manifest: dict) -> bool:
    """Whether a structural feature must be the same for neighbours that keep the invariants: a manifest
    field declared a parameter, public fact or invariant (or a mechanism's detail declared a parameter or
    computed from the release), an undeclared field, the files and their Parquet structure. A field derived
    from the noise or from a private selection (the exponential mechanism's choices: few values, so it may
    look fixed over a few trials) is judged by its bound instead."""
    if not name.startswith("manifest:"):
        return True
    path = re.sub(r"\[\d+\]", "[]", name[len("manifest:"):])
    mechanism = (manifest.get("mechanism") or {}).get("name")
    details = _mechanism_details(mechanism) if mechanism else {}
    source = published.sources(manifest, published.MANIFEST, {"details": details}).get(path, "undeclared")
    if source is None or source == "undeclared":
        return True
    if source == "mechanism":
        key = path.split(".")[2].split("[")[0]
        return details.get(key, "parameter").split(":", 1)[0] in ("parameter", "release")
    return source in FIXED_SOURCES


def _mechanism_details(name: str) -> dict:
    from das.mechanisms import MECHANISMS

    return dict(MECHANISMS[name].details) if name in MECHANISMS else {}


def _rates(a: np.ndarray, t: np.ndarray) -> np.ndarray:
    return (a >= t).sum(axis=0)


def best_event(low: np.ndarray, high: np.ndarray, delta: float) -> tuple[int, float, float]:
    """On the first half: the column and threshold t of the event {x >= t} most likely under `high` against
    `low` (the bound's point estimate, `low`'s rate smoothed by one); (column, t, estimate)."""
    best = (-1, 0.0, -np.inf)
    n_low, n_high = len(low), len(high)
    for t in np.sort(high, axis=0):  # each of high's values as a threshold, every column at once
        q = _rates(high, t) / n_high
        p = (_rates(low, t) + 1) / (n_low + 1)
        estimate = np.log(np.maximum(q - delta, 1e-300) / p)
        j = int(np.argmax(estimate))
        if estimate[j] > best[2]:
            best = (j, float(t[j]), float(estimate[j]))
    return best


def bound(d: np.ndarray, p: np.ndarray, delta: float, alpha: float) -> dict:
    """The eps lower bound between the trials on D and on D' (rows), over every column, both datasets in
    either role and both tails: the event chosen on the first half, Clopper-Pearson on the second."""
    d1, d2, p1, p2 = d[:len(d) // 2], d[len(d) // 2:], p[:len(p) // 2], p[len(p) // 2:]
    best = {"eps": 0.0, "column": None, "threshold": None, "p": None, "q": None}
    if d.shape[1] == 0 or min(len(d1), len(p1), len(d2), len(p2)) < 1:
        return best
    for low1, low2, high1, high2 in ((d1, d2, p1, p2), (p1, p2, d1, d2)):
        for sign in (1.0, -1.0):
            column, t, _ = best_event(sign * low1, sign * high1, delta)
            if column < 0:
                continue
            k, j = int((sign * low2[:, column] >= t).sum()), int((sign * high2[:, column] >= t).sum())
            eps = event_bound(k, len(low2), j, len(high2), delta=delta, alpha=alpha)
            if eps > best["eps"]:
                best = {"eps": eps, "column": column, "threshold": sign * t, "p": k / len(low2), "q": j / len(high2)}
    return best


def linear_score(d1: np.ndarray, p1: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """A score learned on the first halves alone: each column weighted by its difference of means over its
    variance (the log-likelihood ratio of independent Gaussian columns), applied to `rows`."""
    finite = (np.abs(np.vstack([d1, p1])) < 1e299).all(axis=0)
    if not finite.any():
        return np.zeros(len(rows))
    a, b = d1[:, finite], p1[:, finite]
    weights = (b.mean(axis=0) - a.mean(axis=0)) / (a.var(axis=0) + b.var(axis=0) + 1e-9)
    return rows[:, finite] @ weights


def discrete_gaussian_variance(sigma2: float) -> float:
    """The variance of the discrete Gaussian with parameter sigma^2 (a little below sigma^2 when it is small)."""
    k = np.arange(-int(12 * math.sqrt(sigma2)) - 10, int(12 * math.sqrt(sigma2)) + 11, dtype=np.float64)
    weights = np.exp(-k * k / (2 * sigma2))
    return float((k * k * weights).sum() / weights.sum())


def _parameter_of_variance(variance: float) -> float:
    """The discrete Gaussian's sigma^2 whose variance is `variance` (bisection: its variance is below sigma^2)."""
    lo, hi = variance, max(2 * variance, variance + 1)
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if discrete_gaussian_variance(mid) < variance else (lo, mid)
    return hi
