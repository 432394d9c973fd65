"""Exact zero-concentrated DP accounting (rho-zCDP) with `Fraction`s end to end.

Convention: bounded neighbours (datasets differ by changing one record), so a marginal query
(a count vector) has squared L2 sensitivity 2, and the discrete Gaussian with variance sigma^2
costs rho = 2 / (2 sigma^2) = 1 / sigma^2. Each record is in one geounit per level, so one
query at one level costs its rho once; costs add over queries and levels.
rho -> (eps, delta) by the tight conversion of Canonne, Kamath and Steinke (2020, Cor. 13).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction

from scipy.optimize import minimize_scalar

from das.privacy.strategy import Strategy

CONVENTION = ("rho-zCDP, bounded neighbours (change one record); each marginal query has squared "
              "L2 sensitivity 2; discrete Gaussian noise of variance sigma^2 costs rho = 1/sigma^2; "
              "costs add over queries and levels")
EPS_DECIMALS = 4


class BudgetError(ValueError):
    """A spending plan or charge that the accountant refuses."""


@dataclass(frozen=True)
class Charge:
    level: str
    query: str
    rho: Fraction

    @property
    def sigma2(self) -> Fraction:
        return 1 / self.rho


@dataclass(frozen=True)
class Allocation:
    rho: Fraction
    items: tuple[Charge, ...]

    def total(self) -> Fraction:
        return sum((c.rho for c in self.items), Fraction(0))


def allocate(strategy: Strategy, rho: Fraction) -> Allocation:
    """Exact per-(level, query) rho and sigma^2 = 1/rho_q; refuses shares not summing to 1."""
    if not isinstance(rho, Fraction) or rho <= 0:
        raise BudgetError(f"rho must be a positive Fraction, got {rho!r}")
    if sum((lv.rho_share for lv in strategy.levels), Fraction(0)) != 1:
        raise BudgetError(f"{strategy.source}: level shares do not sum to exactly 1")
    items = []
    for lv in strategy.levels:
        if sum((s for _, s in lv.queries), Fraction(0)) != 1:
            raise BudgetError(f"{strategy.source}: query shares of level {lv.level} do not sum to exactly 1")
        for query, share in lv.queries:
            if share <= 0 or lv.rho_share <= 0:
                raise BudgetError(f"{strategy.source}: level {lv.level} query {query!r} has a non-positive share")
            items.append(Charge(lv.level, query, rho * lv.rho_share * share))
    allocation = Allocation(rho, tuple(items))
    assert allocation.total() == rho  # exact, by the checks above
    return allocation


@dataclass
class PrivacyAccountant:
    """Charges measurements against a budget; refuses overspending and double measurement."""

    budget: Fraction
    spent: Fraction = Fraction(0)
    charges: dict = field(default_factory=dict)

    def charge(self, level: str, query: str, rho: Fraction) -> None:
        if (level, query) in self.charges:
            raise BudgetError(f"{level}/{query} was already measured: noise is never drawn twice")
        if rho <= 0:
            raise BudgetError(f"{level}/{query}: a charge must be positive, got {rho}")
        if self.spent + rho > self.budget:
            raise BudgetError(f"{level}/{query}: charging {rho} would spend {self.spent + rho}, over the budget {self.budget}")
        self.charges[(level, query)] = rho
        self.spent += rho


def _log_delta(rho: float, eps: float, alpha: float) -> float:
    # log of exp((a-1)(a rho - eps)) / (a-1) * (1 - 1/a)^a
    return (alpha - 1) * (alpha * rho - eps) - math.log(alpha - 1) + alpha * math.log1p(-1 / alpha)


def _best_alpha(objective, rho: float) -> float:
    """Minimise a function of alpha > 1 (any alpha gives a valid bound: suboptimal is conservative)."""
    hi = max(10.0, 10 * (1 + 1 / max(rho, 1e-12)))
    result = minimize_scalar(lambda la: objective(1 + math.exp(la)), bounds=(-30, math.log(hi * 100)),
                             method="bounded", options={"xatol": 1e-12})
    return 1 + math.exp(result.x)


def delta_for_eps(rho: Fraction, eps: float) -> float:
    """Tight delta for (eps, delta)-DP from rho-zCDP, rounded up (to 3 significant digits)."""
    r = float(rho)
    alpha = _best_alpha(lambda a: _log_delta(r, eps, a), r)
    delta = min(1.0, math.exp(_log_delta(r, eps, alpha)))
    if delta == 0:
        return 0.0
    exponent = math.floor(math.log10(delta)) - 2
    return math.ceil(delta / 10**exponent) * 10**exponent


def eps_for_delta(rho: Fraction, delta: Fraction | float, decimals: int = EPS_DECIMALS) -> float:
    """Smallest eps certified at delta by the tight bound, rounded UP to `decimals` places."""
    r, log_d = float(rho), math.log(float(delta))

    def eps_at(alpha: float) -> float:  # solve log_delta(r, eps, alpha) = log_d for eps
        return alpha * r + (-log_d - math.log(alpha - 1) + alpha * math.log1p(-1 / alpha)) / (alpha - 1)

    alpha = _best_alpha(eps_at, r)
    eps = max(0.0, eps_at(alpha))
    scale = 10**decimals
    # round up with a margin for floating-point error in the evaluation (conservative)
    return math.ceil(eps * (1 + 1e-12) * scale) / scale


def eps_loose(rho: Fraction, delta: Fraction | float) -> float:
    """The simple bound eps = rho + 2 sqrt(rho ln(1/delta)), for comparison."""
    r = float(rho)
    return r + 2 * math.sqrt(r * math.log(1 / float(delta)))


def _frac(x: Fraction) -> str:
    return f"{x.numerator}/{x.denominator}" if x.denominator != 1 else str(x.numerator)


def certificate(strategy: Strategy, rho: Fraction, delta: Fraction, levels, schema_name: str,
                randomness_private: bool) -> dict:
    """The privacy certificate of one release (JSON-able; exact values as "a/b" strings)."""
    allocation = allocate(strategy, Fraction(rho))
    by_level = []
    for lv in strategy.levels:
        charges = [c for c in allocation.items if c.level == lv.level]
        by_level.append({
            "level": lv.level, "rho_share": _frac(lv.rho_share),
            "rho": _frac(sum((c.rho for c in charges), Fraction(0))),
            "queries": [{"query": c.query, "share": _frac(s), "rho": _frac(c.rho),
                         "sigma2": _frac(c.sigma2), "sigma": math.sqrt(float(c.sigma2))}
                        for c, (_, s) in zip(charges, lv.queries)],
        })
    cert = {
        "schema": schema_name, "strategy": strategy.name, "levels": list(levels),
        "convention": CONVENTION,
        "rho": _frac(allocation.total()), "rho_decimal": float(allocation.total()),
        "delta": str(float(delta)), "eps": eps_for_delta(allocation.total(), delta),
        "eps_loose_bound": round(eps_loose(allocation.total(), delta), EPS_DECIMALS),
        "conversion": "Canonne, Kamath, Steinke 2020, Corollary 13 (eps rounded up)",
        "private": bool(randomness_private),
        "by_level": by_level,
    }
    if not randomness_private:
        cert["warning"] = "seeded replication mode: this release is NOT private"
    return cert


def render_certificate(cert: dict) -> str:
    lines = [
        f"schema {cert['schema']}, strategy {cert['strategy']}, levels {' > '.join(cert['levels'])}",
        f"total rho = {cert['rho']} (= {cert['rho_decimal']:.6f})",
        f"(eps, delta) = ({cert['eps']}, {cert['delta']})   [loose bound: eps = {cert['eps_loose_bound']}]",
        f"convention: {cert['convention']}",
    ]
    if not cert["private"]:
        lines.append("WARNING: " + cert["warning"])
    lines.append(f"{'level':12s} {'query':34s} {'rho':>12s} {'sigma^2':>12s} {'sigma':>9s}")
    for lv in cert["by_level"]:
        lines.append(f"{lv['level']:12s} {'(level share ' + lv['rho_share'] + ')':34s} {float(Fraction(lv['rho'])):12.6f}")
        for q in lv["queries"]:
            lines.append(f"{'':12s} {q['query']:34s} {float(Fraction(q['rho'])):12.6f} "
                         f"{float(Fraction(q['sigma2'])):12.3f} {q['sigma']:9.3f}")
    return "\n".join(lines)
