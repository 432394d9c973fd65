"""Private synthetic-data mechanisms on census geography, with das's exact accounting and outputs.

`MECHANISMS` maps a name to a `Mechanism`; `synthesize(spec, name, out_dir, ...)` writes a release in
the layout of `das run` (docs/mechanisms.md).
"""

from __future__ import annotations

from das.mechanisms import flat
from das.mechanisms.base import Mechanism, MechanismError, Synthesis, SynthesisInput
from das.mechanisms.release import synthesize

MECHANISMS: dict[str, Mechanism] = {
    "flat": Mechanism("flat", "discrete Gaussian on every cell of each block's detailed histogram, no hierarchy; "
                      "nonnegative integer projection per block", "per block (blocks are disjoint)", flat.run),
}

__all__ = ["MECHANISMS", "Mechanism", "MechanismError", "Synthesis", "SynthesisInput", "synthesize"]
