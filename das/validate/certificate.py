"""`charges_sum_to_rho`: each release's certificate adds up (a synthetic release's claim, das synth): its
charges are positive exact fractions summing exactly to its rho, within its budget, and its delta parts
sum exactly to its delta."""

from __future__ import annotations

from fractions import Fraction

from das.validate.registry import Check
from das.validate.release import Release
from das.validate.report import Report, first


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
