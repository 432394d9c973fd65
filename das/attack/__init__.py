"""The reconstruction audit and the empirical privacy audit. `das.attack(...)` (this package, called) is
das.api.attack: the audit of das/attack/command.py with a typed configuration and result."""

from das import callable_module

callable_module(__name__)
