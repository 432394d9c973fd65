"""The privacy certificate of a release as one typed value, exact where privacy depends on it.

A certificate says what a release spent: its total rho and every part of it (per level and query for
TopDown, per charge for a synthetic mechanism), exactly, as `Fraction`s, and the (eps, delta) it
converts to. The manifest, the Parquet metadata, `das privacy` and the validator all read and write
it through this one type; its JSON form ("a/b" strings for exact values, decimals beside them for
people) is `to_dict`, and `from_dict` reads it back or says which field is wrong.

A dict that `from_dict` accepts but that differs from `from_dict(d).to_dict()` was edited: the
decimals beside the exact values are derived from them, never read.

>>> cert = Certificate.from_dict({"schema": "s", "strategy": "t", "levels": ["nation"], "convention": "c",
...     "rho": "1/2", "delta": "1e-10", "eps": 5.0, "eps_loose_bound": 6.0, "conversion": "x", "loose_bound": "y",
...     "randomness": "r", "private": True, "eps_rounding": "up", "by_level": [{"level": "nation", "rho_share": "1",
...     "rho": "1/2", "queries": [{"query": "total", "share": "1", "rho": "1/2", "sigma2": "2"}]}]})
>>> cert.rho, cert.by_level[0].queries[0].sigma2, cert.to_dict()["by_level"][0]["queries"][0]["sigma"]
(Fraction(1, 2), Fraction(2, 1), 1.4142135623730951)
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction

from das.core.errors import DasError


class CertificateError(DasError, ValueError):
    """A certificate that is not readable as one: the field and what was expected."""


def fraction_text(x: Fraction) -> str:
    """ "a/b" (or "a" for an integer): the exact form used in certificates and manifests."""
    return f"{x.numerator}/{x.denominator}" if x.denominator != 1 else str(x.numerator)


def delta_text(delta: Fraction) -> str:
    """ "1e-10" for a power of ten, else the exact "a/b"."""
    k = len(str(delta.denominator)) - 1
    if delta.numerator == 1 and delta.denominator == 10**k and k > 0:
        return f"1e-{k}"
    return fraction_text(delta)


def exact(value, where: str) -> Fraction:
    """An exact value of a certificate ("a/b", "1e-10", an integer), or CertificateError naming `where`."""
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise CertificateError(f"{where}: expected an exact value as a string 'a/b', got {value!r}")
    try:
        return Fraction(value)
    except (ValueError, ZeroDivisionError):
        raise CertificateError(f"{where}: expected an exact value 'a/b', got {value!r}") from None


def _text(data: Mapping, key: str, where: str) -> str:
    value = _field(data, key, where)
    if not isinstance(value, str):
        raise CertificateError(f"{where}.{key}: expected a string, got {value!r}")
    return value


def _number(data: Mapping, key: str, where: str) -> float:
    value = _field(data, key, where)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise CertificateError(f"{where}.{key}: expected a number, got {value!r}")
    return float(value)


def _list(data: Mapping, key: str, where: str) -> list:
    value = _field(data, key, where)
    if not isinstance(value, list):
        raise CertificateError(f"{where}.{key}: expected a list, got {type(value).__name__}")
    return value


def _field(data: Mapping, key: str, where: str):
    if not isinstance(data, Mapping):
        raise CertificateError(f"{where}: expected an object, got {type(data).__name__}")
    if key not in data:
        raise CertificateError(f"{where}: field {key!r} is missing")
    return data[key]


def _rho(data: Mapping, where: str, *, synthetic: bool) -> Fraction | None:
    """A certificate's rho; only a mechanism's (with charges) may state none (it is (eps, delta)-DP directly)."""
    return None if synthetic and "rho" not in data else exact(_field(data, "rho", where), f"{where}.rho")


@dataclass(frozen=True)
class Measurement:
    """One query measured at one level, from allocation to NMF to certificate to validator: its share of the
    level's rho, its exact rho and its noise variance (1/rho as allocated; a published one is read as stated,
    so that the validator can hold it to 1/rho)."""

    level: str
    query: str
    share: Fraction
    rho: Fraction
    sigma2: Fraction

    @classmethod
    def allocated(cls, level: str, query: str, share: Fraction, rho: Fraction) -> Measurement:
        """The measurement rho buys: discrete Gaussian noise of variance 1/rho (das.privacy.accounting.CONVENTION)."""
        return cls(level, query, share, rho, 1 / rho)

    @property
    def sigma(self) -> float:
        return math.sqrt(self.sigma2)

    def to_dict(self) -> dict:
        """Its certificate entry (the level is the enclosing one's)."""
        return {"query": self.query, "share": fraction_text(self.share), "rho": fraction_text(self.rho),
                "rho_decimal": float(self.rho), "sigma2": fraction_text(self.sigma2),
                "sigma2_decimal": float(self.sigma2), "sigma": self.sigma}

    @classmethod
    def from_dict(cls, data: Mapping, where: str, *, level: str) -> Measurement:
        return cls(level, _text(data, "query", where), exact(_field(data, "share", where), f"{where}.share"),
                   exact(_field(data, "rho", where), f"{where}.rho"),
                   exact(_field(data, "sigma2", where), f"{where}.sigma2"))


@dataclass(frozen=True)
class LevelCharges:
    """A level's share of the total rho, its rho, and its queries' charges."""

    level: str
    rho_share: Fraction
    rho: Fraction
    queries: tuple[Measurement, ...]

    def to_dict(self) -> dict:
        return {"level": self.level, "rho_share": fraction_text(self.rho_share), "rho": fraction_text(self.rho),
                "rho_decimal": float(self.rho), "queries": [q.to_dict() for q in self.queries]}

    @classmethod
    def from_dict(cls, data: Mapping, where: str) -> LevelCharges:
        queries, level = _list(data, "queries", where), _text(data, "level", where)
        return cls(level, exact(_field(data, "rho_share", where), f"{where}.rho_share"),
                   exact(_field(data, "rho", where), f"{where}.rho"),
                   tuple(Measurement.from_dict(q, f"{where}.queries[{i}]", level=level) for i, q in enumerate(queries)))


@dataclass(frozen=True)
class Charge:
    """One step of a synthetic mechanism (das.mechanisms.base.Ledger): where it runs, what it is, its
    rho (None: a step of a mechanism that is (eps, delta)-DP directly, which charges no rho and states its
    eps), its noise, and the parameters it states (exact ones as "a/b" text)."""

    scope: str
    step: str
    rho: Fraction | None
    noise: str
    parameters: Mapping[str, object] = field(default_factory=dict)

    def to_dict(self) -> dict:
        rho = {} if self.rho is None else {"rho": fraction_text(self.rho), "rho_decimal": float(self.rho)}
        return {"scope": self.scope, "step": self.step, **rho, "noise": self.noise, **self.parameters}

    @classmethod
    def from_dict(cls, data: Mapping, where: str) -> Charge:
        known = ("scope", "step", "rho", "rho_decimal", "noise")
        return cls(_text(data, "scope", where), _text(data, "step", where),
                   exact(data["rho"], f"{where}.rho") if "rho" in data else None, _text(data, "noise", where),
                   {k: v for k, v in data.items() if k not in known})


@dataclass(frozen=True)
class Certificate:
    """A release's privacy certificate: rho exactly and its parts, (eps, delta), and how they were derived.

    TopDown releases list their charges by level (`by_level`); synthetic mechanisms list each charge
    (`charges`) against a `budget`, with the delta their approximate-DP steps use (`delta_parts`). A
    mechanism that is (eps, delta)-DP directly spends no rho: its certificate states none (`rho` None).
    """

    schema: str
    strategy: str
    levels: tuple[str, ...]
    convention: str
    rho: Fraction | None
    delta: Fraction
    eps: float
    eps_loose_bound: float
    conversion: str
    loose_bound: str
    randomness: str
    private: bool
    eps_rounding: str
    by_level: tuple[LevelCharges, ...] = ()
    warning: str | None = None
    mechanism: str | None = None  # a synthetic release: the mechanism's name
    budget: Fraction | None = None
    delta_parts: Mapping[str, Fraction] | None = None
    charges: tuple[Charge, ...] | None = None

    @property
    def synthetic(self) -> bool:
        return self.charges is not None

    def queries_by_level(self, levels) -> dict[str, list[str]]:
        """The queries measured at each of `levels` (none where it measured nothing, and for a synthetic release)."""
        measured = {lv.level: [q.query for q in lv.queries] for lv in self.by_level}
        return {level: measured.get(level, []) for level in levels}

    def level(self, name: str) -> LevelCharges:
        for level in self.by_level:
            if level.level == name:
                return level
        raise KeyError(f"the certificate measures nothing at level {name!r}")

    def summary(self) -> dict:
        """What every Parquet output carries of it (das.frame.bundle.parquet_metadata)."""
        rho = {} if self.rho is None else {"rho": fraction_text(self.rho)}
        return {**rho, "eps": self.eps, "delta": delta_text(self.delta), "schema": self.schema,
                "strategy": self.strategy, "convention": self.convention}

    def to_dict(self) -> dict:
        """The JSON form, in the manifest's key order."""
        out: dict = {"schema": self.schema, "strategy": self.strategy}
        if self.mechanism is not None:
            out["mechanism"] = self.mechanism
        out |= {"levels": list(self.levels), "convention": self.convention}
        if self.budget is not None:
            out["budget"] = fraction_text(self.budget)
        if self.rho is not None:
            out |= {"rho": fraction_text(self.rho), "rho_decimal": float(self.rho)}
        out["delta"] = delta_text(self.delta)
        if self.delta_parts is not None:
            out["delta_parts"] = {k: fraction_text(v) for k, v in self.delta_parts.items()}
        out |= {"eps": self.eps, "eps_rounding": self.eps_rounding, "eps_loose_bound": self.eps_loose_bound,
                "conversion": self.conversion, "loose_bound": self.loose_bound, "randomness": self.randomness,
                "private": self.private}
        if self.charges is not None:
            out["charges"] = [c.to_dict() for c in self.charges]
        out["by_level"] = [lv.to_dict() for lv in self.by_level]
        if self.warning is not None:
            out["warning"] = self.warning
        return out

    @classmethod
    def from_dict(cls, data: Mapping, where: str = "certificate") -> Certificate:
        """The certificate a JSON object states, or CertificateError naming the field and what was expected."""
        levels = _list(data, "levels", where)
        if not all(isinstance(v, str) for v in levels):
            raise CertificateError(f"{where}.levels: expected a list of level names, got {levels!r}")
        private = _field(data, "private", where)
        if not isinstance(private, bool):
            raise CertificateError(f"{where}.private: expected true or false, got {private!r}")
        charges = data.get("charges")
        if charges is not None and not isinstance(charges, list):
            raise CertificateError(f"{where}.charges: expected a list, got {type(charges).__name__}")
        parts = data.get("delta_parts")
        if parts is not None and not isinstance(parts, Mapping):
            raise CertificateError(f"{where}.delta_parts: expected an object, got {type(parts).__name__}")
        warning, mechanism = data.get("warning"), data.get("mechanism")
        for key, value in (("warning", warning), ("mechanism", mechanism)):
            if value is not None and not isinstance(value, str):
                raise CertificateError(f"{where}.{key}: expected a string, got {value!r}")
        return cls(
            schema=_text(data, "schema", where), strategy=_text(data, "strategy", where), levels=tuple(levels),
            convention=_text(data, "convention", where), rho=_rho(data, where, synthetic=charges is not None),
            delta=exact(_field(data, "delta", where), f"{where}.delta"), eps=_number(data, "eps", where),
            eps_loose_bound=_number(data, "eps_loose_bound", where), conversion=_text(data, "conversion", where),
            loose_bound=_text(data, "loose_bound", where), randomness=_text(data, "randomness", where),
            private=private, eps_rounding=_text(data, "eps_rounding", where),
            by_level=tuple(LevelCharges.from_dict(lv, f"{where}.by_level[{i}]")
                           for i, lv in enumerate(_list(data, "by_level", where))),
            warning=warning, mechanism=mechanism,
            budget=exact(data["budget"], f"{where}.budget") if "budget" in data else None,
            delta_parts=None if parts is None else {str(k): exact(v, f"{where}.delta_parts.{k}") for k, v in parts.items()},
            charges=None if charges is None else tuple(Charge.from_dict(c, f"{where}.charges[{i}]")
                                                       for i, c in enumerate(charges)),
        )
