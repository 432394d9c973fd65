"""das as a Python library (das/api, das/__init__.py): the README's example as written, DataFrames in and out,
every public name documented, `import das` light, the examples run, specs as dicts, DataFrame errors as a
file's, the attack's typed config and result, `das init`."""

import inspect
import os
import re
import subprocess
import sys
from fractions import Fraction

import numpy as np
import pandas as pd
import pytest
from conftest import ROOT, TINY

import das
import das.api
from das.core.errors import InputError, SpecError
from das.io.microdata import collect_problems
from das.model.schema import load_schema
from das.model.specfile import load_toml, toml_text

ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def _python(code_or_file, cwd, *args, timeout=300) -> subprocess.CompletedProcess:
    argv = [sys.executable, *(["-c", code_or_file] if isinstance(code_or_file, str) else [str(code_or_file)]), *args]
    return subprocess.run(argv, cwd=cwd, env=ENV, capture_output=True, text=True, timeout=timeout)


def _readme_python() -> str:
    return re.search(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S).group(1)


def test_the_readme_first_python_example_runs_as_written(tmp_path):
    code = _readme_python()
    assert code.startswith("import das") and "das.run(" in code and "pd.read_csv" in code  # DataFrames in
    (tmp_path / "geography_fixtures").symlink_to(ROOT / "geography_fixtures")  # its paths are the repository's
    done = _python(code, tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert lines[0] == "293764/114921 17.1436" and lines[-1] == "True"  # the certificate, and valid
    assert "44001" in done.stdout and (tmp_path / "runs" / "tiny_api" / "manifest.json").is_file()
    assert "Traceback" not in done.stderr


def test_dataframes_in_and_out(tmp_path):
    persons = pd.read_csv(TINY / "persons.csv", dtype=str)
    units = pd.read_csv(TINY / "units.csv", dtype=str)
    release = das.run("tiny", persons=persons, units=units, out=tmp_path / "r", seed=7, workers=1, progress=False)
    from_files = das.run("tiny", out=tmp_path / "f", seed=7, workers=1, progress=False)
    assert release.valid and isinstance(release.certificate, das.api.release.Certificate)
    assert release.certificate.rho == Fraction(293764, 114921) and release.certificate.eps == 17.1436
    for name, table in release.tables.items():  # the same seed, the same input: the same cells
        pd.testing.assert_frame_equal(table, from_files.tables[name])
        assert table["geocode"].map(type).eq(str).all() and not isinstance(table["level"].dtype, pd.CategoricalDtype)
    mdf = release.mdf
    assert not any(isinstance(t, pd.CategoricalDtype) for t in mdf.dtypes)
    assert sorted((mdf.TABBLKST + mdf.TABBLKCOU).unique()) == ["44001", "44003"]  # plain strings add up
    assert len(mdf) == 145 and release.units_mdf is not None and release.validate().ok
    assert das.Release.open(release.path).certificate == release.certificate
    assert not release.private and "NOT private" in repr(release)


def test_a_spec_as_a_dict_is_the_spec_as_a_file(tmp_path):
    data = load_toml(ROOT / "specs/runs/tiny.toml")
    data["input"] = {k: str(TINY / f"{k}.csv") for k in ("persons", "units")}
    from_dict = das.run(data, out=tmp_path / "d", seed=5, workers=1, progress=False)
    from_file = das.run("tiny", out=tmp_path / "f", seed=5, workers=1, progress=False)
    assert from_dict.manifest.spec_name == "tiny" and from_dict.certificates == from_file.certificates
    pd.testing.assert_frame_equal(from_dict.mdf, from_file.mdf)
    with pytest.raises(SpecError, match=r"\[privacy\]: unknown key\(s\) \['rho'\]"):
        das.run({**data, "privacy": {"rho": "1"}}, out=tmp_path / "x", seed=5)
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize("spec", sorted(p.stem for p in (ROOT / "specs/runs").glob("*.toml")))
def test_a_spec_written_from_a_dict_reads_back_equal(spec):
    data = load_toml(ROOT / "specs/runs" / f"{spec}.toml")
    assert load_toml_text(toml_text(data)) == data


def load_toml_text(text: str) -> dict:
    import tomllib

    return tomllib.loads(text)


def test_toml_text_refuses_what_is_not_exact():
    with pytest.raises(SpecError, match="a float is not exact"):
        toml_text({"persons": {"rho": 0.5}})
    assert load_toml_text(toml_text({"persons": {"rho": Fraction(1, 3)}})) == {"persons": {"rho": "1/3"}}


def test_a_dataframe_is_checked_as_a_csv_file_of_its_values(tmp_path):
    persons = pd.read_csv(TINY / "persons.csv", dtype=str)
    persons.loc[2, "CENRACE"] = "64"
    persons.loc[4, "TABTRACTCE"] = "100"  # not zero-padded
    bad_file = tmp_path / "persons.csv"
    persons.to_csv(bad_file, index=False)
    expected, _ = collect_problems(bad_file, TINY / "units.csv", load_schema("pl94_persons"))
    with pytest.raises(InputError) as refused:
        das.run("tiny", persons=persons, out=tmp_path / "out", seed=1)
    problems = refused.value.problems
    assert [(p.row, p.column, p.value, p.expected) for p in problems] == \
           [(p.row, p.column, p.value, p.expected) for p in expected] and len(problems) == 2
    assert "the persons DataFrame row 3, column CENRACE: '64' is not valid" in str(refused.value)
    assert not (tmp_path / "out").exists()
    typed = pd.read_parquet(ROOT / "geography_fixtures/vt_grand_isle/persons.parquet")  # typed columns work too
    assert typed["QAGE"].dtype.kind == "i"


def test_every_public_name_has_a_docstring():
    assert set(das.API) | set(das.MODULES) == set(das.api.__all__)
    missing = [name for name in das.API if not (inspect.getdoc(getattr(das.api, name)) or "").strip()]
    for cls in (das.Release, das.Study, das.AttackConfig, das.AttackResult):
        members = {n: m for n, m in vars(cls).items() if not n.startswith("_") and n not in cls.__dataclass_fields__}
        missing += [f"{cls.__name__}.{n}" for n, m in members.items()
                    if callable(getattr(m, "fget", getattr(m, "func", m))) and not (inspect.getdoc(m) or "").strip()]
    assert missing == []
    assert inspect.isfunction(das.run)  # the API's function, not the module of the same name (tests/test_api_help.py)
    assert str(inspect.signature(das.run)).startswith("(spec, *, persons")
    assert set(das.API) <= set(dir(das))


def test_import_das_is_light():
    done = _python("import sys, das; heavy = {'pandas', 'numpy', 'scipy', 'das.api', 'das.driver.pipeline'} & set(sys.modules);"
                   " print(sorted(heavy))", ROOT)
    assert done.stdout.strip() == "[]", done.stdout + done.stderr


def test_the_api_reference_names_every_public_name():
    reference = (ROOT / "docs/api.md").read_text()
    assert [name for name in das.API if f"`{name}" not in reference and f"das.{name}" not in reference] == []


@pytest.mark.parametrize("example", sorted(p.name for p in (ROOT / "examples").glob("*.py")))
def test_every_example_runs(example, tmp_path):
    done = _python(ROOT / "examples" / example, tmp_path, str(tmp_path / "work"))
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr and done.stdout.strip()


def test_budget_conversions_are_exact():
    rho = das.rho_for_eps(4, "1e-10")
    assert rho == Fraction(7411, 40000) and das.eps_for_rho(rho, "1e-10") == 4.0
    assert das.eps_for_rho(Fraction(293764, 114921), Fraction(1, 10**10)) == 17.1436
    assert das.eps_for_rho(0.5, 1e-10) == das.eps_for_rho("1/2", "1e-10")  # a float: the decimal it prints as
    with pytest.raises(SpecError, match="rho"):
        das.eps_for_rho(float("nan"), "1e-10")
    assert das.certificates("tiny", eps="4")["persons"].rho == rho


def test_the_attack_is_typed_and_exact_tables_and_a_release_share_blocks_and_schema(tmp_path):
    release = das.run("tiny", out=tmp_path / "r", seed=3, workers=1, progress=False)
    small = dict(truth=TINY / "persons.csv", count=3, runs=2, relaxed=30, steps=20, ip_top=0, workers=1)
    exact = das.attack(published="exact", out=tmp_path / "a", **small)
    released = das.attack(das.AttackConfig(published=release.path, out=tmp_path / "b", **small))
    assert exact.geounits == released.geounits and len(exact.geounits) == 3
    assert exact.schema == released.schema == "pl94_persons"
    for result in (exact, released):
        assert set(result.match_rate["rap_rank"]) == {1, 5, 10, 25, 50, 100}  # keyed by k, an int
        assert all(0 <= v <= 1 for v in result.match_rate["rap_rank"].values() if v is not None)
        assert str(tmp_path) not in result.source  # no local path in what the plot and summary say
    assert {f.name for f in das.AttackConfig.__dataclass_fields__.values()} >= {"relaxed", "steps", "learning_rate"}
    with pytest.raises(TypeError):
        das.AttackConfig(truth="t", published="exact", out="o", n_relaxed=5)


def test_das_init_writes_a_spec_das_runs(tmp_path):
    spec = tmp_path / "mine.toml"
    text = das.init_spec(TINY / "persons.csv", TINY / "units.csv", out=spec)
    assert spec.read_text() == text and "145 persons in 12 blocks" in text and 'schema = "pl94_persons"' in text
    release = das.run(spec, out=tmp_path / "r", seed=1, workers=1, progress=False)
    assert release.valid and release.manifest.spec_name == "mine"
    with pytest.raises(SpecError, match="exists"):  # never over a file
        das.init_spec(TINY / "persons.csv", TINY / "units.csv", out=spec)
    dhc = das.init_spec(ROOT / "geography_fixtures/vt_grand_isle/persons.parquet",
                        ROOT / "geography_fixtures/vt_grand_isle/units.parquet", out=tmp_path / "dhc.toml",
                        schema="dhc_persons")
    assert 'strategy = "dhc_persons_small"' in dhc and "block_group" not in dhc.split("levels")[1].splitlines()[0]


def test_das_init_refuses_inputs_das_cannot_release(tmp_path):
    persons = pd.read_csv(TINY / "persons.csv", dtype=str).drop(columns=["CENHISP"])
    persons.to_csv(tmp_path / "p.csv", index=False)
    with pytest.raises(InputError, match="missing column CENHISP"):
        das.init_spec(tmp_path / "p.csv", TINY / "units.csv", out=tmp_path / "s.toml")
    assert not (tmp_path / "s.toml").exists()
    with pytest.raises(InputError, match="a directory: das init reads two files"):
        das.init_spec(tmp_path, TINY / "units.csv", out=tmp_path / "s.toml")


def test_table_names_pl_are_the_same_cells(tmp_path):
    release = das.run("tiny", out=tmp_path / "r", seed=2, workers=1, progress=False)
    readable, pl = release.table("P3"), release.table("P3", names="pl")
    assert list(pl.columns[:3]) == ["level", "geocode", "P0030001"]
    np.testing.assert_array_equal(readable.to_numpy(), pl.to_numpy())  # renamed, never recomputed
    assert "total" in release.table("P5", names="pl").columns  # a cell PL 94-171 lacks keeps its name
    with pytest.raises(SpecError, match="unknown column naming"):
        release.table("P1", names="census")


def test_the_walkthrough_python_runs_as_written(tmp_path):
    code = re.search(r"```python\n(.*?)```", (ROOT / "docs/walkthrough.md").read_text(), re.S).group(1)
    for name in ("persons.csv", "units.csv"):
        (tmp_path / name).write_bytes((TINY / name).read_bytes())
    done = _python(code, tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines()[0] == "17.1436" and (tmp_path / "runs/release-metrics/report/index.html").is_file()
