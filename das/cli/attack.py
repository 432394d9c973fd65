"""`das attack`: the reconstruction audit from the command line."""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from das.cli.args import nonnegative_int, path, positive_float, positive_int, share


def add_parsers(subparsers) -> argparse.ArgumentParser:
    a = subparsers.add_parser(
        "attack", help="reconstruction audit: RAP-Rank, baselines and integer programming against a release",
        description="Attack published tables (exact, or a `das run` release) and score the reconstructed "
                    "records against the confidential persons file.")
    a.add_argument("--truth", type=path, required=True, help="confidential persons file (Parquet/CSV), used only to score")
    a.add_argument("--published", type=path, required=True,
                   help="a `das run` output directory (its MDF gives the published tables), or 'exact' "
                        "(tables computed from --truth: no protection)")
    a.add_argument("--schema", type=path, default=None,
                   help="persons schema (default: the release's; with 'exact': dhc_persons)")
    a.add_argument("--tables", type=path, default=None,
                   help="attack workload spec, a name in specs/attack/ or a path (default: the schema's name; "
                        "dhc_sf1_2010: the 2010 SF1 tables of the RAP-Rank paper)")
    a.add_argument("--level", choices=("block", "tract"), default="block", help="geography level attacked")
    a.add_argument("--geounits", default="auto",
                   help="'auto' (across the size range) or comma-separated geocodes (15 digits per block, 11 per tract)")
    a.add_argument("--count", type=positive_int, default=10, help="geounits 'auto' picks")
    a.add_argument("--runs", type=positive_int, default=100, help="RAP runs per geounit")
    a.add_argument("--relaxed", type=positive_int, default=1000, help="K relaxed records per run")
    a.add_argument("--steps", type=positive_int, default=1000, help="Adam steps per run")
    a.add_argument("--batch", type=positive_int, default=128, help="queries per step")
    a.add_argument("--learning-rate", type=positive_float, default=0.1, help="Adam learning rate")
    a.add_argument("--min-confidence", type=share, default=0.0,
                   help="drop candidates sampled in fewer than this share of runs")
    a.add_argument("--multiset", action="store_true", help="score with multiplicities (record, j-th copy)")
    a.add_argument("--baselines", default="tract,county",
                   help="comma-separated reference scopes: tract, county, state, holdout ('' for none)")
    a.add_argument("--holdout", type=path, default=None,
                   help="persons file of a disjoint holdout population (default: none; needed by --baselines holdout)")
    a.add_argument("--ip-top", type=nonnegative_int, default=50, help="top candidates whose IP certainty is decided (0: no IP)")
    a.add_argument("--ip-max-persons", type=nonnegative_int, default=60, help="solution variability for blocks up to this size")
    a.add_argument("--workers", type=positive_int, default=os.cpu_count() or 1, help="parallel RAP runs")
    a.add_argument("--seed", type=nonnegative_int, default=0, help="seed of the attack's own randomness")
    a.add_argument("--out", type=path, required=True,
                   help="output directory, outside the release (the scores against --truth are confidential); a "
                        "directory holding anything but an earlier `das attack` output is refused")
    a.add_argument("--overwrite", action="store_true",
                   help="replace an earlier `das attack` output in --out (deleting only its own files)")
    a.set_defaults(func=_cmd_attack)
    return a


def _positive(name: str, value, minimum=1) -> None:
    from das.attack.data import AttackError

    if value < minimum:
        raise AttackError(f"--{name} {value}: expected at least {minimum}")


def _cmd_attack(args) -> int:
    import numpy as np

    from das import outdir
    from das.attack.audit import ATTACK, AuditOptions, auto_geounits, run_audit, write_outputs
    from das.attack.baselines import SCOPES
    from das.attack.data import AttackError, check_covers, read_persons, read_release, release_schema
    from das.attack.rap import RapConfig
    from das.attack.workload import load_attack_tables
    from das.io.microdata import InputError
    from das.schema import SpecError, load_schema
    from das.specfile import cut_long_words

    try:
        for name in ("runs", "relaxed", "steps", "batch", "workers", "count"):
            _positive(name, getattr(args, name))
        if not 0.0 <= args.min_confidence <= 1.0:
            raise AttackError(f"--min-confidence {args.min_confidence}: expected a share between 0 and 1")
        baselines = tuple(b.strip() for b in args.baselines.split(",") if b.strip())
        unknown = [b for b in baselines if b not in SCOPES]
        if unknown:
            raise AttackError(f"--baselines: unknown scope(s) {unknown}; expected some of {SCOPES}")
        if "holdout" in baselines and not args.holdout:
            raise AttackError("--baselines holdout needs --holdout PATH (a disjoint persons file)")
        inputs = [args.truth, args.holdout, None if args.published == "exact" else args.published]
        claim = outdir.check(Path(args.out), ATTACK, overwrite=args.overwrite, protected=inputs)
        if args.published == "exact":
            schema = load_schema(args.schema or "dhc_persons")
            source = "exact tables (no protection)"
        else:
            schema = release_schema(args.published)
            if args.schema and args.schema != schema.name:
                raise AttackError(f"--schema {args.schema}: the release {args.published} uses schema {schema.name}")
            source = f"release {args.published}"
        t0 = time.perf_counter()
        truth = read_persons(args.truth, schema)
        published = truth if args.published == "exact" else read_release(args.published, schema)
        check_covers(truth, published, truth_path=args.truth)  # a truth of another county scores 0: refused
        holdout = read_persons(args.holdout, schema) if args.holdout else None
        if args.geounits == "auto":
            geounits = auto_geounits(published, args.level, args.count, np.random.default_rng(args.seed))
        else:
            geounits = [g.strip() for g in args.geounits.split(",") if g.strip()]
            if not geounits:
                raise AttackError("--geounits: expected 'auto' or a comma-separated list of geocodes")
        options = AuditOptions(
            level=args.level, runs=args.runs, seed=args.seed, workers=args.workers,
            rap=RapConfig(n_relaxed=args.relaxed, steps=args.steps, batch_size=args.batch,
                          learning_rate=args.learning_rate),
            min_confidence=args.min_confidence, multiset=args.multiset, baselines=baselines,
            ip_top=args.ip_top, ip_max_persons=args.ip_max_persons, tables=args.tables)
        print(f"das attack: {args.level} attack on {source}, {len(geounits)} geounits, {args.runs} runs each",
              file=sys.stderr)
        load_attack_tables(options.tables or schema.name)  # a bad workload spec is refused before anything is written
        claim.start()  # its own earlier output deleted (--overwrite), its record written
        results = run_audit(truth, published, geounits, options, holdout=holdout)
        write_outputs(Path(args.out), results, published, options, source=source, seconds=time.perf_counter() - t0)
        claim.finish()
    except (AttackError, SpecError) as e:
        print(f"das attack: {cut_long_words(str(e))}", file=sys.stderr)
        return 2
    except InputError as e:
        print(f"das attack: input is invalid:\n{cut_long_words(str(e))}", file=sys.stderr)
        return 2
    print(Path(args.out, "summary.md").read_text())
    print(f"wrote {args.out}")
    return 0
