"""A run's total guarantee: its releases (persons, and units for TopDown) composed into one figure.

A record can move in every release of a run (a person in the persons histogram, the unit they live in in
the units histogram), so the protection of the whole run is the releases' guarantees composed:

- zCDP composition when every release is rho-zCDP at the run's delta: rho_total is the exact sum of the
  releases' rho, converted to (eps, delta) at that delta by the same tight conversion as each release
  (das.privacy.accounting.eps_for_delta), so `--eps 1 --delta 1e-5` for the persons and the units' own
  budget give one eps for the run, below the sum of the two eps;
- basic composition otherwise (a release that is (eps, delta)-DP directly, or one whose delta is split
  between steps): eps and delta add, exactly;
- one release: its own guarantee.

The manifest states it (`guarantee`), das validate recomputes it exactly from the certificates, and
`das privacy`, the run summary and `das.Release.guarantee` show it beside each release's.

>>> from das.privacy.certificate import Certificate
>>> part = dict(schema="s", strategy="t", levels=("nation",), convention="c", eps_loose_bound=0.0, conversion="x",
...             loose_bound="y", randomness="r", private=True, eps_rounding="up")
>>> total = combined({"persons": Certificate(**part, rho=Fraction(1, 2), delta=Fraction(1, 10**10), eps=6.8394),
...                   "units": Certificate(**part, rho=Fraction(1, 4), delta=Fraction(1, 10**10), eps=4.697)})
>>> total.rho, total.eps, total.composition.split(":")[0]
(Fraction(3, 4), 8.5494, 'zCDP composition')
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction

from das.privacy.accounting import eps_for_delta
from das.privacy.certificate import Certificate, CertificateError, delta_text, exact, fraction_text

ZCDP = ("zCDP composition: rho adds over the releases (each record may change in every one of them), and the total "
        "rho is converted to eps at the run's delta as each release's is")
BASIC = "basic composition: eps and delta add over the releases"
ONE = "one release: its own guarantee"


@dataclass(frozen=True)
class Guarantee:
    """The guarantee of a run's releases together: which releases, how they compose, rho (exact; None when
    a part states none), delta (exact) and eps (rounded up as every certificate's)."""

    releases: tuple[str, ...]
    composition: str
    rho: Fraction | None
    delta: Fraction
    eps: float

    def to_dict(self) -> dict:
        rho = {} if self.rho is None else {"rho": fraction_text(self.rho), "rho_decimal": float(self.rho)}
        return {"releases": list(self.releases), "composition": self.composition, **rho,
                "delta": delta_text(self.delta), "eps": self.eps}

    @classmethod
    def from_dict(cls, data, where: str = "guarantee") -> Guarantee:
        """The guarantee a JSON object states, or CertificateError naming the field and what was expected."""
        if not isinstance(data, Mapping):
            raise CertificateError(f"{where}: expected an object, got {type(data).__name__}")
        missing = [k for k in ("releases", "composition", "delta", "eps") if k not in data]
        if missing:
            raise CertificateError(f"{where}: field {missing[0]!r} is missing")
        releases, eps = data["releases"], data["eps"]
        if not isinstance(releases, list) or not all(isinstance(r, str) for r in releases):
            raise CertificateError(f"{where}.releases: expected a list of release names, got {releases!r}")
        if not isinstance(data["composition"], str):
            raise CertificateError(f"{where}.composition: expected a string, got {data['composition']!r}")
        if isinstance(eps, bool) or not isinstance(eps, (int, float)):
            raise CertificateError(f"{where}.eps: expected a number, got {eps!r}")
        rho = exact(data["rho"], f"{where}.rho") if "rho" in data else None
        return cls(tuple(releases), data["composition"], rho, exact(data["delta"], f"{where}.delta"), float(eps))

    def text(self) -> str:
        """One line: "rho R (= x), eps E at delta D (persons + units, zCDP composition)"."""
        rho = "" if self.rho is None else f"rho {fraction_text(self.rho)} (= {float(self.rho):.4f}), "
        return (f"{rho}eps {self.eps} at delta {delta_text(self.delta)} ({' + '.join(self.releases)}, "
                f"{self.composition.split(':')[0]})")


def combined(certificates: Mapping[str, Certificate]) -> Guarantee:
    """The guarantee of the releases of `certificates` together (release name -> certificate), exact: see the
    module's rules. ValueError for no release."""
    if not certificates:
        raise ValueError("no release to compose")
    names = tuple(certificates)
    parts = list(certificates.values())
    if len(parts) == 1:
        (cert,) = parts
        return Guarantee(names, ONE, cert.rho, cert.delta, cert.eps)
    deltas = {c.delta for c in parts}
    if all(c.rho is not None and not c.delta_parts for c in parts) and len(deltas) == 1:
        rho, (delta,) = sum((c.rho for c in parts), Fraction(0)), deltas
        return Guarantee(names, ZCDP, rho, delta, eps_for_delta(rho, delta))
    eps = sum((Fraction(repr(c.eps)) for c in parts), Fraction(0))  # each a decimal: their sum exactly
    return Guarantee(names, BASIC, None, sum((c.delta for c in parts), Fraction(0)), float(eps))
