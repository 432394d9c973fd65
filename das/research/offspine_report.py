"""The report's section on areas off the spine and block composition: their figures, tables and findings
(das.research.offspine scores them)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from das.core.errors import StudyError, option
from das.model.levels import NATION, STATE
from das.research import offspine, series
from das.research.areas import AREA
from das.research.composition import SHARE_BINS
from das.research.figures import (
    Z,
    _bars_note,
    _draws,
    _finish,
    _panels,
    bars,
    mae_panels,
    no_bands,
    replicates,
)
from das.research.metrics import SIZE_BINS


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
    fine = [lv for lv in meta["levels"] if lv not in (NATION, STATE)]
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
