"""A run's confidential inputs, read one partition at a time: the whole input, or one state's files of a
partitioned run. One reader and one spine step serve both (`read_partition`), so a whole run and a state
task see their inputs the same way: validated, on the spec's spine, with the invariants they hold.

    Reader (schemas, levels, spine, area files: nothing confidential)
      -> read_partition (microdata -> geography, [preflight], spine, invariants, true block histograms)
      -> Confidential    (what the measurement and the post-processing take; in memory only)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from das.frame.records import PublishedInvariants, SpineRecord
from das.io.areas import Scope, read_areas
from das.io.microdata import Inputs, read_inputs
from das.io.outputs import SolvedRelease
from das.io.partitions import PartitionError
from das.model.geography import Geography
from das.model.levels import STATE
from das.model.rules import Invariants
from das.model.schema import Schema
from das.model.spine import block_order, spine_geography


@dataclass(frozen=True)
class Confidential:
    """The inputs of a partition as read (das.driver.inputs.read_partition): geography, invariants, true block
    histograms per release; what it publishes exactly and its size.
    On a spine other than the standard one (`on_spine`) the blocks are in the spine's order and
    `tabulation` is the standard geography the outputs are written in."""

    geography: Geography
    invariants: Invariants
    histograms: dict[str, sp.csr_matrix]
    tabulation: Geography | None = None
    spine_record: SpineRecord | None = None

    def on_spine(self, spine: Geography, record: SpineRecord | None = None) -> Confidential:
        """The same inputs with the blocks in the order of `spine` (the engine's geography)."""
        if spine is self.geography:
            return self
        order = block_order(spine, self.geography)
        invariants = replace(self.invariants, housing_units=self.invariants.housing_units[order],
                             gq_facilities=self.invariants.gq_facilities[order])
        histograms = {name: None if h is None else h[order] for name, h in self.histograms.items()}
        return Confidential(spine, invariants, histograms, tabulation=self.geography, spine_record=record)

    def published_invariants(self) -> PublishedInvariants:
        """The invariants published exactly (outside the budget) that a validator checks from the bundle alone."""
        units = self.geography.units
        return PublishedInvariants({level: dict(zip(units(level).tolist(), map(int, totals)))
                                    for level, totals in self.invariants.total_population.items()})

    @property
    def n_blocks(self) -> int:
        return self.geography.n_blocks

    def solved_release(self, schemas: dict[str, Schema], solved: dict[str, sp.csr_matrix]) -> SolvedRelease:
        """What the writers (das.io.outputs) take of a release solved from these inputs: in the standard
        geography, whatever the spine."""
        if self.tabulation is None:
            return SolvedRelease(self.geography, schemas, solved, self.invariants.gq_facilities,
                                 housing_units=self.invariants.housing_units)
        back = np.argsort(block_order(self.geography, self.tabulation))
        return SolvedRelease(self.tabulation, schemas, {name: h[back] for name, h in solved.items()},
                             self.invariants.gq_facilities[back], spine=self.geography,
                             housing_units=self.invariants.housing_units[back])


# the input preflight (das.driver.preflight.check_inputs with the run's plans bound): what it returns is kept
Preflight = Callable[[Inputs, Geography], object]


@dataclass(frozen=True)
class Reader:
    """How to read a partition of a run's inputs, none of it confidential: the schemas, the levels, the spec's
    spine and its area files, and (a partitioned run) every state of the run, each reading its own rows of
    the area files."""

    schemas: dict[str, Schema]
    levels: tuple[str, ...]
    spine: str = "standard"
    areas: dict[str, Path] = field(default_factory=dict)
    states: tuple[str, ...] = ()

    def on_spine(self, geography: Geography, *, state: str | None = None) -> tuple[Geography, SpineRecord | None]:
        """The engine's geography for the spec's spine (the area files read and checked against the blocks, a
        state's rows only when `state` is given: InputError before anything is drawn) and its record."""
        if self.spine == "standard":
            return geography, None
        scope = None if state is None else Scope(state, self.states)
        areas = read_areas(self.areas, geography.blocks, scope=scope)
        return (spine_geography(self.spine, geography, areas.ids),
                SpineRecord(self.spine, {t: f.sha256 for t, f in areas.files.items()}))


@dataclass(frozen=True)
class Partition:
    """A partition as read: its confidential inputs and what the input preflight returned (None: not run)."""

    confidential: Confidential
    checked: object = None


def read_partition(reader: Reader, persons: Path, units: Path, *, state: str | None = None,
                   preflight: Preflight | None = None) -> Partition:
    """Read and validate a partition's inputs (the whole input, or `state`'s files, which must hold that state's
    blocks only), run `preflight` on them (before the area files are read), and put them on the spine."""
    inputs = read_inputs(persons, units, reader.schemas["persons"], reader.schemas.get("units"))
    geography = Geography.from_blocks(inputs.inventory.blocks, reader.levels)
    if state is not None:
        found = geography.units(STATE).tolist()
        if found != [state]:
            raise PartitionError(f"{units}: holds blocks of state(s) {', '.join(found)}; the file is named for state "
                             f"{state} and must hold only that state's blocks")
    checked = None if preflight is None else preflight(inputs, geography)
    spine, record = reader.on_spine(geography, state=state)
    invariants = Invariants.from_inputs(inputs.inventory, inputs.person_histograms, geography)
    histograms = {"persons": inputs.person_histograms, "units": inputs.unit_histograms}
    return Partition(Confidential(geography, invariants, histograms).on_spine(spine, record), checked)
