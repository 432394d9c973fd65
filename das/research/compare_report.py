"""The report of a `das compare` directory: the comparison table and plots side by side, as a
self-contained HTML page and a Markdown twin with PNG files (the style of `das report`)."""

from __future__ import annotations

import html
import json
from pathlib import Path

import numpy as np
import pandas as pd

from das.model.levels import BLOCK, COUNTY, TRACT
from das.research import series
from das.research.figures import PAGE_PX, ZERO, _finish, _panels, bars, no_bands, page_style, wilson, wilson_note
from das.research.metrics import markdown_table
from das.research.replicate import CONFIDENTIAL
from das.research.report import _html_table, _img_html, mae_panels

LEVELS = (BLOCK, TRACT, COUNTY)
METHODS = ("rap_rank", "baseline_tract", "baseline_county")
# the report's files in a compare directory (das.frame.outdir: what `das compare --overwrite` may delete)
REPORT_FILES = ("report/index.html", "report/report.md", "report/accuracy.png", "report/mae_by_query.png",
                "report/attack.png", "report/cost.png")


def _grouped_bars(ax, groups: list[str], values: dict[str, list[float]], *, log: bool = False) -> None:
    """Bars of each series (its das.research.series colour) side by side within each group; NaN: no bar; an exact 0
    a line of its colour (report.bars), or on a log axis a "0" where its bar would stand (never float noise)."""
    width = 0.8 / max(len(values), 1)
    for k, (name, row) in enumerate(values.items()):
        xs = np.arange(len(groups)) + (k - (len(values) - 1) / 2) * width
        row = np.asarray(row, dtype=float)
        zero = np.abs(row) < ZERO
        bars(ax, xs, np.where(zero & log, np.nan, row), width, color=series.color(name), label=series.label(name))
        if log:
            for x in xs[zero]:
                ax.annotate("0", (x, 0), xycoords=("data", "axes fraction"), ha="center", va="bottom", fontsize=7,
                            color=series.color(name))
    ax.set_xticks(range(len(groups)), groups)


def _one_seed(table: pd.DataFrame) -> bool:
    return bool(len(table)) and int(table["seeds"].max()) <= 1


def plot_accuracy(table: pd.DataFrame, path: Path) -> bool:
    """MAE and mean signed error of total population by level, and block signed error by true size."""
    rows = table.set_index("estimator")
    rows = rows[rows[[f"mae_{lv}" for lv in LEVELS]].notna().any(axis=1)]
    estimators = list(rows.index)
    if not estimators:
        return False
    word = "signed error, one seed" if _one_seed(table) else "mean signed error"
    fig, axes = _panels(3, 3.5, 3.4)
    mae = {e: [rows.loc[e, f"mae_{lv}"] for lv in LEVELS] for e in estimators}
    _grouped_bars(axes[0], list(LEVELS), mae, log=True)
    largest = np.nanmax(np.asarray(list(mae.values()), dtype=float))
    axes[0].set(ylabel="MAE per geounit (persons)", title="MAE (log scale)", yscale="log")
    if np.isfinite(largest) and largest > 0:
        axes[0].set_ylim(top=largest * 1.6)
    _grouped_bars(axes[1], list(LEVELS), {e: [rows.loc[e, f"bias_{lv}"] for lv in LEVELS] for e in estimators})
    axes[1].set(ylabel=f"{word} (persons)", title="Signed error (symlog scale)")
    bins = [c for c in rows.columns if c.startswith("bias_block_")]
    _grouped_bars(axes[2], [c.removeprefix("bias_block_").replace("_", "-") for c in bins],
                  {e: [rows.loc[e, c] for c in bins] for e in estimators})
    axes[2].set(xlabel="true block population (persons)", ylabel=f"{word} (persons)",
                title="Blocks by true size (symlog)")
    for ax in axes[1:]:
        ax.set_yscale("symlog", linthresh=1)
        ax.axhline(0, color="black", lw=0.8)
    seeds = int(table["seeds"].max()) if len(table) else 0
    return _finish(fig, axes, f"Total population: accuracy per geounit ({seeds} seed(s) per mechanism)", path,
                   uncertainty=no_bands(f"MAE and signed error pooled over the geounits and {seeds} seed(s)"))


def plot_queries(pooled: pd.DataFrame, path: Path, units: dict | None = None) -> bool:
    """MAE by level for every scored query, one panel per query, one line per mechanism (report.mae_panels)."""
    ticks = [f"{lv}\n{units[lv]:,}" if units and lv in units else lv for lv in LEVELS]
    return mae_panels(pooled[(pooled["bin"] == "all") & pooled["level"].isin(LEVELS)], path, levels=list(LEVELS),
                      ticks=ticks, title="MAE by level and query (pooled over seeds; n under each level: geounits)",
                      uncertainty=no_bands("an MAE over the cells and seeds"))


def _asked(attack: pd.DataFrame | None, mechanisms: list[str]) -> pd.DataFrame:
    """RAP-Rank's expected hits and candidates asked at u and at 10 per mechanism, summed over the attacked blocks and
    seeds (compare.attack_rates' pooling); NaN without the per-block attack table."""
    columns = ["hits_at_u", "u", "hits_at_10", "asked_at_10"]
    if attack is None or attack.empty:
        return pd.DataFrame(np.nan, index=mechanisms, columns=columns)
    rap = attack[attack["method"] == "rap_rank"].assign(asked_at_10=10)
    return rap.groupby("mechanism")[columns].sum().reindex(mechanisms)


def plot_attack(rates: pd.DataFrame, order: list[str], path: Path, attack: pd.DataFrame | None = None) -> bool:
    """RAP-Rank's Match-Rate@u and @10 on each release (a bar in the mechanism's colour: hits / candidates asked,
    pooled over the attacked blocks and seeds, as the table; a Wilson interval at z = 2 over the candidates asked)
    and on exact tables; the baselines, which use no release, as lines across."""
    if rates.empty:
        return False
    mechanisms = [m for m in order if m in set(rates["mechanism"])]
    fig, axes = _panels(2, 5.2, 3.6)
    rap = rates[rates["method"] == "rap_rank"].set_index("mechanism").reindex(mechanisms)
    asked = _asked(attack, mechanisms)
    for ax, column, hits, tried, title in (
            (axes[0], "rate_at_u", asked["hits_at_u"], asked["u"], "Match-Rate@u (u = distinct true records)"),
            (axes[1], "rate_at_10", asked["hits_at_10"], asked["asked_at_10"], "Match-Rate@10")):
        low, high = wilson(hits.to_numpy(float), tried.to_numpy(float))
        values = rap[column].to_numpy(float)
        for i, mechanism in enumerate(mechanisms):
            bars(ax, [i], [values[i]], 0.7, color=series.color(mechanism), label=series.label(mechanism),
                 **({"yerr": [[values[i] - low[i]], [high[i] - values[i]]], "capsize": 3} if np.isfinite(low[i]) else {}))
        for method in METHODS[1:]:
            value = rates[rates["method"] == method][column].mean()
            if np.isfinite(value):
                ax.axhline(value, color=series.color(method), ls=series.line(method), lw=1.6, label=series.label(method))
        ax.set_xticks(range(len(mechanisms)), [f"{m}\nn={int(rap.loc[m, 'blocks']) * int(rap.loc[m, 'seeds'])}"
                                               for m in mechanisms])
        ax.set(ylim=(0, 1), title=title, ylabel=f"{title.split(' ')[0]} (pooled: hits / candidates asked)")
    return _finish(fig, axes, "RAP-Rank on each release and on exact tables, the same blocks (n: blocks x seeds)", path,
                   uncertainty=wilson_note("the candidates asked") if attack is not None and len(attack)
                   else no_bands("no per-block attack table to count the candidates asked"))


def plot_cost(table: pd.DataFrame, path: Path) -> bool:
    """Median wall time and peak memory (whole process tree) of one release per mechanism."""
    rows = table[table["release_seconds"].notna()]
    if rows.empty:
        return False
    fig, axes = _panels(2, 4.4, 3.4)
    for ax, column, label in ((axes[0], "release_seconds", "wall seconds per release (median)"),
                              (axes[1], "peak_tree_mb", "peak MB, whole process tree (median)")):
        for estimator, value in zip(rows["estimator"], rows[column]):
            ax.bar(estimator, value, color=series.color(estimator), label=series.label(estimator))
        ax.set_ylabel(label)
        ax.tick_params(axis="x", rotation=30)
    return _finish(fig, axes, f"Cost of one release (median over {int(rows['seeds'].max())} seed(s))", path,
                   uncertainty=no_bands("a median over the seeds"))


def table_note(estimators) -> str:
    """The table's note, describing only the estimators the comparison holds (`estimators`: its `estimator` column):
    no word of TopDown's `wls` and `noisy` estimates, or of exact tables, where there are none."""
    held = set(estimators)
    parts = ["MAE and bias: total population per geounit, pooled over seeds (bias = mean signed error; block bias also "
             "by true block size)."]
    derived = [name for name in ("wls", "noisy") if name in held]
    if derived:
        parts.append(f"{' and '.join(f'`{n}`' for n in derived)}: estimates from TopDown's own noisy measurements of the "
                     "same seeds (not releases: fractional" + (", and `noisy` can be negative" if "noisy" in held else "")
                     + "), so no run time and no attack.")
    if "exact" in held:
        parts.append("`exact` is the attack on exact tables.")
    parts.append("release s: median wall time of one release (child process, its workers included); peak MB: median "
                 "over seeds of a release's peak resident memory, summed over its whole process tree (runs.parquet has "
                 "each release's; a sum of resident sizes counts pages shared after a fork once per process, so a "
                 "single release can read high). Match-Rate@u: expected share of the top u RAP-Rank candidates (u = "
                 "distinct true records of the block) that are true records, ties averaged, pooled over the attacked "
                 "blocks and seeds; the baselines rank the rest of the block's tract or county by frequency and do not "
                 "depend on the release.")
    return " ".join(parts)


def render_table(table: pd.DataFrame) -> str:
    """comparison.md: the table in Markdown with its note."""
    shown = table.copy()
    for column in shown.columns:
        if column.endswith("_at_u"):
            shown[column] = shown[column].map(lambda v: "-" if pd.isna(v) else f"{v:.3f}")
    return f"> {CONFIDENTIAL}\n\n" + markdown_table(shown, floatfmt="{:.2f}") + f"\n\n{table_note(table['estimator'])}"


TABLES = (  # the page's tables: each fits the page; comparison.md and comparison.parquet hold every column
    ("Accuracy of total population per geounit (persons)", {"mae_block": "MAE block", "mae_tract": "MAE tract",
     "mae_county": "MAE county", "bias_block": "signed error block", "bias_tract": "signed error tract",
     "bias_county": "signed error county"}),
    ("Block signed error by true block size (persons)", {"bias_block_0": "0", "bias_block_1_9": "1-9",
     "bias_block_10_99": "10-99", "bias_block_100_999": "100-999"}),
    ("Cost of one release (median over seeds)", {"seeds": "seeds", "release_seconds": "wall s",
     "release_cpu_seconds": "CPU s", "peak_tree_mb": "peak MB"}),
    ("Reconstruction attack: Match-Rate@u", {"attack_seeds": "seeds attacked", "rap_rank_at_u": "RAP-Rank",
     "baseline_tract_at_u": "baseline: rest of tract", "baseline_county_at_u": "baseline: rest of county"}),
)


def page_tables(table: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """The comparison as a few narrow tables (a row per estimator, readable names), each fitting the page."""
    out = []
    for caption, columns in TABLES:
        present = {c: name for c, name in columns.items() if c in table.columns}
        part = table[["estimator", *present]].rename(columns=present)
        part = part[part[list(present.values())].notna().any(axis=1)] if present else part.iloc[0:0]
        if len(part):
            out.append((caption, part.assign(estimator=part["estimator"].map(series.label))))
    return out


def _intro(meta: dict) -> list[str]:
    settings = meta["settings"]
    one = " One seed: each mechanism's errors are one draw of noise, not a bias." if meta["seeds"] == 1 else ""
    intro = [f"Input: run spec `{meta['spec_name']}` ({meta['n_blocks']:,} blocks; levels {' > '.join(meta['levels'])}), "
             f"schema `{meta['schema']}`; persons budget rho {settings['rho'] or 'of the spec'}.",
             f"Mechanisms: {', '.join(meta['mechanisms'])}; seeds 0..{meta['seeds'] - 1} for each; noise "
             f"{meta['randomness']}.{one}",
             f"Attack: {len(meta['attack_blocks'])} blocks across the size range, the same for every release; "
             f"{settings['attack_runs']} RAP runs per block, K = {settings['attack_relaxed']}, "
             f"{settings['attack_steps']} steps, workload `{settings['attack_tables'] or meta['schema']}`."]
    return intro + [f"FAILED (not in the table; rerun to retry): {f['mechanism']} seed {f['seed']}, exit {f['exit']}: "
                    f"{f['stderr'].splitlines()[-1] if f['stderr'] else ''}" for f in meta.get("failures", [])]


def build_compare_report(out_dir) -> Path:
    """report/index.html (self-contained) and report/report.md (+ PNGs) of a compare directory."""
    out_dir = Path(out_dir)
    meta = json.loads((out_dir / "compare.json").read_text())
    table = pd.read_parquet(out_dir / "comparison.parquet")
    pooled = pd.read_parquet(out_dir / "metrics.parquet")
    rates = pd.read_parquet(out_dir / "attack_rates.parquet")
    attack = pd.read_parquet(out_dir / "attack.parquet") if (out_dir / "attack.parquet").exists() else None
    report = out_dir / "report"
    report.mkdir(exist_ok=True)
    figures = []
    for title, name, made in (
            ("Accuracy", "accuracy.png", lambda p: plot_accuracy(table, p)),
            ("MAE by level and query", "mae_by_query.png", lambda p: plot_queries(pooled, p, meta.get("units"))),
            ("Reconstruction attack", "attack.png", lambda p: plot_attack(rates, list(table["estimator"]), p, attack)),
            ("Cost", "cost.png", lambda p: plot_cost(table, p))):
        if made(report / name):
            figures.append((title, report / name))
    intro = _intro(meta)
    md = [f"# Mechanism comparison: {meta['spec_name']}", "", f"> {meta['notice']}", "", "## What was run", ""]
    md += [f"- {line}" for line in intro] + ["", "## Table", "", render_table(table), ""]
    for title, path in figures:
        md += [f"## {title}", "", f"![{title}]({path.name})", ""]
    (report / "report.md").write_text("\n".join(md))
    body = [f"<h1>Mechanism comparison: {html.escape(meta['spec_name'])}</h1>",
            f"<p class='notice'>{html.escape(meta['notice'])}</p><h2>What was run</h2><ul>"]
    body += [f"<li>{html.escape(line)}</li>" for line in intro] + ["</ul><h2>Tables</h2>"]
    for caption, part in page_tables(table):
        body += [f"<h3>{html.escape(caption)}</h3>", _html_table(part)]
    note = table_note(table["estimator"])
    body += [f"<p class='note'>{html.escape(note)} Every column: comparison.md and comparison.parquet.</p>"]
    for title, path in figures:
        body += [f"<h2>{html.escape(title)}</h2>", _img_html(path)]
    page = (f"<!doctype html><html><head><meta charset='utf-8'><title>das compare {html.escape(meta['spec_name'])}"
            f"</title><style>{page_style(PAGE_PX)}</style></head><body>{''.join(body)}</body></html>")
    index = report / "index.html"
    index.write_text(page)
    return index
