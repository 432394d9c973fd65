"""`das run`, `validate`, `postprocess`, `keygen`, `validate-input`, `privacy`, `measure`, `tables`,
`audit-privacy`: releases."""

from __future__ import annotations

import json
import os
import sys

from das.cli.args import (
    SEED_HELP,
    add_budget,
    add_overwrite,
    budget,
    delta,
    fraction,
    nonnegative_int,
    path,
    positive_float,
    positive_int,
    shipped,
    spec_help,
)


def _cmd_run(args) -> int:
    import das
    from das.core.errors import RunError

    if args.resume:
        from das.driver.run import resume_run  # heavy: imported when it runs, so a refused command stays quick

        if args.overwrite:
            raise RunError("--resume continues a run; it cannot be combined with --overwrite")
        result = resume_run(args.resume, spec_path=args.spec, seed=args.seed, workers=args.workers,
                            progress=not args.no_progress, engine=args.engine, scheduler=args.scheduler,
                            allow_large_rho=args.allow_large_rho, memory_gb=args.memory_gb, budget=budget(args),
                            signing_key=args.signing_key)
        release = das.Release(result.out_dir, result.manifest)
    else:
        if args.spec is None:
            raise RunError("das run needs a SPEC (or --resume RUN_DIR)")
        release = das.run(args.spec, out=args.out, seed=args.seed, workers=args.workers, overwrite=args.overwrite,
                          progress=not args.no_progress, engine=args.engine, scheduler=args.scheduler,
                          allow_large_rho=args.allow_large_rho, memory_gb=args.memory_gb, rho=args.rho, eps=args.eps,
                          delta=args.delta, signing_key=args.signing_key)
    print(release.summary)
    print(f"wrote {release.path}")
    return 0 if release.valid else 1


def _cmd_init(args) -> int:
    import das

    das.init_spec(args.persons, args.units, out=args.out, name=args.name, schema=args.schema)
    print(f"wrote {args.out}: check it (das privacy {args.out}), then release (das run {args.out} --out DIR)")
    return 0


def _cmd_validate(args) -> int:
    from das.validate import main

    rc = main(args.run_dir, inputs=args.inputs, public_key=args.public_key)
    if not args.reproduce or rc == 2:
        return rc
    from das.driver.postprocess import reproduce  # heavy: the engine

    found = reproduce(args.run_dir, workers=args.workers)
    print()
    for name in found.compared:
        print(f"{'FAIL' if name in found.differ else 'ok '} {name}: as its NMF post-processes to again")
    if found.differ:
        print(f"\nnot reproduced: {', '.join(found.differ)} differ(s) from what das postprocess makes of the release's NMF "
              "and invariants (with this version of das; a release made by another version may differ by its solver)")
        return 1
    print(f"reproduced: every output of {args.run_dir} ({len(found.compared)} files) is what its NMF post-processes to")
    return rc


def _cmd_postprocess(args) -> int:
    import das

    made = das.postprocess(args.bundle, out=args.out, estimator=args.estimator, settings=args.settings,
                           workers=args.workers, overwrite=args.overwrite, progress=not args.no_progress,
                           signing_key=args.signing_key)
    if isinstance(made, das.Estimate):
        record = made.record
        print(f"wrote {made.path}: the {record['estimator']} estimate of {args.bundle}'s NMF ({record['about']})")
        print(record["notice"])
        return 0
    print(made.summary)
    how = " with the settings of " + str(args.settings) if args.settings else ""
    print(f"wrote {made.path}: the release of {args.bundle}'s NMF, post-processed again from its public files{how}")
    return 0 if made.valid else 1


def _cmd_publish(args) -> int:
    import das
    from das.frame.publish import PublishError
    from das.frame.records import RunDirError
    from das.model.specfile import cut_long_words

    try:
        bundle = das.publish(args.run_dir, to=args.to, overwrite=args.overwrite)
    except RunDirError as e:
        print(f"das publish: {cut_long_words(str(e))}", file=sys.stderr)
        return 2
    except PublishError as e:
        print(f"das publish: refused: {cut_long_words(str(e))}", file=sys.stderr)
        return 1
    what = "archive" if bundle.archive else "directory"
    print(f"wrote {bundle.path}: the bundle ({what}) of {args.run_dir}, {len(bundle.files)} public files, nothing of the "
          "operator's; check it with das validate (and --public-key, the key you publish)")
    return 0


def _cmd_keygen(args) -> int:
    from das.frame.signing import keygen

    private, public, fingerprint = keygen(args.key)
    print(f"wrote {private} (the private key: keep it with the operator, readable by you only) and {public} "
          f"(the public key: publish it where readers of your releases will find it)")
    print(f"public key fingerprint (SHA-256): {fingerprint}")
    print(f"sign a release with it: das run SPEC --signing-key {private}  (or das synth, das measure ... --signing-key "
          f"{private})")
    return 0


def _cmd_validate_input(args) -> int:
    from das.io.validation import validate_input_main

    return validate_input_main(args.persons, args.units, args.schema)


def _cmd_privacy(args) -> int:
    import das
    from das.privacy.accounting import render_certificate
    from das.privacy.guarantee import combined

    if args.spec is None:
        return _budget_conversion(args)
    certs = das.certificates(args.spec, rho=args.rho, eps=args.eps, delta=args.delta)
    total = combined(certs)
    if args.json:
        print(json.dumps({**{name: cert.to_dict() for name, cert in certs.items()}, "total": total.to_dict()}, indent=2))
        return 0
    for name, cert in certs.items():
        given = " (--rho/--eps set this budget)" if name == "persons" and (args.rho or args.eps) else ""
        print(f"== {name}{given}")
        print(render_certificate(cert, release=name))
    print(f"== total: {' and '.join(total.releases)} together")
    print(f"{total.text()}\n{total.composition}")
    return 0


def _budget_conversion(args) -> int:
    """`das privacy --eps E --delta D` (the largest rho within it) or `--rho R --delta D` (its eps): no spec."""
    import das
    from das.core.errors import RunError
    from das.privacy.certificate import delta_text, fraction_text

    if args.delta is None or (args.rho is None) == (args.eps is None):
        raise RunError("das privacy needs a SPEC (its certificate), or --eps E --delta D (the largest rho within "
                       "them), or --rho R --delta D (the eps of rho at delta)")
    rho = args.rho if args.rho is not None else das.rho_for_eps(args.eps, args.delta)
    eps = das.eps_for_rho(rho, args.delta)
    if args.json:
        print(json.dumps({"rho": fraction_text(rho), "eps": eps, "delta": delta_text(args.delta)}, indent=2))
    elif args.eps is not None:
        print(f"eps {args.eps} at delta {delta_text(args.delta)}: rho = {fraction_text(rho)} (= {float(rho):.6g}), the "
              f"largest rho of 6 significant digits certified within it (its eps: {eps})")
    else:
        print(f"rho {fraction_text(rho)} (= {float(rho):.6g}) at delta {delta_text(args.delta)}: eps = {eps}")
    return 0


def _cmd_measure(args) -> int:
    from das.driver.run import measure_only

    manifest = measure_only(args.spec, args.out, seed=args.seed, overwrite=args.overwrite,
                            allow_large_rho=args.allow_large_rho, budget=budget(args), signing_key=args.signing_key)
    also = "".join(f", {name}" for name in (manifest.outputs or {}))  # the spine, when not the standard one
    v = manifest.validation
    print(f"validation: {'PASSED' if v.valid else 'FAILED'} ({len(v.checks)} checks)")
    if not manifest.private:  # said on stdout too: -q keeps errors only
        from das.frame.lifecycle import NOT_PRIVATE

        print("NOTE: " + NOT_PRIVATE)
    print(f"wrote {len(manifest.nmf)} NMF files{also}, manifest.json and its signature to {args.out}")
    return 0 if v.valid else 1


def _cmd_tables(args) -> int:
    from das.io.summary_files import convert

    written = convert(args.source, args.out, args.format, names=args.names)
    print(f"wrote {len(written)} files to {args.out}: " + ", ".join(p.name for p in written))
    return 0


def _cmd_audit_privacy(args) -> int:
    from das.attack.privacy import audit_spec_main
    from das.attack.release_audit import audit_releases_main
    from das.core.errors import SpecError

    settings = {"rho": _text(args.rho), "delta": _text(args.delta), "seed": args.seed, "json_out": args.json,
                "out": args.out, "overwrite": args.overwrite}
    if args.release:  # whole releases, end to end (das.attack.release_audit)
        try:
            return audit_releases_main(args.spec, args.release, trials=20 if args.trials is None else args.trials,
                                       **settings)
        except ValueError as e:
            raise SpecError(str(e)) from None
    if args.trials is not None and args.trials < 100:
        raise SpecError(f"--trials {args.trials}: the measurement's audit needs at least 100 trials per dataset")
    return audit_spec_main(args.spec, trials=20_000 if args.trials is None else args.trials, **settings)


def _text(value) -> str | None:
    return None if value is None else str(value)


def _add_publish(sub) -> None:
    pb = sub.add_parser("publish", help="write a release's bundle: its public files alone, ready to publish",
                        description="Write exactly the public files of a finished, signed and valid release (the "
                                    "manifest, every file it lists, its signature and public key), never the "
                                    "operator's, each 0644 in 0755 directories with the same modification time "
                                    "(SOURCE_DATE_EPOCH, else 0), to a directory or a .tar archive. Publish that, "
                                    "never the run directory (docs/outputs.md).")
    pb.add_argument("run_dir", type=path, help="a das run directory (written by das run, das synth)")
    pb.add_argument("--to", type=path, required=True, metavar="DIR_OR_TAR",
                    help="the bundle: a directory (new or empty), or an archive FILE.tar")
    add_overwrite(pb, "an earlier bundle", where="--to")
    pb.set_defaults(func=_cmd_publish)


def add_parsers(sub) -> None:
    """The release commands: run, validate, publish, keygen, validate-input, privacy, measure, tables, audit-privacy."""

    _add_run(sub)
    _add_init(sub)

    _add_validate(sub)
    _add_postprocess(sub)
    _add_publish(sub)

    k = sub.add_parser("keygen", help="a new Ed25519 key pair to sign releases with (KEY and KEY.pub)")
    k.add_argument("key", type=path, help="where to write the private key (0600); the public key goes to KEY.pub; "
                                          "neither may exist")
    k.set_defaults(func=_cmd_keygen)

    vi = sub.add_parser("validate-input", help="check persons/units microdata files")
    vi.add_argument("persons", type=path, help="persons file (Parquet or CSV)")
    vi.add_argument("units", type=path, help="units file (Parquet or CSV)")
    vi.add_argument("--schema", type=path, default="pl94_persons",
                    help=f"persons schema: one of {', '.join(n for n in shipped('schemas') if n.endswith('_persons'))}, "
                         "or a .toml path")
    vi.set_defaults(func=_cmd_validate_input)

    pr = sub.add_parser("privacy", help="the privacy certificate of a run spec, or a budget converted: eps at delta "
                                        "to rho (--eps --delta), rho to eps at delta (--rho --delta)")
    pr.add_argument("spec", type=path, nargs="?",
                    help=spec_help() + " (default: none, convert the budget given by --eps or --rho)")
    pr.add_argument("--rho", type=fraction, default=None,
                    help="a persons budget (with SPEC: over the spec's; default: the spec's)")
    pr.add_argument("--eps", type=fraction, default=None,
                    help="a budget as eps at --delta: the largest exact rho whose certificate is within (eps, delta) "
                         "(default: the spec's)")
    pr.add_argument("--delta", type=delta, default=None,
                    help="delta, an exact fraction in (0, 1) (default: the spec's [privacy] delta; required without SPEC)")
    pr.add_argument("--json", action="store_true",
                    help="JSON instead of text: each release's certificate by name, and \"total\", the releases composed")
    pr.set_defaults(func=_cmd_privacy)

    m = sub.add_parser("measure", help="an NMF release: the noisy measurement file (NMF) and a manifest, validated "
                                       "and signed")
    m.add_argument("spec", type=path, help=spec_help())
    m.add_argument("--out", type=path, required=True, help="output directory (empty, or a das run to --overwrite)")
    m.add_argument("--seed", type=nonnegative_int, default=None, help=SEED_HELP)
    add_overwrite(m, "the das run")
    add_budget(m)
    _add_signing_key(m)
    m.set_defaults(func=_cmd_measure)

    t = sub.add_parser("tables", help="a release's tables as PL 94-171 summary files (or PL files read into Parquet)")
    t.add_argument("source", type=path,
                   help="a das run directory, or a directory of PL 94-171 files (das's or the Census Bureau's)")
    t.add_argument("--format", choices=("pl94171", "parquet"), default="pl94171",
                   help="pl94171: the 2020 legacy summary files (4 per state); parquet: one file per table, PL layout")
    t.add_argument("--names", choices=("readable", "pl"), default="readable",
                   help="--format parquet's column names: readable, as in a release's tables/ (cenrace=White; a PL cell "
                        "das does not have by its PL label), or pl, the PL 94-171 field names (P0010003); see "
                        "docs/formats.md")
    t.add_argument("--out", type=path, required=True,
                   help="output directory, outside the source; a rerun replaces its own earlier tables, a directory "
                        "holding anything else is refused")
    t.set_defaults(func=_cmd_tables)

    _add_audit_privacy(sub)


def _add_audit_privacy(sub) -> None:
    """`das audit-privacy`: of the measurement, or (--release) of whole releases."""
    a = sub.add_parser("audit-privacy", help="empirical lower bound on epsilon from neighbouring datasets")
    a.add_argument("spec", type=path, help=spec_help() + ": its schema, strategy and levels are audited (no input is read)")
    a.add_argument("--trials", type=positive_int, default=None,
                   help="runs of the measurement per dataset (default: 20,000; at least 100), or of each release with "
                        "--release (default: 20); the report gives the largest bound the trials can show and the "
                        "trials that would reach the certificate (575 at the default budget), and says "
                        "'inconclusive' when they cannot show a violation")
    a.add_argument("--release", action="append", default=[], metavar="COMMAND",
                   help="audit whole releases of this command end to end instead of the measurement: `run`, or a "
                        "`das synth` mechanism (repeat for several); every public output is tested")
    a.add_argument("--rho", type=fraction, default=None, help="audit budget (default: 1, see docs/privacy.md)")
    a.add_argument("--delta", type=delta, default=None, help="audit delta (default: 1/100, see docs/privacy.md)")
    a.add_argument("--seed", type=nonnegative_int, default=None,
                   help="seeded noise, a reproducible audit (default: none, the operating system's CSPRNG)")
    a.add_argument("--json", action="store_true", help="JSON instead of text")
    a.add_argument("--out", type=path, default=None,
                   help="also write the report to this directory (audit.json, and audit.md: a short summary); "
                        "default: none, the report is printed only")
    add_overwrite(a, "an earlier audit", where="--out")
    a.set_defaults(func=_cmd_audit_privacy)


def _add_init(sub) -> None:
    """`das init`: a commented spec for your own inputs (docs/walkthrough.md)."""
    i = sub.add_parser("init", help="write a commented run spec for your own persons and units files (checked first)",
                       description="Read the persons and units files with das's validating reader (every problem is "
                                   "listed, and nothing is written, when das cannot release them), then write a run "
                                   "spec for them: schema, strategy, levels, tables and budget, commented with what "
                                   "the files hold. See docs/walkthrough.md.")
    i.add_argument("persons", type=path, help="persons file (Parquet or CSV; columns: docs/formats.md)")
    i.add_argument("units", type=path, help="units file (Parquet or CSV; columns: docs/formats.md)")
    i.add_argument("--out", type=path, required=True, help="the spec file to write (.toml; an existing file is refused)")
    i.add_argument("--name", default=None, help="the release's name (default: the --out file's name without .toml)")
    i.add_argument("--schema", choices=("pl94_persons", "dhc_persons"), default="pl94_persons",
                   help="pl94_persons: the PL 94-171 redistricting data; dhc_persons: also sex and single year of "
                        "age (needs QSEX and QAGE)")
    i.set_defaults(func=_cmd_init)


def _add_run(sub) -> None:
    """`das run`: its parser (the largest of the release commands)."""
    r = sub.add_parser("run", help="a whole release: measure, post-process, write MDF/tables/NMF, validate")
    r.add_argument("spec", type=path, nargs="?", help=spec_help() + " (default with --resume: the run's own)")
    r.add_argument("--out", type=path, default=None,
                   help="output directory (default: runs/NAME, NAME being the spec's name: its `name` key, else its "
                        "file name without .toml)")
    r.add_argument("--seed", type=nonnegative_int, default=None, help=SEED_HELP)
    r.add_argument("--workers", type=positive_int, default=os.cpu_count() or 1, help="parallel solver processes")
    add_overwrite(r, "the das run")
    add_budget(r)
    r.add_argument("--no-progress", action="store_true", help="no progress bars")
    r.add_argument("--resume", type=path, metavar="RUN_DIR", default=None,
                   help="continue an interrupted run from its stored noisy measurements and checkpoints "
                        "(never drawing noise again); SPEC defaults to the run's own (default: a new run)")
    r.add_argument("--engine", choices=("local", "dask"), default="local",
                   help="where tasks run: a local process pool, or Dask (pip install 'das[dask]')")
    r.add_argument("--scheduler", metavar="ADDRESS", default=None,
                   help="Dask scheduler address (tcp://host:8786); default: a local cluster of --workers processes")
    r.add_argument("--memory-gb", type=positive_float, default=None,
                   help="a partitioned run (inputs as one file per state) starts a state's task only while the "
                        "tasks in flight are estimated to fit this much memory with the driver and workers "
                        "(docs/scale.md); default: no limit")
    _add_signing_key(r)
    r.set_defaults(func=_cmd_run)


def _add_validate(sub) -> None:
    """`das validate`: its parser."""
    v = sub.add_parser("validate", help="independently check a release: a run directory or a published bundle")
    v.add_argument("run_dir", type=path, help="a das run directory (written by das run or das synth), or a bundle "
                                              "(das publish); the report says which, and refuses a bundle holding "
                                              "an operator file")
    v.add_argument("--inputs", type=path, nargs=2, metavar=("PERSONS", "UNITS"), default=None,
                   help="also compare the invariants with these confidential inputs (default: the run's "
                        "operator files, when present)")
    v.add_argument("--public-key", type=path, metavar="KEY", default=None,
                   help="the operator's published public key: also prove the release is theirs and unchanged (the "
                        "signature over manifest.json, then every digest); default: none, internal consistency only")
    v.add_argument("--reproduce", action="store_true",
                   help="also post-process the release's NMF again from its public files (das postprocess, into a "
                        "directory removed after) and say which outputs differ from the published ones, by content")
    v.add_argument("--workers", type=positive_int, default=os.cpu_count() or 1,
                   help="parallel solver processes of --reproduce")
    v.set_defaults(func=_cmd_validate)


def _add_postprocess(sub) -> None:
    """`das postprocess`: its parser."""
    pp = sub.add_parser("postprocess", help="a TopDown release's NMF post-processed again from its public files alone "
                                            "(a bundle, or an NMF release of das measure): MDF, tables, validated")
    pp.add_argument("bundle", type=path, help="a TopDown release: a published bundle or a run directory (only its "
                                              "public files are read: manifest, NMF, invariants.parquet, spine)")
    pp.add_argument("--out", type=path, required=True, help="the new release's (or estimate's) directory")
    pp.add_argument("--estimator", choices=("topdown", "wls", "nnls"), default="topdown",
                    help="topdown (default): a release; wls (unconstrained weighted least squares) or nnls (TopDown's "
                         "least squares without its rounding): an estimate directory, fractional, not a release")
    pp.add_argument("--settings", type=path, metavar="FILE", default=None,
                    help="a TOML file whose [postprocess] table (solver, rounding, passes, passes_by_level) replaces "
                         "the published spec's: TopDown with other passes (topdown and nnls; default: the published spec's)")
    pp.add_argument("--workers", type=positive_int, default=os.cpu_count() or 1, help="parallel solver processes")
    add_overwrite(pp, "the das release (an estimate is replaced without it)")
    pp.add_argument("--no-progress", action="store_true", help="no progress bars")
    _add_signing_key(pp)
    pp.set_defaults(func=_cmd_postprocess)


def _add_signing_key(parser) -> None:
    """--signing-key, as `das run` and `das measure` take it."""
    parser.add_argument("--signing-key", type=path, metavar="KEY", default=None,
                        help="sign the release with this Ed25519 private key (das keygen); default: a key of the "
                             "release's own, kept in its operator files (docs/outputs.md)")
