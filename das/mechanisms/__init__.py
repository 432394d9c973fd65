"""Private synthetic-data mechanisms on census geography, with das's exact accounting and outputs.

`MECHANISMS` maps a name to a `Mechanism` (das.mechanisms.registry, the one list); `synthesize(spec, name, out_dir,
...)` writes a release in the layout of `das run` (docs/mechanisms.md). The mechanisms themselves (their budget plans
and runs) sit above the validator, which plans their charges again from a release's published bytes. Every name here
is imported when first used, so the command line can read the registry's names without importing a mechanism.
"""

from __future__ import annotations

_HOMES = {"MECHANISMS": "das.mechanisms.registry", "Mechanism": "das.mechanisms.base",
          "MechanismError": "das.mechanisms.base", "Synthesis": "das.mechanisms.base",
          "SynthesisInput": "das.mechanisms.base", "synthesize": "das.mechanisms.release"}


def __getattr__(name: str):
    if name in _HOMES:
        import importlib

        return getattr(importlib.import_module(_HOMES[name]), name)
    raise AttributeError(f"module 'das.mechanisms' has no attribute {name!r}")


__all__ = ["MECHANISMS", "Mechanism", "MechanismError", "Synthesis", "SynthesisInput", "synthesize"]
