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
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from das import rules
from das.bundle import RUN_FILES, BundleError, input_paths
from das.checkpoint import file_sha256
from das.geography import GEOCODE_COLUMNS, LEVEL_DIGITS
from das.io.tables import column_names, load_tables
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


def _read(path: Path, columns: list[str]) -> pd.DataFrame:
    """The named columns of a confidential input file (CSV as text, or Parquet)."""
    if path.suffix == ".csv":
        return pd.read_csv(path, dtype=str, keep_default_na=False, usecols=columns)
    return pd.read_parquet(path, columns=columns)


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


def read_parquet(path: Path, columns=None) -> pd.DataFrame:
    """A Parquet file of the release, or ValidationError naming it."""
    if not path.is_file():
        raise ValidationError(f"{path} is missing")
    try:
        return pd.read_parquet(path, columns=columns)
    except Exception as e:  # pyarrow raises several types for a corrupt file
        raise ValidationError(f"{path} is not a readable Parquet file ({str(e).splitlines()[0][:200]})") from None


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
                known = any(fnmatch.fnmatchcase(relative, p) for p in RUN_FILES)
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
            raise ValidationError(f"{run_dir / name} is not a readable Parquet file ({str(e).splitlines()[0][:200]})") from None
        mode = meta.get(b"das.privacy")
        if mode is None:
            problems.append(f"{name}: no das.privacy metadata")
        elif want_private and mode != want_private or not want_private and b"NOT PRIVATE" not in mode:
            problems.append(f"{name}: das.privacy says {mode.decode(errors='replace')!r}, the manifest says "
                            f"private = {manifest.private}")
        if manifest.spec_sha256 and meta.get(b"das.spec_sha256", b"").decode() != manifest.spec_sha256:
            problems.append(f"{name}: das.spec_sha256 is not the run's spec digest")
    report.check("privacy mode and spec digest in every Parquet file", _first(problems))


def check_records(mdf: pd.DataFrame, schema: Schema, report: Report) -> pd.DataFrame | None:
    """Valid codes, derived columns consistent with the schema, EPNUM 1..N unique; the levels, or None."""
    problems = []
    try:
        levels = _levels(mdf, schema)
    except (ValueError, KeyError) as e:
        report.check("MDF persons: valid codes", [str(e)])
        return None
    for column, attribute, mapping in schema.derived:
        if column not in mdf:
            problems.append(f"column {column} is missing")
            continue
        expected = np.asarray(mapping)[levels[attribute].to_numpy()]
        bad = np.flatnonzero(mdf[column].astype(np.int64).to_numpy() != expected)
        for i in bad[:3]:
            a = schema.attribute(attribute)
            problems.append(f"row {i + 1}: {column} {mdf[column].iloc[i]} with {a.column} "
                            f"{mdf[a.column].iloc[i]} (expected {column} {expected[i]})")
        if len(bad) > 3:
            problems.append(f"... and {len(bad) - 3} more rows with {column} inconsistent")
    if "EPNUM" not in mdf:
        problems.append("column EPNUM is missing")
    else:
        epnum = mdf["EPNUM"].astype(np.int64).to_numpy()
        repeated = pd.Series(epnum).duplicated().to_numpy()
        for i in np.flatnonzero(repeated)[:3]:
            problems.append(f"row {i + 1}: EPNUM {epnum[i]} appears on an earlier row too")
        if not repeated.any() and len(epnum) and (epnum.min() != 1 or epnum.max() != len(epnum)):
            problems.append(f"EPNUM runs {epnum.min()}..{epnum.max()}, expected 1..{len(epnum)}")
    report.check("MDF persons: valid codes, derived columns, unique EPNUM", _first(problems))
    return levels


def check_unit_records(units: pd.DataFrame, units_schema: Schema | None, report: Report) -> None:
    """Housing units carry the units schema's derived codes and an HH_STATUS; GQ facilities a GQ type and HH_STATUS 0."""
    problems = []
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
            problems.append(f"row {i + 1}: {values[i]} (expected {expected})")
    report.check("MDF units: valid codes, housing units vs facilities", _first(problems))


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
        raise ValidationError(f"{path} is not a readable Parquet file ({str(e).splitlines()[0][:200]})") from None
    queries = {q["query"]: q for q in level["queries"]}
    sizes = {q: schema.query(q).size for q in queries}
    variances = {q: tuple(int(x) for x in (v["sigma2"].split("/") if "/" in v["sigma2"] else (v["sigma2"], 1)))
                 for q, v in queries.items()}
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
                    problems.append(f"{name} {query}: a variance differs from the certified {queries[query]['sigma2']}")
    except Exception as e:  # a corrupt page or a missing column
        raise ValidationError(f"{path} is not a readable NMF file ({str(e).splitlines()[0][:200]})") from None
    for query in queries:
        expected = len(geounits) * sizes[query]
        if seen.get(query, 0) != expected:
            problems.append(f"{name} {query}: {seen.get(query, 0)} rows, expected {len(geounits)} geounits x "
                            f"{sizes[query]} cells")
    return sorted(set(problems), key=problems.index)


def check_nmf(run_dir: Path, manifest: Manifest, universe: pd.Series, report: Report) -> None:
    """The NMF holds exactly the certified measurements, each (geocode, query, cell) once, at the certified variance."""
    problems = []
    for release, cert in manifest.privacy.items():
        schema = load_schema(manifest.schema(release))
        for level in cert["by_level"]:
            name = f"nmf/{release}/{level['level']}.parquet"
            path = run_dir / name
            if not path.is_file():
                raise ValidationError(f"{path} is missing (the certificate measures {release} at {level['level']})")
            geounits = np.unique(universe.str.slice(0, LEVEL_DIGITS[level["level"]]).to_numpy(dtype=str))
            problems += _nmf_file_problems(path, name, level, schema, geounits)
    report.check("NMF: exactly the certified measurements", _first(problems))


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
                universe: np.ndarray, report: Report) -> None:
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
    report.check(f"rules of schema {schema.name} ({release}: {kinds})", _first(problems))


def _facilities(units: pd.DataFrame) -> pd.DataFrame:
    gq = units[units["RTYPE"].astype(int) == GQ_FACILITY]
    counts = gq.assign(GQTYPE_PL=gq["GQTYPE_PL"].astype(int)).groupby(["geocode", "GQTYPE_PL"], observed=True).size()
    return _by_geocode(counts.unstack(fill_value=0))


def _by_geocode(counts):
    """Counts grouped by a `_geocode` column (its index categorical), indexed by the geocode strings."""
    counts.index = counts.index.astype(str)
    return counts


def _operator_inputs(run_dir: Path) -> tuple[Path, Path] | None:
    try:
        paths = input_paths(run_dir)
    except BundleError:
        return None
    persons, units = Path(paths.get("persons", "")), Path(paths.get("units", ""))
    return (persons, units) if persons.is_file() and units.is_file() else None


def release_holds(manifest: Manifest, report: Report) -> set[str]:
    """What the release claims to hold: its manifest's `holds`, or everything TopDown holds."""
    holds = TOPDOWN_HOLDS if manifest.holds is None else manifest.holds
    unknown = [h for h in holds if h not in HOLDS]
    report.check(f"the release claims {', '.join(holds) or 'nothing'}; those are checked",
                 [f"claims {h!r}, which das validate does not know (known: {', '.join(HOLDS)})" for h in unknown])
    return set(holds)


def check_charges(manifest: Manifest, report: Report) -> None:
    """Each release's certificate: its charges are positive exact fractions summing exactly to its rho,
    within its budget; its delta parts sum exactly to its delta."""
    problems = []
    for release, cert in manifest.privacy.items():
        try:
            charges = [Fraction(c["rho"]) for c in cert.get("charges", [])]
            rho, budget = Fraction(cert["rho"]), Fraction(cert.get("budget", cert["rho"]))
            delta = Fraction(cert["delta"])
            delta_parts = [Fraction(v) for v in cert.get("delta_parts", {}).values()]
        except (KeyError, ValueError, TypeError, ZeroDivisionError) as e:
            problems.append(f"{release}: the certificate is not readable as exact fractions ({e})")
            continue
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


@contextmanager
def _alongside(report: Report, check: Callable[[Report], None]) -> Iterator[None]:
    """Run `check` in a thread while the block runs; its checks and violations take their place in
    `report` where the block began, and its error (if any) is raised first, as run in order."""
    checks_at, violations_at, own = len(report.checks), len(report.violations), Report()
    with ThreadPoolExecutor(1) as pool:
        done = pool.submit(check, own)
        try:
            yield
        except BaseException:
            done.result()  # the check that comes first in order fails first
            raise
        done.result()
    report.checks[checks_at:checks_at] = own.checks
    report.violations[violations_at:violations_at] = own.violations


def validate_run(run_dir: Path, inputs: tuple[Path, Path] | None = None, use_operator: bool = True) -> Report:
    """Every check of a run directory that its release claims (`holds`); `inputs` (or the run's operator
    files) add the comparison with the confidential inputs. Raises ValidationError when a file is
    missing or unreadable. The NMF check (a pass over every noisy answer) runs in a thread beside
    the MDF checks; the report lists every check in the same order either way."""
    with ExitStack() as alongside:
        return _validate(Path(run_dir), inputs, use_operator, alongside)


def _validate(run_dir: Path, inputs: tuple[Path, Path] | None, use_operator: bool, alongside: ExitStack) -> Report:
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
    geo_levels = manifest.levels
    try:
        persons_schema = load_schema(manifest.schema("persons"))
        units_schema = load_schema(manifest.schema("units")) if manifest.units else None
    except Exception as e:
        raise ValidationError(f"{run_dir / 'manifest.json'}: {e}") from None

    mdf = read_parquet(run_dir / "mdf_persons.parquet")
    with_units = "units_mdf" in holds
    mdf_units = read_parquet(run_dir / "mdf_units.parquet") if with_units else None
    for frame in (mdf, mdf_units) if with_units else (mdf,):
        missing = [c for c in GEO if c not in frame]
        if missing:
            raise ValidationError(f"{run_dir}: an MDF file has no column {missing[0]}")
        frame["geocode"] = _geocode(frame)
    if with_units:
        universe = pd.Series(_present(mdf_units["geocode"]), dtype=str)
        check_unit_records(mdf_units, units_schema, report)
        if "nmf_matches_certificate" in holds:
            alongside.enter_context(_alongside(report, lambda own: check_nmf(run_dir, manifest, universe, own)))

        # 1. MDF codes and geography
        outside = np.setdiff1d(_present(mdf["geocode"]), universe.to_numpy(dtype=str)).tolist()
        report.check("MDF persons: in blocks of the release universe",
                     [f"{len(outside)} MDF blocks have no housing unit or facility in the units MDF, e.g. {outside[0]}"]
                     if outside else [])
    levels = check_records(mdf, persons_schema, report)
    if levels is None:
        return report

    # 2. tables recounted from the MDF equal the written tables; 3. hierarchy sums
    tables = load_tables(manifest.tables) if "tables_match_mdf" in holds else ()
    housing = mdf_units[mdf_units["RTYPE"].astype(int) == HOUSING_UNIT].reset_index(drop=True) if with_units else None
    try:
        unit_levels = _levels(housing, units_schema) if units_schema else None
    except (ValueError, KeyError) as e:
        report.check("MDF units: valid codes of the units schema", [str(e)])
        return report
    mdf = mdf.reset_index(drop=True)
    prefixes = {"persons": prefix_codes(mdf, geo_levels)}  # shared by every table of the same records
    for spec in tables:
        path = run_dir / "tables" / f"{spec.name}.parquet"
        if spec.schema == persons_schema.name:
            records, lv, schema, kind = mdf, levels, persons_schema, "persons"
        elif units_schema is not None and spec.schema == units_schema.name:
            records, lv, schema, kind = housing, unit_levels, units_schema, "units"
        else:
            continue
        if not path.exists():
            report.check(f"table {spec.name} written", [f"{path} is missing"])
            continue
        written = read_parquet(path)
        if kind not in prefixes:
            prefixes[kind] = prefix_codes(records, geo_levels)
        recount = recount_table(records, lv, schema, spec, geo_levels, prefixes[kind])
        cols = column_names(schema, spec)
        absent = [c for c in ["level", "geocode", *cols] if c not in written]
        if absent:
            report.check(f"table {spec.name} equals the MDF recount", [f"{path.name} has no column {absent[0]!r}"])
            continue
        merged = written.merge(recount, on=["level", "geocode"], how="outer", suffixes=("", "__recount"))
        problems = []
        table_values = merged[cols].fillna(0).to_numpy()
        recount_values = merged[[c + "__recount" for c in cols]].fillna(0).to_numpy()
        differs = table_values != recount_values
        for j in np.flatnonzero(differs.any(axis=0)):
            for i in np.flatnonzero(differs[:, j])[:3]:
                problems.append(f"{merged['level'].iloc[i]} {merged['geocode'].iloc[i]!r} column {cols[j]!r}: "
                                f"table {table_values[i, j]:g}, MDF recount {recount_values[i, j]:g}")
        report.check(f"table {spec.name} equals the MDF recount", _first(problems))
        problems = []
        for parent, child in zip(geo_levels, geo_levels[1:]):
            p = written[written["level"] == parent].set_index("geocode")[cols]
            c = written[written["level"] == child]
            sums = c.groupby(c["geocode"].str.slice(0, LEVEL_DIGITS[parent]))[cols].sum()
            sums = sums.reindex(p.index, fill_value=0)
            diff = (sums.to_numpy() != p.to_numpy()).any(axis=1)
            for g in p.index[diff][:3]:
                problems.append(f"{child} rows of {parent} {g!r} do not sum to it")
        report.check(f"table {spec.name} hierarchy sums", _first(problems))

    if not with_units:  # the rest needs the units MDF: invariants, rules, the confidential inputs
        return report

    # 4. invariants: published population; schema constraints against the units MDF
    problems = []
    published = manifest.invariants.get("total_population", {})
    for geo_level, totals in published.items():
        k = LEVEL_DIGITS[geo_level]
        out = mdf["geocode"].str.slice(0, k).value_counts()
        for g, total in totals.items():
            if int(out.get(g, 0)) != int(total):
                problems.append(f"{geo_level} {g!r}: population {int(out.get(g, 0))} differs from the published "
                                f"invariant {total}")
    if not published:
        problems.append("the manifest publishes no total-population invariant")
    if "invariants" in holds:
        report.check("total population invariant (published)", problems)
    if "schema_constraints" in holds:
        blocks = universe.to_numpy(dtype=str)
        inside = ~mdf["geocode"].isin(outside).to_numpy()  # those outside are reported above
        facts = block_facts(mdf[inside], levels[inside], persons_schema, mdf_units, blocks)
        check_rules("persons", mdf[inside], levels[inside], persons_schema, facts, blocks, report)
        if units_schema is not None:
            check_rules("units", housing, unit_levels, units_schema, facts, blocks, report)

    # 5. with the confidential inputs (operator only): the invariants against them
    inputs = inputs or (_operator_inputs(run_dir) if use_operator else None)
    if inputs is not None and "invariants" in holds:
        check_against_inputs(mdf, mdf_units, geo_levels, inputs, report)
    return report


def check_against_inputs(mdf: pd.DataFrame, mdf_units: pd.DataFrame, geo_levels, inputs: tuple[Path, Path],
                         report: Report) -> None:
    """Population (nation, state), housing units and GQ facilities per block equal the inputs'."""
    # only what the comparison needs: the geography, and a unit's record type and GQ type
    persons_in = _read(Path(inputs[0]), list(GEO))
    units_in = _read(Path(inputs[1]), [*GEO, "RTYPE", "GQTYPE_PL"])
    persons_in["geocode"] = _geocode(persons_in)
    units_in["geocode"] = _geocode(units_in)
    problems = []
    for geo_level in ("nation", "state"):
        if geo_level not in geo_levels:
            continue
        k = LEVEL_DIGITS[geo_level]
        truth = persons_in["geocode"].str.slice(0, k).value_counts()
        out = mdf["geocode"].str.slice(0, k).value_counts()
        truth, out = truth.align(out, fill_value=0)
        for g in truth.index[truth != out]:
            problems.append(f"{geo_level} {g!r}: population {out[g]} differs from the input")
    report.check("total population invariant against the inputs (nation, state)", problems)
    hu_in = _by_geocode(units_in[units_in["RTYPE"].astype(int) == HOUSING_UNIT].groupby("geocode", observed=True).size())
    hu_out = _by_geocode(mdf_units[mdf_units["RTYPE"].astype(int) == HOUSING_UNIT].groupby("geocode",
                                                                                         observed=True).size())
    hu_in, hu_out = hu_in.align(hu_out, fill_value=0)
    report.check("housing units per block invariant", _first([
        f"block {g}: {hu_out[g]} housing units, input has {hu_in[g]}" for g in hu_in.index[hu_in != hu_out]]))
    fac_in, fac_out = _facilities(units_in).stack(), _facilities(mdf_units).stack()
    fac_in, fac_out = fac_in.align(fac_out, fill_value=0)
    report.check("GQ facilities per block invariant", _first([
        f"block {g} type {t}: {fac_out[(g, t)]} facilities, input has {fac_in[(g, t)]}"
        for g, t in fac_in.index[fac_in != fac_out]]))


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
