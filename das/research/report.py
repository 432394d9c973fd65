"""`das report DIR`: a self-contained HTML report (plots embedded) and a Markdown twin with PNG
files, from a replicate study or `das metrics` directory, for readers who did not run it."""

from __future__ import annotations

import base64
import html
import json
from fractions import Fraction
from pathlib import Path

import numpy as np
import pandas as pd

from das import outdir
from das.research.metrics import SIZE_BINS, markdown_table
from das.research.replicate import BIAS_COLUMNS, StudyError

COLORS = {"topdown": "#c0392b", "noisy": "#7f8c8d", "wls": "#2471a3"}
LABELS = {"topdown": "TopDown (released)", "noisy": "raw noisy measurement", "wls": "unconstrained WLS"}
STUDY_READ = ("study.json", "stats.parquet", "metrics.parquet", "bias.parquet", "errors.parquet")
# plots of errors against the truth: confidential, like the study. Deterministic: a rerun replaces it.
REPORT = outdir.Owner("das report", "report", ("index.html", "report.md", "signed_error_vs_truth.png",
                                               "bias_by_size_[0-9]*.png", "mae_by_level.png", "error_distribution.png",
                                               "accuracy_vs_rho.png"), confidential=True, replaces=True)


def page_style(width: int) -> str:
    """The CSS of a self-contained HTML report (research and compare): `width` px at most."""
    return (f"body{{font-family:sans-serif;max-width:{width}px;margin:2em auto;padding:0 1em;color:#222}}"
            "table.t{border-collapse:collapse;font-size:12px}table.t td,table.t th{padding:2px 6px;"
            "border-bottom:1px solid #ddd;text-align:right}"
            ".notice{background:#fdecea;padding:.6em;border-left:4px solid #c0392b}")


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _panels(n: int, width: float, height: float):
    """A figure with one row of n panels (axes as a flat list)."""
    fig, axes = _plt().subplots(1, n, figsize=(width * n, height), squeeze=False)
    return fig, list(axes[0])


def _finish(fig, axes, title: str, path: Path) -> bool:
    """Legend on the first panel, title, save as PNG, free the figure."""
    axes[0].legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    _plt().close(fig)
    return True


def moving_average(x: np.ndarray, y: np.ndarray, window: int) -> tuple[np.ndarray, np.ndarray]:
    """y averaged over a sliding window of `window` points in x order (x sorted)."""
    order = np.argsort(x, kind="stable")
    x, y = x[order], y[order]
    window = max(1, min(window, len(x)))
    kernel = np.ones(window) / window
    return np.convolve(x, kernel, mode="valid"), np.convolve(y, kernel, mode="valid")


def _levels_with_units(meta: dict, minimum: int = 10) -> list[str]:
    return [lv for lv in meta["levels"] if meta["units"].get(lv, 0) >= minimum]


def plot_signed_error(errors: pd.DataFrame, meta: dict, rho: str, path: Path) -> bool:
    """Per-geounit mean signed error of total population against the true count, with moving averages."""
    frame = errors[(errors["query"] == "total") & (errors["rho"] == rho)]
    levels = [lv for lv in _levels_with_units(meta) if lv in set(frame["level"])]
    if frame.empty or not levels:
        return False
    fig, axes = _panels(len(levels), 5.2, 4.2)
    for ax, level in zip(axes, levels):
        part = frame[frame["level"] == level]
        per_unit = part.assign(err=part["estimate"] - part["truth"]).groupby(
            ["estimator", "unit"], observed=True).agg(truth=("truth", "first"), err=("err", "mean")).reset_index()
        alpha = float(np.clip(300 / max(len(per_unit), 1), 0.03, 0.3))
        for estimator, g in per_unit.groupby("estimator", observed=True):
            color = COLORS.get(estimator, "black")
            ax.scatter(g["truth"], g["err"], s=4, alpha=alpha, color=color, linewidths=0)
            window = max(5, min(len(g) // 40, 500))
            mx, my = moving_average(g["truth"].to_numpy(float), g["err"].to_numpy(float), window)
            ax.plot(mx, my, color=color, lw=2.2, label=LABELS.get(estimator, estimator))
        # a few extreme geounits would flatten the curves: show the central 99% and say so
        lim = max(1.0, 1.3 * float(np.quantile(np.abs(per_unit["err"]), 0.99)))
        clipped = int((np.abs(per_unit["err"]) > lim).sum())
        ax.set_ylim(-lim, lim)
        if clipped:
            ax.text(0.99, 0.02, f"{clipped} point(s) beyond +-{lim:.1f} not shown", transform=ax.transAxes,
                    ha="right", fontsize=7, color="#555")
        ax.axhline(0, color="black", lw=0.8)
        ax.set_xscale("symlog", linthresh=10)
        ax.set_xlim(left=-0.5)
        ax.set_xlabel(f"true {level} population")
        ax.set_ylabel("signed error (mean over replicates)")
        ax.set_title(f"{level}: {meta['units'][level]:,} geounits; lines: moving average of {window}", fontsize=10)
    return _finish(fig, axes, f"Signed error of total population against true size (rho = {rho})", path)


def plot_bias_by_bin(bias: pd.DataFrame, meta: dict, *, rho: str, query: str, path: Path) -> bool:
    """Mean signed error (+- 2 standard errors across replicates) by true-size bin, per level."""
    frame = bias[(bias["query"] == query) & (bias["rho"] == rho) & (bias["bin"] != "all")]
    levels = [lv for lv in _levels_with_units(meta) if lv in set(frame["level"])]
    if frame.empty or not levels:
        return False
    estimators = list(dict.fromkeys(frame["estimator"]))
    fig, axes = _panels(len(levels), 5.2, 4.0)
    for ax, level in zip(axes, levels):
        part = frame[frame["level"] == level]
        bins = [b for b in SIZE_BINS if b in set(part["bin"])]
        width = 0.8 / len(estimators)
        for k, estimator in enumerate(estimators):
            g = part[part["estimator"] == estimator].set_index("bin").reindex(bins)
            xs = np.arange(len(bins)) + (k - (len(estimators) - 1) / 2) * width
            ax.bar(xs, g["mean_error"], width, color=COLORS.get(estimator, "black"),
                   yerr=2 * g["se"].fillna(0), capsize=2, label=LABELS.get(estimator, estimator))
        ax.axhline(0, color="black", lw=0.8)
        ax.set_xticks(range(len(bins)), bins)
        ax.set_xlabel(f"true count of the cell ({query})")
        ax.set_ylabel("mean signed error")
        ax.set_title(level)
    return _finish(fig, axes, f"Bias by size: {query} (rho = {rho}; bars +- 2 s.e. across replicates)", path)


def plot_mae_by_level(pooled: pd.DataFrame, meta: dict, rho: str, path: Path) -> bool:
    frame = pooled[(pooled["bin"] == "all") & (pooled["rho"] == rho)]
    queries = list(dict.fromkeys(frame["query"]))
    if not queries:
        return False
    fig, axes = _panels(len(queries), 4.3, 3.8)
    levels = list(meta["levels"])
    for ax, query in zip(axes, queries):
        for estimator, g in frame[frame["query"] == query].groupby("estimator", observed=True, sort=False):
            g = g.set_index("level").reindex(levels)
            ax.plot(levels, g["mae"], marker="o", color=COLORS.get(estimator, "black"), label=LABELS.get(estimator, estimator))
        ax.set_title(query, fontsize=9)
        ax.set_ylabel("MAE per cell")
        ax.tick_params(axis="x", rotation=30)
    return _finish(fig, axes, f"Mean absolute error by level (rho = {rho})", path)


def plot_error_distribution(errors: pd.DataFrame, rho: str, level: str, path: Path) -> bool:
    frame = errors[(errors["query"] == "total") & (errors["rho"] == rho) & (errors["level"] == level)]
    if frame.empty:
        return False
    err = frame["estimate"] - frame["truth"]
    lim = max(3.0, float(np.quantile(np.abs(err), 0.995)))
    bins = np.linspace(-lim, lim, 61)
    fig, axes = _panels(1, 6.5, 4)
    ax = axes[0]
    for estimator, e in err.groupby(frame["estimator"], observed=True, sort=False):
        ax.hist(e.clip(-lim, lim), bins=bins, histtype="step", lw=1.8, density=True,
                color=COLORS.get(estimator, "black"), label=LABELS.get(estimator, estimator))
    ax.set_xlabel(f"signed error of {level} total population")
    ax.set_ylabel("density")
    return _finish(fig, axes, f"Error distribution, {level}s, all replicates (rho = {rho})", path)


def plot_accuracy_vs_rho(pooled: pd.DataFrame, meta: dict, path: Path) -> bool:

    frame = pooled[(pooled["bin"] == "all") & (pooled["query"] == "total")].copy()
    if frame["rho"].nunique() < 2:
        return False
    frame["rho_value"] = frame["rho"].map(lambda r: float(Fraction(r)))
    levels = [lv for lv in _levels_with_units(meta, 2) if lv in set(frame["level"])]
    fig, axes = _panels(len(levels), 4.3, 3.8)
    for ax, level in zip(axes, levels):
        for estimator, g in frame[frame["level"] == level].groupby("estimator", observed=True, sort=False):
            g = g.sort_values("rho_value")
            ax.plot(g["rho_value"], g["mae"], marker="o", color=COLORS.get(estimator, "black"),
                    label=LABELS.get(estimator, estimator))
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("rho (zCDP)")
        ax.set_ylabel("MAE, total population")
        ax.set_title(level)
    return _finish(fig, axes, "Accuracy against the privacy budget", path)


def findings(bias: pd.DataFrame, pooled: pd.DataFrame, meta: dict, rho: str) -> list[str]:
    """Plain-language headline figures computed from the tables."""
    lines = []
    finest = meta["levels"][-1]
    b = bias[(bias["rho"] == rho) & (bias["query"] == "total") & (bias["level"] == finest)]
    for estimator in dict.fromkeys(b["estimator"]):
        parts = []
        for _, row in b[(b["estimator"] == estimator) & (b["bin"] != "all")].iterrows():
            t = "" if pd.isna(row["t"]) else f", t = {row['t']:.1f}"
            parts.append(f"{row['bin']}: {row['mean_error']:+.3f}{t}")
        if parts:
            lines.append(f"{LABELS.get(estimator, estimator)}: mean signed error of {finest} total population "
                         f"by true size, " + "; ".join(parts) + ".")
    p = pooled[(pooled["rho"] == rho) & (pooled["query"] == "total") & (pooled["bin"] == "all")]
    for estimator in dict.fromkeys(p["estimator"]):
        g = p[p["estimator"] == estimator].set_index("level")
        shown = [f"{lv} {g.loc[lv, 'mae']:.2f}" for lv in meta["levels"] if lv in g.index and meta["units"][lv] > 1]
        malpe = g.loc[finest, "malpe"] if finest in g.index else float("nan")
        lines.append(f"{LABELS.get(estimator, estimator)}: MAE of total population by level: {', '.join(shown)}; "
                     f"{finest} MALPE {malpe:+.1f}%.")
    return lines


def _img_html(path: Path) -> str:
    data = base64.b64encode(path.read_bytes()).decode()
    return f'<img alt="{html.escape(path.stem)}" src="data:image/png;base64,{data}" style="max-width:100%">'


def _html_table(frame: pd.DataFrame) -> str:
    return frame.to_html(index=False, float_format=lambda v: f"{v:.3f}", na_rep="-", border=0, classes="t")


def build_report(study_dir, out=None) -> Path:
    """Write report/index.html (self-contained) and report/report.md (+ PNGs); returns the HTML path.
    `out` (default study_dir/report, part of the study) holds only a report: das.outdir's rules."""
    study_dir = Path(study_dir)
    meta_path = study_dir / "study.json"
    for name in ("study.json", "stats.parquet", "metrics.parquet", "bias.parquet"):
        if not (study_dir / name).exists():
            raise StudyError(f"{study_dir} is not a finished study or metrics directory: {name} is missing "
                             "(run `das replicate` or `das metrics` first)")
    meta = json.loads(meta_path.read_text())
    if meta.get("status") != "complete":
        raise StudyError(f"{meta_path}: status is {meta.get('status')!r}; finish the study first")
    out = Path(out) if out else study_dir / "report"
    claim = outdir.check(out, REPORT, protected=[study_dir / name for name in STUDY_READ])
    pooled = pd.read_parquet(study_dir / "metrics.parquet")
    bias = pd.read_parquet(study_dir / "bias.parquet")
    errors = pd.read_parquet(study_dir / "errors.parquet") if (study_dir / "errors.parquet").exists() else pd.DataFrame(
        columns=["rho", "query", "level", "estimator", "unit", "truth", "estimate"])
    claim.start()
    main_rho = meta["rhos"][0]
    figures = _figures(meta, out, pooled=pooled, bias=bias, errors=errors)
    intro = _intro(meta)
    headline = findings(bias, pooled, meta, main_rho)
    overall = pooled[pooled["bin"] == "all"].drop(columns=["bin"])
    by_bin = bias[(bias["bin"] != "all")].copy()
    by_bin["bin"] = pd.Categorical(by_bin["bin"], SIZE_BINS, ordered=True)
    by_bin = by_bin.sort_values(["rho", "query", "level", "estimator", "bin"])[BIAS_COLUMNS]

    md = [f"# Accuracy and bias report: {meta['spec_name']}", "", f"> {meta['notice']}", "", "## What was run", ""]
    md += [f"- {line}" for line in intro] + ["", "## Findings", ""] + [f"- {line}" for line in headline] + [""]
    for title, path in figures:
        md += [f"## {title}", "", f"![{title}]({path.name})", ""]
    md += ["## Metrics (all cells, pooled over replicates)", "", markdown_table(overall), "",
           "## Signed error by true size", "", markdown_table(by_bin), ""]
    (out / "report.md").write_text("\n".join(md))

    style = page_style(1200)
    body = [f"<h1>Accuracy and bias report: {html.escape(meta['spec_name'])}</h1>",
            f"<p class='notice'>{html.escape(meta['notice'])}</p>", "<h2>What was run</h2><ul>"]
    body += [f"<li>{html.escape(line)}</li>" for line in intro] + ["</ul><h2>Findings</h2><ul>"]
    body += [f"<li>{html.escape(line)}</li>" for line in headline] + ["</ul>"]
    for title, path in figures:
        body += [f"<h2>{html.escape(title)}</h2>", _img_html(path)]
    body += ["<h2>Metrics (all cells, pooled over replicates)</h2>", _html_table(overall),
             "<h2>Signed error by true size</h2>", _html_table(by_bin)]
    page = (f"<!doctype html><html><head><meta charset='utf-8'><title>das report {html.escape(meta['spec_name'])}</title>"
            f"<style>{style}</style></head><body>{''.join(body)}</body></html>")
    index = out / "index.html"
    index.write_text(page)
    claim.finish()
    return index


def _figures(meta: dict, out: Path, *, pooled: pd.DataFrame, bias: pd.DataFrame,
             errors: pd.DataFrame) -> list[tuple[str, Path]]:
    """The report's figures drawn into `out`: (title, PNG path) of each one there was data for."""
    main_rho = meta["rhos"][0]
    finest = meta["levels"][-1]
    figures: list[tuple[str, Path]] = []

    def add(title: str, name: str, made: bool) -> None:
        if made:
            figures.append((title, out / name))

    add("Signed error against true size", "signed_error_vs_truth.png",
        plot_signed_error(errors, meta, main_rho, out / "signed_error_vs_truth.png"))
    for i, query in enumerate(meta["queries"]):
        add(f"Bias by size bin: {query}", f"bias_by_size_{i}.png",
            plot_bias_by_bin(bias, meta, rho=main_rho, query=query, path=out / f"bias_by_size_{i}.png"))

    add("MAE by level", "mae_by_level.png", plot_mae_by_level(pooled, meta, main_rho, out / "mae_by_level.png"))
    add(f"Error distribution ({finest})", "error_distribution.png",
        plot_error_distribution(errors, main_rho, finest, out / "error_distribution.png"))
    add("Accuracy against rho", "accuracy_vs_rho.png", plot_accuracy_vs_rho(pooled, meta, out / "accuracy_vs_rho.png"))
    return figures


def _intro(meta: dict) -> list[str]:
    """What was run, in the report's words: input, budgets, estimators, what the errors are."""
    study = meta["study"]
    runs = int(meta.get("replicates", study.get("runs", 1)))
    return [
        f"Input: run spec `{meta['spec_name']}` ({meta['n_blocks']:,} blocks; levels {' > '.join(meta['levels'])}), "
        f"schema `{meta['schema']}`.",
        f"Budgets (zCDP rho, persons): {', '.join(meta['rhos'])}. Replicates per budget: {runs}. "
        f"Noise: {meta['randomness']}.",
        f"Estimators, all from the same noisy measurements: {', '.join(LABELS.get(e, e) for e in study['estimators'])}. "
        "TopDown is the released product (nonnegative, integral, consistent); the raw noisy measurement is "
        "unbiased but inconsistent and can be negative; the unconstrained weighted least-squares (WLS) estimate "
        "is consistent and unbiased but fractional and can be negative. Differences between TopDown and WLS are "
        "what nonnegativity and integrality add.",
        "Errors are estimate minus truth per geounit and query cell. Size bins are by the true count of the cell. "
        "MALPE and MAPE are over cells with a positive true count. t is the mean signed error divided by its "
        "standard error across replicates (|t| > 3: a bias the replicates resolve).",
    ]
