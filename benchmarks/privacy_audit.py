"""Empirical privacy audit (das/attack/privacy.py): lower bounds on epsilon beside the certificate.

Audit setting (docs/privacy.md, "Empirical audit"): rho = 1, delta = 1/100, OS CSPRNG noise, a
synthetic two-block neighbourhood (no input read). At such a budget the certified eps (4.34) is
within reach of 200,000 trials; at the 2020 budgets (eps 17 at delta 1e-10) no feasible number of
trials could approach the certificate, so an audit there would say nothing.
"""

from __future__ import annotations

import time

from benchmarks._harness import Bench

LEVELS = ("nation", "state", "county", "tract", "block")


def _setting(query: str):
    from das.attack import privacy as A
    from das.model.schema import load_schema
    from das.privacy.accounting import allocate
    from das.privacy.strategy import strategy_from_dict

    schema = load_schema("pl94_persons")
    strategy = strategy_from_dict({"schema": schema.name, "levels": {
        lv: {"rho_share": "1/5", "queries": {query: "1"}} for lv in LEVELS}})
    geography = A.audit_geography(LEVELS)
    return geography, A.audit_dataset(schema, geography), schema, allocate(strategy, A.AUDIT_RHO)


def marginal_strategy() -> dict:
    """Every level measures `votingage x hispanic` (a recode changes it everywhere: the full budget);
    the real mechanism on 4 neighbour kinds, then two broken mechanisms on the recoded pair."""
    from das.attack import privacy as A
    from das.privacy.randomness import SystemRandomSource

    geography, data, schema, plan = _setting("votingage x hispanic")
    trials = 200_000
    t0 = time.perf_counter()
    figures: dict[str, float] = {}
    for r in A.audit(geography, data, schema, plan, rng=SystemRandomSource(),
                     how=A.Trials(trials, A.AUDIT_DELTA, A.AUDIT_RHO)):
        figures[f"eps_lb_{r.neighbours}"] = r.eps_lower_bound
        figures["eps_certified"] = r.eps_certified
    for label, mechanism in (("variance_halved", A.halved_variance), ("measured_twice", A.measured_twice)):
        (r,) = A.audit(geography, data, schema, plan, rng=SystemRandomSource(),
                       how=A.Trials(trials, A.AUDIT_DELTA, A.AUDIT_RHO, mechanism), kinds=("recoded",))
        figures[f"broken_{label}_eps_lb_recoded"] = r.eps_lower_bound
    figures["trials_per_dataset"] = trials
    figures["seconds"] = time.perf_counter() - t0
    return figures


def pl94_tiny() -> dict:
    """`das audit-privacy tiny`: the PL94 five-level strategy's shares at the audit budget, and the
    same level shares on `detailed` alone, 20,000 trials per dataset."""
    from das.attack.privacy import audit_spec

    t0 = time.perf_counter()
    report = audit_spec("tiny", trials=20_000)
    figures: dict[str, float] = {}
    for name, results in report["strategies"].items():
        tag = "detailed_only" if "detailed only" in name else "pl94_five_level"
        for r in results:
            figures[f"{tag}_eps_lb_{r['neighbours']}"] = r["eps_lower_bound"]
            figures["eps_certified"] = r["eps_certified"]
    figures["seconds"] = time.perf_counter() - t0
    return figures


BENCHES = [
    Bench("privacy_audit.marginal", "empirical eps lower bound (Clopper-Pearson, 95%) vs the certified eps at "
          "rho = 1, delta = 1/100: `votingage x hispanic` at 5 levels, 200k trials per dataset, real mechanism on "
          "4 neighbour kinds, and 2 broken mechanisms (variance halved; one query measured twice, charged once)",
          marginal_strategy, key="eps_lb_recoded", higher_is_better=True, repeats=3,
          target="real: every bound <= eps_certified; broken: bound > eps_certified"),
    Bench("privacy_audit.pl94_tiny", "`das audit-privacy tiny --trials 20000`: PL94 five-level shares at rho = 1, "
          "delta = 1/100, and the same level shares on `detailed` alone (2,016 cells x 8 geounits per trial)",
          pl94_tiny, key="detailed_only_eps_lb_recoded", higher_is_better=True, repeats=1,
          target="every bound <= eps_certified"),
]
