"""Independent validation of a run directory: `das validate RUN_DIR`.

Its own code path, sharing nothing with the engine but the spec files (schemas as data). From
the release bundle alone (what is published) it proves that
- every output and NMF file has the SHA-256 the manifest lists (and nothing unlisted is there),
  and carries the run's privacy mode and spec digest in its own Parquet metadata;
- the MDF holds valid codes, its derived columns agree with the schema (RTYPE vs GQTYPE_PL;
  housing units vs facilities, HH_STATUS), and EPNUM is 1..N without repeats;
- the NMF holds exactly the certified measurements: every query of the certificate at every
  geounit of its level, each cell once, with the certified exact variance;
- every written table equals the table recounted from the MDF, and child rows sum to parents;
- the invariants hold: the published total population (nation, state), and every rule of each
  schema (das.rules gives the bounds from the facts counted in the MDFs), at every level.
With the run's operator files (the confidential inputs), it also compares the invariants with
the inputs: population, housing units and GQ facilities per block.
It goes state by state: the driver checks what is whole-release (files, certificate, the nation
and state rows, NMF levels stored as one file) and each state's rows are checked on their own
(`validate_state`, in turn or on an executor), so memory follows the largest state.

A release says what it holds in its manifest (`holds`, a list of the names in `HOLDS`); a
manifest without it is a `das run` (TopDown) release, which holds everything but
`charges_sum_to_rho` (its NMF is checked against the certificate instead). A synthetic release
(das/mechanisms) holds `SYNTHETIC_HOLDS`: valid MDF codes, tables equal to the MDF recount, and a
certificate whose charges sum exactly to its rho. Only what a release claims is checked; a claim
this validator does not know is a violation.
Exit code 0 valid, 1 violations, 2 a file missing or unreadable.
"""

from __future__ import annotations

import fnmatch
import hashlib
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from fractions import Fraction
from functools import partial
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from das import partitions, rules
from das.bundle import BundleError, input_paths
from das.checkpoint import file_sha256
from das.executors import largest_first
from das.geography import GEOCODE_COLUMNS, LEVEL_DIGITS
from das.io.tables import column_names, load_tables
from das.outdir import run_files
from das.privacy.certificate import fraction_text
from das.rundir import Manifest, RunDir, RunDirError
from das.schema import Schema, load_schema

GEO = [name for name, _ in GEOCODE_COLUMNS]
MAX_LISTED = 20
HOUSING_UNIT, GQ_FACILITY = 2, 4  # units MDF RTYPE
HOLDS = ("mdf_codes", "tables_match_mdf", "nmf_matches_certificate", "units_mdf", "invariants",
         "schema_constraints", "charges_sum_to_rho")
TOPDOWN_HOLDS = tuple(h for h in HOLDS if h != "charges_sum_to_rho")
SYNTHETIC_HOLDS = ("mdf_codes", "tables_match_mdf", "charges_sum_to_rho")
GQ_TYPES = 7  # units MDF GQTYPE_PL 1..7 (check_unit_records holds every facility to it)
# the checks whose problems come from every state (merged in state order)
UNITS_CODES = "MDF units: valid codes, housing units vs facilities"
PERSONS_CODES = "MDF persons: valid codes, derived columns, unique EPNUM"
PERSONS_CODES_UNREADABLE = "MDF persons: valid codes"
UNITS_LEVELS_UNREADABLE = "MDF units: valid codes of the units schema"
NMF_CHECK = "NMF: exactly the certified measurements"
HOUSING_CHECK = "housing units per block invariant"
FACILITIES_CHECK = "GQ facilities per block invariant"


class ValidationError(Exception):
    """The run directory cannot be validated at all: a file is missing or unreadable (exit code 2)."""


@dataclass
class Report:
    checks: list[str] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)

    def check(self, name: str, problems: list[str]) -> None:
        self.checks.append(f"{'ok ' if not problems else 'FAIL'} {name}")
        self.violations.extend(f"{name}: {p}" for p in problems)

    @property
    def ok(self) -> bool:
        return not self.violations


@dataclass
class Findings:
    """Checks run on one part of a release (a state): each check's first MAX_LISTED problems and how
    many there were, so that merged over the parts in order (`_merged`) they list what `_first` lists
    of all the problems."""

    problems: dict[str, tuple[list[str], int]] = field(default_factory=dict)

    def check(self, name: str, problems: list[str]) -> None:
        listed, count = self.problems.get(name, ([], 0))
        self.problems[name] = ((listed + problems)[:MAX_LISTED], count + len(problems))


def _merged(parts: list, name: str, before: list[str] = (), after: list[str] = ()) -> list[str]:
    """`_first` of the problems of check `name`: `before`, then every part's (`.findings`) in order, then `after`."""
    listed, count = list(before), len(before)
    for part in parts:
        more, n = part.findings.problems.get(name, ([], 0))
        if len(listed) <= MAX_LISTED:
            listed += more
        count += n
    if count <= len(listed):  # every part's problems are all listed
        return _first(listed + list(after))
    listed, count = (listed + list(after))[:MAX_LISTED + 1], count + len(after)
    return listed[:MAX_LISTED] + [f"... and {count - MAX_LISTED} more"]


def _read(path: Path, columns: list[str], state: str | None = None) -> pd.DataFrame:
    """The named columns of a confidential input file (CSV as text, or Parquet), only the state's rows if given."""
    if path.suffix == ".csv":
        frame = pd.read_csv(path, dtype=str, keep_default_na=False, usecols=columns)
    else:
        frame = pd.read_parquet(path, columns=columns, filters=[("TABBLKST", "==", state)] if state else None)
    return frame[_in_state(frame, state)].reset_index(drop=True) if state else frame


def _in_state(frame: pd.DataFrame, state: str) -> np.ndarray:
    """Which records are of the state (their TABBLKST), comparing only the distinct values."""
    codes, uniques = pd.factorize(frame["TABBLKST"], use_na_sentinel=False)
    return (pd.Series(uniques, dtype=object).astype(str).to_numpy() == state)[codes] if len(codes) else codes == 0


def _geocode(frame: pd.DataFrame) -> pd.Series:
    """Each record's block geocode (the first four geography columns joined), as a categorical whose
    categories are the distinct geocodes, sorted: the columns' distinct values are joined, not every row's."""
    if not len(frame):
        return pd.Series([], dtype=str)
    key, columns = np.zeros(len(frame), dtype=np.int64), []
    for c in GEO:
        codes, uniques = pd.factorize(frame[c], use_na_sentinel=False)
        if len(columns) and key.max(initial=0) >= (1 << 62) // max(1, len(uniques)):  # too many combinations
            parts = [frame[c].astype(str) for c in GEO]
            return pd.Series((parts[0] + parts[1] + parts[2] + parts[3]).to_numpy(dtype=str), index=frame.index,
                             dtype="category")
        key = key * len(uniques) + codes
        texts = pd.Series(uniques).astype(str)
        columns.append((texts.fillna("").to_numpy(dtype=object), texts.isna().to_numpy()))
    combinations, row_combination = np.unique(key, return_inverse=True)
    names = np.full(len(combinations), "", dtype=object)
    missing = np.zeros(len(combinations), dtype=bool)
    for values, absent in reversed(columns):
        combinations, digit = np.divmod(combinations, len(values))
        names, missing = values[digit] + names, missing | absent[digit]
    names[missing] = "nan"  # a missing part makes the joined geocode missing: "nan" as a string, as per row
    categories, combination_category = np.unique(names.astype(str), return_inverse=True)  # joins may coincide
    return pd.Series(pd.Categorical.from_codes(combination_category[row_combination], categories=categories),
                     index=frame.index)


def _present(geocode: pd.Series) -> np.ndarray:
    """The distinct geocodes of a `_geocode` column, sorted."""
    if isinstance(geocode.dtype, pd.CategoricalDtype):
        return np.asarray(geocode.cat.categories, dtype=str)[np.unique(geocode.cat.codes.to_numpy())]
    return np.unique(geocode.to_numpy(dtype=str))


def _blocks_in(universe: np.ndarray, geocode: pd.Series) -> np.ndarray:
    """np.searchsorted(universe, geocode) of every record, searching only the distinct geocodes."""
    if isinstance(geocode.dtype, pd.CategoricalDtype):
        where = np.searchsorted(universe, np.asarray(geocode.cat.categories, dtype=str))
        return where[geocode.cat.codes.to_numpy()]
    return np.searchsorted(universe, geocode.to_numpy(dtype=str))


def _levels(frame: pd.DataFrame, schema: Schema) -> pd.DataFrame:
    """Decode input/MDF code columns to attribute levels (and recode levels), by lookup of each distinct value."""
    out = {}
    for a in schema.attributes:
        col = frame[a.column]
        lookup = {str(code): i for i, code in enumerate(a.codes)}
        codes, uniques = pd.factorize(col, use_na_sentinel=False)
        levels = pd.Series(uniques).astype(str).map(lookup).to_numpy(dtype=float)[codes]
        if np.isnan(levels).any():
            bad = col.iloc[int(np.flatnonzero(np.isnan(levels))[0])]
            raise ValueError(f"column {a.column} holds {bad!r}, not a code of {a.name}")
        out[a.name] = levels.astype(np.int64)
    for r in schema.recodes:
        out[r.name] = np.asarray(r.mapping)[out[r.attribute]]
    return pd.DataFrame(out)


def _first(problems: list[str]) -> list[str]:
    return problems[:MAX_LISTED] + ([f"... and {len(problems) - MAX_LISTED} more"] if len(problems) > MAX_LISTED else [])


def prefix_codes(records: pd.DataFrame, geo_levels) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per level: each record's geounit as (code per record, geocode per code), by factorizing
    the geocode prefixes once (every table of the same records shares them)."""
    out = {}
    blocks, block_of = pd.factorize(records["geocode"]) if len(records) else (np.array([], np.int64), pd.Index([]))
    block_geocodes = pd.Series(np.asarray(block_of, dtype=str), dtype=str)
    for geo_level in geo_levels:
        unit_of_block, units = pd.factorize(block_geocodes.str.slice(0, LEVEL_DIGITS[geo_level]))
        out[geo_level] = (unit_of_block[blocks] if len(blocks) else blocks, np.asarray(units, dtype=str))
    return out


def recount_table(records: pd.DataFrame, levels: pd.DataFrame, schema: Schema, spec, geo_levels,
                  prefixes: dict | None = None) -> pd.DataFrame:
    """A table recounted from records (counts per geounit and cell), every geounit that has any record."""
    prefixes = prefix_codes(records, geo_levels) if prefixes is None else prefixes
    keep = np.ones(len(records), dtype=bool)
    for factor, level in spec.where:
        keep &= levels[factor].to_numpy() == level
    frames = []
    names = column_names(schema, spec)
    keys = []  # each record's cell of each query (the same at every geographic level)
    for qname in spec.queries:
        q = schema.query(qname)
        key = (np.ravel_multi_index([levels[f].to_numpy()[keep] for f in q.factors], q.shape) if q.factors
               else np.zeros(int(keep.sum()), dtype=np.int64))
        keys.append((q.size, key))
    for geo_level in geo_levels:
        unit, geocodes = prefixes[geo_level]
        unit = unit[keep]
        present = np.flatnonzero(np.bincount(unit, minlength=len(geocodes)))
        columns = []
        for size, key in keys:
            counts = np.bincount(unit * size + key, minlength=len(geocodes) * size)
            columns.append(counts.reshape(len(geocodes), size)[present])
        table = pd.DataFrame(np.hstack(columns) if columns else np.zeros((len(present), 0), np.int64), columns=names)
        table.insert(0, "geocode", geocodes[present])
        frames.append(table.assign(level=geo_level))
    return pd.concat(frames, ignore_index=True)


def load_manifest(run_dir: Path) -> Manifest:
    """The run's manifest, or ValidationError naming the file and what is wrong with it."""
    try:
        return RunDir(run_dir).read()
    except RunDirError as e:
        raise ValidationError(str(e)) from None


def check_files(run_dir: Path, manifest: Manifest, report: Report, with_nmf: bool = True) -> None:
    """Checksums of every listed output and NMF file; no unlisted release file; the spec digest."""
    listed = {**(manifest.outputs or {}), **(manifest.nmf or {})}
    problems = []
    if not manifest.outputs or with_nmf and not manifest.nmf:
        problems.append("the manifest lists no outputs" + (" or no NMF files" if with_nmf else ""))
    for name, digest in sorted(listed.items()):
        path = run_dir / name
        if not path.is_file():
            raise ValidationError(f"{path} is missing (the manifest lists it)")
        if file_sha256(path) != digest:
            problems.append(f"{name}: SHA-256 differs from the manifest's (the file was changed after the run)")
    for path in sorted(run_dir.rglob("*")):
        relative = path.relative_to(run_dir).as_posix()
        if path.is_file() and relative != "manifest.json" and not relative.startswith(("operator/", "checkpoints/")):
            if relative not in listed:
                known = any(fnmatch.fnmatchcase(relative, p) for p in run_files())
                problems.append(f"{relative}: not listed in the manifest" + ("" if known else " (not a das output)"))
    if manifest.spec_sha256 and hashlib.sha256(manifest.spec_text.encode()).hexdigest() != manifest.spec_sha256:
        problems.append("spec_sha256 does not match the spec text in the manifest")
    report.check("checksums of every output and NMF file", _first(problems))


def check_metadata(run_dir: Path, manifest: Manifest, report: Report) -> None:
    """Every Parquet file says, in its own metadata, whether it is private and which spec made it."""

    problems = []
    want_private = b"private" if manifest.private else None
    for name in sorted({**(manifest.outputs or {}), **(manifest.nmf or {})}):
        if not name.endswith(".parquet"):
            continue
        try:
            meta = pq.read_schema(run_dir / name).metadata or {}
        except Exception as e:
            raise _unreadable(run_dir / name, e) from None
        mode = meta.get(b"das.privacy")
        if mode is None:
            problems.append(f"{name}: no das.privacy metadata")
        elif want_private and mode != want_private or not want_private and b"NOT PRIVATE" not in mode:
            problems.append(f"{name}: das.privacy says {mode.decode(errors='replace')!r}, the manifest says "
                            f"private = {manifest.private}")
        if manifest.spec_sha256 and meta.get(b"das.spec_sha256", b"").decode() != manifest.spec_sha256:
            problems.append(f"{name}: das.spec_sha256 is not the run's spec digest")
    report.check("privacy mode and spec digest in every Parquet file", _first(problems))


def check_records(mdf: pd.DataFrame, schema: Schema, report: Report | Findings,
                  rows: np.ndarray | None = None) -> pd.DataFrame | None:
    """Valid codes and derived columns consistent with the schema (EPNUM is `epnum_problems`'s); the
    levels, or None. `rows`: each record's row in the MDF file (0-based), when `mdf` is part of it."""
    problems = []
    rows = np.arange(len(mdf)) if rows is None else rows
    try:
        levels = _levels(mdf, schema)
    except (ValueError, KeyError) as e:
        report.check(PERSONS_CODES_UNREADABLE, [str(e)])
        return None
    for column, attribute, mapping in schema.derived:
        if column not in mdf:
            problems.append(f"column {column} is missing")
            continue
        expected = np.asarray(mapping)[levels[attribute].to_numpy()]
        bad = np.flatnonzero(mdf[column].astype(np.int64).to_numpy() != expected)
        for i in bad[:3]:
            a = schema.attribute(attribute)
            problems.append(f"row {rows[i] + 1}: {column} {mdf[column].iloc[i]} with {a.column} "
                            f"{mdf[a.column].iloc[i]} (expected {column} {expected[i]})")
        if len(bad) > 3:
            problems.append(f"... and {len(bad) - 3} more rows with {column} inconsistent")
    report.check(PERSONS_CODES, problems)
    return levels


@dataclass
class Epnums:
    """A part's EPNUMs, summarized for the whole-file check: how many, the range, the first repeats
    within the part as (row, EPNUM), and its distinct values as runs [starts[i], ends[i]]."""

    count: int
    low: int
    high: int
    repeats: list[tuple[int, int]]
    starts: np.ndarray
    ends: np.ndarray

    @classmethod
    def of(cls, epnum: np.ndarray, rows: np.ndarray) -> Epnums:
        if (np.diff(epnum) > 0).all():  # increasing, as written: distinct already (no sort, no hashing)
            repeated, distinct = np.zeros(0, np.int64), epnum
        else:
            repeated = np.flatnonzero(pd.Series(epnum).duplicated().to_numpy())[:3]
            distinct = np.unique(epnum)
        breaks = np.flatnonzero(np.diff(distinct) != 1)
        starts, ends = (distinct[np.r_[0, breaks + 1]], distinct[np.r_[breaks, len(distinct) - 1]]) if len(distinct) \
            else (distinct, distinct)
        return cls(len(epnum), int(distinct[0]) if len(distinct) else 0, int(distinct[-1]) if len(distinct) else 0,
                   [(int(rows[i]), int(epnum[i])) for i in repeated], starts, ends)


def _covered(starts: np.ndarray, ends: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Which values lie in one of the disjoint runs [starts[i], ends[i]] (sorted)."""
    run = np.searchsorted(starts, values, side="right") - 1
    return (run >= 0) & (ends[np.maximum(run, 0)] >= values)


def _union(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Runs merged into disjoint sorted runs."""
    order = np.argsort(starts, kind="stable")
    starts, ends = starts[order], np.maximum.accumulate(ends[order]) if len(ends) else ends
    new = np.r_[True, starts[1:] > ends[:-1] + 1] if len(starts) else np.zeros(0, bool)
    last = np.r_[np.flatnonzero(new)[1:] - 1, len(starts) - 1] if len(starts) else np.zeros(0, np.int64)
    return starts[new], ends[last]


def epnum_problems(parts: list[tuple[Epnums, Callable[[], tuple[np.ndarray, np.ndarray]]]]) -> list[str]:
    """EPNUM is 1..N without repeats over the whole MDF, from each part's summary (in file order); a
    part whose EPNUMs meet an earlier part's is read again (`reread`: its EPNUMs and rows) to name
    the rows that repeat one."""
    repeats: list[tuple[int, int]] = []
    starts, ends = np.zeros(0, np.int64), np.zeros(0, np.int64)
    count, low, high = 0, None, None
    for summary, reread in parts:
        if not summary.count:
            continue
        mine = summary.repeats
        latest = np.searchsorted(starts, summary.ends, side="right") - 1  # the last earlier run starting before each end
        if len(starts) and ((latest >= 0) & (ends[np.maximum(latest, 0)] >= summary.starts)).any():
            epnum, rows = reread()
            repeated = pd.Series(epnum).duplicated().to_numpy() | _covered(starts, ends, epnum)
            mine = [(int(rows[i]), int(epnum[i])) for i in np.flatnonzero(repeated)[:3]]
        repeats += mine
        starts, ends = _union(np.r_[starts, summary.starts], np.r_[ends, summary.ends])
        count += summary.count
        low = summary.low if low is None else min(low, summary.low)
        high = summary.high if high is None else max(high, summary.high)
    problems = [f"row {row + 1}: EPNUM {e} appears on an earlier row too" for row, e in repeats[:3]]
    if not repeats and count and (low != 1 or high != count):
        problems.append(f"EPNUM runs {low}..{high}, expected 1..{count}")
    return problems


def check_unit_records(units: pd.DataFrame, units_schema: Schema | None, report: Report | Findings,
                       rows: np.ndarray | None = None) -> None:
    """Housing units carry the units schema's derived codes and an HH_STATUS; GQ facilities a GQ type and
    HH_STATUS 0. `rows`: each record's row in the MDF file (0-based), when `units` is part of it."""
    problems = []
    rows = np.arange(len(units)) if rows is None else rows
    for column in ("RTYPE", "GQTYPE_PL", "HH_STATUS"):
        if column not in units:
            report.check("MDF units: valid codes", [f"column {column} is missing"])
            return
    rtype, gq, status = (units[c].astype(np.int64).to_numpy() for c in ("RTYPE", "GQTYPE_PL", "HH_STATUS"))
    housing, facility = rtype == HOUSING_UNIT, rtype == GQ_FACILITY
    rules = [(~(housing | facility), "RTYPE 2 (housing unit) or 4 (GQ facility)", rtype),
             (housing & (gq != 0), "GQTYPE_PL 0 for a housing unit", gq),
             (facility & ((gq < 1) | (gq > 7)), "GQTYPE_PL 1..7 for a GQ facility", gq),
             (facility & (status != 0), "HH_STATUS 0 for a GQ facility", status)]
    if units_schema is not None:
        attribute = units_schema.attributes[0]
        rules.append((housing & ~np.isin(status, np.asarray(attribute.codes, dtype=np.int64)),
                      f"HH_STATUS one of {list(attribute.codes)} for a housing unit", status))
    for bad, expected, values in rules:
        for i in np.flatnonzero(bad)[:3]:
            problems.append(f"row {rows[i] + 1}: {values[i]} (expected {expected})")
    report.check(UNITS_CODES, problems)


def _dictionary(column) -> tuple[np.ndarray, np.ndarray]:
    """(code of each row, distinct values) of a string column, dictionary-encoded or not."""

    if not pa.types.is_dictionary(column.type):
        column = column.dictionary_encode()
    return (column.indices.to_numpy(zero_copy_only=False).astype(np.int64),
            np.asarray(column.dictionary.to_pylist(), dtype=str))


def _in_order(cells: np.ndarray, unit_codes: np.ndarray, unit_position: np.ndarray, start: int, size: int) -> bool:
    """Rows start..start+len-1 of a query are (geounit i // size, cell i % size): `cells` the cell of each
    row, `unit_position[unit_codes]` its geounit's position. Whole geounits are checked as a block."""
    if start % size == 0 and len(cells) % size == 0:
        cells, unit_codes = cells.reshape(-1, size), unit_codes.reshape(-1, size)
        return bool((cells == np.arange(size)).all() and (unit_codes == unit_codes[:, :1]).all()
                    and (unit_position[unit_codes[:, 0]] == np.arange(start // size, start // size + len(cells))).all())
    position = start + np.arange(len(cells))
    return bool((cells == position % size).all() and (unit_position[unit_codes] == position // size).all())


def _nmf_file_problems(path: Path, name: str, level: dict, schema: Schema, geounits: np.ndarray) -> list[str]:
    """One NMF level file against its certificate entry, streamed batch by batch (bounded memory).

    The documented layout makes uniqueness checkable without a group-by: a query's rows run
    geounit-major, then cell, over the level's geounits in geocode order, so row i of a query must
    be (geounits[i // size], i % size).
    """

    try:
        parquet = pq.ParquetFile(path)
    except Exception as e:
        raise _unreadable(path, e) from None
    queries = {q.query: q for q in level.queries}
    sizes = {q: schema.query(q).size for q in queries}
    variances = {q: (v.sigma2.numerator, v.sigma2.denominator) for q, v in queries.items()}
    seen: dict[str, int] = {}
    problems: list[str] = []
    columns = ["query", "geocode", "cell", "variance_num", "variance_den"]
    try:
        for batch in parquet.iter_batches(batch_size=1 << 20, columns=columns):
            query_codes, query_names = _dictionary(batch.column("query"))
            unit_codes, unit_names = _dictionary(batch.column("geocode"))
            # each distinct geocode's position among the level's geounits (-1: not a geounit)
            found = np.searchsorted(geounits, unit_names)
            found[found >= len(geounits)] = 0
            unit_position = np.where(geounits[found] == unit_names, found, -1) if len(geounits) else found - 1
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
                size, start = sizes[query], seen.get(query, 0)
                seen[query] = start + n_rows
                if seen[query] > len(geounits) * size:
                    problems.append(f"{name} {query}: more rows than {len(geounits)} geounits x {size} cells")
                    continue
                if not _in_order(cells_all[rows], unit_codes[rows], unit_position, start, size):
                    problems.append(f"{name} {query}: rows are not each (geocode, cell) of the level once, in order")
                if (num_all[rows] != variances[query][0]).any() or (den_all[rows] != variances[query][1]).any():
                    certified = fraction_text(queries[query].sigma2)
                    problems.append(f"{name} {query}: a variance differs from the certified {certified}")
    except Exception as e:  # a corrupt page or a missing column
        raise ValidationError(f"{path} is not a readable NMF file ({str(e).splitlines()[0][:200]})") from None
    for query in queries:
        expected = len(geounits) * sizes[query]
        if seen.get(query, 0) != expected:
            problems.append(f"{name} {query}: {seen.get(query, 0)} rows, expected {len(geounits)} geounits x "
                            f"{sizes[query]} cells")
    return sorted(set(problems), key=problems.index)


def nmf_plan(run_dir: Path, manifest: Manifest, states: list[str]) -> list[tuple[str, dict, str | None, list[str]]]:
    """Each certified (release, level): its file name when the level is one file (None: one file per state),
    and the problems of its layout (a state's file for a state not in the release). A level with neither
    layout is a ValidationError."""
    plan = []
    for release, cert in manifest.privacy.items():
        for level in cert.by_level:
            name = f"nmf/{release}/{level.level}.parquet"
            files = RunDir(run_dir).nmf_level_files(release, level.level)
            if not files:
                raise ValidationError(f"{run_dir / name} is missing (the certificate measures {release} at {level.level})")
            whole = files[0][1] is None
            plan.append((release, level, name if whole else None,
                         [] if whole else [f"{p.relative_to(run_dir).as_posix()}: state {s} is not a state of the release"
                                           for p, s in files if s not in states]))
    return plan


def whole_level_nmf(run_dir: Path, manifest: Manifest, plan, units_path: Path,
                    states: list[str]) -> dict[tuple[str, str], list[str]]:
    """The problems of each NMF level stored as one file, its geounits those of the units MDF (read
    batch by batch, only its geography); when no level below the state is stored whole (a partitioned
    run), the nation's and the states' geounits are those of `states`, and the units MDF is not read."""
    whole = [(release, level, name) for release, level, name, _ in plan if name is not None]
    digits = sorted({LEVEL_DIGITS[level.level] for _, level, _ in whole})
    found: dict[int, list[np.ndarray]] = {k: [] for k in digits}
    if whole and max(digits) <= LEVEL_DIGITS["state"]:
        found = {k: [np.unique(np.array([s[:k] for s in states], dtype=str))] for k in digits}
    elif whole:
        try:
            for batch in pq.ParquetFile(units_path).iter_batches(batch_size=1 << 20, columns=GEO):
                present = pd.Series(_present(_geocode(batch.to_pandas())), dtype=str)
                for k in digits:
                    found[k].append(present.str.slice(0, k).unique().astype(str))
        except Exception as e:
            raise _unreadable(units_path, e) from None
    geounits = {k: np.unique(np.concatenate(parts)) if parts else np.zeros(0, str) for k, parts in found.items()}
    return {(release, level.level): _nmf_file_problems(run_dir / name, name, level,
                                                        load_schema(manifest.schema(release)),
                                                        geounits[LEVEL_DIGITS[level.level]])
            for release, level, name in whole}


def state_nmf(run_dir: Path, manifest: Manifest, state: str, universe: np.ndarray) -> dict[tuple[str, str], list[str]]:
    """The problems of the state's own NMF files (the levels stored one file per state), against the
    state's geounits of the level."""
    problems = {}
    blocks = pd.Series(universe, dtype=str)
    for release, cert in manifest.privacy.items():
        for level in cert.by_level:
            files = RunDir(run_dir).nmf_level_files(release, level.level)
            if not files or files[0][1] is None:
                continue  # a whole-level file (the driver's), or missing (the driver says so)
            path = run_dir / "nmf" / release / level.level / f"{state}.parquet"
            if not path.is_file():
                raise ValidationError(f"{path} is missing (the certificate measures {release} at {level.level})")
            geounits = np.unique(blocks.str.slice(0, LEVEL_DIGITS[level.level]).to_numpy(dtype=str))
            problems[(release, level.level)] = _nmf_file_problems(
                path, path.relative_to(run_dir).as_posix(), level, load_schema(manifest.schema(release)), geounits)
    return problems


def block_facts(mdf: pd.DataFrame, levels: pd.DataFrame, persons_schema: Schema, mdf_units: pd.DataFrame,
                universe: np.ndarray) -> rules.Invariants:
    """The published facts per block of the universe, counted from the two MDFs: housing units,
    GQ facilities by type, and the persons release's household persons (its `hhgq` cell 0)."""
    block = _blocks_in(universe, mdf_units["geocode"])
    rtype = mdf_units["RTYPE"].astype(np.int64).to_numpy()
    gq = mdf_units["GQTYPE_PL"].astype(np.int64).to_numpy()
    n = len(universe)
    housing = np.bincount(block[rtype == HOUSING_UNIT], minlength=n)
    facility = (rtype == GQ_FACILITY) & (gq >= 1) & (gq <= GQ_TYPES)
    facilities = np.bincount(block[facility] * GQ_TYPES + gq[facility] - 1, minlength=n * GQ_TYPES).reshape(n, GQ_TYPES)
    household = None
    if "hhgq" in [r.name for r in persons_schema.recodes] + list(persons_schema.names):
        in_household = levels["hhgq"].to_numpy() == 0
        household = np.bincount(_blocks_in(universe, mdf["geocode"])[in_household],
                                minlength=n)
    return rules.Invariants(housing, facilities, {}, household)


def check_rules(release: str, records: pd.DataFrame, levels: pd.DataFrame, schema: Schema, facts: rules.Invariants,
                universe: np.ndarray, report: Report | Findings) -> None:
    """Every rule of the schema (das.rules gives the bounds per block) against the release's own
    recount per block. Every level's answers and bounds are sums of the blocks', so the blocks
    holding them is every level holding them."""
    problems = []
    try:
        families = rules.block_bounds(schema, facts)
    except ValueError as e:
        report.check(f"rules of schema {schema.name} ({release})", [str(e)])
        return
    block = _blocks_in(universe, records["geocode"])
    for bounds in families:
        query = schema.query(bounds.query)
        cell = (np.ravel_multi_index([levels[f].to_numpy() for f in query.factors], query.shape) if query.factors
                else np.zeros(len(records), dtype=np.int64))
        counts = np.bincount(block * query.size + cell, minlength=len(universe) * query.size)
        counts = counts.reshape(len(universe), query.size)
        for side, bad in zip(("below", "above"), rules.breaches(bounds, counts)):
            for b, c in np.argwhere(bad)[:5]:
                shown = " and ".join(f"{f} {schema.factor_labels(f)[v]!r}"
                                     for f, v in zip(query.factors, np.unravel_index(c, query.shape))) or "total"
                low, high = bounds.lower[b, c], bounds.upper[b, c]
                allowed = f"{low}..{high:g}" if np.isfinite(high) else f"at least {low}"
                problems.append(f"block {universe[b]}: {shown} is {counts[b, c]}, {side} the {bounds.rule.kind} "
                                f"rule's {allowed} ({rules.describe(schema, bounds.rule, int(c))})")
    kinds = ", ".join(dict.fromkeys(c.kind for c in schema.constraints))
    report.check(f"rules of schema {schema.name} ({release}: {kinds})", problems)


def _facilities(units: pd.DataFrame) -> pd.DataFrame:
    gq = units[units["RTYPE"].astype(int) == GQ_FACILITY]
    counts = gq.assign(GQTYPE_PL=gq["GQTYPE_PL"].astype(int)).groupby(["geocode", "GQTYPE_PL"], observed=True).size()
    return _by_geocode(counts.unstack(fill_value=0))


def _by_geocode(counts):
    """Counts grouped by a `_geocode` column (its index categorical), indexed by the geocode strings."""
    counts.index = counts.index.astype(str)
    return counts


def _operator_inputs(run_dir: Path) -> tuple[Path, Path] | None:
    """The run's operator inputs (two files, or two directories of one file per state), if present."""
    try:
        paths = input_paths(run_dir)
    except BundleError:
        return None
    persons, units = Path(paths.get("persons", "")), Path(paths.get("units", ""))
    both = persons.is_file() and units.is_file() or persons.is_dir() and units.is_dir()
    return (persons, units) if both else None


def release_holds(manifest: Manifest, report: Report) -> set[str]:
    """What the release claims to hold: its manifest's `holds`, or everything TopDown holds."""
    holds = TOPDOWN_HOLDS if manifest.holds is None else manifest.holds
    holds = sorted(holds, key=lambda h: HOLDS.index(h) if h in HOLDS else len(HOLDS))  # in the order they are checked
    unknown = [h for h in holds if h not in HOLDS]
    report.check(f"the release claims {', '.join(holds) or 'nothing'}; those are checked",
                 [f"claims {h!r}, which das validate does not know (known: {', '.join(HOLDS)})" for h in unknown])
    return set(holds)


def check_charges(manifest: Manifest, report: Report) -> None:
    """Each release's certificate: its charges are positive exact fractions summing exactly to its rho,
    within its budget; its delta parts sum exactly to its delta."""
    problems = []
    for release, cert in manifest.privacy.items():
        charges = [c.rho for c in cert.charges or ()]
        rho, budget, delta = cert.rho, cert.budget if cert.budget is not None else cert.rho, cert.delta
        delta_parts = list((cert.delta_parts or {}).values())
        if not charges:
            problems.append(f"{release}: the certificate lists no charges")
        if any(c <= 0 for c in charges):
            problems.append(f"{release}: a charge is not positive")
        if sum(charges, Fraction(0)) != rho:
            problems.append(f"{release}: the charges sum to {sum(charges, Fraction(0))}, the certificate says rho = {rho}")
        if rho > budget:
            problems.append(f"{release}: rho {rho} is over the budget {budget}")
        if delta_parts and sum(delta_parts, Fraction(0)) != delta:
            problems.append(f"{release}: the delta parts sum to {sum(delta_parts, Fraction(0))}, not delta = {delta}")
    report.check("certificate: charges sum exactly to rho", _first(problems))


@dataclass
class StateChecks:
    """What one state's checks send back to the driver: their findings, and the few figures that the
    whole-release checks add up over the states (all small)."""

    state: str
    findings: Findings = field(default_factory=lambda: Findings())
    persons: int = 0  # MDF persons records of the state
    population: dict = field(default_factory=dict)  # (level, geocode) -> MDF persons, published geounits below the state
    epnums: Epnums | None = None
    outside: tuple[int, str] = (0, "")  # MDF persons blocks outside the release universe, and the first
    nmf: dict = field(default_factory=dict)  # (release, level) -> problems of the state's own NMF file
    recount: dict = field(default_factory=dict)  # table name -> the state's row of the MDF recount (None: no records)
    tables: dict = field(default_factory=dict)  # table name -> (table_differences, hierarchy_differences) below the state
    child_sums: dict = field(default_factory=dict)  # table name -> sum of its rows of the nation's children (no state level)
    input_persons: dict = field(default_factory=dict)  # TABBLKST -> persons records of the state's inputs (its
    # own file's, each under its TABBLKST; or its rows of the one persons file), when compared with them
    stopped: bool = False  # a codes check failed: the checks after it did not run


def validate_run(run_dir: Path, inputs: tuple[Path, Path] | None = None, use_operator: bool = True,
                 executor=None, persons_limit: float | None = None) -> Report:
    """Every check of a run directory that its release claims (`holds`); `inputs` (or the run's operator
    files) add the comparison with the confidential inputs. Raises ValidationError when a file is
    missing or unreadable.

    The driver checks the whole release cheaply (files, certificate, the nation and state rows of the
    tables, the NMF levels stored as one file, in a thread); everything else runs state by state
    (`validate_state`), one after the other here or as tasks on `executor` (largest first; with
    `persons_limit`, only while the states in flight hold at most that many persons: a memory
    budget), each reading only its state's rows. The report lists every check once, in the same
    order either way."""
    run_dir = Path(run_dir)
    report = Report()
    manifest = load_manifest(run_dir)
    if not manifest.complete:
        report.check("run complete", [f"manifest status is {manifest.status!r}, not 'complete'"])
        return report
    holds = release_holds(manifest, report)
    check_files(run_dir, manifest, report, with_nmf="nmf_matches_certificate" in holds)
    check_metadata(run_dir, manifest, report)
    if "charges_sum_to_rho" in holds:
        check_charges(manifest, report)
    persons_schema, units_schema = _schemas(run_dir, manifest)
    with_units = "units_mdf" in holds
    persons_path, units_path = run_dir / "mdf_persons.parquet", run_dir / "mdf_units.parquet"
    columns = {path: _columns(path) for path in ((persons_path, units_path) if with_units else (persons_path,))}
    for names in columns.values():
        missing = [c for c in GEO if c not in names]
        if missing:
            raise ValidationError(f"{run_dir}: an MDF file has no column {missing[0]}")
    published = manifest.invariants.total_population or {}
    states = sorted(published.get("state", {})) or _states_in(persons_path)
    with_nmf = with_units and "nmf_matches_certificate" in holds
    plan = nmf_plan(run_dir, manifest, states) if with_nmf else []
    inputs = inputs or (_operator_inputs(run_dir) if use_operator else None)
    if "invariants" not in holds or not with_units:
        inputs = None
    by_state = _inputs_by_state(inputs) if inputs is not None else None
    task = partial(validate_state, run_dir, manifest, holds=frozenset(holds), inputs=by_state)
    with ThreadPoolExecutor(1) as alongside:  # the NMF levels stored whole: a pass over their every noisy answer
        whole = alongside.submit(whole_level_nmf, run_dir, manifest, plan, units_path, states) if with_nmf else None
        try:
            if executor is None:
                parts = list(map(task, states))
            else:  # the largest states first (published population), so the last task to finish is a small one
                sizes = [int(published.get("state", {}).get(s, 0)) for s in states]
                parts = largest_first(executor, task, states, sizes, persons_limit)
        except BaseException:
            if whole is not None:
                whole.result()  # the check that comes first in order fails first
            raise
        whole_nmf = whole.result() if whole is not None else {}

    if with_units:
        unlisted = [f"state {s!r}: units in the MDF, but the manifest publishes no total population for it"
                    for s in sorted(set(_states_in(units_path)) - set(states))]
        report.check(UNITS_CODES, _merged(parts, UNITS_CODES, before=unlisted))
        if with_nmf:
            problems: list[str] = []
            for release, level, name, layout in plan:
                key = (release, level.level)
                problems += whole_nmf[key] if name is not None else layout + [p for s in parts for p in s.nmf.get(key, [])]
            report.check(NMF_CHECK, _first(problems))
        outside = sum(s.outside[0] for s in parts)
        example = next((s.outside[1] for s in parts if s.outside[0]), "")
        report.check("MDF persons: in blocks of the release universe",
                     ([f"{outside} MDF blocks have no housing unit or facility in the units MDF, e.g. {example}"]
                      if outside else [])
                     + [f"state {s!r}: persons in the MDF, but no units and no published total population"
                        for s in sorted(set(_states_in(persons_path)) - set(states))])
    if any(PERSONS_CODES_UNREADABLE in s.findings.problems for s in parts):
        report.check(PERSONS_CODES_UNREADABLE, _merged(parts, PERSONS_CODES_UNREADABLE))
        return report
    epnum = ["column EPNUM is missing"] if "EPNUM" not in columns[persons_path] else epnum_problems(
        [(s.epnums, partial(_reread_epnums, persons_path, s.state)) for s in parts if s.epnums is not None])
    report.check(PERSONS_CODES, _merged(parts, PERSONS_CODES, after=epnum))
    if any(UNITS_LEVELS_UNREADABLE in s.findings.problems for s in parts):
        report.check(UNITS_LEVELS_UNREADABLE, _merged(parts, UNITS_LEVELS_UNREADABLE))
        return report

    # tables: the nation and state rows here (the nation's recount is the sum of the states'), the rest per state
    top = [lv for lv in manifest.levels if LEVEL_DIGITS[lv] <= LEVEL_DIGITS["state"]]
    for spec, _, path in _tables(run_dir, manifest, holds, persons_schema, units_schema):
        if not path.exists():
            report.check(f"table {spec.name} written", [f"{path} is missing"])
            continue
        cols = column_names(persons_schema if spec.schema == persons_schema.name else units_schema, spec)
        names = _columns(path)  # once: the footer grows with the table's row groups
        absent = [c for c in ["level", "geocode", *cols] if c not in names]
        if absent:
            report.check(f"table {spec.name} equals the MDF recount", [f"{path.name} has no column {absent[0]!r}"])
            continue
        written = _read_rows(path, [("level", "in", top)])
        below = [s.tables.get(spec.name, ({}, {})) for s in parts]
        report.check(f"table {spec.name} equals the MDF recount", _first(difference_messages(
            [table_differences(written, _top_recount(parts, spec.name, cols, top), cols), *(d for d, _ in below)], cols)))
        report.check(f"table {spec.name} hierarchy sums", _first(hierarchy_messages(
            [_top_hierarchy(written, parts, spec.name, cols, manifest.levels), *(h for _, h in below)], manifest.levels)))

    if not with_units:  # the rest needs the units MDF: invariants, rules, the confidential inputs
        return report

    problems = []
    for geo_level, totals in published.items():
        count = ({"": sum(s.persons for s in parts)} if geo_level == "nation" else
                 {s.state: s.persons for s in parts} if geo_level == "state" else
                 {g: n for s in parts for (lv, g), n in s.population.items() if lv == geo_level})
        for g, total in totals.items():
            if int(count.get(g, 0)) != int(total):
                problems.append(f"{geo_level} {g!r}: population {int(count.get(g, 0))} differs from the published "
                                f"invariant {total}")
    if not published:
        problems.append("the manifest publishes no total-population invariant")
    if "invariants" in holds:
        report.check("total population invariant (published)", problems)
    if "schema_constraints" in holds:
        for name in dict.fromkeys(n for s in parts for n in s.findings.problems if n.startswith("rules of schema ")):
            report.check(name, _merged(parts, name))

    if inputs is not None:
        truth = pd.concat([pd.Series(s.input_persons, dtype=np.int64) for s in parts]
                          + [_input_population(by_state, {s.state for s in parts})]).groupby(level=0).sum()
        problems = []
        for geo_level, out in (("nation", pd.Series({"": sum(s.persons for s in parts)})),
                               ("state", pd.Series({s.state: s.persons for s in parts}, dtype=np.int64))):
            if geo_level not in manifest.levels:
                continue
            expected = pd.Series({"": int(truth.sum())}) if geo_level == "nation" else truth
            expected, out = expected.align(out, fill_value=0)
            for g in sorted(expected.index[expected != out]):
                problems.append(f"{geo_level} {g!r}: population {out[g]} differs from the input")
        report.check("total population invariant against the inputs (nation, state)", problems)
        for name in (HOUSING_CHECK, FACILITIES_CHECK):
            report.check(name, _merged(parts, name))
    return report


def _top_recount(parts: list[StateChecks], table: str, cols: list[str], top: list[str]) -> pd.DataFrame:
    """A table's recount at the nation (the sum of the states') and, if the table has them, the states."""
    rows = {s.state: s.recount[table] for s in parts if s.recount.get(table) is not None}
    states = pd.DataFrame(np.array(list(rows.values()), dtype=np.int64).reshape(len(rows), len(cols)), columns=cols)
    states = states.assign(geocode=list(rows), level="state")
    nation = states[cols].sum().to_frame().T.assign(geocode="", level="nation") if rows else states.iloc[:0]
    return pd.concat([frame for level, frame in (("nation", nation), ("state", states)) if level in top],
                     ignore_index=True)


def _top_hierarchy(written: pd.DataFrame, parts: list[StateChecks], table: str, cols: list[str], geo_levels):
    """`hierarchy_differences` of the nation and state rows; without a state level, the nation against
    the sum of its children's rows that each state added up."""
    if "state" in geo_levels or len(geo_levels) < 2:
        return hierarchy_differences(written, cols, [lv for lv in geo_levels if LEVEL_DIGITS[lv] <= LEVEL_DIGITS["state"]])
    sums = np.sum([s.child_sums[table] for s in parts if table in s.child_sums], axis=0) if parts else 0
    nation = written.loc[written["level"] == "nation", cols].to_numpy()
    return {(geo_levels[0], geo_levels[1]): [""] if len(nation) and (nation[0] != sums).any() else []}


def validate_state(run_dir: Path, manifest: Manifest, state: str, holds: frozenset[str],
                   inputs: dict[str, tuple[Path, Path]] | tuple[Path, Path] | None = None) -> StateChecks:
    """The checks of one state's part of the release, reading only its rows of the MDF and the tables
    (levels from the state down), its own NMF files and its rows of the operator inputs (`inputs`: the
    two files, or each state's own): memory follows the state."""
    out = StateChecks(state)
    found = out.findings
    persons_schema, units_schema = _schemas(run_dir, manifest)
    with_units = "units_mdf" in holds
    if with_units:
        units, unit_rows = read_state(run_dir / "mdf_units.parquet", state)
        check_unit_records(units, units_schema, found, unit_rows)
        universe = _present(units["geocode"])
        if "nmf_matches_certificate" in holds:
            out.nmf = state_nmf(run_dir, manifest, state, universe)
    mdf, rows = read_state(run_dir / "mdf_persons.parquet", state)
    out.persons = len(mdf)
    if with_units:
        outside = np.setdiff1d(_present(mdf["geocode"]), universe)
        out.outside = (len(outside), str(outside[0]) if len(outside) else "")
    levels = check_records(mdf, persons_schema, found, rows)
    if levels is None:
        out.stopped = True
        return out
    if "EPNUM" in mdf:
        out.epnums = Epnums.of(mdf["EPNUM"].astype(np.int64).to_numpy(), rows)
    housing = units[units["RTYPE"].astype(int) == HOUSING_UNIT].reset_index(drop=True) if with_units else None
    try:
        unit_levels = _levels(housing, units_schema) if units_schema else None
    except (ValueError, KeyError) as e:
        found.check(UNITS_LEVELS_UNREADABLE, [str(e)])
        out.stopped = True
        return out

    # the state's levels (the state's own row, for the nation's recount, even when no table has a state level)
    below = [lv for lv in manifest.levels if LEVEL_DIGITS[lv] > LEVEL_DIGITS["state"]]
    own_levels = ["state", *below] if "state" in manifest.levels else below
    prefixes: dict[str, dict] = {}  # shared by every table of the same records
    for spec, kind, path in _tables(run_dir, manifest, holds, persons_schema, units_schema):
        records, lv, schema = (mdf, levels, persons_schema) if kind == "persons" else (housing, unit_levels, units_schema)
        cols = column_names(schema, spec)
        if not path.exists() or not {"level", "geocode", *cols} <= set(_columns(path)):
            continue  # the driver says so
        written = _read_rows(path, [("geocode", ">=", state), ("geocode", "<", state + "\x7f")])
        written = written[written["level"].isin(own_levels)].reset_index(drop=True)
        if kind not in prefixes:
            prefixes[kind] = prefix_codes(records, ["state", *below])
        recount = recount_table(records, lv, schema, spec, ["state", *below], prefixes[kind])
        own = (recount["level"] == "state").to_numpy()
        out.recount[spec.name] = recount.loc[own, cols].to_numpy()[0].tolist() if own.any() else None
        hierarchy = hierarchy_differences(written, cols, own_levels)
        if "state" not in manifest.levels and below:  # the nation's children are below the state: their sum here
            out.child_sums[spec.name] = written.loc[written["level"] == below[0], cols].sum().tolist()
        out.tables[spec.name] = (table_differences(written[written["level"] != "state"], recount[~own], cols), hierarchy)
    if not with_units:
        return out

    for geo_level, totals in (manifest.invariants.total_population or {}).items():
        k = LEVEL_DIGITS[geo_level]
        if k > LEVEL_DIGITS["state"]:
            counts = mdf["geocode"].str.slice(0, k).value_counts()
            out.population.update({(geo_level, g): int(counts.get(g, 0)) for g in totals if g.startswith(state)})
    if "schema_constraints" in holds:
        inside = ~mdf["geocode"].isin(outside).to_numpy()  # those outside are reported above
        facts = block_facts(mdf[inside], levels[inside], persons_schema, units, universe)
        check_rules("persons", mdf[inside], levels[inside], persons_schema, facts, universe, found)
        if units_schema is not None:
            check_rules("units", housing, unit_levels, units_schema, facts, universe, found)
    if inputs is not None:
        own_inputs = inputs.get(state) if isinstance(inputs, dict) else inputs
        if own_inputs is not None:  # its own file: every record, whichever state it names
            persons_in = _read(Path(own_inputs[0]), ["TABBLKST"], None if isinstance(inputs, dict) else state)
            out.input_persons = persons_in["TABBLKST"].astype(str).value_counts().to_dict()
        columns = [*GEO, "RTYPE", "GQTYPE_PL"]
        units_in = (_read(Path(own_inputs[1]), columns, state) if own_inputs is not None
                    else pd.DataFrame({c: pd.Series([], dtype=str) for c in columns}))
        units_in["geocode"] = _geocode(units_in)
        check_against_inputs(units, units_in, found)
    return out


def check_against_inputs(mdf_units: pd.DataFrame, units_in: pd.DataFrame, report: Report | Findings) -> None:
    """Housing units and GQ facilities per block equal the inputs' (both with their `geocode`)."""
    hu_in = _by_geocode(units_in[units_in["RTYPE"].astype(int) == HOUSING_UNIT].groupby("geocode", observed=True).size())
    hu_out = _by_geocode(mdf_units[mdf_units["RTYPE"].astype(int) == HOUSING_UNIT].groupby("geocode",
                                                                                         observed=True).size())
    hu_in, hu_out = hu_in.align(hu_out, fill_value=0)
    report.check(HOUSING_CHECK, [f"block {g}: {hu_out[g]} housing units, input has {hu_in[g]}"
                                 for g in hu_in.index[hu_in != hu_out]])
    fac_in, fac_out = _facilities(units_in).stack(), _facilities(mdf_units).stack()
    fac_in, fac_out = fac_in.align(fac_out, fill_value=0)
    report.check(FACILITIES_CHECK, [f"block {g} type {t}: {fac_out[(g, t)]} facilities, input has {fac_in[(g, t)]}"
                                    for g, t in fac_in.index[fac_in != fac_out]])


def _inputs_by_state(inputs: tuple[Path, Path]) -> dict[str, tuple[Path, Path]] | tuple[Path, Path]:
    """Each state's own input files in a partitioned run (the inputs are directories), else the two files."""
    persons, units = (Path(p) for p in inputs)
    if not persons.is_dir():
        return persons, units
    try:
        return {s.state: (s.persons, s.units) for s in partitions.state_inputs(persons, units)}
    except partitions.PartitionError as e:
        raise ValidationError(str(e)) from None


def _input_population(by_state: dict[str, tuple[Path, Path]] | tuple[Path, Path], states: set[str]) -> pd.Series:
    """Persons per state in the inputs (`_inputs_by_state`) of the states other than `states` (each
    state counts its own, `validate_state`): the files of other states, or in one persons file its
    records of other states (a Parquet file's states from its row-group statistics where they give one
    state, see `_states_in`; a CSV file's TABBLKST column)."""
    if isinstance(by_state, dict):
        files = [(p, None) for s, (p, _) in sorted(by_state.items()) if s not in states]
    else:
        persons = Path(by_state[0])
        others = (_read(persons, ["TABBLKST"])["TABBLKST"].astype(str).unique() if persons.suffix == ".csv"
                  else _states_in(persons))
        files = [(persons, s) for s in sorted(set(others) - states)]
    counts = [_read(Path(p), ["TABBLKST"], s)["TABBLKST"].astype(str).value_counts() for p, s in files]
    return pd.concat(counts).groupby(level=0).sum().astype(np.int64) if counts else pd.Series([], dtype=np.int64)


def table_differences(written: pd.DataFrame, recount: pd.DataFrame, cols: list[str]) -> dict[int, list[tuple]]:
    """Where a table's rows differ from the recount (a geounit missing from either counts as zeros): per
    column (its index in cols), the first 3 differing rows in (level, geocode) order as
    (level, geocode, table value, recount value)."""
    merged = written.merge(recount, on=["level", "geocode"], how="outer", suffixes=("", "__recount"))
    table_values = merged[cols].fillna(0).to_numpy()
    recount_values = merged[[c + "__recount" for c in cols]].fillna(0).to_numpy()
    differs = table_values != recount_values
    return {int(j): [(str(merged["level"].iloc[i]), str(merged["geocode"].iloc[i]), table_values[i, j],
                      recount_values[i, j]) for i in np.flatnonzero(differs[:, j])[:3]]
            for j in np.flatnonzero(differs.any(axis=0))}


def difference_messages(parts: list[dict[int, list[tuple]]], cols: list[str]) -> list[str]:
    """The `table_differences` of parts of a table, merged: per column, the first 3 rows of them all."""
    problems = []
    for j in sorted({j for part in parts for j in part}):
        for level, geocode, table, recount in sorted(row for part in parts for row in part.get(j, []))[:3]:
            problems.append(f"{level} {geocode!r} column {cols[j]!r}: table {table:g}, MDF recount {recount:g}")
    return problems


def hierarchy_differences(written: pd.DataFrame, cols: list[str], geo_levels) -> dict[tuple[str, str], list[str]]:
    """Per (parent, child) of consecutive geo_levels: the first 3 parent geocodes whose child rows do
    not sum to them."""
    found = {}
    for parent, child in zip(geo_levels, geo_levels[1:]):
        p = written[written["level"] == parent].set_index("geocode")[cols]
        c = written[written["level"] == child]
        sums = c.groupby(c["geocode"].str.slice(0, LEVEL_DIGITS[parent]))[cols].sum()
        sums = sums.reindex(p.index, fill_value=0)
        diff = (sums.to_numpy() != p.to_numpy()).any(axis=1)
        found[(parent, child)] = [str(g) for g in p.index[diff][:3]]
    return found


def hierarchy_messages(parts: list[dict[tuple[str, str], list[str]]], geo_levels) -> list[str]:
    """The `hierarchy_differences` of parts of a table, merged: per (parent, child), the first 3 of them all."""
    return [f"{child} rows of {parent} {g!r} do not sum to it" for parent, child in zip(geo_levels, geo_levels[1:])
            for g in [g for part in parts for g in part.get((parent, child), [])][:3]]


def _tables(run_dir: Path, manifest: Manifest, holds, persons_schema: Schema, units_schema: Schema | None):
    """(spec, "persons" or "units", path) of every table of the release recounted from an MDF."""
    if "tables_match_mdf" not in holds:
        return
    for spec in load_tables(manifest.tables):
        if spec.schema == persons_schema.name:
            kind = "persons"
        elif units_schema is not None and spec.schema == units_schema.name:
            kind = "units"
        else:
            continue
        yield spec, kind, run_dir / "tables" / f"{spec.name}.parquet"


def _schemas(run_dir: Path, manifest: Manifest) -> tuple[Schema, Schema | None]:
    try:
        return load_schema(manifest.schema("persons")), load_schema(manifest.schema("units")) if manifest.units else None
    except Exception as e:
        raise ValidationError(f"{run_dir / 'manifest.json'}: {e}") from None


def _unreadable(path: Path, e: Exception) -> ValidationError:
    return ValidationError(f"{path} is not a readable Parquet file ({str(e).splitlines()[0][:200]})")


def _columns(path: Path) -> list[str]:
    """The column names of a Parquet file of the release, or ValidationError naming it."""
    if not path.is_file():
        raise ValidationError(f"{path} is missing")
    try:
        return pq.read_schema(path).names
    except Exception as e:
        raise _unreadable(path, e) from None


def _read_rows(path: Path, filters) -> pd.DataFrame:
    """The rows of a Parquet file of the release that pass `filters` (row groups outside them are skipped)."""
    if not path.is_file():
        raise ValidationError(f"{path} is missing")
    try:
        return pq.read_table(path, filters=filters).to_pandas()
    except Exception as e:
        raise _unreadable(path, e) from None


def _state_groups(parquet: pq.ParquetFile, state: str | None) -> list[tuple[int, int]]:
    """(row group, its first row) of every row group that may hold the state's records (TABBLKST statistics)."""
    meta, groups, first = parquet.metadata, [], 0
    column = parquet.schema_arrow.get_field_index("TABBLKST")
    for g in range(meta.num_row_groups):
        stats = meta.row_group(g).column(column).statistics
        if state is None or stats is None or not stats.has_min_max or str(stats.min) <= state <= str(stats.max):
            groups.append((g, first))
        first += meta.row_group(g).num_rows
    return groups


def read_state(path: Path, state: str, columns: list[str] | None = None) -> tuple[pd.DataFrame, np.ndarray]:
    """One state's records of an MDF file, with their `geocode`, and each one's row in the file (0-based).
    A filtered read (row groups whose TABBLKST statistics exclude the state are skipped, the rest are
    filtered batch by batch); the rows come from the TABBLKST column of the row groups read."""
    if not path.is_file():
        raise ValidationError(f"{path} is missing")
    try:
        parquet = pq.ParquetFile(path)
        rows = []
        for g, first in _state_groups(parquet, state):
            column = parquet.read_row_group(g, columns=["TABBLKST"]).column(0)
            mine = [_equal(chunk, state) for chunk in column.chunks]
            rows.append(first + np.flatnonzero(np.concatenate(mine) if mine else np.zeros(0, bool)))
        table = pq.read_table(path, columns=columns, filters=[("TABBLKST", "==", state)])
    except Exception as e:
        raise _unreadable(path, e) from None
    rows = np.concatenate(rows) if rows else np.zeros(0, np.int64)
    if len(rows) != table.num_rows:
        raise ValidationError(f"{path}: {table.num_rows} records of state {state} read, {len(rows)} counted")
    frame = table.to_pandas()
    frame["geocode"] = _geocode(frame)
    return frame, rows


def _equal(chunk: pa.Array, value: str) -> np.ndarray:
    """chunk == value as a numpy mask, comparing only the dictionary of a dictionary-encoded chunk."""
    if pa.types.is_dictionary(chunk.type):
        lookup = np.asarray(chunk.dictionary.cast(pa.string()).to_pylist(), dtype=object) == value
        return np.r_[lookup, False][chunk.indices.fill_null(len(lookup)).to_numpy(zero_copy_only=False)]
    return pc.fill_null(pc.equal(chunk.cast(pa.string()), value), False).to_numpy(zero_copy_only=False)


def _reread_epnums(path: Path, state: str) -> tuple[np.ndarray, np.ndarray]:
    frame, rows = read_state(path, state, [*GEO, "EPNUM"])
    return frame["EPNUM"].astype(np.int64).to_numpy(), rows


def _states_in(path: Path) -> list[str]:
    """The states (TABBLKST) of an MDF file: from the row-group statistics where a row group holds one
    state, else from reading that row group's TABBLKST, batch by batch."""
    try:
        parquet = pq.ParquetFile(path)
        column = parquet.schema_arrow.get_field_index("TABBLKST")
        states: set[str] = set()
        for g in range(parquet.metadata.num_row_groups):
            stats = parquet.metadata.row_group(g).column(column).statistics
            if stats is not None and stats.has_min_max and stats.min == stats.max:
                states.add(str(stats.min))
            else:
                for batch in parquet.iter_batches(batch_size=1 << 20, row_groups=[g], columns=["TABBLKST"]):
                    states.update(str(v) for v in pc.unique(batch.column(0).cast(pa.string())).to_pylist())
    except Exception as e:
        raise _unreadable(path, e) from None
    return sorted(states)


def main(run_dir: str, out=None, inputs: tuple[str, str] | None = None) -> int:
    """Print the checks; 0 valid, 1 violations, 2 a file missing or unreadable."""
    out = out or sys.stdout
    try:
        report = validate_run(Path(run_dir), inputs=tuple(Path(p) for p in inputs) if inputs else None)
    except ValidationError as e:
        print(f"das validate: {e}", file=sys.stderr)
        return 2
    for line in report.checks:
        print(line, file=out)
    if report.violations:
        print(f"\n{len(report.violations)} violation(s):", file=out)
        for v in report.violations[:50]:
            print(f"  - {v}", file=out)
        return 1
    print(f"\n{run_dir}: valid ({len(report.checks)} checks)", file=out)
    return 0
