"""das.model.specfile: every spec (run, strategy, schema, attack workload) is read against its declared model.
Properties: a valid spec with one mutation (a key renamed, a value of another type, a value out of range)
is always refused with a message naming the key, and `das run` refuses it with rc 2 before any input is
read or any noise drawn."""

import contextlib
import io
import tomllib

import pytest
from conftest import ROOT
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import das.driver.inputs
import das.topdown.measure
from das.attack.workload import WorkloadFile, load_attack_tables
from das.cli import main as das_main
from das.core.errors import SpecError
from das.driver.runspec import RunSpecFile, load_run_spec
from das.model.schema import SchemaFile, load_schema, resolve_spec
from das.model.specfile import fields, model_at, shown, where
from das.privacy.strategy import StrategyFile, load_strategy

TINY = (ROOT / "specs/runs/tiny.toml").read_text().replace("../../geography_fixtures/", f"{ROOT}/geography_fixtures/")
KINDS = {  # kind -> (model, a valid spec's text, its loader)
    "run": (RunSpecFile, TINY + '\n[output]\nmdf_layout = "parquet"\n\n[privacy]\nseed = 3\n', load_run_spec),
    "strategy": (StrategyFile, resolve_spec("pl94_six_level", "strategies").read_text(), load_strategy),
    "schema": (SchemaFile, resolve_spec("dhc_persons", "schemas").read_text(), load_schema),
    "workload": (WorkloadFile, resolve_spec("pl94_persons", "attack").read_text(), load_attack_tables),
}
# TINY's [privacy] would then appear twice: keep the one with the seed
KINDS["run"] = (RunSpecFile, KINDS["run"][1].replace('[privacy]\ndelta = "1e-10"\n', ""), load_run_spec)
OUT_OF_RANGE = [  # (path, a value of the right type that is refused)
    (("privacy", "delta"), "2"), (("privacy", "delta"), "0"), (("privacy", "seed"), -1), (("persons", "rho"), "0"),
    (("persons", "rho"), "-1/2"), (("units", "rho"), "1/0"), (("levels",), []), (("levels",), ["nation", "moon", "block"]),
    (("levels",), ["block", "nation"]), (("output", "mdf_layout"), "csv"), (("postprocess", "solver"), "GUROBI"),
    (("postprocess", "rounding"), "bogus"), (("postprocess", "passes"), []), (("input", "persons"), ""),
    (("persons", "schema"), ""),
]


def _paths(model, data: dict, loc: tuple = ()) -> list[tuple]:
    """Every (path) of a key that is a field of its table's model, walking tables and arrays of tables."""
    found = []
    table_model = model_at(model, loc)
    for key, value in data.items():
        here = (*loc, key)
        if table_model is not None:
            found.append(here)
        if isinstance(value, dict):
            found += _paths(model, value, here)
        elif isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            for i, item in enumerate(value):
                found += _paths(model, item, (*here, i))
    return found


def _get(data, loc):
    for part in loc:
        data = data[part]
    return data


def _renamed(model, data: dict, loc: tuple, suffix: str) -> tuple[dict, str]:
    """data with the key at loc renamed to one its table does not have."""
    table = _get(data, loc[:-1])
    new = loc[-1] + suffix
    while new in fields(model_at(model, loc[:-1])):
        new += suffix
    items = [(new if k == loc[-1] else k, v) for k, v in table.items()]
    table.clear()
    table.update(items)
    return data, new


def _retyped(data: dict, loc: tuple, choice: int) -> object:
    """A value of another type than the one at loc, none of which the field's model accepts."""
    old = _get(data, loc)
    others = [1.5] + ([{"x": 1}] if not isinstance(old, dict) else []) + ([[1.5]] if not isinstance(old, list) else []) \
        + ([True] if not isinstance(old, bool) else []) + (["zz"] if not isinstance(old, str) else [])
    value = others[choice % len(others)]
    _get(data, loc[:-1])[loc[-1]] = value
    return value


def _write(path, data: dict) -> None:
    """A dict as TOML (the few shapes a spec has: tables, arrays of tables, scalars, lists)."""
    lines = []

    def scalar(v):
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, (int, float)):
            return repr(v)
        if isinstance(v, str):
            return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
        if isinstance(v, list):
            return "[" + ", ".join(scalar(x) for x in v) + "]"
        return "{" + ", ".join(f'"{k}" = {scalar(x)}' for k, x in v.items()) + "}"

    def table(name, d):
        plain = {k: v for k, v in d.items() if not isinstance(v, dict) and not _array_of_tables(v)}
        if name:
            lines.append(f"[{name}]")
        lines.extend(f'"{k}" = {scalar(v)}' for k, v in plain.items())
        for k, v in d.items():
            key = f'{name}."{k}"' if name else f'"{k}"'
            if isinstance(v, dict):
                table(key, v)
            elif _array_of_tables(v):
                for item in v:
                    lines.append(f"[[{key}]]")
                    lines.extend(f'"{ik}" = {scalar(iv)}' for ik, iv in item.items())

    table("", data)
    path.write_text("\n".join(lines) + "\n")


def _array_of_tables(v) -> bool:
    return isinstance(v, list) and bool(v) and all(isinstance(x, dict) for x in v)


@pytest.mark.parametrize("kind", KINDS)
def test_the_shipped_specs_written_back_still_load(kind, tmp_path):
    model, text, load = KINDS[kind]
    path = tmp_path / "spec.toml"
    _write(path, tomllib.loads(text))
    load(path)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(kind=st.sampled_from(sorted(KINDS)), mutation=st.sampled_from(["rename", "retype"]), pick=st.integers(0, 10**6),
       suffix=st.sampled_from(["x", "_", "s", "0", "\uff10"]))
def test_one_mutation_of_a_valid_spec_is_refused_naming_the_key(kind, mutation, pick, suffix, tmp_path_factory):
    model, text, load = KINDS[kind]
    data = tomllib.loads(text)
    paths = _paths(model, data)
    loc = paths[pick % len(paths)]
    if mutation == "rename":
        data, named = _renamed(model, data, loc, suffix)
    else:
        _retyped(data, loc, pick // len(paths))
        named = where(loc).split()[-1].split(".")[-1].split("[")[0] if loc else ""
    path = tmp_path_factory.mktemp(kind) / "spec.toml"
    _write(path, data)
    with pytest.raises(SpecError) as refused:
        load(path)
    assert str(path) in str(refused.value) and named in str(refused.value)


@pytest.fixture
def nothing_read_or_drawn(monkeypatch):
    def never(*args, **kwargs):
        raise AssertionError("an input was read or noise drawn before the spec was refused")

    monkeypatch.setattr(das.driver.inputs, "read_inputs", never)
    monkeypatch.setattr(das.topdown.measure, "discrete_gaussian", never)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(mutation=st.sampled_from(["rename", "retype", "range"]), pick=st.integers(0, 10**6))
def test_das_run_refuses_a_mutated_spec_with_rc_2_before_reading_or_drawing(mutation, pick, tmp_path_factory,
                                                                            nothing_read_or_drawn):
    model, text, _ = KINDS["run"]
    data = tomllib.loads(text)
    if mutation == "range":
        loc, value = OUT_OF_RANGE[pick % len(OUT_OF_RANGE)]
        _get(data, loc[:-1])[loc[-1]] = value
        named = loc[-1]
    else:
        paths = _paths(model, data)
        loc = paths[pick % len(paths)]
        if mutation == "rename":
            data, named = _renamed(model, data, loc, "x")
        else:
            _retyped(data, loc, pick // len(paths))
            named = loc[-1]
    tmp = tmp_path_factory.mktemp("run")
    _write(tmp / "spec.toml", data)
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = das_main(["run", str(tmp / "spec.toml"), "--out", str(tmp / "out"), "--workers", "1", "--no-progress"])
    assert code == 2 and str(named) in err.getvalue() and "Traceback" not in err.getvalue(), err.getvalue()
    assert not (tmp / "out").exists()


def test_a_value_echoed_in_a_message_is_cut_to_a_readable_length(tmp_path):
    text = KINDS["run"][1].replace("seed = 3", 'seed = "' + "9" * 300_000 + '"', 1)
    (tmp_path / "spec.toml").write_text(text)
    with pytest.raises(SpecError) as refused:
        load_run_spec(tmp_path / "spec.toml")
    assert len(str(refused.value)) < 500 and "(300,000 characters)" in str(refused.value)
    (tmp_path / "spec.toml").write_text(text.replace('"' + "9" * 300_000 + '"', "9" * 300_000))  # past tomllib's limit
    with pytest.raises(SpecError, match="not valid TOML: Exceeds the limit") as refused:
        load_run_spec(tmp_path / "spec.toml")
    assert len(str(refused.value)) < 500
    assert shown("x" * 10) == repr("x" * 10)
