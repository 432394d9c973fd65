"""`das.nmf.read`: a TopDown release's noisy measurement file (NMF) as one DataFrame, from its public files alone.

The NMF is what a release measured: every query of its strategy at every geounit of every level, each cell's
integer noisy answer and the exact variance of the discrete Gaussian noise added to it. A researcher holding
a published bundle has everything post-processing used (`das postprocess`, and the estimators that read the
NMF): this reader is where that work starts (docs/research.md).
"""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq

from das.core.errors import ReleaseError
from das.frame.checkpoint import file_sha256
from das.frame.records import RunDirError
from das.frame.rundir import RunDir

__all__ = ["read"]

COLUMNS = ("release", "level", "geocode", "query", "cell", "noisy", "variance", "variance_num", "variance_den")


def read(bundle: str | os.PathLike, *, release: str | None = None, level: str | None = None) -> pd.DataFrame:
    """The noisy measurements of a TopDown release (a published bundle, a run directory or an NMF release of
    `das measure`), one row per measured cell.

    Args:
        bundle: the release's directory.
        release: "persons" or "units" only (default: both).
        level: one level only ("nation" ... "block"; default: every level).

    Returns:
        A DataFrame with columns release, level, geocode (the geounit's code, "" for the nation), query (its
        name in the schema's query language), cell (0-based, in the query's cell order), noisy (the integer
        noisy answer), variance (the noise's variance as a float) and variance_num, variance_den (that variance
        exactly: num/den). Rows are in the NMF's order: release, level (nation first), geounit, query, cell.

    Raises:
        ReleaseError: not a release with an NMF, an unknown release or level, or an NMF file that is not the one
            its manifest lists (changed since it was published).

    Example:
        >>> import das
        >>> nmf = das.nmf.read(das.run("tiny", out=getfixture("tmp_path") / "r", seed=1, progress=False).path)
        >>> sorted(nmf["release"].unique()), list(nmf.columns[:5])
        (['persons', 'units'], ['release', 'level', 'geocode', 'query', 'cell'])
    """
    run = RunDir(Path(bundle))
    try:
        manifest = run.read()
    except RunDirError as e:
        raise ReleaseError(str(e)) from None
    if not manifest.nmf:
        raise ReleaseError(f"{run.path}: its manifest lists no NMF (a synthetic release, or one not finished): only a "
                           "TopDown release (das run, das measure) publishes its noisy measurements")
    releases = [r for r in ("persons", "units") if getattr(manifest, r) is not None]
    if release is not None and release not in releases:
        raise ReleaseError(f"release={release!r}: this release has {' and '.join(releases)}")
    if level is not None and level not in manifest.levels:
        raise ReleaseError(f"level={level!r}: this release's levels are {', '.join(manifest.levels)}")
    frames = []
    for name in releases if release is None else [release]:
        for lv in manifest.levels if level is None else [level]:
            for path, _ in run.nmf_level_files(name, lv):
                listed = manifest.nmf.get(run.relative(path))
                if listed is None or file_sha256(path) != listed:
                    raise ReleaseError(f"{path} is not the NMF file its manifest lists (missing from it, or changed)")
                frame = pq.read_table(path).to_pandas()
                frames.append(frame.assign(release=name))
    if not frames:
        return pd.DataFrame({c: pd.Series(dtype=object) for c in COLUMNS})
    nmf = pd.concat(frames, ignore_index=True)
    for column in ("level", "geocode", "query"):
        nmf[column] = nmf[column].astype(str)
    nmf["variance"] = nmf["variance_num"] / nmf["variance_den"]
    return nmf[list(COLUMNS)]
