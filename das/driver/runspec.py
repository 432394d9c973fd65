"""Run specs (`specs/runs/*.toml`): which inputs, hierarchy, schemas, strategies and budget.

A run spec is the whole description of a release, so the manifest can record it verbatim.
Input paths and area files are relative to the spec file (or absolute).
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from fractions import Fraction
from pathlib import Path
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, model_validator

from das.core.errors import SpecError, option
from das.io.areas import TYPE_NAME as AREA_TYPE
from das.io.tabular import Source
from das.model import specfile
from das.model.geography import level_digits
from das.model.levels import DEFAULT_LEVELS
from das.model.schema import resolve_spec
from das.model.specfile import Exact, Section
from das.model.spine import SPINES  # [geography] spine: the levels as geocode prefixes, or optimized for declared areas
from das.privacy.certificate import delta_text, fraction_text
from das.topdown.rounding import DEFAULT_ROUNDING, check_rounding
from das.topdown.solvers import DEFAULT_SOLVER, check_solver

DEFAULT_DELTA = Fraction(1, 10**10)  # [privacy] delta when a spec states none (das validate recomputes certificates with it)


@dataclass(frozen=True)
class ReleaseSpec:
    """One histogram released under one strategy: persons (PL94/DHC) or housing units (H1)."""

    schema: str
    strategy: str
    rho: Fraction | None  # None: the strategy's own default budget (or the one `eps` gives)
    eps: Fraction | None = None  # the budget as eps at the run's delta: the largest rho certified within it


@dataclass(frozen=True)
class RunSpec:
    name: str
    description: str
    path: Path | None  # None: a spec given as a dict (das.api)
    persons_path: Source  # a file, or a DataFrame's text held in memory (das.api)
    units_path: Source
    levels: tuple[str, ...]
    persons: ReleaseSpec
    units: ReleaseSpec | None
    delta: Fraction
    seed: int | None  # set => replication mode, outputs are labelled not private
    tables: str
    mdf_layout: str
    pl94171: bool  # [output] pl94171 = true: also the PL 94-171 summary files, in RUN_DIR/pl94171/
    rounding: str
    solver: str
    passes: tuple[tuple[str, ...], ...]  # L2 passes: query names fitted per pass; [] = all remaining
    text: str  # the spec file verbatim, for the manifest
    passes_by_level: dict = field(default_factory=dict)  # level -> its own passes, where they differ
    overrides: str = ""  # a budget given on the command line (--rho, --eps, --delta), as typed
    budget: Budget | None = None  # that budget itself: the published spec states it (`budget_table`)
    areas: dict[str, Path] = field(default_factory=dict)  # [geography] areas: area type -> its file (das.io.areas)
    areas_as_written: dict[str, str] = field(default_factory=dict)  # those paths as the spec writes them, for messages
    spine: str = "standard"  # [geography] spine: "standard" or "optimized" (for the declared areas)

    @property
    def origin(self) -> str:
        """The spec as messages name it: its file, or "the spec dict"."""
        return DICT_SPEC if self.path is None else str(self.path)

    @property
    def fingerprint_text(self) -> str:
        """What a resumed run must match: the spec, and any budget the command line gave."""
        return self.text if not self.overrides else f"{self.text}\n# command line: {self.overrides}\n"

    def budget_table(self) -> dict[str, dict[str, str]]:
        """The command line's budget as the spec keys it stands for ([persons] rho or eps, [privacy] delta),
        so the published spec states the budget the release was made with (das.frame.bundle.public_spec)."""
        if not self.budget:
            return {}
        table: dict[str, dict[str, str]] = {}
        if self.budget.rho is not None or self.budget.eps is not None:
            key, value = ("rho", self.budget.rho) if self.budget.rho is not None else ("eps", self.budget.eps)
            table["persons"] = {key: fraction_text(value)}
        if self.budget.delta is not None:
            table["privacy"] = {"delta": delta_text(self.budget.delta)}
        return table


@dataclass(frozen=True)
class Budget:
    """A persons budget (and a delta for the whole run) given on the command line: --rho or --eps, --delta."""

    rho: Fraction | None = None
    eps: Fraction | None = None
    delta: Fraction | None = None

    def __post_init__(self):
        if self.rho is not None and self.eps is not None:
            raise SpecError(f"{option('rho')} and {option('eps')} both set the persons budget: give one")
        if self.delta is not None and not 0 < self.delta < 1:
            raise SpecError(f"{option('delta')} must be strictly between 0 and 1, got {self.delta}")

    def __bool__(self) -> bool:
        return any(v is not None for v in (self.rho, self.eps, self.delta))

    def text(self) -> str:
        return " ".join(f"--{k} {v}" for k, v in (("rho", self.rho), ("eps", self.eps), ("delta", self.delta))
                        if v is not None)


# ---------------------------------------------------------------------------------------------
# The spec file, declared once (das.model.specfile reads it against this, every problem in one pass)


def _levels(levels: list[str]) -> list[str]:
    level_digits(tuple(levels))
    return levels


def _solver(value: str) -> str:
    return check_solver(value)


def _rounding(value: str) -> str:
    return check_rounding(value)


def _below_one(value: Fraction) -> Fraction:
    if value >= 1:
        raise ValueError(f"must be strictly between 0 and 1, got {specfile.shown(str(value))}")
    return value


Passes = Annotated[list[list[str]], Field(min_length=1, description='a non-empty list of lists of query names, e.g. '
                                                                    '[["hhgq"], []] ([] = every query not fitted yet)')]


class InputSection(Section):
    persons: str = Field(min_length=1, description="a Parquet or CSV file, or a directory of one file per state")
    units: str = Field(min_length=1, description="a Parquet or CSV file, or a directory of one file per state")


class ReleaseSection(Section):
    schema_name: str = Field(alias="schema", min_length=1, description="a schema name (specs/schemas) or a .toml path")
    strategy: str = Field(min_length=1, description="a strategy name (specs/strategies) or a .toml path")
    rho: Exact | None = Field(None, description="the zCDP budget, " + specfile.FRACTION_FORMS)
    eps: Exact | None = Field(None, description="the budget as eps at [privacy] delta, " + specfile.FRACTION_FORMS)

    @model_validator(mode="after")
    def _one_budget(self):
        if self.rho is not None and self.eps is not None:
            raise ValueError("rho and eps both set the budget of a release: give one")
        return self


class PrivacySection(Section):
    delta: Annotated[Exact, AfterValidator(_below_one)] = Field(DEFAULT_DELTA, description="an exact fraction in (0, 1)")
    seed: int | None = Field(None, ge=0, description="a nonnegative integer: replication mode, NOT private")


class OutputSection(Section):
    tables: str = Field("pl94", min_length=1, description="a table set of specs/tables (pl94, dhc)")
    mdf_layout: Literal["parquet", "pipe"] = Field("parquet", description="'parquet' or 'pipe'")
    pl94171: bool = Field(False, description="true or false")


class PostprocessSection(Section):
    solver: Annotated[str, AfterValidator(_solver)] = Field(DEFAULT_SOLVER, description="CLARABEL or cvxpy:NAME")
    rounding: Annotated[str, AfterValidator(_rounding)] = Field(DEFAULT_ROUNDING, description="a rounding method")
    passes: Passes = [[]]
    passes_by_level: dict[str, Passes] = Field({}, description="a table of level = [[query, ...], ...], each level's "
                                                               "passes a non-empty list of lists of query names")


def _area_types(areas: dict[str, str]) -> dict[str, str]:
    bad = [name for name in areas if not AREA_TYPE.fullmatch(name)]
    if bad:
        raise ValueError(f"area type {specfile.shown(bad[0])} is not a simple name: expected letters, digits and "
                         "underscores, not starting with a digit (it becomes a column name)")
    return areas


class GeographySection(Section):
    areas: Annotated[dict[str, Annotated[str, Field(min_length=1)]], AfterValidator(_area_types)] = Field(
        {}, description='a table of area type = file path (.parquet or .csv), e.g. { place = "places.parquet" }')
    spine: Literal[SPINES] = Field("standard", description=" or ".join(map(repr, SPINES)))


class RunSpecFile(Section):
    """A run spec as written (specs/runs/*.toml): every key, its type and its default."""

    name: str | None = Field(None, description="a name")
    description: str = Field("", description="text")
    levels: Annotated[list[str], AfterValidator(_levels)] = Field(
        list(DEFAULT_LEVELS), min_length=1, description=f"a list of levels from nation to block, e.g. {list(DEFAULT_LEVELS)}")
    input: InputSection = Field(description="[input] persons and units: the confidential files")
    persons: ReleaseSection = Field(description="[persons] schema and strategy: the persons release, which every "
                                                "run has (the units are post-processed within bounds from its household "
                                                "persons, so there is no units-only release)")
    units: ReleaseSection | None = Field(None, description="[units] schema and strategy: the units release")
    privacy: PrivacySection = PrivacySection()
    output: OutputSection = OutputSection()
    postprocess: PostprocessSection = PostprocessSection()
    geography: GeographySection = GeographySection()

    @model_validator(mode="after")
    def _consistent(self):
        unknown = sorted(set(self.postprocess.passes_by_level) - set(self.levels))
        if unknown:
            raise ValueError(f"[postprocess.passes_by_level] names {unknown}, not levels of this run {list(self.levels)}")
        if self.output.pl94171 and self.units is None:
            raise ValueError("[output] pl94171 needs a [units] release (the files carry table H1)")
        if self.geography.spine == "optimized" and not self.geography.areas:
            raise ValueError('[geography] spine = "optimized" needs areas to optimize for: declare them in [geography] '
                             'areas, e.g. areas = { place = "places.parquet" }, or use spine = "standard"')
        return self


DICT_SPEC = "the spec dict"  # what a spec given as a dict (das.api) is called in messages


def load_run_spec(given: str | Path | Mapping | RunSpec, seed: int | None = None,
                  budget: Budget | None = None) -> RunSpec:
    """The run spec of a shipped name, a path or a dict of what a spec file holds (das.api; relative paths from
    the working directory), checked whole (every problem in one SpecError) before any input is opened; a RunSpec
    as it is. `seed` and `budget` (the command line's) override the spec's."""
    if isinstance(given, RunSpec):
        spec = given if seed is None else replace(given, seed=seed)
        return with_budget(spec, budget) if budget else spec
    if isinstance(given, Mapping):
        raw, path, text = dict(given), None, specfile.toml_text(given)  # a float is refused here, as in a file
        root = Path.cwd()
    else:
        path = resolve_spec(given, "runs")
        raw = specfile.load_toml(path)  # first: a loop, a directory, no permission or not UTF-8 is named as such
        path = path.resolve()
        text, root = path.read_text(), path.parent
    data = specfile.check(raw, RunSpecFile, DICT_SPEC if path is None else str(path))

    def input_path(raw: str) -> Path:
        p = Path(raw)
        return p if p.is_absolute() else specfile.real_path(root / p)

    def release(section: ReleaseSection | None) -> ReleaseSpec | None:
        return None if section is None else ReleaseSpec(section.schema_name, section.strategy, section.rho, section.eps)

    post, output = data.postprocess, data.output
    spec = RunSpec(
        name=data.name if data.name is not None else (path.stem if path is not None else "spec"),
        description=data.description,
        path=path,
        persons_path=input_path(data.input.persons),
        units_path=input_path(data.input.units),
        levels=tuple(data.levels),
        persons=release(data.persons),
        units=release(data.units),
        delta=data.privacy.delta,
        seed=seed if seed is not None else data.privacy.seed,
        tables=output.tables,
        mdf_layout=output.mdf_layout,
        pl94171=output.pl94171,
        rounding=post.rounding,
        solver=post.solver,
        passes=_passes(post.passes),
        passes_by_level={level: _passes(v) for level, v in post.passes_by_level.items()},
        text=text,
        areas={name: input_path(raw) for name, raw in data.geography.areas.items()},
        areas_as_written=dict(data.geography.areas),
        spine=data.geography.spine,
    )
    return with_budget(spec, budget) if budget else spec


def with_inputs(spec: RunSpec, *, persons: Source | None = None, units: Source | None = None) -> RunSpec:
    """The spec reading other inputs (a path, or a DataFrame's text held in memory: das.io.tabular.InMemory), its
    text's [input] saying which (a DataFrame by what it is called), so a resumed run's fingerprint covers them."""
    given = {key: value for key, value in (("persons", persons), ("units", units)) if value is not None}
    if not given:
        return spec
    data = tomllib.loads(spec.text)
    data["input"] = {**data.get("input", {}), **{key: str(value) for key, value in given.items()}}
    return replace(spec, text=specfile.toml_text(data), persons_path=given.get("persons", spec.persons_path),
                   units_path=given.get("units", spec.units_path))


def portable_data(spec: RunSpec, **inputs: Path) -> dict:
    """The spec's content with its inputs and area files as absolute paths (`inputs` in place of its own), so a
    copy of it written anywhere reads the same files (das compare's releases, in processes of their own)."""
    data = tomllib.loads(spec.text)
    paths = {"persons": spec.persons_path, "units": spec.units_path, **inputs}
    data["input"] = {**data.get("input", {}), **{key: str(path) for key, path in paths.items()}}
    if spec.areas:
        data.setdefault("geography", {})["areas"] = {name: str(path) for name, path in spec.areas.items()}
    return data


def with_budget(spec: RunSpec, budget: Budget) -> RunSpec:
    """The spec with the command line's persons budget (--rho or --eps) and delta (--delta)."""
    persons = spec.persons
    if budget.rho is not None or budget.eps is not None:
        persons = replace(persons, rho=budget.rho, eps=budget.eps)
    delta = budget.delta if budget.delta is not None else spec.delta
    return replace(spec, persons=persons, delta=delta, overrides=budget.text(), budget=budget)


def _passes(value: list[list[str]]) -> tuple[tuple[str, ...], ...]:
    return tuple(tuple(names) for names in value)


