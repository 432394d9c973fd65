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

from das.core.errors import StudyError
from das.frame import outdir
from das.research import offspine, series
from das.research.estimators import ESTIMATORS
from das.research.figures import (
    PAGE_PX,
    Z,
    _bars_note,
    _draws,
    _finish,
    _panels,
    bars,
    log_values,
    mae_panels,
    mark_zeros,
    moving_average,
    no_bands,
    page_style,
    replicates,
)
from das.research.metrics import SIZE_BINS, markdown_table
from das.research.offspine_report import (
    _offspine_frames,
    _offspine_intro,
    _offspine_section,
)
from das.research.replicate import BIAS_COLUMNS

STUDY_READ = ("study.json", "stats.parquet", "metrics.parquet", "bias.parquet", "errors.parquet", "areas.parquet",
              "composition.parquet", "blocks.parquet")
# plots of errors against the truth: confidential, like the study. Deterministic: a rerun replaces it. A budget
# after the first has its figures named <figure>-rho<i>.png (a sweep shows every budget).
REPORT = outdir.Owner("das report", "report", ("index.html", "report.md", "signed_error_vs_truth*.png",
                                               "bias_by_size_[0-9]*.png", "mae_by_level*.png", "error_distribution*.png",
                                               "accuracy_vs_rho.png", "areas_mae*.png", "areas_by_size*.png",
                                               "composition_bias*.png"), confidential=True, replaces=True)


def _levels_with_units(meta: dict, minimum: int = 10) -> list[str]:
    return [lv for lv in meta["levels"] if meta["units"].get(lv, 0) >= minimum]


def plot_signed_error(errors: pd.DataFrame, meta: dict, rho: str, path: Path) -> bool:
    """Per-geounit signed error of total population against the true count, with moving averages."""
    frame = errors[(errors["query"] == "total") & (errors["rho"] == rho)]
    levels = [lv for lv in _levels_with_units(meta) if lv in set(frame["level"])]
    if frame.empty or not levels:
        return False
    fig, axes = _panels(len(levels), 5.2, 4.0)
    for ax, level in zip(axes, levels):
        part = frame[frame["level"] == level]
        per_unit = part.assign(err=part["estimate"] - part["truth"]).groupby(
            ["estimator", "unit"], observed=True).agg(truth=("truth", "first"), err=("err", "mean")).reset_index()
        alpha = float(np.clip(300 / max(len(per_unit), 1), 0.03, 0.3))
        window = 1
        for estimator, g in per_unit.groupby("estimator", observed=True, sort=False):
            ax.scatter(g["truth"], g["err"], s=4, alpha=alpha, color=series.color(estimator), linewidths=0)
            window = max(5, min(len(g) // 40, 500))
            mx, my = moving_average(g["truth"].to_numpy(float), g["err"].to_numpy(float), window)
            ax.plot(mx, my, color=series.color(estimator), lw=2.2, label=series.label(estimator))
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
        ax.set_xlabel(f"true {level} population (persons)")
        ax.set_ylabel(f"signed error (persons; {_draws(meta)})")
        ax.set_title(f"{level}: n = {meta['units'][level]:,} geounits; lines: moving average of {window}", fontsize=9)
    return _finish(fig, axes, f"Signed error of total population against true size (rho = {rho}, {_draws(meta)})",
                   path, uncertainty=no_bands("points: each geounit's error; lines: moving averages"))


def _bin_counts(pooled: pd.DataFrame, *, rho: str, query: str, level: str) -> dict[str, int]:
    """Cells per true-size bin (the same for every estimator: bins are by the truth), per replicate."""
    part = pooled[(pooled["rho"] == rho) & (pooled["query"] == query) & (pooled["level"] == level)]
    return part.drop_duplicates("bin").set_index("bin")["n"].astype(int).to_dict() if "n" in part else {}


def plot_bias_by_bin(bias: pd.DataFrame, meta: dict, *, rho: str, query: str, path: Path,
                     pooled: pd.DataFrame | None = None) -> bool:
    """Mean signed error by true-size bin, per level: with +- 2 standard errors across replicates for a study; a single
    release's is one draw of noise, shown without error bars and not called a bias."""
    frame = bias[(bias["query"] == query) & (bias["rho"] == rho) & (bias["bin"] != "all")]
    levels = [lv for lv in _levels_with_units(meta) if lv in set(frame["level"])]
    if frame.empty or not levels:
        return False
    study = replicates(meta) > 1
    estimators = list(dict.fromkeys(frame["estimator"]))
    fig, axes = _panels(len(levels), 5.2, 3.8)
    for ax, level in zip(axes, levels):
        part = frame[frame["level"] == level]
        bins = [b for b in SIZE_BINS if b in set(part["bin"])]
        counts = _bin_counts(pooled, rho=rho, query=query, level=level) if pooled is not None else {}
        width = 0.8 / len(estimators)
        for k, estimator in enumerate(estimators):
            g = part[part["estimator"] == estimator].set_index("bin").reindex(bins)
            xs = np.arange(len(bins)) + (k - (len(estimators) - 1) / 2) * width
            bars(ax, xs, g["mean_error"], width, color=series.color(estimator), label=series.label(estimator),
                 **({"yerr": Z * g["se"].fillna(0), "capsize": 2} if study else {}))
        ax.axhline(0, color="black", lw=0.8)
        ax.set_xticks(range(len(bins)), [f"{b}\nn={counts[b]:,}" if b in counts else b for b in bins], fontsize=8)
        ax.set_xlabel("true count of the cell (n: cells per bin)")
        ax.set_ylabel("mean signed error (persons)" if study else "signed error, mean over the cells (persons)")
        ax.set_title(f"{level}: {query}", fontsize=10)
    title = (f"Bias by true size: {query} (rho = {rho})" if study
             else f"Signed error by true size: {query} (one release, rho = {rho}: one draw of noise, not a bias)")
    return _finish(fig, axes, title, path, uncertainty=_bars_note(meta))


def plot_mae_by_level(pooled: pd.DataFrame, meta: dict, rho: str, path: Path) -> bool:
    """The MAE of each query by level and estimator at one budget (`mae_panels`)."""
    levels = list(meta["levels"])
    ticks = [f"{lv.replace('_', ' ')}\n{meta['units'].get(lv, 0):,}" for lv in levels]
    return mae_panels(pooled[(pooled["bin"] == "all") & (pooled["rho"] == rho)], path, levels=levels, ticks=ticks,
                      title=f"Mean absolute error by level (rho = {rho}, {_draws(meta)})",
                      uncertainty=no_bands(f"an MAE over the cells, {_draws(meta)}"))


def plot_error_distribution(errors: pd.DataFrame, rho: str, level: str, path: Path, *, meta: dict | None = None) -> bool:
    frame = errors[(errors["query"] == "total") & (errors["rho"] == rho) & (errors["level"] == level)]
    if frame.empty:
        return False
    err = frame["estimate"] - frame["truth"]
    lim = max(3.0, float(np.quantile(np.abs(err), 0.995)))
    bins = np.linspace(-lim, lim, 61)
    fig, axes = _panels(1, 7.0, 3.8)
    ax = axes[0]
    for estimator, e in err.groupby(frame["estimator"], observed=True, sort=False):
        ax.hist(e.clip(-lim, lim), bins=bins, histtype="step", lw=1.8, density=True,
                color=series.color(estimator), label=series.label(estimator))
    n = frame.drop_duplicates(["unit", "replicate"] if "replicate" in frame else ["unit"]).shape[0]
    ax.set_xlabel(f"signed error of {level} total population (persons; beyond +-{lim:.0f} counted at the edge)")
    ax.set_ylabel(f"density (n = {n:,} {level} errors)")
    draws = _draws(meta) if meta else "all replicates"
    return _finish(fig, axes, f"Error distribution, {level}s ({draws}, rho = {rho})", path,
                   uncertainty=no_bands("the distribution is itself the spread"))


def plot_accuracy_vs_rho(pooled: pd.DataFrame, meta: dict, path: Path) -> bool:
    """The MAE of total population against the budget, every budget of the sweep, per level."""
    frame = pooled[(pooled["bin"] == "all") & (pooled["query"] == "total")].copy()
    if frame["rho"].nunique() < 2:
        return False
    frame["rho_value"] = frame["rho"].map(lambda r: float(Fraction(r)))
    levels = [lv for lv in _levels_with_units(meta, 2) if lv in set(frame["level"])]
    fig, axes = _panels(len(levels), 4.3, 3.6)
    for ax, level in zip(axes, levels):
        zeros = []
        for estimator, g in frame[frame["level"] == level].groupby("estimator", observed=True, sort=False):
            g = g.sort_values("rho_value")
            zero = log_values(ax, g["rho_value"].to_numpy(), g["mae"], marker="o", color=series.color(estimator),
                              label=series.label(estimator))
            zeros.append((g["rho_value"].to_numpy(), zero, series.color(estimator)))
        mark_zeros(ax, zeros)
        ax.set_xscale("log")
        ax.set_xticks(sorted(set(frame["rho_value"])), sorted(set(frame["rho"]), key=lambda r: Fraction(r)), fontsize=8)
        ax.set_xlabel("rho (zCDP, log scale)")
        ax.set_ylabel("MAE, total population (persons)")
        ax.set_title(f"{level} (n = {meta['units'][level]:,})")
    return _finish(fig, axes, f"Accuracy against the privacy budget ({_draws(meta)} per budget)", path,
                   uncertainty=no_bands(f"an MAE over the cells, {_draws(meta)}"))


def findings(bias: pd.DataFrame, pooled: pd.DataFrame, meta: dict, rho: str) -> list[str]:
    """Plain-language headline figures computed from the tables (a single release's errors are not called a bias)."""
    lines = []
    finest = meta["levels"][-1]
    study = replicates(meta) > 1
    b = bias[(bias["rho"] == rho) & (bias["query"] == "total") & (bias["level"] == finest)]
    for estimator in dict.fromkeys(b["estimator"]):
        parts = []
        for _, row in b[(b["estimator"] == estimator) & (b["bin"] != "all")].iterrows():
            t = "" if pd.isna(row["t"]) or not study else f", t = {row['t']:.1f}"
            parts.append(f"{row['bin']}: {row['mean_error']:+.3f}{t}")
        if parts:
            what = "mean signed error across replicates" if study else "signed error of this one release (not a bias)"
            lines.append(f"{series.label(estimator)}: {what}, {finest} total population by true size, "
                         + "; ".join(parts) + ".")
    p = pooled[(pooled["rho"] == rho) & (pooled["query"] == "total") & (pooled["bin"] == "all")]
    for estimator in dict.fromkeys(p["estimator"]):
        g = p[p["estimator"] == estimator].set_index("level")
        shown = [f"{lv} {g.loc[lv, 'mae']:.2f}" for lv in meta["levels"] if lv in g.index and meta["units"][lv] > 1]
        malpe = g.loc[finest, "malpe"] if finest in g.index else float("nan")
        lines.append(f"{series.label(estimator)}: MAE of total population by level: {', '.join(shown)}; "
                     f"{finest} MALPE {malpe:+.1f}%.")
    return lines


def _img_html(path: Path) -> str:
    """A figure embedded in the page at its own size (drawn no wider than the page: its text stays legible)."""
    data = base64.b64encode(path.read_bytes()).decode()
    return f'<img alt="{html.escape(path.stem)}" src="data:image/png;base64,{data}" style="max-width:100%">'


def _html_table(frame: pd.DataFrame) -> str:
    """A table as HTML, inside a box that scrolls sideways if a narrow window cannot hold it (the page never does)."""
    table = frame.to_html(index=False, float_format=lambda v: f"{v:.3f}", na_rep="-", border=0, classes="t")
    return f'<div class="wide">{table}</div>'


def mae_table(pooled: pd.DataFrame, meta: dict, rho: str) -> pd.DataFrame:
    """MAE of total population per geounit: a row per level (with its geounits), a column per estimator."""
    frame = pooled[(pooled["rho"] == rho) & (pooled["query"] == "total") & (pooled["bin"] == "all")]
    table = frame.pivot_table(index="level", columns="estimator", values="mae", aggfunc="first", observed=True)
    table = table.reindex(index=[lv for lv in meta["levels"] if lv in table.index],
                          columns=list(dict.fromkeys(frame["estimator"])))
    table.columns = [series.label(e) for e in table.columns]
    table.insert(0, "geounits", [meta["units"].get(lv, 0) for lv in table.index])
    return table.reset_index()


def size_table(bias: pd.DataFrame, meta: dict, rho: str) -> pd.DataFrame:
    """The finest level's signed error of total population by true size: a row per bin, a column per estimator (and
    its t across replicates, for a study)."""
    finest = meta["levels"][-1]
    frame = bias[(bias["rho"] == rho) & (bias["query"] == "total") & (bias["level"] == finest) & (bias["bin"] != "all")]
    values = ["mean_error", "t"] if replicates(meta) > 1 else ["mean_error"]
    table = frame.pivot_table(index="bin", columns="estimator", values=values, aggfunc="first", observed=True)
    table = table.reindex([b for b in SIZE_BINS if b in table.index])
    order = list(dict.fromkeys(frame["estimator"]))
    table = table.reindex(columns=[(v, e) for e in order for v in values])
    table.columns = [series.label(e) + ("" if v == "mean_error" else ": t") for v, e in table.columns]
    return table.reset_index().rename(columns={"bin": f"true {finest} size"})


def build_report(study_dir, out=None, *, areas=None) -> Path:
    """Write report/index.html (self-contained) and report/report.md (+ PNGs); returns the HTML path.
    `out` (default study_dir/report, part of the study) holds only a report: das.frame.outdir's rules. `areas` (type ->
    area file): scored from the study's block errors in place of the areas the study was scored on."""
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
    off = _offspine_frames(study_dir, meta, errors=errors, areas=areas)
    claim.start()
    sections = [_section(meta, out, rho=rho, index=i, pooled=pooled, bias=bias, errors=errors, off=off)
                for i, rho in enumerate(meta["rhos"])]
    across = [("Accuracy against rho", out / "accuracy_vs_rho.png")] \
        if plot_accuracy_vs_rho(pooled, meta, out / "accuracy_vs_rho.png") else []
    _write_markdown(out / "report.md", meta, sections, across, pooled=pooled, bias=bias, off=off)
    index = out / "index.html"
    index.write_text(_page(meta, sections, across))
    claim.finish()
    return index


def _section(meta: dict, out: Path, *, rho: str, index: int, pooled, bias, errors, off: dict) -> dict:
    """One budget's part of the report: its findings, figures and tables (every budget of a sweep has one)."""
    suffix = "" if index == 0 else f"-rho{index}"
    finest = meta["levels"][-1]
    word = "Bias" if replicates(meta) > 1 else "Signed error"
    figures: list[tuple[str, Path]] = []

    def add(title: str, name: str, made: bool) -> None:
        if made:
            figures.append((title, out / name))

    add("Signed error against true size", f"signed_error_vs_truth{suffix}.png",
        plot_signed_error(errors, meta, rho, out / f"signed_error_vs_truth{suffix}.png"))
    for i, query in enumerate(meta["queries"]):
        name = f"bias_by_size_{i}{suffix}.png"
        add(f"{word} by true size: {query}", name,
            plot_bias_by_bin(bias, meta, rho=rho, query=query, path=out / name, pooled=pooled))
    add("MAE by level", f"mae_by_level{suffix}.png", plot_mae_by_level(pooled, meta, rho, out / f"mae_by_level{suffix}.png"))
    add(f"Error distribution ({finest})", f"error_distribution{suffix}.png",
        plot_error_distribution(errors, rho, finest, out / f"error_distribution{suffix}.png", meta=meta))
    off_figures, off_tables, off_findings = _offspine_section(meta, out, rho=rho, suffix=suffix, off=off)
    return {"rho": rho, "findings": findings(bias, pooled, meta, rho) + off_findings, "figures": figures + off_figures,
            "tables": [("MAE of total population per geounit (persons), by level", mae_table(pooled, meta, rho)),
                       (f"{word} of {finest} total population by true size (persons)", size_table(bias, meta, rho)),
                       *off_tables]}


def _page(meta: dict, sections: list[dict], across: list) -> str:
    """The self-contained HTML page: what was run, then each budget's findings, figures and tables."""
    title = "Accuracy and bias report" if replicates(meta) > 1 else "Accuracy report (one release)"
    body = [f"<h1>{title}: {html.escape(meta['spec_name'] + released_as(meta))}</h1>",
            f"<p class='notice'>{html.escape(meta['notice'])}</p>", "<h2>What was run</h2><ul>"]
    body += [f"<li>{html.escape(line)}</li>" for line in _intro(meta)] + ["</ul>"]
    for section in sections:
        head = f"rho = {section['rho']}" if len(sections) > 1 else "Findings"
        body += [f"<h2>{html.escape(head)}</h2><ul>"] + [f"<li>{html.escape(x)}</li>" for x in section["findings"]]
        body += ["</ul>"]
        for caption, table in section["tables"]:
            body += [f"<h3>{html.escape(caption)}</h3>", _html_table(table)]
        for name, path in section["figures"]:
            body += [f"<h3>{html.escape(name)}</h3>", _img_html(path)]
    for name, path in across:
        body += [f"<h2>{html.escape(name)}</h2>", _img_html(path)]
    body.append("<p class='note'>Every metric of every query, level and size bin: report.md beside this page, and "
                "metrics.parquet and bias.parquet in the study directory.</p>")
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>das report {html.escape(meta['spec_name'])}</title>"
            f"<style>{page_style(PAGE_PX)}</style></head><body>{''.join(body)}</body></html>")


def _write_markdown(path: Path, meta: dict, sections: list[dict], across: list, *, pooled, bias, off: dict) -> None:
    """report.md: the page's content, and the full tables (every query, level and bin)."""
    md = [f"# Accuracy report: {meta['spec_name']}{released_as(meta)}", "", f"> {meta['notice']}", "", "## What was run",
          ""]
    md += [f"- {line}" for line in _intro(meta)] + [""]
    for section in sections:
        md += [f"## rho = {section['rho']}", ""] + [f"- {x}" for x in section["findings"]] + [""]
        for caption, table in section["tables"]:
            md += [f"### {caption}", "", markdown_table(table), ""]
        for title, figure in section["figures"]:
            md += [f"### {title}", "", f"![{title}]({figure.name})", ""]
    for title, figure in across:
        md += [f"## {title}", "", f"![{title}]({figure.name})", ""]
    overall = pooled[pooled["bin"] == "all"].drop(columns=["bin"])
    by_bin = bias[(bias["bin"] != "all")].copy()
    by_bin["bin"] = pd.Categorical(by_bin["bin"], SIZE_BINS, ordered=True)
    by_bin = by_bin.sort_values(["rho", "query", "level", "estimator", "bin"])[BIAS_COLUMNS]
    md += ["## Every metric (all cells)", "", markdown_table(overall), "",
           "## Signed error by true size, every query and level", "", markdown_table(by_bin), ""]
    md += offspine.render(off["areas"], off["composition"])
    path.write_text("\n".join(md))


def released_as(meta: dict) -> str:
    """How the report names what was released: a synthetic release by its mechanism (`das synth --mechanism aim`),
    else nothing (a TopDown run, or a study of many)."""
    mechanism = meta.get("mechanism")
    return f" (das synth --mechanism {mechanism['name']})" if mechanism else ""


def _estimators_line(meta: dict) -> str:
    """The estimators scored, each described; a synthetic release's own alone, under its mechanism's name."""
    mechanism = meta.get("mechanism")
    if mechanism:
        return (f"Estimator: {series.label(mechanism['name'])}, the release itself (das synth --mechanism "
                f"{mechanism['name']}: {mechanism['summary']}); its MDF, as published, is the only estimate scored (a "
                "synthetic release publishes no measurements to estimate from).")
    estimate = meta.get("estimate")
    if estimate:
        return (f"Estimator: {series.label(estimate['estimator'])}, an estimate directory (das postprocess --estimator "
                f"{estimate['estimator']}: {estimate['about']}). {estimate['notice']}.")
    estimators = list(meta["study"]["estimators"])
    about = "; ".join(ESTIMATORS[e].about for e in estimators if e in ESTIMATORS)  # said only of those computed
    head = "Estimators, all from the same noisy measurements" if len(estimators) > 1 else "Estimator"
    line = f"{head}: {', '.join(series.label(e) for e in estimators)}. {about[:1].upper()}{about[1:]}."
    if {"topdown", "wls"} <= set(estimators):
        line += " Differences between TopDown and WLS are what nonnegativity and integrality add."
    return line


def _intro(meta: dict) -> list[str]:
    """What was run, in the report's words: input, budgets, estimators, what the errors are."""
    runs = replicates(meta)
    draws = (f"Replicates per budget: {runs} (independent draws of noise: a mean over them estimates a bias)." if runs > 1
             else "One release: one draw of noise. Its errors are what this release got, not a bias: a bias shows only "
                  "across many draws (das replicate).")
    lines = [
        f"Input: run spec `{meta['spec_name']}` ({meta['n_blocks']:,} blocks; levels {' > '.join(meta['levels'])}), "
        f"schema `{meta['schema']}`.",
        f"Budgets (zCDP rho, persons): {', '.join(meta['rhos'])}" + (" (each has its own section)" if len(meta["rhos"]) > 1
                                                                     else "") + f". {draws} Noise: {meta['randomness']}.",
        _estimators_line(meta),
        "Errors are estimate minus truth per geounit and query cell, in persons. Size bins are by the true count of the "
        "cell. MALPE and MAPE are over cells with a positive true count.",
    ]
    if against := meta.get("against"):
        lines.append(f"Scored against {against['path']} ({against['what']}), NOT the truth: wherever this report says "
                     "true or truth, read that release's or estimate's count; each error is a difference from it, and "
                     "its size bins are its counts (rounded, 0 where negative).")
    lines += _offspine_intro(meta)
    if runs > 1:
        lines.append("t is the mean signed error divided by its standard error across replicates (|t| > 3: a bias the "
                     "replicates resolve).")
    return lines
