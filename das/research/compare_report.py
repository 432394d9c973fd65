"""The report of a `das compare` directory: the comparison table and plots side by side, as a
self-contained HTML page and a Markdown twin with PNG files (the style of `das report`)."""

from __future__ import annotations

import html
import json
from pathlib import Path

import numpy as np
import pandas as pd

from das.research.metrics import markdown_table
from das.research.replicate import CONFIDENTIAL
from das.research.report import _finish, _html_table, _img_html, _panels, page_style

LEVELS = ("block", "tract", "county")
PALETTE = ("#c0392b", "#2471a3", "#7f8c8d", "#27ae60", "#8e44ad", "#d35400", "#16a085", "#2c3e50", "#f1c40f",
           "#e84393", "#6c5ce7", "#00cec9")
METHODS = {"rap_rank": "RAP-Rank", "baseline_tract": "baseline: rest of tract", "baseline_county": "baseline: rest of county"}
# the report's files in a compare directory (das.outdir: what `das compare --overwrite` may delete)
REPORT_FILES = ("report/index.html", "report/report.md", "report/accuracy.png", "report/mae_by_query.png",
                "report/attack.png", "report/cost.png")


def _colors(names) -> dict:
    return {name: PALETTE[i % len(PALETTE)] for i, name in enumerate(names)}


def _grouped_bars(ax, groups: list[str], series: dict[str, list[float]], colors: dict) -> None:
    """Bars of each series side by side within each group (NaN: no bar)."""
    width = 0.8 / max(len(series), 1)
    for k, (name, values) in enumerate(series.items()):
        xs = np.arange(len(groups)) + (k - (len(series) - 1) / 2) * width
        ax.bar(xs, np.asarray(values, dtype=float), width, color=colors.get(name, "black"), label=name)
    ax.set_xticks(range(len(groups)), groups)


def plot_accuracy(table: pd.DataFrame, path: Path) -> bool:
    """MAE and mean signed error of total population by level, and block bias by true size."""
    rows = table.set_index("estimator")
    rows = rows[rows[[f"mae_{lv}" for lv in LEVELS]].notna().any(axis=1)]
    estimators = list(rows.index)
    if not estimators:
        return False
    colors = _colors(estimators)
    fig, axes = _panels(3, 4.6, 3.8)
    _grouped_bars(axes[0], list(LEVELS), {e: [rows.loc[e, f"mae_{lv}"] for lv in LEVELS] for e in estimators}, colors)
    axes[0].set(ylabel="MAE per geounit (log scale; below 0.1: none shown)", title="MAE, total population",
                yscale="log", ylim=(0.1, None))
    _grouped_bars(axes[1], list(LEVELS), {e: [rows.loc[e, f"bias_{lv}"] for lv in LEVELS] for e in estimators}, colors)
    axes[1].set(ylabel="mean signed error (symlog)", title="Bias, total population")
    bins = [c for c in rows.columns if c.startswith("bias_block_")]
    _grouped_bars(axes[2], [c.removeprefix("bias_block_").replace("_", "-") for c in bins],
                  {e: [rows.loc[e, c] for c in bins] for e in estimators}, colors)
    axes[2].set(xlabel="true block population", ylabel="mean signed error (symlog)", title="Block bias by true size")
    for ax in axes[1:]:
        ax.set_yscale("symlog", linthresh=1)
        ax.axhline(0, color="black", lw=0.8)
    return _finish(fig, axes, "Accuracy of total population (pooled over seeds)", path)


def plot_queries(pooled: pd.DataFrame, path: Path) -> bool:
    """MAE by level for every scored query, one panel per query, one line per estimator."""
    frame = pooled[(pooled["bin"] == "all") & pooled["level"].isin(LEVELS)]
    queries = list(dict.fromkeys(frame["query"]))
    if not queries:
        return False
    estimators = list(dict.fromkeys(frame["estimator"]))
    colors = _colors(estimators)
    fig, axes = _panels(len(queries), 4.0, 3.6)
    for ax, query in zip(axes, queries):
        for estimator in estimators:
            g = frame[(frame["query"] == query) & (frame["estimator"] == estimator)].set_index("level").reindex(LEVELS)
            ax.plot(LEVELS, g["mae"], marker="o", color=colors[estimator], label=estimator)
        ax.set_title(query, fontsize=9)
        ax.set_ylabel("MAE per cell")
        ax.set_yscale("log")
    return _finish(fig, axes, "MAE by level and query", path)


def plot_attack(rates: pd.DataFrame, order: list[str], path: Path) -> bool:
    """Match-Rate@u and @10 of RAP-Rank on each release (in `order`), beside the baselines."""
    if rates.empty:
        return False
    mechanisms = [m for m in order if m in set(rates["mechanism"])]
    methods = [m for m in METHODS if m in set(rates["method"])]
    colors = _colors([METHODS[m] for m in methods])
    fig, axes = _panels(2, 5.5, 3.8)
    for ax, column, title in ((axes[0], "rate_at_u", "Match-Rate@u (u = distinct true records)"),
                              (axes[1], "rate_at_10", "Match-Rate@10")):
        series = {}
        for method in methods:
            g = rates[rates["method"] == method].set_index("mechanism").reindex(mechanisms)
            series[METHODS[method]] = g[column].tolist()
        _grouped_bars(ax, mechanisms, series, colors)
        ax.set(ylim=(0, 1), title=title, ylabel="share of candidates that are true records")
        ax.tick_params(axis="x", rotation=30)
    return _finish(fig, axes, "Reconstruction attack on each release (same blocks)", path)


def plot_cost(table: pd.DataFrame, path: Path) -> bool:
    """Median wall time and peak memory (whole process tree) of one release per mechanism."""
    rows = table[table["release_seconds"].notna()]
    if rows.empty:
        return False
    colors = _colors(list(rows["estimator"]))
    fig, axes = _panels(2, 4.6, 3.6)
    for ax, column, label in ((axes[0], "release_seconds", "wall seconds per release (median)"),
                              (axes[1], "peak_tree_mb", "peak MB, whole process tree (median)")):
        for estimator, value in zip(rows["estimator"], rows[column]):
            ax.bar(estimator, value, color=colors[estimator], label=estimator)
        ax.set_ylabel(label)
        ax.tick_params(axis="x", rotation=30)
    return _finish(fig, axes, "Cost of one release", path)


TABLE_NOTE = ("MAE and bias: total population per geounit, pooled over seeds (bias = mean signed error; "
              "block bias also by true block size). `wls` and `noisy` are estimates from TopDown's own "
              "noisy measurements of the same seeds (not releases: fractional, and `noisy` can be negative), "
              "so they have no run time and are not attacked; `exact` is the attack on exact tables. "
              "release s: median wall time of one release (child process, its workers included); peak MB: "
              "median over seeds of a release's peak resident memory, summed over its whole process tree "
              "(runs.parquet has each release's; a sum of resident sizes counts pages shared after a fork once per "
              "process, so a single release can read high). Match-Rate@u: expected share "
              "of the top u RAP-Rank candidates (u = distinct true records of the block) that are true "
              "records, ties averaged, pooled over the attacked blocks and seeds; the baselines rank the rest "
              "of the block's tract or county by frequency and do not depend on the release.")

def render_table(table: pd.DataFrame) -> str:
    """comparison.md: the table in Markdown with its note."""
    shown = table.copy()
    for column in shown.columns:
        if column.endswith("_at_u"):
            shown[column] = shown[column].map(lambda v: "-" if pd.isna(v) else f"{v:.3f}")
    return f"> {CONFIDENTIAL}\n\n" + markdown_table(shown, floatfmt="{:.2f}") + f"\n\n{TABLE_NOTE}"


def build_compare_report(out_dir) -> Path:
    """report/index.html (self-contained) and report/report.md (+ PNGs) of a compare directory."""
    out_dir = Path(out_dir)
    meta = json.loads((out_dir / "compare.json").read_text())
    table = pd.read_parquet(out_dir / "comparison.parquet")
    pooled = pd.read_parquet(out_dir / "metrics.parquet")
    rates = pd.read_parquet(out_dir / "attack_rates.parquet")
    report = out_dir / "report"
    report.mkdir(exist_ok=True)
    figures = []
    for title, name, made in (
            ("Accuracy", "accuracy.png", lambda p: plot_accuracy(table, p)),
            ("MAE by level and query", "mae_by_query.png", lambda p: plot_queries(pooled, p)),
            ("Reconstruction attack", "attack.png", lambda p: plot_attack(rates, list(table["estimator"]), p)),
            ("Cost", "cost.png", lambda p: plot_cost(table, p))):
        if made(report / name):
            figures.append((title, report / name))
    settings = meta["settings"]
    intro = [f"Input: run spec `{meta['spec_name']}` ({meta['n_blocks']:,} blocks; levels {' > '.join(meta['levels'])}), "
             f"schema `{meta['schema']}`; persons budget rho {settings['rho'] or 'of the spec'}.",
             f"Mechanisms: {', '.join(meta['mechanisms'])}; seeds 0..{meta['seeds'] - 1} for each; noise {meta['randomness']}.",
             f"Attack: {len(meta['attack_blocks'])} blocks across the size range, the same for every release; "
             f"{settings['attack_runs']} RAP runs per block, K = {settings['attack_relaxed']}, "
             f"{settings['attack_steps']} steps, workload `{settings['attack_tables'] or meta['schema']}`."]
    intro += [f"FAILED (not in the table; rerun to retry): {f['mechanism']} seed {f['seed']}, exit {f['exit']}: "
              f"{f['stderr'].splitlines()[-1] if f['stderr'] else ''}" for f in meta.get("failures", [])]
    md = [f"# Mechanism comparison: {meta['spec_name']}", "", f"> {meta['notice']}", "", "## What was run", ""]
    md += [f"- {line}" for line in intro] + ["", "## Table", "", render_table(table), ""]
    for title, path in figures:
        md += [f"## {title}", "", f"![{title}]({path.name})", ""]
    (report / "report.md").write_text("\n".join(md))
    style = page_style(1300)
    body = [f"<h1>Mechanism comparison: {html.escape(meta['spec_name'])}</h1>",
            f"<p class='notice'>{html.escape(meta['notice'])}</p><h2>What was run</h2><ul>"]
    body += [f"<li>{html.escape(line)}</li>" for line in intro]
    body += ["</ul><h2>Table</h2>", _html_table(table), f"<p>{html.escape(TABLE_NOTE)}</p>"]
    for title, path in figures:
        body += [f"<h2>{html.escape(title)}</h2>", _img_html(path)]
    page = (f"<!doctype html><html><head><meta charset='utf-8'><title>das compare {html.escape(meta['spec_name'])}"
            f"</title><style>{style}</style></head><body>{''.join(body)}</body></html>")
    index = report / "index.html"
    index.write_text(page)
    return index
