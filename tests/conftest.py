"""Shared by the tests: where the repository and its fixtures are, and what das logged.

Tests import these names (`from conftest import ROOT, TINY, recorded_logs`); pytest puts this folder on
the path. Tests run from the repository root (scripts/test does so), where the doctests' relative
fixture paths resolve too.
"""

import contextlib
import logging
from pathlib import Path

import numpy as np
import pytest

from das.io.microdata import read_inputs
from das.model.geography import Geography
from das.model.rules import INVARIANT_LEVELS, Invariants
from das.model.schema import load_schema

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "geography_fixtures"
TINY = FIXTURES / "tiny"


@contextlib.contextmanager
def recorded_logs(name: str = "das", level: int = logging.DEBUG):
    """The messages logger `name` (and its children) logs inside the block, as a list of strings; whatever
    the das logger's configuration (das.core.progress.configure stops it from propagating to pytest's)."""
    records: list[str] = []
    handler = logging.Handler(level)
    handler.emit = lambda record: records.append(record.getMessage())
    logger = logging.getLogger(name)
    old_level = logger.level
    logger.addHandler(handler)
    logger.setLevel(level)
    try:
        yield records
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)


SLOW_MECHANISMS = {"mst", "aim"}  # Private-PGM fits: seconds to tens of seconds each on tiny


def mechanism_params() -> list:
    """Every registered mechanism as a pytest parameter: the Private-PGM ones slow, and skipped without their extra."""
    from das.mechanisms import MECHANISMS
    from das.mechanisms.pgm import available

    params = []
    for name in MECHANISMS:
        marks = [pytest.mark.slow] if name in SLOW_MECHANISMS else []
        if MECHANISMS[name].extra is not None:
            marks.append(pytest.mark.skipif(not available(), reason="needs the optional extra das[mbi]"))
        params.append(pytest.param(name, marks=marks))
    return params


def cli_commands(family) -> set[str]:
    """The commands one das/cli family module registers (its `add_parsers`), on a parser of its own."""
    import argparse

    sub = argparse.ArgumentParser().add_subparsers()
    family.add_parsers(sub)
    return set(sub.choices)


def cli_refused(argv: list[str], capsys) -> str:
    """`das ARGV` refuses with exit code 2 and a message, no traceback; returns what it printed."""
    from das.cli import main

    assert main(argv) == 2
    printed = capsys.readouterr()
    assert "Traceback" not in printed.err + printed.out
    return printed.err + printed.out


def cli_refused_by_parser(argv: list[str], capsys) -> str:
    """`das ARGV` is refused while parsing: exit code 2, usage and `das COMMAND: error: ...`; returns stderr."""
    from das.cli import main

    with pytest.raises(SystemExit) as stopped:
        main(argv)
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert f"das {argv[0]}: error: " in err and "Traceback" not in err
    return err


def disk_full_at(call: int, monkeypatch) -> None:
    """das.io.nmf.write_part fails with ENOSPC at its `call`-th call: the disk filling up during the measurement
    (undo with monkeypatch.undo(), or by setting the original back)."""
    import errno

    import das.io.nmf

    original, calls = das.io.nmf.write_part, []

    def filling(path, batch):
        calls.append(path)
        if len(calls) == call:
            raise OSError(errno.ENOSPC, "No space left on device", str(path) + ".partial")
        return original(path, batch)

    monkeypatch.setattr(das.io.nmf, "write_part", filling)


def resume_recording_draws(out: Path, monkeypatch):

    """`das run --resume` of `out` in this process, recording the key of every random stream it draws from:
    (the run's result, the keys). A resumed run must not draw a stream committed before it stopped."""
    import das.topdown.measure
    from das.driver.run import resume_run

    drawn = []
    original = das.topdown.measure.discrete_gaussian

    def recording(variance, n, stream):
        drawn.append(stream.key)
        return original(variance, n, stream)

    monkeypatch.setattr(das.topdown.measure, "discrete_gaussian", recording)
    return resume_run(out, workers=1, progress=False), drawn


@pytest.fixture(scope="session")
def perry():
    """Perry County, AL (real 2010 blocks): (persons schema, geography, invariants, true block histograms)."""
    schema = load_schema("pl94_persons")
    inputs = read_inputs(FIXTURES / "al_perry/persons.parquet", FIXTURES / "al_perry/units.parquet", schema)
    geography = Geography.from_blocks(inputs.inventory.blocks)
    invariants = Invariants(
        inputs.inventory.housing_units, inputs.inventory.gq_facilities,
        {lv: np.asarray(geography.aggregate(inputs.person_histograms, lv).sum(axis=1)).ravel()
         for lv in INVARIANT_LEVELS},
    )
    return schema, geography, invariants, inputs.person_histograms
