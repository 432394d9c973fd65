"""What every mechanism shares: its input, the ledger of privacy charges, the certificate.

A mechanism is a function `SynthesisInput -> Synthesis`: it reads the true block histograms
(n_blocks x schema cells), spends budget only through `Ledger.charge` (which refuses to overspend),
and returns nonnegative integer block histograms. The schedule of charges depends only on public
things (budget, schema, geography), never on the data; a step whose parameters depend on earlier
noisy outputs (AIM's annealing) is charged as one filtered step whose cap is fixed in advance.

Neighbours: bounded, change one record (das's convention, docs/privacy.md). A record's block is part
of the record, so a change may move a person from one geounit to another. A mechanism run
independently per geounit (parallel composition) then sees one record removed in one geounit and one
added in another. A discrete Gaussian measurement of a histogram calibrated to squared L2 sensitivity
2 costs the same either way (rho = 1/sigma^2: within one geounit one change moves two cells; across
two, each geounit's histogram moves one cell, 1/(2 sigma^2) twice). An exponential-mechanism
selection calibrated to the change-one sensitivity Delta costs eps^2/8 either way when a record added
to or removed from a geounit moves every score by at most Delta/sqrt(2) (`Ledger.exponential`, proof
in docs/mechanisms.md).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction

import scipy.sparse as sp

from das.core.errors import BudgetError, SpecError
from das.model.geography import Geography
from das.model.schema import Schema
from das.privacy.accounting import (
    CONVERSION,
    EPS_ROUNDING,
    LOOSE_BOUND,
    NOT_PRIVATE_WARNING,
    PrivacyAccountant,
    eps_for_delta,
    eps_loose,
    randomness_text,
)
from das.privacy.certificate import Certificate, Charge, fraction_text
from das.privacy.exponential import exponential_rho
from das.privacy.randomness import RandomSource

NEIGHBOURS = ("bounded neighbours: datasets that differ by changing one record (a record's block is part of the "
              "record, so a change may move a person between geounits); no invariant of the persons is kept, only the "
              "block universe (the blocks of the units file, which is public)")
ZCDP_COSTS = ("A discrete Gaussian measurement of a marginal with variance sigma^2 costs rho = 1/sigma^2 (squared L2 "
              "sensitivity 2). An eps exponential-mechanism selection costs eps^2/8 (bounded range, Cesar & Rogers 2021); "
              "an eps-DP (pure) step costs eps^2/2 (Bun & Steinke 2016, Prop. 1.4); an (eps, delta)-DP step is "
              "delta-approximate (eps^2/2)-zCDP (Bun & Steinke 2016, Sec. 8), its delta added to the delta of the "
              "conversion to (eps, delta)-DP.")


@dataclass(frozen=True)
class Guarantee:
    """The privacy a mechanism's releases have, in words true for it: the definition its certificate states (zCDP
    at a rho, or (eps, delta)-DP directly), the neighbour relation, and how each step is costed. Its `convention`
    is the certificate's (the manifest's and every Parquet file's), so das validate holds a release to it."""

    definition: str
    neighbours: str
    costs: str

    @property
    def convention(self) -> str:
        return f"{self.definition}, {self.neighbours}. {self.costs}"


ZCDP = Guarantee("rho-zCDP at the certificate's rho (its (eps, delta) by conversion)", NEIGHBOURS, ZCDP_COSTS)


class MechanismError(SpecError):
    """A mechanism cannot run as asked (unknown name, missing optional extra, unusable budget)."""


@dataclass(frozen=True)
class DirectGuarantee:
    """A mechanism that is (eps, delta)-DP directly (not zCDP), calibrated to and certified at this pair."""

    eps: Fraction
    delta: Fraction
    basis: str  # how it holds, as the certificate's `conversion` says it


@dataclass
class Ledger:
    """The charges a mechanism makes, each once, against an exact budget (refuses to overspend)."""

    budget: Fraction
    accountant: PrivacyAccountant = None
    entries: list[Charge] = field(default_factory=list)
    delta_parts: dict = field(default_factory=dict)  # approximate-DP steps: name -> delta (Fraction)
    direct: DirectGuarantee | None = None  # set by a mechanism certified at its own (eps, delta)

    def __post_init__(self):
        if self.accountant is None:
            self.accountant = PrivacyAccountant(self.budget)

    def charge(self, scope: str, step: str, rho: Fraction, noise: str, **parameters) -> Fraction:
        """Charge `rho` for `step`, made once in every geounit of `scope` (parallel composition)."""
        self.accountant.charge(scope, step, rho)
        self.entries.append(Charge(scope, step, rho, noise, _texts(parameters)))
        return rho

    def gaussian(self, scope: str, step: str, rho: Fraction) -> Fraction:
        """Charge a discrete Gaussian measurement of rho (squared L2 sensitivity 2); returns sigma^2 = 1/rho."""
        sigma2 = 1 / rho
        self.charge(scope, step, rho, "discrete Gaussian", sigma2=sigma2)
        return sigma2

    def exponential(self, scope: str, step: str, eps: Fraction, sensitivity: Fraction | str, *,
                    add_remove: Fraction | None) -> None:
        """Charge an eps exponential-mechanism selection (calibrated to the change-one `sensitivity` Delta): eps^2/8.

        Run per geounit, `add_remove` bounds how far one record added to or removed from a geounit moves any
        score, as a fraction r of Delta. A record moving between two geounits makes each selection
        (r eps)-bounded-range, together 2 (r eps)^2/8 <= eps^2/8 when r^2 <= 1/2; a change within one geounit
        costs eps^2/8 (docs/mechanisms.md). A larger r is refused. None: one selection over the whole input.
        """
        if add_remove is not None:
            check_add_remove(add_remove, step)
        cost = ("eps^2/8 (bounded range)" if add_remove is None else
                f"eps^2/8 (bounded range; a record moving between two geounits moves each one's scores by at most "
                f"{fraction_text(add_remove)} x Delta: 2 x ({fraction_text(add_remove)} eps)^2/8 <= eps^2/8)")
        self.charge(scope, step, exponential_rho(eps), "exponential mechanism", eps=eps, sensitivity=sensitivity,
                    cost=cost)

    def laplace(self, scope: str, step: str, eps: Fraction, **parameters) -> Fraction:
        """Record an eps discrete Laplace step (scale 2/eps, L1 sensitivity 2) of a mechanism that is (eps, delta)-DP
        directly (`direct` set first): no rho is charged, and the steps' eps may not exceed the mechanism's.
        Returns the scale."""
        if self.direct is None:
            raise MechanismError(f"{step}: an (eps, delta) step needs the mechanism's own guarantee (Ledger.direct)")
        if self.eps_spent + eps > self.direct.eps:
            raise BudgetError(f"{step}: eps {eps} would take the steps' eps over the mechanism's {self.direct.eps}")
        self.entries.append(Charge(scope, step, None, "discrete Laplace", _texts(
            {"eps": eps, "laplace_scale": 2 / eps, **parameters})))
        return 2 / eps

    @property
    def eps_spent(self) -> Fraction:
        """The eps of the (eps, delta) steps recorded (`laplace`)."""
        return sum((Fraction(e.parameters["eps"]) for e in self.entries if e.rho is None), Fraction(0))

    @property
    def spent(self) -> Fraction:
        return self.accountant.spent

    @property
    def remaining(self) -> Fraction:
        return self.accountant.remaining


def _texts(parameters: Mapping) -> dict:
    """A charge's stated parameters as published: exact values as "a/b" text."""
    return {k: (fraction_text(v) if isinstance(v, Fraction) else v) for k, v in parameters.items()}


@dataclass(frozen=True)
class SynthesisInput:
    """The confidential block histograms and everything public a mechanism needs."""

    schema: Schema
    geography: Geography
    histograms: sp.csr_matrix  # (n_blocks x schema cells) true counts, int64
    budget: Fraction
    delta: Fraction
    rng: RandomSource
    ledger: Ledger

    def public(self, level: str, rounds: int | None = None) -> Public:
        """What the mechanism plans its charges from (all public), at geounit `level`."""
        return Public(self.budget, self.delta, self.schema, level, rounds)


@dataclass(frozen=True)
class Public:
    """What a mechanism plans its charges from, all public: the budget, delta and schema, and the parameters it
    publishes in its details (`level`: the geounits it runs at; `rounds`: MWEM's rounds, None: its default).
    `das synth` plans from these, and das validate plans again from the published spec and details."""

    budget: Fraction
    delta: Fraction
    schema: Schema
    level: str
    rounds: int | None = None


@dataclass(frozen=True)
class Plan:
    """A mechanism's schedule (the noise of every step, fixed before any data is read: what `run` uses) and the
    details it publishes of it (its `Mechanism.details` entries of source "parameter")."""

    schedule: object
    details: Mapping[str, object]


@dataclass(frozen=True)
class RoundSchedule:
    """A measured total, then rounds of selections and measurements (MWEM's, RAP's): the noise of every step, the
    same in every geounit, fixed before any data is read."""

    sigma2_total: Fraction
    eps: Fraction  # of each selection
    sigma2: Fraction  # of each measurement
    rounds: int


@dataclass(frozen=True)
class Synthesis:
    """A mechanism's output: nonnegative integer block histograms and what it wants recorded."""

    histograms: sp.csr_matrix
    details: dict = field(default_factory=dict)


# What a mechanism's published `details` entry may be derived from: nothing else may reach the public
# manifest (a count of the confidential data there would be outside the noise).
DETAIL_SOURCES = {
    "parameter": "a constant of the mechanism, or computed from public inputs only (budget, delta, schema, geography)",
    "selection": "post-processing of noisy measurements or private selections (the exponential mechanism's choices)",
    "release": "computable from the released files themselves",
}


@dataclass(frozen=True)
class Mechanism:
    """A named synthesizer: how geography enters, the function, its budget plan (`plan`: every charge, from public
    things only), which optional extra it needs, what each entry of its published details is derived from
    (`details`: key -> "source: what", a source of DETAIL_SOURCES; an undeclared entry is refused before anything
    is written), and the guarantee its certificate states."""

    name: str
    summary: str
    geography: str
    run: Callable[[SynthesisInput], Synthesis]
    plan: Callable[[Public, Ledger], Plan]  # its charges, from public things only: `run` and das validate call it
    extra: str | None = None  # pip extra (`das[mbi]`) without which it cannot run
    available: Callable[[], bool] = lambda: True
    details: Mapping[str, str] = field(default_factory=dict)
    guarantee: Guarantee = ZCDP  # what its releases are, in words true for it (the certificate's convention)

    def public_details(self, details: Mapping) -> dict:
        """`details` as published, refused (MechanismError) if it holds an entry its declaration lacks."""
        undeclared = sorted(set(details) - set(self.details))
        if undeclared:
            raise MechanismError(f"{self.name}: details {undeclared} are not declared (Mechanism.details says what each "
                                 "published entry is derived from; nothing else may be published)")
        return dict(details)


def mechanism_certificate(mechanism: Mechanism, schema: Schema, levels, ledger: Ledger, *, delta: Fraction,
                          private: bool) -> Certificate:
    """The certificate of a synthetic release: every charge, rho = their exact sum, (eps, delta), and the
    mechanism's own guarantee as its convention.

    delta is the run's; approximate-DP steps take their delta out of it, and the rest converts the
    zCDP guarantee (CKS 2020, Cor. 13). A mechanism that is (eps, delta)-DP directly (`ledger.direct`)
    is certified at its own pair, with no conversion and no rho: it spends none.
    """
    name = mechanism.name
    common = dict(schema=schema.name, strategy=f"mechanism {name}", mechanism=name, levels=tuple(levels),
                  convention=mechanism.guarantee.convention, budget=ledger.budget, delta=delta,
                  randomness=randomness_text(private),
                  private=bool(private), charges=tuple(ledger.entries), by_level=(),  # no TopDown measurements (no NMF)
                  warning=None if private else NOT_PRIVATE_WARNING)
    if ledger.direct is not None:
        return _direct_certificate(name, ledger, delta, common)
    rho = ledger.spent
    delta_steps = sum(ledger.delta_parts.values(), Fraction(0))
    delta_conversion = delta - delta_steps
    if delta_conversion <= 0:
        raise MechanismError(f"{name}: its steps use delta {delta_steps}, not less than the run's delta {delta}")
    return Certificate(**common, rho=rho, delta_parts={**ledger.delta_parts, "zCDP conversion": delta_conversion},
                       eps=eps_for_delta(rho, delta_conversion), eps_rounding=EPS_ROUNDING,
                       eps_loose_bound=eps_loose(rho, delta_conversion), conversion=CONVERSION, loose_bound=LOOSE_BOUND)


def _direct_certificate(name: str, ledger: Ledger, delta: Fraction, common: dict) -> Certificate:
    """The certificate of an (eps, delta)-DP mechanism at its own pair: its steps' eps are the whole eps, its delta
    parts the whole delta, and it states no rho (it charges none)."""
    direct = ledger.direct
    if direct.delta != delta or sum(ledger.delta_parts.values(), Fraction(0)) != delta:
        raise MechanismError(f"{name}: certified at its own delta {direct.delta}, its delta parts "
                             f"{ledger.delta_parts} must sum to the run's delta {delta}")
    if ledger.spent or ledger.eps_spent != direct.eps:
        raise MechanismError(f"{name}: certified at its own eps {direct.eps}, its steps spend eps {ledger.eps_spent} "
                             f"and rho {ledger.spent} (expected eps {direct.eps} and no rho)")
    eps = float(direct.eps)  # a decimal of EPS_DECIMALS places: its JSON text is the exact value calibrated to
    if Fraction(repr(eps)) != direct.eps:
        raise MechanismError(f"{name}: eps {direct.eps} is not a decimal the certificate can state exactly")
    return Certificate(**common, rho=None, delta_parts=dict(ledger.delta_parts), eps=eps,
                       eps_rounding="exact: the eps the mechanism is calibrated to", eps_loose_bound=eps,
                       conversion=direct.basis, loose_bound="not applicable: no conversion from rho")


def check_add_remove(add_remove: Fraction, step: str) -> None:
    """Refuse a per-geounit selection whose scores an added or removed record moves by more than Delta/sqrt(2)
    (`add_remove` is that bound as a fraction of Delta): eps^2/8 would not cover a record moving between two."""
    if not 0 <= add_remove * add_remove <= Fraction(1, 2):
        raise MechanismError(f"{step}: a per-geounit selection whose add/remove sensitivity is {add_remove} x Delta "
                             "is not covered by eps^2/8 (needs at most Delta/sqrt(2))")


def selection_eps(share: Fraction) -> Fraction:
    """The largest exact eps (a multiple of 2^-20) whose selection costs at most `share` (exponential_rho, eps^2/8)."""
    return eps_below_sqrt(8 * share)


def eps_below_sqrt(x: Fraction, bits: int = 20) -> Fraction:
    """The largest multiple of 2^-bits at or below sqrt(x): an exact eps with eps^2 <= x."""
    return Fraction(math.isqrt(x.numerator * (1 << (2 * bits)) // x.denominator), 1 << bits)
