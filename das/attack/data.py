"""Person records for the audit: the confidential truth (to score) and a release's MDF (to attack).

Both are read with the product's validating reader, so a bad file is reported by file, row,
column and expected value, never with row contents. Records carry their block and one level per
schema attribute; geounits at any level are geocode prefixes (tract: 11 digits, block: 15).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from das.core.errors import DasError, option
from das.frame.records import RunDirError
from das.frame.rundir import RunDir
from das.io.microdata import read_person_levels
from das.model.levels import COUNTY, LEVEL_DIGITS
from das.model.schema import Schema

GEOCODE_DIGITS = LEVEL_DIGITS  # a geounit's geocode: the first digits of its blocks


class AttackError(DasError, ValueError):
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
    blocks, block, levels = read_person_levels(path, schema)
    return PersonRecords(schema, blocks, block, levels)


COVERAGE_LEVEL = COUNTY  # the truth must hold persons in every county the release does
SHOWN_GEOUNITS = 5


def check_covers(truth: PersonRecords, published: PersonRecords, *, truth_path) -> None:
    """Refuse (AttackError) a truth that does not cover the release's geography: a county of the release
    where the truth holds nobody would score 0 matches there, which reads as perfect protection."""
    have = set(np.unique(truth.geocodes(COVERAGE_LEVEL)).tolist())
    want = np.unique(published.geocodes(COVERAGE_LEVEL)).tolist()
    missing = [g for g in want if g not in have]
    if missing:
        listed = ", ".join(missing[:SHOWN_GEOUNITS]) + (f" and {len(missing) - SHOWN_GEOUNITS} more" if len(missing) >
                                                         SHOWN_GEOUNITS else "")
        raise AttackError(f"{option('truth', truth_path)} does not cover the release's geography: it holds no persons in "
                          f"{len(missing)} of the release's {len(want)} count{'y' if len(want) == 1 else 'ies'} "
                          f"({listed}); expected the confidential persons file the release was made from")


def release_schema(run_dir) -> Schema:
    """The persons schema of a finished `das run` directory (from its manifest)."""
    try:
        return RunDir(run_dir).read_complete().schema_of("persons")
    except RunDirError as e:
        raise AttackError(str(e)) from None


def read_release(run_dir, schema: Schema) -> PersonRecords:
    """The persons of a release's MDF (`mdf_persons.parquet`)."""
    path = RunDir(run_dir).mdf("persons")
    if not path.is_file():
        raise AttackError(f"{path}: not found; expected the release's persons MDF (Parquet)")
    return read_persons(path, schema)
