"""The exact conversions between a zCDP budget rho and (eps, delta), as `das privacy --rho/--eps --delta`.

>>> eps_for_rho("293764/114921", "1e-10")
17.1436
>>> rho_for_eps(4, "1e-10")
Fraction(7411, 40000)
"""

from __future__ import annotations

from fractions import Fraction

from das.api.release import exact
from das.arguments import checked


@checked
def eps_for_rho(rho, delta) -> float:
    """The eps that rho-zCDP certifies at `delta` (the tight bound, rounded up to 4 decimals): rho and delta exact
    (a Fraction, an int or a string like "1/2" or "1e-10")."""
    from das.privacy.accounting import eps_for_delta

    return eps_for_delta(exact(rho, "rho"), exact(delta, "delta"))


@checked
def rho_for_eps(eps, delta) -> Fraction:
    """The largest rho (6 significant digits, exact) whose certificate at `delta` is within `eps`: what a budget
    given as eps at delta spends (`das run --eps E --delta D`)."""
    from das.privacy.accounting import rho_for_eps as largest_rho

    return largest_rho(exact(eps, "eps"), exact(delta, "delta"))


@checked
def certificates(spec, *, rho=None, eps=None, delta=None) -> dict:
    """`das privacy SPEC`: the certificate of each release of a spec (a name, a path or a dict), at its own budget or
    at `rho` (or `eps` at `delta`) for the persons: release name -> Certificate (exact). Nothing is read but the spec.

    >>> certificates("tiny")["persons"].eps
    17.1436
    """
    from das.api.inputs import prepared
    from das.api.release import budget_given
    from das.pipeline import Pipeline

    with prepared(spec, name="spec") as ready:  # printing a certificate spends nothing: no cap
        return Pipeline.prepare(ready.spec, seed=None, allow_large_rho=True, budget=budget_given(rho, eps, delta)).certificates
