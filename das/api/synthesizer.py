"""`das.synthesizer`: a synthetic-data mechanism in the shape synthesizer libraries use, fit on DataFrames.

    synth = das.synthesizer("mst", eps=1, out="runs/mst")     # checked here: mechanism, budget
    release = synth.fit(persons, units).sample()               # fit spends the budget once; sample reads it

Underneath is `das.synth`, the one path: `fit` measures the data (every noise draw), fits the mechanism's model,
generates its records and writes, validates and signs the release; `sample` returns that release (a
`das.Release`, the same object and files `das synth` writes). The mechanisms release the records their noisy
model gives, whose number is part of what they release, so sampling takes no record count, and sampling again
draws nothing: it returns the same release, spending no budget. Only a new `fit` draws new noise (and spends
the budget again, into a new release).
"""

from __future__ import annotations

import os
from fractions import Fraction
from types import MappingProxyType

from das.api.inputs import Input
from das.api.release import Release, exact, synth
from das.core.arguments import checked


class Synthesizer:
    """A mechanism of `das synth` with its spec, budget and output directory (das.synth's keywords, checked by
    `das.synthesizer`, which makes it), and the release of its last fit."""

    def __init__(self, mechanism: str, **options):
        self.mechanism = mechanism
        self.options = MappingProxyType(dict(options))  # das.synth's keywords: spec, eps, delta, rho, out, seed, ...
        self._release: Release | None = None

    def __repr__(self) -> str:
        given = ", ".join(f"{k}={str(v) if isinstance(v, Fraction) else repr(v)}" for k, v in self.options.items()
                          if v is not None and v is not False)
        fitted = f", fitted: {self._release!r}" if self._release is not None else ", not fit"
        return f"Synthesizer({self.mechanism!r}, {given}{fitted})"

    def fit(self, persons: Input, units: Input) -> Synthesizer:
        """Run the mechanism on `persons` and `units` (pandas DataFrames, or paths: read as das.run reads them):
        the noise is drawn and the budget spent here, once; the release is written to `out`. Returns self."""
        self._release = None  # a failed fit leaves nothing to sample
        self._release = synth(self.options["spec"], mechanism=self.mechanism, persons=persons, units=units,
                              **{k: v for k, v in self.options.items() if k != "spec"})
        return self

    def sample(self) -> Release:
        """The synthetic release of the last `fit`: the same `das.Release` each time, drawing no new noise."""
        if self._release is None:
            from das.mechanisms import MechanismError

            raise MechanismError(f"synthesizer {self.mechanism!r} is not fit: call .fit(persons, units) first")
        return self._release

    def fit_sample(self, persons: Input, units: Input) -> Release:
        """`fit(persons, units).sample()`."""
        return self.fit(persons, units).sample()


@checked
def synthesizer(mechanism: str, *, spec="tiny", eps=None, delta=None, rho=None, out: str | os.PathLike | None = None,
                seed: int | None = None, overwrite: bool = False, allow_large_rho: bool = False,
                signing_key: str | os.PathLike | None = None) -> Synthesizer:
    """A synthesizer of `das synth`'s mechanism, in the shape synthesizer libraries use: `fit` on DataFrames,
    then `sample` its release.

    Args:
        mechanism: flat, stability, mwem, privbayes, privsyn, mst or aim (docs/mechanisms.md).
        spec: the run spec whose schema (the data's domain), geography levels and delta the mechanism uses: a
            shipped name (default "tiny": PL 94-171 persons and units at six levels), a path or a dict; its
            inputs are fit's.
        eps, delta, rho: the persons budget, eps at delta or rho, exact (a float is the decimal it prints as;
            default the spec's).
        out: the release directory (default runs/NAME).
        seed: replication mode (seeded noise, NOT private).
        overwrite, allow_large_rho, signing_key: as das.synth's.

    Returns:
        A `Synthesizer`: `.fit(persons, units)` spends the budget once and writes the release (returns the
        synthesizer); `.sample()` returns that release (a das.Release) as often as asked, drawing no new noise.

    Raises:
        MechanismError: an unknown mechanism. SpecError: a budget that is not a number. Both here, before
            anything is read; fit raises what das.synth raises.

    Example:
        >>> synthesizer("flat", eps=1, out=getfixture("tmp_path") / "flat", seed=1).fit(
        ...     "geography_fixtures/tiny/persons.csv", "geography_fixtures/tiny/units.csv").sample().valid
        True
    """
    from das.mechanisms import MECHANISMS, MechanismError

    if mechanism not in MECHANISMS:
        raise MechanismError(f"unknown mechanism {mechanism!r}; choose from {', '.join(MECHANISMS)}")
    budget = {name: exact(value, name) for name, value in (("rho", rho), ("eps", eps), ("delta", delta))}
    return Synthesizer(mechanism, spec=spec, **budget, out=out, seed=seed, overwrite=overwrite,
                       allow_large_rho=allow_large_rho, signing_key=signing_key)
