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
- the invariants hold: the published total population (nation, state), and every rule of the
  schema's constraints (facilities, structural zeros) against the units MDF.
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
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from das.bundle import RUN_FILES, BundleError, input_paths, read_manifest
from das.checkpoint import file_sha256
from das.geography import LEVEL_DIGITS
from das.io.tables import column_names, load_tables
from das.schema import Schema, load_schema

GEO = ["TABBLKST", "TABBLKCOU", "TABTRACTCE", "TABBLK"]
MAX_LISTED = 20
HOUSING_UNIT, GQ_FACILITY = 2, 4  # units MDF RTYPE
HOLDS = ("mdf_codes", "tables_match_mdf", "nmf_matches_certificate", "units_mdf", "invariants",
         "schema_constraints", "charges_sum_to_rho")
TOPDOWN_HOLDS = tuple(h for h in HOLDS if h != "charges_sum_to_rho")
SYNTHETIC_HOLDS = ("mdf_codes", "tables_match_mdf", "charges_sum_to_rho")


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


def _read(path: Path) -> pd.DataFrame:
    if path.suffix == ".csv":
        return pd.read_csv(path, dtype=str, keep_default_na=False)
    return pd.read_parquet(path)


def _geocode(frame: pd.DataFrame) -> pd.Series:
    parts = [frame[c].astype(str) for c in GEO]
    return (parts[0] + parts[1] + parts[2] + parts[3]) if len(frame) else pd.Series([], dtype=str)


def _levels(frame: pd.DataFrame, schema: Schema) -> pd.DataFrame:
    """Decode input/MDF code columns to attribute levels (and recode levels), by lookup."""
    out = {}
    for a in schema.attributes:
        col = frame[a.column]
        lookup = {str(code): i for i, code in enumerate(a.codes)}
        levels = col.astype(str).map(lookup)
        if levels.isna().any():
            bad = col[levels.isna()].iloc[0]
            raise ValueError(f"column {a.column} holds {bad!r}, not a code of {a.name}")
        out[a.name] = levels.astype(np.int64).to_numpy()
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
    for geo_level in geo_levels:
        unit, geocodes = prefixes[geo_level]
        present = np.unique(unit[keep])
        columns = []
        for qname in spec.queries:
            q = schema.query(qname)
            if not q.factors:
                key = np.zeros(len(records), dtype=np.int64)
            else:
                key = np.ravel_multi_index([levels[f].to_numpy() for f in q.factors], q.shape)
            counts = np.bincount(unit[keep] * q.size + key[keep], minlength=len(geocodes) * q.size)
            columns.append(counts.reshape(len(geocodes), q.size)[present])
        table = pd.DataFrame(np.hstack(columns) if columns else np.zeros((len(present), 0), np.int64), columns=names)
        table.insert(0, "geocode", geocodes[present])
        frames.append(table.assign(level=geo_level))
    return pd.concat(frames, ignore_index=True)


def load_manifest(run_dir: Path) -> dict:
    """The run's manifest, or ValidationError naming the file and what is wrong with it."""
    try:
        manifest = read_manifest(run_dir)
    except BundleError as e:
        raise ValidationError(str(e)) from None
    missing = [k for k in ("status", "levels", "persons", "privacy", "spec_text") if k not in manifest]
    if missing:
        raise ValidationError(f"{Path(run_dir) / 'manifest.json'} is not a das run manifest (no {', '.join(missing)})")
    return manifest


def read_parquet(path: Path, columns=None) -> pd.DataFrame:
    """A Parquet file of the release, or ValidationError naming it."""
    if not path.is_file():
        raise ValidationError(f"{path} is missing")
    try:
        return pd.read_parquet(path, columns=columns)
    except Exception as e:  # pyarrow raises several types for a corrupt file
        raise ValidationError(f"{path} is not a readable Parquet file ({str(e).splitlines()[0][:200]})") from None


def check_files(run_dir: Path, manifest: dict, report: Report, with_nmf: bool = True) -> None:
    """Checksums of every listed output and NMF file; no unlisted release file; the spec digest."""
    listed = {**manifest.get("outputs", {}), **manifest.get("nmf", {})}
    problems = []
    if not manifest.get("outputs") or with_nmf and not manifest.get("nmf"):
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
    text = manifest.get("spec_text", "")
    if manifest.get("spec_sha256") and hashlib.sha256(text.encode()).hexdigest() != manifest["spec_sha256"]:
        problems.append("spec_sha256 does not match the spec text in the manifest")
    report.check("checksums of every output and NMF file", _first(problems))


def check_metadata(run_dir: Path, manifest: dict, report: Report) -> None:
    """Every Parquet file says, in its own metadata, whether it is private and which spec made it."""
    import pyarrow.parquet as pq

    problems = []
    want_private = b"private" if manifest.get("private") else None
    for name in sorted({**manifest.get("outputs", {}), **manifest.get("nmf", {})}):
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
                            f"private = {manifest.get('private')}")
        if manifest.get("spec_sha256") and meta.get(b"das.spec_sha256", b"").decode() != manifest["spec_sha256"]:
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
    import pyarrow as pa

    if not pa.types.is_dictionary(column.type):
        column = column.dictionary_encode()
    return (column.indices.to_numpy(zero_copy_only=False).astype(np.int64),
            np.asarray(column.dictionary.to_pylist(), dtype=str))


def _nmf_file_problems(path: Path, name: str, level: dict, schema: Schema, geounits: np.ndarray) -> list[str]:
    """One NMF level file against its certificate entry, streamed batch by batch (bounded memory).

    The documented layout makes uniqueness checkable without a group-by: a query's rows run
    geounit-major, then cell, over the level's geounits in geocode order, so row i of a query must
    be (geounits[i // size], i % size).
    """
    import pyarrow.parquet as pq

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
            for code in np.unique(query_codes):
                query = str(query_names[code])
                rows = np.flatnonzero(query_codes == code)
                if query not in queries:
                    problems.append(f"{name}: query {query!r} is not in the certificate")
                    continue
                size, start = sizes[query], seen.get(query, 0)
                seen[query] = start + len(rows)
                if seen[query] > len(geounits) * size:
                    problems.append(f"{name} {query}: more rows than {len(geounits)} geounits x {size} cells")
                    continue
                position = start + np.arange(len(rows))
                if (cells_all[rows] != position % size).any() or \
                        (unit_position[unit_codes[rows]] != position // size).any():
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


def check_nmf(run_dir: Path, manifest: dict, universe: pd.Series, report: Report) -> None:
    """The NMF holds exactly the certified measurements, each (geocode, query, cell) once, at the certified variance."""
    problems = []
    for release, cert in manifest["privacy"].items():
        schema = load_schema(manifest[release]["schema"])
        for level in cert["by_level"]:
            name = f"nmf/{release}/{level['level']}.parquet"
            path = run_dir / name
            if not path.is_file():
                raise ValidationError(f"{path} is missing (the certificate measures {release} at {level['level']})")
            geounits = np.unique(universe.str.slice(0, LEVEL_DIGITS[level["level"]]).to_numpy(dtype=str))
            problems += _nmf_file_problems(path, name, level, schema, geounits)
    report.check("NMF: exactly the certified measurements", _first(problems))


def check_constraints(mdf: pd.DataFrame, levels: pd.DataFrame, schema: Schema, housing: pd.Series,
                      facilities: pd.DataFrame, report: Report) -> None:
    """Every rule of the schema's constraints, read from the schema (not hard-coded): facilities
    (>= 1 person of a GQ type with a facility, none without; no household persons without housing
    units) and structural zeros, against the housing units and facilities per block."""
    problems = []
    blocks = mdf["geocode"].to_numpy()
    for c in schema.constraints:
        query = schema.query(c.query)
        factor_levels = [levels[f].to_numpy() for f in query.factors]
        if c.kind == "facilities":
            (hhgq,) = factor_levels
            per_block = pd.crosstab(blocks, hhgq).reindex(columns=range(query.size), fill_value=0)
            index = per_block.index.union(facilities.index)
            per_block = per_block.reindex(index, fill_value=0)
            fac = facilities.reindex(index, fill_value=0).reindex(columns=range(1, query.size), fill_value=0)
            hu = housing.reindex(index, fill_value=0)
            for t in range(1, query.size):
                for g in index[(fac[t].to_numpy() == 0) & (per_block[t].to_numpy() > 0)][:3]:
                    problems.append(f"block {g}: persons in GQ type {t} without such a facility")
                for g in index[(fac[t].to_numpy() > 0) & (per_block[t].to_numpy() == 0)][:3]:
                    problems.append(f"block {g}: a GQ facility of type {t} holds nobody")
            for g in index[(hu.to_numpy() == 0) & (per_block[0].to_numpy() > 0)][:3]:
                problems.append(f"block {g}: household persons without housing units")
        elif c.kind == "structural_zero":
            for cell in c.cells:
                hit = np.logical_and.reduce([lv == v for lv, v in zip(factor_levels, cell)])
                if hit.any():
                    shown = " and ".join(f"{f} '{schema.factor_labels(f)[v]}'" for f, v in zip(query.factors, cell))
                    problems.append(f"{int(hit.sum())} persons with {shown} (a structural zero of {schema.name})")
    report.check(f"constraints of schema {schema.name} (facilities, structural zeros)", _first(problems))


def _facilities(units: pd.DataFrame) -> pd.DataFrame:
    gq = units[units["RTYPE"].astype(int) == GQ_FACILITY]
    return gq.assign(GQTYPE_PL=gq["GQTYPE_PL"].astype(int)).groupby(["geocode", "GQTYPE_PL"]).size().unstack(fill_value=0)


def _operator_inputs(run_dir: Path) -> tuple[Path, Path] | None:
    try:
        paths = input_paths(run_dir)
    except BundleError:
        return None
    persons, units = Path(paths.get("persons", "")), Path(paths.get("units", ""))
    return (persons, units) if persons.is_file() and units.is_file() else None


def release_holds(manifest: dict, report: Report) -> set[str]:
    """What the release claims to hold: its manifest's `holds`, or everything TopDown holds."""
    holds = manifest.get("holds", TOPDOWN_HOLDS)
    unknown = [h for h in holds if h not in HOLDS]
    if unknown:
        report.check("the release's claims are checkable", [f"claims {h!r}, which das validate does not know "
                                                              f"(known: {', '.join(HOLDS)})" for h in unknown])
    return set(holds)


def check_charges(manifest: dict, report: Report) -> None:
    """Each release's certificate: its charges are positive exact fractions summing exactly to its rho,
    within its budget; its delta parts sum exactly to its delta."""
    from fractions import Fraction

    problems = []
    for release, cert in manifest["privacy"].items():
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


def validate_run(run_dir: Path, inputs: tuple[Path, Path] | None = None, use_operator: bool = True) -> Report:
    """Every check of a run directory that its release claims (`holds`); `inputs` (or the run's operator
    files) add the comparison with the confidential inputs. Raises ValidationError when a file is
    missing or unreadable."""
    run_dir = Path(run_dir)
    report = Report()
    manifest = load_manifest(run_dir)
    if manifest.get("status") != "complete":
        report.check("run complete", [f"manifest status is {manifest.get('status')!r}, not 'complete'"])
        return report
    holds = release_holds(manifest, report)
    check_files(run_dir, manifest, report, with_nmf="nmf_matches_certificate" in holds)
    check_metadata(run_dir, manifest, report)
    if "charges_sum_to_rho" in holds:
        check_charges(manifest, report)
    geo_levels = manifest["levels"]
    try:
        persons_schema = load_schema(manifest["persons"]["schema"])
        units_schema = load_schema(manifest["units"]["schema"]) if manifest.get("units") else None
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
        universe = pd.Series(sorted(set(mdf_units["geocode"])), dtype=str)
        check_unit_records(mdf_units, units_schema, report)
        if "nmf_matches_certificate" in holds:
            check_nmf(run_dir, manifest, universe, report)

        # 1. MDF codes and geography
        outside = sorted(set(mdf["geocode"]) - set(universe))
        report.check("MDF persons: in blocks of the release universe",
                     [f"{len(outside)} MDF blocks have no housing unit or facility in the units MDF, e.g. {outside[0]}"]
                     if outside else [])
    levels = check_records(mdf, persons_schema, report)
    if levels is None:
        return report

    # 2. tables recounted from the MDF equal the written tables; 3. hierarchy sums
    tables = load_tables(manifest.get("tables", "pl94")) if "tables_match_mdf" in holds else ()
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
        for col in cols:
            a = merged[col].fillna(0).to_numpy()
            b = merged[col + "__recount"].fillna(0).to_numpy()
            bad = np.flatnonzero(a != b)
            for i in bad[:3]:
                problems.append(f"{merged['level'].iloc[i]} {merged['geocode'].iloc[i]!r} column {col!r}: "
                                f"table {a[i]:g}, MDF recount {b[i]:g}")
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

    if not with_units:  # the rest needs the units MDF: invariants, constraints, the confidential inputs
        return report

    # 4. invariants: published population; schema constraints against the units MDF
    problems = []
    published = manifest.get("invariants", {}).get("total_population", {})
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
    hu_out = mdf_units[mdf_units["RTYPE"].astype(int) == HOUSING_UNIT].groupby("geocode").size()
    fac_out = _facilities(mdf_units)
    if "schema_constraints" in holds:
        check_constraints(mdf, levels, persons_schema, hu_out, fac_out, report)
    if units_schema is not None and any(c.kind == "household_persons" for c in units_schema.constraints):
        report.check("occupied units agree with household persons (every level)",
                     _first(persons_units_disagreements(mdf, mdf_units, geo_levels)))

    # 5. with the confidential inputs (operator only): the invariants against them
    inputs = inputs or (_operator_inputs(run_dir) if use_operator else None)
    if inputs is not None and "invariants" in holds:
        check_against_inputs(mdf, mdf_units, geo_levels, inputs, report)
    return report


def check_against_inputs(mdf: pd.DataFrame, mdf_units: pd.DataFrame, geo_levels, inputs: tuple[Path, Path],
                         report: Report) -> None:
    """Population (nation, state), housing units and GQ facilities per block equal the inputs'."""
    persons_in, units_in = _read(Path(inputs[0])), _read(Path(inputs[1]))
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
    hu_in = units_in[units_in["RTYPE"].astype(int) == HOUSING_UNIT].groupby("geocode").size()
    hu_out = mdf_units[mdf_units["RTYPE"].astype(int) == HOUSING_UNIT].groupby("geocode").size()
    hu_in, hu_out = hu_in.align(hu_out, fill_value=0)
    report.check("housing units per block invariant", _first([
        f"block {g}: {hu_out[g]} housing units, input has {hu_in[g]}" for g in hu_in.index[hu_in != hu_out]]))
    fac_in, fac_out = _facilities(units_in).stack(), _facilities(mdf_units).stack()
    fac_in, fac_out = fac_in.align(fac_out, fill_value=0)
    report.check("GQ facilities per block invariant", _first([
        f"block {g} type {t}: {fac_out[(g, t)]} facilities, input has {fac_in[(g, t)]}"
        for g, t in fac_in.index[fac_in != fac_out]]))


def persons_units_disagreements(mdf: pd.DataFrame, mdf_units: pd.DataFrame, geo_levels) -> list[str]:
    """Geounits at any level with household persons but no occupied unit, or more occupied units than
    household persons (which includes occupied units without household persons)."""
    problems = []
    household = mdf["geocode"][mdf["GQTYPE_PL"].astype(int).to_numpy() == 0]
    occupied_rows = (mdf_units["RTYPE"].astype(int).to_numpy() == 2) & (mdf_units["HH_STATUS"].astype(int).to_numpy() == 1)
    occupied = mdf_units["geocode"][occupied_rows]
    for geo_level in geo_levels:
        k = LEVEL_DIGITS[geo_level]
        hhp = household.str.slice(0, k).value_counts()
        occ = occupied.str.slice(0, k).value_counts()
        hhp, occ = hhp.align(occ, fill_value=0)
        for g in hhp.index[(hhp > 0) & (occ == 0)][:3]:
            problems.append(f"{geo_level} {g!r}: {int(hhp[g])} household persons and no occupied housing unit")
        for g in hhp.index[occ > hhp][:3]:
            problems.append(f"{geo_level} {g!r}: {int(occ[g])} occupied housing units but {int(hhp[g])} household persons")
    return problems


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
