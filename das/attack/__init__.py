"""The reconstruction audit and the empirical privacy audit (`das attack`; in Python `das.attack(...)`, which is
das.api.attack: the audit of das/attack/command.py with a typed configuration and result)."""
