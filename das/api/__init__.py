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

from das.api import nmf
from das.api.budget import certificates, eps_for_rho, rho_for_eps
from das.api.init import init_spec
from das.api.postprocessing import Estimate, postprocess
from das.api.release import Release, publish, run, synth, validate
from das.api.studies import Study, compare, metrics, replicate
from das.api.synthesizer import synthesizer
from das.attack.command import AttackConfig, AttackResult
from das.attack.command import run_attack as _run_attack
from das.core.errors import ArgumentError


def attack(config: AttackConfig | None = None, /, **flags) -> AttackResult:
    """The reconstruction audit of a release (or of exact tables), scored against the confidential truth, as
    `das attack` runs it.

    Args:
        config: an AttackConfig; or none, and its fields as keywords.
        flags: AttackConfig's fields (named as the command's flags: truth, published, out, level, geounits,
            runs, relaxed, steps, ...; see AttackConfig).

    Returns:
        AttackResult: the geounits attacked and the pooled Match-Rate by method, keyed by k (an int).

    Raises:
        AttackError: an option out of range or an input that cannot be attacked, naming the option.

    Example:
        >>> result = attack(truth="geography_fixtures/tiny/persons.csv", published="exact",
        ...                 out=getfixture("tmp_path") / "a", count=1, runs=2, relaxed=50, steps=20, ip_top=0)
        >>> sorted(result.match_rate) == ["baseline_county", "baseline_tract", "rap_rank"]
        True
    """
    if config is None:
        _check_attack_flags(flags)
        config = AttackConfig(**flags)
    elif flags:
        raise ArgumentError("give an AttackConfig or its fields as keywords, not both")
    elif not isinstance(config, AttackConfig):
        raise ArgumentError(f"das.attack takes an AttackConfig or its fields as keywords, not {type(config).__name__}")
    return _attack_files(config)


def _attack_files(config: AttackConfig) -> AttackResult:
    """The attack with its truth and holdout read as das reads inputs: a DataFrame by the one validating reader, from
    its CSV text in memory (das.api.inputs.source_of), its problems said of "the truth DataFrame"."""
    from dataclasses import replace

    from das.api.inputs import sources

    return _run_attack(replace(config, **sources({"truth": config.truth, "holdout": config.holdout})))


def _check_attack_flags(flags: dict) -> None:
    """`das.attack`'s keywords: AttackConfig's fields (a misspelled one refused naming the valid ones), each value by
    das.core.arguments' rule of its name, the fields without a default given."""
    from dataclasses import MISSING, fields

    from das.core import arguments

    known = {f.name: f for f in fields(AttackConfig)}
    arguments.check("attack", flags, valid=tuple(known), optional=tuple(n for n, f in known.items() if f.default is None),
                    rules={"truth": arguments.data, "published": arguments.path})
    missing = [n for n, f in known.items() if f.default is MISSING and f.default_factory is MISSING and n not in flags]
    if missing:
        raise ArgumentError(f"das.attack needs {', '.join(f'{n}=' for n in missing)} (the confidential persons file, the "
                            "release directory or \"exact\", the output directory)")


__all__ = ["AttackConfig", "AttackResult", "Estimate", "Release", "Study", "attack", "compare", "eps_for_rho", "init_spec",
           "metrics", "certificates", "nmf", "postprocess", "publish", "replicate", "rho_for_eps", "run", "synth", "validate",
           "synthesizer"]
