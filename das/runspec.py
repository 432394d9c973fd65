"""Run specs (`specs/runs/*.toml`): which inputs, hierarchy, schemas, strategies and budget.

A run spec is the whole description of a release, so the manifest can record it verbatim.
Input paths are relative to the spec file (or absolute).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path

from das.geography import DEFAULT_LEVELS, level_digits
from das.privacy.strategy import parse_fraction
from das.schema import SpecError, load_toml, resolve_spec
from das.topdown.solve import DEFAULT_ROUNDING, DEFAULT_SOLVER, check_rounding, check_solver

DEFAULT_DELTA = "1e-10"  # [privacy] delta when a spec states none (das validate recomputes certificates with it)


@dataclass(frozen=True)
class Release:
    """One histogram released under one strategy: persons (PL94/DHC) or housing units (H1)."""

    schema: str
    strategy: str
    rho: Fraction | None  # None: the strategy's own default budget


@dataclass(frozen=True)
class RunSpec:
    name: str
    description: str
    path: Path
    persons_path: Path
    units_path: Path
    levels: tuple[str, ...]
    persons: Release
    units: Release | None
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


def load_run_spec(name_or_path: str | Path, seed: int | None = None) -> RunSpec:
    path = resolve_spec(name_or_path, "runs").resolve()
    spec = load_toml(path)

    def section(key: str, required: bool = True) -> dict | None:
        value = spec.get(key)
        if value is None and required:
            raise SpecError(f"{path}: missing section [{key}]")
        if value is not None and not isinstance(value, dict):
            raise SpecError(f"{path}: [{key}] must be a table")
        return value

    def input_path(key: str) -> Path:
        raw = section("input").get(key)
        if not raw:
            raise SpecError(f"{path}: [input] needs `{key}` (a Parquet or CSV file)")
        p = Path(raw)
        return p if p.is_absolute() else (path.parent / p).resolve()

    def release(key: str, required: bool) -> Release | None:
        s = section(key, required)
        if s is None:
            return None
        for name in ("schema", "strategy"):
            if name not in s:
                raise SpecError(f"{path}: [{key}] needs `{name}`")
        rho = parse_fraction(s["rho"], f"{path}: [{key}] rho") if "rho" in s else None
        return Release(s["schema"], s["strategy"], rho)

    levels = tuple(spec.get("levels", DEFAULT_LEVELS))
    try:
        level_digits(levels)
    except ValueError as e:
        raise SpecError(f"{path}: levels: {e}") from None
    privacy = section("privacy", required=False) or {}
    output = section("output", required=False) or {}
    post = section("postprocess", required=False) or {}
    if seed is None and "seed" in privacy:
        seed = int(privacy["seed"])
    layout = output.get("mdf_layout", "parquet")
    if layout not in ("parquet", "pipe"):
        raise SpecError(f"{path}: [output] mdf_layout must be 'parquet' or 'pipe', not {layout!r}")
    try:
        solver = check_solver(str(post.get("solver", DEFAULT_SOLVER)))
    except ValueError as e:
        raise SpecError(f"{path}: [postprocess] solver: {e}") from None
    try:
        rounding = check_rounding(str(post.get("rounding", DEFAULT_ROUNDING)))
    except ValueError as e:
        raise SpecError(f"{path}: [postprocess] {e}") from None
    if output.get("pl94171") and spec.get("units") is None:
        raise SpecError(f"{path}: [output] pl94171 needs a [units] release (the files carry table H1)")
    return RunSpec(
        name=spec.get("name", path.stem),
        description=spec.get("description", ""),
        path=path,
        persons_path=input_path("persons"),
        units_path=input_path("units"),
        levels=levels,
        persons=release("persons", True),
        units=release("units", False),
        delta=parse_fraction(privacy.get("delta", DEFAULT_DELTA), f"{path}: [privacy] delta"),
        seed=seed,
        tables=output.get("tables", "pl94"),
        mdf_layout=layout,
        pl94171=_flag(output, "pl94171", f"{path}: [output] pl94171"),
        rounding=rounding,
        solver=solver,
        passes=_passes(post.get("passes", [[]]), f"{path}: [postprocess] passes"),
        passes_by_level=_passes_by_level(post.get("passes_by_level", {}), levels, path),
        text=path.read_text(),
    )


def _flag(section: dict, key: str, where: str) -> bool:
    value = section.get(key, False)
    if not isinstance(value, bool):
        raise SpecError(f"{where} must be true or false, not {value!r}")
    return value


def _passes(value, where: str) -> tuple[tuple[str, ...], ...]:
    """L2 passes: a list of lists of query names (an empty list: every query not fitted yet)."""
    if not isinstance(value, list) or not value or not all(isinstance(names, list) for names in value):
        raise SpecError(f"{where}: expected a non-empty list of lists of query names, e.g. [[\"hhgq\"], []]")
    return tuple(tuple(str(q) for q in names) for names in value)


def _passes_by_level(value, levels: tuple[str, ...], path: Path) -> dict[str, tuple[tuple[str, ...], ...]]:
    if not isinstance(value, dict):
        raise SpecError(f"{path}: [postprocess.passes_by_level] must be a table of level = [[query, ...], ...]")
    unknown = sorted(set(value) - set(levels))
    if unknown:
        raise SpecError(f"{path}: [postprocess.passes_by_level] names {unknown}, not levels of this run {list(levels)}")
    return {level: _passes(v, f"{path}: [postprocess.passes_by_level] {level}") for level, v in value.items()}
