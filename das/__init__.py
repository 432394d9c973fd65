"""das: an open disclosure avoidance system (TopDown with exact discrete-Gaussian noise), as a command
line (`das --help`) and as a Python library:

    import das
    release = das.run("tiny", persons=persons, units=units, out="runs/tiny_api", seed=7)
    release.certificate.eps, release.tables["P1"], release.mdf, release.validate().ok

The library's names (das.api): run, synth, validate, publish, certificates, metrics, replicate, compare, attack, init_spec,
eps_for_rho, rho_for_eps, Release, Study, AttackConfig, AttackResult. `import das` reads nothing heavy: each name is
imported when first used. `das.run`, `das.validate`, `das.attack` and `das.publish` are also the modules of those names; calling
one calls the API's function (`das.run(...)` is `das.api.run(...)`). Reference: docs/api.md.
"""

import types

__version__ = "0.1.0"

API = ("AttackConfig", "AttackResult", "Release", "Study", "attack", "compare", "eps_for_rho", "init_spec", "metrics",
       "certificates", "publish", "replicate", "rho_for_eps", "run", "synth", "validate")
ERRORS = ("DasError", "SpecError", "BudgetError", "ArgumentError", "UnknownNameError", "InputError", "OutDirError",
          "ValidationError", "ReleaseError", "StudyError", "RunError", "RunStopped", "SolverError")  # das.errors'
_MODULES = ("run", "validate", "attack", "publish")  # names that are modules of das too (callable: the API's function)


class CallableModule(types.ModuleType):
    """A module of das that is also the API's function of its name: `das.run(...)` calls das.api.run, while
    `from das.run import ...` and `das.run.render_summary` are the module's as ever."""

    def __call__(self, *args, **kwargs):
        from das import api  # the library's face: imported when first called, so `import das` stays light

        return getattr(api, self.__name__.rsplit(".", 1)[-1])(*args, **kwargs)

    @property
    def __signature__(self):
        import inspect

        from das import api

        return inspect.signature(getattr(api, self.__name__.rsplit(".", 1)[-1]))


def callable_module(name: str) -> None:
    """Make module `name` (das.run, das.validate, das.attack, das.publish) callable as the API's function of its name."""
    import sys

    sys.modules[name].__class__ = CallableModule


def __getattr__(name: str):
    if name in _MODULES:
        import importlib

        return importlib.import_module(f"das.{name}")  # the module, callable (see CallableModule)
    if name in ERRORS:
        from das import errors  # light: imports nothing of das's

        return getattr(errors, name)
    if name in API:
        from das import api

        return getattr(api, name)
    raise AttributeError(f"module 'das' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(API) | set(ERRORS))
