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

from das.api.inputs import source_of, study_spec
from das.api.release import exact
from das.core.arguments import checked

DEFAULT_QUERIES = ("total", "hhgq", "hispanic x cenrace", "votingage x hispanic x cenrace")  # das.research.replicate's


STUDIES = {"das replicate": "study.json", "das metrics": "study.json", "das compare": "compare.json"}  # command: record


@dataclass(frozen=True)
class Study:
    """A finished study directory (`das replicate`, `das metrics` or `das compare`), read as Python values:
    its tables as DataFrames (`metrics`, `bias`, `areas`, `composition`, `frame(name)`), what was run (`meta`),
    and its report (`report()`). Its files hold true counts: confidential.

    `Study(path)` and `Study.open(path)` are the same: each refuses (StudyError) what is not a finished study.

    Example:
        >>> study = replicate("tiny", out=getfixture("tmp_path") / "s", runs=2, seed=1, estimators=("topdown",))
        >>> Study.open(study.path).meta["status"], sorted(study.metrics["estimator"].unique())
        ('complete', ['topdown'])
    """

    path: Path

    def __post_init__(self):
        object.__setattr__(self, "path", Path(self.path))
        _study_record(self.path)

    @classmethod
    def open(cls, path: str | os.PathLike) -> Study:
        """The study in a directory: what `das.replicate`, `das.metrics` or `das.compare` wrote.

        Args:
            path: the study's directory.

        Returns:
            The `Study`.

        Raises:
            StudyError: naming the path and what was expected, when it is missing, is not a directory, is a
                release (open that with `das.Release.open`), holds no study, or holds one that did not finish.

        Example:
            >>> from das.api import run
            >>> study = Study.open(metrics(run("tiny", out=getfixture("tmp_path") / "r", seed=1, progress=False)).path)
            >>> study.meta["kind"], sorted(study.metrics["estimator"].unique())
            ('run', ['noisy', 'topdown', 'wls'])
        """
        return cls(Path(path))

    @property
    def meta(self) -> dict:
        """What was run: study.json (or compare.json)."""
        return json.loads((self.path / _study_record(self.path)).read_text())

    def frame(self, name: str):
        """One of the study's Parquet tables as a DataFrame.

        Args:
            name: metrics, bias, stats, errors, areas, composition (a comparison: comparison, runs, attack,
                attack_rates).

        Returns:
            A pandas DataFrame.
        """
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
        """The HTML report (and its Markdown twin) of the study, as `das report DIR` draws it.

        Args:
            out: the report's directory (default: the study's report/).
            areas: area type -> area file, scored from the study's block errors in place of the areas it was
                scored on.

        Returns:
            index.html's path.
        """
        if (self.path / "compare.json").is_file():
            from das.research.compare_report import build_compare_report

            return build_compare_report(self.path)
        from das.research.report import build_report

        return build_report(self.path, out, areas=areas)


def _study_record(path: Path) -> str:
    """The file that says what study directory `path` holds (study.json or compare.json); StudyError when `path`
    is not a finished study."""
    from das.core.errors import StudyError
    from das.frame.outdir import read_record
    from das.frame.rundir import RunDir

    expected = "expected a directory written by das.replicate, das.metrics or das.compare"
    if not path.exists():
        raise StudyError(f"{path} does not exist: {expected}")
    if not path.is_dir():
        raise StudyError(f"{path} is a file, not a directory: {expected}")
    if RunDir(path).manifest_path.is_file():
        raise StudyError(f"{path} is a release, not a study: open it with das.Release.open (score it with das.metrics)")
    record = read_record(path) or {}
    name = STUDIES.get(record.get("command"))
    if name is None:
        held = "is empty" if not any(path.iterdir()) else "holds no das study (no das-output.json of one)"
        raise StudyError(f"{path} {held}: {expected}")
    if record.get("status") != "complete":
        raise StudyError(f"{path}: the {record['command']} there did not finish (status {record.get('status')!r}); "
                         "run it again to finish it")
    if not (path / name).is_file():
        raise StudyError(f"{path}: {name} is missing, so it is not a finished {record['command']} directory")
    return name


@checked
def replicate(spec, *, out: str | os.PathLike, runs: int = 20, rho=None, eps=None, delta=None, seed: int | None = None,
              estimators: tuple[str, ...] = ("topdown", "noisy", "wls"), queries: tuple[str, ...] = DEFAULT_QUERIES,
              keep: tuple[str, ...] = ("total",), workers: int = 1, persons=None, units=None,
              overwrite: bool = False, allow_large_rho: bool = False, areas: Mapping[str, str | os.PathLike] | None = None
              ) -> Study:
    """Replicates, as `das replicate` runs them: `runs` independent noise draws on the same input per budget, each
    post-processed and scored per estimator against the truth.

    Args:
        spec: a shipped name, a path to a run spec .toml or a dict.
        out: the study's directory (confidential: it holds true counts).
        runs: noise draws per budget.
        rho: one persons budget or a list to sweep (default: the spec's).
        eps, delta: instead of rho, one eps or a list at delta (default: the spec's delta), each spent as the
            largest rho certified within it (`das.rho_for_eps`); exact as in `das.run` (a float is the decimal it
            prints as).
        seed: replication mode's seed (reproducible draws).
        estimators: which to score: topdown, noisy (the raw measurement), wls (unconstrained weighted least
            squares).
        queries: the queries scored (marginal names, e.g. "hispanic x cenrace").
        keep: the queries whose per-geounit errors are kept (for bias by size and composition).
        workers: processes (default 1).
        persons, units: the input and truth, paths or DataFrames (default: the spec's).
        overwrite: replace an earlier study in `out`.
        allow_large_rho: acknowledge a budget above the cap.
        areas: area type -> area file, scored off the spine (default: synthetic districts).

    Returns:
        The `Study` (`Study.meta["budgets"]`: each rho and its eps at delta).

    Raises:
        SpecError, InputError, BudgetError, OutDirError, StudyError: a refusal, before anything is drawn.

    Example:
        >>> study = replicate("tiny", out=getfixture("tmp_path") / "s", runs=2, eps=[1.0, 4.0], seed=1,
        ...                   estimators=("topdown",))
        >>> len(study.meta["budgets"])
        2
    """
    from das.research.replicate import Study as Design
    from das.research.replicate import replicate_study

    rhos = ("spec",) if rho is None else _exact_texts(rho, "rho")
    recorded, digest, given = study_spec(spec, persons=persons, units=units, name="study")
    design = Design(spec=recorded, rhos=rhos, runs=runs, eps=() if eps is None else _exact_texts(eps, "eps"),
                    delta=None if delta is None else str(exact(delta, "delta")), estimators=tuple(estimators),
                    queries=tuple(queries), keep=tuple(keep), seed=seed, areas=_area_pairs(areas), inputs_sha256=digest)
    replicate_study(design, out, workers=workers, overwrite=overwrite, allow_large_rho=allow_large_rho, given=given)
    return Study(Path(out))


def _exact_texts(values, name: str) -> tuple[str, ...]:
    """One budget or a list of them (`exact`), as the exact texts a study records."""
    return tuple(str(exact(v, name)) for v in (values if isinstance(values, (list, tuple)) else [values]))


@checked
def metrics(release, *, truth=None, against=None, out: str | os.PathLike | None = None,
            estimators: tuple[str, ...] | None = None, queries: tuple[str, ...] = DEFAULT_QUERIES,
            keep: tuple[str, ...] = ("total",), areas: Mapping[str, str | os.PathLike] | None = None) -> Study:
    """One release, or one estimate (das.postprocess with an estimator), scored against the confidential truth, or
    against another release or estimate of the same geography, as `das metrics` scores it.

    Args:
        release: a `Release` or its directory (a TopDown release, or a synthetic one), or an estimate's directory.
        truth: (persons, units), paths or DataFrames (default: the run's own input files; a release made from
            DataFrames, a published bundle or an estimate has none: give its truth).
        against: a release or estimate (a `Release`, an `Estimate` or a directory) to score against instead of the
            truth: every error is then a difference from it, from public files alone.
        out: the study's directory (default: beside the release, RUN_DIR-metrics).
        estimators: which to score (topdown, noisy, wls; a synthetic release or an estimate: its own).
        queries: the queries scored.
        keep: the queries whose per-geounit errors are kept.
        areas: area type -> area file, scored off the spine beside its levels (default: synthetic districts).

    Returns:
        The `Study`.

    Raises:
        StudyError: truth not a pair, or not to be found; truth and against both given; against not of the same
            schema and levels. InputError: the truth cannot be read.

    Example:
        >>> from das.api import run
        >>> study = metrics(run("tiny", out=getfixture("tmp_path") / "r", seed=1, progress=False))
        >>> "block" in set(study.metrics["level"])
        True
    """
    from das.research.evaluate import evaluate_run, metrics_dir

    path = Path(getattr(release, "path", release))
    out = Path(out) if out is not None else metrics_dir(path)
    given = None if truth is None else (source_of("persons", truth[0]), source_of("units", truth[1]))
    evaluate_run(path, truth=given, against=None if against is None else Path(getattr(against, "path", against)),
                 out=out, estimators=estimators and tuple(estimators), queries=tuple(queries), keep=tuple(keep),
                 areas=_area_pairs(areas))
    return Study(out)


def _area_pairs(areas: Mapping | None) -> tuple[tuple[str, str], ...]:
    """area type -> file as the (type, path) pairs a study records (none: synthetic districts)."""
    return tuple((str(t), os.fspath(p)) for t, p in (areas or {}).items())


@checked
def compare(spec, *, out: str | os.PathLike, mechanisms: tuple[str, ...] = ("topdown",), seeds: int = 20, rho=None,
            eps=None, delta=None,
            attack_blocks: int = 10, attack_seeds: int | None = None, attack_runs: int = 20, attack_relaxed: int = 300,
            attack_steps: int = 300, tables: str | None = None, workers: int = 1, overwrite: bool = False,
            allow_large_rho: bool = False, persons=None, units=None) -> Study:
    """TopDown, the research estimators and other mechanisms on the same input, budget and seeds, as `das compare`
    runs them: error, bias, cost and reconstruction-attack match rates side by side.

    Args:
        spec: a shipped name, a path to a run spec .toml or a dict.
        out: the comparison's directory (confidential).
        mechanisms: topdown and any of `das synth`'s (a tuple, or a comma-separated string).
        seeds: releases per mechanism.
        rho, eps, delta: the persons budget of every release (exact, as in `das.run`); delta is the spec's own,
            at which every release is certified (another is refused).
        attack_blocks, attack_seeds, attack_runs, attack_relaxed, attack_steps: the reconstruction attack's
            geounits, releases attacked, and RAP-Rank's runs, relaxed records and steps.
        tables: the attack's workload (specs/attack; default the schema's).
        workers: processes (default 1).
        overwrite: replace an earlier comparison in `out`.
        allow_large_rho: acknowledge a budget above the cap.
        persons, units: the input and truth, paths or DataFrames (default: the spec's).

    Returns:
        The `Study` of the comparison (`frame("comparison")`, `frame("attack_rates")`...).

    Raises:
        SpecError, InputError, BudgetError, OutDirError, StudyError, MechanismError: a refusal, before anything
            is drawn.

    Example:
        >>> study = compare("tiny", out=getfixture("tmp_path") / "c", mechanisms="flat", seeds=1, attack_blocks=0)
        >>> list(study.frame("comparison")["estimator"])
        ['flat']
    """
    from das.research import compare as comparing

    if isinstance(mechanisms, str):
        mechanisms = tuple(m.strip() for m in mechanisms.split(",") if m.strip())
    recorded, digest, given = study_spec(spec, persons=persons, units=units, name="comparison")
    comparison = comparing.Comparison(
        spec=recorded, mechanisms=tuple(mechanisms), seeds=seeds,
        rho=_compare_rho(given if given is not None else recorded, rho, eps, delta),
        attack_blocks=attack_blocks, attack_seeds=attack_seeds, attack_runs=attack_runs,
        attack_relaxed=attack_relaxed, attack_steps=attack_steps, attack_tables=tables,
        allow_large_rho=allow_large_rho, inputs_sha256=digest)
    comparing.run_comparison(comparison, out, workers=workers, overwrite=overwrite, given=given)
    return Study(Path(out))


def _compare_rho(spec, rho, eps, delta) -> str | None:
    """das compare's persons budget as exact rho text (None: the spec's own): `rho`, or the largest rho certified
    within `eps` at the spec's delta; a `delta` other than the spec's is refused (SpecError): every release of the
    comparison is certified at the spec's."""
    from das.api.budget import rho_for_eps
    from das.api.release import budget_given
    from das.core.errors import SpecError
    from das.driver.runspec import load_run_spec

    given = budget_given(rho, eps, delta)
    if given is None:
        return None
    if given.delta is not None or given.eps is not None:
        spec_delta = load_run_spec(spec).delta
        if given.delta is not None and given.delta != spec_delta:
            raise SpecError(f"delta: das compare certifies every release at the spec's [privacy] delta "
                            f"({spec_delta}), not {given.delta}: give that delta or set it in the spec")
        if given.eps is not None:
            return str(rho_for_eps(given.eps, spec_delta))
    return None if given.rho is None else str(given.rho)
