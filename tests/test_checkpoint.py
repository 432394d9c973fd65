"""Checkpoints: a solved level or batch round-trips exactly, its events as plain records; torn or foreign
batches are never used."""

import numpy as np
import scipy.sparse as sp

from das.frame.checkpoint import Checkpoints, load_solved, save_solved
from das.topdown.problem import FailsafeEvent


def test_a_solved_level_round_trips_with_its_events(tmp_path):
    solved = sp.csr_matrix(np.array([[0, 3, 0], [2, 0, 1]], dtype=np.int64))
    event = FailsafeEvent("44001", "l2", "parent sums", 1.5, "widened")
    save_solved(tmp_path / "x.npz", solved, [event.record()], {"parents": 2})
    back, records, meta = load_solved(tmp_path / "x.npz")
    assert (back != solved).nnz == 0 and back.dtype == np.int64
    assert records == [event.record()] and meta["parents"] == 2
    assert [FailsafeEvent.of_record(r) for r in records] == [event]  # the engine's events, as they were


def test_only_complete_batches_of_the_same_batching_are_reused(tmp_path):
    ck = Checkpoints(tmp_path, "persons")
    one = sp.csr_matrix(np.ones((1, 2), dtype=np.int64))
    save_solved(ck.batch_path("tract", 0), one, [], {"batch": 0, "batch_key": "8/2/4"})
    save_solved(ck.batch_path("tract", 1), one, [], {"batch": 1, "batch_key": "16/2/4"})  # another batching
    torn = ck.parts_dir("tract") / "b0000002.npz.partial"
    torn.write_bytes(b"cut")
    found = ck.load_batches("tract", 3, "8/2/4")
    assert sorted(found) == [0] and not torn.exists()


def test_the_deepest_complete_level_needs_all_its_ancestors(tmp_path):
    ck = Checkpoints(tmp_path, "units")
    levels = ("nation", "state", "county")
    assert ck.last_complete(levels) == -1
    for level in ("nation", "county"):
        ck.save_level(level, sp.csr_matrix((1, 2), dtype=np.int64), [], {"parents": 1, "seconds": 0.0})
    assert ck.last_complete(levels) == 0  # county without state does not count


def test_the_checkpoint_store_imports_no_stage_above_it():
    """Checkpoints store plain records; what an event is belongs to the engine (das.topdown)."""
    import ast

    import das.frame.checkpoint

    tree = ast.parse(open(das.frame.checkpoint.__file__).read())
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert {m for m in imported if m.startswith("das")} == {"das.core"}  # das.core.atomic only
