"""`das.replicate`, `das.compare` and `das.metrics`: research on a spec's input, scored against the truth.

Their outputs hold true counts: they are confidential, go to a directory of their own and say so. Each
returns the tables it wrote as DataFrames (`Study`), and `report()` draws the HTML report (`das report`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from das import arguments
from das.api.inputs import prepared, said_of_frames
from das.api.release import Release, exact
from das.arguments import checked

DEFAULT_QUERIES = ("total", "hhgq", "hispanic x cenrace", "votingage x hispanic x cenrace")  # das.research.replicate's


@dataclass(frozen=True)
class Study:
    """A finished study directory (`das replicate`, `das metrics` or `das compare`), read as Python values."""

    path: Path

    @property
    def meta(self) -> dict:
        """What was run: study.json (or compare.json)."""
        name = "compare.json" if (self.path / "compare.json").is_file() else "study.json"
        return json.loads((self.path / name).read_text())

    def frame(self, name: str):
        """One of the study's Parquet tables as a DataFrame: metrics, bias, stats, errors (and for a comparison
        comparison, runs, attack, attack_rates)."""
        import pandas as pd

        return pd.read_parquet(self.path / f"{name}.parquet")

    @property
    def metrics(self):
        """Error metrics pooled over replicates: MAE, RMSE, MALPE... by rho, estimator, level, query and size bin."""
        return self.frame("metrics")

    @property
    def bias(self):
        """Mean signed error across replicates with its standard error and t, by size bin."""
        return self.frame("bias")

    @property
    def areas(self):
        """Total population's error in the areas off the spine beside the spine's levels: MAE, mean signed error
        with its s.e. and t, MALPE and the largest error, by rho, estimator, level or area type and size bin."""
        return self.frame("areas")

    @property
    def composition(self):
        """Block total population's mean signed error with its s.e. and t, by the share of the block's largest
        race/ethnicity group and its true size."""
        return self.frame("composition")

    def report(self, out: str | os.PathLike | None = None, *, areas: Mapping[str, str | os.PathLike] | None = None
               ) -> Path:
        """The HTML report (and its Markdown twin) of the study: `das report DIR`; returns index.html's path. areas:
        area type -> file, scored from the study's block errors in place of the areas it was scored on."""
        if (self.path / "compare.json").is_file():
            from das.research.compare_report import build_compare_report

            return build_compare_report(self.path)
        from das.research.report import build_report

        return build_report(self.path, out, areas=areas)


@checked
def replicate(spec, *, out: str | os.PathLike, runs: int = 20, rho=None, seed: int | None = None,
              estimators: tuple[str, ...] = ("topdown", "noisy", "wls"), queries: tuple[str, ...] = DEFAULT_QUERIES,
              keep: tuple[str, ...] = ("total",), workers: int = 1, persons=None, units=None,
              overwrite: bool = False, allow_large_rho: bool = False, areas: Mapping[str, str | os.PathLike] | None = None
              ) -> Study:
    """`das replicate`: `runs` independent noise draws on the same input per budget, each post-processed and scored
    per estimator (TopDown, the raw noisy measurement, unconstrained WLS). rho: one budget or a list to sweep
    (default: the spec's); areas: area type -> area file, scored off the spine (default: synthetic districts); the
    other arguments are the command's flags and `das.run`'s spec and inputs."""
    from das.research.replicate import Study as Design
    from das.research.replicate import replicate_study

    rhos = ("spec",) if rho is None else tuple(str(exact(r, "rho")) for r in (rho if isinstance(rho, (list, tuple))
                                                                            else [rho]))
    with prepared(spec, persons=persons, units=units, name="study") as ready, said_of_frames(ready.frames):
        design = Design(spec=str(ready.spec), rhos=rhos, runs=runs, estimators=tuple(estimators),
                        queries=tuple(queries), keep=tuple(keep), seed=seed, areas=_area_pairs(areas))
        replicate_study(design, out, workers=workers, overwrite=overwrite,
                        allow_large_rho=allow_large_rho)
    return Study(Path(out))


@checked
def metrics(release, *, truth=None, out: str | os.PathLike | None = None,
            estimators: tuple[str, ...] = ("topdown", "noisy", "wls"), queries: tuple[str, ...] = DEFAULT_QUERIES,
            keep: tuple[str, ...] = ("total",), areas: Mapping[str, str | os.PathLike] | None = None) -> Study:
    """`das metrics`: one release (a Release or its directory) scored against the confidential input (`truth`:
    two paths; default the run's own inputs), into `out` (default: beside the release, RUN_DIR-metrics); areas:
    area type -> area file, scored off the spine beside its levels (default: synthetic districts)."""
    from das.research.evaluate import evaluate_run, metrics_dir

    path = Path(release.path if isinstance(release, Release) else release)
    out = Path(out) if out is not None else metrics_dir(path)
    evaluate_run(path, truth=tuple(map(str, truth)) if truth else None, out=out, estimators=tuple(estimators),
                 queries=tuple(queries), keep=tuple(keep), areas=_area_pairs(areas))
    return Study(out)


def _area_pairs(areas: Mapping | None) -> tuple[tuple[str, str], ...]:
    """area type -> file as the (type, path) pairs a study records (none: synthetic districts)."""
    return tuple((str(t), os.fspath(p)) for t, p in (areas or {}).items())


@checked(spec=arguments.spec_file)
def compare(spec, *, out: str | os.PathLike, mechanisms: tuple[str, ...] = ("topdown",), seeds: int = 20, rho=None,
            attack_blocks: int = 10, attack_seeds: int | None = None, attack_runs: int = 20, attack_relaxed: int = 300,
            attack_steps: int = 300, tables: str | None = None, workers: int = 1, overwrite: bool = False,
            allow_large_rho: bool = False) -> Study:
    """`das compare`: TopDown, the research estimators and other mechanisms on the same input, budget and seeds:
    error, bias, cost and reconstruction-attack match rates side by side (the arguments are the command's flags)."""
    from das.research import compare as comparing

    if isinstance(mechanisms, str):
        mechanisms = tuple(m.strip() for m in mechanisms.split(",") if m.strip())
    comparison = comparing.Comparison(spec=str(spec), mechanisms=tuple(mechanisms), seeds=seeds,
                                      rho=None if rho is None else str(exact(rho, "rho")), attack_blocks=attack_blocks,
                                      attack_seeds=attack_seeds, attack_runs=attack_runs, attack_relaxed=attack_relaxed,
                                      attack_steps=attack_steps, attack_tables=tables, allow_large_rho=allow_large_rho)
    comparing.run_comparison(comparison, out, workers=workers, overwrite=overwrite)
    return Study(Path(out))
