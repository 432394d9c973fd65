"""The mechanisms das can run, by name (`das synth --mechanism NAME`, `synthesize(..., NAME)`): the one list.

`ENTRIES` is plain data, so the command line reads the names without importing a mechanism (`das --help`
stays light); `MECHANISMS[name]` imports das.mechanisms.<module> when first asked and builds its `Mechanism` from the
module's `run`, `plan`, `DETAILS` and, where it has one, `GUARANTEE`. A new mechanism is one entry here.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, MutableMapping
from dataclasses import dataclass
from functools import cache


@dataclass(frozen=True)
class Entry:
    """A mechanism as listed: its module under das.mechanisms, what it does, how geography enters, its pip extra."""

    module: str
    summary: str
    geography: str
    extra: str | None = None  # `das[mbi]`: without it the mechanism cannot run (das.mechanisms.pgm.available)


ENTRIES: dict[str, Entry] = {
    "flat": Entry("flat", "discrete Gaussian on every cell of each block's detailed histogram, no hierarchy; "
                  "nonnegative integer projection per tract", "per block (blocks are disjoint)"),
    "stability": Entry("stability", "stability-based histogram: discrete Laplace on nonzero (block, cell) bins, "
                       "released above an (eps, delta) threshold, brought to noisy tract totals; (eps, delta)-DP "
                       "directly", "block as an attribute of one histogram"),
    "mwem": Entry("mwem", "MWEM: exponential-mechanism choice of marginals, discrete Gaussian measurement, "
                  "multiplicative weights", "per tract, full domain (block in tract x attributes)"),
    "privbayes": Entry("privbayes", "PrivBayes: Bayesian network chosen by the exponential mechanism, noisy "
                       "conditionals (discrete Gaussian)", "per tract, the block the network's first attribute"),
    "privsyn": Entry("privsyn", "PrivSyn: DenseMarg greedy choice of pairs from noisy InDif, marginals by discrete "
                     "Gaussian allocated by cells^(2/3), GUM synthesis", "per tract, the block one attribute"),
    "mst": Entry("mst", "MST: one-way marginals, the block's pairs (a star), a maximum spanning tree of pairs "
                 "among the other attributes chosen by the exponential mechanism, Private-PGM (mbi) estimation",
                 "per tract, the block one attribute", extra="mbi"),
    "aim": Entry("aim", "AIM (annealed rounds under a privacy filter): exponential-mechanism choice among cliques of "
                 "up to 3 attributes, Private-PGM (mbi) estimation each round", "per tract, the block one attribute",
                 extra="mbi"),
    "rap": Entry("rap", "RAP (relaxed adaptive projection): rounds of exponential-mechanism choices of the worst "
                 "answered queries, discrete Gaussian measurement, relaxed records fit by gradient descent",
                 "per tract, the block one attribute"),
}


@cache
def mechanism(name: str):
    """The `Mechanism` of `name` (KeyError if das has none), its module imported on first use."""
    from das.mechanisms.base import Mechanism

    entry = ENTRIES[name]
    module = importlib.import_module(f"das.mechanisms.{entry.module}")
    optional = {"guarantee": module.GUARANTEE} if hasattr(module, "GUARANTEE") else {}
    if entry.extra is not None:
        from das.mechanisms.pgm import EXTRA, available

        if entry.extra != EXTRA:
            raise ValueError(f"mechanism {name!r}: das knows no check for the extra {entry.extra!r}")
        optional |= {"extra": entry.extra, "available": available}
    return Mechanism(name, entry.summary, entry.geography, module.run, plan=module.plan, details=module.DETAILS,
                     **optional)


class _Mechanisms(MutableMapping):
    """name -> Mechanism, in `ENTRIES`' order, each built when first asked (`mechanism`); a `Mechanism` set here
    in-process (a test's stand-in) is served instead, and deleted again leaves the entry's own."""

    def __init__(self):
        self._given: dict = {}

    def __getitem__(self, name: str):
        if name in self._given:
            return self._given[name]
        if name not in ENTRIES:
            raise KeyError(name)
        return mechanism(name)

    def __setitem__(self, name: str, value) -> None:
        if name in ENTRIES and value is mechanism(name):  # the entry's own again (a stand-in undone): no override
            self._given.pop(name, None)
        else:
            self._given[name] = value

    def __delitem__(self, name: str) -> None:
        del self._given[name]

    def __contains__(self, name: object) -> bool:
        return name in ENTRIES or name in self._given

    def __iter__(self) -> Iterator[str]:
        return iter([*ENTRIES, *(n for n in self._given if n not in ENTRIES)])

    def __len__(self) -> int:
        return len(set(ENTRIES) | set(self._given))


MECHANISMS: MutableMapping = _Mechanisms()
