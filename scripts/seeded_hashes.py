"""Digests of a seeded release, to show that a change left its outputs unchanged.

    python scripts/seeded_hashes.py SPEC OUT_DIR [--seed N] [--mechanism NAME] [--content]

By default, SHA-256 of every file's bytes: the code version written into every Parquet file is the
git commit, which any change moves, so it is fixed to one label here; the manifest is hashed
without its timings (and the operator files, whose key is random by design, are left out). With
--content, what the files say instead (a new metadata key moves bytes, not content): each Parquet
file's rows and columns without its schema metadata (MDF records, table cells, NMF values and
variances), each other output's bytes, and the manifest's privacy certificates, published
invariants, levels, holds and mechanism details. --mechanism: a `das synth` release instead of
`das run`. Run it with the old tree first on PYTHONPATH (a `git worktree` of the earlier commit)
and diff the two listings.
"""

from __future__ import annotations

import hashlib
import importlib
import json
from pathlib import Path

import pyarrow.parquet as pq

from das.core.options import ExactParser

TIMINGS = ("timings_seconds", "seconds", "resumed_at", "tasks")  # tasks: the batches' timings


def _fix_version() -> None:
    for name in ("das.driver.pipeline", "das.pipeline", "das.run"):  # where code_version lived in earlier layouts
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
    """What each file says: Parquet rows and columns without schema metadata, the manifest's claims, other bytes."""
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
    parser = ExactParser(description=__doc__.splitlines()[0])
    parser.add_argument("spec")
    parser.add_argument("out")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--mechanism", default=None, help="a `das synth` mechanism instead of `das run`")
    parser.add_argument("--content", action="store_true", help="digest what the files say, not their bytes")
    args = parser.parse_args()
    out = Path(args.out)
    _fix_version()
    if args.mechanism:
        from das.mechanisms.release import synthesize

        synthesize(args.spec, args.mechanism, out, seed=args.seed, overwrite=True)
    else:
        from das.driver.run import run

        run(args.spec, out, seed=args.seed, workers=1, overwrite=True, progress=False)
    for relative, digest in (content(out) if args.content else hashes(out)).items():
        print(digest[:16], relative)


if __name__ == "__main__":
    main()
