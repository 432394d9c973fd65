"""The privacy claim, proved from the files.

`charges_sum_to_rho` (a synthetic release's claim, das synth): its certificate's charges are positive exact
fractions summing exactly to its rho, within its budget, and its delta parts sum exactly to its delta.

`certificate` (every release): a TopDown release's certificates add up (rho per level and per query sum
exactly to the total, each query's variance is exactly 1/its rho, eps is re-derived from rho and delta)
and are exactly what das.privacy.accounting certifies for the strategy, budget and delta of its spec (the
manifest's spec_text) at its levels; a synthetic release's certificate and its mechanism's record are
exactly what its mechanism plans (the same code `das synth` ran: das.mechanisms.base.Mechanism.plan) from the
budget and delta of its published spec and the public parameters of its details, every charge, rho,
(eps, delta) and its guarantee (the certificate's convention). The run's total guarantee (the manifest's
`guarantee`) is its releases' certificates composed again (das.privacy.guarantee). What each Parquet file
says of the certificate is das.validate.files'.
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Mapping
from fractions import Fraction

from das.core.errors import BudgetError, SpecError, ValidationError
from das.driver.runspec import DEFAULT_DELTA
from das.frame import pinned
from das.mechanisms.base import Ledger, MechanismError, Public, mechanism_certificate
from das.mechanisms.registry import MECHANISMS
from das.privacy.accounting import allocate, certificate, eps_for_delta, eps_loose, rho_for_eps
from das.privacy.certificate import CertificateError, delta_text, exact, fraction_text
from das.privacy.guarantee import combined
from das.privacy.strategy import parse_fraction
from das.validate.registry import Check
from das.validate.release import OpenRelease
from das.validate.report import Report, first

CONVERSION_PART = "zCDP conversion"  # the delta left for converting rho-zCDP to (eps, delta) (mechanism_certificate)


def check_charges(release: OpenRelease, parts, report: Report, alongside=None) -> None:
    """The certificate of every release of the manifest, added up exactly."""
    problems = []
    for name, cert in release.manifest.privacy.items():
        if cert.rho is None:  # a mechanism at its own (eps, delta): it charges no rho
            problems += _direct_sums(name, cert)
            continue
        charges = [c.rho for c in cert.charges or ()]
        if any(c is None for c in charges):
            problems.append(f"{name}: a charge states no rho, though the certificate states rho = {cert.rho}")
            continue
        rho, budget, delta = cert.rho, cert.budget if cert.budget is not None else cert.rho, cert.delta
        delta_parts = list((cert.delta_parts or {}).values())
        if not charges:
            problems.append(f"{name}: the certificate lists no charges")
        if any(c <= 0 for c in charges):
            problems.append(f"{name}: a charge is not positive")
        if sum(charges, Fraction(0)) != rho:
            problems.append(f"{name}: the charges sum to {sum(charges, Fraction(0))}, the certificate says rho = {rho}")
        if rho > budget:
            problems.append(f"{name}: rho {rho} is over the budget {budget}")
        if delta_parts and sum(delta_parts, Fraction(0)) != delta:
            problems.append(f"{name}: the delta parts sum to {sum(delta_parts, Fraction(0))}, not delta = {delta}")
    report.check("certificate: charges sum exactly to rho", first(problems))


def _direct_sums(name: str, cert) -> list[str]:
    """A certificate at a mechanism's own (eps, delta) adds up: no charge states a rho, each states an eps, their
    eps sum exactly to the certificate's (basic composition), its delta parts exactly to its delta."""
    charges, problems = cert.charges or (), []
    if not charges or any(c.rho is not None or "eps" not in c.parameters for c in charges):
        return [f"{name}: a certificate without rho lists steps that each state an eps and no rho"]
    try:
        total = sum((exact(c.parameters["eps"], f"{name} charges eps") for c in charges), Fraction(0))
    except CertificateError as e:
        return [str(e)]
    if total != Fraction(repr(cert.eps)):
        problems.append(f"{name}: the steps' eps sum to {fraction_text(total)}, the certificate says eps = {cert.eps}")
    if sum((cert.delta_parts or {}).values(), Fraction(0)) != cert.delta:
        problems.append(f"{name}: the delta parts do not sum to delta = {delta_text(cert.delta)}")
    return problems


CHARGES = Check("charges_sum_to_rho", check_charges)


# ---------------------------------------------------------------------------------------------
# The privacy claim, proved from the files (every release)


DERIVED = ("rho_decimal", "sigma2_decimal", "sigma")  # a certificate's decimals, derived from its exact values


def _differences(got, want, path: str) -> list[str]:
    """Where two certificates' JSON forms differ, as 'path: X, expected Y' (the decimals derived from exact
    values aside: the exact values' difference is named)."""
    if isinstance(got, dict) and isinstance(want, dict):
        out = [f"{path}.{k}: missing" for k in want if k not in got]
        out += [f"{path}.{k}: not expected here" for k in got if k not in want]
        return out + [d for k in want if k in got and k not in DERIVED for d in _differences(got[k], want[k], f"{path}.{k}")]
    if isinstance(got, list) and isinstance(want, list):
        if len(got) != len(want):
            return [f"{path}: {len(got)} entries, expected {len(want)}"]
        return [d for i, (g, w) in enumerate(zip(got, want)) for d in _differences(g, w, f"{path}[{i}]")]
    return [] if got == want and type(got) is type(want) else [f"{path}: {got!r}, expected {want!r}"]


def _eps_problems(name: str, cert, delta: Fraction) -> list[str]:
    """eps (and the loose bound beside it) re-derived from rho and `delta`, exactly as certified."""
    if cert.rho <= 0 or not 0 < delta < 1:
        return [f"{name}: rho {cert.rho} and delta {delta} certify nothing (rho > 0 and 0 < delta < 1 expected)"]
    eps, loose = eps_for_delta(cert.rho, delta), eps_loose(cert.rho, delta)
    return ([f"{name}: eps is {cert.eps}; rho {fraction_text(cert.rho)} at delta {delta_text(delta)} gives {eps}"]
            if cert.eps != eps else []) + ([f"{name}: eps_loose_bound is {cert.eps_loose_bound}, expected {loose}"]
                                           if cert.eps_loose_bound != loose else [])


def topdown_arithmetic(name: str, cert, levels) -> list[str]:
    """A TopDown certificate adds up: shares sum to 1, each query's rho is the total x its level's share x
    its share, its variance exactly 1/its rho, the levels' and queries' rho sum exactly to the total."""
    problems = []
    if tuple(lv.level for lv in cert.by_level) != tuple(levels):
        problems.append(f"{name}: measures levels {[lv.level for lv in cert.by_level]}, the release's are {list(levels)}")
    if sum((lv.rho_share for lv in cert.by_level), Fraction(0)) != 1:
        problems.append(f"{name}: the levels' rho_share sum to {sum((lv.rho_share for lv in cert.by_level), Fraction(0))}, not 1")
    for lv in cert.by_level:
        if sum((q.share for q in lv.queries), Fraction(0)) != 1:
            problems.append(f"{name} {lv.level}: the queries' shares sum to {sum((q.share for q in lv.queries), Fraction(0))}")
        for q in lv.queries:
            if q.rho != cert.rho * lv.rho_share * q.share:
                problems.append(f"{name} {lv.level}/{q.query}: rho {fraction_text(q.rho)} is not rho x rho_share x share "
                                f"= {fraction_text(cert.rho * lv.rho_share * q.share)}")
            if q.rho <= 0 or q.sigma2 != 1 / q.rho:
                problems.append(f"{name} {lv.level}/{q.query}: variance {fraction_text(q.sigma2)} is not 1/rho")
        if lv.rho != sum((q.rho for q in lv.queries), Fraction(0)):
            problems.append(f"{name} {lv.level}: rho {fraction_text(lv.rho)} is not the sum of its queries' rho")
    if sum((lv.rho for lv in cert.by_level), Fraction(0)) != cert.rho:
        problems.append(f"{name}: the levels' rho sum to {sum((lv.rho for lv in cert.by_level), Fraction(0))}, "
                        f"not rho = {fraction_text(cert.rho)}")
    return problems + _eps_problems(name, cert, cert.delta)


def _spec(release: OpenRelease) -> dict:
    """The release's run spec as the manifest publishes it (its spec_text), parsed; CertificateError if not."""
    if not release.manifest.spec_text:
        raise CertificateError("the manifest holds no spec_text: the certificate cannot be recomputed")
    try:
        return tomllib.loads(release.manifest.spec_text)
    except tomllib.TOMLDecodeError as e:
        raise CertificateError(f"the manifest's spec_text is not a TOML run spec ({e})") from None


def _spec_delta(spec: dict) -> Fraction:
    privacy = spec.get("privacy") or {}
    try:
        if isinstance(privacy, dict) and "delta" not in privacy:
            return DEFAULT_DELTA
        return parse_fraction(privacy.get("delta") if isinstance(privacy, dict) else None, "[privacy] delta")
    except SpecError as e:
        raise CertificateError(f"spec_text: {e}") from None


def _section_rho(section: dict, name: str, delta: Fraction) -> Fraction | None:
    """The budget a release's section of the spec states: its rho, or the largest rho certified within its eps at
    delta; None: the strategy's own (das.driver.pipeline.release_rho, as the run read it)."""
    rho = parse_fraction(section["rho"], f"[{name}] rho") if "rho" in section else None
    if rho is None and "eps" in section:
        rho = rho_for_eps(parse_fraction(section["eps"], f"[{name}] eps"), delta)
    return rho


def recomputed(release: OpenRelease, name: str):
    """The certificate release `name` of a TopDown release gets from its spec (spec_text: its strategy and
    budget, the delta) and the manifest's levels and randomness: what das.privacy.accounting certifies.
    CertificateError: the spec does not say; ValidationError: the strategy is not found."""
    spec = _spec(release)
    section = spec.get(name)
    info = getattr(release.manifest, name, None) if name in ("persons", "units") else None
    if not isinstance(section, dict) or info is None:
        raise CertificateError(f"the spec (spec_text) or the manifest has no [{name}] release")
    if not isinstance(info.strategy, str) or (section.get("schema"), section.get("strategy")) != (info.schema, info.strategy):
        raise CertificateError(f"the manifest's {name} schema and strategy ({info.schema}, {info.strategy}) are not the "
                               f"spec's ({section.get('schema')}, {section.get('strategy')})")
    try:
        strategy = release.manifest.strategy_of(name)  # as the published spec pins it (das.frame.pinned), on any machine
        schema_name = release.manifest.schema_of(name).name
    except SpecError as e:
        raise ValidationError(f"{release.run.manifest_path}: {name} strategy or schema: {e}") from None
    try:
        delta = _spec_delta(spec)
        rho = _section_rho(section, name, delta)
        return certificate(strategy, allocate(strategy, rho), delta, release.manifest.levels, schema_name=schema_name,
                           randomness_private=release.manifest.private)
    except (SpecError, BudgetError) as e:
        raise CertificateError(f"spec_text: {e}") from None


def check_topdown(release: OpenRelease, report: Report) -> None:
    """Every certificate of a TopDown release adds up, and is what its spec's strategy and budget give."""
    manifest, arithmetic, spec = release.manifest, [], []
    if manifest.seed is not None and manifest.private:
        spec.append(f"the manifest says private, but records seed {manifest.seed} (seeded noise is not private)")
    for name in manifest.releases():
        if name not in manifest.privacy:
            arithmetic.append(f"{name}: no certificate (privacy.{name})")
            continue
        cert = manifest.privacy[name]
        arithmetic += topdown_arithmetic(name, cert, manifest.levels)
        try:
            want = recomputed(release, name)
        except CertificateError as e:
            spec.append(f"{name}: {e}")
            continue
        spec += _differences(cert.to_dict(), want.to_dict(), f"privacy.{name}")
    report.check("certificate: rho per level and per query sums exactly to the total, each variance is exactly 1/its "
                 "rho, eps is re-derived from rho and delta", first(arithmetic))
    report.check("certificate: what the release's strategy, budget and delta give (recomputed from its spec)", first(spec))


def _level(details: Mapping, levels) -> str:
    """The geounit level a mechanism's details say it ran at: one of the release's levels (any of them partitions
    the blocks, so parallel composition holds whichever the public geography chose)."""
    level = details.get("level")
    if not isinstance(level, str) or level not in levels:
        raise CertificateError(f"mechanism.details.level is {level!r}, expected one of the release's levels {list(levels)}")
    return level


def _rounds(details: Mapping, declared: Mapping[str, str]) -> int | None:
    """The rounds a mechanism's details state as a public parameter (MWEM's; AIM's `rounds` are its selections),
    None when it declares none."""
    if not declared.get("rounds", "").startswith("parameter:"):
        return None
    rounds = details.get("rounds")
    if rounds is not None and (isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1):
        raise CertificateError(f"mechanism.details.rounds is {rounds!r}, expected a positive integer")
    return rounds


def _persons_budget(release: OpenRelease, spec: dict) -> tuple[Fraction, Fraction]:
    """(rho, delta) of the persons release as the published spec states them, as `das synth` reads its spec:
    [persons] rho, or the largest rho certified within its eps at delta, or its strategy's own budget."""
    section = spec.get("persons")
    schema = release.manifest.persons.schema
    if not isinstance(section, dict) or section.get("schema") != schema:
        raise CertificateError(f"the spec (spec_text) has no [persons] release of the manifest's schema {schema!r}")
    try:
        delta = _spec_delta(spec)
        rho = _section_rho(section, "persons", delta)
        if rho is None:
            rho = pinned.strategy(release.manifest.spec_text, str(section.get("strategy"))).rho
    except (SpecError, BudgetError) as e:
        raise CertificateError(f"spec_text: {e}") from None
    if rho is None:
        raise CertificateError("spec_text: [persons] states no budget and its strategy has none")
    return rho, delta


def synthetic_plan(release: OpenRelease):
    """What the release's mechanism plans (das.mechanisms.base.Mechanism.plan, the code `das synth` ran) from the
    published spec (spec_text: the persons budget and delta) and its public parameters (mechanism.details: the
    level, MWEM's rounds): (the mechanism, its certificate, its plan). CertificateError: they do not say."""
    manifest = release.manifest
    record = manifest.mechanism
    mechanism = MECHANISMS.get(record.name)
    if mechanism is None:
        raise CertificateError(f"mechanism {record.name!r} is none of das's ({', '.join(MECHANISMS)})")
    rho, delta = _persons_budget(release, _spec(release))
    try:
        schema = manifest.schema_of("persons")
        public = Public(rho, delta, schema, _level(record.details, manifest.levels), _rounds(record.details, mechanism.details))
        ledger = Ledger(rho)
        plan = mechanism.plan(public, ledger)
        cert = mechanism_certificate(mechanism, schema, manifest.levels, ledger, delta=delta, private=manifest.private)
    except (SpecError, MechanismError, BudgetError) as e:
        raise CertificateError(f"{mechanism.name}: {e}") from None
    return mechanism, cert, plan


def synthetic_problems(release: OpenRelease, name: str, cert) -> list[str]:
    """A synthetic certificate and the mechanism's record, against what its mechanism plans again from the
    published spec and its public parameters (`synthetic_plan`): every charge, rho, (eps, delta), the convention
    (the mechanism's own guarantee), the budget, summary and geography, and each planned detail, exactly."""
    manifest, problems = release.manifest, []
    if manifest.seed is not None and manifest.private:
        problems.append(f"the manifest says private, but records seed {manifest.seed} (seeded noise is not private)")
    try:
        mechanism, want, plan = synthetic_plan(release)
    except CertificateError as e:
        return problems + [f"{name}: {e}"]
    problems += _differences(cert.to_dict(), want.to_dict(), f"privacy.{name}")
    record = manifest.mechanism
    for what, got, expected in (("budget", record.budget, want.budget), ("summary", record.summary, mechanism.summary),
                                ("geography", record.geography, mechanism.geography)):
        if got != expected:
            problems.append(f"mechanism.{what}: {got!r}, {mechanism.name}'s is {expected!r}")
    for key, value in json.loads(json.dumps(dict(plan.details))).items():  # as published (JSON)
        if record.details.get(key) != value:
            problems.append(f"mechanism.details.{key}: {record.details.get(key)!r}, its plan gives {value!r}")
    undeclared = sorted(set(record.details) - set(mechanism.details))
    if undeclared:
        problems.append(f"mechanism.details: {undeclared} are not details {mechanism.name} declares")
    return problems


def check_synthetic(release: OpenRelease, report: Report) -> None:
    problems = []
    for name in release.manifest.releases():
        if name not in release.manifest.privacy:
            problems.append(f"{name}: no certificate (privacy.{name})")
        else:
            problems += synthetic_problems(release, name, release.manifest.privacy[name])
    report.check("certificate: the mechanism's charges, rho, (eps, delta) and guarantee, planned again from the "
                 "published spec and its public parameters", first(problems))


def guarantee_problems(manifest) -> list[str]:
    """The manifest's total guarantee against its releases' certificates composed again (das.privacy.guarantee),
    exactly: a missing or edited figure is named."""
    certificates = {name: manifest.privacy[name] for name in manifest.releases() if name in manifest.privacy}
    if not certificates:
        return ["guarantee: the manifest holds no certificate to compose"]
    want = combined(certificates)
    if manifest.guarantee is None:
        return [f"guarantee: missing; its releases composed give {want.text()}"]
    return _differences(manifest.guarantee.to_dict(), want.to_dict(), "guarantee")


def check_certificate(release: OpenRelease, parts, report: Report, alongside=None) -> None:
    """The privacy claim, from the files: a TopDown release's certificates recomputed, a synthetic one's charges;
    then the run's total guarantee, its releases' certificates composed."""
    if release.topdown:
        check_topdown(release, report)
    else:
        check_synthetic(release, report)
    report.check("certificate: the run's total guarantee is its releases' certificates composed (zCDP: rho adds; "
                 "recomputed exactly)", first(guarantee_problems(release.manifest)))


CERTIFICATE = Check("certificate", check_certificate, claim=None, always=True, nmf=True)
