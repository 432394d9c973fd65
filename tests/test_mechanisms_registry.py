"""das/mechanisms/registry.py: every registered mechanism carries what `das synth`, `das compare` and
docs/mechanisms.md promise of it, under the same name everywhere."""

import inspect
import re
import tomllib
from dataclasses import replace

import pytest
from conftest import ROOT

from das.cli import build_parser
from das.mechanisms import MECHANISMS, Mechanism, SynthesisInput
from das.mechanisms.base import DETAIL_SOURCES
from das.mechanisms.registry import ENTRIES as MECHANISM_NAMES
from das.research.compare import mechanism_names
from das.research.release_child import TOPDOWN

DOCS = (ROOT / "docs" / "mechanisms.md").read_text()
EXTRAS = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]


def _docs_table() -> dict[str, str]:
    """The families table at the top of docs/mechanisms.md: name -> its extra column."""
    rows = [[cell.strip() for cell in line.strip().strip("|").split("|")]
            for line in DOCS.split("## Accounting")[0].splitlines() if re.match(r"^\| `\w+` \|", line)]
    return {name.strip("`"): extra for name, _, _, extra in rows}


def test_the_command_line_lists_the_registered_names_in_order():
    assert tuple(MECHANISM_NAMES) == tuple(MECHANISMS)
    synth = build_parser()._subparsers._group_actions[0].choices["synth"]
    choices = next(a.choices for a in synth._actions if a.dest == "mechanism")
    assert tuple(choices) == tuple(MECHANISMS)


def test_das_compare_offers_topdown_then_every_registered_mechanism_that_can_run():
    assert mechanism_names() == (TOPDOWN, *(name for name, m in MECHANISMS.items() if m.available()))


def test_a_stand_in_undone_leaves_the_entry_its_own_mechanism(monkeypatch):
    """A test's `monkeypatch.setitem(MECHANISMS, ...)` restores the built mechanism on undo: that is no override, so
    a later stand-in (or a patched module) is not shadowed by it."""
    from das.mechanisms import registry

    own = MECHANISMS["flat"]
    with monkeypatch.context() as m:
        m.setitem(registry.MECHANISMS, "flat", replace(own, summary="a stand-in"))
        assert MECHANISMS["flat"].summary == "a stand-in"
    assert MECHANISMS["flat"] is own
    monkeypatch.setattr(registry, "mechanism", lambda name: replace(own, summary="built again"))
    assert MECHANISMS["flat"].summary == "built again"  # the registry's own, not a leftover override


def test_a_new_mechanism_is_one_entry_the_command_line_the_comparison_and_a_release_take(monkeypatch, tmp_path):
    """docs/architecture.md's "a new mechanism": a toy entry (flat's module under another name) is offered by `das
    synth` and `das compare` and releases, and validates, under its own name."""
    from das.mechanisms import registry, synthesize

    monkeypatch.setitem(registry.ENTRIES, "toy", registry.Entry("flat", "a toy: flat under another name", "per block"))
    synth = build_parser()._subparsers._group_actions[0].choices["synth"]
    assert "toy" in next(a.choices for a in synth._actions if a.dest == "mechanism")
    assert "toy" in mechanism_names() and MECHANISMS["toy"].name == "toy"
    from das.frame.rundir import RunDir
    from das.validate import validate_run

    out = synthesize("tiny", "toy", tmp_path / "toy", seed=1)
    assert RunDir(out).read().mechanism.name == "toy"
    assert validate_run(out).ok


@pytest.mark.parametrize("name", MECHANISMS)
def test_a_registered_mechanism_has_its_name_a_summary_a_geography_and_a_runner(name):
    mechanism = MECHANISMS[name]
    assert isinstance(mechanism, Mechanism) and mechanism.name == name
    assert mechanism.summary.strip() and mechanism.geography.strip()
    parameters = list(inspect.signature(mechanism.run).parameters.values())
    assert parameters and parameters[0].annotation in (SynthesisInput, "SynthesisInput")
    assert all(p.default is not p.empty for p in parameters[1:])  # runnable from the input alone
    assert isinstance(mechanism.available(), bool)


@pytest.mark.parametrize("name", MECHANISMS)
def test_an_optional_extra_is_a_declared_pip_extra_and_named_where_the_user_reads(name):
    extra = MECHANISMS[name].extra
    if extra is None:
        assert MECHANISMS[name].available()
        return
    assert extra in EXTRAS
    synth = build_parser()._subparsers._group_actions[0].choices["synth"]
    help_text = next(a.help for a in synth._actions if a.dest == "mechanism")
    assert name in help_text and f"das[{extra}]" in help_text


def test_docs_list_every_mechanism_with_its_extra():
    table = _docs_table()
    assert tuple(table) == tuple(MECHANISMS)
    for name, extra_column in table.items():

        extra = MECHANISMS[name].extra
        assert extra_column == (f"`das[{extra}]`" if extra else ""), name


@pytest.mark.parametrize("name", list(MECHANISMS))
def test_every_published_detail_is_declared_with_what_it_is_derived_from(name):
    """Nothing reaches the public manifest's mechanism.details but a declared entry of a declared source."""
    declared = MECHANISMS[name].details
    assert declared, f"{name} declares no details"
    for key, derivation in declared.items():
        source, _, what = derivation.partition(": ")
        assert source in DETAIL_SOURCES and what, (name, key, derivation)


def test_an_undeclared_detail_is_refused_before_anything_is_written(tmp_path, monkeypatch):
    from das.mechanisms import registry
    from das.mechanisms.base import MechanismError, Synthesis
    from das.mechanisms.release import synthesize

    flat = MECHANISMS["flat"]

    def leaky(data):
        out = flat.run(data)
        return Synthesis(out.histograms, {**out.details, "nonzero_cells": int(data.histograms.nnz)})

    monkeypatch.setitem(registry.MECHANISMS, "flat", replace(flat, run=leaky))
    with pytest.raises(MechanismError, match=r"\['nonzero_cells'\] are not declared"):
        synthesize("tiny", "flat", tmp_path / "out", seed=1)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("name", MECHANISMS)
def test_a_mechanisms_plan_gives_every_parameter_detail_from_public_things_only(name):
    """`plan` (what das synth and das validate both call) gives exactly the details declared "parameter", so the
    validator compares every one of them; it needs no data, and planning twice charges the same."""
    from fractions import Fraction

    from das.mechanisms.base import Ledger, Public
    from das.model.schema import load_schema

    mechanism = MECHANISMS[name]
    public = Public(Fraction(293764, 114921), Fraction(1, 10**10), load_schema("pl94_persons"), "tract")
    first, second = Ledger(public.budget), Ledger(public.budget)
    plan = mechanism.plan(public, first)
    assert set(plan.details) == {k for k, v in mechanism.details.items() if v.startswith("parameter:")}
    mechanism.plan(public, second)
    assert first.entries == second.entries and first.entries
