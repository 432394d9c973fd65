"""From two input files of your own to a validated release and its accuracy report (docs/walkthrough.md).

    python examples/own_data.py PERSONS UNITS [WORK_DIR]

Without arguments it uses the shipped tiny fixture. Steps: das.init_spec reads and checks the files and
writes a commented spec; das.run makes the release (seeded here: NOT private; leave the seed out to
release); das.metrics scores it against the inputs (confidential: it holds true counts); the report is
an HTML page with its figures.
"""

import sys
from pathlib import Path

import das

FIXTURE = Path(__file__).resolve().parents[1] / "geography_fixtures" / "tiny"
persons, units = (sys.argv[1], sys.argv[2]) if len(sys.argv) > 2 else (FIXTURE / "persons.csv", FIXTURE / "units.csv")
work = Path(sys.argv[3] if len(sys.argv) > 3 else "runs/example_own_data")
work.mkdir(parents=True, exist_ok=True)

spec = work / "my_release.toml"
if not spec.exists():
    das.init_spec(persons, units, out=spec)  # refused, with every problem listed, if das cannot release the files
print(f"spec: {spec}")
release = das.run(spec, out=work / "release", seed=1, workers=1, overwrite=True)
print(release.summary)
scores = das.metrics(release, out=work / "metrics")  # beside the release, never inside it
print(scores.metrics.query("query == 'total' and bin == 'all'")[["estimator", "level", "mae"]].round(2).to_string(index=False))
print(f"report: {scores.report()}")
