"""`das run`, `validate`, `validate-input`, `privacy`, `measure`, `tables`, `audit-privacy`: releases."""

from __future__ import annotations

import json
import os


def _cmd_run(args) -> int:
    from das.run import RunError, resume_run, run

    if args.resume:
        if args.overwrite:
            raise RunError("--resume continues a run; it cannot be combined with --overwrite")
        result = resume_run(args.resume, spec_path=args.spec, seed=args.seed, workers=args.workers,
                            progress=not args.no_progress, engine=args.engine, scheduler=args.scheduler,
                            allow_large_rho=args.allow_large_rho, memory_gb=args.memory_gb)
    else:
        if args.spec is None:
            raise RunError("das run needs a SPEC (or --resume RUN_DIR)")
        result = run(args.spec, args.out, seed=args.seed, workers=args.workers, overwrite=args.overwrite,
                     progress=not args.no_progress, engine=args.engine, scheduler=args.scheduler,
                     allow_large_rho=args.allow_large_rho, memory_gb=args.memory_gb)
    print(result.summary)
    print(f"wrote {result.out_dir}")
    return 0 if result.valid else 1


def _cmd_validate(args) -> int:
    from das.validate import main

    return main(args.run_dir, inputs=args.inputs)


def _cmd_validate_input(args) -> int:
    from das.io.validation import validate_input_main

    return validate_input_main(args.persons, args.units, args.schema)


def _cmd_privacy(args) -> int:
    from das.pipeline import Pipeline
    from das.privacy.accounting import render_certificate

    certs = Pipeline.prepare(args.spec, seed=None, allow_large_rho=True).certificates  # printing a certificate spends nothing
    if args.json:
        print(json.dumps({name: cert.to_dict() for name, cert in certs.items()}, indent=2))
    else:
        for name, cert in certs.items():
            print(f"== {name}")
            print(render_certificate(cert))
    return 0


def _cmd_measure(args) -> int:
    from das.run import measure_only

    manifest = measure_only(args.spec, args.out, seed=args.seed, overwrite=args.overwrite,
                            allow_large_rho=args.allow_large_rho)
    print(f"wrote {len(manifest.nmf)} NMF files and manifest.json to {args.out}")
    return 0


def _cmd_tables(args) -> int:
    from das.summary_files import convert

    written = convert(args.source, args.out, args.format)
    print(f"wrote {len(written)} files to {args.out}: " + ", ".join(p.name for p in written))
    return 0


def _cmd_audit_privacy(args) -> int:
    from das.attack.privacy import audit_spec_main
    from das.attack.release_audit import audit_releases_main
    from das.schema import SpecError

    settings = {"rho": args.rho, "delta": args.delta, "seed": args.seed, "json_out": args.json, "out": args.out,
                "overwrite": args.overwrite}
    if args.release:  # whole releases, end to end (das.attack.release_audit)
        try:
            return audit_releases_main(args.spec, args.release, trials=20 if args.trials is None else args.trials,
                                       **settings)
        except ValueError as e:
            raise SpecError(str(e)) from None
    return audit_spec_main(args.spec, trials=20_000 if args.trials is None else args.trials, **settings)


def add_parsers(sub) -> None:
    """The release commands: run, validate, validate-input, privacy, measure, tables, audit-privacy."""

    r = sub.add_parser("run", help="a whole release: measure, post-process, write MDF/tables/NMF, validate")
    r.add_argument("spec", nargs="?", help="run spec: a shipped name (see specs/runs) or a .toml path")
    r.add_argument("--out", default=None, help="output directory (default: runs/<spec name>)")
    r.add_argument("--seed", type=int, default=None,
                   help="replication mode: seeded noise, outputs labelled NOT private")
    r.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="parallel solver processes")
    r.add_argument("--overwrite", action="store_true",
                   help="replace the das run in the output directory, deleting only its own files; a directory "
                        "holding any other file is refused")
    r.add_argument("--allow-large-rho", action="store_true",
                   help="acknowledge a budget above the preflight cap (rho > 10): barely protected")
    r.add_argument("--no-progress", action="store_true", help="no progress bars")
    r.add_argument("--resume", metavar="RUN_DIR", default=None,
                   help="continue an interrupted run from its stored noisy measurements and checkpoints "
                        "(never drawing noise again); SPEC defaults to the run's own")
    r.add_argument("--engine", choices=("local", "dask"), default="local",
                   help="where tasks run: a local process pool, or Dask (pip install 'das[dask]')")
    r.add_argument("--scheduler", metavar="ADDRESS", default=None,
                   help="Dask scheduler address (tcp://host:8786); default: a local cluster of --workers processes")
    r.add_argument("--memory-gb", type=float, default=None,
                   help="a partitioned run (inputs as one file per state) starts a state's task only while the "
                        "tasks in flight are estimated to fit this much memory with the driver and workers "
                        "(docs/scale.md); default: no limit")
    r.set_defaults(func=_cmd_run)

    v = sub.add_parser("validate", help="independently check a run directory's outputs")
    v.add_argument("run_dir")
    v.add_argument("--inputs", nargs=2, metavar=("PERSONS", "UNITS"), default=None,
                   help="also compare the invariants with these confidential inputs (default: the run's "
                        "operator files, when present)")
    v.set_defaults(func=_cmd_validate)

    vi = sub.add_parser("validate-input", help="check persons/units microdata files")
    vi.add_argument("persons")
    vi.add_argument("units")
    vi.add_argument("--schema", default="pl94_persons")
    vi.set_defaults(func=_cmd_validate_input)

    pr = sub.add_parser("privacy", help="print the privacy certificate of a run spec")
    pr.add_argument("spec")
    pr.add_argument("--json", action="store_true")
    pr.set_defaults(func=_cmd_privacy)

    m = sub.add_parser("measure", help="write the noisy measurement file (NMF) and a manifest")
    m.add_argument("spec")
    m.add_argument("--out", required=True, help="output directory (empty, or a das run to --overwrite)")
    m.add_argument("--seed", type=int, default=None)
    m.add_argument("--overwrite", action="store_true",
                   help="replace the das run in the output directory, deleting only its own files; a directory "
                        "holding any other file is refused")
    m.add_argument("--allow-large-rho", action="store_true")
    m.set_defaults(func=_cmd_measure)

    t = sub.add_parser("tables", help="a release's tables as PL 94-171 summary files (or PL files read into Parquet)")
    t.add_argument("source", help="a das run directory, or a directory of PL 94-171 files (das's or the Census Bureau's)")
    t.add_argument("--format", choices=("pl94171", "parquet"), default="pl94171",
                   help="pl94171: the 2020 legacy summary files (4 per state); parquet: one file per table, PL layout")
    t.add_argument("--out", required=True,
                   help="output directory, outside the source; a rerun replaces its own earlier tables, a directory "
                        "holding anything else is refused")
    t.set_defaults(func=_cmd_tables)

    _add_audit_privacy(sub)


def _add_audit_privacy(sub) -> None:
    """`das audit-privacy`: of the measurement, or (--release) of whole releases."""
    a = sub.add_parser("audit-privacy", help="empirical lower bound on epsilon from neighbouring datasets")
    a.add_argument("spec", help="run spec whose schema, strategy and levels are audited (no input is read)")
    a.add_argument("--trials", type=int, default=None,
                   help="runs of the measurement per dataset (default 20,000), or of each release (default 20)")
    a.add_argument("--release", action="append", default=[], metavar="COMMAND",
                   help="audit whole releases of this command end to end instead of the measurement: `run`, or a "
                        "`das synth` mechanism (repeat for several); every public output is tested")
    a.add_argument("--rho", default=None, help="audit budget (default 1: see docs/privacy.md)")
    a.add_argument("--delta", default=None, help="audit delta (default 1/100: see docs/privacy.md)")
    a.add_argument("--seed", type=int, default=None, help="seeded noise (reproducible audit)")
    a.add_argument("--json", action="store_true")
    a.add_argument("--out", default=None,
                   help="also write the report to this directory (audit.json, and audit.md: a short summary)")
    a.add_argument("--overwrite", action="store_true",
                   help="replace an earlier audit in --out (deleting only its own files; anything else is refused)")
    a.set_defaults(func=_cmd_audit_privacy)
