"""scripts/bench references keeps its runs with the repository and rewrites a family's recorded table only when its
runs were made: RAP's rows alone leave MST's, AIM's and MWEM's file as it was (benchmarks/references.py)."""

import json

import numpy as np

import benchmarks.references as references


def _result(mechanism: str, implementation: str, seed: int, block: float) -> dict:
    return {"mechanism": mechanism, "implementation": implementation, "fixture": "vt_grand_isle", "rho": "1/4",
            "seed": seed, "status": "ok", "block_mae": block, "tract_detailed_mae": block / 10, "seconds": 5.0 + seed,
            "workload_mean": block / 100, "workload_max": 2 * block}


def test_a_family_is_recorded_only_when_its_runs_were_made(tmp_path, monkeypatch):
    monkeypatch.setattr(references, "ROOT", tmp_path)
    monkeypatch.setattr(references, "RECORDED", tmp_path)
    monkeypatch.setattr(references, "RESULTS", tmp_path / "references")
    kept = tmp_path / "references.md"
    kept.write_text("the MST, AIM and MWEM table as recorded before\n")
    results = [_result("rap", "das", s, 10.0 + s) for s in range(3)] + [_result("rap", "amazon_rap", s, 12.0)
                                                                        for s in range(3)]
    references.record(results, 60.0, {"rap"})
    assert kept.read_text() == "the MST, AIM and MWEM table as recorded before\n"
    text = (tmp_path / "references_rap.md").read_text()
    header, rule, *rows = [line for line in text.splitlines() if line.startswith("|")]
    assert header.count("RAP reference") == 5 and "Private-PGM" not in header and "SmartNoise" not in header
    assert "workload mean error: das" in header and "workload max error: das" in header
    assert rule.count("---") == 3 + 5 * 2
    grand_isle = next(r for r in rows if r.startswith("| rap | Grand Isle VT | 1/4 |"))
    assert "| 11.00 ± 0.58 (3) | 12.00 ± 0.00 (3) |" in grand_isle and "| 6 | 6 |" in grand_isle
    assert "| 0.110 ± 0.006 | 0.120 ± 0.000 | 22.00 ± 1.15 | 24.00 ± 0.00 |" in grand_isle
    assert all("| - | - |" in r for r in rows if "Perry" in r)  # no runs there yet

    references.record(results, 60.0, set())  # nothing ran: nothing rewritten
    assert (tmp_path / "references_rap.md").read_text() == text


def test_the_workload_errors_are_the_rap_workloads_on_the_release_against_the_truth():
    """Zero on the confidential counts themselves; one person moved to another cell of the same block is an error
    of 1 in the cells they left and entered (and 0 in the block's totals), in the largest and the mean."""
    import scipy.sparse as sp

    ctx = references.truth("vt_grand_isle")
    assert references.workload_errors(ctx, ctx.blocks) == {"workload_max": 0.0, "workload_mean": 0.0}
    moved = ctx.blocks.tolil(copy=True)
    block = int(np.flatnonzero(np.asarray(ctx.blocks.sum(axis=1)).ravel())[0])
    cell = int(ctx.blocks[block].indices[0])
    moved[block, cell] -= 1
    moved[block, (cell + 1) % ctx.blocks.shape[1]] += 1
    errors = references.workload_errors(ctx, sp.csr_matrix(moved))
    assert errors["workload_max"] == 1.0 and 0 < errors["workload_mean"] < 0.01



def test_only_the_named_mechanisms_tasks_run(monkeypatch):
    monkeypatch.setattr(references, "MECHANISMS", ("rap",))
    tasks = references.tasks()
    assert {t[1] for t in tasks} == {"rap"} and {t[2] for t in tasks} == {"das", "amazon_rap"}
    assert len(tasks) == len(references.FIXTURES) * 2 * len(references.RHOS) * references.SEEDS
    json.dumps(tasks)
