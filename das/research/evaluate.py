"""`das metrics RUN_DIR`: score one release (its MDF, and its NMF through the other estimators)
against the confidential input, in the same files a replicate study writes (one replicate).

A TopDown release is scored by the estimators of das.research.estimators (its MDF as `topdown`, and
its NMF's `noisy` and `wls`); a synthetic release (`das synth`) publishes no noisy measurements, so
only its MDF is scored, under the mechanism's own name (`aim`, `flat`...).

The scores hold true counts: they go to a directory of their own beside the release (default
`<RUN_DIR>-metrics`), never into it (a release holds only its own files), and say they are
confidential. Scoring is deterministic, so a rerun replaces its own earlier output (das.frame.outdir).
"""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd

from das.core.errors import StudyError, option
from das.driver.inputs import Confidential
from das.frame import outdir
from das.frame.bundle import DATAFRAMES, BundleError, input_paths, read_process
from das.frame.rundir import RunDir
from das.io.microdata import read_inputs
from das.io.tabular import InMemory, Source
from das.model.geography import Geography
from das.model.rules import Invariants
from das.model.schema import Schema, load_schema
from das.model.spine import block_order, from_table
from das.privacy.certificate import fraction_text
from das.research import offspine
from das.research.estimators import DEFAULT_ESTIMATORS, estimator_problem, from_nmf, unknown_estimators
from das.research.replicate import (
    CONFIDENTIAL,
    DEFAULT_QUERIES,
    RELEASE,
    STUDY_FILES,
    WITH_REPORT,
    Context,
    Scores,
    _write_parquet,
    check_areas,
    score,
    scored_queries,
    summarize,
    with_groups,
    write_parts,
)
from das.research.scored import Scored, public_context, scored

METRICS = outdir.Owner("das metrics", "metrics directory", STUDY_FILES, confidential=True, replaces=True,
                       nested=WITH_REPORT)


def truth_option() -> str:
    """How the caller gives the truth: `--truth PERSONS UNITS`, or `truth=(persons, units)` from Python."""
    return option("truth", "PERSONS UNITS", python="truth=(persons, units)")


def metrics_dir(run_dir) -> Path:
    """Where `das metrics RUN_DIR` writes by default: `<RUN_DIR>-metrics`, beside the release."""
    run_dir = Path(os.path.normpath(os.path.abspath(run_dir)))
    if not run_dir.name:
        raise StudyError(f"{run_dir} is the root: there is no beside to write {run_dir}-metrics; pass {option('out')}")
    return run_dir.with_name(run_dir.name + "-metrics")


def recorded_truth(run_dir) -> tuple[str, str]:
    """The confidential inputs a release was made from (its operator record), to score it against by default;
    StudyError, asking for the truth, when there is no record, or when the inputs were DataFrames (das.run or das.synth
    in Python: das keeps no copy of them: what is recorded is what they were called, "the persons DataFrame")."""
    try:
        paths = input_paths(Path(run_dir))
    except BundleError as e:
        raise StudyError(f"{e}; give its truth: {truth_option()}") from None
    frames = read_process(Path(run_dir)).get(DATAFRAMES) or []
    if frames:
        raise StudyError(f"{run_dir} was made from pandas DataFrames ({' and '.join(map(str, frames))}), of which das "
                         f"keeps no copy: there is no recorded truth to score it against; give its truth: {truth_option()} "
                         "(paths or DataFrames)")
    return paths["persons"], paths["units"]


def truth_context(persons, units, schema: Schema | str, levels) -> Context:
    """The confidential input as a scoring context: geography, invariants, true block histograms (`schema`: a
    Schema, or a schema's shipped name or path)."""
    schema = schema if isinstance(schema, Schema) else load_schema(schema)
    inputs = read_inputs(persons, units, schema)
    geography = Geography.from_blocks(inputs.inventory.blocks, tuple(levels))
    blocks = inputs.person_histograms.tocsr()
    return Context(None, schema, geography, Invariants.from_inputs(inputs.inventory, blocks, geography), blocks)


def on_release_spine(ctx: Context, path: Path, levels) -> tuple[Context, np.ndarray | None]:
    """The context on the spine a release was measured on (its published spine.parquet, `path`), so its NMF's
    geounits are the context's, and the positions of the spine's blocks among the sorted ones (None: standard)."""
    if not path.is_file():
        return ctx, None
    spine = from_table(pd.read_parquet(path), tuple(levels))
    on = Confidential(ctx.geography, ctx.invariants, {RELEASE: ctx.blocks}).on_spine(spine)
    return replace(ctx, geography=spine, invariants=on.invariants, blocks=on.histograms[RELEASE]), \
        block_order(spine, ctx.geography)


def release_estimators(manifest, estimators=None) -> tuple[tuple[str, ...], str | None]:
    """(the estimators to score, the mechanism whose name the release's own takes): a TopDown release's are
    ESTIMATORS (default DEFAULT_ESTIMATORS); a synthetic release's is its MDF alone, scored as `topdown` is and named after its
    mechanism (given as that name or as `topdown`; default it). Anything else: a StudyError saying what it supports."""
    if manifest.mechanism is None:
        estimators = DEFAULT_ESTIMATORS if estimators is None else tuple(estimators)
        if problem := unknown_estimators(estimators):
            raise StudyError(f"{problem} (a TopDown release's; a synthetic release is scored by its own alone)")
        return estimators, None
    name = manifest.mechanism.name
    other = [e for e in (estimators or ()) if e not in (name, "topdown")]
    if other or estimators is not None and not estimators:
        raise StudyError(f"a synthetic release (das synth --mechanism {name}) publishes no noisy measurements: only its "
                         f"own estimator {name} (its MDF) can be scored, not {', '.join(other) or 'none'}; leave "
                         f"--estimators out (a synthetic release's default is its own) or give {name}")
    return ("topdown",), name


def named(scores: Scores, mechanism: str | None) -> Scores:
    """Scores with the release's own estimator under its mechanism's name (a synthetic release), as every file
    and report shows it."""
    if mechanism is None:
        return scores
    frames = {kind: frame.assign(estimator=frame["estimator"].replace({"topdown": mechanism}))
              if "estimator" in frame else frame
              for kind, frame in vars(scores).items()}
    return Scores(**frames)


def evaluate_run(run_dir, *, truth: tuple[Source, Source] | None = None, against=None, out=None, estimators=None,
                 queries=DEFAULT_QUERIES, keep=("total",), areas=()) -> dict:
    """Score a `das run` or `das synth` output directory, or an estimate directory (das postprocess --estimator),
    against the truth or, `against`, another release or estimate (das.research.scored); writes stats/errors/metrics
    files to `out` (default metrics_dir(run_dir)), replacing only an earlier `das metrics` output there.
    `estimators`: default the release's own (release_estimators). `areas`: (type, area file) pairs scored off the
    spine (none: synthetic districts, das.research.districts)."""
    run_dir = Path(run_dir)
    areas = tuple((str(t), str(p)) for t, p in areas)
    check_areas(areas)
    side = scored(run_dir)
    estimators = _estimators(side, estimators)
    if against is not None and truth is not None:
        raise StudyError(f"give {truth_option()} or {option('against', 'DIR', python='against=')}, not both: a release "
                         "is scored against the truth or against another release or estimate")
    reference = None if against is None else scored(against, role="reference")
    if reference is None:
        persons, units = truth or recorded_truth(run_dir)
        for path in (persons, units):
            if not isinstance(path, InMemory) and not Path(path).exists():
                raise StudyError(f"truth file {path} does not exist (pass {truth_option()})")
    protected = [run_dir, *(p for _, p in areas)] + ([persons, units] if reference is None else [reference.path])
    out = Path(out) if out else metrics_dir(run_dir)
    claim = outdir.check(out, METRICS, protected=protected)
    manifest, schema = side.manifest, side.schema()
    queries = scored_queries(schema, queries)  # refused before anything is read
    if reference is None:
        standard = truth_context(persons, units, schema, manifest.levels)
        ctx, _ = on_release_spine(standard, side.spine, manifest.levels)
        blocks = standard.geography.blocks
    else:
        ctx, blocks = public_context(side, reference)
    ctx = with_groups(ctx, areas)
    own = side.blocks(ctx.geography, blocks) if "topdown" in estimators else None
    nmf_dir = RunDir(run_dir).nmf_dir
    if (reading := from_nmf(estimators)) and not any(RunDir(run_dir).nmf_level_files(RELEASE, lv) for lv in manifest.levels):
        raise StudyError(f"{nmf_dir / RELEASE} is missing: the {' and '.join(reading)} estimators read the run's NMF")
    if reason := estimator_problem(estimators, ctx.schema, manifest.certificate(RELEASE).queries_by_level(manifest.levels)):
        raise StudyError(reason)
    claim.start()  # its own earlier output deleted, its record written
    (out / "parts").mkdir(parents=True, exist_ok=True)
    offspine.write_blocks(ctx.geography.blocks, out, _write_parquet)
    cert = manifest.certificate(RELEASE)
    rho = fraction_text(cert.rho if cert.rho is not None else cert.budget)  # the budget given ((eps, delta)-DP: no rho)
    scores = named(score(ctx, nmf_dir, own, estimators=tuple(estimators), queries=queries, keep=tuple(keep),
                         tags={"rho": str(rho), "replicate": 0}), side.own)
    write_parts(scores, out / "parts", rho_index=0, replicate=0)
    meta = _meta(side, reference, ctx, rho=rho, estimators=estimators, queries=queries, keep=keep, areas=areas)
    meta.update(summarize(out))
    (out / "study.json").write_text(json.dumps(meta, indent=2))
    claim.finish()
    return meta


def _estimators(side: Scored, estimators) -> tuple[str, ...]:
    """What is scored of a side: a release's estimators (release_estimators); an estimate's own alone."""
    if side.estimate is None:
        return release_estimators(side.manifest, estimators)[0]
    own = side.estimate["estimator"]
    if estimators is not None and tuple(estimators) not in ((own,), ("topdown",)):
        raise StudyError(f"{side.path} is an estimate ({own}): only it can be scored, not {', '.join(estimators) or 'none'}; "
                         f"leave {option('estimators')} out")
    return ("topdown",)  # its histograms, scored as a release's MDF is and named after it


def _meta(side: Scored, reference: Scored | None, ctx, *, rho: str, estimators, queries, keep, areas) -> dict:
    """study.json of one scored release or estimate: what was scored, against what, how."""
    manifest, mechanism = side.manifest, _mechanism(side)
    return {
        "kind": "run", "run_dir": str(side.path), "spec_name": manifest.spec_name, "rhos": [str(rho)],
        "study": {"spec": manifest.spec_name, "runs": 1, "estimators": [side.own] if side.own else list(estimators),
                  "queries": list(queries), "keep": list(keep), "seed": None, "areas": [list(a) for a in areas]},
        "mechanism": mechanism,
        "estimate": None if side.estimate is None else {k: side.estimate[k] for k in ("estimator", "about", "notice")},
        "against": None if reference is None else {
            "path": str(reference.path), "what": reference.own or ("an estimate" if reference.estimate else "topdown"),
            "note": "scored against this release or estimate, not the truth: every error is a difference from it, "
                    "binned by its size"},
        "queries": list(queries), "levels": list(manifest.levels), "schema": ctx.schema.name,
        "randomness": manifest.randomness, "notice": CONFIDENTIAL, "confidential": True, "status": "complete",
        "n_blocks": ctx.geography.n_blocks,
        "units": {lv: int(ctx.geography.n_units(lv)) for lv in ctx.geography.levels},
        "areas": dict(ctx.groups.described), "composition": ctx.groups.shares is not None,
    }


def _mechanism(side: Scored) -> dict | None:
    mechanism = side.manifest.mechanism
    return None if mechanism is None else {"name": mechanism.name, "summary": mechanism.summary}
