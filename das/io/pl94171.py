"""The 2020 P.L. 94-171 redistricting summary file (legacy format): write a release in it, read it.

Redistricting offices and their tools (e.g. the R package PL94171) read this format, not Parquet.
Per state there are four pipe-delimited files joined on LOGRECNO: a geographic header and three
segments of table cells (P1 + P2, P3 + P4 + H1, P5). The layout, and the one mapping from das's
histogram cells to the published cells, are data: `specs/formats/pl94171.toml`.

`release_records` computes every cell at every summary level from block histograms;
`write_pl94171` writes them; `read_pl94171` reads them back, or an official 2020 file, as the
same `PLRecords`, so a release and an official file compare cell by cell.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import scipy.sparse as sp

from das.core.errors import InputError, SpecError
from das.frame.records import RunDirError
from das.frame.rundir import RunDir
from das.io.microdata import read_records, read_units
from das.model.geography import Geography
from das.model.histogram import block_histograms
from das.model.schema import Schema, resolve_spec
from das.model.specfile import load_toml

SEGMENT_KEYS = ("FILEID", "STUSAB", "CHARITER", "CIFSN", "LOGRECNO")
MAX_LINES_LISTED = 5  # lines listed per problem, then a count of the rest

Conditions = tuple[tuple[str, tuple[str, ...]], ...]  # ((factor, allowed level labels), ...)


@dataclass(frozen=True)
class PLTable:
    """One published table: each cell is the histogram cells meeting its conditions and `where`."""

    name: str
    title: str
    field_prefix: str  # "P001": cells are P0010001, P0010002, ...
    universe: str  # "persons" or "units": which release's histogram it counts
    where: Conditions
    cells: tuple[tuple[str, Conditions], ...]  # (label, conditions)

    @property
    def fields(self) -> list[str]:
        return [f"{self.field_prefix}{i:04d}" for i in range(1, len(self.cells) + 1)]

    def matrix(self, schema: Schema) -> sp.csr_matrix:
        """(n_table_cells x n_histogram_cells) 0/1: which histogram cells each table cell sums."""
        all_cells = np.arange(schema.size)
        levels: dict[str, np.ndarray] = {}

        def meets(conditions: Conditions) -> np.ndarray:
            keep = np.ones(schema.size, dtype=bool)
            for factor, labels in conditions:
                try:
                    names = schema.factor_labels(factor)
                    if factor not in levels:
                        levels[factor] = schema.levels_of(factor, all_cells)
                except KeyError:
                    raise SpecError(f"PL 94-171 table {self.name} needs factor {factor!r}, which schema "
                                    f"{schema.name!r} does not have") from None
                unknown = [x for x in labels if x not in names]
                if unknown:
                    raise SpecError(f"PL 94-171 table {self.name}: {factor} has no level {unknown[0]!r}; "
                                    f"schema {schema.name!r} has {list(names)}")
                keep &= np.isin(levels[factor], [names.index(x) for x in labels])
            return keep

        base = meets(self.where)
        rows = [meets(conditions) & base for _, conditions in self.cells]
        return sp.csr_matrix(np.array(rows, dtype=np.int64))


@dataclass(frozen=True)
class PLLayout:
    """The file layout (`specs/formats/pl94171.toml`): names, key values, fields, tables, states."""

    fileid: str
    chariter: str
    logrecno_width: int
    geo_file: str  # "{st}geo2020.pl"
    segment_files: tuple[str, ...]  # by segment, "{st}000012020.pl", ...
    segments: tuple[tuple[str, tuple[str, ...]], ...]  # (CIFSN, table names)
    summary_levels: dict[str, dict[str, str]]  # das level -> sumlev, lsadc, funcstat, name, basename
    geo_fields: tuple[str, ...]
    states: dict[str, dict[str, str]]  # state FIPS -> usps, name, region, division
    tables: dict[str, PLTable]

    def segment_fields(self, cifsn: str) -> list[str]:
        """Every field of a segment record: the keys, then its tables' cells."""
        tables = dict(self.segments)[cifsn]
        return list(SEGMENT_KEYS) + [f for t in tables for f in self.tables[t].fields]

    def level_of(self, sumlev: str) -> str:
        """The das level of a summary level code, "" for one das does not produce (place, VTD...)."""
        return {s["sumlev"]: level for level, s in self.summary_levels.items()}.get(sumlev, "")


def _conditions(raw: dict, where: str) -> Conditions:
    out = []
    for factor, labels in raw.items():
        if factor == "label":
            continue
        if not isinstance(labels, list) or not labels or not all(isinstance(x, str) for x in labels):
            raise SpecError(f"{where}: {factor} must be a nonempty list of level labels")
        out.append((factor, tuple(labels)))
    return tuple(out)


def load_layout(name_or_path: str | Path = "pl94171") -> PLLayout:
    path = resolve_spec(name_or_path, "formats")
    spec = load_toml(path)
    try:
        tables = {}
        for name, t in spec["tables"].items():
            cells = tuple((c.get("label", ""), _conditions(c, f"{path}: [tables.{name}] cell {i + 1}"))
                          for i, c in enumerate(t["cells"]))
            tables[name] = PLTable(name, t.get("title", name), t["field_prefix"], t["universe"],
                                   _conditions(t.get("where", {}), f"{path}: [tables.{name}] where"), cells)
        segments = tuple((cifsn, tuple(names)) for cifsn, names in spec["segments"].items())
        layout = PLLayout(spec["fileid"], spec["chariter"], int(spec["logrecno_width"]), spec["files"]["geo"],
                          tuple(spec["files"]["segments"]), segments, spec["summary_levels"],
                          tuple(spec["geo"]["fields"]), spec["states"], tables)
    except (KeyError, TypeError) as e:
        raise SpecError(f"{path}: PL 94-171 layout is missing or misnames {e}") from None
    unknown = [t for _, names in segments for t in names if t not in tables]
    if unknown or len(layout.segment_files) != len(segments):
        raise SpecError(f"{path}: [segments] names unknown tables {unknown} or does not match [files] segments")
    return layout


# ---------------------------------------------------------------------------------------------
# Records: the geographic header and the cells, one row per logical record


@dataclass(frozen=True)
class PLRecords:
    """Logical records of one or more states: header fields (strings, "" when empty) and the
    cells of each table (int64, rows aligned with `geo`)."""

    geo: pd.DataFrame
    cells: dict[str, np.ndarray]

    def table(self, name: str, layout: PLLayout) -> pd.DataFrame:
        """One table as a frame: level (das's name, "" for other summary levels), sumlev, geocode, cells."""
        frame = pd.DataFrame(self.cells[name], columns=layout.tables[name].fields)
        frame.insert(0, "geocode", self.geo["GEOCODE"].to_numpy())
        frame.insert(0, "sumlev", self.geo["SUMLEV"].to_numpy())
        frame.insert(0, "level", self.geo["SUMLEV"].map(layout.level_of).to_numpy())
        return frame


def _tract_name(tract: pd.Series) -> pd.Series:
    """The Bureau's tract name: 000101 -> "1.01", 960100 -> "9601"."""
    base = tract.str.slice(0, 4).str.lstrip("0").replace("", "0")
    suffix = tract.str.slice(4, 6)
    return base + np.where(suffix == "00", "", "." + suffix)


def release_records(layout: PLLayout, geography: Geography, histograms: dict[str, sp.csr_matrix],
                    schemas: dict[str, Schema]) -> PLRecords:
    """Every cell of every table at every summary level of `geography`, from block histograms
    keyed by universe ("persons", "units"); records ordered by state, level, then geocode."""
    missing = sorted({t.universe for t in layout.tables.values()} - set(histograms))
    if missing:
        raise SpecError(f"the PL 94-171 tables need {' and '.join(missing)} histograms; this release has none")
    levels = [lv for lv in geography.levels if lv in layout.summary_levels]
    geocode = pd.Series(np.concatenate([geography.units(lv) for lv in levels]), dtype=object)
    rank = np.concatenate([np.full(geography.n_units(lv), i) for i, lv in enumerate(levels)])
    state = geocode.str.slice(0, 2).to_numpy()
    unknown = sorted(set(state) - set(layout.states))
    if unknown:
        raise SpecError(f"state FIPS {unknown[0]!r} has no USPS code in the PL 94-171 layout's [states]")
    order = np.lexsort((np.arange(len(geocode)), rank, state))
    cells = {}
    for name, t in layout.tables.items():
        block_cells = (histograms[t.universe] @ t.matrix(schemas[t.universe]).T).toarray().astype(np.int64)
        cells[name] = np.concatenate([geography.aggregate(block_cells, lv) for lv in levels])[order]
    geocode = geocode.iloc[order].reset_index(drop=True)
    geo = _geo_header(layout, [layout.summary_levels[lv] for lv in levels], geocode, rank[order], cells=cells)
    return PLRecords(geo, cells)


def _geo_header(layout: PLLayout, level_specs: list[dict], geocode: pd.Series, rank: np.ndarray, *,
                cells: dict[str, np.ndarray]) -> pd.DataFrame:
    """The 97 header fields of each record: what das's geocodes and cells determine, "" elsewhere."""
    n = len(geocode)
    state = geocode.str.slice(0, 2)
    info = pd.DataFrame.from_dict(layout.states, orient="index").reindex(state)
    level = pd.DataFrame(level_specs).reindex(columns=["sumlev", "lsadc", "funcstat", "name", "basename"])
    level = level.fillna("").iloc[rank].reset_index(drop=True)
    digits = geocode.str.len().to_numpy()

    def part(start: int, stop: int) -> pd.Series:
        return geocode.str.slice(start, stop).where(digits >= stop, "")

    values = {
        "FILEID": layout.fileid, "STUSAB": info["usps"], "SUMLEV": level["sumlev"], "GEOVAR": "00", "GEOCOMP": "00",
        "CHARITER": layout.chariter, "CIFSN": "00",
        "LOGRECNO": (state.groupby(state).cumcount() + 1).astype(str).str.zfill(layout.logrecno_width),
        "GEOID": level["sumlev"] + "0000US" + geocode, "GEOCODE": geocode,
        "REGION": info["region"], "DIVISION": info["division"], "STATE": part(0, 2), "COUNTY": part(2, 5),
        "TRACT": part(5, 11), "BLKGRP": part(11, 12), "BLOCK": part(11, 15),
        "LSADC": level["lsadc"], "FUNCSTAT": level["funcstat"], "POP100": cells["P1"][:, 0], "HU100": cells["H1"][:, 0],
    }
    names = {"state_name": info["name"].to_numpy(), "tract": _tract_name(part(5, 11)).to_numpy(),
             "blkgrp": part(11, 12).to_numpy(), "block": part(11, 15).to_numpy()}
    for field, key in (("NAME", "name"), ("BASENAME", "basename")):
        values[field] = np.full(n, "", dtype=object)
        for template in level[key].unique():
            rows = (level[key] == template).to_numpy()
            values[field][rows] = _fill(template, {k: v[rows] for k, v in names.items()})
    fields = {f: np.full(n, "", dtype=object) for f in layout.geo_fields}
    for field, value in values.items():
        fields[field] = np.broadcast_to(np.asarray(value, dtype=object).astype(str), n)
    return pd.DataFrame(fields)


def _fill(template: str, names: dict[str, np.ndarray]) -> np.ndarray:
    """Format a name template ("Census Tract {tract}") over arrays of values; "" stays empty."""
    parts = re.split(r"\{(\w+)\}", template)  # literal, key, literal, key, ..., literal
    unknown = [key for key in parts[1::2] if key not in names]
    if unknown:
        raise SpecError(f"PL 94-171 layout: unknown name placeholder {{{unknown[0]}}} in {template!r}")
    out = np.full(len(next(iter(names.values()))), parts[0], dtype=object)
    for key, literal in zip(parts[1::2], parts[2::2]):
        out = out + names[key] + literal
    return out


def run_records(run_dir: str | Path, layout: PLLayout) -> PLRecords:
    """The PL 94-171 records of a finished `das run` directory, recounted from its MDF."""
    run_dir = Path(run_dir)
    try:
        manifest = RunDir(run_dir).read_complete()
    except RunDirError as e:
        raise SpecError(str(e)) from None
    if manifest.units is None:  # its units MDF lists the invariants only, HH_STATUS 0 (das.io.mdf.unit_mdf)
        raise SpecError(f"{run_dir} has no units release (a spec without [units], or das synth): the PL 94-171 "
                        "files carry table H1 (occupied and vacant housing units), which it does not publish")
    schemas = {kind: manifest.schema_of(kind) for kind in manifest.releases()}
    inventory = read_units(RunDir(run_dir).mdf("units"))
    geography = Geography.from_blocks(inventory.blocks, tuple(manifest.levels))
    histograms = {kind: block_histograms(read_records(RunDir(run_dir).mdf(kind), schema, inventory.blocks),
                                         geography.n_blocks, schema.size)
                  for kind, schema in schemas.items()}
    return release_records(layout, geography, histograms, schemas)


# ---------------------------------------------------------------------------------------------
# Writing


_WRITE = pacsv.WriteOptions(include_header=False, delimiter="|", quoting_style="none")


def write_pl94171(out_dir: str | Path, records: PLRecords, layout: PLLayout) -> list[Path]:
    """The four files of every state in `records`, named as the 2020 release named them."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    stusab = records.geo["STUSAB"].to_numpy()
    for usps in pd.unique(stusab):
        rows = np.flatnonzero(stusab == usps)
        geo = records.geo.iloc[rows]
        logrecno = geo["LOGRECNO"].str.zfill(layout.logrecno_width)
        st = usps.lower()
        path = out_dir / layout.geo_file.format(st=st)
        columns = {f: pa.array(logrecno if f == "LOGRECNO" else geo[f], pa.string()) for f in layout.geo_fields}
        pacsv.write_csv(pa.table(columns), path, _WRITE)
        written.append(path)
        for (cifsn, tables), name in zip(layout.segments, layout.segment_files):
            keys = {"FILEID": geo["FILEID"], "STUSAB": geo["STUSAB"], "CHARITER": geo["CHARITER"],
                    "CIFSN": np.full(len(rows), cifsn, dtype=object), "LOGRECNO": logrecno}
            columns = {k: pa.array(np.asarray(v, dtype=object), pa.string()) for k, v in keys.items()}
            for t in tables:
                block = records.cells[t][rows]
                columns.update({f: pa.array(block[:, i]) for i, f in enumerate(layout.tables[t].fields)})
            path = out_dir / name.format(st=st)
            pacsv.write_csv(pa.table(columns), path, _WRITE)
            written.append(path)
    return written


# ---------------------------------------------------------------------------------------------
# Reading


@dataclass(frozen=True)
class FormatProblem:
    """Something wrong in a PL file: the file, the 1-based line, the field, the value found."""

    file: str
    line: int | None
    field: str | None
    value: str | None
    expected: str

    def __str__(self) -> str:
        where = Path(self.file).name + (f" line {self.line}" if self.line is not None else "")
        where += f", field {self.field}" if self.field else ""
        if self.value is not None:
            return f"{where}: {self.value!r} is not valid (expected {self.expected})"
        return f"{where}: {self.expected}"


class _Problems(list):
    def located(self, path: Path, lines: np.ndarray, field: str | None, *, values, expected: str) -> None:
        """One problem per bad line (at most MAX_LINES_LISTED), then a count of the rest."""
        for line, value in list(zip(lines, values))[:MAX_LINES_LISTED]:
            self.append(FormatProblem(str(path), int(line), field, str(value), expected))
        if len(lines) > MAX_LINES_LISTED:
            self.append(FormatProblem(str(path), None, field, None,
                                      f"... and {len(lines) - MAX_LINES_LISTED} more lines with the same problem"))


def _fields(path: Path, n_fields: int, names: list[str], problems: _Problems) -> np.ndarray | None:
    """The file as an (n_lines x n_fields) array of strings, or None after noting what is wrong."""
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        text = raw.decode("latin-1")  # names with accents in the Bureau's older files
    lines = text.replace("\r\n", "\n").removesuffix("\n").split("\n") if text else []
    if not lines:
        problems.append(FormatProblem(str(path), None, None, None, "the file is empty"))
        return None
    counts = np.array([line.count("|") + 1 for line in lines])
    bad = np.flatnonzero(counts != n_fields)
    if len(bad):
        problems.located(path, bad + 1, None, values=[f"{c} fields" for c in counts[bad]],
                         expected=f"{n_fields} pipe-delimited fields, {names[0]} .. {names[-1]}")
        return None
    return np.array("|".join(lines).split("|"), dtype=object).reshape(len(lines), n_fields)


def _integers(path: Path, values: np.ndarray, names: list[str], problems: _Problems, *,
              allow_empty: bool = False) -> np.ndarray | None:
    """Nonnegative integer columns (n_lines x k strings) -> int64 (empty -> -1 if allowed), every
    bad cell located. Checked and converted by Arrow: a state's segments parse in a fraction of a second."""
    flat = pa.array(values.ravel(), pa.string())
    ok = pc.match_substring_regex(flat, "^[0-9]{0,18}$" if allow_empty else "^[0-9]{1,18}$")
    ok = ok.to_numpy(zero_copy_only=False).reshape(values.shape)
    if not ok.all():
        for j in np.flatnonzero(~ok.all(axis=0)):
            bad = np.flatnonzero(~ok[:, j])
            problems.located(path, bad + 1, names[j], values=values[bad, j], expected="a nonnegative integer")
        return None
    if allow_empty:
        flat = pc.if_else(pc.equal(flat, ""), "-1", flat)
    return pc.cast(flat, pa.int64()).to_numpy().reshape(values.shape)


def _state_files(directory: Path, layout: PLLayout) -> dict[str, dict[str, Path]]:
    """Files of each state, keyed by the part of the name before the type token ("ri")."""
    tokens = {"geo": "geo", **{f"000{cifsn}": cifsn for cifsn, _ in layout.segments}}
    states: dict[str, dict[str, Path]] = {}
    for path in sorted(directory.iterdir()):
        if not path.is_file() or path.suffix.lower() not in (".pl", ".upl"):
            continue
        found = [t for t in tokens if t in path.name.lower()]
        if len(found) != 1:
            raise InputError([FormatProblem(str(path), None, None, None, "a PL file name holds exactly one of "
                                            + ", ".join(tokens) + f" (found {found or 'none'})")])
        prefix = path.name.lower().split(found[0])[0]
        if tokens[found[0]] in states.setdefault(prefix, {}):
            raise InputError([FormatProblem(str(path), None, None, None, f"a second {found[0]} file for {prefix!r}")])
        states[prefix][tokens[found[0]]] = path
    if not states:
        raise InputError([FormatProblem(str(directory), None, None, None, "no P.L. 94-171 files (*.pl) here")])
    for prefix, files in states.items():
        missing = [t for t, kind in tokens.items() if kind not in files]
        if missing:
            raise InputError([FormatProblem(str(directory), None, None, None,
                                            f"state {prefix!r} has no {' / '.join(missing)} file")])
    return states


def read_pl94171(directory: str | Path, layout: PLLayout | None = None) -> PLRecords:
    """Read every state's PL files in `directory` (a das release or an official 2020 file).

    Checks what a strict reader should: field counts per line, integer cells, CIFSN, the same
    LOGRECNOs and STUSAB in every file of a state. InputError lists each problem with the file,
    line and field. (POP100/HU100 are not compared with P1/H1: in the Bureau's 2018 test file
    HU100 is the housing-unit count before disclosure avoidance, not H0010001.)"""
    layout = layout or load_layout()
    directory = Path(directory)
    if not directory.is_dir():
        raise InputError([FormatProblem(str(directory), None, None, None, "not a directory of PL files")])
    problems = _Problems()
    geos, cells = [], {name: [] for name in layout.tables}
    for files in _state_files(directory, layout).values():
        geo_path = files["geo"]
        fields = _fields(geo_path, len(layout.geo_fields), list(layout.geo_fields), problems)
        if fields is None:
            continue
        geo = pd.DataFrame(fields, columns=list(layout.geo_fields))
        logrecno = _integers(geo_path, fields[:, [layout.geo_fields.index("LOGRECNO")]], ["LOGRECNO"], problems)
        if _integers(geo_path, geo[["POP100", "HU100"]].to_numpy(), ["POP100", "HU100"], problems,
                     allow_empty=True) is None or logrecno is None:
            continue
        logrecno = logrecno[:, 0]
        if len(np.unique(logrecno)) != len(logrecno):
            _, first, counts = np.unique(logrecno, return_index=True, return_counts=True)
            problems.located(geo_path, first[counts > 1] + 1, "LOGRECNO", values=logrecno[first[counts > 1]].astype(str),
                             expected="a LOGRECNO used once")
            continue
        state_cells = {}
        for cifsn, tables in layout.segments:
            path, names = files[cifsn], layout.segment_fields(cifsn)
            seg = _fields(path, len(names), names, problems)
            if seg is None:
                continue
            cifsn_bad = np.flatnonzero(seg[:, 3] != cifsn)
            if len(cifsn_bad):
                problems.located(path, cifsn_bad + 1, "CIFSN", values=seg[cifsn_bad, 3], expected=repr(cifsn))
            key = _integers(path, seg[:, [4]], ["LOGRECNO"], problems)
            values = _integers(path, seg[:, 5:], names[5:], problems)
            if key is None or values is None:
                continue
            position = pd.Index(logrecno).get_indexer(key[:, 0])
            strays = np.flatnonzero(position < 0)
            if len(strays) or len(key) != len(logrecno) or len(np.unique(key)) != len(key):
                problems.located(path, strays + 1, "LOGRECNO", values=seg[strays, 4],
                                 expected=f"a LOGRECNO of {geo_path.name}")
                if not len(strays):
                    problems.append(FormatProblem(str(path), None, "LOGRECNO", None,
                                                  f"each of the {len(logrecno)} LOGRECNOs of {geo_path.name} once"))
                continue
            stusab_bad = np.flatnonzero(seg[:, 1] != geo["STUSAB"].to_numpy()[position])
            if len(stusab_bad):
                problems.located(path, stusab_bad + 1, "STUSAB", values=seg[stusab_bad, 1],
                                 expected=f"the STUSAB of {geo_path.name}")
            aligned = np.empty_like(values)
            aligned[position] = values
            start = 0
            for t in tables:
                width = len(layout.tables[t].cells)
                state_cells[t] = aligned[:, start:start + width]
                start += width
        geos.append(geo)
        for t, c in state_cells.items():
            cells[t].append(c)
    if problems:
        raise InputError(problems)
    return PLRecords(pd.concat(geos, ignore_index=True), {t: np.concatenate(c) for t, c in cells.items()})


# ---------------------------------------------------------------------------------------------
# Entry points: `das run` ([output] pl94171 = true) and `das tables`


def write_release(out_dir: str | Path, geography: Geography, histograms: dict[str, sp.csr_matrix],
                  schemas: dict[str, Schema]) -> list[Path]:
    """A run's solved histograms and schemas (keyed by release) as PL 94-171 files in `out_dir`."""
    layout = load_layout()
    by_universe = {schemas[name].universe: h for name, h in histograms.items()}
    records = release_records(layout, geography, by_universe, {schemas[n].universe: schemas[n] for n in histograms})
    return write_pl94171(out_dir, records, layout)
