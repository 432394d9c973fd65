"""`das tables`: a release's tables as the 2020 PL 94-171 summary files, or PL files read into Parquet.

The source is a das run directory (its tables recounted from its MDF) or a directory of PL 94-171
files (das's or the Census Bureau's); the output a directory of its own outside the source
(das.frame.outdir): deterministic, so a rerun replaces its own earlier files and nothing else. Parquet
columns are named as every das table file names them (readable: `cenrace=White`), or with `names="pl"`
by their PL 94-171 fields (`P0010003`); das.io.table_names maps one to the other.
"""

from __future__ import annotations

from pathlib import Path

from das.core.errors import SpecError
from das.frame import outdir
from das.frame.rundir import RunDir
from das.io.pl94171 import PLLayout, load_layout, read_pl94171, run_records, write_pl94171
from das.io.table_names import check_naming, readable_names, renamed
from das.io.tables import load_tables
from das.model.schema import load_schema
from das.model.specfile import real_path


def tables_owner(layout: PLLayout) -> outdir.Owner:
    """`das tables`' files in its output directory (either format): deterministic, so a rerun replaces them."""
    pl = tuple(name.format(st="[a-z][a-z]") for name in (layout.geo_file, *layout.segment_files))
    return outdir.Owner("das tables", "tables", pl + tuple(f"{name}.parquet" for name in layout.tables), replaces=True)


def convert(source: str | Path, out_dir: str | Path, fmt: str, names: str = "readable") -> list[Path]:
    """`das tables`: a das run directory, or a directory of PL files (das's or the Bureau's), written
    as PL 94-171 files (`pl94171`) or as one Parquet file per table in the PL layout (`parquet`, its columns
    named `names`: readable or pl), into a directory of their own outside the source (das.frame.outdir)."""
    check_naming(names)
    layout = load_layout()
    source, out_dir = Path(source), Path(out_dir)
    if real_path(out_dir) == real_path(source):
        raise SpecError(f"--out {out_dir} is the source directory; choose another")
    if fmt not in ("pl94171", "parquet"):
        raise SpecError(f"unknown table format {fmt!r}; expected pl94171 or parquet")
    claim = outdir.check(out_dir, tables_owner(layout), protected=[source])
    records = run_records(source, layout) if RunDir(source).manifest_path.exists() else read_pl94171(source, layout)
    claim.start()
    if fmt == "pl94171":
        written = write_pl94171(out_dir, records, layout)
    else:
        written = [out_dir / f"{name}.parquet" for name in layout.tables]
        readable = {t.name: readable_names(t, load_schema(t.schema), layout) for t in load_tables("pl94")}
        for name, path in zip(layout.tables, written):
            frame = records.table(name, layout)
            if names == "readable":
                frame = renamed(frame, readable[name])
            frame.to_parquet(path, index=False)
    claim.finish()
    return written
