"""Digests of a seeded release's *content*, to show that a change left what a release says unchanged.

    python scripts/release_content.py SPEC OUT_DIR [--seed N] [--mechanism NAME]

Where scripts/seeded_hashes.py hashes bytes (any new metadata key moves them), this hashes what
the files say: each Parquet file's rows and columns without its schema metadata (MDF records,
table cells, NMF values and variances), each other output's bytes, and the manifest's privacy
certificates, published invariants, levels, holds and mechanism details. Run it with the old tree
first on PYTHONPATH (a `git worktree` of the earlier commit) and diff the two listings.
"""

from __future__ import annotations

import argparse
import hashlib
import json
from pathlib import Path

import pyarrow.parquet as pq

MANIFEST_FIELDS = ("levels", "privacy", "invariants", "holds", "counts", "failsafe_events")


def _table_digest(path: Path) -> str:
    table = pq.read_table(path).replace_schema_metadata(None)
    digest = hashlib.sha256(",".join(table.column_names).encode())
    for name in table.column_names:
        column = table[name].combine_chunks()
        if hasattr(column, "dictionary_decode"):
            column = column.dictionary_decode()
        digest.update(name.encode())
        digest.update(repr(column.to_pylist()).encode())
    return digest.hexdigest()


def _manifest_parts(path: Path) -> dict[str, str]:
    data = json.loads(path.read_text())
    parts = {f"manifest:{k}": data.get(k) for k in MANIFEST_FIELDS}
    details = (data.get("mechanism") or {}).get("details")
    parts["manifest:mechanism.details"] = details
    return {k: hashlib.sha256(json.dumps(v, sort_keys=True, default=str).encode()).hexdigest()
            for k, v in parts.items()}


def content(out: Path) -> dict[str, str]:
    found: dict[str, str] = {}
    for path in sorted(out.rglob("*")):
        relative = path.relative_to(out).as_posix()
        if not path.is_file() or relative.split("/")[0] in ("operator", "checkpoints"):
            continue
        if path.name == "manifest.json":
            found.update(_manifest_parts(path))
        elif path.suffix == ".parquet":
            found[relative] = _table_digest(path)
        else:
            found[relative] = hashlib.sha256(path.read_bytes()).hexdigest()
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("spec")
    parser.add_argument("out")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--mechanism", default=None, help="a `das synth` mechanism instead of `das run`")
    args = parser.parse_args()
    out = Path(args.out)
    if args.mechanism:
        from das.mechanisms.release import synthesize

        synthesize(args.spec, args.mechanism, out, seed=args.seed, overwrite=True)
    else:
        from das.run import run

        run(args.spec, out, seed=args.seed, workers=1, overwrite=True, progress=False)
    for relative, digest in content(out).items():
        print(digest[:16], relative)


if __name__ == "__main__":
    main()
