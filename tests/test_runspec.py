"""Run specs: every shipped one loads; a bad one is refused naming the file and what was expected."""

import pytest
from conftest import quiet

from das.pipeline import Pipeline
from das.runspec import load_run_spec
from das.schema import SpecError, resolve_spec, specs_root

SHIPPED = sorted(p.stem for p in (specs_root() / "runs").glob("*.toml"))


@pytest.mark.parametrize("name", SHIPPED)
def test_every_shipped_run_spec_loads(name):
    spec = load_run_spec(name)
    assert spec.persons_path.exists() and spec.levels[0] == "nation" and spec.levels[-1] == "block"
    assert spec.solver in ("CLARABEL",) or spec.solver.startswith("cvxpy:")


def _spec(tmp_path, old: str, new: str):
    text = resolve_spec("tiny", "runs").read_text().replace(old, new)
    assert text != resolve_spec("tiny", "runs").read_text() or old == new
    path = tmp_path / "spec.toml"
    path.write_text(text.replace("../../geography_fixtures/", str(specs_root().parent / "geography_fixtures") + "/"))
    return path


@pytest.mark.parametrize("old, new, expected", [
    ("[input]", "[inputs]", "missing section \\[input\\]"),
    ('schema = "pl94_persons"', 'schema = "no_such_schema"', None),
    ('nation = [["hhgq", "hhinstlevels"], []]', 'moon = [["hhgq"], []]', "moon"),
    ('delta = "1e-10"', 'delta = "1e-10"\n[postprocess]\nsolver = "GUROBI"', "GUROBI"),
])
def test_a_bad_run_spec_is_refused_naming_the_problem(tmp_path, old, new, expected):
    path = _spec(tmp_path, old, new)
    with pytest.raises(SpecError) as e:
        Pipeline.prepare(path, 1, log=quiet)  # loads the run spec, then its schemas and strategies
    assert str(path) in str(e.value) or "no_such_schema" in str(e.value)
    if expected:
        assert e.match(expected)


def test_the_seed_makes_a_replication_run():
    assert load_run_spec("tiny", seed=4).seed == 4 and load_run_spec("tiny").seed is None
