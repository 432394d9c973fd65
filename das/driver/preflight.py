"""Preflight: everything that can be refused is refused before noise is drawn.

A release spends a budget that cannot be spent twice, so a run checks, in this order:
1. the spec and the command line, before any confidential file is opened (`check_spec`):
   solver, rounding, L2 passes, delta, rho (a cap above which `--allow-large-rho` must
   acknowledge it, and a floor below which the noise is unusable and its variance does not fit
   the NMF's int64 columns), workers, engine, that every declared area file ([geography] areas)
   is there (its contents are das/io/areas.py's to check), and the output directory (writable,
   not a file, not something `--overwrite` must not replace: see das/frame/bundle.py);
2. the inputs, once read and validated by das/io/microdata.py (`check_inputs`): that the
   invariants can be met at all (every GQ facility needs a person of its type, within the
   published state and nation totals; occupied housing units against household persons), and
   that the disk holds the outputs.
Every refusal is a `PreflightError` (exit code 2) naming what is wrong and where.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import numpy as np

from das.core import arguments
from das.core.errors import SpecError, option
from das.model.rules import INVARIANT_LEVELS, Invariants, block_bounds

MAX_RHO = Fraction(10)  # above this a run needs --allow-large-rho (2020 production persons: 2.56)
MAX_SIGMA2 = 10**18  # a query noise variance above this (sd 1e9) is refused: useless, and past int64 safety
INT64_MAX = 2**63 - 1  # the NMF stores each variance as int64 numerator / denominator
# The disk estimate (estimate_space): every file a run writes, each term above what the shipped specs' seeded runs
# wrote (tiny: 0.67 MB; Grand Isle: 1.1 MB; Delaware: 44 MB; docs/scale.md), so a run refused for space is refused
# before any noise, and one that passes does not run out mid-release.
BYTES_PER_ANSWER = 2  # NMF bytes per noisy answer, with room for a level's committed parts (measured: 0.8-1)
BYTES_PER_RECORD = 8  # MDF bytes per person or unit (measured: ~2-3.3 in zstd Parquet)
FILE_BYTES = 16 * 1024  # every file: its file-system block and its Parquet footer, schema and metadata
TABLE_COLUMN_BYTES = 2 * 1024  # a table's column: its footer entry and statistics (measured: ~1.3-1.8 KB)
TABLE_CELL_BYTES = 2  # a table's cell, one geounit x one column (measured: 0.3-1)
PL_GEOUNIT_BYTES = 2 * 1024  # PL 94-171 bytes per geounit over the four files (measured: ~0.9 KB)
MANIFEST_BYTES = 64 * 1024  # manifest.json and the operator files (measured: 24-43 KB)
LEVEL_RECORD_BYTES = 8 * 1024  # the manifest's certificate and timings per release and level
CHECKPOINT_BYTES_PER_RECORD = 2  # a solved level's checkpoint, kept until the run completes (measured: <= 1.5)


class PreflightError(SpecError):
    """A run refused before any noise is drawn: what is wrong and where."""


@dataclass(frozen=True)
class SpaceEstimate:
    """Bytes a run will write, against what the output directory's file system has free."""

    needed: int
    free: int
    where: Path

    @property
    def enough(self) -> bool:
        return self.free >= self.needed


ACKNOWLEDGE = "allow_large_rho"  # the one argument, of every command that spends budget, that acknowledges the cap


def check_rho_cap(rho: Fraction, *, allow_large_rho: bool, what: str) -> None:
    """The one cap of every command that spends budget: rho above MAX_RHO only when acknowledged.
    `what` names the budget (a spec's section, or an argument)."""
    if rho > MAX_RHO and not allow_large_rho:
        raise PreflightError(
            f"{what} rho = {float(rho):g} is above {MAX_RHO} (the 2020 persons run used 2.56): such a "
            f"release is barely protected. If that is intended, pass {option(ACKNOWLEDGE, True)}")


def check_budget(name: str, rho: Fraction, delta: Fraction, allocation, *, where: str, allow_large_rho: bool) -> None:
    """rho within [floor, cap] (the cap can be acknowledged), delta in (0, 1), every variance storable."""
    if not 0 < delta < 1:
        raise PreflightError(f"{where}: [privacy] delta must be strictly between 0 and 1, got {float(delta):g}")
    check_rho_cap(rho, allow_large_rho=allow_large_rho, what=f"{where}: [{name}]")
    for item in allocation.items:
        sigma2 = item.sigma2
        if sigma2 > MAX_SIGMA2:
            raise PreflightError(
                f"{where}: [{name}] rho = {float(rho):g} gives {item.level}/{item.query} a noise variance of "
                f"{float(sigma2):.3g} (rho_q = {float(item.rho):.3g}): above {MAX_SIGMA2:.0e}, the answers would be "
                f"noise only; raise rho")
        if sigma2.numerator > INT64_MAX or sigma2.denominator > INT64_MAX:
            raise PreflightError(
                f"{where}: [{name}] rho = {rho} gives {item.level}/{item.query} the variance {sigma2}, whose "
                f"numerator or denominator does not fit the NMF's int64 columns; write rho as a simpler fraction")


def nearest_existing(path: Path) -> Path:
    """The path itself or its closest ancestor that exists."""
    path = Path(os.path.abspath(path))
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def check_writable(out_dir: Path) -> None:
    """The output directory can be created and written (without creating anything now)."""
    out_dir = Path(os.path.abspath(out_dir))
    if out_dir.exists() and not out_dir.is_dir():
        raise PreflightError(f"output directory {out_dir} is a file, not a directory")
    base = nearest_existing(out_dir)
    if not base.is_dir():
        raise PreflightError(f"output directory {out_dir} cannot be created: {base} is a file, not a directory")
    if not os.access(base, os.W_OK | os.X_OK):
        raise PreflightError(f"output directory {out_dir} cannot be written: no write permission on {base}")


def check_workers(workers: int, engine: str) -> None:
    """The rules of das.core.arguments (the API's and the command line's alike): workers >= 1, engine local or dask."""
    arguments.workers(workers)
    arguments.engine(engine)


def given_budget(budget) -> str:
    """A budget given beside the spec (das.driver.runspec.Budget), in the caller's terms: "--rho 100" or "rho=100"."""
    return ", ".join(option(name, value) for name, value in (("rho", budget.rho), ("eps", budget.eps),
                                                               ("delta", budget.delta)) if value is not None)


def check_spec(prep_spec, schemas: dict, strategies: dict, allocations: dict, *, workers: int = 1,
               engine: str = "local", allow_large_rho: bool = False) -> None:
    """Everything about the spec and the command line, before any input file is opened."""
    where = prep_spec.origin + (f" ({given_budget(prep_spec.budget)})" if getattr(prep_spec, "budget", None) else "")
    measured = {q for s in strategies.values() for lv in s.levels for q, _ in lv.queries}
    by_level = [("passes", prep_spec.passes)] + [(f"passes_by_level.{level}", passes)
                                                 for level, passes in getattr(prep_spec, "passes_by_level", {}).items()]
    for key, passes in by_level:
        for number, names in enumerate(passes, 1):
            for query in names:
                if query not in measured:
                    raise PreflightError(f"{where}: [postprocess] {key}: pass {number} names {query!r}, which the "
                                         f"strategies do not measure (measured: {sorted(measured)})")
    for name, allocation in allocations.items():
        check_budget(name, allocation.rho, prep_spec.delta, allocation, where=where, allow_large_rho=allow_large_rho)
    check_workers(workers, engine)
    check_area_files(getattr(prep_spec, "areas", {}), where=where,
                     written=getattr(prep_spec, "areas_as_written", {}))


def check_area_files(areas: dict[str, Path], *, where: str, written: dict[str, str] | None = None) -> None:
    """Every declared area file (area type -> path) exists and is a file, so a mistyped path stops the run
    before its inputs are read; `written`: the paths as the spec writes them, named in the message."""
    problems = []
    for name, path in areas.items():
        key = f"[geography] areas.{name} = {(written or {}).get(name, str(path))!r}"
        if path.is_symlink() and not path.exists():
            problems.append(f"{key}: a symbolic link that reaches no file (a loop, or its target does not exist): "
                            "expected a .parquet or .csv file")
        elif not path.exists():
            problems.append(f"{key}: no such file ({path}; a relative path is relative to the spec file)")
        elif not path.is_file():
            problems.append(f"{key}: not a file ({path} is a directory or a device): expected a .parquet or .csv file")
    if problems:
        raise PreflightError(f"{where}: " + "; ".join(problems))


def estimate_space(geography, schemas: dict, allocations: dict, *, n_records: int, out_dir: Path,
                   table_columns: tuple[int, ...] = (), pl94171: bool = False) -> SpaceEstimate:
    """A generous estimate of the bytes a run writes (NMF, MDF, tables, PL 94-171 files, manifest and
    operator files, checkpoints), and the free bytes where they go. `table_columns`: the columns of each
    table written; `pl94171`: the PL 94-171 files are written too."""
    answers = 0
    for name, allocation in allocations.items():
        answers += sum(geography.n_units(m.level) * schemas[name].query(m.query).size for m in allocation.items)
    levels = len(allocations) * len(geography.levels)  # (release, level) pairs: an NMF file and a checkpoint each
    geounits = sum(geography.n_units(level) for level in geography.levels)
    needed = (answers * BYTES_PER_ANSWER + levels * FILE_BYTES  # the NMF
              + n_records * BYTES_PER_RECORD + len(allocations) * FILE_BYTES  # the MDFs
              + sum(columns * (TABLE_COLUMN_BYTES + geounits * TABLE_CELL_BYTES) + FILE_BYTES for columns in table_columns)
              + ((geounits * PL_GEOUNIT_BYTES + 4 * FILE_BYTES) if pl94171 else 0)
              + MANIFEST_BYTES + levels * LEVEL_RECORD_BYTES
              + levels * (n_records * CHECKPOINT_BYTES_PER_RECORD + FILE_BYTES))  # checkpoints, until the run completes
    base = nearest_existing(out_dir)
    return SpaceEstimate(needed, shutil.disk_usage(base).free, base)


def feasibility_problems(schema, inventory, person_histograms, geography) -> list[str]:
    """Invariants the post-processing could not meet, found in the inputs before measuring.

    For every constraint family of the schema, the published total population of each state
    (and of the nation) must lie between the sum of its blocks' lower bounds and of their upper
    bounds; occupied housing units need household persons (at least one each) and household
    persons need an occupied unit in their block.
    """

    invariants = Invariants.from_inputs(inventory, person_histograms, geography)
    problems = []
    for bounds in block_bounds(schema, invariants):
        low = bounds.lower.sum(axis=1)
        with np.errstate(invalid="ignore"):
            high = bounds.upper.sum(axis=1)
        for level in INVARIANT_LEVELS:
            if level not in geography.levels:
                continue
            total = invariants.total_population[level]
            need, room = geography.aggregate(low, level), geography.aggregate(high, level)
            for unit, geocode in enumerate(geography.units(level).tolist()):
                shown = f"{level} {geocode!r}" if geocode else "the nation"
                if total[unit] < need[unit]:
                    problems.append(
                        f"{shown}: {int(need[unit])} person(s) are needed to satisfy the {bounds.query!r} constraint "
                        f"(e.g. one per group-quarters facility type present in a block), but its published total "
                        f"population is {int(total[unit])}")
                if total[unit] > room[unit]:
                    problems.append(f"{shown}: its total population {int(total[unit])} does not fit the "
                                    f"{bounds.query!r} constraint, which allows at most {int(room[unit])}")
    if "hhgq" in schema.names:
        household = np.asarray((person_histograms @ schema.query("hhgq").matrix.T).todense())[:, 0]
        occupied = inventory.occupied
        for mask, text in ((occupied > household, "{o} occupied housing unit(s) but {h} household person(s)"),
                           ((household > 0) & (occupied == 0), "{h} household person(s) but no occupied housing unit")):
            for b in np.flatnonzero(mask)[:5]:
                problems.append(f"block {geography.blocks[b]}: " + text.format(o=int(occupied[b]), h=int(household[b])))
            if mask.sum() > 5:
                problems.append(f"... and {int(mask.sum()) - 5} more blocks like these")
    return problems


def check_inputs(schemas: dict, inputs, geography, allocations: dict, *, out_dir: Path, table_columns: tuple[int, ...] = (),
                 pl94171: bool = False) -> SpaceEstimate:
    """After the inputs are read, before any noise: feasibility of the invariants, and disk space for every
    file the run writes (estimate_space, returned: a partitioned run adds its states' with check_space)."""
    problems = feasibility_problems(schemas["persons"], inputs.inventory, inputs.person_histograms, geography)
    if problems:
        listed = "\n".join(f"  - {p}" for p in problems[:20])
        raise PreflightError(f"the inputs cannot be released as specified (found before any noise was drawn):\n{listed}")
    records = int(inputs.person_histograms.sum()) + int(inputs.inventory.housing_units.sum()) \
        + int(inputs.inventory.gq_facilities.sum())
    space = estimate_space(geography, schemas, allocations, n_records=records, out_dir=out_dir, table_columns=table_columns,
                           pl94171=pl94171)
    check_space(space, out_dir, pl94171=pl94171)
    return space


def input_check(schemas: dict, allocations: dict, *, out_dir: Path, table_columns: tuple[int, ...] = (),
                pl94171: bool = False):
    """check_inputs with a run's plans bound: what das.driver.inputs.read_partition runs on the inputs it reads
    (the whole input, or each state's), before any noise."""
    return lambda inputs, geography: check_inputs(schemas, inputs, geography, allocations, out_dir=out_dir,
                                                  table_columns=table_columns, pl94171=pl94171)


def check_space(space: SpaceEstimate, out_dir: Path, *, pl94171: bool = False) -> None:
    if not space.enough:
        raise PreflightError(f"not enough free space for {out_dir}: the outputs need about {_size(space.needed)} "
                             f"(NMF, MDF, tables, manifest, checkpoints{', PL 94-171 files' if pl94171 else ''}), "
                             f"{space.where} has {_size(space.free)} free")


def _size(n: int) -> str:
    """Bytes for a person: '0.67 MB', '1.20 GB'."""
    return f"{n / 1e9:.2f} GB" if n >= 1e9 else f"{n / 1e6:.2f} MB"
