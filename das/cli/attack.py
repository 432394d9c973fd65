"""`das attack`: the reconstruction audit from the command line."""

from __future__ import annotations

import argparse
import os
import sys

from das.cli.args import add_overwrite, nonnegative_int, path, positive_float, positive_int, share, shipped
from das.model.levels import BLOCK, TRACT


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
                   help=f"persons schema: one of {', '.join(n for n in shipped('schemas') if n.endswith('_persons'))} or "
                        "a .toml path (default: the release's; with 'exact': pl94_persons, the shipped releases' schema)")
    a.add_argument("--tables", type=path, default=None,
                   help=f"attack workload: one of {', '.join(shipped('attack'))} or a .toml path (default: the "
                        "schema's name; dhc_sf1_2010: the 2010 SF1 tables of the RAP-Rank paper)")
    a.add_argument("--level", choices=(BLOCK, TRACT), default=BLOCK, help="geography level attacked")
    a.add_argument("--geounits", default="auto",
                   help="'auto' (across the range of true sizes: the same geounits for exact tables and for a release "
                        "of the same truth) or comma-separated geocodes (15 digits per block, 11 per tract)")
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
    add_overwrite(a, "an earlier `das attack` output", where="--out")
    a.set_defaults(func=_cmd_attack)
    return a


def _cmd_attack(args) -> int:
    import das
    from das.attack.command import AttackConfig
    from das.attack.data import AttackError
    from das.core.errors import InputError, SpecError
    from das.model.specfile import cut_long_words

    flags = {name: getattr(args, name) for name in AttackConfig.__dataclass_fields__}
    flags["baselines"] = tuple(b.strip() for b in args.baselines.split(",") if b.strip())
    try:
        result = das.attack(AttackConfig(**flags))
    except (AttackError, SpecError) as e:
        print(f"das attack: {cut_long_words(str(e))}", file=sys.stderr)
        return 2
    except InputError as e:
        print(f"das attack: input is invalid:\n{cut_long_words(str(e))}", file=sys.stderr)
        return 2
    print(result.markdown)
    print(f"wrote {args.out}")
    return 0
