"""Privacy budgets, exactly: eps at delta to rho and back, and the certificate of a spec before any run.

    python examples/budgets.py
"""

from fractions import Fraction

import das

rho = das.rho_for_eps(4, "1e-10")  # the largest rho (6 significant digits) certified within eps 4 at delta 1e-10
print(f"eps 4 at delta 1e-10 -> rho = {rho} = {float(rho):.6f}")
print(f"rho {rho} -> eps = {das.eps_for_rho(rho, '1e-10')} at delta 1e-10")
assert das.eps_for_rho(rho, "1e-10") <= 4
print(f"the 2020 production persons budget: eps = {das.eps_for_rho(Fraction(293764, 114921), '1e-10')}")

# a spec is data: a dict works as well as a file (the tiny spec, at a budget of eps 4)
spec = {
    "name": "tiny_eps4",
    "levels": ["nation", "state", "county", "tract", "block_group", "block"],
    "input": {"persons": "geography_fixtures/tiny/persons.csv", "units": "geography_fixtures/tiny/units.csv"},
    "persons": {"schema": "pl94_persons", "strategy": "pl94_six_level", "eps": "4"},
    "privacy": {"delta": "1e-10"},
}
for release, cert in das.certificates(spec).items():  # `das privacy SPEC`: the certificate, before anything is read
    print(f"{release}: rho = {cert.rho}, eps = {cert.eps} at delta = {float(cert.delta):g}; "
          f"{len(cert.by_level)} levels, {sum(len(lv.queries) for lv in cert.by_level)} measurements")
