"""SHA-256 of every file of a seeded `das run`, to show that a change left the outputs byte-identical.

    python scripts/seeded_hashes.py SPEC OUT_DIR [--seed N]

The code version written into every Parquet file is the git commit, which any change moves, so
it is fixed to one label here; the manifest is hashed without its timings (and the operator
files, whose key is random by design, are left out). Run it with the old tree first on
PYTHONPATH (e.g. a `git worktree` of the earlier commit) and diff the two listings.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import json
from pathlib import Path

TIMINGS = ("timings_seconds", "seconds", "resumed_at", "tasks")  # tasks: the batches' timings


def _fix_version() -> None:
    for name in ("das.run", "das.pipeline"):  # code_version lived in das.run before das.pipeline existed
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        if hasattr(module, "code_version"):
            module.code_version = lambda: "seeded-hashes"


def _scrub(value):
    if isinstance(value, dict):
        return {k: _scrub(v) for k, v in value.items() if k not in TIMINGS}
    if isinstance(value, list):
        return [_scrub(v) for v in value]
    return value


def hashes(out: Path) -> dict[str, str]:
    found = {}
    for path in sorted(out.rglob("*")):
        relative = path.relative_to(out).as_posix()
        if not path.is_file() or relative.startswith("operator/"):
            continue
        data = path.read_bytes()
        if path.name == "manifest.json":
            data = json.dumps(_scrub(json.loads(data)), sort_keys=True).encode()
        found[relative] = hashlib.sha256(data).hexdigest()
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("spec")
    parser.add_argument("out")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    _fix_version()
    from das.run import run

    run(args.spec, args.out, seed=args.seed, workers=1, overwrite=True, progress=False)
    for relative, digest in hashes(Path(args.out)).items():
        print(digest[:16], relative)


if __name__ == "__main__":
    main()
