"""Empirical privacy audit: run the measurement on neighbouring datasets and bound epsilon from below.

For neighbours D and D' (a person added, removed, moved between blocks, recoded) the real
measurement path (`das.topdown.measure.measure_in_memory`: the plan, the true answers, the exact
discrete-Gaussian sampler) runs `trials` times on each. Each trial's noisy answers y are scored
by the log-likelihood ratio of D' against D under the *claimed* variances,

    T(y) = sum over measurements and cells of (b - a) (y - (a + b)/2) / sigma^2,

(a, b: the true answers on D and D'), the most powerful test between the two (Neyman-Pearson)
when the mechanism is what the certificate says. For a threshold t, the event {T > t} has
probabilities p = P_D and p' = P_D'; (eps, delta)-DP requires p' <= e^eps p + delta, so

    eps >= ln((p' - delta) / p).

p' is bounded below and p above by one-sided Clopper-Pearson intervals (each at alpha/2, so the
bound holds with probability >= 1 - alpha; das.attack.detection). The threshold is chosen on the first
half of the trials and the bound evaluated on the second half, so choosing the best event does not bias
it. Both directions (D vs D' and D' vs D) are tried; the larger bound is reported.

What it can show: with n trials per dataset the largest bound reachable (the detection limit, reported
beside the certificate with the trials needed to reach it) is about ln(n / 7.5), and only events with
p' > delta count, so at the 2020 budgets (eps 17 at delta 1e-10) any bound is far below the
certificate. The audit is informative where the certified eps is a few units at a delta of about 1e-2
(docs/privacy.md): there a mechanism with half the claimed variance, or one query measured twice but
charged once, yields a bound above the certificate.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from fractions import Fraction
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from das.attack.detection import Detection, detection, event_bound
from das.core import atomic
from das.core.errors import SpecError
from das.core.progress import bar
from das.driver.runspec import load_run_spec
from das.frame import outdir
from das.io.nmf import NoisyAnswers
from das.model.geography import Geography
from das.model.schema import Schema, load_schema
from das.privacy.accounting import Allocation, allocate, eps_for_delta
from das.privacy.randomness import make_random_source
from das.privacy.strategy import load_strategy, parse_fraction, strategy_from_dict
from das.topdown.measure import measure_in_memory, true_answers

AUDIT_DELTA = Fraction(1, 100)
AUDIT_RHO = Fraction(1)
NEIGHBOURS = ("added", "removed", "moved", "recoded")
TRIAL_ANSWERS = 1 << 22  # noisy answers held in memory at once (trials x answers per trial)
# `das audit-privacy --out DIR`: synthetic neighbours only, nothing confidential; hours of trials, so --overwrite
AUDIT = outdir.Owner("das audit-privacy", "privacy audit", ("audit.json", "audit.md"))


@dataclass(frozen=True)
class Neighbours:
    """Two block histograms (n_blocks x n_cells) that differ by one person."""

    name: str
    d: sp.csr_matrix
    d_prime: sp.csr_matrix


@dataclass(frozen=True)
class AuditResult:
    """The empirical lower bound on epsilon for one pair of neighbours, beside the certificate."""

    neighbours: str
    eps_lower_bound: float  # 0 when no event shows any loss
    eps_certified: float
    delta: float
    trials: int
    threshold: float
    p_d: float  # observed frequency of the chosen event under D (evaluation half)
    p_d_prime: float
    detection_limit_eps: float  # the largest bound these trials could show at all (das.attack.detection)
    trials_needed: int | None  # the fewest trials per dataset whose detection limit reaches eps_certified

    @property
    def within_certificate(self) -> bool:
        return self.eps_lower_bound <= self.eps_certified

    @property
    def detection(self) -> Detection:
        return Detection(self.trials, self.delta, self.eps_certified, self.detection_limit_eps, self.trials_needed)


def epsilon_bound(scores_d: np.ndarray, scores_d_prime: np.ndarray, delta: float, *, alpha: float = 0.05,
                  candidates: int = 200) -> tuple[float, float, float, float]:
    """Lower bound on eps from test scores under D and D' (higher = "looks like D'").

    The threshold maximising the bound's point estimate on the first half of each sample is
    evaluated with Clopper-Pearson bounds on the second half. Returns (eps, threshold, p, p').
    """
    half_d, half_p = len(scores_d) // 2, len(scores_d_prime) // 2
    pick_d, eval_d = np.sort(scores_d[:half_d]), np.sort(scores_d[half_d:])
    pick_p, eval_p = np.sort(scores_d_prime[:half_p]), np.sort(scores_d_prime[half_p:])
    # candidate events {T > t}: D' quantiles from the median far into the tail (where the bound is)
    tail = np.geomspace(0.5, min(0.5, 10 / max(len(pick_p), 1)), candidates)
    thresholds = np.unique(np.quantile(pick_p, 1 - tail)) if len(pick_p) else np.zeros(1)

    def rates(sorted_scores, t):
        return len(sorted_scores) - np.searchsorted(sorted_scores, t, side="right")

    best, chosen = -np.inf, thresholds[0] if len(thresholds) else 0.0
    for t in thresholds:
        p, q = (rates(pick_d, t) + 1) / (len(pick_d) + 1), rates(pick_p, t) / len(pick_p)
        estimate = np.log(max(q - delta, 1e-300) / p)
        if estimate > best:
            best, chosen = estimate, t
    k, j = rates(eval_d, chosen), rates(eval_p, chosen)
    eps = event_bound(int(k), len(eval_d), int(j), len(eval_p), delta=delta, alpha=alpha)
    return eps, float(chosen), k / len(eval_d), j / len(eval_p)


def neighbour_pairs(histograms: sp.csr_matrix, schema: Schema, geography: Geography) -> list[Neighbours]:
    """D and D' for each kind of neighbour, from a dataset with at least one person.

    added/removed: one person more/less in the first populated block; moved: that person to the
    last block (another county when there is one, so more levels change); recoded: that person
    given the cell farthest from theirs (every attribute changed that can change).
    """
    d = histograms.tocsr().astype(np.int64)
    block = int(np.flatnonzero(np.asarray(d.sum(axis=1)).ravel())[0])
    cell = int(d[block].indices[0])
    last = geography.n_blocks - 1
    other_cell = schema.size - 1 - cell if schema.size > 1 else cell

    def changed(add: list[tuple[int, int, int]]) -> sp.csr_matrix:
        m = d.tolil(copy=True)
        for b, c, v in add:
            m[b, c] = m[b, c] + v
        return m.tocsr()

    return [
        Neighbours("added", d, changed([(block, cell, 1)])),
        Neighbours("removed", d, changed([(block, cell, -1)])),
        Neighbours("moved", d, changed([(block, cell, -1), (last, cell, 1)])),
        Neighbours("recoded", d, changed([(block, cell, -1), (block, other_cell, 1)])),
    ]


Mechanism = Callable[..., list[NoisyAnswers]]  # measure_in_memory's arguments


def llr_scores(outputs: list[NoisyAnswers], truth_d: dict, truth_d_prime: dict) -> np.ndarray:
    """The log-likelihood ratio of D' against D per trial (the answers' first axis), under the claimed variances."""
    scores = None
    for m in outputs:
        a, b = truth_d[m.level, m.query], truth_d_prime[m.level, m.query]
        diff = (b - a).astype(np.float64)
        if not diff.any():
            continue
        weight = float(1 / m.variance)
        centred = m.answers - (a + b) / 2.0
        term = (centred * diff).reshape(len(m.answers), -1).sum(axis=1) * weight
        scores = term if scores is None else scores + term
    return scores if scores is not None else np.zeros(len(outputs[0].answers) if outputs else 0)


def _truths(geography: Geography, histograms: sp.csr_matrix, schema: Schema, allocation: Allocation) -> dict:
    out = {}
    for level in geography.levels:
        aggregated = geography.aggregate(histograms, level)
        for m in allocation.level(level):
            out[level, m.query] = true_answers(aggregated, schema, m.query)
    return out


@dataclass(frozen=True)
class Trials:
    """How an audit runs: trials per dataset, the certificate's budget (rho, delta) whose eps it
    bounds from below at confidence 1 - alpha, and the mechanism audited."""

    trials: int
    delta: Fraction
    rho: Fraction
    mechanism: Mechanism = measure_in_memory
    alpha: float = 0.05
    done: Callable[[int], object] | None = None  # told the trials run after each chunk (a progress bar's update)


def audit_pair(pair: Neighbours, geography: Geography, schema: Schema, allocation: Allocation, *, rng,
               how: Trials) -> AuditResult:
    """Run the mechanism `how.trials` times on each of D and D' and bound eps at `how.delta` from below."""
    trials = how.trials
    truth_d = _truths(geography, pair.d, schema, allocation)
    truth_p = _truths(geography, pair.d_prime, schema, allocation)
    answers = sum(t.size for t in truth_d.values())
    chunk = max(1, min(trials, TRIAL_ANSWERS // max(answers, 1)))  # trials per call: bounded memory

    def scores(histograms, side: str) -> np.ndarray:
        parts = []
        for number, start in enumerate(range(0, trials, chunk)):
            stream = rng.spawn(f"audit/{pair.name}/{side}/{number}")
            outputs = how.mechanism(geography, histograms, schema, allocation, rng=stream, trials=min(chunk, trials - start))
            parts.append(llr_scores(outputs, truth_d, truth_p))
            if how.done is not None:
                how.done(min(chunk, trials - start))
        return np.concatenate(parts)

    s_d, s_p = scores(pair.d, "D"), scores(pair.d_prime, "D'")
    forward = epsilon_bound(s_d, s_p, float(how.delta), alpha=how.alpha)
    backward = epsilon_bound(-s_p, -s_d, float(how.delta), alpha=how.alpha)
    eps, threshold, p, q = max(forward, backward, key=lambda r: r[0])
    sight = detection(trials, eps_for_delta(how.rho, how.delta), delta=float(how.delta), alpha=how.alpha)
    return AuditResult(pair.name, eps, sight.eps_certified, sight.delta, trials, threshold, p, q,
                       sight.detection_limit_eps, sight.trials_needed)


def audit(geography: Geography, histograms: sp.csr_matrix, schema: Schema, allocation: Allocation, *,
          rng, how: Trials, kinds: tuple[str, ...] = NEIGHBOURS) -> list[AuditResult]:
    """The audit for each kind of neighbour (see `neighbour_pairs`)."""
    return [audit_pair(pair, geography, schema, allocation, rng=rng, how=how)
            for pair in neighbour_pairs(histograms, schema, geography) if pair.name in kinds]


# ---------------------------------------------------------------------------------------------
# Deliberately broken mechanisms: the audit must catch them (tests, benchmarks)


def halved_variance(geography, histograms, schema, allocation, *, rng, trials=1, accountant=None):
    """A bug: every query's noise drawn with half the certified variance (the NMF would still say the full one)."""
    halved = Allocation(allocation.rho, tuple(replace(m, sigma2=m.sigma2 / 2) for m in allocation.items))
    outputs = measure_in_memory(geography, histograms, schema, halved, rng=rng, trials=trials)
    claimed = {(m.level, m.query): m.sigma2 for m in allocation.items}
    return [replace(o, variance=claimed[o.level, o.query]) for o in outputs]


def measured_twice(geography, histograms, schema, allocation, *, rng, trials=1, accountant=None):
    """A bug: the largest-budget query of every level measured a second time, charged once."""
    outputs = measure_in_memory(geography, histograms, schema, allocation, rng=rng, trials=trials)
    extra = tuple(min(ms, key=lambda m: m.sigma2) for ms in map(allocation.level, geography.levels) if ms)
    again = Allocation(sum((m.rho for m in extra), Fraction(0)), extra)
    return outputs + measure_in_memory(geography, histograms, schema, again, rng=rng.spawn("again"), trials=trials)


BROKEN = {"variance halved": halved_variance, "one query measured twice, charged once": measured_twice}


# ---------------------------------------------------------------------------------------------
# A synthetic neighbourhood: the audit needs no confidential data


def audit_geography(levels: tuple[str, ...]) -> Geography:
    """Two blocks in two counties of one state: a move between them changes every level below the state."""
    return Geography.from_blocks(["010010001001000", "010030002002000"], levels)


def audit_dataset(schema: Schema, geography: Geography, persons: int = 4, seed: int = 0) -> sp.csr_matrix:
    """A few persons in household cells of the first block (legal under every shipped schema)."""
    rng = np.random.default_rng(seed)
    household = np.flatnonzero(schema.levels_of("hhgq", np.arange(schema.size)) == 0) \
        if "hhgq" in schema.names else np.arange(schema.size)
    cells = rng.choice(household, size=persons)
    counts = np.bincount(cells, minlength=schema.size)
    data = np.zeros((geography.n_blocks, schema.size), dtype=np.int64)
    data[0] = counts
    return sp.csr_matrix(data)


def render(results: list[AuditResult], title: str = "") -> str:
    """The bounds as a table: per neighbour the bound found, the certificate, the largest bound the trials could show."""
    lines = [title] if title else []
    lines.append(f"{'neighbours':12s} {'trials':>8s} {'eps lower bound':>16s} {'eps certified':>14s} "
                 f"{'detection limit':>16s} {'trials needed':>14s} {'delta':>8s}  verdict")
    for r in results:
        verdict = ("VIOLATION: bound above the certificate" if not r.within_certificate else
                   "within the certificate" if r.detection.conclusive else "inconclusive: limit below the certificate")
        needed = "-" if r.trials_needed is None else f"{r.trials_needed:,}"
        lines.append(f"{r.neighbours:12s} {r.trials:8d} {r.eps_lower_bound:16.3f} {r.eps_certified:14.4f} "
                     f"{r.detection_limit_eps:16.3f} {needed:>14s} {r.delta:8.0e}  {verdict}")
    return "\n".join(lines)


def audit_spec(spec_path, *, trials: int = 200_000, rho=None, delta=None, seed: int | None = None) -> dict:
    """The audit of a run spec's persons strategy (its shares, at the audit budget) on the synthetic
    neighbourhood, beside the same strategy reduced to its `detailed` query alone (where every
    neighbour changes every measurement, so the bound can approach the certificate)."""

    spec = load_run_spec(spec_path)
    rho = AUDIT_RHO if rho is None else parse_fraction(rho, "--rho")
    delta = AUDIT_DELTA if delta is None else parse_fraction(delta, "--delta")
    if not 0 < delta < 1:
        raise ValueError(f"--delta must be strictly between 0 and 1, got {delta}")
    if trials < 100:
        raise ValueError(f"--trials must be at least 100, got {trials}")
    schema = load_schema(spec.persons.schema)
    strategy = load_strategy(spec.persons.strategy)
    detailed = strategy_from_dict({"schema": schema.name, "levels": {
        lv.level: {"rho_share": str(lv.rho_share), "queries": {"detailed": "1"}} for lv in strategy.levels}})
    geography = audit_geography(spec.levels)
    data = audit_dataset(schema, geography)
    rng = make_random_source(seed)
    report = {"spec": spec.name, "rho": str(rho), "delta": str(delta), "trials": trials,
              "private_randomness": rng.private, "strategies": {}}
    pairs = sum(pair.name in NEIGHBOURS for pair in neighbour_pairs(data, schema, geography))
    with bar(total=2 * pairs * 2 * trials, desc="audit trials", unit="trial", unit_scale=True) as progress:
        how = Trials(trials, delta, rho, done=progress.update)
        for name, s in ((strategy.name, strategy), (f"{strategy.name} (detailed only)", detailed)):
            results = audit(geography, data, schema, allocate(s, rho), rng=rng.spawn(name), how=how)
            report["strategies"][name] = [r.__dict__ for r in results]
    sight = detection(trials, eps_for_delta(rho, delta), delta=float(delta), alpha=how.alpha)
    return report | {"detection": asdict(sight) | {"conclusive": sight.conclusive}, "verdict": sight.verdict(violations(report))}


def audit_spec_main(spec_path, *, json_out: bool = False, out=None, overwrite: bool = False, **settings) -> int:
    """`das audit-privacy SPEC [--out DIR]`: exit 0 when every bound is within the certificate, 1 otherwise.
    `settings` are audit_spec's (trials, rho, delta, seed)."""
    claim = None
    if out is not None:  # the directory is checked before any trial is drawn
        claim = outdir.check(out, AUDIT, overwrite=overwrite, protected=[load_run_spec(spec_path).path])
    try:
        report = audit_spec(spec_path, **settings)
    except ValueError as e:
        raise SpecError(str(e)) from None
    text = render_report(report)
    if claim is not None:
        claim.start()
        write_audit(Path(out), report, text, verdict=report["verdict"])
        claim.finish()
    print(json.dumps(report, indent=2) if json_out else text)
    return 1 if violations(report) else 0


def violations(report: dict) -> list[str]:
    """Each bound above its certified eps: strategy, neighbours, bound and certificate."""
    return [f"{name}, {r['neighbours']}: eps {r['eps_lower_bound']:.3f} > certified {r['eps_certified']:.4f}"
            for name, rs in report["strategies"].items() for r in rs if r["eps_lower_bound"] > r["eps_certified"]]


def render_report(report: dict) -> str:
    """The audit of a spec as text: budget and trials, then each strategy's bounds against its certificate."""
    parts = [f"privacy audit of {report['spec']}: rho = {report['rho']}, delta = {report['delta']}, "
             f"{report['trials']:,} trials per dataset (synthetic neighbours, no input read)"]
    for name, results in report["strategies"].items():
        parts += ["", render([AuditResult(**r) for r in results], f"strategy {name}")]
    sight = report["detection"]
    needed = "-" if sight["trials_needed"] is None else f"{sight['trials_needed']:,}"
    parts += ["", f"detection limit at {report['trials']:,} trials: eps {sight['detection_limit_eps']:.3f} beside the "
                  f"certificate's {sight['eps_certified']:.4f} (trials needed to reach it: {needed})",
              f"verdict: {report['verdict']}"]
    return "\n".join(parts)


def write_audit(out_dir: Path, report: dict, text: str, *, verdict: str) -> list[Path]:
    """audit.json (the report) and audit.md (a short summary: the verdict and the rendered bounds)."""
    paths = [out_dir / "audit.json", out_dir / "audit.md"]
    atomic.write_text(paths[0], json.dumps(report, indent=2, default=str) + "\n")
    atomic.write_text(paths[1], f"# Empirical privacy audit: {report['spec']}\n\n{verdict}.\n\n```\n{text}\n```\n")
    return paths
