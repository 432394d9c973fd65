"""`das metrics`, `das replicate`, `das report`: the bias-research commands."""

from __future__ import annotations

import os

from das.research import compare
from das.research.estimators import ESTIMATORS
from das.research.replicate import DEFAULT_QUERIES


def _names(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.split(",") if part.strip())


def _cmd_metrics(args) -> int:
    from das.research.evaluate import evaluate_run, metrics_dir

    out = args.out or metrics_dir(args.run_dir)
    meta = evaluate_run(args.run_dir, truth=tuple(args.truth) if args.truth else None, out=out,
                        estimators=_names(args.estimators), queries=_names(args.queries), keep=_names(args.keep))
    with open(os.path.join(out, "metrics.md")) as f:
        print(f.read())
    print(f"wrote metrics for {meta['spec_name']} to {out} (stats, errors, metrics, bias as Parquet; metrics.md)")
    return 0


def _cmd_replicate(args) -> int:
    from das.research.replicate import Study, replicate_study, rho_list

    study = Study(spec=args.spec, rhos=rho_list(args.rho), runs=args.runs, estimators=_names(args.estimators),
                  queries=_names(args.queries), keep=_names(args.keep), seed=args.seed)
    meta = replicate_study(study, args.out, workers=args.workers, overwrite=args.overwrite)
    print(f"{meta['replicates']} replicate(s) per budget of {meta['spec_name']} in {meta['wall_seconds']:.1f} s "
          f"({args.workers} worker(s)); noise: {meta['randomness']}")
    print(f"wrote {args.out}: study.json, stats.parquet, errors.parquet, metrics.parquet, bias.parquet, metrics.md")
    if args.report:
        from das.research.report import build_report

        print(f"report: {build_report(args.out)}")
    return 0


def _cmd_report(args) -> int:
    from das.research.report import build_report

    print(f"wrote {build_report(args.dir, args.out)}")
    return 0


def add_parsers(sub) -> None:
    common = {"estimators": ",".join(ESTIMATORS), "queries": ",".join(DEFAULT_QUERIES)}

    m = sub.add_parser("metrics", help="accuracy of a run's release (and of its NMF) against the true input")
    m.add_argument("run_dir")
    m.add_argument("--truth", nargs=2, metavar=("PERSONS", "UNITS"), default=None,
                   help="confidential input files (default: the run's own inputs, from its manifest)")
    m.add_argument("--out", default=None,
                   help="output directory, outside the release (default RUN_DIR-metrics, beside it; the scores hold "
                        "true counts: confidential). A rerun replaces its own earlier output; a directory holding "
                        "anything else is refused")
    m.add_argument("--estimators", default=common["estimators"], help=f"comma list of {', '.join(ESTIMATORS)}")
    m.add_argument("--queries", default=common["queries"], help="comma list of schema queries to score")
    m.add_argument("--keep", default="total", help="queries whose per-geounit errors are written")
    m.set_defaults(func=_cmd_metrics)

    r = sub.add_parser("replicate", help="N independent noise draws on the same input, scored per estimator")
    r.add_argument("spec", help="run spec (persons release is studied)")
    r.add_argument("--runs", type=int, default=20, help="replicates per budget")
    r.add_argument("--out", required=True)
    r.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="replicates in parallel")
    r.add_argument("--rho", default=None, help="comma list of budgets (exact fractions) to sweep; default the spec's")
    r.add_argument("--seed", type=int, default=None, help="seeded noise (replicable; labelled NOT private)")
    r.add_argument("--estimators", default=common["estimators"], help=f"comma list of {', '.join(ESTIMATORS)}")
    r.add_argument("--queries", default=common["queries"], help="comma list of schema queries to score")
    r.add_argument("--keep", default="total", help="queries whose per-geounit errors are kept")
    r.add_argument("--overwrite", action="store_true",
                   help="replace another study in --out (deleting only the study's own files and its report; a "
                        "directory holding anything else is refused); without it the same study is continued")
    r.add_argument("--report", action="store_true", help="also write the report (das report OUT)")
    r.set_defaults(func=_cmd_replicate)

    p = sub.add_parser("report", help="HTML + Markdown report with plots of a replicate or metrics directory")
    p.add_argument("dir")
    p.add_argument("--out", default=None,
                   help="report directory (default DIR/report, part of the study); a rerun replaces its own earlier "
                        "report, a directory holding anything else is refused")
    p.set_defaults(func=_cmd_report)

    compare.add_parser(sub)
