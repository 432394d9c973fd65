"""The privacy claim, proved from the files.

`charges_sum_to_rho` (a synthetic release's claim, das synth): its certificate's charges are positive exact
fractions summing exactly to its rho, within its budget, and its delta parts sum exactly to its delta.

`certificate` (every release): a TopDown release's certificates add up (rho per level and per query sum
exactly to the total, each query's variance is exactly 1/its rho, eps is re-derived from rho and delta)
and are exactly what das.privacy.accounting certifies for the strategy, budget and delta of its spec (the
manifest's spec_text) at its levels; a synthetic release's charges each have the rho their stated
parameters give (das.mechanisms.base.Ledger), and its eps is re-derived from rho and the delta its steps
leave, or, certified at the mechanism's own (eps, delta), its steps compose to that pair. What each Parquet
file says of the certificate is das.validate.files'.
"""

from __future__ import annotations

import tomllib
from fractions import Fraction

from das.privacy.accounting import certificate, eps_for_delta, eps_loose, rho_for_eps, stability_threshold
from das.privacy.certificate import CertificateError, delta_text, exact, fraction_text
from das.privacy.strategy import BudgetError, load_strategy, parse_fraction
from das.runspec import DEFAULT_DELTA
from das.schema import SpecError, load_schema
from das.validate.registry import Check
from das.validate.release import Release
from das.validate.report import Report, ValidationError, first

CONVERSION_PART = "zCDP conversion"  # the delta left for converting rho-zCDP to (eps, delta) (mechanism_certificate)


def check_charges(release: Release, parts, report: Report, alongside=None) -> None:
    """The certificate of every release of the manifest, added up exactly."""
    problems = []
    for name, cert in release.manifest.privacy.items():
        charges = [c.rho for c in cert.charges or ()]
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


def _spec(release: Release) -> dict:
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


def recomputed(release: Release, name: str):
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
        strategy = load_strategy(info.strategy)
        schema_name = load_schema(info.schema).name  # a spec may name its schema by a path
    except SpecError as e:
        raise ValidationError(f"{release.run.manifest_path}: {name} strategy or schema: {e}") from None
    try:
        delta = _spec_delta(spec)
        rho = parse_fraction(section["rho"], f"[{name}] rho") if "rho" in section else None
        if rho is None and "eps" in section:  # the budget as eps at delta: the largest rho certified within it
            rho = rho_for_eps(parse_fraction(section["eps"], f"[{name}] eps"), delta)
        return certificate(strategy, rho, delta, release.manifest.levels, schema_name=schema_name,
                           randomness_private=release.manifest.private)
    except (SpecError, BudgetError) as e:
        raise CertificateError(f"spec_text: {e}") from None


def check_topdown(release: Release, report: Report) -> None:
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


# A charge whose stated parameters determine its rho (das.mechanisms.base.Ledger): noise -> (parameter, rho of it)
EXPONENTIAL_PER_GEOUNIT = "2 x"  # a per-geounit selection charged twice (releases written before eps^2/8 sufficed)


def _stated(charge, key: str) -> Fraction:
    value = exact(charge.parameters[key], key)
    if value <= 0:
        raise CertificateError(f"{key} {value} is not positive")
    return value


def charge_rho(charge) -> Fraction | None:
    """The rho a charge's stated parameters give (None: they do not determine it): a discrete Gaussian
    stating only its variance, 1/sigma2; an exponential-mechanism selection, eps^2/8 (twice that when
    run per geounit); a discrete Laplace (eps, delta) step, eps^2/2. CertificateError: a parameter
    that is not an exact positive value."""
    parameters = charge.parameters
    if charge.noise == "discrete Gaussian" and "sigma2" in parameters and "cost" not in parameters:
        return 1 / _stated(charge, "sigma2")
    if charge.noise == "exponential mechanism" and "eps" in parameters:
        twice = str(parameters.get("cost", "")).startswith(EXPONENTIAL_PER_GEOUNIT)
        return _stated(charge, "eps") ** 2 / 8 * (2 if twice else 1)
    if charge.noise == "discrete Laplace" and "eps" in parameters:
        return _stated(charge, "eps") ** 2 / 2
    return None


def direct_problems(name: str, cert) -> list[str]:
    """A certificate at a mechanism's own (eps, delta) (no zCDP conversion: das.mechanisms.base.DirectGuarantee):
    its steps are discrete Laplace, each of scale 2/its eps (L1 sensitivity 2), their eps summing exactly to the
    certificate's (basic composition); a thresholded step's T is at least what its delta needs
    (stability_threshold); each charge is the nominal rho's share as of eps; and the pair is no weaker than
    the one rho certifies for a zCDP release at the same delta."""
    problems, total = [], Fraction(0)
    eps = Fraction(repr(cert.eps))
    for i, charge in enumerate(cert.charges or ()):
        where, parameters = f"{name} charges[{i}] ({charge.step})", charge.parameters
        if charge.noise != "discrete Laplace" or "eps" not in parameters or "laplace_scale" not in parameters:
            problems.append(f"{where}: a certificate at its own (eps, delta) composes discrete Laplace steps stating "
                            f"eps and laplace_scale, not {charge.noise}")
            continue
        try:
            step_eps, scale = _stated(charge, "eps"), _stated(charge, "laplace_scale")
            if "threshold" in parameters:
                T, step_delta = int(parameters["threshold"]), _stated(charge, "delta")
                if T < stability_threshold(step_eps / 2, step_delta):
                    problems.append(f"{where}: threshold {T} is below the {stability_threshold(step_eps / 2, step_delta)} "
                                    f"that eps {fraction_text(step_eps)} needs for delta {delta_text(step_delta)}")
        except (CertificateError, TypeError, ValueError) as e:
            problems.append(f"{where}: {e}")
            continue
        total += step_eps
        if scale != 2 / step_eps:
            problems.append(f"{where}: laplace_scale {fraction_text(scale)} is not 2/eps = {fraction_text(2 / step_eps)}")
        if eps > 0 and charge.rho != cert.rho * step_eps / eps:
            problems.append(f"{where}: rho {fraction_text(charge.rho)} is not the nominal rho's share as of eps, "
                            f"{fraction_text(cert.rho * step_eps / eps)}")
    if total != eps:
        problems.append(f"{name}: the steps' eps sum to {fraction_text(total)}, the certificate says {cert.eps}")
    if cert.rho <= 0 or not 0 < cert.delta < 1:
        return problems + [f"{name}: rho {cert.rho} and delta {cert.delta} certify nothing"]
    if cert.eps > eps_for_delta(cert.rho, cert.delta):
        problems.append(f"{name}: eps {cert.eps} at delta {delta_text(cert.delta)} is weaker than the "
                        f"{eps_for_delta(cert.rho, cert.delta)} rho {fraction_text(cert.rho)} certifies")
    return problems


def synthetic_problems(release: Release, name: str, cert) -> list[str]:
    """A synthetic certificate: each charge's parameters give its rho; the mechanism, schema, levels, budget
    and delta are the release's; eps is re-derived from rho and the delta its steps leave (or, at the
    mechanism's own (eps, delta), `direct_problems`)."""
    manifest, problems = release.manifest, []
    mechanism = manifest.mechanism
    parts = dict(cert.delta_parts or {})
    direct = CONVERSION_PART not in parts
    for i, charge in enumerate(() if direct else cert.charges or ()):
        try:
            rho = charge_rho(charge)
        except CertificateError as e:
            problems.append(f"{name} charges[{i}] ({charge.step}): {e}")
            continue
        if rho is not None and rho != charge.rho:
            problems.append(f"{name} charges[{i}] ({charge.step}): rho {fraction_text(charge.rho)}, its "
                            f"{charge.noise} parameters give {fraction_text(rho)}")
    stated = (cert.mechanism, cert.strategy, cert.schema, tuple(cert.levels), cert.budget, cert.by_level)
    release_says = (mechanism.name, f"mechanism {mechanism.name}", manifest.persons.schema, tuple(manifest.levels),
                    mechanism.budget, ())
    for what, got, want in zip(("mechanism", "strategy", "schema", "levels", "budget", "by_level"), stated, release_says):
        if got != want:
            problems.append(f"{name}: {what} {got!r}, the release's is {want!r}")
    try:
        delta = _spec_delta(_spec(release))
    except CertificateError as e:
        problems.append(f"{name}: {e}")
    else:
        if cert.delta != delta:
            problems.append(f"{name}: delta {delta_text(cert.delta)}, the spec's is {delta_text(delta)}")
    if direct:
        return problems + direct_problems(name, cert)
    left = cert.delta - sum((v for k, v in parts.items() if k != CONVERSION_PART), Fraction(0))
    if parts.get(CONVERSION_PART, left) != left:
        problems.append(f"{name}: the delta of the zCDP conversion is {parts[CONVERSION_PART]}, its steps leave {left}")
    return problems + _eps_problems(name, cert, left)


def check_synthetic(release: Release, report: Report) -> None:
    problems = []
    for name in release.manifest.releases():
        if name not in release.manifest.privacy:
            problems.append(f"{name}: no certificate (privacy.{name})")
        else:
            problems += synthetic_problems(release, name, release.manifest.privacy[name])
    report.check("certificate: each charge's parameters give its rho, eps is re-derived from rho and the delta its "
                 "steps leave", first(problems))


def check_certificate(release: Release, parts, report: Report, alongside=None) -> None:
    """The privacy claim, from the files: a TopDown release's certificates recomputed, a synthetic one's charges."""
    if release.topdown:
        check_topdown(release, report)
    else:
        check_synthetic(release, report)


CERTIFICATE = Check("certificate", check_certificate, claim=None, always=True, nmf=True)
