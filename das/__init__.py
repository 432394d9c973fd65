"""das: an open disclosure avoidance system (TopDown with exact discrete-Gaussian noise), as a command
line (`das --help`) and as a Python library:

    import das
    release = das.run("tiny", persons=persons, units=units, out="runs/tiny_api", seed=7)
    release.certificate.eps, release.tables["P1"], release.mdf, release.validate().ok

The library's names are das.API (each one's own help: `help(das.run)`) and the namespaces das.MODULES (`das.nmf.read`);
the reference is docs/api.md.
`import das` reads nothing heavy: each name is imported when first used.
"""

import sys
import types

__version__ = "0.1.0"

API = ("AttackConfig", "AttackResult", "Estimate", "Release", "Study", "attack", "compare", "eps_for_rho", "init_spec",
       "metrics", "certificates", "postprocess", "publish", "replicate", "rho_for_eps", "run", "synth", "synthesizer",
       "validate")
# das.validate and das.attack are also packages (the work behind the commands of those names): the package keeps the
# API's functions under those names, and the packages are imported as ever (`from das.validate import ...`), so
# `help(das.validate)` is the function's own.
_SHADOWED = frozenset({"validate", "attack"})
MODULES = ("nmf",)  # the API's namespaces: das.nmf.read
ERRORS = ("DasError", "SpecError", "BudgetError", "ArgumentError", "UnknownNameError", "InputError", "OutDirError",
          "ValidationError", "ReleaseError", "StudyError", "RunError", "RunStopped", "SolverError")  # das.core.errors'


class _Package(types.ModuleType):
    """The das package: importing a submodule whose name is an API function's does not rebind the function."""

    def __setattr__(self, name, value):
        if name in _SHADOWED and isinstance(value, types.ModuleType):
            return  # the import system binding das.validate (the package): the module stays in sys.modules only
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package


def __getattr__(name: str):
    if name in ERRORS:
        from das.core import errors  # light: imports nothing of das's

        return getattr(errors, name)
    if name in API or name in MODULES:
        from das import api

        return getattr(api, name)
    raise AttributeError(f"module 'das' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(API) | set(MODULES) | set(ERRORS))
