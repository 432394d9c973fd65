"""The exact conversions between a zCDP budget rho and (eps, delta), as `das privacy --rho/--eps --delta`.

>>> eps_for_rho("293764/114921", "1e-10")
17.1436
>>> rho_for_eps(4, "1e-10")
Fraction(7411, 40000)
"""

from __future__ import annotations

from fractions import Fraction

from das.api.release import exact
from das.core.arguments import checked


@checked
def eps_for_rho(rho, delta) -> float:
    """The eps that rho-zCDP certifies at `delta`, as `das privacy --rho R --delta D` prints it.

    Args:
        rho: the zCDP budget, exact (a Fraction, an int or a string like "1/2").
        delta: the delta of the (eps, delta) statement, exact ("1e-10").

    Returns:
        eps, the tight conversion rounded up to 4 decimals (never below the exact value).

    Raises:
        BudgetError: rho or delta not a positive exact number, delta not below 1.

    Example:
        >>> eps_for_rho("293764/114921", "1e-10")
        17.1436
    """
    from das.privacy.accounting import eps_for_delta

    return eps_for_delta(exact(rho, "rho"), exact(delta, "delta"))


@checked
def rho_for_eps(eps, delta) -> Fraction:
    """The largest rho (6 significant digits, exact) whose certificate at `delta` is within `eps`: what a budget
    given as eps at delta spends (`das run --eps E --delta D`).

    Args:
        eps: the eps wanted, exact (a Fraction, an int or a string like "4" or "0.5").
        delta: the delta of the (eps, delta) statement, exact ("1e-10").

    Returns:
        rho as a Fraction.

    Raises:
        BudgetError: eps or delta not a positive exact number, delta not below 1.

    Example:
        >>> rho_for_eps(4, "1e-10")
        Fraction(7411, 40000)
    """
    from das.privacy.accounting import rho_for_eps as largest_rho

    return largest_rho(exact(eps, "eps"), exact(delta, "delta"))


@checked
def certificates(spec, *, rho=None, eps=None, delta=None) -> dict:
    """The certificate of each release of a spec, as `das privacy SPEC` prints them; nothing is read but the spec
    and nothing is spent.

    Args:
        spec: a shipped name, a path to a run spec .toml or a dict.
        rho, eps, delta: the persons budget to certify instead of the spec's (rho, or eps at delta; exact).

    Returns:
        release name ("persons", "units") -> Certificate (exact rho, eps at delta, charges by level and query).

    Raises:
        SpecError, BudgetError: the spec or the budget cannot be read.

    Example:
        >>> certificates("tiny")["persons"].eps
        17.1436
    """
    from das.api.inputs import run_spec
    from das.api.release import budget_given
    from das.driver.pipeline import Pipeline

    given = run_spec(spec, name="spec")  # printing a certificate spends nothing: no cap
    return Pipeline.prepare(given, seed=None, allow_large_rho=True, budget=budget_given(rho, eps, delta)).certificates
