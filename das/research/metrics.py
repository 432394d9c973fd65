"""Error metrics of an estimate against the truth, by level, query and true-size bin.

Everything is built from additive sufficient statistics per (level, query, size bin), so one
replicate, many replicates or a budget sweep combine by summing rows; the metrics are then a
few ratios of sums. A "cell" is one geounit x one cell of the query (for `total`: one geounit).

Definitions (over the cells of a bin; T = true, E = estimate, err = E - T):
  MAE = mean |err|; RMSE = sqrt(mean err^2); mean signed error = mean err; max |err|;
  MAPE = 100 mean |err| / T and MALPE = 100 mean err / T, over cells with T > 0;
  share off by more than 5% = share of cells with |err| > 0.05 T (any error > 1e-9 when T = 0);
  TVD (bin "all" only) = mean over geounits of 1/2 sum_cells |E/sum E - T/sum T|, over geounits
  with both sums positive, E clipped at 0 first (raw noisy answers can be negative).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

# True-size bins of a cell: [0], [1, 9], [10, 99], [100, 999], [1000, 9999], [10000, inf)
SIZE_BINS = ("0", "1-9", "10-99", "100-999", "1000-9999", "10000+")
BIN_EDGES = np.array([0, 1, 10, 100, 1000, 10000])
ALL = "all"

STAT_COLUMNS = ("n", "n_pos", "sum_err", "sum_abs", "sum_sq", "max_abs", "sum_rel", "sum_abs_rel",
                "n_off5", "tvd_sum", "n_tvd")
BIAS_KEYS = ("rho", "estimator", "level", "query", "bin")  # a row of the bias test
METRIC_COLUMNS = ("n", "mean_error", "mae", "rmse", "mape", "malpe", "max_abs_error", "share_off_5pct", "tvd")


def size_bin(truth: np.ndarray) -> np.ndarray:
    """Index into SIZE_BINS of each true count (negative truth is not a count: ValueError)."""
    truth = np.asarray(truth)
    if truth.size and truth.min() < 0:
        raise ValueError("true counts must be nonnegative")
    return np.searchsorted(BIN_EDGES, truth, side="right") - 1


def reference_sizes(counts: np.ndarray) -> np.ndarray:
    """The sizes cells are binned by: true counts as they are; a fractional reference (das metrics --against an
    estimate) rounded, and 0 where it is negative.

    >>> reference_sizes(np.array([3, 0])), reference_sizes(np.array([2.6, -1.2]))
    (array([3, 0]), array([3, 0]))
    """
    counts = np.asarray(counts)
    if np.issubdtype(counts.dtype, np.integer) or np.array_equal(counts, np.rint(counts)):
        return counts  # true counts (negative ones refused by size_bin)
    return np.clip(np.rint(counts), 0, None).astype(np.int64)


def _tvd(estimate: np.ndarray, truth: np.ndarray) -> tuple[float, int]:
    """(sum over geounits of TVD, number of geounits it is defined for) of (units x cells) arrays."""
    if truth.shape[1] < 2:
        return 0.0, 0
    est = np.clip(estimate, 0, None)
    e_sum, t_sum = est.sum(axis=1), truth.sum(axis=1)
    ok = (e_sum > 0) & (t_sum > 0)
    if not ok.any():
        return 0.0, 0
    tvd = 0.5 * np.abs(est[ok] / e_sum[ok, None] - truth[ok] / t_sum[ok, None]).sum(axis=1)
    return float(tvd.sum()), int(ok.sum())


def error_stats(estimate: np.ndarray, truth: np.ndarray) -> pd.DataFrame:
    """Sufficient statistics per size bin (and "all") of an estimate of (units x cells) counts."""
    estimate = np.asarray(estimate, dtype=np.float64)
    truth = np.asarray(truth)
    if estimate.shape != truth.shape:
        raise ValueError(f"estimate shape {estimate.shape} differs from truth shape {truth.shape}")
    t = truth.reshape(-1).astype(np.float64)
    err = estimate.reshape(-1) - t
    bins = size_bin(reference_sizes(truth.reshape(-1)))
    pos = t > 0
    rel = np.divide(err, t, out=np.zeros_like(err), where=pos)
    off = np.abs(err) > 0.05 * t + 1e-9  # float estimators: rounding noise is not an error
    n_bins = len(SIZE_BINS)

    def by_bin(values, mask=None):
        w = values if mask is None else np.where(mask, values, 0.0)
        return np.bincount(bins, weights=w, minlength=n_bins)

    abs_err = np.abs(err)
    maxes = np.zeros(n_bins)
    if err.size:
        np.maximum.at(maxes, bins, abs_err)
    stats = pd.DataFrame({
        "bin": list(SIZE_BINS),
        "n": np.bincount(bins, minlength=n_bins).astype(np.int64),
        "n_pos": by_bin(pos.astype(np.float64)).astype(np.int64),
        "sum_err": by_bin(err),
        "sum_abs": by_bin(abs_err),
        "sum_sq": by_bin(err * err),
        "max_abs": maxes,
        "sum_rel": by_bin(rel),
        "sum_abs_rel": by_bin(np.abs(rel)),
        "n_off5": by_bin(off.astype(np.float64)).astype(np.int64),
        "tvd_sum": 0.0,
        "n_tvd": 0,
    })
    stats = stats[stats["n"] > 0]
    tvd_sum, n_tvd = _tvd(estimate, truth)
    total = {c: stats[c].sum() for c in STAT_COLUMNS if c not in ("max_abs", "tvd_sum", "n_tvd")}
    total.update(bin=ALL, max_abs=float(abs_err.max()) if err.size else 0.0, tvd_sum=tvd_sum, n_tvd=n_tvd)
    return pd.concat([stats, pd.DataFrame([total])], ignore_index=True)


def combine(stats: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    """Sum sufficient statistics over everything not in `by` (max for max_abs)."""
    agg = {c: ("max" if c == "max_abs" else "sum") for c in STAT_COLUMNS}
    return stats.groupby(by, sort=False, observed=True).agg(agg).reset_index()


def metrics(stats: pd.DataFrame) -> pd.DataFrame:
    """The metrics (METRIC_COLUMNS) of each row of sufficient statistics, keys kept."""
    keys = [c for c in stats.columns if c not in STAT_COLUMNS]
    n = stats["n"].to_numpy(dtype=np.float64)
    n_pos = stats["n_pos"].to_numpy(dtype=np.float64)
    n_tvd = stats["n_tvd"].to_numpy(dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        out = stats[keys].copy()
        out["n"] = stats["n"].astype(np.int64)
        out["mean_error"] = stats["sum_err"] / n
        out["mae"] = stats["sum_abs"] / n
        out["rmse"] = np.sqrt(stats["sum_sq"] / n)
        out["mape"] = np.where(n_pos > 0, 100 * stats["sum_abs_rel"] / n_pos, np.nan)
        out["malpe"] = np.where(n_pos > 0, 100 * stats["sum_rel"] / n_pos, np.nan)
        out["max_abs_error"] = stats["max_abs"]
        out["share_off_5pct"] = stats["n_off5"] / n
        out["tvd"] = np.where(n_tvd > 0, stats["tvd_sum"] / n_tvd, np.nan)
    return out.reset_index(drop=True)


def bias_table(stats: pd.DataFrame, *, by=BIAS_KEYS) -> pd.DataFrame:
    """Mean signed error per group (`by`: rho, estimator, level, query, bin) across replicates, with its
    standard error and t statistic: each replicate's mean error is one independent draw."""
    per_rep = stats.assign(mean_error=stats["sum_err"] / stats["n"])
    groups = per_rep.groupby(list(by), sort=False, observed=True)["mean_error"]
    table = groups.agg(["mean", "std", "count"]).reset_index()
    table = table.rename(columns={"mean": "mean_error", "std": "sd_between", "count": "replicates"})
    with np.errstate(invalid="ignore", divide="ignore"):
        table["se"] = table["sd_between"] / np.sqrt(table["replicates"])
        # t is undefined where replicates agree to rounding (an invariant): se ~ 0
        table["t"] = np.where(table["se"] > 1e-9 * (1 + table["mean_error"].abs()), table["mean_error"] / table["se"], np.nan)
    # two-sided p-value of "no bias" (Student t, replicates - 1 degrees of freedom)
    from scipy.stats import t as student_t  # here: scipy.stats costs every `das` command (and worker) 0.5 s to import

    table["p"] = 2 * student_t.sf(np.abs(table["t"]), np.maximum(table["replicates"] - 1, 1))
    return table


def signed_error_test(stats: pd.DataFrame, *, by) -> pd.DataFrame:
    """Mean signed error per group of `by`, with its standard error, t and the basis of both (`se_basis`).

    Several replicates: across replicates (`bias_table`: each replicate's mean is one draw of noise). One
    release: across the group's cells (standard deviation of their errors / sqrt(n), from `sum_sq`); the
    errors of cells under one parent are not independent, so that t says how far the mean stands out of the
    cells' spread, not that the mechanism is biased.
    """
    by = list(by)
    if stats["replicate"].nunique() > 1:
        return bias_table(stats, by=by).assign(se_basis="replicates")
    pooled = combine(stats, by)
    n = pooled["n"].to_numpy(dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = pooled["sum_err"].to_numpy() / n
        variance = np.clip(pooled["sum_sq"].to_numpy() / n - mean ** 2, 0, None) * n / (n - 1)
        se = np.where(n > 1, np.sqrt(variance / n), np.nan)
        t = np.where(se > 1e-9 * (1 + np.abs(mean)), mean / se, np.nan)
    return pooled[by].assign(replicates=1, mean_error=mean, se=se, t=t, se_basis="cells")


def markdown_table(frame: pd.DataFrame, floatfmt: str = "{:.3f}") -> str:
    """A plain Markdown table (no extra dependency), numbers formatted, NaN shown as '-'."""
    def cell(v):
        if isinstance(v, float | np.floating):
            return "-" if np.isnan(v) else floatfmt.format(v)
        return str(v)

    lines = ["| " + " | ".join(map(str, frame.columns)) + " |",
             "|" + "|".join("---" for _ in frame.columns) + "|"]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in frame.itertuples(index=False)]
    return "\n".join(lines)


def text_table(frame: pd.DataFrame, floatfmt: str = "{:.2f}") -> str:
    """A table for the terminal: columns aligned (text left, numbers right), NaN as '-'.

    >>> print(text_table(pd.DataFrame({"level": ["county", "block"], "mae": [1.5, float("nan")]})))
    level    mae
    county  1.50
    block      -
    """
    def cell(v):
        if isinstance(v, float | np.floating):
            return "-" if np.isnan(v) else floatfmt.format(v)
        return str(v)

    columns = [[str(c)] + [cell(v) for v in frame[c]] for c in frame.columns]
    numeric = [pd.api.types.is_numeric_dtype(frame[c]) for c in frame.columns]
    widths = [max(map(len, col)) for col in columns]
    rows = zip(*[[v.rjust(w) if num else v.ljust(w) for v in col] for col, w, num in zip(columns, widths, numeric)])
    return "\n".join("  ".join(row).rstrip() for row in rows)


def headline(pooled: pd.DataFrame, levels, *, query: str = "total", rho: str | None = None) -> pd.DataFrame:
    """The terminal's summary of scores: the MAE of `query` per geounit, a row per level (nation to block, those
    scored), a column per estimator; the first budget's unless `rho` is given."""
    frame = pooled[(pooled["query"] == query) & (pooled["bin"] == ALL)]
    if "rho" in frame and len(frame):
        frame = frame[frame["rho"] == (rho if rho is not None else frame["rho"].iloc[0])]
    table = frame.pivot_table(index="level", columns="estimator", values="mae", aggfunc="first", observed=True)
    table = table.reindex(index=[lv for lv in levels if lv in table.index], columns=list(dict.fromkeys(frame["estimator"])))
    return table.reset_index().rename_axis(columns=None)


def sweep_headline(pooled: pd.DataFrame, level: str, *, query: str = "total") -> pd.DataFrame:
    """A budget sweep on the terminal: the MAE of `query` at `level`, a row per budget (rho), a column per estimator."""
    frame = pooled[(pooled["query"] == query) & (pooled["bin"] == ALL) & (pooled["level"] == level)]
    table = frame.pivot_table(index="rho", columns="estimator", values="mae", aggfunc="first", observed=True)
    table = table.reindex(index=list(dict.fromkeys(frame["rho"])), columns=list(dict.fromkeys(frame["estimator"])))
    return table.reset_index().rename_axis(columns=None)
