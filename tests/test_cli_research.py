"""das/cli/research.py (metrics, replicate, report and compare): every
research command parses as documented, and bad values are refused with exit code 2 and the reason
(never a traceback), before anything is written."""

from fractions import Fraction

import pytest
from conftest import cli_commands, cli_refused, cli_refused_by_parser

from das.cli import build_parser, research
from das.research.evaluate import metrics_dir

QUERIES = "total,hhgq,hispanic x cenrace,votingage x hispanic x cenrace"
PARSED = [  # (argv, handler, what the parsed arguments hold)
    (["metrics", "RUN"], research._cmd_metrics,
     {"run_dir": "RUN", "truth": None, "against": None, "out": None, "estimators": None,  # None: the release's own
      "queries": QUERIES, "keep": "total"}),
    (["metrics", "WLS", "--against", "RUN"], research._cmd_metrics, {"run_dir": "WLS", "against": "RUN", "truth": None}),
    (["metrics", "RUN", "--truth", "p.csv", "u.csv", "--out", "m", "--estimators", "noisy", "--keep", "hhgq"],
     research._cmd_metrics, {"truth": ["p.csv", "u.csv"], "out": "m", "estimators": ("noisy",), "keep": "hhgq"}),
    (["replicate", "tiny", "--out", "o"], research._cmd_replicate,
     {"spec": "tiny", "out": "o", "runs": 20, "rho": None, "seed": None, "estimators": ("topdown", "noisy", "wls"),
      "queries": QUERIES, "keep": "total", "overwrite": False, "report": False, "allow_large_rho": False}),
    (["replicate", "tiny", "--out", "o", "--runs", "3", "--workers", "2", "--rho", "1/2,2", "--seed", "5", "--overwrite",
      "--report"], research._cmd_replicate,
     {"runs": 3, "workers": 2, "rho": "1/2,2", "seed": 5, "overwrite": True, "report": True}),
    (["report", "DIR"], research._cmd_report, {"dir": "DIR", "out": None}),
    (["compare", "tiny", "--out", "o"], research._cmd_compare,
     {"spec": "tiny", "out": "o", "mechanisms": "topdown", "seeds": 20, "rho": None, "attack_blocks": 10,
      "attack_seeds": None, "attack_runs": 20, "attack_relaxed": 300, "attack_steps": 300, "tables": None,
      "overwrite": False, "allow_large_rho": False}),
    (["compare", "tiny", "--out", "o", "--mechanisms", "topdown,flat", "--seeds", "2", "--rho", "1/3",
      "--attack-blocks", "0", "--workers", "1"], research._cmd_compare,
     {"mechanisms": "topdown,flat", "seeds": 2, "rho": Fraction(1, 3), "attack_blocks": 0, "workers": 1}),
]


def test_every_research_command_is_exercised_here():
    assert cli_commands(research) == {argv[0] for argv, _, _ in PARSED}


@pytest.mark.parametrize("argv, handler, values", PARSED, ids=[" ".join(a) for a, _, _ in PARSED])
def test_a_research_command_parses(argv, handler, values):
    args = build_parser().parse_args(argv)
    assert args.func is handler
    assert {k: getattr(args, k) for k in values} == values


@pytest.mark.parametrize("argv, expected", [
    (["metrics"], "the following arguments are required: run_dir"),
    (["metrics", "RUN", "--truth", "p.csv"], "argument --truth: expected 2 arguments"),
    (["metrics", "RUN", "--truth", "p.csv", "u.csv", "--against", "B"], "argument --against: not allowed with argument"),
    (["replicate", "tiny"], "the following arguments are required: --out"),
    (["replicate", "tiny", "--out", "o", "--runs", "x"], "argument --runs: expected an integer, got 'x'"),
    (["replicate", "tiny", "--out", "o", "--seed", "1.5"], "argument --seed: expected an integer, got '1.5'"),
    (["replicate", "tiny", "--out", "o", "--runs", "0"], "argument --runs: expected an integer of at least 1, got 0"),
    (["replicate", "tiny", "--out", "o", "--workers", "0"], "argument --workers: expected an integer of at least 1, got 0"),
    (["replicate", "tiny", "--out", "o", "--estimators", "topdown,magic"],
     "argument --estimators: unknown name 'magic'; expected some of topdown, noisy, wls"),
    (["metrics", "RUN", "--estimators", "magic"], "argument --estimators: unknown name 'magic'"),
    (["metrics", "RUN", "--estimators", "nosy"], "(did you mean noisy?)"),
    (["report"], "the following arguments are required: dir"),
    (["compare", "tiny"], "the following arguments are required: --out"),
    (["compare", "tiny", "--out", "o", "--seeds", "x"], "argument --seeds: expected an integer, got 'x'"),
    (["compare", "tiny", "--out", "o", "--attack-blocks", "some"], "argument --attack-blocks: expected an integer"),
    (["compare", "tiny", "--out", "o", "--seeds", "0"], "argument --seeds: expected an integer of at least 1, got 0"),
    (["compare", "tiny", "--out", "o", "--attack-blocks", "-1"], "argument --attack-blocks: expected an integer of at least 0"),
    (["compare", "tiny", "--out", "o", "--attack-runs", "0"], "argument --attack-runs: expected an integer of at least 1"),
    (["compare", "tiny", "--out", "o", "--workers", "0"], "argument --workers: expected an integer of at least 1, got 0"),
    (["compare", "tiny", "--out", "o", "--rho", "0"], "argument --rho: must be positive, got '0'"),
    (["compare", "tiny", "--out", "o", "--rho", "abc"], "argument --rho: 'abc' is not an exact fraction"),
])
def test_a_malformed_research_command_is_refused_while_parsing(argv, expected, capsys):
    assert expected in cli_refused_by_parser(argv, capsys)


@pytest.mark.parametrize("argv, expected", [
    (["replicate", "tiny", "--rho", "abc"], "das replicate: --rho: 'abc' is not an exact fraction"),
    (["replicate", "tiny", "--keep", "nonesuch"], "das replicate: kept queries ['nonesuch'] are not among the scored queries"),
    (["replicate", "tiny", "--rho", "11"], "das replicate: --rho 11: rho = 11 is above 10"),
    (["replicate", "tiny", "--rho", "1/2,20"], "If that is intended, pass --allow-large-rho"),
    (["compare", "tiny", "--mechanisms", "topdown,nonesuch"], "das compare: unknown mechanism(s) ['nonesuch']"),
    (["compare", "tiny", "--rho", "11"], "das compare: --rho 11: rho = 11 is above 10"),
])
def test_a_bad_study_setting_is_refused_before_its_directory_is_made(argv, expected, tmp_path, capsys):
    out = tmp_path / "out"
    assert expected in cli_refused([*argv, "--out", str(out)], capsys)
    assert not out.exists()


@pytest.fixture(scope="module")
def tiny_release(tmp_path_factory):
    from das.driver.run import run

    return run("tiny", tmp_path_factory.mktemp("runs") / "tiny", seed=7, workers=1, progress=False).out_dir


def test_metrics_refuses_a_missing_truth_file_and_an_unknown_query(tiny_release, tmp_path, capsys):
    printed = cli_refused(["metrics", str(tiny_release), "--truth", str(tmp_path / "p.csv"), str(tmp_path / "u.csv"),
                           "--out", str(tmp_path / "m")], capsys)
    assert f"das metrics: truth file {tmp_path / 'p.csv'} does not exist" in printed
    printed = cli_refused(["metrics", str(tiny_release), "--queries", "nonesuch", "--out", str(tmp_path / "m")], capsys)
    assert "das metrics: query 'nonesuch'" in printed and "neither an attribute nor a recode" in printed
    assert not (tmp_path / "m").exists()  # refused before its directory is made
    printed = cli_refused(["metrics", str(tiny_release), "--queries", "nonesuch"], capsys)
    assert not metrics_dir(tiny_release).exists()


def test_metrics_refuses_an_unknown_estimator_from_the_library_too(tiny_release, tmp_path):
    from das.core.errors import StudyError
    from das.research.evaluate import evaluate_run

    with pytest.raises(StudyError, match=r"unknown estimator\(s\) \['magic'\]; choose from topdown, noisy, wls"):
        evaluate_run(tiny_release, out=tmp_path / "m", estimators=("magic",))
    assert not (tmp_path / "m").exists()


def test_report_names_what_a_directory_lacks(tiny_release, capsys):
    printed = cli_refused(["report", str(tiny_release)], capsys)
    assert f"das report: {tiny_release} is not a finished study or metrics directory: study.json is missing" in printed
