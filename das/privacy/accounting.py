"""Exact zero-concentrated DP accounting (rho-zCDP) with `Fraction`s end to end.

Convention (stated again in every certificate, `CONVENTION`):
- Bounded neighbours that keep the invariants: two datasets are neighbours if they differ by
  changing one record and have the same invariants (state populations; housing units and GQ
  facilities per block: published exactly, so a change of one of them is not covered).
  Changing a record moves one unit of count from one cell to another, so a marginal query
  (a vector of counts) has squared L2 sensitivity Delta_2^2 = 1 + 1 = 2.
- A query answered with discrete Gaussian noise of variance sigma^2 is
  (Delta_2^2 / (2 sigma^2))-zCDP = (1 / sigma^2)-zCDP (Canonne, Kamath, Steinke 2020, Thm 14):
  rho_q = 1 / sigma^2, so sigma^2 = 1 / rho_q, rational whenever rho_q is.
- Each record lies in exactly one geounit of a level, so a query measured in every geounit of
  a level costs its rho_q once; costs add over queries and levels (zCDP composition).

Budgets are never floats: the total rho, every share, every rho_q and every sigma^2 are
`Fraction`s, and a strategy whose shares do not sum to exactly 1 is refused. Only the
conversion to (eps, delta) leaves the rationals, and it is computed with 60-digit arithmetic
(mpmath) and rounded in the conservative direction (eps and delta up).

>>> round(eps_for_delta(Fraction(293764, 114921), Fraction(1, 10**10)), 2)
17.14
"""

from __future__ import annotations

import math
import textwrap
from dataclasses import dataclass, field
from decimal import Decimal
from fractions import Fraction

import mpmath

from das.core.errors import BudgetError, SpecError
from das.privacy.certificate import Certificate, LevelCharges, Measurement, delta_text, fraction_text
from das.privacy.strategy import Strategy, check_shares

CONVENTION = (
    "rho-zCDP with bounded neighbours that keep the invariants: datasets that differ by changing one record and have "
    "the same invariants, which are published exactly (the total population of the nation and of each state; housing "
    "units and group quarters facilities by type in each block), as the Census Bureau states the 2020 guarantee; "
    "neighbours that change an invariant are not covered. Every marginal query has "
    "squared L2 sensitivity 2, so discrete Gaussian noise of variance sigma^2 costs rho = 2/(2 sigma^2) = 1/sigma^2; "
    "each record is in one geounit per level, and costs add over queries and levels"
)
CONVERSION = ("Canonne, Kamath, Steinke (2020), Corollary 13: delta = min over alpha > 1 of "
              "exp((alpha-1)(alpha rho - eps)) / (alpha-1) * (1 - 1/alpha)^alpha")
EPS_DECIMALS = 4  # eps is certified rounded UP to this many decimal places
EPS_ROUNDING = f"rounded up to {EPS_DECIMALS} decimals"
LOOSE_BOUND = "eps = rho + 2 sqrt(rho ln(1/delta)), for comparison only"
DELTA_DIGITS = 4  # delta_for_eps is rounded UP to this many significant digits
_DPS = 60  # decimal digits of working precision for the conversions


@dataclass(frozen=True)
class Allocation:
    """Every measurement of a release (level, query, rho_q = rho x level share x query share, sigma^2 = 1/rho_q),
    in strategy order; their rho_q sum to `rho` exactly. Computed once per release: the measurement draws
    it, the accountant charges it, the certificate states it."""

    rho: Fraction
    items: tuple[Measurement, ...]

    def total(self) -> Fraction:
        return sum((c.rho for c in self.items), Fraction(0))

    def level(self, level: str) -> tuple[Measurement, ...]:
        """A level's measurements, in strategy order (none: the level is not measured)."""
        return tuple(c for c in self.items if c.level == level)

    def get(self, level: str, query: str) -> Measurement:
        for c in self.items:
            if c.level == level and c.query == query:
                return c
        raise KeyError(f"no measurement of {query!r} at level {level!r} in this allocation")


def allocate(strategy: Strategy, rho: Fraction | None = None) -> Allocation:
    """Exact rho_q and sigma^2 = 1/rho_q for every (level, query); `rho` defaults to the strategy's.

    Refuses (BudgetError) a missing or non-positive or inexact budget and shares that are not
    positive or do not sum to exactly 1.

    >>> from das.privacy.strategy import load_strategy
    >>> a = allocate(load_strategy("h1_units"))
    >>> a.total() == Fraction(11417641, 152349649), a.get("block", "detailed").sigma2
    (True, Fraction(124926712180, 1130346459))
    """
    if rho is None:
        rho = strategy.rho
    if rho is None:
        raise BudgetError(f"{strategy.source}: no budget: neither the run nor the strategy sets rho")
    if isinstance(rho, int) and not isinstance(rho, bool):
        rho = Fraction(rho)
    if not isinstance(rho, Fraction) or rho <= 0:
        raise BudgetError(f"rho must be a positive Fraction (exact), got {rho!r}")
    check_shares(strategy)
    items = tuple(
        Measurement.allocated(lv.level, query, share, rho * lv.rho_share * share)
        for lv in strategy.levels
        for query, share in lv.queries
    )
    allocation = Allocation(rho, items)
    if allocation.total() != rho:  # cannot happen after check_shares; never let it pass silently
        raise BudgetError(f"{strategy.source}: allocation sums to {allocation.total()}, not rho = {rho}")
    return allocation


@dataclass
class PrivacyAccountant:
    """Charges measurements one by one against a budget; refuses instead of warning.

    Refused (BudgetError): a charge that is not an exact positive Fraction, a (level, query)
    charged twice (noise is never drawn twice for one measurement), a charge that would take
    the total over the budget, and, when a `plan` is given, a charge the plan does not contain
    or of a different amount.

    >>> acct = PrivacyAccountant(Fraction(1))
    >>> acct.charge("state", "total", Fraction(3, 4)); acct.remaining
    Fraction(1, 4)
    >>> acct.charge("county", "total", Fraction(1, 2))
    Traceback (most recent call last):
    ...
    das.core.errors.BudgetError: county/total: charging 1/2 would spend 5/4, over the budget 1
    """

    budget: Fraction
    plan: Allocation | None = None
    spent: Fraction = Fraction(0)
    charges: dict = field(default_factory=dict)  # (level, query) -> rho, in charge order

    def __post_init__(self):
        if not isinstance(self.budget, Fraction) or self.budget <= 0:
            raise BudgetError(f"the budget must be a positive Fraction, got {self.budget!r}")
        if self.plan is not None and self.plan.rho != self.budget:
            raise BudgetError(f"the plan allocates rho = {self.plan.rho}, the budget is {self.budget}")

    @classmethod
    def for_allocation(cls, allocation: Allocation) -> PrivacyAccountant:
        """An accountant that accepts exactly the charges of `allocation`."""
        return cls(allocation.rho, plan=allocation)

    @property
    def remaining(self) -> Fraction:
        return self.budget - self.spent

    def charge(self, level: str, query: str, rho: Fraction) -> None:
        name = f"{level}/{query}"
        if isinstance(rho, int) and not isinstance(rho, bool):
            rho = Fraction(rho)
        if not isinstance(rho, Fraction):
            raise BudgetError(f"{name}: a charge must be an exact Fraction, got {rho!r}")
        if rho <= 0:
            raise BudgetError(f"{name}: a charge must be positive, got {rho}")
        if (level, query) in self.charges:
            raise BudgetError(f"{name} was already measured: noise is never drawn twice for one measurement")
        if self.plan is not None:
            try:
                planned = self.plan.get(level, query).rho
            except KeyError:
                raise BudgetError(f"{name} is not in the plan") from None
            if rho != planned:
                raise BudgetError(f"{name}: charging {rho}, the plan allocates {planned}")
        if self.spent + rho > self.budget:
            raise BudgetError(f"{name}: charging {rho} would spend {self.spent + rho}, over the budget {self.budget}")
        self.charges[(level, query)] = rho
        self.spent += rho


PROTECTS = {"persons": "one person's record", "units": "one housing unit's record (a unit or a group-quarters facility)"}


def protects(release: str) -> str:
    """The unit of protection of a release: the one record two neighbouring datasets differ by (changed, the
    invariants kept; CONVENTION), named for the release ("persons", "units").

    >>> protects("persons")
    "one person's record"
    """
    return PROTECTS.get(release, "one record")


def ledger(cert: Certificate) -> PrivacyAccountant | None:
    """A release's budget as an accountant holding every charge its certificate states, replayed (so each is
    checked again: exact, positive, once, within the budget): `budget`, `spent`, `remaining` and `charges`.
    A TopDown release's budget is its rho; a synthetic mechanism's, the budget it was given. None for a
    mechanism that is (eps, delta)-DP directly: it spends no rho (its certificate states its eps).

    >>> part = dict(schema="s", strategy="t", levels=("nation",), convention="c", eps_loose_bound=0.0,
    ...             conversion="x", loose_bound="y", randomness="r", private=True, eps_rounding="up", delta=Fraction(1, 10),
    ...             eps=1.0)
    >>> level = LevelCharges("nation", Fraction(1), Fraction(1, 2), (Measurement("nation", "total", Fraction(1),
    ...                                                                          Fraction(1, 2), Fraction(2)),))
    >>> ledger(Certificate(**part, rho=Fraction(1, 2), by_level=(level,))).remaining
    Fraction(0, 1)
    """
    if cert.synthetic:
        if cert.budget is None or any(c.rho is None for c in cert.charges):
            return None
        accountant = PrivacyAccountant(cert.budget)
        for c in cert.charges:
            accountant.charge(c.scope, c.step, c.rho)
        return accountant
    accountant = PrivacyAccountant(cert.rho)
    for lv in cert.by_level:
        for q in lv.queries:
            accountant.charge(lv.level, q.query, q.rho)
    return accountant


# ---------------------------------------------------------------------------------------------
# rho-zCDP -> (eps, delta)-DP
#
# Canonne, Kamath, Steinke (2020), Corollary 13: a rho-zCDP mechanism is (eps, delta)-DP for
#   delta = inf_{a > 1} exp((a-1)(a rho - eps)) / (a-1) * (1 - 1/a)^a.
# Any single a gives a valid (eps, delta) pair, so an imperfect minimisation errs on the safe side.
#
# delta for a given eps: log delta(a) = (a-1)(a rho - eps) - log(a-1) + a log(1 - 1/a) has
#   d/da = (2a - 1) rho - eps + log(1 - 1/a),
# strictly increasing from -inf (a -> 1) to +inf: one minimum, at the root, found by bisection.
#
# eps for a given delta (L = log(1/delta) > 0): solving the bound for eps at each a,
#   eps(a) = a rho + (L - log(a-1) + a log(1 - 1/a)) / (a-1),
#   d/da = rho + (log a - L) / (a-1)^2,
# which is negative until rho (a-1)^2 + log a = L (left side strictly increasing) and positive
# after: again one minimum, at the root of a monotone function, found by bisection.
# The minimum of eps(a) is the smallest eps with delta(eps) <= delta, so the two are inverses.


def _mpf(x) -> mpmath.mpf:
    """An exact rational (Fraction, int, decimal string, float) as a working-precision mpf."""
    q = x if isinstance(x, Fraction) else Fraction(repr(x) if isinstance(x, float) else x)
    return mpmath.mpf(q.numerator) / q.denominator


def _bisect_increasing(f, lo, hi, iterations: int = 250):
    """Root of an increasing function with f(lo) < 0 < f(hi); returns a point inside the bracket."""
    for _ in range(iterations):
        mid = (lo + hi) / 2
        if f(mid) < 0:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def _upper_bracket(f, start):
    hi = start
    while f(hi) <= 0:
        hi = 1 + 2 * (hi - 1)
    return hi


def _ceil_decimal(x: mpmath.mpf, exponent: int) -> Decimal:
    """The smallest multiple of 10^exponent at or above x (x >= 0), with a margin for working error."""
    n = int(mpmath.ceil(x * (1 + mpmath.mpf(10) ** -40) / mpmath.mpf(10) ** exponent))
    return Decimal(n).scaleb(exponent)


def _float_up(rounded: Decimal, x: mpmath.mpf) -> float:
    """`rounded` as a float, nudged up one ulp if the nearest float fell below the true value x."""
    f = float(rounded)
    return f if mpmath.mpf(f) >= x * (1 + mpmath.mpf(10) ** -40) else math.nextafter(f, math.inf)


def _check_rho(rho) -> mpmath.mpf:
    r = _mpf(rho)
    if r <= 0:
        raise ValueError(f"rho must be positive, got {rho}")
    return r


def _check_delta(delta) -> mpmath.mpf:
    d = _mpf(delta)
    if not 0 < d < 1:
        raise ValueError(f"delta must be in (0, 1), got {delta}")
    return d


def eps_for_delta(rho: Fraction, delta: Fraction | float | str, decimals: int = EPS_DECIMALS) -> float:
    """The smallest eps certified at `delta` by the tight bound, rounded UP to `decimals` places.

    >>> eps_for_delta(Fraction(293764, 114921), "1e-10")
    17.1436
    """
    with mpmath.workdps(_DPS):
        r, d = _check_rho(rho), _check_delta(delta)
        log_inv_delta = -mpmath.log(d)

        def slope(a):  # sign of d eps / d a
            return r * (a - 1) ** 2 + mpmath.log(a) - log_inv_delta

        alpha = _bisect_increasing(slope, mpmath.mpf(1), _upper_bracket(slope, 2 + mpmath.sqrt(log_inv_delta / r)))
        eps = alpha * r + (log_inv_delta - mpmath.log(alpha - 1) + alpha * mpmath.log(1 - 1 / alpha)) / (alpha - 1)
        eps = max(eps, mpmath.mpf(0))
        return _float_up(_ceil_decimal(eps, -decimals), eps)


def delta_for_eps(rho: Fraction, eps: float | Fraction | str, digits: int = DELTA_DIGITS) -> float:
    """The tight delta at `eps`, rounded UP to `digits` significant digits (at most 1).

    >>> delta_for_eps(Fraction(293764, 114921), "17.1436")
    9.999e-11
    """
    with mpmath.workdps(_DPS):
        r, e = _check_rho(rho), _mpf(eps)
        if e < 0:
            raise ValueError(f"eps must be >= 0, got {eps}")

        def slope(a):  # d log delta / d a
            return (2 * a - 1) * r - e + mpmath.log(1 - 1 / a)

        alpha = _bisect_increasing(slope, mpmath.mpf(1), _upper_bracket(slope, mpmath.mpf(2)))
        log_delta = (alpha - 1) * (alpha * r - e) - mpmath.log(alpha - 1) + alpha * mpmath.log(1 - 1 / alpha)
        if log_delta >= 0:
            return 1.0
        delta = mpmath.exp(log_delta)
        exponent = int(mpmath.floor(log_delta / mpmath.log(10)))  # delta = m x 10^exponent, 1 <= m < 10
        return _float_up(_ceil_decimal(delta, exponent - (digits - 1)), delta)


RHO_DIGITS = 6  # rho_for_eps gives rho on a grid of this many significant digits


def rho_for_eps(eps: Fraction | float | str, delta: Fraction | float | str, digits: int = RHO_DIGITS) -> Fraction:
    """The largest rho on a grid of `digits` significant digits whose certified eps at `delta` is at most `eps`.

    An exact search: eps_for_delta is increasing in rho, so the largest grid point n x 10^k with
    eps_for_delta(n x 10^k, delta) <= eps is found by bisection on integers; the next grid point
    is certified above eps.

    >>> rho = rho_for_eps("17.1436", "1e-10"); rho, eps_for_delta(rho, "1e-10") <= 17.1436
    (Fraction(255623, 100000), True)
    """
    target, d = _exact(eps, "eps"), _exact(delta, "delta")
    if target <= 0:
        raise BudgetError(f"eps must be positive, got {eps}")
    if not 0 < d < 1:
        raise BudgetError(f"delta must be strictly between 0 and 1, got {delta}")

    def within(rho: Fraction) -> bool:
        return Fraction(repr(eps_for_delta(rho, d))) <= target

    hi = Fraction(1)  # bracket: hi is certified above eps, hi / 2 within it
    if within(hi):
        while within(hi):  # eps_for_delta grows without bound in rho
            hi *= 2
    else:
        while not within(hi / 2):
            hi /= 2
            if hi < Fraction(1, 10**30):
                raise BudgetError(f"no budget: eps = {eps} at delta = {delta} is below the certificate of any rho "
                                  "above 1e-30")
    step = Fraction(10) ** (math.floor(math.log10(hi)) - digits + 1)  # the grid: multiples of step
    lo, top = math.floor(hi / 2 / step), math.ceil(hi / step)  # lo: known within; top: known above
    while top - lo > 1:
        mid = (lo + top) // 2
        if within(mid * step):
            lo = mid
        else:
            top = mid
    return lo * step


def _exact(value, name: str) -> Fraction:
    if isinstance(value, Fraction):
        return value
    try:
        return Fraction(repr(value) if isinstance(value, float) else value)
    except (ValueError, ZeroDivisionError):
        raise BudgetError(f"{name} must be an exact number, got {value!r}") from None


def eps_loose(rho: Fraction, delta: Fraction | float | str, decimals: int = EPS_DECIMALS) -> float:
    """The simple bound eps = rho + 2 sqrt(rho ln(1/delta)) (Bun & Steinke 2016), rounded up; for comparison.

    >>> eps_loose(Fraction(293764, 114921), "1e-10")
    17.9002
    """
    with mpmath.workdps(_DPS):
        r, d = _check_rho(rho), _check_delta(delta)
        eps = r + 2 * mpmath.sqrt(r * -mpmath.log(d))
        return _float_up(_ceil_decimal(eps, -decimals), eps)


# ---------------------------------------------------------------------------------------------
# The certificate


NOT_PRIVATE_WARNING = ("seeded replication mode: the noise came from a seeded pseudo-random generator, "
                       "so this release is NOT private and must not be published")


def stability_threshold(eps_half: Fraction, delta: Fraction) -> int:
    """The smallest T with exp(-eps_half (T - 1)) <= delta: a stability histogram's threshold, whose bins noised with
    discrete Laplace of scale 1/eps_half are (eps, delta)-DP released from T up (rigorous: a margin above the ratio)."""
    with mpmath.workdps(60):
        ratio = mpmath.log(mpmath.mpf(delta.denominator) / delta.numerator) * eps_half.denominator / eps_half.numerator
        steps = int(mpmath.ceil(ratio * (1 - mpmath.mpf(10) ** -40)))
        if mpmath.mpf(steps) < ratio * (1 + mpmath.mpf(10) ** -40):  # too close to call: one more step
            steps += 1
    return 1 + max(0, steps)


def certificate(strategy: Strategy, allocation: Allocation, delta: Fraction | float | str | None, levels, *,
                schema_name: str, randomness_private: bool) -> Certificate:
    """The privacy certificate of one release (das.privacy.certificate), exact: its allocation's measurements.

    `delta` defaults to the strategy's. Refuses a strategy for another schema or other levels, or an
    allocation of another strategy (SpecError), and any inexact delta (BudgetError).
    """
    if strategy.schema != schema_name:
        raise SpecError(f"{strategy.source}: strategy is for schema {strategy.schema!r}, not {schema_name!r}")
    if strategy.level_names != tuple(levels):
        raise SpecError(f"{strategy.source}: strategy levels {list(strategy.level_names)} are not {list(levels)}")
    planned = [(lv.level, query) for lv in strategy.levels for query, _ in lv.queries]
    if [(m.level, m.query) for m in allocation.items] != planned:
        raise SpecError(f"{strategy.source}: the allocation measures {[(m.level, m.query) for m in allocation.items]}, "
                        f"the strategy {planned}")
    delta = strategy.delta if delta is None else delta
    if delta is None:
        raise BudgetError(f"{strategy.source}: no delta: neither the run nor the strategy sets one")
    delta = delta if isinstance(delta, Fraction) else Fraction(repr(delta) if isinstance(delta, float) else delta)
    total = allocation.total()
    by_level = tuple(
        LevelCharges(lv.level, lv.rho_share, sum((c.rho for c in allocation.level(lv.level)), Fraction(0)),
                     allocation.level(lv.level))
        for lv in strategy.levels)
    return Certificate(
        schema=schema_name, strategy=strategy.name, levels=tuple(levels), convention=CONVENTION, rho=total,
        delta=delta, eps=eps_for_delta(total, delta), eps_loose_bound=eps_loose(total, delta), conversion=CONVERSION,
        loose_bound=LOOSE_BOUND, randomness=randomness_text(randomness_private), private=bool(randomness_private),
        eps_rounding=EPS_ROUNDING, by_level=by_level, warning=None if randomness_private else NOT_PRIVATE_WARNING)


def randomness_text(private: bool) -> str:
    return "operating-system CSPRNG" if private else "seeded pseudo-random generator"


def render_certificate(cert: Certificate, *, release: str | None = None) -> str:
    """A plain-text table of a certificate for the terminal (`release`: its name, for its unit of protection)."""
    width = max([34] + [len(q.query) for lv in cert.by_level for q in lv.queries])
    lines = [
        f"schema {cert.schema}, strategy {cert.strategy}, levels {' > '.join(cert.levels)}",
        f"total rho    {fraction_text(cert.rho)}  (= {float(cert.rho):.6f})",
        f"(eps, delta) ({cert.eps}, {delta_text(cert.delta)})  tight bound, eps {cert.eps_rounding}",
        f"loose bound  eps = {cert.eps_loose_bound}  (rho + 2 sqrt(rho ln(1/delta)))",
        f"randomness   {cert.randomness}",
    ]
    if release is not None:
        lines.append(f"protects     {protects(release)}, changed, the invariants kept (the convention below)")
    lines += textwrap.wrap(cert.convention, 100, initial_indent="convention   ", subsequent_indent=" " * 13)
    if cert.warning:
        lines += textwrap.wrap(cert.warning, 100, initial_indent="WARNING: ", subsequent_indent=" " * 9)
    shares = [fraction_text(lv.rho_share) for lv in cert.by_level] + [fraction_text(q.share) for lv in cert.by_level
                                                                      for q in lv.queries]
    sw = max([11] + [len(text) for text in shares])  # every column as wide as its widest entry: aligned
    header = f"{'level':12s} {'query':{width}s} {'share':>{sw}s} {'rho':>11s} {'sigma^2':>12s} {'sigma':>9s}"
    lines += ["", header, "-" * len(header)]
    for lv in cert.by_level:
        lines.append(f"{lv.level:12s} {'(all queries)':{width}s} {fraction_text(lv.rho_share):>{sw}s} {float(lv.rho):11.6f}")
        for q in lv.queries:
            lines.append(f"{'':12s} {q.query:{width}s} {fraction_text(q.share):>{sw}s} {float(q.rho):11.6f} "
                         f"{float(q.sigma2):12.3f} {math.sqrt(q.sigma2):9.3f}")
    lines.append("share: of the level's rho (levels: of the total); sigma^2 = 1/rho exactly (see the JSON form)")
    return "\n".join(lines)