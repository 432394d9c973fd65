"""The release bundle apart from the operator's files: nothing from the inputs is published (what
--overwrite may delete is das.outdir's: tests/test_outdir.py)."""

import os
import stat

from das import bundle
from das.rundir import RunDir


def test_the_published_spec_has_no_input_path():
    text = '[input]\npersons = "/secret/persons.parquet"\nunits = "u.csv"\n\n[persons]\nschema = "pl94_persons"\n'
    public = bundle.public_spec_text(text)
    assert "/secret" not in public and "u.csv" not in public and public.count(bundle.REDACTED) == 2
    assert 'schema = "pl94_persons"' in public


def test_keyed_fingerprints_match_only_the_same_bytes_under_the_same_key(tmp_path):
    path = tmp_path / "persons.csv"
    path.write_bytes(b"EPNUM\n1\n")
    key, other = bundle.new_key(), bundle.new_key()
    first = bundle.keyed_fingerprint(key, path)
    assert bundle.keyed_fingerprint(key, path) == first
    assert bundle.keyed_fingerprint(other, path) != first  # a published digest could confirm a guess; a keyed one cannot
    path.write_bytes(b"EPNUM\n2\n")
    assert bundle.keyed_fingerprint(key, path) != first
    assert bundle.keyed_fingerprint(key, tmp_path / "absent.csv") == {"": "missing"}


def test_the_key_is_readable_by_its_owner_only(tmp_path):
    bundle.write_operator(tmp_path, {"spec_path": "s.toml", "fingerprint": {}}, bundle.new_key())
    mode = stat.S_IMODE(os.stat(RunDir(tmp_path).key_file).st_mode)
    assert mode == 0o600
    record, key = bundle.read_operator(tmp_path)
    assert record["spec_path"] == "s.toml" and len(key) == 32
