"""Run specs: every shipped one loads; a bad one is refused naming the file and what was expected."""

from fractions import Fraction
from pathlib import Path

import pytest

from das.core.errors import SpecError
from das.driver.pipeline import Pipeline
from das.driver.runspec import load_run_spec
from das.model.schema import resolve_spec, specs_root

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
        Pipeline.prepare(path, 1)  # loads the run spec, then its schemas and strategies
    assert str(path) in str(e.value) or "no_such_schema" in str(e.value)
    if expected:
        assert e.match(expected)


def test_the_seed_makes_a_replication_run():
    assert load_run_spec("tiny", seed=4).seed == 4 and load_run_spec("tiny").seed is None


# ---------------------------------------------------------------------------------------------
# issue 24: say exactly what was meant, or stop


def _refused(tmp_path, old: str, new: str) -> str:
    path = _spec(tmp_path, old, new)
    with pytest.raises(SpecError) as e:
        load_run_spec(path)
    assert str(path) in str(e.value)
    return str(e.value)


@pytest.mark.parametrize("old, new, expected", [
    ('delta = "1e-10"', 'delta = "1e-10"\nrho = "1/100"',
     "[privacy]: unknown key(s) ['rho']: rho is a key of [persons] and [units]"),
    ('strategy = "pl94_six_level"', 'strategy = "pl94_six_level"\nrh0 = "1"',
     "[persons]: unknown key(s) ['rh0']: did you mean rho?"),
    ('strategy = "pl94_six_level"', 'strategy = "pl94_six_level"\nrhoo = "1"', "did you mean rho?"),
    ('delta = "1e-10"', 'delta = "1e-10"\nseeed = 3', "[privacy]: unknown key(s) ['seeed']: did you mean seed?"),
    ('[privacy]', '[outptu]\npl94171 = true\n[privacy]', "the top level: unknown key(s) ['outptu']: did you mean output?"),
    ('delta = "1e-10"', 'delta = "1e-10"\nseed = "abc"', "[privacy] seed: 'abc' is not valid (expected a nonnegative integer"),
    ('delta = "1e-10"', 'delta = "1e-10"\nseed = 1.5', "[privacy] seed: 1.5 is not valid (expected a nonnegative integer"),
    ('delta = "1e-10"', 'delta = "1e-10"\nseed = -2', "[privacy] seed: -2 is not valid"),
    ('delta = "1e-10"', 'delta = 1e-10', "[privacy] delta: write 1e-10 as a string"),
    ('levels = ["nation"', 'levels = [] #', "levels: [] is not valid (expected a list of levels from nation to block"),
    ('levels = ["nation", "state", "county", "tract", "block_group", "block"]', 'levels = "nation"',
     "levels: 'nation' is not valid (expected a list of levels"),
    ('levels = ["nation", "state", "county", "tract", "block_group", "block"]', 'levels = ["nation", "moon", "block"]',
     "unknown geography level(s) ['moon']"),
    ('schema = "pl94_persons"', "schema = 5", "[persons] schema: 5 is not valid (expected a schema name"),
    ('strategy = "pl94_six_level"', 'strategy = "pl94_six_level"\nrho = "1"\neps = "2"', "rho and eps both set the budget"),
    ('[privacy]', '[output]\nmdf_layout = "csv"\n[privacy]',
     "[output] mdf_layout: 'csv' is not valid (expected 'parquet' or 'pipe')"),
    ('[privacy]', '[output]\npl94171 = "yes"\n[privacy]', "[output] pl94171: 'yes' is not valid (expected true or false)"),
    ('[privacy]', '[geography]\nspline = "optimized"\n[privacy]', "[geography]: unknown key(s) ['spline']: did you mean spine?"),
    ('[privacy]', '[geography]\nareas = { place = "p.csv" }\nspine = "fast"\n[privacy]',
     "[geography] spine: 'fast' is not valid (expected 'standard' or 'optimized')"),
    ('[privacy]', '[geography]\nspine = "optimized"\n[privacy]', '[geography] spine = "optimized" needs areas to optimize for'),
    ('[privacy]', '[geography]\nareas = { "school district" = "s.csv" }\n[privacy]',
     "[geography] areas: area type 'school district' is not a simple name"),
    ('[privacy]', '[geography]\nareas = { place = "" }\n[privacy]', "[geography.areas] place: '' is not valid (expected a table"),
    ('[privacy]', '[geography]\nareas = "places.csv"\n[privacy]', "[geography] areas: 'places.csv' is not valid"),
])
def test_a_mistyped_spec_is_refused_naming_the_section_the_key_and_what_was_expected(tmp_path, old, new, expected):
    assert expected in _refused(tmp_path, old, new)


def test_a_spec_without_geography_declares_no_areas_and_the_standard_spine():
    spec = load_run_spec("tiny")
    assert spec.areas == {} and spec.spine == "standard"


def test_area_files_are_relative_to_the_spec_file(tmp_path):
    path = _spec(tmp_path, "[privacy]", '[geography]\nareas = { place = "places.parquet", town = "../x/towns.csv", '
                                        'cdp = "/abs/cdp.csv" }\nspine = "optimized"\n[privacy]')
    spec = load_run_spec(path)
    assert spec.areas == {"place": tmp_path / "places.parquet", "town": (tmp_path.parent / "x/towns.csv").resolve(),
                          "cdp": Path("/abs/cdp.csv")}
    assert spec.areas_as_written["town"] == "../x/towns.csv" and spec.spine == "optimized"


def test_every_problem_of_a_spec_is_reported_in_one_pass(tmp_path):
    text = _refused(tmp_path, 'delta = "1e-10"', 'delta = "1e-10"\nrho = "1/100"\nseed = "abc"\n[outptu]\npl94171 = true')
    assert "3 problems" in text
    for part in ("['rho']", "[privacy] seed", "['outptu']"):
        assert part in text


def test_a_spec_that_is_not_utf8_or_not_readable_is_named(tmp_path):
    path = tmp_path / "spec.toml"
    path.write_bytes(b'name = "x"\n\xff\xfe\n')
    with pytest.raises(SpecError, match="not UTF-8 text"):
        load_run_spec(path)
    loop = tmp_path / "loop.toml"
    loop.symlink_to(loop)
    with pytest.raises(SpecError, match="loop.toml: cannot read: Too many levels of symbolic links"):
        load_run_spec(loop)


def test_a_spec_refused_opens_no_input(tmp_path, monkeypatch):
    import das.io.microdata as microdata

    def never(*args, **kwargs):
        raise AssertionError("an input was opened before the spec was refused")

    monkeypatch.setattr(microdata, "read_inputs", never)
    path = _spec(tmp_path, 'delta = "1e-10"', 'delta = "1e-10"\nrho = "1/100"')
    with pytest.raises(SpecError):
        Pipeline.prepare(path, 1)


def test_a_budget_as_eps_gives_the_largest_rho_within_it(tmp_path):
    from das.privacy.accounting import eps_for_delta

    path = _spec(tmp_path, 'strategy = "pl94_six_level"', 'strategy = "pl94_six_level"\neps = "4"')
    cert = Pipeline.prepare(path, 1).certificates["persons"]
    assert cert.eps <= 4 and eps_for_delta(cert.rho * (1 + Fraction(1, 10**4)), cert.delta) > 4


def test_a_command_line_budget_is_part_of_what_a_resumed_run_must_match():
    from das.driver.runspec import Budget

    plain, given = load_run_spec("tiny"), load_run_spec("tiny", budget=Budget(rho=Fraction(1, 2)))
    assert given.persons.rho == Fraction(1, 2) and given.units == plain.units
    assert given.fingerprint_text != plain.fingerprint_text and plain.fingerprint_text == plain.text
    with pytest.raises(SpecError, match="rho= and eps= both"):
        Budget(rho=Fraction(1), eps=Fraction(1))
