"""What the checks read: the release being validated (the driver's view, sent to the workers as it is)
and one state's rows of it (a worker's, each read once, when a check first asks for it).

Every path comes from das.frame.rundir.RunDir; every read of a Parquet file from das.validate.reading.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path

import numpy as np
import pandas as pd

from das.core.errors import ValidationError
from das.frame.manifest import Manifest
from das.frame.rundir import RunDir
from das.model.levels import STATE
from das.model.schema import Schema
from das.validate.reading import GEO, columns, decode, present, read_state, states_in
from das.validate.shards import Shard

HOUSING_UNIT, GQ_FACILITY = 2, 4  # units MDF RTYPE
GQ_TYPES = 7  # units MDF GQTYPE_PL 1..7 of a facility

# the operator's inputs: the two files, or (a partitioned run) each state's own two files
Inputs = tuple[Path, Path] | dict[str, tuple[Path, Path]]


@dataclass(frozen=True)
class OpenRelease:
    """A release being validated: its directory, manifest and claims, what its checks read besides the
    persons MDF (`needs`: "units", "inputs"), the operator's public key it is checked against (PEM; None:
    no proof of origin), and what the driver found before the states run: its states, its MDFs' columns,
    the confidential inputs it is compared with (None: none)."""

    run: RunDir
    manifest: Manifest
    claims: frozenset[str]
    needs: frozenset[str] = frozenset()
    public_key: bytes | None = None
    states: tuple[str, ...] = ()
    columns: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # MDF kind -> its columns
    inputs: Inputs | None = None

    @property
    def with_units(self) -> bool:
        """Whether a check reads the units MDF (a release with one claims so)."""
        return "units" in self.needs

    @property
    def published(self) -> Mapping[str, Mapping[str, int]]:
        """The published total population: level -> geocode -> persons."""
        return self.manifest.invariants.total_population or {}

    def schemas(self) -> tuple[Schema, Schema | None]:
        """The persons schema and the units schema (None: a release without units), as the manifest names them."""
        manifest = self.manifest
        try:
            return manifest.schema_of("persons"), manifest.schema_of("units") if manifest.units else None
        except Exception as e:
            raise ValidationError(f"{self.run.manifest_path}: {e}") from None

    @property
    def nmf_only(self) -> bool:
        """Whether it is an NMF release (`is_nmf_release`): its noisy measurements, no MDF or tables."""
        return is_nmf_release(self.manifest)

    @property
    def topdown(self) -> bool:
        """Whether it is a TopDown release (`is_topdown`)."""
        return is_topdown(self.run, self.manifest)

    def but(self, **changes) -> OpenRelease:
        return replace(self, **changes)


def is_topdown(run: RunDir, manifest: Manifest) -> bool:
    """A TopDown release (`das run`), whatever its manifest claims: no mechanism named, or anything only
    TopDown has (an NMF listed or present, a units release, charges by level in a certificate, or a
    certificate without a synthetic mechanism's charges). A synthetic release (das synth) has none of those."""
    return (manifest.mechanism is None or bool(manifest.nmf) or manifest.units is not None
            or any(c.by_level or not c.synthetic for c in manifest.privacy.values())
            or run.nmf_dir.exists() and any(run.nmf_dir.rglob("*")))


def is_nmf_release(manifest: Manifest) -> bool:
    """An NMF release (`das measure`): the noisy measurements and their certificate, published on their own
    (status "measured": nothing was post-processed, so there is no MDF or table)."""
    return manifest.status == "measured"


def nmf_states(release: OpenRelease) -> list[str]:
    """The states of an NMF release: the published ones, else those of its levels stored one file per state."""
    found = {state for name, cert in release.manifest.privacy.items() for level in cert.by_level
             for _, state in release.run.nmf_level_files(name, level.level) if state is not None}
    return sorted(release.published.get(STATE, {})) or sorted(found)


def open_release(release: OpenRelease) -> OpenRelease:
    """The release with what the driver reads before the states run: its schemas loaded (or ValidationError),
    its MDFs' columns (each with the geography columns), and its states (the published ones, else the
    persons MDF's; an NMF release's: `nmf_states`)."""
    release.schemas()
    if release.nmf_only:  # no MDF: the states are the NMF's
        return release.but(states=tuple(nmf_states(release)))
    run = release.run
    kinds = ("persons", "units") if release.with_units else ("persons",)
    found = {kind: tuple(columns(run.mdf(kind))) for kind in kinds}
    for names in found.values():
        missing = [c for c in GEO if c not in names]
        if missing:
            raise ValidationError(f"{run.path}: an MDF file has no column {missing[0]}")
    states = sorted(release.published.get(STATE, {})) or states_in(run.mdf("persons"))
    return release.but(columns=found, states=tuple(states))


class StateRows:
    """One shard of a state's rows of a release (das.validate.shards: the whole state, or its records of a
    run of counties): its MDF records (with their rows in the files), read when first asked for, and what
    every check derives from them alike (levels, the blocks of the release universe)."""

    def __init__(self, release: OpenRelease, shard: Shard | str):
        self.shard = Shard(shard) if isinstance(shard, str) else shard
        self.release, self.state = release, self.shard.state
        self.persons_schema, self.units_schema = release.schemas()

    def _read(self, kind: str, names: list[str] | None = None) -> tuple[pd.DataFrame, np.ndarray]:
        return read_state(self.release.run.mdf(kind), self.state, names, counties=self.shard.counties)

    @cached_property
    def _units(self) -> tuple[pd.DataFrame, np.ndarray]:
        return self._read("units")

    @property
    def units(self) -> pd.DataFrame:
        """The shard's units MDF records, with their `geocode`."""
        return self._units[0]

    @property
    def unit_rows(self) -> np.ndarray:
        """Each of `units`' row in the units MDF (0-based)."""
        return self._units[1]

    @cached_property
    def _persons(self) -> tuple[pd.DataFrame, np.ndarray]:
        return self._read("persons")

    @property
    def persons(self) -> pd.DataFrame:
        """The shard's persons MDF records, with their `geocode`."""
        return self._persons[0]

    @property
    def person_rows(self) -> np.ndarray:
        """Each of `persons`' row in the persons MDF (0-based)."""
        return self._persons[1]

    @cached_property
    def universe(self) -> np.ndarray:
        """The shard's blocks of the release universe: those with a housing unit or facility, sorted (only
        the units MDF's geography is read when no check has read its records)."""
        units = self.units if "_units" in self.__dict__ else self._read("units", GEO)[0]
        return present(units["geocode"])

    @cached_property
    def outside(self) -> np.ndarray:
        """The persons' blocks outside the release universe."""
        return np.setdiff1d(present(self.persons["geocode"]), self.universe)

    @cached_property
    def levels(self) -> pd.DataFrame:
        """The persons' attribute levels (ValueError or KeyError: a code or column of the schema is not there)."""
        return decode(self.persons, self.persons_schema)

    @cached_property
    def housing(self) -> pd.DataFrame:
        """The state's housing units (its units MDF records of RTYPE housing unit)."""
        return self.units[self.units["RTYPE"].astype(int) == HOUSING_UNIT].reset_index(drop=True)

    @cached_property
    def unit_levels(self) -> pd.DataFrame | None:
        """The housing units' attribute levels of the units schema (None: no units schema)."""
        return decode(self.housing, self.units_schema) if self.units_schema else None
