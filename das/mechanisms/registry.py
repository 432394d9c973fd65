"""The mechanisms das can run, by name (`das synth --mechanism NAME`, `synthesize(..., NAME)`)."""

from __future__ import annotations

import das.mechanisms.aim as aim
import das.mechanisms.flat as flat
import das.mechanisms.mst as mst
import das.mechanisms.mwem as mwem
import das.mechanisms.privbayes as privbayes
import das.mechanisms.privsyn as privsyn
import das.mechanisms.rap as rap
import das.mechanisms.stability as stability
from das.mechanisms.base import Mechanism
from das.mechanisms.pgm import EXTRA, available

MECHANISMS: dict[str, Mechanism] = {
    "flat": Mechanism("flat", "discrete Gaussian on every cell of each block's detailed histogram, no hierarchy; "
                      "nonnegative integer projection per tract", "per block (blocks are disjoint)", flat.run, plan=flat.plan,
                      details=flat.DETAILS),
    "stability": Mechanism("stability", "stability-based histogram: discrete Laplace on nonzero (block, cell) bins, "
                           "released above an (eps, delta) threshold, brought to noisy tract totals; (eps, delta)-DP "
                           "directly", "block as an attribute of one histogram",
                           stability.run, plan=stability.plan, details=stability.DETAILS,
                           guarantee=stability.GUARANTEE),
    "mwem": Mechanism("mwem", "MWEM: exponential-mechanism choice of marginals, discrete Gaussian measurement, "
                      "multiplicative weights", "per tract, full domain (block in tract x attributes)", mwem.run, plan=mwem.plan,
                      details=mwem.DETAILS),
    "privbayes": Mechanism("privbayes", "PrivBayes: Bayesian network chosen by the exponential mechanism, noisy "
                           "conditionals (discrete Gaussian)", "per tract, the block the network's first attribute",
                           privbayes.run, plan=privbayes.plan, details=privbayes.DETAILS),
    "privsyn": Mechanism("privsyn", "PrivSyn: DenseMarg greedy choice of pairs from noisy InDif, marginals by discrete "
                         "Gaussian allocated by cells^(2/3), GUM synthesis", "per tract, the block one attribute",
                         privsyn.run, plan=privsyn.plan, details=privsyn.DETAILS),
    "mst": Mechanism("mst", "MST: one-way marginals, the block's pairs (a star), a maximum spanning tree of pairs "
                     "among the other attributes chosen by the exponential mechanism, Private-PGM (mbi) estimation",
                     "per tract, the block one attribute", mst.run, plan=mst.plan,
                     extra=EXTRA, available=available, details=mst.DETAILS),
    "aim": Mechanism("aim", "AIM (annealed rounds under a privacy filter): exponential-mechanism choice among cliques of "
                     "up to 3 attributes, Private-PGM (mbi) estimation each round", "per tract, the block one attribute",
                     aim.run, plan=aim.plan, extra=EXTRA, available=available, details=aim.DETAILS),
    "rap": Mechanism("rap", "RAP (relaxed adaptive projection): rounds of exponential-mechanism choices of the worst "
                     "answered queries, discrete Gaussian measurement, relaxed records fit by gradient descent",
                     "per tract, the block one attribute", rap.run, plan=rap.plan, details=rap.DETAILS),
}
