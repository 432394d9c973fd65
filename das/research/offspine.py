"""What a study scores besides the spine: areas off it (area files, or synthetic districts without them) and the
bias by block composition. The glue between the confidential input, the pure metrics of das.research.areas
and das.research.composition, and a study directory's files.

A study directory gains:
  areas.parquet        total population's error per (rho, estimator, kind, level or area type, size bin), the
                       spine's levels beside the area types (das.research.areas.area_table)
  composition.parquet  block total population's signed error per (rho, estimator, share bin, size bin)
  blocks.parquet       the block geocodes in the order of the errors' `unit` (public geography): what
                       `das report DIR --areas` aligns area files with
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from das.core.errors import option
from das.io.areas import TYPE_NAME, read_areas
from das.model.levels import BLOCK, LEVEL_DIGITS
from das.research.areas import area_stats, area_table
from das.research.composition import composition_stats, composition_table, group_counts, has_groups, largest_share, share_bin
from das.research.districts import DISTRICT_SIZES, synthetic_districts
from das.research.metrics import SIZE_BINS, markdown_table

BLOCKS_FILE = "blocks.parquet"
SYNTHETIC = ("synthetic districts (no area files given): within each county, blocks in geocode order cut into runs "
             "of about {size:,} persons, not reset at tract boundaries (das.research.districts)")


@dataclass(frozen=True)
class BlockGroups:
    """How a study groups blocks besides the spine: area type -> per-block area index (-1: none), and each
    block's share bin of its largest race/ethnicity group (None: the schema has no such groups)."""

    areas: Mapping[str, np.ndarray] = field(default_factory=dict)
    shares: np.ndarray | None = None
    described: Mapping[str, dict] = field(default_factory=dict)  # area type -> its source, for study.json


def area_type_problem(types, levels=tuple(LEVEL_DIGITS)) -> str | None:
    """Why these area type names cannot be used (None if they can): a name (das.io.areas.TYPE_NAME), not a level
    of the spine."""
    for name in types:
        if not TYPE_NAME.fullmatch(name):
            return f"area type {name!r} is not a name: letters, digits and underscores, not starting with a digit"
        if name in levels:
            return f"area type {name!r} is a level of the geographic spine; name the area type otherwise"
    return None


def block_groups(schema, blocks: np.ndarray, histograms, *, paths: Mapping[str, str] | None = None) -> BlockGroups:
    """The area indices (from `paths`, type -> area file; without them the synthetic districts of the true block
    populations) and the composition share bins of blocks (true block `histograms`, in `blocks` order)."""
    totals = np.asarray(histograms.sum(axis=1)).reshape(-1)
    if paths:  # the files read against the sorted blocks, then put in `blocks` order (a spine's, maybe)
        order = np.argsort(np.asarray(blocks, dtype=str), kind="stable")
        read = read_areas(dict(paths), np.asarray(blocks, dtype=str)[order])
        back = np.argsort(order)
        areas, described = {t: index[back] for t, index in _indices(read).items()}, _described(read)
    else:
        areas = synthetic_districts(blocks, totals)
        described = {t: {"synthetic": SYNTHETIC.format(size=DISTRICT_SIZES[t]), "areas": int(index.max()) + 1
                         if index.size else 0} for t, index in areas.items()}
    shares = share_bin(largest_share(group_counts(schema, histograms))) if has_groups(schema) else None
    return BlockGroups(areas=areas, shares=shares, described=described)


def score_blocks(groups: BlockGroups, truth: np.ndarray, estimates: Mapping[str, np.ndarray],
                 tags: dict) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(area stats, composition stats) of one draw of noise: per-block true and estimated totals, tagged."""
    areas = area_stats(truth, estimates, groups.areas)
    composition = composition_stats(truth, estimates, groups.shares) if groups.shares is not None else pd.DataFrame()
    return (areas.assign(**tags) if len(areas) else areas), (composition.assign(**tags) if len(composition) else composition)


def write_blocks(blocks: np.ndarray, out_dir: Path, write) -> None:
    """blocks.parquet: the block geocodes, row i the errors' block `unit` i (`write`: the study's Parquet writer)."""
    write(pd.DataFrame({"geocode": np.asarray(blocks, dtype=str)}), out_dir / BLOCKS_FILE)


def tables(stats: pd.DataFrame, area_parts: pd.DataFrame, composition_parts: pd.DataFrame,
           levels) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(areas table, composition table) of a study's pooled parts (either empty when its parts are)."""
    areas = area_table(stats, area_parts, levels=levels) if len(area_parts) else pd.DataFrame()
    composition = composition_table(composition_parts) if len(composition_parts) else pd.DataFrame()
    return areas, composition


def rescored(errors: pd.DataFrame, stats: pd.DataFrame, *, blocks: np.ndarray, paths: Mapping[str, str],
             levels) -> tuple[pd.DataFrame, dict]:
    """(areas table, area types described) of area files scored from a study's kept block errors of total
    population (`errors`: unit, truth, estimate per rho, replicate and estimator; `blocks`: blocks.parquet's geocodes)
    beside its spine `stats`: what `das report DIR --areas` draws. ValueError: no block totals were kept."""
    read = read_areas(dict(paths), blocks)
    index = _indices(read)
    block = errors[(errors["level"] == BLOCK) & (errors["query"] == "total")] if len(errors) else errors
    if not len(block):
        raise ValueError(f"it kept no block errors of total population (score it with {option('keep', 'total')})")
    parts = []
    for (rho, replicate, estimator), g in block.groupby(["rho", "replicate", "estimator"], sort=False, observed=True):
        truth, estimate = np.zeros(len(blocks)), np.zeros(len(blocks))
        truth[g["unit"].to_numpy()] = g["truth"].to_numpy()
        estimate[g["unit"].to_numpy()] = g["estimate"].to_numpy()
        parts.append(area_stats(truth, {estimator: estimate}, index).assign(rho=rho, replicate=replicate))
    return area_table(stats, pd.concat(parts, ignore_index=True), levels=levels), _described(read)


def _indices(read) -> dict[str, np.ndarray]:
    """Area type -> per-block area index (-1: none) of das.io.areas.Areas."""
    return {t: np.asarray(read.codes(t)[1], dtype=np.int64) for t in read.types}


def _described(read) -> dict[str, dict]:
    """Area type -> its file, the file's SHA-256 and its number of areas, for study.json and the report."""
    return {t: {"path": str(read.files[t].path), "sha256": read.files[t].sha256, "areas": int(len(read.codes(t)[0]))}
            for t in read.types}


def headline(areas: pd.DataFrame, *, rho: str | None = None) -> pd.DataFrame:
    """The terminal's table: the MAE of total population per level and area type (all sizes), a row each with its
    units, a column per estimator; the first budget's unless `rho` is given."""
    frame = areas[areas["bin"] == "all"]
    frame = frame[frame["rho"] == (rho if rho is not None else frame["rho"].iloc[0])]
    table = frame.pivot_table(index="level", columns="estimator", values="mae", aggfunc="first", observed=True)
    order = list(dict.fromkeys(frame["level"]))
    table = table.reindex(index=order, columns=list(dict.fromkeys(frame["estimator"])))
    units = frame.drop_duplicates("level").set_index("level")["units"].reindex(order)
    table.insert(0, "units", units.to_numpy())
    return table.reset_index().rename_axis(columns=None)


def render(areas: pd.DataFrame, composition: pd.DataFrame) -> list[str]:
    """Markdown lines of metrics.md's sections on areas off the spine and on composition."""
    lines = []
    if len(areas):
        overall = areas[areas["bin"] == "all"].drop(columns=["bin"])
        by_size = _in_size_order(areas[areas["bin"] != "all"], ["rho", "estimator", "kind", "level"])
        lines += ["## Total population off the spine: area types beside the spine's levels (all sizes)", "",
                  markdown_table(overall), "", "## ... by the area's true population", "", markdown_table(by_size), ""]
    if len(composition):
        table = _in_size_order(composition[composition["bin"] != "all"], ["rho", "estimator", "share"])
        lines += ["## Block total population's signed error by composition (share of the largest race/ethnicity "
                  "group) and true size", "", markdown_table(table), ""]
    return lines


def _in_size_order(frame: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Rows grouped by `keys` (each in the order it first appears), size bins in order within a group."""
    ranks = {k: frame[k].map({v: i for i, v in enumerate(dict.fromkeys(frame[k]))}) for k in keys}
    ranks["bin"] = frame["bin"].map({b: i for i, b in enumerate(SIZE_BINS)})
    order = pd.DataFrame(ranks).sort_values([*keys, "bin"], kind="stable").index
    return frame.loc[order]
