"""What `das metrics` scores and against what: a release (TopDown or synthetic) or an estimate directory (das
postprocess --estimator), against the confidential truth or against another release or estimate of the same
geography (`--against`: differences, from public files alone).

A comparison takes its geography and invariants from the scored side's public files (its invariants.parquet,
manifest and spine, as das postprocess reads them) and the reference's block histograms (a release's MDF, an
estimate's histograms) in place of the true ones: every metric is then a difference from the reference, binned by
the reference's size (rounded, and 0 where it is negative).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from das.core.errors import RunError, StudyError
from das.driver.postprocess import public_facts
from das.frame.manifest import Manifest
from das.frame.records import RunDirError
from das.frame.rundir import RunDir
from das.io.microdata import block_histograms, read_records
from das.model.geography import Geography
from das.model.schema import Schema
from das.research.estimates import SOURCE, is_estimate, read_histograms, read_record, source_manifest
from das.research.replicate import Context


@dataclass(frozen=True)
class Scored:
    """One side of a score: a release's directory or an estimate's, the manifest of the release (an estimate's: the
    release it is of), and the name its own estimate (the MDF, or the estimate's histograms) takes in the files
    (None: `topdown`)."""

    path: Path
    manifest: Manifest
    own: str | None
    estimate: dict | None  # an estimate directory's record

    @property
    def public(self) -> Path:
        """The directory holding its public facts (manifest, invariants.parquet, spine.parquet)."""
        return self.path / SOURCE if self.estimate else self.path

    @property
    def spine(self) -> Path:
        return RunDir(self.public).spine

    def schema(self) -> Schema:
        return self.manifest.schema_of("persons")  # as the release pins it

    def blocks(self, geography: Geography, standard: np.ndarray) -> sp.csr_matrix:
        """Its own persons block histograms, rows in `geography`'s block order (`standard`: the sorted GEOIDs)."""
        schema = self.schema()
        if self.estimate:
            try:
                return read_histograms(self.path, geography.blocks, schema.size)
            except (RunError, OSError) as e:
                raise StudyError(str(e)) from None
        mdf = RunDir(self.path).mdf("persons")
        if not mdf.exists():
            raise StudyError(f"{mdf} is missing: the topdown estimator reads the release's MDF")
        records = read_records(mdf, schema, standard)
        histograms = block_histograms(records, len(standard), schema.size).tocsr()
        if np.array_equal(geography.blocks, standard):
            return histograms
        order = np.searchsorted(standard, geography.blocks)  # the spine's blocks among the sorted ones
        return histograms[order]


def scored(path, *, role: str = "scored") -> Scored:
    """A release directory or an estimate directory, read for scoring (StudyError: neither, or not finished)."""
    path = Path(path)
    if is_estimate(path):
        try:
            record = read_record(path)
            manifest = Manifest.from_dict(json.loads(source_manifest(path).read_text()), str(source_manifest(path)))
        except (RunError, RunDirError, OSError, ValueError) as e:
            raise StudyError(f"the {role} estimate {path}: {e}") from None
        return Scored(path, manifest, record["estimator"], record)
    try:
        manifest = RunDir(path).read_complete()
    except RunDirError as e:
        raise StudyError(str(e)) from None
    return Scored(path, manifest, None if manifest.mechanism is None else manifest.mechanism.name, None)


def public_context(side: Scored, reference: Scored) -> tuple[Context, np.ndarray]:
    """The context of a comparison: `side`'s public geography and invariants (on its spine), and `reference`'s block
    histograms as the counts scored against; and the blocks in geocode order."""
    if side.manifest.mechanism is not None:
        raise StudyError(f"{side.path} is a synthetic release: das metrics --against takes the geography and invariants "
                         "from a TopDown release's or an estimate's public files (invariants.parquet), which a synthetic "
                         "release does not publish; score it against the truth, or give it as the reference")
    schema = side.schema()
    if reference.manifest.schema("persons") != side.manifest.schema("persons") or \
            reference.schema().size != schema.size or tuple(reference.manifest.levels) != tuple(side.manifest.levels):
        raise StudyError(f"{reference.path} is not of the same persons schema and levels as {side.path}: nothing to "
                         "compare cell by cell")
    try:
        facts = public_facts(side.public, side.manifest)
    except RunError as e:
        raise StudyError(str(e)) from None
    standard = np.sort(facts.geography.blocks)
    reference_blocks = reference.blocks(facts.geography, standard)
    return Context(None, schema, facts.geography, facts.invariants, reference_blocks), standard
