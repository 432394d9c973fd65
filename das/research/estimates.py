"""`das postprocess BUNDLE --estimator NAME --out DIR`: another estimator of a release's noisy measurements, from its
public files alone (das.driver.postprocess reads and checks them), written as an estimate directory.

- `wls`: the unconstrained weighted least squares of das.research.estimators (consistent, unbiased, fractional,
  possibly negative): the same computation `das metrics` and `das replicate` score as `wls`.
- `nnls`: TopDown's least squares without its rounding (das.topdown.engine with NO_ROUNDING): nonnegative,
  consistent, holding the invariants and structural zeros, fractional; each level's fractional solution is the
  parent its children sum to.

An estimate is not a release: its counts are fractional (and `wls`'s can be negative), so it has no MDF; it holds
the persons release's block histograms (`histograms_persons.parquet`: GEOID, CELL, COUNT), the persons tables
computed from them (`tables/`, the release's table files with fractional answers), the source's manifest,
invariants and spine as published (`source/`, so it says what it is an estimate of), and `estimate.json`, which
says it is an estimate, of what, by which estimator, and that it is not private where the noise was seeded.
The units release is not estimated: its `household_persons` rule bounds it by the persons release's integral
household persons, which a fractional estimate does not give.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import scipy.sparse as sp

from das.core import atomic
from das.core.errors import RunError
from das.driver.pipeline import code_version
from das.driver.postprocess import Published, read_published
from das.frame import outdir
from das.frame.checkpoint import file_sha256
from das.frame.rundir import ESTIMATE_RECORD as RECORD
from das.frame.rundir import MANIFEST, nmf_level_path
from das.io import nmf
from das.io.tables import compute_table
from das.research.estimators import wls_level, wls_unsupported
from das.topdown.engine import postprocess as topdown
from das.topdown.rounding import NO_ROUNDING

RELEASE = "persons"  # the release an estimate is of (see the module's docstring for the units release)
HISTOGRAMS = "histograms_persons.parquet"
SOURCE = "source"  # the source's manifest, invariants and spine, as published
NOTICE = ("AN ESTIMATE, NOT A RELEASE: another estimator of a release's published noisy measurements; its counts are "
          "fractional{negative}, it has no microdata, and das validate does not apply to it")
ESTIMATE = outdir.Owner("das postprocess --estimator", "estimate directory",
                        (RECORD, HISTOGRAMS, "tables/*.parquet", f"{SOURCE}/*"), replaces=True)


@dataclass(frozen=True)
class Estimator:
    """An estimator das postprocess writes as an estimate: its name, what it is, whether its counts are nonnegative,
    and `make(published, workers=)` -> the persons block histograms (n_blocks x n_cells float64); whether it takes
    post-processing settings (a [postprocess] table: passes, solver)."""

    name: str
    about: str
    nonnegative: bool
    make: Callable[..., sp.csr_matrix]
    takes_settings: bool = False


def _wls(published: Published, *, workers: int) -> sp.csr_matrix:
    """das.research.estimators' WLS, level by level from the top, as `das metrics` computes it."""
    plan, facts = published.pipeline.releases[RELEASE], published.facts
    measured = published.manifest.certificate(RELEASE).queries_by_level(published.manifest.levels)
    if reason := wls_unsupported(plan.schema, measured):
        raise RunError(f"estimator wls: {reason}")
    level_estimate = None
    for level in facts.geography.levels:
        noisy = nmf.read_level(nmf_level_path(published.source.nmf_dir, RELEASE, level), facts.geography.units(level))
        level_estimate = wls_level(plan.schema, facts.geography, facts.invariants, level, noisy=noisy,
                                   parent=level_estimate)
    return sp.csr_matrix(level_estimate)


def _nnls(published: Published, *, workers: int) -> sp.csr_matrix:
    """TopDown's per-parent least squares with the published spec's (or the settings') passes and solver, carried
    down fractional: no rounding."""
    pipe, facts = published.pipeline, published.facts
    options = replace(pipe.engine_options(workers=workers), rounding=NO_ROUNDING)
    blocks, _ = topdown(RELEASE, pipe.releases[RELEASE].schema, facts.geography, facts.invariants,
                        nmf_dir=published.source.nmf_dir, options=options)
    return blocks.tocsr()


ESTIMATES: dict[str, Estimator] = {e.name: e for e in (
    Estimator("wls", "unconstrained weighted least squares: consistent and unbiased, fractional, can be negative",
              nonnegative=False, make=_wls),
    Estimator("nnls", "TopDown's nonnegative least squares without its rounding: consistent, holds the invariants "
              "and structural zeros, fractional", nonnegative=True, make=_nnls, takes_settings=True),
)}


@dataclass(frozen=True)
class EstimateResult:
    out_dir: Path
    record: dict  # estimate.json


def estimate(bundle: str | Path, out: str | Path, *, estimator: str, settings: str | Path | Mapping | None = None,
             workers: int = 1, overwrite: bool = False) -> EstimateResult:
    """The estimate `estimator` (ESTIMATES) makes of `bundle`'s noisy measurements, written into `out`."""
    if estimator not in ESTIMATES:
        raise RunError(f"estimator {estimator!r} is not one das postprocess writes as an estimate; choose from "
                       f"{', '.join(ESTIMATES)} (or topdown: the release itself)")
    chosen = ESTIMATES[estimator]
    if settings is not None and not chosen.takes_settings:
        raise RunError(f"estimator {estimator} takes no post-processing settings (it has no passes, solver or "
                       "rounding); leave --settings out")
    published = read_published(bundle, settings)
    out = Path(out)
    claim = outdir.check(out, ESTIMATE, overwrite=overwrite, protected=[published.source.path])
    blocks = chosen.make(published, workers=workers)  # before anything is written: a failure leaves nothing
    claim.start()
    record = _record(published, chosen)
    _write(out, published, blocks)
    with atomic.replacing(out / RECORD) as tmp:  # last: a directory without it is no estimate
        tmp.write_text(json.dumps(record, indent=2) + "\n")
    claim.finish()
    return EstimateResult(out, record)


def _record(published: Published, chosen: Estimator) -> dict:
    """estimate.json: what the estimate is, of which release, made how; nothing of the confidential data (its
    numbers are functions of the published NMF and invariants)."""
    manifest = published.manifest
    negative = "" if chosen.nonnegative else " and can be negative"
    return {
        "kind": "das estimate", "notice": NOTICE.format(negative=negative), "estimator": chosen.name,
        "about": chosen.about, "release": RELEASE, "integral": False, "nonnegative": chosen.nonnegative,
        "source_manifest_sha256": file_sha256(published.source.manifest_path), "spec_name": manifest.spec_name,
        "levels": list(manifest.levels), "schema": manifest.schema(RELEASE), "private": manifest.private,
        "randomness": manifest.randomness, "seed": manifest.seed, "das_version": code_version(),
        "postprocessed_with": None if published.settings is None else published.settings.text,
        "files": [HISTOGRAMS, *(f"tables/{t.name}.parquet" for t in _tables(published))],
    }


def _tables(published: Published) -> list:
    schema_name = published.pipeline.releases[RELEASE].schema.name
    return [t for t in published.pipeline.tables if t.schema == schema_name]


def _write(out: Path, published: Published, blocks: sp.csr_matrix) -> None:
    """The histograms (nonzero cells), the persons tables with fractional answers, and the source's public facts."""
    schema, geography = published.pipeline.releases[RELEASE].schema, published.facts.geography
    coo = blocks.tocoo()
    by_geocode = np.argsort(geography.blocks, kind="stable")
    rank = np.empty(len(by_geocode), dtype=np.int32)
    rank[by_geocode] = np.arange(len(by_geocode))  # a block's place in geocode order, whatever the spine
    rows = rank[coo.row]
    order = np.lexsort((coo.col, rows))
    geoid = pa.DictionaryArray.from_arrays(pa.array(rows[order]), pa.array(geography.blocks[by_geocode].astype(str)))
    _parquet(pa.table({"GEOID": geoid, "CELL": pa.array(coo.col[order].astype(np.int32)),
                       "COUNT": pa.array(coo.data[order].astype(np.float64))}), out / HISTOGRAMS)
    for spec in _tables(published):
        table = pa.Table.from_pandas(compute_table(schema, spec, geography, blocks), preserve_index=False)
        _parquet(table.replace_schema_metadata(None), out / "tables" / f"{spec.name}.parquet")
    (out / SOURCE).mkdir(parents=True, exist_ok=True)
    source = published.source
    for path in (source.manifest_path, source.block_invariants, source.spine):
        if path.is_file():
            with atomic.replacing(out / SOURCE / path.name) as tmp:
                shutil.copyfile(path, tmp)


def _parquet(table: pa.Table, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic.replacing(path) as tmp:
        pq.write_table(table, tmp, compression="zstd")


def read_record(path: str | Path) -> dict:
    """An estimate directory's estimate.json, or RunError saying the directory is not one."""
    record_path = Path(path) / RECORD
    try:
        record = json.loads(record_path.read_text())
    except (OSError, ValueError) as e:
        raise RunError(f"{path} is not a das estimate directory ({RECORD}: {e})") from None
    if not isinstance(record, dict) or record.get("kind") != "das estimate":
        raise RunError(f"{record_path}: not a das estimate record (kind {record.get('kind')!r})")
    return record


def is_estimate(path: str | Path) -> bool:
    return (Path(path) / RECORD).is_file()


def read_histograms(path: str | Path, blocks: np.ndarray, n_cells: int) -> sp.csr_matrix:
    """An estimate's block histograms (n_blocks x n_cells float64) with rows in the order of `blocks` (GEOIDs); a
    GEOID the estimate holds that is not among them, or a cell beyond the schema, is a RunError."""
    file = Path(path) / HISTOGRAMS
    table = pq.read_table(file)
    order = np.argsort(blocks)
    rows = []
    for chunk in table.column("GEOID").chunks:  # each a dictionary of GEOIDs and indices into it (or plain text)
        names, index = ((chunk.dictionary, chunk.indices.to_numpy()) if pa.types.is_dictionary(chunk.type)
                        else (chunk, np.arange(len(chunk))))
        names = np.asarray(names.to_pylist(), dtype=object)
        at = order[np.minimum(np.searchsorted(blocks, names, sorter=order), len(blocks) - 1)]
        used = np.unique(index)
        unknown = used[blocks[at[used]] != names[used]]
        if unknown.size:
            raise RunError(f"{file}: block {names[unknown[0]]} is not a block of the geography scored")
        rows.append(at[index])
    cells = table.column("CELL").to_numpy()
    if cells.size and (cells.max() >= n_cells or cells.min() < 0):
        raise RunError(f"{file}: cell {cells.max()} is not a cell of the schema ({n_cells} cells)")
    rows = np.concatenate(rows) if rows else np.zeros(0, dtype=np.int64)
    return sp.csr_matrix((table.column("COUNT").to_numpy(), (rows, cells)), shape=(len(blocks), n_cells))


def source_manifest(path: str | Path) -> Path:
    """The manifest of the release an estimate directory is of (as published)."""
    return Path(path) / SOURCE / MANIFEST
