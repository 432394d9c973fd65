"""`das synth SPEC --mechanism NAME --out DIR`: one private synthetic persons release (das/mechanisms)."""

from __future__ import annotations

import argparse
import sys

from das.cli.args import SEED_HELP, add_budget, add_overwrite, nonnegative_int, path, spec_help
from das.mechanisms import registry


def add_parsers(subparsers) -> argparse.ArgumentParser:
    s = subparsers.add_parser(
        "synth", help="a private synthetic persons release by another mechanism family (flat, mwem, ...)",
        description="Run one synthetic-data mechanism on a run spec's persons input, with das's exact accountant, "
                    "and write its release (MDF, tables, manifest with the certificate) like `das run` does. "
                    "See docs/mechanisms.md.")
    s.add_argument("spec", type=path, help=spec_help())
    s.add_argument("--mechanism", required=True, choices=tuple(registry.ENTRIES),
                   help="which mechanism (docs/mechanisms.md); mst and aim need pip install 'das[mbi]'")
    s.add_argument("--out", type=path, required=True, help="output directory")
    s.add_argument("--seed", type=nonnegative_int, default=None, help=SEED_HELP)
    add_budget(s)
    add_overwrite(s, "the das release")
    s.add_argument("--signing-key", metavar="KEY", default=None,
                   help="sign the release with this Ed25519 private key (das keygen); default: a key of the "
                        "release's own, kept in its operator files (docs/outputs.md)")
    s.set_defaults(func=_cmd_synth)
    return s


def _cmd_synth(args) -> int:
    import das
    from das.frame.bundle import read_process
    from das.frame.lifecycle import NOT_PRIVATE
    from das.mechanisms import MechanismError
    from das.model.specfile import cut_long_words
    from das.privacy.certificate import delta_text, fraction_text

    try:
        release = das.synth(args.spec, mechanism=args.mechanism, out=args.out, seed=args.seed, overwrite=args.overwrite,
                            allow_large_rho=args.allow_large_rho, rho=args.rho, eps=args.eps, delta=args.delta,
                            signing_key=args.signing_key)
    except MechanismError as e:
        print(f"das synth: {cut_long_words(str(e))}", file=sys.stderr)
        return 2
    out, manifest = release.path, release.manifest
    cert = manifest.certificate("persons")
    print(f"das synth {args.mechanism} {manifest.spec_name}: {manifest.counts.persons:,} persons in "
          f"{manifest.counts.blocks:,} blocks")
    rho = (f"rho = {fraction_text(cert.rho)} ({float(cert.rho):.4f})" if cert.rho is not None else
           f"(eps, delta)-DP directly, no rho spent (budget rho = {fraction_text(cert.budget)})")
    print(f"privacy: {rho}, eps = {cert.eps} at delta = {delta_text(cert.delta)}; randomness: {manifest.randomness}")
    timings = read_process(out).get("timings_seconds") or {}  # the operator's record: never in the manifest
    print("time: " + ", ".join(f"{k} {v:.1f}s" for k, v in timings.items()))
    print(f"validation: {'PASSED' if manifest.validation.valid else 'FAILED'} ({len(manifest.validation.checks)} checks)")
    if not manifest.private:
        print("NOTE: " + NOT_PRIVATE)
    print(f"wrote {out}")
    return 0
