"""`das.run`, `das.synth`, `das.validate` and the `Release` they give back.

A release is a directory on disk (what `das run` and `das synth` write, a publishable bundle); `Release`
reads it as Python values: its typed certificate, its tables and MDF as pandas DataFrames (geography as
plain strings, so `mdf.TABBLKST + mdf.TABBLKCOU` is a county code), its manifest, and its validation.
"""

from __future__ import annotations

import logging
import math
import numbers
import os
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from functools import cached_property
from pathlib import Path

from das.api.inputs import Input, is_frame, run_spec, source_of
from das.core import arguments
from das.core.arguments import checked
from das.core.errors import SpecError, UnknownNameError
from das.frame.manifest import Manifest
from das.frame.rundir import RunDir
from das.model.specfile import parse_fraction
from das.privacy.certificate import Certificate
from das.privacy.guarantee import Guarantee, combined

logger = logging.getLogger(__name__)


def exact(value, name: str) -> Fraction | None:
    """A budget given in Python as the exact positive rational it names: a Fraction, an int, a string ("1/2",
    "0.25", "1e-10") or a float, taken as the decimal it prints as (`Fraction(repr(x))`: `delta=1e-10` is exactly
    1/10**10, `eps=4.0` is 4, never the binary float's 1.0000000000000000364e-10). SpecError naming `name` for
    anything else (a bool, NaN, infinity, zero, a negative number, a text that is no number).

    >>> exact("1/2", "rho"), exact(2, "eps"), exact(1e-10, "delta"), exact(None, "delta")
    (Fraction(1, 2), Fraction(2, 1), Fraction(1, 10000000000), None)
    """
    if value is None:
        return None
    if isinstance(value, bool):
        raise SpecError(f"{name}: {value!r} is a bool, not a budget: give a positive number like 1, 0.25 or \"1/2\"")
    if isinstance(value, numbers.Integral):
        value = int(value)  # numpy's integers too
    elif isinstance(value, numbers.Real) and not isinstance(value, (Fraction, Decimal)):
        number = float(value)  # a float (numpy's too): the decimal it prints as
        if not math.isfinite(number):
            raise SpecError(f"{name}: {value!r} is not a finite number: give a positive number like 1, 0.25 or \"1/2\"")
        value = repr(number)
    elif isinstance(value, Decimal):
        if not value.is_finite():
            raise SpecError(f"{name}: {value} is not a finite number: give a positive number like 1, 0.25 or \"1/2\"")
        value = Fraction(value)
    if isinstance(value, Fraction):
        if value <= 0:
            raise SpecError(f"{name}: must be positive, got {value}")
        return value
    return parse_fraction(value, name)


def budget_given(rho, eps, delta):
    """The command line's budget arguments as das.driver.runspec.Budget (None when none is given)."""
    from das.driver.runspec import Budget

    given = Budget(rho=exact(rho, "rho"), eps=exact(eps, "eps"), delta=exact(delta, "delta"))
    return given if given else None


@dataclass(frozen=True)
class Release:
    """A finished release directory (`das run` or `das synth` output, or a published bundle), read as Python
    values, each when first asked for.

    `certificate` is the persons release's privacy certificate (exact Fractions: rho, and eps at delta);
    `tables` maps a table name (P1 ... P5, H1) to a DataFrame, a row per geounit at every level; `mdf` is the
    persons microdata (one row per person); `valid` is the validation recorded when the release was written,
    and `validate()` checks it again from its files.

    Example:
        >>> release = Release.open(run("tiny", out=getfixture("tmp_path") / "r", seed=2, progress=False).path)
        >>> release.private, len(release.mdf) == release.tables["P1"].query("level == 'nation'")["total"].item()
        (False, True)
    """

    path: Path
    manifest: Manifest

    @classmethod
    def open(cls, path: str | os.PathLike) -> Release:
        """The release in a directory.

        Args:
            path: a finished `das run` or `das synth` directory, or a published bundle.

        Returns:
            The `Release`.

        Raises:
            RunDirError: `path` is not a finished release. ArgumentError: `path` is not a path.
        """
        arguments.path(path, "path")
        return cls(Path(path), RunDir(path).read_complete())

    @property
    def certificate(self) -> Certificate:
        """The persons release's certificate: rho (exact), eps at delta, the charges by level and query."""
        return self.manifest.certificate("persons")

    @property
    def certificates(self) -> Mapping[str, Certificate]:
        """Every release's certificate ("persons", and "units" for a TopDown release)."""
        return dict(self.manifest.privacy)

    @property
    def guarantee(self) -> Guarantee:
        """The run's total guarantee: its releases' certificates composed (das.privacy.guarantee; persons and units by
        zCDP composition, rho adding), as its manifest states it: `rho` (exact), `eps` at `delta`, `releases`,
        `composition`. A budget given as `rho`/`eps` is the persons release's; this is what the whole run spends.

        >>> r = run("tiny", out=getfixture("tmp_path") / "t", seed=1, workers=1, progress=False, eps=4.0, delta=1e-10)
        >>> r.certificate.eps <= 4, r.certificates["units"].eps, r.guarantee.eps, r.guarantee.releases
        (True, 2.4747, 4.7993, ('persons', 'units'))
        """
        return self.manifest.guarantee or combined(self.manifest.privacy)

    @property
    def budget(self):
        """The persons release's budget and what it spent, as an accountant replaying every charge of its certificate
        (das.privacy.accounting.ledger): `budget`, `spent`, `remaining` (exact Fractions of rho) and `charges`
        ((level, query) or (scope, step) -> rho). None for a mechanism that is (eps, delta)-DP directly (stability:
        it spends no rho). Each charge protects `protects` (one person's record).

        >>> r = run("tiny", out=getfixture("tmp_path") / "b", seed=1, progress=False, rho="1/2")
        >>> r.budget.budget, r.budget.spent, r.budget.remaining, r.protects
        (Fraction(1, 2), Fraction(1, 2), Fraction(0, 1), "one person's record")
        """
        from das.privacy.accounting import ledger

        return ledger(self.certificate)

    @property
    def protects(self) -> str:
        """The unit of protection of the persons release: one person's record, changed with the invariants kept (the
        certificate's `convention` says it whole); `das.privacy.accounting.protects("units")` names the units
        release's."""
        from das.privacy.accounting import protects

        return protects("persons")

    @property
    def private(self) -> bool:
        """False for a seeded release (replication mode): its noise is reproducible and it must not be published."""
        return self.manifest.private

    @property
    def valid(self) -> bool:
        """Whether the release passed the validation run when it was written (what its files show, and, the
        operator's, against the inputs)."""
        from das.frame.lifecycle import ReleaseFrame, release_valid

        return release_valid(ReleaseFrame(RunDir(self.path), self.manifest, None))

    @property
    def summary(self) -> str:
        """The few lines `das run` prints: counts, budget, timings (the operator's record), failsafe events, validation."""
        from das.frame.lifecycle import ReleaseFrame
        from das.frame.summary import render_summary

        return render_summary(ReleaseFrame(RunDir(self.path), self.manifest, None))

    def table(self, name: str, *, names: str = "readable"):
        """One table as a DataFrame: level, geocode, then a column per cell.

        Args:
            name: the table (P1 ... P5, H1: `tables` lists them).
            names: "readable" column names (`cenrace=White`), or "pl": the PL 94-171 fields (`P0010003`; a
                column PL 94-171 lacks keeps its name).

        Returns:
            A pandas DataFrame, a row per geounit at every level.

        Raises:
            UnknownNameError (a KeyError): the release holds no such table (the message lists those it holds).
        """
        import pandas as pd

        from das.io.table_names import check_naming, pl_fields, renamed
        from das.model.schema import load_schema

        check_naming(names)
        path = RunDir(self.path).table(name)
        if not path.is_file():
            known = sorted(p.stem for p in RunDir(self.path).tables_dir.glob("*.parquet"))
            raise UnknownNameError(f"{self.path} holds no table {name!r}; it holds {', '.join(known) or 'none'}")
        frame = pd.read_parquet(path)
        if names == "pl":
            spec = {t.name: t for t in self.manifest.table_set()}.get(name)
            if spec is not None:
                frame = renamed(frame, pl_fields(spec, load_schema(spec.schema)))
        return frame

    @cached_property
    def tables(self) -> Mapping[str, object]:
        """Every table of the release by name, as DataFrames with readable column names (`table` for PL names)."""
        names = sorted(p.stem for p in RunDir(self.path).tables_dir.glob("*.parquet"))
        return {name: self.table(name) for name in names}

    @cached_property
    def mdf(self):
        """The persons microdata detail file: one row per person, every column plain (geography as strings)."""
        return self._mdf("persons")

    @cached_property
    def units_mdf(self):
        """The housing units and group-quarters facilities (a TopDown release), or None (a synthetic one)."""
        return self._mdf("units")

    def _mdf(self, kind: str):
        import pyarrow.csv as pacsv
        import pyarrow.parquet as pq

        from das.io.mdf import plain

        run = RunDir(self.path)
        if run.mdf(kind).is_file():
            return plain(pq.read_table(run.mdf(kind))).to_pandas()
        text = run.mdf(kind, "pipe")
        if text.is_file():  # [output] mdf_layout = "pipe": every value as text, as written
            header = text.open().readline().rstrip("\n").split("|")
            options = pacsv.ConvertOptions(column_types={c: "string" for c in header})
            return pacsv.read_csv(text, parse_options=pacsv.ParseOptions(delimiter="|"),
                                  convert_options=options).to_pandas()
        if kind == "units":
            return None
        raise FileNotFoundError(f"{self.path}: no persons MDF")

    def validate(self, *, inputs: tuple[Input, Input] | None = None, public_key: str | os.PathLike | None = None):
        """Check the release again from its files (`das.validate`).

        Args:
            inputs: the confidential (persons, units), paths or DataFrames: checked against them too.
            public_key: the operator's published public key: its signature checked too.

        Returns:
            The report: `ok`, `checks`, `violations`.
        """
        return validate(self, inputs=inputs, public_key=public_key)

    def __repr__(self) -> str:
        from das.privacy.certificate import delta_text

        c = self.certificate
        rho = f"rho {c.rho}" if c.rho is not None else "(eps, delta)-DP directly"
        return (f"Release({str(self.path)!r}: {self.manifest.spec_name}, {rho}, eps {c.eps} at delta {delta_text(c.delta)}"
                f"{'' if self.private else ', seeded: NOT private'}{'' if self.valid else ', NOT valid'})")


def _out(out, spec) -> Path:
    """`das run`'s default output directory, runs/NAME (NAME: the spec's name)."""
    return Path(out) if out is not None else Path("runs") / spec.name


@checked
def run(spec, *, persons: Input | None = None, units: Input | None = None, out: str | os.PathLike | None = None,
        seed: int | None = None, workers: int = 1, rho=None, eps=None, delta=None, overwrite: bool = False,
        allow_large_rho: bool = False, progress: bool = True, engine: str = "local", scheduler: str | None = None,
        memory_gb: float | None = None, signing_key: str | os.PathLike | None = None) -> Release:
    """A whole TopDown release, as `das run` makes it: measure, post-process, write (MDF, tables, NMF, manifest),
    validate.

    Args:
        spec: a shipped name ("tiny", "vt_demo"), a path to a run spec .toml, or a dict of what a spec file holds.
        persons, units: the confidential inputs, paths (Parquet or CSV) or pandas DataFrames, read as a CSV file
            of the same values would be (the same checks and errors; a DataFrame's row r is its r-th row). Default:
            the spec's [input].
        out: the release directory (default: runs/NAME, NAME the spec's name).
        seed: replication mode: reproducible noise, every output labelled NOT private (default: the OS's CSPRNG).
        workers: processes for the per-parent solves (default 1; with more, a script keeps its top-level code
            under `if __name__ == "__main__":`, as every multiprocessing program does).
        rho, eps, delta: the persons budget, as rho or as eps at delta (default: the spec's); exact numbers
            (a Fraction, an int or a string like "1/2").
        overwrite: replace an earlier das release in `out`.
        allow_large_rho: acknowledge a budget above the cap (docs/privacy.md).
        progress: show progress bars (on a terminal only).
        engine, scheduler, memory_gb: where the work runs ("local" or "dask" at `scheduler`) and a partitioned
            run's memory budget (docs/scale.md).
        signing_key: the operator's Ed25519 key to sign the release with (`das keygen`; default: a key of the
            release's own, in its operator files).

    Returns:
        The `Release` written. One that failed validation comes back with `valid` False (`das run` exits 1).

    Raises:
        SpecError, InputError, BudgetError, OutDirError, RunError: a refusal, saying what and where, before any
            noise is drawn. RunStopped: a run that stopped on das's own error, saying how to continue.

    Example:
        >>> release = run("tiny", out=getfixture("tmp_path") / "tiny", seed=7, progress=False)
        >>> release.valid, release.certificate.eps, release.tables["P1"].query("level == 'state'")["total"].item()
        (True, 17.1436, 145)
    """
    given = run_spec(spec, persons=persons, units=units, name="release")
    from das.driver.run import run as run_release  # heavy: after the spec is found, so an unknown one is refused quickly

    result = run_release(given, _out(out, given), seed=seed, workers=workers,
                         overwrite=overwrite, progress=progress, allow_large_rho=allow_large_rho,
                         budget=budget_given(rho, eps, delta), engine=engine, scheduler=scheduler, memory_gb=memory_gb,
                         signing_key=None if signing_key is None else Path(signing_key))
    _record_frames(result.out_dir, persons=persons, units=units)
    if not result.valid:
        logger.error(f"the release in {result.out_dir} FAILED validation: {list(result.manifest.validation.violations[:3])}")
    return Release(result.out_dir, result.manifest)


@checked
def synth(spec, *, mechanism: str, persons: Input | None = None, units: Input | None = None,
          out: str | os.PathLike | None = None, seed: int | None = None, rho=None, eps=None, delta=None,
          overwrite: bool = False, allow_large_rho: bool = False, signing_key: str | os.PathLike | None = None) -> Release:
    """A private synthetic persons release by another mechanism family, as `das synth` makes it.

    Args:
        spec: a shipped name, a path to a run spec .toml or a dict (its geography and schema are the domain).
        mechanism: the family: flat, stability, mwem, privbayes, privsyn, mst or aim (docs/mechanisms.md).
        persons, units: the confidential inputs, paths or DataFrames (default: the spec's).
        out: the release directory (default: runs/NAME).
        seed: replication mode (reproducible noise, NOT private).
        rho, eps, delta: the budget (default: the spec's persons budget); exact numbers.
        overwrite: replace an earlier das release in `out`.
        allow_large_rho: acknowledge a budget above the cap.
        signing_key: the operator's Ed25519 key (default: a key of the release's own).

    Returns:
        The `Release` written: the layout of `das run`'s (MDF, tables, manifest with the certificate).

    Raises:
        SpecError, InputError, BudgetError, OutDirError, MechanismError: a refusal, before any noise is drawn.

    Example:
        >>> release = synth("tiny", mechanism="flat", out=getfixture("tmp_path") / "flat", seed=3)
        >>> release.valid, release.manifest.mechanism.name
        (True, 'flat')
    """
    from das.mechanisms import synthesize

    given = run_spec(spec, persons=persons, units=units, name="release")
    out_dir = synthesize(given, mechanism, _out(out, given), seed=seed, overwrite=overwrite,
                         allow_large_rho=allow_large_rho, budget=budget_given(rho, eps, delta),
                         signing_key=None if signing_key is None else Path(signing_key))
    _record_frames(out_dir, persons=persons, units=units)
    return Release.open(out_dir)


def _record_frames(out_dir, **inputs) -> None:
    """Which inputs of a release were DataFrames, in its operator record (das.frame.bundle.DATAFRAMES): das keeps no copy
    of them, so `das.metrics` of the release asks for its truth instead of reading a file it never had."""
    from das.frame import bundle

    frames = [name for name, value in inputs.items() if is_frame(value)]
    if frames:
        bundle.record_process(Path(out_dir), **{bundle.DATAFRAMES: frames})


@checked
def validate(release, *, inputs: tuple[Input, Input] | None = None, public_key: str | os.PathLike | None = None):
    """The independent validation of a release, as `das validate` runs it: from its files alone, and with the
    confidential inputs too when given.

    Args:
        release: a `Release` or a release directory's path (a run directory or a published bundle).
        inputs: the confidential (persons, units), paths or DataFrames: adds the comparison with them.
        public_key: the operator's published Ed25519 public key, to prove who signed the release.

    Returns:
        The report: `ok` (bool), `checks` (a line per check) and `violations` (what failed).

    Raises:
        ValidationError: a file is missing or unreadable. InputError: `inputs` cannot be read.

    Example:
        >>> validate(run("tiny", out=getfixture("tmp_path") / "t", seed=1, progress=False)).ok
        True
    """
    from das.validate import validate_run

    path = Path(release.path if isinstance(release, Release) else release)
    key = None if public_key is None else Path(public_key)
    if inputs is None:
        return validate_run(path, public_key=key)
    return validate_run(path, inputs=(source_of("persons", inputs[0]), source_of("units", inputs[1])), public_key=key)


@checked
def publish(release, *, to: str | os.PathLike, overwrite: bool = False):
    """The publishable bundle of a finished, signed and valid release, as `das publish` writes it: its public files
    alone, never the operator's, with normalized modes and times.

    Args:
        release: a `Release` or a run directory's path.
        to: a new directory, or an archive (a path ending in .tar).
        overwrite: replace an earlier bundle at `to`.

    Returns:
        das.frame.publish.Bundle: `path`, `files` (name -> sha256) and `archive` (whether `to` is a .tar).

    Raises:
        PublishError: the run may not be published (not signed, not valid, not finished). OutDirError: `to` may
            not be written.

    Example:
        >>> bundle = publish(run("tiny", out=getfixture("tmp_path") / "r", seed=1, progress=False),
        ...                  to=getfixture("tmp_path") / "bundle")
        >>> "manifest.json" in bundle.files, bundle.archive
        (True, False)
    """
    from das.frame.publish import publish as write_bundle

    return write_bundle(release.path if isinstance(release, Release) else release, to, overwrite=overwrite)
