"""The empirical audit of whole releases (das/attack/release_audit.py): bound found vs certificate vs detectable.

Each release command (`das run`, each `das synth` mechanism) runs end to end on neighbouring datasets made from
a handful of blocks of the tiny fixture, at rho = 1 and delta = 1/100 (bounds also at 1/20 and 1/10). For each
covered pair (a record moved within its block group, moved to another county, recoded) and each delta: the
largest eps lower bound found over every public feature, the certificate's eps, and the largest bound the
trials could show at all. Then the planted defects, each of which must be caught: a truth-derived count in a
public field (`das run`'s manifest; every mechanism's details), a halved variance, every query measured twice
but charged once, rho x 1.5 (TopDown's NMF noise against its certified variance).
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import replace
from fractions import Fraction

from benchmarks._harness import Bench

COVERED = ("moved within", "moved across", "recoded")


def _audit(command: str, trials: int, kinds: tuple[str, ...], seed: int = 2026) -> dict:
    from das.attack.release_audit import AuditSettings, audit_release

    return audit_release("tiny", AuditSettings(command, trials, kinds=kinds, seed=seed))


def _bounds(report: dict, tag: str) -> dict[str, float]:
    """Per pair and delta: the bound found, the certified eps, the detectable limit; and the verdict."""
    figures: dict[str, float] = {}
    for pair in report["pairs"]:
        name = pair["neighbours"].replace(" ", "_")
        for b in pair["bounds"]:
            d = b["delta"].replace("1/", "d")
            figures[f"{tag}{name}_{d}_bound"] = b["eps_lower_bound"]
            figures[f"{tag}{name}_{d}_certified"] = b["eps_certified"]
            figures[f"{tag}{name}_{d}_detectable"] = b["detection_limit_eps"]
        figures[f"{tag}{name}_deterministic_fields"] = float(len(pair["deterministic"]))
    figures[f"{tag}ok"] = float(report["ok"])
    return figures


def topdown() -> dict:
    """`das run` (TopDown, tiny's strategy) with 24 trials per dataset: the covered pairs and `added`."""
    t0 = time.perf_counter()
    report = _audit("run", 24, (*COVERED, "added"))
    figures = _bounds(report, "")
    figures["nmf_queries_checked"] = float(len(report["noise"]))
    figures["nmf_queries_less_noise"] = float(sum(not c["ok"] for c in report["noise"]))
    figures["seconds"] = time.perf_counter() - t0
    return figures


def synthetic() -> dict:
    """Each mechanism without optional extras, 24 trials per dataset, on the covered pairs."""
    from das.mechanisms import MECHANISMS

    t0 = time.perf_counter()
    figures: dict[str, float] = {}
    for name, mech in MECHANISMS.items():
        if mech.extra is None:
            figures.update(_bounds(_audit(name, 24, COVERED), f"{name}_"))
    figures["ok"] = float(all(v for k, v in figures.items() if k.endswith("_ok")))
    figures["seconds"] = time.perf_counter() - t0
    return figures


def mbi() -> dict:
    """mst and aim (Private-PGM: about a minute a release), 2 trials per dataset on one covered pair."""
    from das.mechanisms import MECHANISMS

    t0 = time.perf_counter()
    figures: dict[str, float] = {}
    for name, mech in MECHANISMS.items():
        if mech.extra is not None and mech.available():
            figures.update(_bounds(_audit(name, 2, ("moved within",)), f"{name}_"))
    figures["seconds"] = time.perf_counter() - t0
    return figures


@contextmanager
def _patched(owner, name: str, value):
    """owner.name (or owner[name], a dict's item) replaced while the audit runs."""
    item = isinstance(owner, dict)
    original = owner[name] if item else getattr(owner, name)
    owner.__setitem__(name, value) if item else setattr(owner, name, value)
    try:
        yield
    finally:
        owner.__setitem__(name, original) if item else setattr(owner, name, original)


def _truth_in_manifest():
    """`das run` publishing the persons of its first block (read from the inputs) in the manifest's counts."""
    from das.driver.pipeline import Pipeline
    from das.frame.records import Counts

    captured = {}
    read = Pipeline.read_inputs

    def read_inputs(self, *args, **kwargs):
        confidential = read(self, *args, **kwargs)
        captured["first_block"] = int(confidential.histograms["persons"][0].sum())
        return confidential

    def to_dict(self):
        return {"persons": self.persons, "blocks": self.blocks, "first_block": captured["first_block"]}

    return [(Pipeline, "read_inputs", read_inputs), (Counts, "to_dict", to_dict)]


def _noise(kind: str):
    import numpy as np

    import das.topdown.measure

    noisy = das.topdown.measure.noisy_answers
    plants = {
        "halved_variance": lambda truth, variance, rng: noisy(truth, variance / 2, rng),
        "measured_twice": lambda truth, variance, rng: np.rint(
            (noisy(truth, variance, rng) + noisy(truth, variance, rng)) / 2).astype(np.int64),
        "rho_x1.5": lambda truth, variance, rng: noisy(truth, variance * Fraction(2, 3), rng),
    }
    return [(das.topdown.measure, "noisy_answers", plants[kind])]


def _run_planted(patches, command: str, trials: int, kinds: tuple[str, ...]) -> dict:
    from contextlib import ExitStack

    with ExitStack() as stack:
        for owner, name, value in patches:
            stack.enter_context(_patched(owner, name, value))
        return _audit(command, trials, kinds)


def planted() -> dict:
    """Each planted defect, and whether the audit caught it (1) and how: deterministic fields, NMF queries with
    less noise than certified (rho implied by the noise, a 95% lower bound, vs the certified rho), the bound."""
    from das.mechanisms import MECHANISMS

    t0 = time.perf_counter()
    figures: dict[str, float] = {}
    report = _run_planted(_truth_in_manifest(), "run", 2, ("moved within",))
    figures["truth_count_run_caught"] = float(not report["ok"])
    figures["truth_count_run_deterministic_fields"] = float(len(report["pairs"][0]["deterministic"]))
    for kind in ("halved_variance", "measured_twice", "rho_x1.5"):
        report = _run_planted(_noise(kind), "run", 8, ("recoded",))
        bad = [c for c in report["noise"] if not c["ok"]]
        block = next(c for c in report["noise"] if (c["level"], c["query"]) == ("block", "detailed"))
        figures[f"{kind}_caught"] = float(not report["ok"])
        figures[f"{kind}_queries_flagged"] = float(len(bad))
        figures[f"{kind}_block_detailed_rho_lower_bound"] = block["rho_lower_bound"]
        figures[f"{kind}_block_detailed_certified_rho"] = block["certified_rho"]
        b = report["pairs"][0]["bounds"][0]
        figures[f"{kind}_recoded_d100_bound"] = b["eps_lower_bound"]
        figures[f"{kind}_recoded_d100_certified"] = b["eps_certified"]
        figures[f"{kind}_recoded_d100_detectable"] = b["detection_limit_eps"]
    for name, mech in MECHANISMS.items():
        if mech.extra is not None:
            continue

        def leaking(data, mech=mech):
            result = mech.run(data)
            return replace(result, details={**result.details, "nonzero_bins": int(data.histograms.nnz)})

        lying = replace(mech, run=leaking, details={**mech.details, "nonzero_bins": "parameter: (a lie)"})
        report = _run_planted([(MECHANISMS, name, lying)], name, 2, ("moved within",))
        figures[f"truth_detail_{name}_caught"] = float(not report["ok"])
    figures["all_caught"] = float(all(v for k, v in figures.items() if k.endswith("_caught")))
    figures["seconds"] = time.perf_counter() - t0
    return figures


BENCHES = [
    Bench("release_audit.topdown", "`das audit-privacy tiny --release run --trials 24`: TopDown end to end on a "
          "handful of tiny blocks at rho = 1, delta = 1/100 (bounds at 1/100, 1/20, 1/10): per pair the eps bound "
          "found over every public output, the certificate's eps, the largest bound 24 trials can show",
          topdown, key="ok", higher_is_better=True, repeats=1,
          target="every covered pair: bound <= certified, no deterministic field; `added` (not covered): only "
                 "invariant-derived fields deterministic"),
    Bench("release_audit.synthetic", "`das audit-privacy tiny --release MECH --trials 24` for flat, stability, mwem, "
          "privbayes, privsyn: per covered pair and delta the bound found, the certificate, the detectable limit",
          synthetic, key="ok", higher_is_better=True, repeats=1, target="every bound <= certified"),
    Bench("release_audit.mbi", "the same for mst and aim (Private-PGM), 2 trials per dataset, one covered pair",
          mbi, key="seconds", repeats=1, target="no deterministic field"),
    Bench("release_audit.planted", "planted defects, each audited end to end: a truth-derived count in `das run`'s "
          "manifest and in each mechanism's details (2 trials), a halved variance, every query measured twice but "
          "charged once, rho x 1.5 (8 trials, recoded pair)", planted, key="all_caught", higher_is_better=True,
          repeats=1, target="every defect caught (1)"),
]
