"""One release's public outputs as features of the release audit: the manifest's fields, each Parquet file's
counts and cells, flattened to named numbers."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pyarrow.parquet as pq

from das.attack.neighbours import (
    GEO,
    _geocode,
)
from das.frame.rundir import RunDir
from das.io.nmf import read_level

logger = logging.getLogger(__name__)


ID_COLUMNS = ("EPNUM",)  # record numbers: not a count of anything


def _flat(value, prefix: str, out: dict) -> None:
    if isinstance(value, dict):
        for k, v in value.items():
            _flat(v, f"{prefix}.{k}" if prefix else str(k), out)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _flat(v, f"{prefix}[{i}]", out)
    else:
        out[f"manifest:{prefix}"] = value


def _counts(path: Path, prefix: str, out: dict) -> None:
    """MDF rows per block, and per block and record (every column but the record number)."""
    frame = pq.read_table(path).to_pandas().astype(str)
    block = _geocode(frame)
    record = frame[[c for c in frame.columns if c not in GEO and c not in ID_COLUMNS]].agg("|".join, axis=1)
    for key, n in block.value_counts().items():
        out[f"{prefix}:{key}"] = int(n)
    for key, n in (block + ":" + record).value_counts().items():
        out[f"{prefix}:{key}"] = int(n)


def _cells(path: Path, name: str, out: dict) -> None:
    frame = pq.read_table(path).to_pandas()
    values = frame.drop(columns=["level", "geocode"])
    for row, (level, geocode) in enumerate(zip(frame["level"], frame["geocode"])):
        for column, value in zip(values.columns, values.iloc[row]):
            out[f"table:{name}:{level}:{geocode}:{column}"] = float(value)


def release_features(out_dir: Path) -> tuple[dict, dict]:
    """(features, NMF answers) of one release: every public value by name (the manifest's every field as written,
    so a field the typed reader would drop is still audited), and the NMF's noisy answers by (release, level,
    query) as (geocodes, answers, certified variance). Which file is which is RunDir's to say."""
    run_dir, features, nmf = RunDir(out_dir), {}, {}
    _flat(json.loads(run_dir.manifest_path.read_text()), "", features)
    public = sorted(p for p in run_dir.path.rglob("*") if p.is_file() and not p.is_relative_to(run_dir.operator_dir))
    features["files"] = " ".join(run_dir.relative(p) for p in public)
    mdfs = {run_dir.mdf(kind): kind for kind in ("persons", "units")}
    for path in public:
        relative = run_dir.relative(path)
        if path.suffix != ".parquet":
            continue
        meta = pq.read_metadata(path)
        features[f"parquet:{relative}:rows"] = meta.num_rows
        features[f"parquet:{relative}:row_groups"] = " ".join(str(meta.row_group(i).num_rows)
                                                               for i in range(meta.num_row_groups))
        features[f"parquet:{relative}:metadata"] = repr(sorted(meta.metadata.items()))
        if path in mdfs:
            _counts(path, f"mdf:{path.stem}", features)
        elif path.parent == run_dir.tables_dir:
            _cells(path, path.stem, features)
        elif path.is_relative_to(run_dir.nmf_dir):
            release = path.relative_to(run_dir.nmf_dir).parts[0]
            for query, answers in read_level(path).items():
                nmf[release, answers.level, query] = answers
                for unit, row in zip(answers.geocodes, answers.answers):
                    for cell, value in enumerate(row):
                        features[f"nmf:{release}:{answers.level}:{unit}:{query}:{cell}"] = int(value)
    return features, nmf
