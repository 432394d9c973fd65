"""das.core.errors: one hierarchy under das.DasError. A table of user mistakes (spec, input, budget, output directory,
argument), each refused through the Python API as a das.DasError whose message names the keyword in Python's
terms (never a flag, never the temporary "das-inputs-" directory), and, where the mistake has a command-line
form, through `das.cli.main` with rc 2, the message in flags and no traceback. Refusals come before any noise
is drawn, so the table is fast."""

import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pytest
from conftest import ROOT, TINY

import das
from das.cli import build_parser, main
from das.model.specfile import load_toml

FLAG = re.compile(r"(?<![\w-])--[a-z]")  # a command-line flag in a message


@pytest.fixture(scope="module")
def release(tmp_path_factory) -> Path:
    """A finished seeded release of tiny (for mistakes about releases and reruns)."""
    out = tmp_path_factory.mktemp("errors") / "tiny"
    das.run("tiny", out=out, seed=1, workers=1, progress=False)
    return out


@dataclass(frozen=True)
class Mistake:
    """A user's mistake: the API call (given the tmp_path and the release), what its message must say in Python's
    terms, and its command-line form (argv, which may name "{tmp}" and "{release}") with what that must say."""

    api: object
    says: tuple[str, ...]
    argv: tuple[str, ...] | None = None
    cli_says: tuple[str, ...] = ()
    kind: type = das.DasError


def _spec_dict(**changes) -> dict:
    data = load_toml(ROOT / "specs" / "runs" / "tiny.toml")
    data["input"] = {"persons": str(TINY / "persons.csv"), "units": str(TINY / "units.csv")}
    for section, values in changes.items():
        data[section] = {**data.get(section, {}), **values}
    return data


def _persons(**replaced) -> pd.DataFrame:
    frame = pd.read_csv(TINY / "persons.csv", dtype=str)
    for column, value in replaced.items():
        frame.loc[2, column] = value
    return frame


def _typo_spec(tmp: Path) -> Path:
    text = (ROOT / "specs" / "runs" / "tiny.toml").read_text().replace('strategy = "pl94_six_level"',
                                                                       'stratgy = "pl94_six_level"')
    (tmp / "typo.toml").write_text(text)
    return tmp / "typo.toml"


def _file(tmp: Path) -> Path:
    (tmp / "a_file").write_text("not a directory")
    return tmp / "a_file"


RUN = dict(seed=1, workers=1, progress=False)
UNITS = str(TINY / "units.csv")

MISTAKES = {
    # spec
    "unknown spec": Mistake(lambda t, r: das.run("nope", out=t / "o", **RUN), ("no run spec 'nope'",),
                            ("run", "nope", "--out", "{tmp}/o"), ("no run spec 'nope'",), das.SpecError),
    "spec of another type": Mistake(lambda t, r: das.run(3, out=t / "o", **RUN), ("spec= takes",)),
    "spec dict missing sections": Mistake(lambda t, r: das.run({"name": "x"}, out=t / "o", **RUN),
                                          ("the spec dict", "missing section [input]"), kind=das.SpecError),
    "spec dict bad value": Mistake(lambda t, r: das.run(_spec_dict(persons={"rho": "x"}), out=t / "o", **RUN),
                                   ("the spec dict", "rho"), kind=das.SpecError),
    "spec file typo": Mistake(lambda t, r: das.run(_typo_spec(t), out=t / "o", **RUN), ("stratgy", "did you mean"),
                              ("run", "{tmp}/typo.toml", "--out", "{tmp}/o"), ("stratgy",), das.SpecError),
    "spec file missing": Mistake(lambda t, r: das.run(t / "missing.toml", out=t / "o", **RUN), ("missing.toml",),
                                 ("run", "{tmp}/missing.toml", "--out", "{tmp}/o"), ("missing.toml",), das.SpecError),
    "certificates of no spec": Mistake(lambda t, r: das.certificates("nope"), ("no run spec 'nope'",),
                                       ("privacy", "nope"), ("no run spec 'nope'",), das.SpecError),
    # input
    "persons a list": Mistake(lambda t, r: das.run("tiny", persons=[1, 2, 3], out=t / "o", **RUN),
                              ("persons= takes a path to a CSV file or a pandas DataFrame", "list"),
                              kind=das.ArgumentError),
    "persons file missing": Mistake(lambda t, r: das.run("tiny", persons=t / "none.csv", out=t / "o", **RUN),
                                    ("none.csv", "file not found"), kind=das.InputError),
    "persons DataFrame bad value": Mistake(lambda t, r: das.run("tiny", persons=_persons(CENRACE="64"), out=t / "o",
                                                                **RUN),
                                           ("the persons DataFrame row 3, column CENRACE",), kind=das.InputError),
    "units DataFrame missing column": Mistake(lambda t, r: das.run("tiny", units=pd.read_csv(UNITS).drop(columns="RTYPE"),
                                                                   out=t / "o", **RUN),
                                              ("the units DataFrame", "RTYPE"), kind=das.InputError),
    "validate inputs not a pair": Mistake(lambda t, r: das.validate(r, inputs=[1, 2]),
                                          ("inputs= takes a pair (persons, units)", "list [1, 2]")),
    "metrics truth one path": Mistake(lambda t, r: das.metrics(r, truth=UNITS, out=t / "m"), ("truth= takes a pair",)),
    "init of missing files": Mistake(lambda t, r: das.init_spec(t / "p.csv", t / "u.csv", out=t / "s.toml"),
                                     ("p.csv", "file not found"), ("init", "{tmp}/p.csv", "{tmp}/u.csv", "--out",
                                                                   "{tmp}/s.toml"), ("p.csv",), das.InputError),
    "init out not toml": Mistake(lambda t, r: das.init_spec(TINY / "persons.csv", UNITS, out=t / "s.txt"),
                                 ("out=", ".toml"), ("init", str(TINY / "persons.csv"), UNITS, "--out", "{tmp}/s.txt"),
                                 ("--out",), das.SpecError),
    # budget
    "rho negative": Mistake(lambda t, r: das.run("tiny", rho="-1/2", out=t / "o", **RUN), ("rho", "positive"),
                            ("run", "tiny", "--rho", "-1/2", "--out", "{tmp}/o"), ("--rho", "must be positive")),
    "rho above the cap": Mistake(lambda t, r: das.run("tiny", rho=100, units=UNITS, out=t / "o", **RUN),
                                 ("rho=100", "allow_large_rho=True", "specs/runs/tiny.toml"),
                                 ("run", "tiny", "--rho", "100", "--out", "{tmp}/o"), ("--rho 100", "--allow-large-rho"),
                                 das.SpecError),
    "rho and eps": Mistake(lambda t, r: das.run("tiny", rho=1, eps=1, out=t / "o", **RUN), ("rho= and eps=",),
                           ("run", "tiny", "--rho", "1", "--eps", "1", "--out", "{tmp}/o"), ("--rho and --eps",),
                           das.SpecError),
    "delta above 1": Mistake(lambda t, r: das.run("tiny", eps=1, delta=2, out=t / "o", **RUN), ("delta=",),
                             ("run", "tiny", "--eps", "1", "--delta", "2", "--out", "{tmp}/o"), ("--delta",)),
    "eps negative": Mistake(lambda t, r: das.run("tiny", eps=-1, out=t / "o", **RUN), ("eps", "positive"),
                            ("run", "tiny", "--eps", "-1", "--out", "{tmp}/o"), ("--eps", "must be positive")),
    "rho not a number": Mistake(lambda t, r: das.run("tiny", rho="abc", out=t / "o", **RUN), ("rho", "'abc'"),
                                ("run", "tiny", "--rho", "abc", "--out", "{tmp}/o"), ("--rho", "'abc'")),
    "eps_for_rho negative": Mistake(lambda t, r: das.eps_for_rho(-1, "1e-10"), ("rho", "positive"),
                                    ("privacy", "--rho", "-1", "--delta", "1e-10"), ("--rho", "must be positive")),
    "replicate above the cap": Mistake(lambda t, r: das.replicate("tiny", out=t / "s", rho=101, runs=1),
                                       ("rho=101", "allow_large_rho=True"),
                                       ("replicate", "tiny", "--out", "{tmp}/s", "--rho", "101", "--runs", "1"),
                                       ("--rho 101", "--allow-large-rho")),
    # output directory
    "rerun into a release": Mistake(lambda t, r: das.run("tiny", out=r, **RUN), ("overwrite=True",),
                                    ("run", "tiny", "--out", "{release}", "--seed", "1"), ("--overwrite",),
                                    das.OutDirError),
    "out is a file": Mistake(lambda t, r: das.run("tiny", out=_file(t), **RUN), ("is a file",),
                             ("run", "tiny", "--out", "{tmp}/a_file"), ("is a file",)),
    "out a number": Mistake(lambda t, r: das.run("tiny", out=3, **RUN), ("out= must be a path",)),
    "publish inside the release": Mistake(lambda t, r: das.publish(r, to=r / "bundle"), ("to=",),
                                          ("publish", "{release}", "--to", "{release}/bundle"), ("--to",),
                                          das.OutDirError),
    "no such table": Mistake(lambda t, r: das.Release.open(r).table("P9"), ("holds no table 'P9'", "P1"),
                             kind=das.UnknownNameError),
    "open no release": Mistake(lambda t, r: das.Release.open(t / "nope"), ("not a das run directory", "out= of das.run")),
    "validate no release": Mistake(lambda t, r: das.validate(t / "nope"), ("not a das run directory",),
                                   ("validate", "{tmp}/nope"), ("--out of `das run`",), das.ValidationError),
    "metrics of no release": Mistake(lambda t, r: das.metrics(t / "nope"), ("not a das run directory",),
                                     ("metrics", "{tmp}/nope"), ("not a das run directory",)),
    # arguments
    "workers zero": Mistake(lambda t, r: das.run("tiny", out=t / "o", seed=1, workers=0, progress=False),
                            ("workers= must be an integer of at least 1",),
                            ("run", "tiny", "--out", "{tmp}/o", "--workers", "0"), ("--workers",), das.ArgumentError),
    "workers a string": Mistake(lambda t, r: das.run("tiny", out=t / "o", seed=1, workers="2", progress=False),
                                ("workers=", "str"), ("run", "tiny", "--out", "{tmp}/o", "--workers", "two"),
                                ("--workers",)),
    "seed negative": Mistake(lambda t, r: das.run("tiny", out=t / "o", seed=-1, workers=1, progress=False),
                             ("seed= must be an integer of at least 0",),
                             ("run", "tiny", "--out", "{tmp}/o", "--seed", "-1"), ("--seed",), das.ArgumentError),
    "seed a float": Mistake(lambda t, r: das.run("tiny", out=t / "o", seed=1.5, workers=1, progress=False), ("seed=",),
                            ("run", "tiny", "--out", "{tmp}/o", "--seed", "1.5"), ("--seed",)),
    "overwrite a string": Mistake(lambda t, r: das.run("tiny", out=t / "o", overwrite="yes", **RUN),
                                  ("overwrite= must be True or False",)),
    "unknown keyword": Mistake(lambda t, r: das.run("tiny", out=t / "o", sed=1), ("no argument 'sed'", "did you mean seed"),
                               ("run", "tiny", "--sed", "1"), ("--sed",)),
    "unknown mechanism": Mistake(lambda t, r: das.synth("tiny", mechanism="nope", out=t / "o", seed=1),
                                 ("unknown mechanism 'nope'",),
                                 ("synth", "tiny", "--mechanism", "nope", "--out", "{tmp}/o"), ("nope",)),
    "unknown estimator": Mistake(lambda t, r: das.metrics(r, estimators=("bogus",), out=t / "m"), ("estimator", "bogus"),
                                 ("metrics", "{release}", "--estimators", "bogus", "--out", "{tmp}/m"), ("bogus",)),
    "estimators a string": Mistake(lambda t, r: das.metrics(r, estimators="topdown", out=t / "m"),
                                   ("estimators= takes a tuple of names like ('topdown',)",)),
    "attack unknown field": Mistake(lambda t, r: das.attack(bogus=1), ("no argument 'bogus'", "truth", "published")),
    "attack runs zero": Mistake(lambda t, r: das.attack(truth=TINY / "persons.csv", published="exact", out=t / "a",
                                                        runs=0), ("runs=",),
                                ("attack", "--truth", str(TINY / "persons.csv"), "--published", "exact", "--out",
                                 "{tmp}/a", "--runs", "0"), ("--runs",)),
    "replicate runs zero": Mistake(lambda t, r: das.replicate("tiny", out=t / "s", runs=0), ("runs=",),
                                   ("replicate", "tiny", "--out", "{tmp}/s", "--runs", "0"), ("--runs",)),
    "compare seeds zero": Mistake(lambda t, r: das.compare("tiny", out=t / "c", seeds=0), ("seeds=",),
                                  ("compare", "tiny", "--out", "{tmp}/c", "--seeds", "0"), ("--seeds",)),
    "engine unknown": Mistake(lambda t, r: das.run("tiny", out=t / "o", engine="spark", **RUN), ("engine=",),
                              ("run", "tiny", "--out", "{tmp}/o", "--engine", "spark"), ("--engine",)),
    "scheduler without dask": Mistake(lambda t, r: das.run("tiny", out=t / "o", scheduler="tcp://h:1", **RUN),
                                      ("scheduler= needs engine=dask",),
                                      ("run", "tiny", "--out", "{tmp}/o", "--scheduler", "tcp://h:1", "--seed", "1"),
                                      ("--scheduler needs --engine dask",)),
    "memory negative": Mistake(lambda t, r: das.run("tiny", out=t / "o", memory_gb=-1, **RUN), ("memory_gb=",),
                               ("run", "tiny", "--out", "{tmp}/o", "--memory-gb", "-1"), ("--memory-gb",)),
    "signing key missing": Mistake(lambda t, r: das.run("tiny", out=t / "o", signing_key=t / "none.key", **RUN),
                                   ("none.key",), ("run", "tiny", "--out", "{tmp}/o", "--signing-key", "{tmp}/none.key",
                                                   "--seed", "1"), ("none.key",)),
}


def test_the_table_is_large():
    assert len(MISTAKES) >= 30 and sum(m.argv is not None for m in MISTAKES.values()) >= 20


@pytest.mark.parametrize("name", MISTAKES)
def test_a_mistake_is_a_das_error_in_python_terms(name, tmp_path, release):
    mistake = MISTAKES[name]
    with pytest.raises(das.DasError) as caught:
        mistake.api(tmp_path, release)
    message = str(caught.value)
    assert isinstance(caught.value, mistake.kind), (type(caught.value), message)
    assert all(s in message for s in mistake.says), message
    assert "das-inputs-" not in message and not FLAG.search(message), message
    assert not (tmp_path / "o").exists() or name == "rerun into a release"  # refused before anything is written


def _cli(argv, tmp_path, release, capsys) -> tuple[int, str]:
    argv = [a.replace("{tmp}", str(tmp_path)).replace("{release}", str(release or "")) for a in argv]
    _typo_spec(tmp_path)
    try:
        rc = main(argv)
    except SystemExit as e:  # argparse's refusal of a flag's value
        rc = e.code
    return rc, capsys.readouterr().err


@pytest.mark.parametrize("name", [n for n, m in MISTAKES.items() if m.argv is not None])
def test_a_mistake_on_the_command_line_is_rc_2_in_flags(name, tmp_path, release, capsys):
    mistake = MISTAKES[name]
    if name == "out is a file":
        _file(tmp_path)
    rc, err = _cli(mistake.argv, tmp_path, release, capsys)
    assert rc == 2, err
    assert all(s in err for s in mistake.cli_says), err
    assert "Traceback" not in err and "overwrite=True" not in err and "allow_large_rho=True" not in err, err


# --- the defects, each on its own -------------------------------------------------------------------


def test_every_error_of_das_is_a_das_error_keeping_its_builtin_base():
    from das.attack.data import AttackError
    from das.core.distributed import DaskUnavailable
    from das.core.errors import BudgetError, InputError, OutDirError, RunError, RunStopped, SpecError, StudyError, ValidationError
    from das.driver.preflight import PreflightError
    from das.frame.bundle import BundleError
    from das.frame.publish import PublishError
    from das.frame.records import RunDirError
    from das.frame.signing import SigningError
    from das.io.partitions import PartitionError
    from das.mechanisms.base import MechanismError
    from das.privacy.certificate import CertificateError
    from das.topdown.solve import SolveError

    bases = {SpecError: ValueError, PreflightError: ValueError, BudgetError: ValueError, MechanismError: ValueError,
             CertificateError: ValueError, AttackError: ValueError, PartitionError: ValueError, SigningError: ValueError,
             OutDirError: RuntimeError, StudyError: RuntimeError, RunError: RuntimeError, RunStopped: RuntimeError,
             RunDirError: RuntimeError, BundleError: RuntimeError, PublishError: RuntimeError,
             DaskUnavailable: RuntimeError, SolveError: RuntimeError, InputError: Exception, ValidationError: Exception}
    assert all(issubclass(cls, das.DasError) and issubclass(cls, base) for cls, base in bases.items())
    assert das.SpecError is SpecError and das.InputError is InputError and das.OutDirError is OutDirError
    assert das.BudgetError is BudgetError and das.ValidationError is ValidationError and das.StudyError is StudyError
    assert issubclass(das.ArgumentError, TypeError) and issubclass(das.ArgumentError, ValueError)
    assert set(das.ERRORS) == set(das.core.errors.ERRORS) and set(das.ERRORS) <= set(dir(das))


def test_das_errors_are_light():
    code = "import sys, das; das.DasError, das.InputError; print(sorted({'numpy', 'pandas', 'pydantic'} & set(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0 and done.stdout.strip() == "[]", done.stderr


def test_rerunning_into_the_same_out_says_overwrite_true(release):
    with pytest.raises(das.OutDirError, match=r"pass overwrite=True") as caught:
        das.run("tiny", out=release, **RUN)
    assert "--overwrite" not in str(caught.value)


def test_a_budget_above_the_cap_names_no_temporary_path_nor_a_flag(tmp_path):
    with pytest.raises(das.SpecError) as caught:
        das.run("tiny", units=UNITS, rho=100, out=tmp_path / "o", **RUN)
    message = str(caught.value)
    assert "allow_large_rho=True" in message and "rho=100" in message and "specs/runs/tiny.toml" in message
    assert "das-inputs-" not in message and "--allow-large-rho" not in message and "--rho" not in message
    with pytest.raises(das.SpecError) as caught:
        das.run(_spec_dict(), rho=100, out=tmp_path / "o", **RUN)
    assert str(caught.value).startswith("the spec dict (rho=100)")


def test_workers_zero_says_the_keyword(tmp_path):
    with pytest.raises(das.DasError, match="^workers= ") as caught:
        das.run("tiny", out=tmp_path / "o", seed=1, workers=0, progress=False)
    assert "--workers" not in str(caught.value)


def test_persons_of_another_type_says_what_it_takes(tmp_path):
    with pytest.raises(das.DasError, match=r"persons= takes a path to a CSV file or a pandas DataFrame, not list"):
        das.run("tiny", persons=[1, 2, 3], out=tmp_path / "o", **RUN)
    with pytest.raises(TypeError):  # the builtin base kept: `except TypeError` code still catches it
        das.run("tiny", persons=[1, 2, 3], out=tmp_path / "o", **RUN)


def test_a_negative_seed_is_refused_by_both_interfaces(tmp_path, capsys):
    with pytest.raises(das.DasError, match="seed= must be an integer of at least 0, got -1"):
        das.run("tiny", out=tmp_path / "o", seed=-1, workers=1, progress=False)
    assert not (tmp_path / "o").exists()
    with pytest.raises(SystemExit) as stopped:
        main(["run", "tiny", "--out", str(tmp_path / "o"), "--seed", "-1"])
    assert stopped.value.code == 2 and "--seed: expected an integer of at least 0, got -1" in capsys.readouterr().err


def _takes(command: str, flag: str) -> bool:
    return flag in build_parser()._subparsers._group_actions[0].choices[command]._option_string_actions


NEGATIVE = [(command, flag, value)
            for command in (["run", "tiny"], ["synth", "tiny", "--mechanism", "flat"], ["replicate", "tiny"],
                            ["compare", "tiny"], ["privacy", "tiny"], ["audit-privacy", "tiny"])
            for flag, value in (("--rho", "-1/2"), ("--eps", "-1"), ("--delta", "-1e-5"), ("--seed", "-1"),
                                ("--rho", "-.5"))
            if _takes(command[0], flag)]  # every command that takes the flag


@pytest.mark.parametrize("command, flag, value", NEGATIVE)
def test_a_negative_budget_or_seed_is_refused_as_such(command, flag, value, tmp_path, capsys):
    argv = [*command, flag, value] + (["--out", str(tmp_path / "o")] if command[0] not in ("privacy", "audit-privacy")
                                      else [])
    rc, err = _cli(argv, tmp_path, None, capsys)  # argparse's refusal, or the command's (replicate's rho list)
    assert rc == 2 and "expected one argument" not in err and "Traceback" not in err, err
    assert f"{flag}:" in err and ("must be positive" in err or "at least 0" in err), err


def test_option_speaks_the_callers_terms():
    from das.core.errors import command_line, option

    assert (option("overwrite", True), option("rho", 100), option("workers")) == ("overwrite=True", "rho=100", "workers=")
    with command_line():
        assert (option("allow_large_rho", True), option("rho", 100), option("memory_gb")) == (
            "--allow-large-rho", "--rho 100", "--memory-gb")
    assert option("workers") == "workers="  # the command line's terms end with its block


def test_a_refusal_on_the_command_line_is_said_in_flags_and_leaves_python_in_keywords(tmp_path, release, capsys):
    assert main(["run", "tiny", "--out", str(release), "--seed", "1"]) == 2
    assert "pass --overwrite" in capsys.readouterr().err
    with pytest.raises(das.OutDirError, match="pass overwrite=True"):  # the command line's terms did not stay
        das.run("tiny", out=release, **RUN)


def test_a_bug_is_not_a_das_error(tmp_path, monkeypatch):
    from das.driver import run as running

    def broken(*args, **kwargs):
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr(running, "run", broken)
    with pytest.raises(ZeroDivisionError):
        das.run("tiny", out=tmp_path / "o", **RUN)
    shutil.rmtree(tmp_path / "o", ignore_errors=True)
