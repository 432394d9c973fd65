"""The reconstruction audit on exact tables and on a release, on the same blocks (docs/attack.md).

    python examples/attack_exact_vs_release.py [WORK_DIR]

A small attack of the tiny fixture (a few RAP runs per block, so it takes seconds): `geounits="auto"` picks the
blocks by their true sizes, so exact tables and the release are attacked on the same blocks, with the same schema.
Match-Rate is keyed by k, the number of top candidates asked for.
"""

import sys
from pathlib import Path

import das

FIXTURE = Path(__file__).resolve().parents[1] / "geography_fixtures" / "tiny"
work = Path(sys.argv[1] if len(sys.argv) > 1 else "runs/example_attack")
release = das.run("tiny", out=work / "release", seed=3, workers=1, overwrite=True, progress=False)
small = {"count": 3, "runs": 4, "relaxed": 60, "steps": 60, "ip_top": 5, "workers": 1, "overwrite": True}
exact = das.attack(truth=FIXTURE / "persons.csv", published="exact", out=work / "attack_exact", **small)
released = das.attack(truth=FIXTURE / "persons.csv", published=release.path, out=work / "attack_release", **small)
assert exact.geounits == released.geounits and exact.schema == released.schema
print(f"blocks attacked: {', '.join(exact.geounits)} (schema {exact.schema})")
for name, result in (("exact tables", exact), ("the release", released)):
    rates = result.match_rate["rap_rank"]
    print(f"{name}: RAP-Rank Match-Rate@1 {rates[1]:.2f}, @10 {rates[10]:.2f}; "
          f"baseline (rest of the county) @10 {result.match_rate['baseline_county'][10]:.2f}")
