"""Empirical privacy audit of whole releases: every public output of `das run` or `das synth`, end to end.

Where das.attack.privacy audits the measurement alone, this runs a release command itself (the reader,
the mechanism, post-processing, the writers, the manifest, validation) `trials` times on each of two
neighbouring datasets it makes from a handful of blocks of the tiny fixture (no confidential input is
read), and tests every public output: each manifest value, each count of MDF rows per block and per
(block, record), each table cell, each NMF answer, each Parquet file's rows, row groups and metadata,
the list of files. For every pair of neighbours and every delta it reports

- the largest distinguishing lower bound on eps found, by the method of das.attack.privacy: the
  event {feature >= t} (or <=) chosen on the first half of the trials, its probabilities bounded by
  one-sided Clopper-Pearson intervals on the second half, eps >= ln((P_D' - delta) / P_D); the
  features include the NMF's log-likelihood ratio under the certified variances and a linear score
  learned on the first half;
- the largest bound the trials could show at all (the detection limit, das.attack.detection: every
  evaluation trial on its side of the event), beside the certificate's eps at that delta, and the
  trials that would reach the certificate;
- every feature that differed between the neighbours in every trial while staying the same within
  each (a deterministic difference: unbounded eps), and
- for a TopDown release, whether each NMF query's noise is as large as certified: the residuals
  (the auditor knows both datasets) against the certified variance, a chi-square bound.

A pair that is not covered by the guarantee (a record added or removed: not a bounded neighbour, and
it changes a state population, an invariant published exactly) is reported and not judged; a covered
pair (a record moved within or across geounits of the state, or recoded) fails on any deterministic
difference, any bound above the certificate, or any query measured with less noise than certified. When
none of these is found but the detection limit at the run's delta is below the certificate's eps, the
verdict is "inconclusive" (a bound above the certificate could not have shown), not "within the
certificate": at the default 20 trials the limit is 0.79 against 4.34, and 575 trials reach it.
"""

from __future__ import annotations

import json
import logging
import math
import secrets
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from fractions import Fraction
from pathlib import Path

import numpy as np
from scipy.stats import chi2

from das.attack.detection import Detection, detection
from das.attack.distinguish import (
    _parameter_of_variance,
    bound,
    deterministic,
    discrete_gaussian_variance,
    feature_matrix,
    fixed,
    linear_score,
)
from das.attack.features import release_features
from das.attack.neighbours import (
    COVERED,
    NEIGHBOURS,
    Dataset,
    base_records,
    neighbour,
    write_dataset,
)
from das.core.progress import bar, silenced, step
from das.driver.runspec import load_run_spec
from das.frame.rundir import RunDir
from das.io.microdata import read_inputs
from das.model.geography import Geography
from das.model.schema import load_schema
from das.privacy.accounting import eps_for_delta
from das.privacy.certificate import Certificate
from das.topdown.measure import true_answers

logger = logging.getLogger(__name__)

DELTAS = (Fraction(1, 100), Fraction(1, 20), Fraction(1, 10))


# ---------------------------------------------------------------------------------------------
# The neighbouring datasets


# ---------------------------------------------------------------------------------------------
# One release's public outputs as features


# ---------------------------------------------------------------------------------------------
# Running a release command on a dataset


Command = Callable[[Path, Path, int], Path]  # (spec, out_dir, seed) -> the release directory


def command(name: str, rho: Fraction) -> Command:
    """`das run` ("run") or `das synth --mechanism NAME` as a function of (spec, out, seed)."""
    if name == "run":
        from das.driver.run import run

        def release(spec, out, seed):
            with silenced():  # a trial's own messages (its seeded-mode warning) would bury the audit's count
                return run(spec, out, seed=seed, workers=1, progress=False).out_dir

        return release
    from das.mechanisms import synthesize

    def synthetic(spec, out, seed):
        with silenced():
            return synthesize(spec, name, out, seed=seed, rho=rho)

    return synthetic


@dataclass(frozen=True)
class Side:
    """Every trial's features on one dataset, its NMF's true answers and residuals, its certificate."""

    features: list[dict]
    answers: list[dict]  # per trial: (release, level, query) -> noisy answers
    truth: dict  # (release, level, query) -> true answers, rows in the NMF's order
    variances: dict  # (release, level, query) -> certified variance (the NMF's)
    certificate: Certificate | None
    manifest: dict = field(default_factory=dict)  # a trial's manifest: what each field is declared to derive from


def truths(spec: Path) -> dict:
    """(release, level) -> (geounits, aggregated true histograms, schema) of a dataset."""
    run_spec = load_run_spec(spec)
    schemas = {"persons": load_schema(run_spec.persons.schema)}
    if run_spec.units is not None:
        schemas["units"] = load_schema(run_spec.units.schema)
    inputs = read_inputs(run_spec.persons_path, run_spec.units_path, schemas["persons"], schemas.get("units"))
    geography = Geography.from_blocks(inputs.inventory.blocks, run_spec.levels)
    histograms = {"persons": inputs.person_histograms, "units": inputs.unit_histograms}
    return {(release, level): (geography.units(level), geography.aggregate(histograms[release], level), schema)
            for release, schema in schemas.items() for level in run_spec.levels}


def _truth(table: dict, key: tuple[str, str, str], geocodes: np.ndarray) -> np.ndarray:
    release, level, query = key
    units, aggregated, schema = table[release, level]
    answers = true_answers(aggregated, schema, query)
    index = {g: i for i, g in enumerate(units.tolist())}
    return answers[[index[g] for g in geocodes.tolist()]]


def run_side(dataset: Dataset, run: Command, seeds: list[int], work: Path) -> Side:
    """`run` once per seed on `dataset`: each release's features, then its directory removed."""
    table = truths(dataset.spec)
    features, answers, truth, variances, certificate = [], [], {}, {}, None
    for seed in seeds:
        out = run(dataset.spec, work / f"trial{seed}", seed)
        found, nmf = release_features(out)
        features.append(found)
        answers.append({k: v.answers for k, v in nmf.items()})
        for key, noisy in nmf.items():
            if key not in truth:
                truth[key], variances[key] = _truth(table, key, noisy.geocodes), noisy.variance
        manifest = json.loads(RunDir(out).manifest_path.read_text())  # as written: `fixed` reads its declared sources
        certificate = RunDir(out).read().certificate("persons")
        shutil.rmtree(out)
    return Side(features, answers, truth, variances, certificate, manifest)


# ---------------------------------------------------------------------------------------------
# The statistics


def llr(side: Side, truth_d: dict, truth_p: dict) -> np.ndarray:
    """Per trial, the log-likelihood ratio of D' against D of the NMF under the certified variances."""
    scores = np.zeros(len(side.answers))
    for key, variance in side.variances.items():
        a, b = truth_d.get(key), truth_p.get(key)
        if a is None or b is None or a.shape != b.shape or not (b - a).any():
            continue
        diff, centre = (b - a).astype(np.float64), (a + b) / 2.0
        scores += np.array([float(((t[key] - centre) * diff).sum()) for t in side.answers]) / float(variance)
    return scores


def noise_checks(sides: list[Side], alpha: float) -> list[dict]:
    """Each NMF query's noise against its certified variance, over every trial of every dataset: the
    residuals' (answer - truth) variance bounded above (chi-square, Bonferroni over the queries); a query whose
    noise is significantly smaller than certified spends more than its certificate says."""
    keys = sorted({k for side in sides for k in side.variances})
    out = []
    for key in keys:
        squares, count, variance = 0.0, 0, None
        for side in sides:
            if key not in side.truth:
                continue
            variance = side.variances[key]
            for trial in side.answers:
                r = (trial[key] - side.truth[key]).astype(np.float64)
                squares, count = squares + float((r * r).sum()), count + r.size
        if not count:
            continue
        claimed = discrete_gaussian_variance(float(variance))
        upper = squares / chi2.ppf(alpha / len(keys), count)
        out.append({"release": key[0], "level": key[1], "query": key[2], "answers": count,
                    "certified_variance": float(variance), "observed_variance": squares / count,
                    "variance_upper_bound": upper, "rho_lower_bound": 1 / _parameter_of_variance(upper),
                    "certified_rho": 1 / float(variance), "ok": upper >= claimed})
    return out


# ---------------------------------------------------------------------------------------------
# The audit


@dataclass(frozen=True)
class AuditSettings:
    """What to audit: a release command ("run" or a mechanism), trials per dataset, the budget (rho, and the
    run's delta), the deltas at which bounds are reported, the neighbours, confidence 1 - alpha, a base seed
    (None: a random one; each trial has its own seed)."""

    command: str
    trials: int
    rho: Fraction = Fraction(1)
    delta: Fraction = Fraction(1, 100)
    deltas: tuple[Fraction, ...] = DELTAS
    kinds: tuple[str, ...] = NEIGHBOURS
    alpha: float = 0.05
    seed: int | None = None


@dataclass(frozen=True)
class PairResult:
    """The audit of one pair of neighbours."""

    neighbours: str
    covered: bool
    trials: int
    bounds: list[dict]  # per delta: bound found, feature, certified eps, detection limit, trials needed
    deterministic: list[str]  # fields fixed for covered neighbours that differed in every trial (unbounded eps)
    deterministic_cells: list[str]  # noisy fields, selections, cells, counts, answers that did (the bounds judge them)
    violations: list[str]  # deterministic fields and bounds above the certificate (a covered pair's failures)
    conclusive: bool  # whether a bound above the certificate at the run's delta could have shown
    verdict: str

    @property
    def ok(self) -> bool:
        """No violation found (an inconclusive pair included: it found none, and says it could not)."""
        return not self.covered or not self.violations


def certified_eps(certificate: Certificate, delta: Fraction) -> float:
    """The certificate's eps at another delta: its rho converted at delta less its approximate steps' delta; a
    certificate at a mechanism's own (eps, delta) (no rho) holds its eps at its delta and above, nothing below."""
    if certificate.rho is None:
        return certificate.eps if delta >= certificate.delta else math.inf
    steps = sum((v for k, v in (certificate.delta_parts or {}).items() if k != "zCDP conversion"), Fraction(0))
    return eps_for_delta(certificate.rho, delta - steps) if delta > steps else math.inf


def audit_pair(kind: str, side_d: Side, side_p: Side, settings: AuditSettings) -> PairResult:
    """Bounds at every delta, deterministic differences and the verdict of one pair (D's trials shared)."""
    rows = side_d.features + side_p.features
    names, matrix = feature_matrix(rows)
    n = len(side_d.features)
    d, p = matrix[:n], matrix[n:]
    extra = {"nmf: log-likelihood ratio of D' against D": np.concatenate(
        [llr(side_d, side_d.truth, side_p.truth), llr(side_p, side_d.truth, side_p.truth)])}
    extra["all: linear score learned on the first half"] = linear_score(d[:n // 2], p[:len(p) // 2], matrix)
    names, matrix = names + list(extra), np.column_stack([matrix, *extra.values()])
    d, p = matrix[:n], matrix[n:]
    structural, cells = deterministic(side_d.features, side_p.features)
    judged = [n for n in structural if fixed(n, side_d.manifest) or fixed(n, side_p.manifest)]
    cells = [n for n in structural if n not in judged] + cells
    structural = judged
    bounds, n = [], min(len(d), len(p))
    for delta in settings.deltas:
        found = bound(d, p, float(delta), settings.alpha)
        sight = detection(n, certified_eps(side_d.certificate, delta), delta=float(delta), alpha=settings.alpha)
        bounds.append({"delta": str(delta), "eps_lower_bound": found["eps"], "eps_certified": sight.eps_certified,
                       "detection_limit_eps": sight.detection_limit_eps, "trials_needed": sight.trials_needed,
                       "feature": None if found["column"] is None else names[found["column"]],
                       "threshold": found["threshold"], "p_d": found["p"], "p_d_prime": found["q"]})
    problems = [f"deterministic: {', '.join(structural[:5])}"] if structural else []
    problems += [f"eps {b['eps_lower_bound']:.3f} > certified {b['eps_certified']:.4f} at delta {b['delta']} "
                 f"({b['feature']})" for b in bounds if b["eps_lower_bound"] > b["eps_certified"]]
    sight = run_detection(n, side_d.certificate, settings)
    verdict = sight.verdict(problems) if kind in COVERED else \
        "not covered by the guarantee, not judged" + "".join(f"; {problem}" for problem in problems)
    return PairResult(kind, kind in COVERED, n, bounds, structural, cells[:50], problems, sight.conclusive, verdict)


def run_detection(trials: int, certificate: Certificate, settings: AuditSettings) -> Detection:
    """What `trials` trials per dataset can see against the certificate at the run's delta (the verdict's)."""
    return detection(trials, certified_eps(certificate, settings.delta), delta=float(settings.delta),
                     alpha=settings.alpha)


def seeds_of(settings: AuditSettings) -> tuple[int, list[int], list[list[int]]]:
    """(the base seed, D's trial seeds, each neighbour's): every trial its own seed, drawn at random from the base
    seed, none shared. A seed is public in a seeded release: in order (D's below D'), it alone would tell the
    datasets apart (and TRIAL_FEATURES leaves it out besides)."""
    base = settings.seed if settings.seed is not None else secrets.randbits(40)
    drawn = np.random.default_rng(base).choice(1 << 40, size=settings.trials * (1 + len(settings.kinds)), replace=False)
    seeds = [int(s) for s in drawn]
    n = settings.trials
    return base, seeds[:n], [seeds[(k + 1) * n:(k + 2) * n] for k in range(len(settings.kinds))]


def audit_release(spec, settings: AuditSettings, *, work: Path | None = None) -> dict:
    """The whole-release audit of one command on the neighbours of `settings.kinds`: a report (JSON-ready)."""
    if settings.trials < 2:
        raise ValueError(f"--trials must be at least 2 (half choose the event, half evaluate it), got {settings.trials}")
    unknown = [k for k in settings.kinds if k not in NEIGHBOURS]
    if unknown:
        raise ValueError(f"unknown neighbours {unknown}; known: {', '.join(NEIGHBOURS)}")
    run = command(settings.command, settings.rho)
    base, seeds_d, seeds_p = seeds_of(settings)
    with tempfile.TemporaryDirectory(dir=work) as tmp:
        tmp = Path(tmp)
        persons, units = base_records()
        spec_path = load_run_spec(spec).path
        budget = {"rho": settings.rho, "delta": settings.delta}
        progress = bar(total=1 + len(settings.kinds), desc=f"audit of {settings.command}", unit="dataset")
        side_d = run_side(write_dataset(tmp / "D", spec_path, persons, units, **budget), run, seeds_d, tmp)
        step(progress, logger, f"{settings.command}: {settings.trials} trials on D")
        pairs, noise_sides = [], [side_d]
        for kind, seeds in zip(settings.kinds, seeds_p):
            data = write_dataset(tmp / kind.replace(" ", "_"), spec_path, neighbour(persons, kind), units, **budget)
            side_p = run_side(data, run, seeds, tmp)
            noise_sides.append(side_p)
            pairs.append(audit_pair(kind, side_d, side_p, settings))
            step(progress, logger, f"{settings.command}: {settings.trials} trials on D' ({kind}): {pairs[-1].verdict}")
        progress.close()
    noise = noise_checks(noise_sides, settings.alpha)
    sight = run_detection(settings.trials, side_d.certificate, settings)
    violations = [f"{r.neighbours}: {v}" for r in pairs if r.covered for v in r.violations]
    violations += [f"less noise than certified: {c['release']}/{c['level']}/{c['query']}" for c in noise if not c["ok"]]
    return {"command": settings.command, "spec": load_run_spec(spec).name, "rho": str(settings.rho),
            "delta": str(settings.delta), "trials": settings.trials, "seed": base,
            "certificate": {"rho": str(side_d.certificate.rho), "eps": side_d.certificate.eps},
            "detection": asdict(sight) | {"conclusive": sight.conclusive},
            "pairs": [asdict(r) | {"ok": r.ok} for r in pairs], "noise": noise,
            "ok": all(r.ok for r in pairs) and all(c["ok"] for c in noise), "verdict": sight.verdict(violations)}


def render(report: dict) -> str:
    """A whole-release audit as text: per pair and delta the bound found, the certificate, the detection limit and
    the trials that would reach the certificate; the NMF's noise; what the trials could see; the verdict."""
    lines = [f"whole-release audit of `{report['command']}` on {report['spec']}: rho = {report['rho']}, delta = "
             f"{report['delta']}, {report['trials']} trials per dataset (seed {report['seed']})",
             f"{'neighbours':14s} {'delta':>6s} {'bound':>7s} {'certified':>9s} {'detection limit':>15s} "
             f"{'trials needed':>13s}  feature / verdict"]
    for pair in report["pairs"]:
        for b in pair["bounds"]:
            needed = "-" if b["trials_needed"] is None else f"{b['trials_needed']:,}"
            lines.append(f"{pair['neighbours']:14s} {b['delta']:>6s} {b['eps_lower_bound']:7.3f} "
                         f"{b['eps_certified']:9.4f} {b['detection_limit_eps']:15.3f} {needed:>13s}  "
                         f"{b['feature'] or '-'}")
        lines.append(f"{'':14s} verdict: {pair['verdict']}")
    bad = [c for c in report["noise"] if not c["ok"]]
    lines.append(f"NMF noise: {len(report['noise'])} queries checked against their certified variance; "
                 + ("all as certified" if not bad else "LESS NOISE THAN CERTIFIED: " + ", ".join(
                     f"{c['release']}/{c['level']}/{c['query']} (variance <= {c['variance_upper_bound']:.3g}, "
                     f"certified {c['certified_variance']:.3g})" for c in bad[:5])))
    sight = report["detection"]
    needed = "-" if sight["trials_needed"] is None else f"{sight['trials_needed']:,}"
    lines.append(f"detection limit at {report['trials']:,} trials (delta {report['delta']}): eps "
                 f"{sight['detection_limit_eps']:.3f} beside the certificate's {sight['eps_certified']:.4f} "
                 f"(trials needed to reach it: {needed}); deterministic differences and the NMF's noise are "
                 f"checked at any number of trials")
    lines.append(f"verdict: {report['verdict']}")
    return "\n".join(lines)


def audit_releases_main(spec_path, releases: list[str], *, trials: int = 20, rho=None, delta=None,
                        seed: int | None = None, json_out: bool = False, out=None, overwrite: bool = False) -> int:
    """`das audit-privacy SPEC --release COMMAND ...`: the whole-release audit of each command (`run`, or a
    mechanism of `das synth`); exit 1 on a violation, else 0 (the verdict says whether the trials could show one)."""
    from das.attack.privacy import AUDIT, write_audit
    from das.frame import outdir
    from das.privacy.strategy import parse_fraction

    rho = Fraction(1) if rho is None else parse_fraction(rho, "--rho")
    delta = Fraction(1, 100) if delta is None else parse_fraction(delta, "--delta")
    if not 0 < delta < 1:
        raise ValueError(f"--delta must be strictly between 0 and 1, got {delta}")
    known = ("run", *_mechanism_names())
    unknown = [r for r in releases if r not in known]
    if unknown:
        raise ValueError(f"--release {unknown[0]!r} is not a release command; known: {', '.join(known)}")
    claim = outdir.check(out, AUDIT, overwrite=overwrite, protected=[load_run_spec(spec_path).path]) if out else None
    deltas = tuple(sorted({*DELTAS, delta}))
    reports = [audit_release(spec_path, AuditSettings(name, trials, rho, delta, deltas, seed=seed)) for name in releases]
    text = "\n\n".join(render(r) for r in reports)
    report = {"spec": reports[0]["spec"], "releases": reports, "ok": all(r["ok"] for r in reports),
              "verdict": "; ".join(f"`{r['command']}`: {r['verdict']}" for r in reports)}
    if claim is not None:
        claim.start()
        write_audit(Path(out), report, text, verdict=report["verdict"])
        claim.finish()
    print(json.dumps(report, indent=2, default=str) if json_out else text)
    return 0 if report["ok"] else 1


def _mechanism_names() -> tuple[str, ...]:
    from das.mechanisms import MECHANISMS

    return tuple(MECHANISMS)
