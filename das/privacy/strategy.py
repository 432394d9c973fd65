"""Strategies as data (`specs/strategies/*.toml`): how a release splits its rho over levels and queries.

A strategy is a table of exact fractions, not a class: each geography level gets a `rho_share`
of the total rho, and each query measured at that level a share of the level's rho, so

    rho(level, query) = rho x level.rho_share x query share,    sigma^2 = 1 / rho(level, query).

Every number is an exact `Fraction`, written in the spec as an integer or a string ("3773/4097",
"0.398", "1e-10"); a TOML float is refused because it is already rounded. A strategy fits a run
only if its levels are the run's levels in order, every query is a query of the schema, and the
shares are positive and sum to exactly 1 across levels and within every level.

>>> s = load_strategy("pl94_production_2020")
>>> s.level_names
('nation', 'state', 'county', 'tract', 'block_group', 'block')
>>> s.level("block").share("detailed")
Fraction(3945, 4097)
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

from pydantic import Field

from das.core.errors import (
    BudgetError,
    SpecError,
)
from das.model import specfile
from das.model.schema import QUERY_SEPARATOR, Schema, parse_query_name, resolve_spec
from das.model.specfile import Exact, Section, parse_fraction

__all__ = ["LevelShare", "Strategy", "StrategyFile", "check_shares", "load_strategy", "parse_fraction",
           "strategy_from_dict", "validate_strategy"]


class LevelSection(Section):
    rho_share: Exact = Field(description="the level's share of rho, " + specfile.FRACTION_FORMS)
    queries: dict[str, Exact] = Field(min_length=1, description='a non-empty table { "query name" = "share" }')
    description: str = ""


class StrategyFile(Section):
    """A strategy spec as written (specs/strategies/*.toml)."""

    name: str | None = None
    schema_name: str = Field(alias="schema", min_length=1, description="the schema this strategy measures")
    description: str = ""
    rho: Exact | None = Field(None, description="the default budget, " + specfile.FRACTION_FORMS)
    delta: Exact | None = Field(None, description="the default delta, " + specfile.FRACTION_FORMS)
    levels: dict[str, LevelSection] = Field(min_length=1, description="[levels.<name>] tables")


def check_shares(strategy: Strategy) -> None:
    """Raise BudgetError unless every share is positive and shares sum to exactly 1 (Fraction equality).

    Level rho_shares must sum to 1 over the levels, and the query shares of each level to 1.
    """
    where = strategy.source
    for lv in strategy.levels:
        if not isinstance(lv.rho_share, Fraction) or lv.rho_share <= 0:
            raise BudgetError(f"{where}: levels.{lv.level}.rho_share must be a positive Fraction, got {lv.rho_share!r}")
        if not lv.queries:
            raise BudgetError(f"{where}: levels.{lv.level} measures no query")
        for query, share in lv.queries:
            if not isinstance(share, Fraction) or share <= 0:
                raise BudgetError(f"{where}: levels.{lv.level}.queries.{query!r} must be a positive Fraction, got {share!r}")
    total = sum((lv.rho_share for lv in strategy.levels), Fraction(0))
    if total != 1:
        raise BudgetError(f"{where}: level rho_shares sum to {total}, not exactly 1 (off by {total - 1})")
    for lv in strategy.levels:
        within = sum((s for _, s in lv.queries), Fraction(0))
        if within != 1:
            raise BudgetError(f"{where}: query shares of level {lv.level} sum to {within}, not exactly 1 "
                              f"(off by {within - 1})")


@dataclass(frozen=True)
class LevelShare:
    """One level of a strategy: its share of the total rho and the queries measured there."""

    level: str
    rho_share: Fraction
    queries: tuple[tuple[str, Fraction], ...]  # (query name, share of the level's rho), in spec order

    @property
    def query_names(self) -> tuple[str, ...]:
        return tuple(q for q, _ in self.queries)

    def share(self, query: str) -> Fraction:
        for q, s in self.queries:
            if q == query:
                return s
        raise KeyError(f"level {self.level!r} measures no query {query!r}; it measures {list(self.query_names)}")


@dataclass(frozen=True)
class Strategy:
    """A named table of exact shares for one schema; `rho`/`delta` are defaults a run may override."""

    name: str
    schema: str
    description: str
    rho: Fraction | None
    delta: Fraction | None
    levels: tuple[LevelShare, ...]
    source: str  # the spec file, for messages

    @property
    def level_names(self) -> tuple[str, ...]:
        return tuple(lv.level for lv in self.levels)

    def level(self, name: str) -> LevelShare:
        for lv in self.levels:
            if lv.level == name:
                return lv
        raise KeyError(f"strategy {self.name!r} has no level {name!r}; it has {list(self.level_names)}")


def load_strategy(name_or_path: str | Path) -> Strategy:
    """Load a strategy spec by shipped name ("pl94_five_level") or by path.

    Refuses (SpecError) anything malformed: unknown keys, a level without queries, a share that
    is not an exact positive fraction. Fitness for a schema and a hierarchy is `validate_strategy`.
    """
    path = resolve_spec(name_or_path, "strategies")
    return strategy_from_dict(specfile.load_toml(path), source=str(path))


def strategy_from_dict(spec: dict, source: str = "<dict>") -> Strategy:
    """The Strategy a parsed strategy spec describes (checked whole against StrategyFile)."""
    data = specfile.check(spec, StrategyFile, source)
    levels = tuple(LevelShare(str(level), body.rho_share, tuple(body.queries.items())) for level, body in data.levels.items())
    return Strategy(
        name=data.name if data.name is not None else Path(source).stem,
        schema=data.schema_name,
        description=data.description,
        rho=data.rho,
        delta=data.delta,
        levels=levels,
        source=source,
    )


def validate_strategy(strategy: Strategy, schema: Schema, levels: tuple[str, ...] | list[str]) -> None:
    """Raise SpecError unless the strategy fits this schema and hierarchy exactly.

    Checks: the strategy is for `schema`; its levels are exactly `levels`, in order; every query
    is a query of the schema, written in its canonical form ("votingage x hispanic"), and no
    level measures the same marginal twice; every share is positive and the shares sum to
    exactly 1 across levels and within each level (BudgetError, a SpecError, otherwise).
    """
    where = strategy.source
    if strategy.schema != schema.name:
        raise SpecError(f"{where}: strategy {strategy.name!r} is for schema {strategy.schema!r}, the run uses {schema.name!r}")
    if strategy.level_names != tuple(levels):
        raise SpecError(f"{where}: strategy levels {list(strategy.level_names)} are not the run's levels {list(levels)}")
    if strategy.delta is not None and strategy.delta >= 1:
        raise SpecError(f"{where}: delta must be below 1, got {strategy.delta}")
    for lv in strategy.levels:
        seen: dict[frozenset, str] = {}
        for q in lv.query_names:
            try:
                factors = parse_query_name(schema, q)
            except SpecError as e:
                raise SpecError(f"{where}: levels.{lv.level}: {e}") from None
            canonical = q.strip() if q.strip() in ("total", "detailed") else QUERY_SEPARATOR.join(factors)
            if q != canonical:
                raise SpecError(f"{where}: levels.{lv.level}: write query {q!r} as {canonical!r}")
            key = frozenset(factors)
            if key in seen:
                raise SpecError(f"{where}: levels.{lv.level} measures the same marginal twice: {seen[key]!r} and {q!r}")
            seen[key] = q
    check_shares(strategy)
