"""Independent validation of a run directory: `das validate RUN_DIR`.

Its own code path, sharing nothing with the engine but the spec files (schemas as data): it
reads the written MDF and the run's confidential inputs with pandas, recounts everything by
group-by, and checks that
- the MDF holds valid codes in blocks of the input universe (records are nonnegative integers
  by construction; counts are recounted from rows),
- every written table equals the table recounted from the MDF,
- child rows of every table sum to their parent rows at every level,
- the invariants hold: state (and nation) population, housing units per block, GQ facilities
  per block, and the structural zeros (GQ type without facility, household persons without
  housing units, under 18 in nursing facilities).
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from das.geography import LEVEL_DIGITS
from das.io.tables import column_names, load_tables
from das.schema import Schema, load_schema

GEO = ["TABBLKST", "TABBLKCOU", "TABTRACTCE", "TABBLK"]
MAX_LISTED = 20


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


def validate_run(run_dir: Path) -> Report:
    run_dir = Path(run_dir)
    report = Report()
    manifest = json.loads((run_dir / "manifest.json").read_text())
    if manifest.get("status") != "complete":
        report.check("run complete", [f"manifest status is {manifest.get('status')!r}, not 'complete'"])
        return report
    geo_levels = manifest["levels"]
    persons_schema = load_schema(manifest["persons"]["schema"])
    units_schema = load_schema(manifest["units"]["schema"]) if manifest.get("units") else None

    persons_in = _read(Path(manifest["inputs"]["persons"]))
    units_in = _read(Path(manifest["inputs"]["units"]))
    persons_in["geocode"] = _geocode(persons_in)
    units_in["geocode"] = _geocode(units_in)
    mdf = pd.read_parquet(run_dir / "mdf_persons.parquet")
    mdf_units = pd.read_parquet(run_dir / "mdf_units.parquet")
    for frame in (mdf, mdf_units):
        frame["geocode"] = _geocode(frame)

    # 1. MDF codes and geography
    problems = []
    universe = set(units_in["geocode"])
    outside = sorted(set(mdf["geocode"]) - universe)
    if outside:
        problems.append(f"{len(outside)} MDF blocks are not in the input universe, e.g. {outside[0]}")
    try:
        levels = _levels(mdf, persons_schema)
    except ValueError as e:
        problems.append(str(e))
        levels = None
    report.check("MDF persons: valid codes in input blocks", problems)
    if levels is None:
        return report

    # 2. tables recounted from the MDF equal the written tables; 3. hierarchy sums
    tables = load_tables(manifest.get("tables", "pl94"))
    housing = mdf_units[mdf_units["RTYPE"] == 2].reset_index(drop=True)
    unit_levels = _levels(housing, units_schema) if units_schema else None
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
        written = pd.read_parquet(path)
        if kind not in prefixes:
            prefixes[kind] = prefix_codes(records, geo_levels)
        recount = recount_table(records, lv, schema, spec, geo_levels, prefixes[kind])
        merged = written.merge(recount, on=["level", "geocode"], how="outer", suffixes=("", "__recount"))
        problems = []
        for col in column_names(schema, spec):
            a = merged[col].fillna(0).to_numpy()
            b = merged[col + "__recount"].fillna(0).to_numpy()
            bad = np.flatnonzero(a != b)
            for i in bad[:3]:
                problems.append(f"{merged['level'].iloc[i]} {merged['geocode'].iloc[i]!r} column {col!r}: "
                                f"table {a[i]:g}, MDF recount {b[i]:g}")
        report.check(f"table {spec.name} equals the MDF recount", _first(problems))
        problems = []
        cols = column_names(schema, spec)
        for parent, child in zip(geo_levels, geo_levels[1:]):
            p = written[written["level"] == parent].set_index("geocode")[cols]
            c = written[written["level"] == child]
            sums = c.groupby(c["geocode"].str.slice(0, LEVEL_DIGITS[parent]))[cols].sum()
            sums = sums.reindex(p.index, fill_value=0)
            diff = (sums.to_numpy() != p.to_numpy()).any(axis=1)
            for g in p.index[diff][:3]:
                problems.append(f"{child} rows of {parent} {g!r} do not sum to it")
        report.check(f"table {spec.name} hierarchy sums", _first(problems))

    # 4. invariants and structural zeros against the input
    problems = []
    for geo_level in ("nation", "state"):
        if geo_level not in geo_levels:
            continue
        k = LEVEL_DIGITS[geo_level]
        truth = persons_in["geocode"].str.slice(0, k).value_counts()
        out = mdf["geocode"].str.slice(0, k).value_counts()
        truth, out = truth.align(out, fill_value=0)
        for g in truth.index[truth != out]:
            problems.append(f"{geo_level} {g!r}: population {out[g]} differs from the invariant")
    report.check("total population invariant (nation, state)", problems)

    hu_in = units_in[units_in["RTYPE"].astype(int) == 2].groupby("geocode").size()
    hu_out = mdf_units[mdf_units["RTYPE"].astype(int) == 2].groupby("geocode").size()
    hu_in, hu_out = hu_in.align(hu_out, fill_value=0)
    report.check("housing units per block invariant", _first([
        f"block {g}: {hu_out[g]} housing units, input has {hu_in[g]}" for g in hu_in.index[hu_in != hu_out]]))
    gq_cols = ["geocode", "GQTYPE_PL"]
    def facilities_of(frame):
        gq = frame[frame["RTYPE"].astype(int) == 4]
        return gq.assign(GQTYPE_PL=gq["GQTYPE_PL"].astype(int)).groupby(gq_cols).size()

    fac_in, fac_out = facilities_of(units_in), facilities_of(mdf_units)
    fac_in, fac_out = fac_in.align(fac_out, fill_value=0)
    report.check("GQ facilities per block invariant", _first([
        f"block {g} type {t}: {fac_out[(g, t)]} facilities, input has {fac_in[(g, t)]}"
        for g, t in fac_in.index[fac_in != fac_out]]))

    problems = []
    hhgq = levels["hhgq"].to_numpy() if "hhgq" in levels else None
    if hhgq is not None:
        per_block = pd.crosstab(mdf["geocode"].to_numpy(), hhgq).reindex(columns=range(8), fill_value=0)
        facilities = fac_in.unstack(fill_value=0).reindex(columns=range(1, 8), fill_value=0)
        facilities = facilities.reindex(per_block.index, fill_value=0)
        housing = hu_in.reindex(per_block.index, fill_value=0)
        for t in range(1, 8):
            without = (facilities[t].to_numpy() == 0) & (per_block[t].to_numpy() > 0)
            for g in per_block.index[without][:3]:
                problems.append(f"block {g}: persons in GQ type {t} without such a facility")
        with_fac = facilities.reindex(columns=range(1, 8)).to_numpy() > 0
        empty = with_fac & (per_block[list(range(1, 8))].to_numpy() == 0)
        for b, t in np.argwhere(empty)[:3]:
            problems.append(f"block {per_block.index[b]}: a GQ facility of type {t + 1} holds nobody")
        no_hu = (housing.to_numpy() == 0) & (per_block[0].to_numpy() > 0)
        for g in per_block.index[no_hu][:3]:
            problems.append(f"block {g}: household persons without housing units")
        if "votingage" in levels:
            kids_nursing = int(((hhgq == 3) & (levels["votingage"].to_numpy() == 0)).sum())
            if kids_nursing:
                problems.append(f"{kids_nursing} persons under 18 in nursing facilities")
    report.check("structural zeros and GQ facility rules", _first(problems))
    if units_schema is not None and any(c.kind == "household_persons" for c in units_schema.constraints):
        report.check("occupied units agree with household persons (every level)",
                     _first(persons_units_disagreements(mdf, mdf_units, geo_levels)))
    return report


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


def main(run_dir: str, out=None) -> int:
    out = out or sys.stdout
    try:
        report = validate_run(Path(run_dir))
    except FileNotFoundError as e:
        print(f"das validate: {run_dir}: missing {e.filename}", file=out)
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
