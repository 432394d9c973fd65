"""`das metrics`, `das replicate`, `das report`: the bias-research commands."""

from __future__ import annotations

import os
import sys

from das.cli.args import (
    SEED_HELP,
    add_budget,
    add_overwrite,
    area_file,
    delta,
    names,
    nonnegative_int,
    path,
    positive_int,
    spec_help,
)
from das.mechanisms import registry

# das.research.estimators.DEFAULT_ESTIMATORS and das.research.replicate.DEFAULT_QUERIES, spelled out so that
# `das --help` imports nothing heavy (tests/test_cli_research.py checks they agree); the estimators a command
# accepts are the registry's, read when the argument is parsed
DEFAULT_ESTIMATORS = ("topdown", "noisy", "wls")
DEFAULT_QUERIES = ("total", "hhgq", "hispanic x cenrace", "votingage x hispanic x cenrace")


def estimator_names() -> tuple[str, ...]:
    """The registered estimators (das.research.estimators.ESTIMATORS)."""
    from das.research.estimators import ESTIMATORS

    return tuple(ESTIMATORS)


AREAS_HELP = ("an area type and its file (columns GEOID, the block, and area, its id; Parquet or CSV), scored off the "
              "spine beside its levels; repeatable (default: synthetic districts of about 1,000 and 5,000 persons that "
              "cut across tracts, docs/research.md)")


def _names(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.split(",") if part.strip())


def _areas(pairs) -> dict[str, str] | None:
    """--areas TYPE=PATH ... as a mapping (None: none given); a type given twice, or named as a level, is refused."""
    from das.research.replicate import check_areas

    if not pairs:
        return None
    check_areas(pairs)
    return dict(pairs)


def _headline(study, what: str) -> None:
    """A few lines on the terminal: the MAE of total population per geounit, by level and estimator for one budget,
    with a row per area type off the spine after the levels (areas.parquet); by budget and estimator at the finest
    level for a sweep (details in files)."""
    import pandas as pd

    from das.research.metrics import headline, sweep_headline, text_table
    from das.research.offspine import headline as area_headline

    meta = study.meta
    if len(meta["rhos"]) > 1:
        print(f"{what} {meta['spec_name']}: MAE of total population per {meta['levels'][-1]}, by budget")
        print(text_table(sweep_headline(study.metrics, meta["levels"][-1])))
        return
    table = headline(study.metrics, meta["levels"])
    mechanism = (meta.get("mechanism") or {}).get("name")  # a synthetic release: named as itself
    what = f"{what} {meta['spec_name']}" + (f" (das synth --mechanism {mechanism})" if mechanism else "")
    if (study.path / "areas.parquet").is_file():
        areas = area_headline(study.frame("areas"))
        areas = areas[~areas["level"].isin(meta["levels"])].drop(columns="units")  # the area types' rows
        table = pd.concat([table, areas[[c for c in table.columns if c in areas.columns]]], ignore_index=True)
    budget = meta.get("budgets", [{}])[0]  # a replicate study's: the rho and its eps at delta
    at = f", eps {budget['eps']} at delta {budget['delta']}" if budget else ""
    print(f"{what}: MAE of total population per geounit, then per area off the spine (rho {meta['rhos'][0]}{at})")
    print(text_table(table))


def _cmd_metrics(args) -> int:
    import das

    study = das.metrics(args.run_dir, truth=args.truth, against=args.against, out=args.out, estimators=args.estimators,
                        queries=_names(args.queries), keep=_names(args.keep), areas=_areas(args.areas))
    _headline(study, "das metrics")
    if args.against:
        print(f"scored against {args.against}, not the truth: every error is a difference from it, binned by its size")
    print(f"details (every query, level and size bin; the bias by size): {study.path / 'metrics.md'}; "
          f"tables as Parquet in {study.path} (owner-only, as every metrics directory)")
    return 0


def _cmd_replicate(args) -> int:
    import das
    from das.research.replicate import rho_list

    rhos = [r for r in rho_list(args.rho) if r != "spec"] or None
    eps = [e for e in rho_list(args.eps, "--eps") if e != "spec"] or None
    study = das.replicate(args.spec, out=args.out, runs=args.runs, rho=rhos, eps=eps, delta=args.delta, seed=args.seed,
                          estimators=args.estimators,
                          queries=_names(args.queries), keep=_names(args.keep), workers=args.workers,
                          overwrite=args.overwrite, allow_large_rho=args.allow_large_rho, areas=_areas(args.areas))
    meta = study.meta
    print(f"{meta['replicates']} replicate(s) per budget of {meta['spec_name']} in {meta['wall_seconds']:.1f} s "
          f"({args.workers} worker(s)); noise: {meta['randomness']}")
    _headline(study, "das replicate")
    print(f"details: {study.path / 'metrics.md'}; tables as Parquet in {study.path} (confidential)")
    if args.report:
        print(f"report: {study.report()}")
    return 0


def _cmd_report(args) -> int:
    from das.research.report import build_report

    print(f"wrote {build_report(args.dir, args.out, areas=_areas(args.areas))}")
    return 0


def add_parsers(sub) -> None:
    common = {"queries": ",".join(DEFAULT_QUERIES)}

    m = sub.add_parser("metrics", help="accuracy of a run's release (and of its NMF), or of an estimate, against the "
                                       "true input or against another release or estimate")
    m.add_argument("run_dir", type=path, help="a release (written by das run or das synth, or a published bundle), or "
                                              "an estimate directory (das postprocess --estimator)")
    truth = m.add_mutually_exclusive_group()
    truth.add_argument("--truth", type=path, nargs=2, metavar=("PERSONS", "UNITS"), default=None,
                       help="confidential input files (default: the run's own inputs, from its operator record)")
    truth.add_argument("--against", type=path, metavar="DIR", default=None,
                       help="score against this release or estimate of the same geography instead of the truth: "
                            "differences by level, size and composition, from public files alone (default: against the truth)")
    m.add_argument("--out", type=path, default=None,
                   help="output directory, outside the release (default RUN_DIR-metrics, beside it; the scores hold "
                        "true counts: confidential). A rerun replaces its own earlier output; a directory holding "
                        "anything else is refused")
    m.add_argument("--estimators", type=names(lambda: (*estimator_names(), *registry.ENTRIES)), default=None,
                   help=f"comma list of estimators (default: the release's own: {','.join(DEFAULT_ESTIMATORS)} for a TopDown "
                        "release; a synthetic release's MDF alone, named after its mechanism, e.g. aim)")
    m.add_argument("--queries", default=common["queries"], help="comma list of schema queries to score")
    m.add_argument("--keep", default="total", help="queries whose per-geounit errors are written")
    m.add_argument("--areas", type=area_file, action="append", metavar="TYPE=PATH", help=AREAS_HELP)
    m.set_defaults(func=_cmd_metrics)

    r = sub.add_parser("replicate", help="N independent noise draws on the same input, scored per estimator")
    r.add_argument("spec", type=path, help=spec_help() + " (its persons release is studied)")
    r.add_argument("--runs", type=positive_int, default=20, help="replicates per budget")
    r.add_argument("--out", type=path, required=True, help="output directory of the study (confidential)")
    r.add_argument("--workers", type=positive_int, default=os.cpu_count() or 1, help="replicates in parallel")
    r.add_argument("--rho", default=None, help="comma list of persons budgets (exact fractions) to sweep; default the "
                                               "spec's")
    r.add_argument("--eps", default=None,
                   help="or the budgets as eps at --delta: a comma list (exact, like 1 or 0.5), each the largest exact rho "
                        "whose certificate is within (eps, delta), as das run --eps spends; study.json records each rho "
                        "(default: --rho's budgets)")
    r.add_argument("--delta", type=delta, default=None,
                   help="delta of --eps, an exact fraction in (0, 1) (default: the spec's [privacy] delta)")
    r.add_argument("--allow-large-rho", action="store_true",
                   help="acknowledge a budget above the cap (rho > 10): barely protected")
    r.add_argument("--seed", type=nonnegative_int, default=None, help=SEED_HELP)
    r.add_argument("--estimators", type=names(estimator_names), default=",".join(DEFAULT_ESTIMATORS),
                   help="comma list of estimators")
    r.add_argument("--queries", default=common["queries"], help="comma list of schema queries to score")
    r.add_argument("--keep", default="total", help="queries whose per-geounit errors are kept")
    r.add_argument("--areas", type=area_file, action="append", metavar="TYPE=PATH", help=AREAS_HELP)
    add_overwrite(r, "another study", where="--out", then="; without it the same study is continued")
    r.add_argument("--report", action="store_true", help="also write the report (das report OUT)")
    r.set_defaults(func=_cmd_replicate)

    p = sub.add_parser("report", help="HTML + Markdown report with plots of a replicate or metrics directory")
    p.add_argument("dir", type=path, help="a directory written by das replicate, das metrics or das compare")
    p.add_argument("--out", type=path, default=None,
                   help="report directory (default DIR/report, part of the study); a rerun replaces its own earlier "
                        "report, a directory holding anything else is refused")
    p.add_argument("--areas", type=area_file, action="append", metavar="TYPE=PATH",
                   help="an area type and its file, scored from DIR's block errors in place of the areas DIR was "
                        "scored on (those: the default); repeatable. Needs the block total kept (--keep total)")
    p.set_defaults(func=_cmd_report)

    _add_compare(sub)


def _cmd_compare(args) -> int:
    import das
    from das.research.compare import short_table
    from das.research.metrics import text_table

    study = das.compare(args.spec, out=args.out, mechanisms=args.mechanisms, seeds=args.seeds, rho=args.rho, eps=args.eps,
                        delta=args.delta,
                        attack_blocks=args.attack_blocks, attack_seeds=args.attack_seeds, attack_runs=args.attack_runs,
                        attack_relaxed=args.attack_relaxed, attack_steps=args.attack_steps, tables=args.tables,
                        workers=args.workers, overwrite=args.overwrite, allow_large_rho=args.allow_large_rho)
    meta = study.meta
    if meta["rows"]:
        print(f"das compare {meta['spec_name']}: MAE of total population per geounit, median seconds per release, "
              "RAP-Rank Match-Rate@u")
        print(text_table(short_table(study.frame("comparison"))))
    print(f"details: {study.path / 'comparison.md'} (every column), {study.path / 'report' / 'index.html'} (figures); "
          f"tables as Parquet in {study.path} (confidential; {meta['wall_seconds_this_call']:.0f} s)")
    for failure in meta["failures"]:
        print(f"FAILED: {failure['mechanism']} seed {failure['seed']} (exit {failure['exit']}): {failure['stderr']}",
              file=sys.stderr)
    return 1 if meta["failures"] else 0


def _add_compare(sub) -> None:
    c = sub.add_parser("compare", help="TopDown, the research estimators and other mechanisms on the same input: "
                                       "error, bias, cost and attack match rates side by side")
    c.add_argument("spec", type=path, help=spec_help() + " (its persons release is compared)")
    c.add_argument("--mechanisms", default="topdown",
                   help=f"comma list of topdown, {', '.join(registry.ENTRIES)} (mst and aim need pip install 'das[mbi]')")
    c.add_argument("--seeds", type=positive_int, default=20, help="releases per mechanism (seeds 0..N-1, NOT private)")
    c.add_argument("--out", type=path, required=True, help="output directory of the comparison (confidential)")
    add_budget(c, rho_help="persons zCDP budget of every release, an exact fraction like 1/2 or 0.25 (default: the spec's)",
               delta_help="delta of --eps: the spec's [privacy] delta, at which every release is certified (default)")
    c.add_argument("--attack-blocks", type=nonnegative_int, default=10,
                   help="blocks attacked, across the size range (0: none)")
    c.add_argument("--attack-seeds", type=nonnegative_int, default=None,
                   help="attack the releases of the first N seeds (default all)")
    c.add_argument("--attack-runs", type=positive_int, default=20, help="RAP runs per block")
    c.add_argument("--attack-relaxed", type=positive_int, default=300, help="K relaxed records per RAP run")
    c.add_argument("--attack-steps", type=positive_int, default=300, help="Adam steps per RAP run")
    c.add_argument("--tables", type=path, default=None, help="attack workload spec (default: the schema's)")
    c.add_argument("--workers", type=positive_int, default=os.cpu_count() or 1,
                   help="worker processes of each release and attack")
    add_overwrite(c, "another comparison", where="--out", then="; without it the same comparison is continued")
    c.set_defaults(func=_cmd_compare)
