"""How every figure das draws is made: its size on the page, the uncertainty convention (+- Z standard errors,
Wilson intervals), bars, log axes with exact zeros marked, and text fitted so nothing overlaps."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from das.research import series

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
