"""The mechanisms das can run, by name (`das synth --mechanism NAME`, `synthesize(..., NAME)`)."""

from __future__ import annotations

from das.mechanisms.base import Mechanism
from das.mechanisms.flat import run as run_flat
from das.mechanisms.mwem import run as run_mwem
from das.mechanisms.pgm import EXTRA, available, run_aim, run_mst
from das.mechanisms.privbayes import run as run_privbayes
from das.mechanisms.privsyn import run as run_privsyn
from das.mechanisms.stability import run as run_stability

MECHANISMS: dict[str, Mechanism] = {
    "flat": Mechanism("flat", "discrete Gaussian on every cell of each block's detailed histogram, no hierarchy; "
                      "nonnegative integer projection per block", "per block (blocks are disjoint)", run_flat),
    "stability": Mechanism("stability", "stability-based histogram: discrete Laplace on nonzero (block, cell) bins, "
                           "released above an (eps, delta) threshold", "block as an attribute of one histogram",
                           run_stability),
    "mwem": Mechanism("mwem", "MWEM: exponential-mechanism choice of marginals, discrete Gaussian measurement, "
                      "multiplicative weights", "per tract, full domain (block in tract x attributes)", run_mwem),
    "privbayes": Mechanism("privbayes", "PrivBayes: Bayesian network chosen by the exponential mechanism, noisy "
                           "conditionals (discrete Gaussian)", "per tract, the block the network's first attribute",
                           run_privbayes),
    "privsyn": Mechanism("privsyn", "PrivSyn: DenseMarg greedy choice of pairs from noisy InDif, marginals by discrete "
                         "Gaussian allocated by cells^(2/3), GUM synthesis", "per tract, the block one attribute",
                         run_privsyn),
    "mst": Mechanism("mst", "MST: one-way marginals, a maximum spanning tree of pairs chosen by the exponential "
                     "mechanism, Private-PGM (mbi) estimation", "per tract, the block one attribute", run_mst,
                     extra=EXTRA, available=available),
    "aim": Mechanism("aim", "AIM (fixed rounds): exponential-mechanism choice among cliques of up to 3 attributes, "
                     "Private-PGM (mbi) estimation each round", "per tract, the block one attribute", run_aim,
                     extra=EXTRA, available=available),
}
