"""Private synthetic-data mechanisms on census geography, with das's exact accounting and outputs.

`MECHANISMS` maps a name to a `Mechanism`; `synthesize(spec, name, out_dir, ...)` writes a release in
the layout of `das run` (docs/mechanisms.md). The mechanisms themselves (their budget plans and runs) sit
above the validator, which plans their charges again from a release's published bytes; `synthesize`,
which writes and validates a release, is imported when first used.
"""

from __future__ import annotations

from das.mechanisms.base import Mechanism, MechanismError, Synthesis, SynthesisInput
from das.mechanisms.registry import MECHANISMS


def __getattr__(name: str):
    if name == "synthesize":
        from das.mechanisms.release import synthesize
        return synthesize
    raise AttributeError(f"module 'das.mechanisms' has no attribute {name!r}")

__all__ = ["MECHANISMS", "Mechanism", "MechanismError", "Synthesis", "SynthesisInput", "synthesize"]
