"""`nmf_matches_certificate`: the NMF holds exactly the certified measurements, every query of the
certificate at every geounit of its level, each cell once, with the certified exact variance.

A level stored as one file is checked on the driver, alongside the states (a pass over its every noisy
answer, batch by batch); a level stored one file per state (a partitioned run's levels below the
state) is checked state by state, against the state's geounits.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from das.core.errors import SpecError, ValidationError
from das.model.levels import LEVEL_DIGITS, STATE
from das.model.schema import Schema
from das.privacy.certificate import fraction_text
from das.validate.reading import GEO, geocode, present, unreadable
from das.validate.registry import Check
from das.validate.release import OpenRelease, StateRows
from das.validate.report import Report, first
from das.validate.spine import release_spine, state_spine

NMF_CHECK = "NMF: exactly the certified measurements"


def _dictionary(column) -> tuple[np.ndarray, np.ndarray]:
    """(code of each row, distinct values) of a string column, dictionary-encoded or not."""
    if not pa.types.is_dictionary(column.type):
        column = column.dictionary_encode()
    return (column.indices.to_numpy(zero_copy_only=False).astype(np.int64),
            np.asarray(column.dictionary.to_pylist(), dtype=str))


def _in_order(cells: np.ndarray, unit_codes: np.ndarray, unit_position: np.ndarray, *, start: int, size: int) -> bool:
    """Rows start..start+len-1 of a query are (geounit i // size, cell i % size): `cells` the cell of each
    row, `unit_position[unit_codes]` its geounit's position. Whole geounits are checked as a block."""
    if start % size == 0 and len(cells) % size == 0:
        cells, unit_codes = cells.reshape(-1, size), unit_codes.reshape(-1, size)
        return bool((cells == np.arange(size)).all() and (unit_codes == unit_codes[:, :1]).all()
                    and (unit_position[unit_codes[:, 0]] == np.arange(start // size, start // size + len(cells))).all())
    position = start + np.arange(len(cells))
    return bool((cells == position % size).all() and (unit_position[unit_codes] == position // size).all())


class Positions:
    """Each geocode's position among a level's geounits (in geocode order, or in a spine's), the geounits
    sorted once per file: a block-level file has a thousand batches, and sorting its geounits for each was
    most of the validator's time."""

    def __init__(self, geounits: np.ndarray):
        self.order = np.argsort(geounits, kind="stable")
        self.sorted = geounits[self.order]

    def __call__(self, names: np.ndarray) -> np.ndarray:
        """The position of each of `names` (-1: not a geounit of the level)."""
        if not len(self.sorted):
            return np.full(len(names), -1, dtype=np.int64)
        found = np.searchsorted(self.sorted, names)
        found[found >= len(self.sorted)] = 0
        return np.where(self.sorted[found] == names, self.order[found], -1)


def _batch_problems(batch: pa.RecordBatch, name: str, level, *, sizes: dict, geounits: np.ndarray,
                    positions: Positions, seen: dict[str, int]) -> list[str]:
    """One batch of an NMF level file: its rows of each query next in order (`seen`: rows so far per query)."""
    queries = {q.query: q for q in level.queries}
    problems = []
    query_codes, query_names = _dictionary(batch.column("query"))
    unit_codes, unit_names = _dictionary(batch.column("geocode"))
    unit_position = positions(unit_names)
    cells_all = batch.column("cell").to_numpy()
    num_all, den_all = batch.column("variance_num").to_numpy(), batch.column("variance_den").to_numpy()
    single = len(query_codes) and query_codes.min() == query_codes.max()  # a row group holds one query
    for code in query_codes[:1] if single else np.flatnonzero(np.bincount(query_codes)):
        query = str(query_names[code])
        rows = slice(None) if single else np.flatnonzero(query_codes == code)
        n_rows = len(query_codes) if single else len(rows)
        if query not in queries:
            problems.append(f"{name}: query {query!r} is not in the certificate")
            continue
        if query not in sizes:  # not a query of the schema: said once, above
            continue
        size, start = sizes[query], seen.get(query, 0)
        seen[query] = start + n_rows
        if seen[query] > len(geounits) * size:
            problems.append(f"{name} {query}: more rows than {len(geounits)} geounits x {size} cells")
            continue
        if not _in_order(cells_all[rows], unit_codes[rows], unit_position, start=start, size=size):
            problems.append(f"{name} {query}: rows are not each (geocode, cell) of the level once, in order")
        sigma2 = queries[query].sigma2
        if (num_all[rows] != sigma2.numerator).any() or (den_all[rows] != sigma2.denominator).any():
            problems.append(f"{name} {query}: a variance differs from the certified {fraction_text(sigma2)}")
    return problems


def file_problems(path: Path, name: str, level, schema: Schema, *, geounits: np.ndarray) -> list[str]:
    """One NMF level file against its certificate entry, streamed batch by batch (bounded memory).

    The documented layout makes uniqueness checkable without a group-by: a query's rows run
    geounit-major, then cell, over the level's geounits in geocode order, so row i of a query must
    be (geounits[i // size], i % size).
    """
    try:
        parquet = pq.ParquetFile(path)
    except Exception as e:
        raise unreadable(path, e) from None
    sizes, problems = {}, []
    for q in level.queries:
        try:
            sizes[q.query] = schema.query(q.query).size
        except SpecError:
            problems.append(f"{name}: the certificate's query {q.query!r} is not a query of schema {schema.name}")
    seen: dict[str, int] = {}
    positions = Positions(geounits)
    try:
        for batch in parquet.iter_batches(batch_size=1 << 20,
                                          columns=["query", "geocode", "cell", "variance_num", "variance_den"]):
            problems += _batch_problems(batch, name, level, sizes=sizes, geounits=geounits, positions=positions,
                                            seen=seen)
    except Exception as e:  # a corrupt page or a missing column
        raise ValidationError(f"{path} is not a readable NMF file ({str(e).splitlines()[0][:200]})") from None
    for query, size in sizes.items():
        if seen.get(query, 0) != len(geounits) * size:
            problems.append(f"{name} {query}: {seen.get(query, 0)} rows, expected {len(geounits)} geounits x "
                            f"{size} cells")
    return sorted(set(problems), key=problems.index)


def nmf_plan(release: OpenRelease) -> list[tuple[str, object, Path | None, list[str]]]:
    """Each certified (release, level): its file when the level is one file (None: one file per state),
    and the problems of its layout (a state's file for a state not in the release). A level with neither
    layout is a ValidationError."""
    run, plan = release.run, []
    for name, cert in release.manifest.privacy.items():
        for level in cert.by_level:
            files = run.nmf_level_files(name, level.level)
            if not files:
                raise ValidationError(f"{run.nmf_level(name, level.level)} is missing (the certificate measures "
                                      f"{name} at {level.level})")
            whole = files[0][1] is None
            plan.append((name, level, files[0][0] if whole else None,
                         [] if whole else [f"{run.relative(p)}: state {s} is not a state of the release"
                                           for p, s in files if s not in release.states]))
    return plan


def measured_units(release: OpenRelease, state: str | None = None) -> np.ndarray:
    """The geounits an NMF release measured at its finest level (of the state), sorted: it publishes no units
    MDF, so the geounits of its finest level stand for its blocks, and every other level's are their prefixes
    (or its spine's units); a level that measured other geounits, or a finest level missing a query's rows at
    one of them, is then a violation."""
    name, level = next(iter(release.manifest.privacy)), release.manifest.levels[-1]
    found = [np.zeros(0, str)]
    for path, held in release.run.nmf_level_files(name, level):
        if state is not None and held not in (None, state):
            continue
        try:
            for batch in pq.ParquetFile(path).iter_batches(batch_size=1 << 20, columns=["geocode"]):
                found.append(np.asarray(pc.unique(batch.column(0).cast(pa.string())).to_pylist(), dtype=str))
        except Exception as e:
            raise unreadable(path, e) from None
    units = np.unique(np.concatenate(found))
    return units if state is None else units[np.char.startswith(units, state)]


def _geounits(release: OpenRelease, digits: list[int]) -> dict[int, np.ndarray]:
    """The geounits of the levels of `digits` geocode digits: the states' prefixes when no level is below
    the state (the units MDF is not read), else those of the units MDF (batch by batch, its geography), or of
    an NMF release's finest level (`measured_units`)."""
    if not digits or max(digits) <= LEVEL_DIGITS[STATE]:
        return {k: np.unique(np.array([s[:k] for s in release.states], dtype=str)) for k in digits}
    if release.nmf_only:
        units = measured_units(release)
        return {k: np.unique(units.astype(f"U{k}")) if k else np.array([""] * bool(len(units)), dtype=str)
                for k in digits}  # (U0 would not cut: the nation's geocode is "")
    found: dict[int, list[np.ndarray]] = {k: [] for k in digits}
    path = release.run.mdf("units")
    try:
        for batch in pq.ParquetFile(path).iter_batches(batch_size=1 << 20, columns=GEO):
            units = pd.Series(present(geocode(batch.to_pandas())), dtype=str)
            for k in digits:
                found[k].append(units.str.slice(0, k).unique().astype(str))
    except Exception as e:
        raise unreadable(path, e) from None
    return {k: np.unique(np.concatenate(parts)) if parts else np.zeros(0, str) for k, parts in found.items()}


def whole_levels(release: OpenRelease, plan) -> tuple[list, dict[tuple[str, str], list[str]]]:
    """The plan, and the problems of each NMF level stored as one file (a partitioned run stores only the
    nation and the states so: their geounits are the release's states, and the units MDF is not read)."""
    whole = [(name, level, path) for name, level, path, _ in plan if path is not None]
    spine = release_spine(release)
    if spine is None:
        by_digits = _geounits(release, sorted({LEVEL_DIGITS[level.level] for _, level, _ in whole}))
        geounits = {level.level: by_digits[LEVEL_DIGITS[level.level]] for _, level, _ in whole}
    else:  # the spine's geounits, in its order
        geounits = {level.level: spine.units(level.level) for _, level, _ in whole}
    return plan, {(name, level.level): file_problems(path, release.run.relative(path), level,
                                                     release.manifest.schema_of(name),
                                                     geounits=geounits[level.level])
                  for name, level, path in whole}


def nmf_alongside(release: OpenRelease):
    """The plan, read now (a level with no file is a ValidationError), and the whole levels' pass to run."""
    return partial(whole_levels, release, nmf_plan(release))


def nmf_state(rows: StateRows) -> dict[tuple[str, str], list[str]]:
    """The problems of the state's own NMF files (the levels stored one file per state), against the
    state's geounits of the level."""
    run, problems, blocks = rows.release.run, {}, None
    for name, cert in rows.release.manifest.privacy.items():
        for level in cert.by_level:
            files = run.nmf_level_files(name, level.level)
            if not files or files[0][1] is None:
                continue  # a whole-level file (the driver's), or missing (the driver says so)
            path = run.nmf_level(name, level.level, rows.state)
            if not path.is_file():
                raise ValidationError(f"{path} is missing (the certificate measures {name} at {level.level})")
            spine = state_spine(rows.release, rows.state)
            if blocks is None and spine is None:  # the release universe's, or what an NMF release measured
                blocks = pd.Series(measured_units(rows.release, rows.state) if rows.release.nmf_only else rows.universe,
                                   dtype=str)
            geounits = (np.unique(blocks.str.slice(0, LEVEL_DIGITS[level.level]).to_numpy(dtype=str)) if spine is None
                        else spine.units(level.level))
            problems[(name, level.level)] = file_problems(path, run.relative(path), level,
                                                          rows.release.manifest.schema_of(name), geounits=geounits)
    return problems


def nmf_combine(release: OpenRelease, parts: dict[str, dict], report: Report, alongside) -> None:
    """Each certified level in the certificate's order: the driver's problems of a whole-level file, or the
    layout's and every state's of a level stored one file per state."""
    plan, whole = alongside
    problems: list[str] = []
    for name, level, path, layout in plan:
        key = (name, level.level)
        problems += whole[key] if path is not None else layout + [p for part in parts.values() for p in part.get(key, [])]
    report.check(NMF_CHECK, first(problems))


NMF = Check("nmf_matches_certificate", nmf_combine, state=nmf_state, alongside=nmf_alongside, needs=("units",),
          nmf=True)
