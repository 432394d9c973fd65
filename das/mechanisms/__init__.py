"""Private synthetic-data mechanisms on census geography, with das's exact accounting and outputs.

`MECHANISMS` maps a name to a `Mechanism`; `synthesize(spec, name, out_dir, ...)` writes a release in
the layout of `das run` (docs/mechanisms.md).
"""

from __future__ import annotations

from das.mechanisms import flat, mwem, pgm, privbayes, privsyn, stability
from das.mechanisms.base import Mechanism, MechanismError, Synthesis, SynthesisInput
from das.mechanisms.release import synthesize

MECHANISMS: dict[str, Mechanism] = {
    "flat": Mechanism("flat", "discrete Gaussian on every cell of each block's detailed histogram, no hierarchy; "
                      "nonnegative integer projection per block", "per block (blocks are disjoint)", flat.run),
    "stability": Mechanism("stability", "stability-based histogram: discrete Laplace on nonzero (block, cell) bins, "
                           "released above an (eps, delta) threshold", "block as an attribute of one histogram",
                           stability.run),
    "mwem": Mechanism("mwem", "MWEM: exponential-mechanism choice of marginals, discrete Gaussian measurement, "
                      "multiplicative weights", "per tract, full domain (block in tract x attributes)", mwem.run),
    "privbayes": Mechanism("privbayes", "PrivBayes: Bayesian network chosen by the exponential mechanism, noisy "
                           "conditionals (discrete Gaussian)", "per tract, the block the network's first attribute",
                           privbayes.run),
    "privsyn": Mechanism("privsyn", "PrivSyn: DenseMarg greedy choice of pairs from noisy InDif, marginals by discrete "
                         "Gaussian allocated by cells^(2/3), GUM synthesis", "per tract, the block one attribute",
                         privsyn.run),
    "mst": Mechanism("mst", "MST: one-way marginals, a maximum spanning tree of pairs chosen by the exponential "
                     "mechanism, Private-PGM (mbi) estimation", "per tract, the block one attribute", pgm.run_mst,
                     extra=pgm.EXTRA, available=pgm.available),
    "aim": Mechanism("aim", "AIM (fixed rounds): exponential-mechanism choice among cliques of up to 3 attributes, "
                     "Private-PGM (mbi) estimation each round", "per tract, the block one attribute", pgm.run_aim,
                     extra=pgm.EXTRA, available=pgm.available),
}

__all__ = ["MECHANISMS", "Mechanism", "MechanismError", "Synthesis", "SynthesisInput", "synthesize"]
