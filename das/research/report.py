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

from das.core.errors import StudyError, option
from das.frame import outdir
from das.research import offspine, series
from das.research.areas import AREA
from das.research.composition import SHARE_BINS
from das.research.metrics import SIZE_BINS, markdown_table
from das.research.replicate import BIAS_COLUMNS

STUDY_READ = ("study.json", "stats.parquet", "metrics.parquet", "bias.parquet", "errors.parquet", "areas.parquet",
              "composition.parquet", "blocks.parquet")
# plots of errors against the truth: confidential, like the study. Deterministic: a rerun replaces it. A budget
# after the first has its figures named <figure>-rho<i>.png (a sweep shows every budget).
REPORT = outdir.Owner("das report", "report", ("index.html", "report.md", "signed_error_vs_truth*.png",
                                               "bias_by_size_[0-9]*.png", "mae_by_level*.png", "error_distribution*.png",
                                               "accuracy_vs_rho.png", "areas_mae*.png", "areas_by_size*.png",
                                               "composition_bias*.png"), confidential=True, replaces=True)
PAGE_PX = 1200  # the report's width in CSS pixels; every figure is drawn at most this wide, so its text stays legible
DPI = 110
FIGURE_INCHES = (PAGE_PX - 40) / DPI  # the widest figure, in inches (a margin for the page's padding)
ZERO = 1e-9  # an error below this is an exact 0 (an invariant) up to float noise: never a point on a log axis


def page_style(width: int) -> str:
    """The CSS of a self-contained HTML report (research and compare): `width` px at most; tables scroll within it."""
    return (f"body{{font-family:sans-serif;max-width:{width}px;margin:2em auto;padding:0 1em;color:#222}}"
            "table.t{border-collapse:collapse;font-size:12px;margin-bottom:.5em}table.t td,table.t th{padding:2px 6px;"
            "border-bottom:1px solid #ddd;text-align:right}table.t td:first-child,table.t th:first-child{text-align:left}"
            "div.wide{overflow-x:auto;max-width:100%}"
            ".notice{background:#fdecea;padding:.6em;border-left:4px solid #c0392b}"
            ".note{color:#555;font-size:13px}")


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _panels(n: int, width: float, height: float):
    """A figure of n panels of `width` x `height` inches, in rows as wide as the page allows (axes as a flat list)."""
    cols = max(1, min(n, int(FIGURE_INCHES // width)))
    rows = -(-n // cols)
    scale = min(1.0, FIGURE_INCHES / (width * cols))
    fig, axes = _plt().subplots(rows, cols, figsize=(width * cols * scale, height * rows * scale), squeeze=False,
                                layout="constrained")
    flat = list(axes.ravel())
    for extra in flat[n:]:
        extra.set_visible(False)
    return fig, flat[:n]


def _finish(fig, axes, title: str, path: Path, *, uncertainty: str) -> bool:
    """One legend for the figure (every series once, below the panels, covering no data), the title and under it the
    figure's uncertainty convention (`uncertainty`, from `two_se` or `no_bands`), text fitted to the figure
    (`fit_text`), saved as a PNG no wider than the page, the figure freed."""
    handles: dict = {}
    for ax in axes:
        for handle, name in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(name, handle)
    fig.suptitle(f"{title}\n{uncertainty}", fontsize=10)
    if handles:
        fig.legend(handles.values(), handles.keys(), loc="outside lower center", ncol=min(len(handles), 3), fontsize=8,
                   frameon=False)
    for ax in axes:
        if ax.get_yscale() in ("log", "symlog"):  # 2, 5, 10 rather than 2 x 10^0
            ax.yaxis.set_major_formatter(_plain)
            ax.yaxis.set_minor_formatter(_plain_minor)
    fit_text(fig)
    fig.set_layout_engine("none")  # laid out by fit_text's last pass: saving draws it as it is, not laid out again
    fig.savefig(path, dpi=DPI)
    _plt().close(fig)
    return True


Z = 2  # every interval das draws is +- Z standard errors (about 95%): one convention, stated on every figure
UNCERTAINTY = "Uncertainty: "  # how every figure's statement of its convention begins


def two_se(across: str) -> str:
    """The convention of a figure with error bars: +- 2 standard errors, `across` what (e.g. "3 replicates")."""
    return f"{UNCERTAINTY}bars +-{Z} standard errors (about 95%) across {across}"


def no_bands(why: str) -> str:
    """The convention of a figure without error bars, and why there are none (e.g. "one release: one draw of noise")."""
    return f"{UNCERTAINTY}none drawn ({why})"


def wilson_note(over: str) -> str:
    """The convention of a figure of shares with Wilson intervals (`wilson`), over what trials (`over`)."""
    return (f"{UNCERTAINTY}Wilson score intervals at z = {Z} (about 95%) over {over}, counted as independent "
            "trials")


def wilson(hits, asked, z: float = Z) -> tuple[np.ndarray, np.ndarray]:
    """The Wilson score interval of a share hits / asked at z standard errors: honest at 0, at 1 and for few trials
    (where +- z binomial standard errors would be 0 wide or leave [0, 1]); asked 0 gives NaN."""
    hits, asked = np.asarray(hits, dtype=float), np.asarray(asked, dtype=float)
    with np.errstate(invalid="ignore", divide="ignore"):
        p = hits / asked
        centre = (p + z * z / (2 * asked)) / (1 + z * z / asked)
        half = z / (1 + z * z / asked) * np.sqrt(p * (1 - p) / asked + z * z / (4 * asked * asked))
    return np.clip(centre - half, 0, 1), np.clip(centre + half, 0, 1)


def bars(ax, xs, values, width: float, **style) -> None:
    """Bars at xs (matplotlib's `ax.bar` with `style`); a bar of exactly 0 (|value| < ZERO) drawn as a thick line of
    its colour across its width, above the zero line, so it reads as 0 and not as missing."""
    values = np.asarray(values, dtype=float)
    ax.bar(xs, values, width, **style)
    for x in np.asarray(xs, dtype=float)[np.abs(values) < ZERO]:
        ax.plot([x - width / 2, x + width / 2], [0, 0], color=style.get("color"), alpha=style.get("alpha"), lw=3,
                solid_capstyle="butt", zorder=3, label="_zero")


def _wrapped(text: str, share: float) -> str:
    """`text` rewrapped (each of its lines) to `share` of its longest line's length, breaking at spaces."""
    import textwrap

    lines = text.split("\n")
    width = max(8, int(max(len(line) for line in lines) * share))
    return "\n".join(part for line in lines for part in (textwrap.wrap(line, width) or [""]))


def _untangle_ticks(fig, renderer) -> bool:
    """Tick labels of an x axis that overlap or touch: their words stacked (labels das wrote), else turned 30 degrees, then
    upright; True if any axis was changed."""
    from matplotlib.ticker import FixedLocator

    changed = False
    for ax in fig.axes:
        labels = [t for t in ax.get_xticklabels() if t.get_visible() and t.get_text()]
        boxes = sorted((t.get_window_extent(renderer) for t in labels), key=lambda b: b.x0)
        gap = fig.dpi / 36  # 2 points: labels that touch read as one
        if not ax.get_visible() or not any(a.x1 + gap > b.x0 for a, b in zip(boxes, boxes[1:])):
            continue
        changed = True
        texts = [t.get_text() for t in ax.get_xticklabels()]
        if isinstance(ax.xaxis.get_major_locator(), FixedLocator) and any(" " in text for text in texts):
            ax.set_xticks(ax.get_xticks(), [text.replace(" ", "\n") for text in texts])
        else:
            turned = 30 if labels[0].get_rotation() == 0 else 90
            for t in ax.get_xticklabels():
                t.set(rotation=turned, ha="right", va="top" if turned < 90 else "center", rotation_mode="anchor")
    return changed


def fit_text(fig) -> None:
    """Lay the figure out (constrained layout) and make its text fit: overlapping tick labels turned, and any title or
    axis label longer than its room (the figure for the title, its axes for the rest) wrapped, so no text is cut."""
    for _ in range(4):
        fig.draw_without_rendering()  # the layout and every text's extent, without rasterizing (savefig draws once)
        renderer = fig.canvas.get_renderer()
        changed = _untangle_ticks(fig, renderer)
        room = [(fig.get_suptitle() and fig._suptitle, fig.bbox.width * 0.96, "width")]
        for ax in fig.axes:
            if ax.get_visible():
                room += [(ax.title, ax.bbox.width, "width"), (ax.xaxis.label, ax.bbox.width, "width"),
                         (ax.yaxis.label, ax.bbox.height, "height")]
        for text, space, side in room:
            if not text or not text.get_text() or not text.get_visible():
                continue
            size = getattr(text.get_window_extent(renderer), side)
            if size > space:
                text.set_text(_wrapped(text.get_text(), 0.95 * space / size))
                changed = True
        if not changed:
            return
    fig.draw_without_rendering()


def _plain(value, _position=None) -> str:
    """A log axis's tick as a number: 0.5, 2, 100."""
    return f"{value:g}"


def _plain_minor(value, _position=None) -> str:
    """A log axis's minor tick labelled only at 2 and 5 times a power of ten (legible, not crowded)."""
    leading = value / 10 ** np.floor(np.log10(value)) if value > 0 else 0
    return f"{value:g}" if round(leading) in (2, 5) else ""


def log_values(ax, x, y, **style) -> np.ndarray:
    """Plot y against x for a log axis: an exact 0 (|y| < ZERO, an invariant's error up to float noise) is no point of
    the line; returns where y is 0, for `mark_zeros` to draw on the axis floor once the axis is scaled."""
    y = np.asarray(y, dtype=float)
    zero = np.abs(y) < ZERO
    ax.plot(x, np.where(zero, np.nan, y), **style)
    return zero


def mark_zeros(ax, zeros: list[tuple[object, np.ndarray, str]]) -> None:
    """A log axis whose floor is set by the data (not by float noise), and each series' exact zeros drawn on that floor
    as open triangles, said in a note."""
    values = [v for line in ax.get_lines() for v in np.asarray(line.get_ydata(), float) if np.isfinite(v) and v > 0]
    if not values:  # nothing but zeros: a linear axis shows them plainly
        for x, zero, color in zeros:
            ax.plot(np.asarray(x, dtype=object)[zero], np.zeros(zero.sum()), "o", color=color)
        return
    ax.set_yscale("log")
    floor = min(values) / 2
    ax.set_ylim(bottom=floor)
    shown = False
    for x, zero, color in zeros:
        if zero.any():
            shown = True
            ax.plot(np.asarray(x, dtype=object)[zero], np.full(zero.sum(), floor), "v", color=color, mfc="none", ms=7,
                    clip_on=False)
    if shown:
        ax.text(0.99, 0.01, "open triangles at the floor: exactly 0", transform=ax.transAxes, ha="right", va="bottom",
                fontsize=7, color="#555")


def moving_average(x: np.ndarray, y: np.ndarray, window: int) -> tuple[np.ndarray, np.ndarray]:
    """y averaged over a sliding window of `window` points in x order (x sorted)."""
    order = np.argsort(x, kind="stable")
    x, y = x[order], y[order]
    window = max(1, min(window, len(x)))
    kernel = np.ones(window) / window
    return np.convolve(x, kernel, mode="valid"), np.convolve(y, kernel, mode="valid")


def _levels_with_units(meta: dict, minimum: int = 10) -> list[str]:
    return [lv for lv in meta["levels"] if meta["units"].get(lv, 0) >= minimum]


def replicates(meta: dict) -> int:
    """Noise draws per budget: 1 for a single release (`das metrics`), whose errors are one draw, not a bias."""
    return int(meta.get("replicates", meta.get("study", {}).get("runs", 1)))


def _bars_note(meta: dict) -> str:
    """The uncertainty convention of a bar chart of signed errors: +- 2 s.e. across a study's replicates; none for one
    release (one draw of noise: there is no spread across draws to show)."""
    n = replicates(meta)
    return two_se(f"{n} replicates") if n > 1 else no_bands("one release: one draw of noise")


def _draws(meta: dict) -> str:
    n = replicates(meta)
    return f"mean over {n} replicates" if n > 1 else "one release"


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


def mae_panels(frame: pd.DataFrame, path: Path, *, levels: list[str], ticks: list[str], title: str,
               uncertainty: str) -> bool:
    """The MAE of each query by level, one panel per query and one line per estimator, on log axes whose floor the
    data set (a noisy spike flattens nothing; an exact 0 is drawn on the floor, never as float noise)."""
    queries = list(dict.fromkeys(frame["query"]))
    if not queries:
        return False
    fig, axes = _panels(len(queries), 5.0, 3.6)
    estimators = list(dict.fromkeys(frame["estimator"]))
    for ax, query in zip(axes, queries):
        zeros = []
        for k, estimator in enumerate(estimators):
            g = frame[(frame["query"] == query) & (frame["estimator"] == estimator)].set_index("level").reindex(levels)
            x = np.arange(len(levels)) + (k - (len(estimators) - 1) / 2) * 0.06  # equal values stay apart
            zero = log_values(ax, x, g["mae"], marker="o", color=series.color(estimator), label=series.label(estimator))
            zeros.append((x, zero, series.color(estimator)))
        mark_zeros(ax, zeros)
        ax.set_xticks(range(len(levels)), ticks)
        ax.set_title(query, fontsize=10)
        ax.set_ylabel("MAE per cell (persons, log)")
        ax.set_xlabel("level (geounits)", fontsize=8)
        ax.tick_params(axis="x", labelsize=8)
    return _finish(fig, axes, title, path, uncertainty=uncertainty)


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


def plot_area_mae(areas: pd.DataFrame, rho: str, path: Path) -> bool:
    """The MAE of total population per level and area type (all sizes), the areas beside the spine (`mae_panels`)."""
    frame = areas[(areas["rho"] == rho) & (areas["bin"] == "all")].assign(query="total population")
    levels = list(dict.fromkeys(frame["level"]))
    units = frame.drop_duplicates("level").set_index("level")["units"]
    ticks = [f"{lv.replace('_', ' ')}\n{units[lv]:,}" for lv in levels]
    return mae_panels(frame, path, levels=levels, ticks=ticks,
                      title=f"Total population: MAE per area off the spine, beside the spine's levels (rho = {rho})",
                      uncertainty=no_bands("an MAE over the units of each level or area type"))


def plot_area_by_size(areas: pd.DataFrame, meta: dict, rho: str, path: Path) -> bool:
    """The MAE of total population by the true population of the unit, a panel per area type and per level of the
    spine at or below the county (a line per estimator)."""
    frame = areas[(areas["rho"] == rho) & (areas["bin"] != "all")]
    fine = [lv for lv in meta["levels"] if lv not in ("nation", "state")]
    names = [lv for lv in dict.fromkeys(frame["level"]) if lv in fine or lv not in meta["levels"]]
    if not names:
        return False
    fig, axes = _panels(len(names), 4.2, 3.4)
    for ax, name in zip(axes, names):
        part = frame[frame["level"] == name]
        bins = [b for b in SIZE_BINS if b in set(part["bin"])]
        for estimator, g in part.groupby("estimator", sort=False, observed=True):
            g = g.set_index("bin").reindex(bins)
            ax.plot(range(len(bins)), g["mae"], marker="o", color=series.color(estimator), label=series.label(estimator))
        counts = part.drop_duplicates("bin").set_index("bin")["units"]
        ax.set_xticks(range(len(bins)), [f"{b}\nn={counts[b]:,}" for b in bins], fontsize=7)
        kind = "area type" if name not in meta["levels"] else "level"
        ax.set_title(f"{name.replace('_', ' ')} ({kind})", fontsize=9)
        ax.set_xlabel("true population (n: units per bin)", fontsize=8)
        ax.set_ylabel("MAE (persons)")
        ax.set_ylim(bottom=0)
    return _finish(fig, axes, f"Total population: MAE by true size, areas and levels (rho = {rho}, {_draws(meta)})",
                   path, uncertainty=no_bands(f"an MAE over the units of each bin, {_draws(meta)}"))


def plot_composition(composition: pd.DataFrame, meta: dict, rho: str, path: Path) -> bool:
    """Block total population's mean signed error by true size, a bar per share of the block's largest group
    (darker: more homogeneous), a panel per estimator: with +- 2 s.e. across replicates for a study; a single
    release's is one draw of noise, drawn without error bars and not called a bias (as `plot_bias_by_bin`)."""
    frame = composition[(composition["rho"] == rho) & (composition["bin"] != "all")]
    estimators = list(dict.fromkeys(frame["estimator"]))
    if frame.empty:
        return False
    shares = [s for s in SHARE_BINS if s in set(frame["share"])]
    study = replicates(meta) > 1
    fig, axes = _panels(len(estimators), 5.2, 3.8)
    for ax, estimator in zip(axes, estimators):
        part = frame[frame["estimator"] == estimator]
        bins = [b for b in SIZE_BINS if b in set(part["bin"])]
        width = 0.8 / max(len(shares), 1)
        for k, share in enumerate(shares):
            g = part[part["share"] == share].set_index("bin").reindex(bins)
            xs = np.arange(len(bins)) + (k - (len(shares) - 1) / 2) * width
            bars(ax, xs, g["mean_error"], width, color=series.color(estimator), alpha=0.35 + 0.65 * (k + 1) / len(shares),
                 label=f"{series.label(estimator)}: largest group's share {share}",
                 **({"yerr": Z * g["se"].fillna(0), "capsize": 2} if study else {}))
        ax.axhline(0, color="black", lw=0.8)
        ax.set_xticks(range(len(bins)), bins, fontsize=8)
        ax.set_xlabel("true block population")
        ax.set_ylabel("mean signed error (persons)" if study else "signed error, mean over the blocks (persons)")
        ax.set_title(series.label(estimator), fontsize=10)
    title = (f"Bias of block total population by composition (rho = {rho}; darker: more homogeneous)" if study
             else f"Signed error of block total population by composition (one release, rho = {rho}: one draw of "
                  "noise, not a bias; darker: more homogeneous)")
    return _finish(fig, axes, title, path, uncertainty=_bars_note(meta))


def offspine_findings(areas: pd.DataFrame, composition: pd.DataFrame, meta: dict, rho: str) -> list[str]:
    """Plain-language lines: each estimator's MAE per area type beside the spine's finest levels, and the signed error
    of the most mixed and the most homogeneous blocks."""
    lines = []
    a = areas[(areas["rho"] == rho) & (areas["bin"] == "all")] if len(areas) else areas
    for estimator in dict.fromkeys(a["estimator"]) if len(a) else ():
        g = a[a["estimator"] == estimator]
        shown = [f"{r.level} {r.mae:.2f} ({r.units:,})" for r in g.itertuples()
                 if r.kind == AREA or r.level in meta["levels"][-3:]]
        lines.append(f"{series.label(estimator)}: MAE of total population per unit (units): {', '.join(shown)}.")
    c = composition[(composition["rho"] == rho) & (composition["bin"] != "all")] if len(composition) else composition
    study = replicates(meta) > 1
    what = "mean signed error across replicates" if study else "signed error of this one release (not a bias)"
    for estimator in dict.fromkeys(c["estimator"]) if len(c) else ():
        g = c[c["estimator"] == estimator]
        parts = [f"share {r.share}, {r.bin} persons: {r.mean_error:+.2f}"
                 + ("" if pd.isna(r.t) or not study else f" (t {r.t:.1f})") for r in g.itertuples() if r.blocks >= 10]
        if parts:
            lines.append(f"{series.label(estimator)}: {what}, block total population by the largest group's share "
                         f"and true size (cells of 10 blocks or more): {'; '.join(parts)}.")
    return lines


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


def _offspine_frames(study_dir: Path, meta: dict, *, errors: pd.DataFrame, areas) -> dict:
    """The study's areas and composition tables (empty where it has none); with `areas` (type -> file), the areas
    table scored from its kept block errors instead, and meta's record of the areas replaced by those files'."""
    def read(name: str) -> pd.DataFrame:
        return pd.read_parquet(study_dir / f"{name}.parquet") if (study_dir / f"{name}.parquet").exists() else pd.DataFrame()

    frames = {"areas": read("areas"), "composition": read("composition")}
    if areas:
        if not (study_dir / offspine.BLOCKS_FILE).exists():
            raise StudyError(f"{study_dir} has no {offspine.BLOCKS_FILE} to align area files with; score it again "
                             f"(das metrics or das replicate) to report on {option('areas')}")
        blocks = pd.read_parquet(study_dir / offspine.BLOCKS_FILE)["geocode"].to_numpy(dtype=str)
        try:
            frames["areas"], meta["areas"] = offspine.rescored(errors, pd.read_parquet(study_dir / "stats.parquet"),
                                                               blocks=blocks, paths=areas, levels=meta["levels"])
        except ValueError as e:
            raise StudyError(f"{option('areas')}: {study_dir}: {e}") from None
    return frames


def _offspine_section(meta: dict, out: Path, *, rho: str, suffix: str, off: dict) -> tuple[list, list, list]:
    """(figures, tables, findings) of one budget on the areas off the spine and the composition."""
    areas, composition = off["areas"], off["composition"]
    figures, tables = [], []
    if len(areas):
        if plot_area_mae(areas, rho, out / f"areas_mae{suffix}.png"):
            figures.append(("MAE per area off the spine, beside the spine's levels", out / f"areas_mae{suffix}.png"))
        if plot_area_by_size(areas, meta, rho, out / f"areas_by_size{suffix}.png"):
            figures.append(("MAE by true size: areas and levels", out / f"areas_by_size{suffix}.png"))
        table = areas[(areas["rho"] == rho) & (areas["bin"] == "all")].drop(columns=["rho", "bin"])
        tables.append(("Total population per area off the spine, beside the spine's levels (persons)", table))
    if len(composition):
        if plot_composition(composition, meta, rho, out / f"composition_bias{suffix}.png"):
            figures.append(("Signed error by block composition", out / f"composition_bias{suffix}.png"))
        table = composition[(composition["rho"] == rho) & (composition["bin"] != "all")].drop(columns=["rho"])
        tables.append(("Block total population's signed error by composition and true size (persons)", table))
    return figures, tables, offspine_findings(areas, composition, meta, rho)


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


def _offspine_intro(meta: dict) -> list[str]:
    """What the areas off the spine are (files or synthetic districts) and how composition is binned."""
    lines = []
    for area_type, about in meta.get("areas", {}).items():
        source = about.get("synthetic") or f"area file (SHA-256 {about.get('sha256', '')[:12]}...)"
        lines.append(f"Area type `{area_type}`: {about.get('areas', 0):,} areas; {source}. An area's error is the sum "
                     "of its blocks' errors; its size bin is its true population.")
    if meta.get("composition"):
        lines.append("Composition: a block's share of its largest group of eight (Hispanic; not Hispanic: each of six "
                     "races alone, two or more races), true counts, binned [0, 0.5), [0.5, 0.9), [0.9, 1]; blocks of no "
                     "persons left out. Its s.e. is across replicates, or for one release across the blocks of a cell.")
    return lines


ABOUT = {  # what each estimator of a TopDown release is, said only of those computed
    "topdown": "TopDown is the released product (nonnegative, integral, consistent)",
    "noisy": "the raw noisy measurement is unbiased but inconsistent and can be negative",
    "wls": "the unconstrained weighted least-squares (WLS) estimate is consistent and unbiased but fractional and can "
           "be negative",
}


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
    estimators = list(meta["study"]["estimators"])
    about = "; ".join(ABOUT[e] for e in estimators if e in ABOUT)
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
    lines += _offspine_intro(meta)
    if runs > 1:
        lines.append("t is the mean signed error divided by its standard error across replicates (|t| > 3: a bias the "
                     "replicates resolve).")
    return lines
