"""Person records for the audit: the confidential truth (to score) and a release's MDF (to attack).

Both are read with the product's validating reader, so a bad file is reported by file, row,
column and expected value, never with row contents. Records carry their block and one level per
schema attribute; geounits at any level are geocode prefixes (tract: 11 digits, block: 15).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from das.io.microdata import InputError, _Collector, _geocodes, _load, _records
from das.schema import Schema, load_schema

GEOCODE_DIGITS = {"state": 2, "county": 5, "tract": 11, "block": 15}


class AttackError(ValueError):
    """The audit's inputs or options are unusable (the message says which and what was expected)."""


@dataclass(frozen=True)
class PersonRecords:
    """Person records: `blocks` sorted 15-digit geocodes, `block` (n,) index into them,
    `levels` (n x n_attributes) schema levels."""

    schema: Schema
    blocks: np.ndarray
    block: np.ndarray
    levels: np.ndarray

    def __len__(self) -> int:
        return len(self.block)

    def geocodes(self, level: str) -> np.ndarray:
        """Each record's geocode at `level` (a prefix of its block geocode)."""
        width = GEOCODE_DIGITS[level]
        return np.asarray([g[:width] for g in self.blocks], dtype=f"U{width}")[self.block]

    def within(self, level: str, geocode: str) -> np.ndarray:
        """Boolean mask of the records in the geounit `geocode` of `level`."""
        prefixes = np.char.startswith(self.blocks, geocode) if len(self.blocks) else np.zeros(0, bool)
        if len(geocode) != GEOCODE_DIGITS[level]:
            raise AttackError(f"geounit {geocode!r}: expected a {GEOCODE_DIGITS[level]}-digit {level} geocode")
        return prefixes[self.block]


def read_persons(path, schema: Schema) -> PersonRecords:
    """Records a persons file holds under `schema` (its blocks are the blocks it names)."""
    path = Path(path)
    col = _Collector(path)
    table = _load(path, col)
    geo = None if table is None else _geocodes(table, col, "person")
    read = None
    if geo is not None:
        blocks = np.unique(geo[0])
        read = _records(table, schema, blocks, col)
    if col.problems or read is None:
        raise InputError(col.problems)
    levels = np.column_stack([np.asarray(read.levels[n], dtype=np.int64) for n in schema.names]) \
        if len(read.records.cells) else np.zeros((0, len(schema.names)), dtype=np.int64)
    return PersonRecords(schema, blocks, read.records.block_index, levels)


def release_schema(run_dir) -> Schema:
    """The persons schema of a finished `das run` directory (from its manifest)."""
    run_dir = Path(run_dir)
    manifest_path = run_dir / "manifest.json"
    if not manifest_path.is_file():
        raise AttackError(f"{run_dir}: not a das run directory (no manifest.json); expected the --out of `das run`")
    try:
        manifest = json.loads(manifest_path.read_text())
    except json.JSONDecodeError as e:
        raise AttackError(f"{manifest_path}: not valid JSON ({e.msg})") from None
    if manifest.get("status") != "complete":
        raise AttackError(f"{manifest_path}: status is {manifest.get('status')!r}, expected 'complete' "
                          "(an unfinished release)")
    schema = (manifest.get("persons") or {}).get("schema")
    if not schema:
        raise AttackError(f"{manifest_path}: field persons.schema is missing; expected the persons schema name")
    return load_schema(schema)


def read_release(run_dir, schema: Schema) -> PersonRecords:
    """The persons of a release's MDF (`mdf_persons.parquet`)."""
    path = Path(run_dir) / "mdf_persons.parquet"
    if not path.is_file():
        raise AttackError(f"{path}: not found; expected the release's persons MDF (Parquet)")
    return read_persons(path, schema)
