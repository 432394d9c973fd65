"""`das.postprocess` and the `Estimate` it gives back for an estimator other than TopDown.

A TopDown release's NMF post-processed again from its public files alone: into a release (`estimator="topdown"`,
the published spec's post-processing or other `settings`), or into an estimate directory (`wls`, `nnls`:
fractional counts, not a release), which `das.metrics` scores against the truth or against another release or
estimate (docs/outputs.md, "A release post-processed again"; docs/research.md, "From a published bundle").
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from das.api.release import Release
from das.core.arguments import checked


@dataclass(frozen=True)
class Estimate:
    """An estimate directory (`das postprocess --estimator wls|nnls`) read as Python values: `record` (its
    estimate.json: the estimator, what it is of, that it is not a release), `histograms` (the persons block
    histograms, a row per nonzero block x cell: GEOID, CELL, COUNT) and `tables` (table name -> DataFrame, a row per
    geounit at every level, fractional answers).

    Example:
        >>> from das.api import publish, run
        >>> release = run("tiny", out=getfixture("tmp_path") / "r", seed=1, progress=False)
        >>> wls = postprocess(publish(release, to=getfixture("tmp_path") / "b"), out=getfixture("tmp_path") / "w",
        ...                   estimator="wls")
        >>> wls.estimator, round(wls.tables["P1"].query("level == 'nation'")["total"].item())
        ('wls', 145)
    """

    path: Path
    record: dict  # its estimate.json: estimator, what it is, the release it is of, whether nonnegative or private

    @classmethod
    def open(cls, path: str | os.PathLike) -> Estimate:
        """The estimate in a directory.

        Args:
            path: a directory das postprocess wrote with an estimator other than topdown.

        Returns:
            The `Estimate`.

        Raises:
            RunError: `path` holds no das estimate.
        """
        from das.research.estimates import read_record

        return cls(Path(path), read_record(Path(path)))

    @property
    def estimator(self) -> str:
        """The estimator's name (wls, nnls)."""
        return self.record["estimator"]

    @cached_property
    def histograms(self):
        """The persons block histograms: GEOID, CELL (the schema's cell index), COUNT (fractional)."""
        import pandas as pd

        from das.research.estimates import HISTOGRAMS

        return pd.read_parquet(self.path / HISTOGRAMS).astype({"GEOID": str})

    @cached_property
    def tables(self) -> dict:
        """Table name -> its rows at every level (level, geocode, a column per cell), as the release names them."""
        import pandas as pd

        return {p.stem: pd.read_parquet(p) for p in sorted((self.path / "tables").glob("*.parquet"))}


@checked
def postprocess(bundle, *, out: str | os.PathLike, estimator: str = "topdown",
                settings: str | os.PathLike | Mapping | None = None, workers: int = 1, overwrite: bool = False,
                progress: bool = False, signing_key: str | os.PathLike | None = None) -> Release | Estimate:
    """A TopDown release's NMF post-processed again from its public files alone, as `das postprocess` does: its
    manifest (the published spec, certificates, population totals), NMF, invariants per block and spine. No noise is
    drawn and nothing confidential is read. With `estimator="topdown"` and no settings, for a release of this version
    of das the MDF and tables are the published ones (docs/outputs.md, "A release post-processed again"); with
    `settings`, TopDown with other passes, solver or rounding; `wls` or `nnls` write an estimate, not a release.

    Args:
        bundle: a `Release` or the directory of one: a published bundle, a run directory, an NMF release (das
            measure), or the run directory of a `das run` that stopped once its NMF was whole.
        out: the new release's (or estimate's) directory.
        estimator: topdown (a release), wls (unconstrained weighted least squares) or nnls (TopDown's
            nonnegative least squares without its rounding).
        settings: a [postprocess] table (solver, rounding, passes, passes_by_level) in place of the published
            spec's, as a dict or a TOML file holding it (topdown and nnls).
        workers: processes for the per-parent solves (default 1).
        overwrite: replace an earlier das release in `out` (an estimate is replaced without it).
        progress: show progress bars (on a terminal only).
        signing_key: the operator's Ed25519 key to sign the new release with (default: a key of its own; an
            estimate is not signed).

    Returns:
        The `Release` written (its manifest's `postprocessed_from` is the SHA-256 of the source's manifest;
        `postprocessed_with` states other settings), or the `Estimate`.

    Raises:
        RunError: not a TopDown release with an NMF, a file that is not the one its manifest lists, an unknown
            estimator. SpecError: settings that are not a [postprocess] table. OutDirError: `out` may not be written.

    Example:
        >>> from das.api import run
        >>> release = run("tiny", out=getfixture("tmp_path") / "r", seed=1, progress=False)
        >>> again = postprocess(release, out=getfixture("tmp_path") / "again")
        >>> again.valid, again.mdf.equals(release.mdf)
        (True, True)
    """
    from das.core.errors import RunError

    source = Path(getattr(bundle, "path", bundle))
    if estimator != "topdown":
        if signing_key is not None:
            raise RunError(f"estimator {estimator}: an estimate is not a release and is not signed; leave signing_key "
                           "out")
        from das.research.estimates import estimate

        made = estimate(source, Path(out), estimator=estimator, settings=settings, workers=workers, overwrite=overwrite)
        return Estimate(made.out_dir, made.record)
    from das.driver.postprocess import postprocess as post_process

    result = post_process(source, Path(out), settings=settings, workers=workers, overwrite=overwrite,
                          progress=progress, signing_key=None if signing_key is None else Path(signing_key))
    return Release(result.out_dir, result.manifest)
