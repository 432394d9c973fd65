"""das/cli/args.py: every command's arguments are checked when parsed and shown with their defaults in
--help. Property: no command prints a traceback for any argument: each command, from a refused base (a
spec, run directory or input that does not exist, so nothing is run), with one option given any of a set
of hostile values or random text, ends with rc 0, 1 or 2 and never a traceback."""

import argparse
import contextlib
import io
import tempfile

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from das.cli import args as cli_args
from das.cli import build_parser, main
from das.driver import preflight

NOWHERE = "/nonexistent/das-probe"
BASES = {  # a command that refuses after parsing: a spec, run directory or input that does not exist
    "run": ["run", f"{NOWHERE}/spec.toml", "--out", f"{NOWHERE}/out"],
    "validate": ["validate", f"{NOWHERE}/run"],
    "postprocess": ["postprocess", f"{NOWHERE}/bundle", "--out", f"{NOWHERE}/out"],
    "publish": ["publish", f"{NOWHERE}/run", "--to", f"{NOWHERE}/bundle"],
    "validate-input": ["validate-input", f"{NOWHERE}/p.csv", f"{NOWHERE}/u.csv"],
    "privacy": ["privacy", f"{NOWHERE}/spec.toml"],
    "measure": ["measure", f"{NOWHERE}/spec.toml", "--out", f"{NOWHERE}/out"],
    "tables": ["tables", f"{NOWHERE}/run", "--out", f"{NOWHERE}/out"],
    "audit-privacy": ["audit-privacy", f"{NOWHERE}/spec.toml"],
    "metrics": ["metrics", f"{NOWHERE}/run"],
    "replicate": ["replicate", f"{NOWHERE}/spec.toml", "--out", f"{NOWHERE}/out"],
    "report": ["report", f"{NOWHERE}/dir"],
    "compare": ["compare", f"{NOWHERE}/spec.toml", "--out", f"{NOWHERE}/out"],
    "attack": ["attack", "--truth", f"{NOWHERE}/p.parquet", "--published", f"{NOWHERE}/run", "--out", f"{NOWHERE}/out"],
    "synth": ["synth", f"{NOWHERE}/spec.toml", "--mechanism", "flat", "--out", f"{NOWHERE}/out"],
    "init": ["init", f"{NOWHERE}/p.csv", f"{NOWHERE}/u.csv", "--out", f"{NOWHERE}/spec.toml"],
    "keygen": ["keygen", f"{NOWHERE}/key"],
}
HOSTILE = ["0", "-1", "1.5", "abc", "", " ", "\uff11\uff12", "\u0663", "1/0", "0/0", "nan", "inf", "-inf", "1e400",
           "1e-400", "9" * 5000, "--", "-x", "/", "\x00", "\udcff", "1/3", "2", "10**9", "NaN", "١", "0x10", "1_000",
           "a,b,,", ",", "topdown,", "\n", "../../etc"]
SHIPPED = {"tiny", "de", "de_production", "al_perry", "vt_demo", "vt_grand_isle", "vt_grand_isle_dhc", "exact", "auto"}


def _options(command: str) -> list[str]:
    """The value-taking options of a command (its --help lists them)."""
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[command]
    return [a.option_strings[-1] for a in sub._actions if a.option_strings and a.nargs != 0 and a.dest != "help"]


SCRATCH = tempfile.mkdtemp(prefix="das-cli-args-")  # the working directory of every command run here: a hostile
# value that is a relative path (keygen's KEY, an --out) lands there, never in the checkout


def _run(argv: list[str]) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.chdir(SCRATCH), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as stopped:  # argparse: refused while parsing, or --help
            code = stopped.code
    return code, out.getvalue() + err.getvalue()


def test_every_command_has_a_refused_base_here():
    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    assert set(commands) == set(BASES)
    for command, argv in BASES.items():
        code, printed = _run(argv)
        assert code == 2 and "Traceback" not in printed, (command, printed)


@pytest.mark.parametrize("command", sorted(BASES))
def test_every_default_is_shown_in_help(command):
    code, printed = _run([command, "--help"])
    assert code == 0 and "(default: None)" not in printed and "(default: False)" not in printed
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[command]
    assert isinstance(sub.formatter_class(command), argparse.ArgumentDefaultsHelpFormatter)
    undocumented = [a.dest for a in sub._actions if a.help is None]
    assert undocumented == [], f"das {command}: arguments without help (so without their default shown)"
    # an option without a value by default says in its own words what happens without it
    unsaid = [a.dest for a in sub._actions if a.default is None and a.nargs != 0 and not a.required
              and "default" not in a.help and (a.option_strings or a.nargs == "?")]
    assert unsaid == [], f"das {command}: options whose default is not said"


@settings(max_examples=300, deadline=None)
@given(command=st.sampled_from(sorted(BASES)), pick=st.integers(0, 10**6),
       value=st.one_of(st.sampled_from(HOSTILE), st.text(max_size=30).filter(lambda t: t.strip() not in SHIPPED)))
def test_no_command_prints_a_traceback_for_any_argument(command, pick, value):
    options = _options(command)
    argv = list(BASES[command])
    if not options:  # keygen: its one positional takes the value
        argv[-1] = value
        code, printed = _run(argv)
        assert code in (0, 1, 2) and "Traceback" not in printed, (argv, printed[-2000:])
        return
    option = options[pick % len(options)]
    if option in argv:
        argv[argv.index(option) + 1] = value
    else:
        argv += [f"{option}={value}"]
    code, printed = _run(argv)
    assert code in (0, 1, 2) and "Traceback" not in printed, (argv, printed[-2000:])
    assert len(printed) < 5000, "a value was echoed whole"


@settings(max_examples=100, deadline=None)
@given(command=st.sampled_from(sorted(BASES)), position=st.integers(0, 10),
       value=st.one_of(st.sampled_from(HOSTILE), st.text(max_size=30).filter(lambda t: t.strip() not in SHIPPED)))
def test_a_positional_or_stray_argument_never_gives_a_traceback(command, position, value):
    argv = list(BASES[command])
    argv.insert(1 + position % len(argv), value)
    code, printed = _run(argv)
    assert code in (0, 1, 2) and "Traceback" not in printed, (argv, printed[-2000:])


def test_the_cap_named_in_help_is_the_preflight_cap():
    assert str(preflight.MAX_RHO) == cli_args.MAX_RHO_TEXT


# The command line is exact (das/core/options.py, issue 35): no abbreviation of a long option, an option given once.

CANDIDATES = ["1", "1/2", "2", "flat", "place=a.csv", f"{NOWHERE}/x", "lp", "local", "topdown"]


def _accepted_values(command: str, action) -> list[str] | None:
    """The values the option takes when given once on the command's refused base (None: no candidate parses)."""
    base = BASES[command]
    n = action.nargs if isinstance(action.nargs, int) else 1
    if action.option_strings[-1] in base:
        at = base.index(action.option_strings[-1]) + 1
        return base[at:at + n]
    for value in list(action.choices)[:1] if action.choices else CANDIDATES:
        argv = [*base, action.option_strings[-1], *[str(value)] * n]
        with contextlib.redirect_stderr(io.StringIO()):
            try:
                build_parser().parse_args(argv)
            except SystemExit:
                continue
        return [str(value)] * n
    return None


def _long_options(command: str) -> list:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[command]
    return [a for a in sub._actions if a.option_strings and a.option_strings[-1].startswith("--") and a.dest != "help"]


@pytest.mark.parametrize("command", sorted(BASES))
def test_no_long_option_is_taken_from_an_abbreviation(command):
    for action in _long_options(command):
        option = action.option_strings[-1]
        short = option[:-1]
        if any(o == short for a in _long_options(command) for o in a.option_strings):
            continue
        argv = [*BASES[command], short] + ([] if action.nargs == 0 else ["1"])
        code, printed = _run(argv)
        assert code == 2 and f"unrecognized arguments: {short}" in printed, (argv, printed[-600:])
        assert f"did you mean {option}?" in printed or "did you mean --" in printed, printed[-600:]


@pytest.mark.parametrize("command", sorted(BASES))
def test_an_option_given_twice_is_refused(command):
    tried = 0
    for action in _long_options(command):
        if action.nargs == 0 or isinstance(action, argparse._AppendAction):
            continue
        values = _accepted_values(command, action)
        if values is None:
            continue
        option = action.option_strings[-1]
        if option in BASES[command]:  # given once already by the base: once more is the second time
            argv = [*BASES[command], option, *values]
        else:
            argv = [*BASES[command], option, *values, option, *values]
        code, printed = _run(argv)
        assert code == 2 and f"argument {'/'.join(action.option_strings)}: given twice" in printed, (argv, printed[-600:])
        tried += 1
    assert tried or command == "keygen", f"das {command}: no option tried"


def test_the_issue_s_two_commands_are_refused_naming_the_option():
    code, printed = _run(["run", "tiny", "--ep", "1", "--out", f"{NOWHERE}/out"])
    assert code == 2 and "--ep (did you mean --eps?)" in printed
    code, printed = _run(["run", "tiny", "--rho", "1/4", "--rho", "1/2", "--out", f"{NOWHERE}/out"])
    assert code == 2 and "argument --rho: given twice: give it once" in printed
    code, printed = _run(["--verbos", "privacy", "tiny"])
    assert code == 2 and "did you mean --verbose?" in printed


def test_every_parser_das_ships_is_exact():
    """The rule holds for every command: the das CLI, `python -m` entry points and the scripts build their
    parsers from das.core.options.ExactParser; none builds a plain argparse parser."""
    from conftest import ROOT

    files = [*(ROOT / "das").rglob("*.py"), *(ROOT / "benchmarks").glob("*.py"),
             *(p for p in (ROOT / "scripts").iterdir() if p.is_file())]
    plain = [str(p.relative_to(ROOT)) for p in files
             if p.name != "options.py" and "argparse.ArgumentParser(" in p.read_text(errors="replace")]
    assert plain == []
    assert any("ExactParser(" in p.read_text(errors="replace") for p in files if p.parent.name == "scripts")
