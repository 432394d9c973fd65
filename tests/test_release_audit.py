"""The empirical audit of whole releases (das.attack.release_audit): its neighbours and statistics, and the
planted defects it must catch end to end: a truth-derived count in a public field, a halved variance, a query
measured twice but charged once, a mechanism spending rho x 1.5 (issue 23)."""

import json
from fractions import Fraction

import numpy as np
import pandas as pd
import pytest
from conftest import cli_refused

import das.topdown.measure
from das.attack import distinguish as st
from das.attack import neighbours as nb
from das.attack import release_audit as ra
from das.attack.detection import detection_limit
from das.frame.records import Counts
from das.mechanisms import MECHANISMS

SPEC = "tiny"


def audit(command: str, trials: int, kinds: tuple[str, ...], **settings) -> dict:
    return ra.audit_release(SPEC, ra.AuditSettings(command, trials, kinds=kinds, seed=11, **settings))


def pair(report: dict, kind: str) -> dict:
    return next(p for p in report["pairs"] if p["neighbours"] == kind)


# ---------------------------------------------------------------------------------------------
# Neighbours and statistics (no release run)


def test_covered_neighbours_keep_every_invariant_and_the_others_change_a_state_population():
    persons, units = nb.base_records()
    assert persons["TABBLKST"].nunique() == 1 and set(nb._geocode(units)) == set(nb.BLOCKS.values())
    for kind in nb.NEIGHBOURS:
        other = nb.neighbour(persons, kind)
        changed = (other.reindex(persons.index) != persons).any(axis=1).sum() if len(other) == len(persons) else None
        if kind in nb.COVERED:
            assert len(other) == len(persons) and changed == 1, kind  # one record changed, the total kept
            assert (other["RTYPE"] == persons["RTYPE"]).all()  # a household person stays one: facilities kept
            assert set(nb._geocode(other)) <= set(nb._geocode(units))  # into a block with housing units
        else:
            assert abs(len(other) - len(persons)) == 1, kind  # the state population changes: not covered
    moved = nb.neighbour(persons, "moved across")
    assert (nb._geocode(moved) == nb.BLOCKS["across"]).sum() == (nb._geocode(persons) == nb.BLOCKS["across"]).sum() + 1


def test_a_feature_that_always_differs_is_deterministic_and_reaches_the_detection_limit():
    rng = np.random.default_rng(0)
    n = 40
    d = np.column_stack([rng.normal(0, 1, n), np.zeros(n)])
    p = np.column_stack([rng.normal(0, 1, n), np.ones(n)])
    found = st.bound(d, p, 0.01, 0.05)
    assert found["column"] == 1 and found["eps"] == detection_limit(n, 0.01, 0.05)  # the very same statistic
    assert detection_limit(n, 0.01, 0.05) < detection_limit(10 * n, 0.01, 0.05)  # more trials, more reachable
    noise = st.bound(d[:, :1], p[:, :1], 0.01, 0.05)
    assert noise["eps"] < 1.0  # two samples of one distribution: no evidence
    rows_d = [{"manifest:x": 1, "manifest:seed": i, "nmf:a": 3} for i in range(3)]
    rows_p = [{"manifest:x": 2, "manifest:seed": 10 + i, "nmf:a": 4} for i in range(3)]
    assert st.deterministic(rows_d, rows_p) == (["manifest:x"], ["nmf:a"])
    assert st.deterministic(rows_d[:1], rows_p[:1]) == ([], [])  # one trial each shows nothing


def test_fields_fixed_for_covered_neighbours_are_judged_and_private_selections_by_their_bound():
    manifest = {"kind": "das run", "counts": {"persons": 3, "blocks": 2, "first_block": 1},
                "mechanism": {"name": "mst", "details": {"trees": {"44003000300": [[1, 2]]}, "level": "tract"}}}
    assert st.fixed("manifest:kind", manifest) and st.fixed("manifest:counts.first_block", manifest)  # undeclared
    assert st.fixed("manifest:mechanism.details.level", manifest)  # a parameter
    assert not st.fixed("manifest:mechanism.details.trees.44003000300[0][1]", manifest)  # the exponential mechanism's
    assert not st.fixed("manifest:outputs.mdf_persons.parquet", {"outputs": {"mdf_persons.parquet": "ab"}})  # noisy
    assert st.fixed("parquet:mdf_persons.parquet:row_groups", manifest) and st.fixed("files", manifest)


def test_trial_seeds_are_all_different_and_say_nothing_of_the_dataset():
    base, d, others = ra.seeds_of(ra.AuditSettings("flat", 30, kinds=("added", "recoded"), seed=5))
    every = d + [s for seeds in others for s in seeds]
    assert base == 5 and len(set(every)) == len(every) == 90
    assert 0.2 < np.mean(np.array(d)[:, None] < np.array(others[0])[None, :]) < 0.8  # interleaved, not in order
    names, _ = st.feature_matrix([{"manifest:seed": s, "manifest:randomness": f"seeded (seed {s})", "x": s % 3}
                                  for s in d])
    assert names == ["x"]


def test_the_noise_check_flags_a_query_measured_with_less_noise_than_certified():
    rng = np.random.default_rng(1)
    truth = np.zeros((50, 100), dtype=np.int64)

    def side(variance_drawn: float) -> ra.Side:
        answers = [{("persons", "block", "detailed"): np.rint(rng.normal(0, np.sqrt(variance_drawn), truth.shape))}
                   for _ in range(2)]
        return ra.Side([], answers, {("persons", "block", "detailed"): truth},
                       {("persons", "block", "detailed"): Fraction(9)}, None)

    assert all(c["ok"] for c in ra.noise_checks([side(9.0)], 0.05))
    (check,) = ra.noise_checks([side(6.0)], 0.05)  # rho x 1.5
    assert not check["ok"] and check["rho_lower_bound"] > check["certified_rho"]
    assert st.discrete_gaussian_variance(100.0) == pytest.approx(100.0) and st.discrete_gaussian_variance(0.1) < 0.1


# ---------------------------------------------------------------------------------------------
# Whole releases, end to end


def test_a_correct_synthetic_release_passes(tmp_path):
    report = audit("flat", 3, ("moved within", "recoded"))
    assert report["ok"], ra.render(report)
    for p in report["pairs"]:
        assert p["deterministic"] == [] and all(b["eps_lower_bound"] <= b["eps_certified"] for b in p["bounds"])


@pytest.fixture
def truth_in_the_manifest(monkeypatch):
    """A truth-derived count in a public field: the persons of the first block, read from the inputs."""
    import das.driver.states

    captured = {}
    original = das.driver.states.read_partition

    def read_partition(*args, **kwargs):
        partition = original(*args, **kwargs)
        captured["first_block"] = int(partition.confidential.histograms["persons"][0].sum())
        return partition

    monkeypatch.setattr(das.driver.states, "read_partition", read_partition)
    monkeypatch.setattr(Counts, "to_dict", lambda self: {"persons": self.persons, "blocks": self.blocks,
                                                         "first_block": captured["first_block"]})


def test_a_truth_derived_count_in_the_manifest_is_caught(truth_in_the_manifest):
    report = audit("run", 2, ("moved within",))
    found = pair(report, "moved within")
    assert not report["ok"] and "manifest:counts.first_block" in found["deterministic"]
    assert "deterministic" in found["verdict"]


@pytest.mark.parametrize("name", [m for m, mech in MECHANISMS.items() if mech.extra is None])
def test_a_truth_derived_detail_of_every_mechanism_is_caught(monkeypatch, name):
    """A mechanism publishing a count of the confidential data as a detail, even declared as a parameter."""
    from dataclasses import replace

    mech = MECHANISMS[name]

    def leaking(data):
        result = mech.run(data)
        return replace(result, details={**result.details, "nonzero_bins": int(data.histograms.nnz)})

    monkeypatch.setitem(MECHANISMS, name, replace(mech, run=leaking,
                                                  details={**mech.details, "nonzero_bins": "parameter: (a lie)"}))
    report = audit(name, 2, ("moved within",))
    assert not report["ok"] and "manifest:mechanism.details.nonzero_bins" in pair(report, "moved within")["deterministic"]


def halved_variance(noisy):
    return lambda truth, variance, rng: noisy(truth, variance / 2, rng)


def rho_times_one_and_a_half(noisy):
    return lambda truth, variance, rng: noisy(truth, variance * Fraction(2, 3), rng)


def measured_twice(noisy):
    """Every query measured twice, charged once: the NMF holds the mean of the two draws."""
    return lambda truth, variance, rng: np.rint((noisy(truth, variance, rng) + noisy(truth, variance, rng)) / 2).astype(
        np.int64)


@pytest.mark.parametrize("plant", [halved_variance, measured_twice, rho_times_one_and_a_half])
def test_less_noise_than_certified_is_caught(monkeypatch, plant):
    monkeypatch.setattr(das.topdown.measure, "noisy_answers", plant(das.topdown.measure.noisy_answers))
    report = audit("run", 2, ())
    bad = [c for c in report["noise"] if not c["ok"]]
    assert not report["ok"] and any((c["level"], c["query"]) == ("block", "detailed") for c in bad), ra.render(report)
    assert sum(c["answers"] for c in bad) > sum(c["answers"] for c in report["noise"]) / 2  # most of the NMF
    assert "LESS NOISE THAN CERTIFIED" in ra.render(report)


@pytest.mark.slow  # ~20 s: six TopDown releases
def test_a_correct_topdown_release_passes():
    report = audit("run", 2, ("moved across", "recoded", "added"))
    assert report["ok"], ra.render(report)
    assert all(c["ok"] for c in report["noise"])
    added = pair(report, "added")  # not covered: it changes the state population, published exactly
    assert not added["covered"] and "manifest:invariants.total_population.state.44" in added["deterministic"]


def test_the_command_line_audits_whole_releases(capsys, tmp_path):
    from das.cli import main

    assert main(["audit-privacy", SPEC, "--release", "flat", "--trials", "2", "--seed", "3",
                 "--out", str(tmp_path / "audit")]) == 0
    printed = capsys.readouterr().out
    assert "whole-release audit of `flat`" in printed and "detection limit" in printed and "trials needed" in printed
    report = json.loads((tmp_path / "audit" / "audit.json").read_text())
    assert report["ok"] and report["releases"][0]["command"] == "flat"
    # 2 trials can show no bound at all: the verdict says so, and never "within the certificate"
    sight = report["releases"][0]["detection"]
    assert sight["detection_limit_eps"] == detection_limit(2, 0.01, 0.05) < sight["eps_certified"] == 4.3404
    assert sight["trials_needed"] == 575 and not sight["conclusive"]
    verdict = "inconclusive: at 2 trials the largest bound this audit can show is 0.000 < certificate eps 4.3404"
    assert verdict in printed and "575 trials needed" in printed and "within the certificate" not in printed
    assert report["releases"][0]["verdict"].startswith("inconclusive") and verdict in report["verdict"]
    for p in report["releases"][0]["pairs"]:
        assert p["verdict"].startswith("inconclusive" if p["covered"] else "not covered by the guarantee, not judged")
        assert not p["conclusive"] and p["violations"] == []
        assert all(b["detection_limit_eps"] == 0.0 and b["trials_needed"] > 2 for b in p["bounds"])
    summary = (tmp_path / "audit" / "audit.md").read_text()
    assert verdict in summary and "within the certificate" not in summary
    assert "Traceback" not in cli_refused(["audit-privacy", SPEC, "--release", "gan", "--trials", "2"], capsys)


def test_neighbour_files_read_back_as_the_records_written(tmp_path):
    persons, units = nb.base_records()
    data = nb.write_dataset(tmp_path / "d", nb.FIXTURE.parents[1] / "specs/runs/tiny.toml", nb.neighbour(persons, "recoded"),
                            units, rho=Fraction(1, 2), delta=Fraction(1, 100))
    back = pd.read_csv(tmp_path / "d" / "persons.csv", dtype=str)
    assert back.equals(data.persons.reset_index(drop=True))
    assert 'rho = "1/2"' in data.spec.read_text() and 'delta = "1/100"' in data.spec.read_text()
