"""Strategies as data (`specs/strategies/*.toml`): per-level and per-query shares of rho.

Every share is an exact `Fraction`. A strategy is valid for a run only if its levels are the
run's levels in order, every query is a query of the schema, and the shares sum to exactly 1
across levels and within each level: the accountant refuses anything else.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

from das.runspec import parse_fraction
from das.schema import Schema, SpecError, load_toml, parse_query_name, resolve_spec


@dataclass(frozen=True)
class LevelShare:
    level: str
    rho_share: Fraction
    queries: tuple[tuple[str, Fraction], ...]  # (query name, share of the level's rho)


@dataclass(frozen=True)
class Strategy:
    name: str
    schema: str
    description: str
    rho: Fraction | None
    delta: Fraction | None
    levels: tuple[LevelShare, ...]
    source: str

    @property
    def level_names(self) -> tuple[str, ...]:
        return tuple(lv.level for lv in self.levels)


def load_strategy(name_or_path: str | Path) -> Strategy:
    path = resolve_spec(name_or_path, "strategies")
    spec = load_toml(path)
    where = str(path)
    levels = []
    for level, body in spec.get("levels", {}).items():
        if not isinstance(body, dict) or "rho_share" not in body or "queries" not in body:
            raise SpecError(f"{where}: [levels.{level}] needs `rho_share` and a `queries` table")
        queries = tuple(
            (str(q), parse_fraction(share, f"{where}: levels.{level}.queries.{q!r}"))
            for q, share in body["queries"].items()
        )
        levels.append(LevelShare(level, parse_fraction(body["rho_share"], f"{where}: levels.{level}.rho_share"), queries))
    if not levels:
        raise SpecError(f"{where}: no [levels.*] tables")
    if "schema" not in spec:
        raise SpecError(f"{where}: missing `schema`")
    return Strategy(
        name=spec.get("name", path.stem),
        schema=spec["schema"],
        description=spec.get("description", ""),
        rho=parse_fraction(spec["rho"], f"{where}: rho") if "rho" in spec else None,
        delta=parse_fraction(spec["delta"], f"{where}: delta") if "delta" in spec else None,
        levels=tuple(levels),
        source=where,
    )


def validate_strategy(strategy: Strategy, schema: Schema, levels: tuple[str, ...]) -> None:
    """Raise SpecError unless the strategy fits this schema and hierarchy exactly."""
    where = strategy.source
    if strategy.schema != schema.name:
        raise SpecError(f"{where}: strategy is for schema {strategy.schema!r}, the run uses {schema.name!r}")
    if strategy.level_names != tuple(levels):
        raise SpecError(f"{where}: strategy levels {list(strategy.level_names)} are not the run's levels {list(levels)}")
    total = sum((lv.rho_share for lv in strategy.levels), Fraction(0))
    if total != 1:
        raise SpecError(f"{where}: level rho_shares sum to {total}, not exactly 1")
    for lv in strategy.levels:
        names = [q for q, _ in lv.queries]
        if len(set(names)) != len(names):
            raise SpecError(f"{where}: level {lv.level} lists a query twice")
        if not names:
            raise SpecError(f"{where}: level {lv.level} measures no query")
        for q in names:
            parse_query_name(schema, q)  # SpecError naming the bad factor
        within = sum((s for _, s in lv.queries), Fraction(0))
        if within != 1:
            raise SpecError(f"{where}: query shares of level {lv.level} sum to {within}, not exactly 1")
