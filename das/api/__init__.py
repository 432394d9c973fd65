"""das as a Python library: the same work as the command line, with Python values in and out.

    import das
    release = das.run("tiny", persons=persons_frame, units=units_frame, out="runs/mine", seed=7)
    release.certificate.eps, release.tables["P1"], release.mdf, release.validate().ok

`das.run` (a TopDown release) and `das.synth` (another mechanism family) give a `Release`; `das.validate`
checks one; `das.metrics`, `das.replicate` and `das.compare` score releases against the truth (a `Study`);
`das.attack` runs the reconstruction audit (`AttackConfig` in, `AttackResult` out); `das.eps_for_rho` and
`das.rho_for_eps` convert a budget exactly. Specs are shipped names, paths or dicts; inputs paths or pandas
DataFrames, read by the same validating reader as files. Each function's arguments are its command's flags.
Messages go to the "das" logger (`logging`); see docs/api.md.
"""

from das.api.budget import certificates, eps_for_rho, rho_for_eps
from das.api.init import init_spec
from das.api.release import Release, publish, run, synth, validate
from das.api.studies import Study, compare, metrics, replicate
from das.attack.command import AttackConfig, AttackResult
from das.attack.command import run_attack as _run_attack
from das.errors import ArgumentError

WORKERS_NOTE = """Every function runs in one process by default (workers=1). With more, das starts worker processes
by "spawn", which imports the main module again in each: a script that asks for workers > 1 must keep its top-level
code under `if __name__ == "__main__":`, as every Python program that uses multiprocessing (a notebook or
`python -c` need nothing)."""


def attack(config: AttackConfig | None = None, /, **flags) -> AttackResult:
    """`das attack`: the reconstruction audit of a release (or of exact tables: published="exact"), scored against
    the confidential truth. Give an AttackConfig, or its fields as keywords (named as the flags: truth, published,
    out, level, runs, relaxed, steps, ...). Returns the geounits attacked and Match-Rate keyed by k (an int)."""
    if config is None:
        _check_attack_flags(flags)
        config = AttackConfig(**flags)
    elif flags:
        raise ArgumentError("give an AttackConfig or its fields as keywords, not both")
    elif not isinstance(config, AttackConfig):
        raise ArgumentError(f"das.attack takes an AttackConfig or its fields as keywords, not {type(config).__name__}")
    return _run_attack(config)


def _check_attack_flags(flags: dict) -> None:
    """`das.attack`'s keywords: AttackConfig's fields (a misspelled one refused naming the valid ones), each value by
    das.arguments' rule of its name, the fields without a default given."""
    from dataclasses import MISSING, fields

    from das import arguments

    known = {f.name: f for f in fields(AttackConfig)}
    arguments.check("attack", flags, valid=tuple(known), optional=tuple(n for n, f in known.items() if f.default is None),
                    rules={"truth": arguments.data, "published": arguments.path})
    missing = [n for n, f in known.items() if f.default is MISSING and f.default_factory is MISSING and n not in flags]
    if missing:
        raise ArgumentError(f"das.attack needs {', '.join(f'{n}=' for n in missing)} (the confidential persons file, the "
                            "release directory or \"exact\", the output directory)")


__all__ = ["AttackConfig", "AttackResult", "Release", "Study", "attack", "compare", "eps_for_rho", "init_spec", "metrics",
           "certificates", "publish", "replicate", "rho_for_eps", "run", "synth", "validate"]
