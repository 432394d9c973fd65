"""The audit scenario: does a release push reconstruction down to what the baselines get without it?

On the DHC fixture county (Grand Isle VT): (a) RAP-Rank on exact tables, (b) RAP-Rank on the
tables of a `das run` release at a production-scale budget, (c) the baselines (rest of the
tract, rest of the county), on the same blocks chosen across the size range. Writes each
attack's outputs and `audit.md` / `audit.json` with Match-Rate@k side by side.

    python -m das.attack.scenario --out audit_output [--count 12] [--runs 20] [--release DIR]
"""

from __future__ import annotations

import json
import logging
import sys
import time
from pathlib import Path

import numpy as np

from das.attack.audit import REPORT_FRACTIONS, REPORT_K, AuditOptions, auto_geounits, run_audit, write_outputs
from das.attack.data import read_persons, read_release, release_schema
from das.attack.rap import RapConfig
from das.core.options import ExactParser
from das.core.progress import configure
from das.frame.rundir import RunDir
from das.model.levels import BLOCK, COUNTY, TRACT
from das.model.schema import specs_root
from das.privacy.certificate import delta_text, fraction_text

SPEC = "vt_grand_isle_dhc"


logger = logging.getLogger(__name__)


def comparison_markdown(rows: dict[str, dict], blocks: int, runs: int, release_note: str) -> str:
    """Match-Rate@k (pooled over the blocks) of each scenario arm, one row per arm."""
    lines = [f"Audit scenario: {blocks} Grand Isle blocks across the size range, {runs} RAP runs each "
             f"(K = 1000, 1000 steps); {release_note}.", "",
             "| attack | " + " | ".join(f"k/u={f}" for f in REPORT_FRACTIONS) + " | "
             + " | ".join(f"k={k}" for k in REPORT_K) + " |",
             "|---" * (1 + len(REPORT_FRACTIONS) + len(REPORT_K)) + "|"]
    for label, rates in rows.items():
        cells = [rates["k_over_u"][str(f)] for f in REPORT_FRACTIONS] + [rates["k"][str(k)] for k in REPORT_K]
        lines.append(f"| {label} | " + " | ".join("-" if c is None else f"{c:.3f}" for c in cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = ExactParser(prog="python -m das.attack.scenario", description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--count", type=int, default=10, help="blocks, chosen across the size range")
    p.add_argument("--runs", type=int, default=20, help="RAP runs per block")
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--release", default=None, help="an existing release of vt_grand_isle_dhc (default: run one)")
    p.add_argument("--seed", type=int, default=0, help="the attack's seed (the release uses the OS CSPRNG)")
    args = p.parse_args(argv)
    configure()  # messages on stderr, a progress bar on a terminal
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    release_dir = Path(args.release) if args.release else out / "release"
    if not args.release:
        from das.driver.run import run

        logger.info(f"release: das run {SPEC} -> {release_dir}")
        run(specs_root() / "runs" / f"{SPEC}.toml", release_dir, workers=args.workers, overwrite=True,
            progress=False)
    schema = release_schema(release_dir)
    manifest = RunDir(release_dir).read_complete()
    cert = manifest.certificate("persons")
    release_note = (f"release: `das run {manifest.spec_name}`, persons rho = {fraction_text(cert.rho)} "
                    f"(eps = {cert.eps} at delta = {delta_text(cert.delta)}), "
                    f"{'OS CSPRNG' if manifest.private else 'seeded, NOT private'}")
    from das.frame.bundle import input_paths

    persons = Path(input_paths(release_dir)["persons"])  # the operator's record: scripts/audit is the operator
    truth = read_persons(persons, schema)
    release = read_release(release_dir, schema)
    blocks = auto_geounits(truth, BLOCK, args.count, np.random.default_rng(args.seed))
    options = AuditOptions(level=BLOCK, runs=args.runs, seed=args.seed, workers=args.workers,
                           rap=RapConfig(steps=args.steps), baselines=(TRACT, COUNTY))
    summaries = {}
    for name, published, source in (("exact", truth, "exact tables (no protection)"),
                                    ("release", release, f"release {release_dir}")):
        logger.info(f"attack on {source}: {len(blocks)} blocks")
        start = time.perf_counter()
        results = run_audit(truth, published, blocks, options)
        summaries[name] = write_outputs(out / f"attack_{name}", results, published, options, source=source,
                                        seconds=time.perf_counter() - start)

    rows = {
        "(a) RAP-Rank, exact tables": summaries["exact"]["match_rate"]["rap_rank"],
        "(b) RAP-Rank, release": summaries["release"]["match_rate"]["rap_rank"],
        "(c) baseline: rest of tract": summaries["exact"]["match_rate"]["baseline_tract"],
        "(c) baseline: rest of county": summaries["exact"]["match_rate"]["baseline_county"],
    }
    text = comparison_markdown(rows, len(blocks), args.runs, release_note)
    (out / "audit.md").write_text(text)
    (out / "audit.json").write_text(json.dumps({"blocks": blocks, "runs": args.runs, "release": str(release_dir),
                                                "release_note": release_note, "match_rate": rows,
                                                "seconds": round(time.perf_counter() - t0, 1)}, indent=2) + "\n")
    print(text)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
