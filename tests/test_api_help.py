"""Help that answers (issue 36): `help(das.X)`, `das.X?` and `inspect.getdoc` show each exported name's own
docstring, which names every parameter, says what it returns and raises, and shows an example; docs/api.md
documents each with the signature the code has."""

import importlib
import inspect
import pydoc
import re

import pytest
from conftest import ROOT

import das

SECTIONS = ("Args:", "Returns:", "Raises:", "Example:")
CLASSES = ("AttackConfig", "AttackResult", "Estimate", "Release", "Study")
FUNCTIONS = tuple(sorted(set(das.API) - set(CLASSES)))


def _parameters(fn) -> list[str]:
    return [p.name for p in inspect.signature(fn).parameters.values() if p.name not in ("self", "cls")]


def _section(doc: str, title: str) -> str:
    """The lines of one section of a docstring (Google style: a title line, then indented lines)."""
    found = re.search(rf"^{re.escape(title)}\n((?:[ \t]+.*\n?|\n)+)", doc, flags=re.MULTILINE)
    return found.group(1) if found else ""


def _documented(section: str) -> set[str]:
    """The parameter names an Args section documents: `name:` or `name, other:` at the start of an entry."""
    names = set()
    for entry in re.findall(r"^ {4}(\*{0,2}[\w, *]+):", section, flags=re.MULTILINE):
        names |= {n.strip().lstrip("*") for n in entry.split(",")}
    return names


@pytest.mark.parametrize("name", das.API)
def test_each_exported_name_is_the_apis_own_object_with_its_own_help(name):
    exported = getattr(das, name)
    assert exported is getattr(das.api, name)
    assert inspect.getdoc(exported) == inspect.getdoc(getattr(importlib.import_module("das.api"), name))
    kind = "class" if inspect.isclass(exported) else "function"
    assert pydoc.render_doc(exported).splitlines()[0].startswith(f"Python Library Documentation: {kind} {name}")


def test_the_names_that_are_also_packages_stay_functions_after_the_packages_are_imported():
    for name in ("validate", "attack"):
        module = importlib.import_module(f"das.{name}")  # what the commands run: imported as ever
        assert inspect.ismodule(module) and inspect.isfunction(getattr(das, name)), name
    for name in ("run", "validate", "attack", "publish"):
        assert f"function {name} in module das.api" in pydoc.render_doc(getattr(das, name)).splitlines()[0]
    from das.validate import validate_run  # the package's names as ever

    assert callable(validate_run)


def test_no_module_of_das_is_named_as_an_api_function_but_the_two_packages():
    """`das.run` and `das.publish` are functions only: the work behind them lives in das.driver.run and
    das.frame.publish, so nothing needs the package's module-binding guard but for das.validate and das.attack."""
    clash = sorted(name for name in das.API if (ROOT / "das" / f"{name}.py").exists() or (ROOT / "das" / name).is_dir())
    assert clash == ["attack", "validate"]


@pytest.mark.parametrize("name", FUNCTIONS)
def test_each_function_documents_every_parameter_what_it_returns_raises_and_an_example(name):
    fn = getattr(das, name)
    doc = inspect.getdoc(fn)
    missing = [title for title in SECTIONS if title not in doc.splitlines()]
    assert missing == [], f"das.{name}: no {missing} section"
    assert _documented(_section(doc, "Args:")) >= set(_parameters(fn)), f"das.{name}: undocumented parameters"
    assert ">>>" in _section(doc, "Example:")


@pytest.mark.parametrize("name", CLASSES)
def test_each_class_and_its_public_members_have_their_own_documentation(name):
    cls = getattr(das, name)
    assert inspect.getdoc(cls) and "Example:" in inspect.getdoc(cls).splitlines()
    for member, value in vars(cls).items():
        if member.startswith("_") or member in getattr(cls, "__dataclass_fields__", {}):
            continue
        target = getattr(value, "fget", None) or getattr(value, "func", None) or getattr(value, "__func__", value)
        if not callable(target):
            continue
        doc = inspect.getdoc(target) or ""
        assert doc.strip(), f"{name}.{member}: no docstring"
        if not isinstance(value, property) and not hasattr(value, "func") and _parameters(target):
            assert _documented(_section(doc, "Args:")) >= set(_parameters(target)), f"{name}.{member}"


def test_no_docstring_points_to_an_internal_name():
    internal = {n for module in ("das.api", "das.api.release", "das.api.studies", "das.api.budget", "das.api.inputs")
                for n in vars(importlib.import_module(module)) if re.fullmatch(r"_?[A-Z][A-Z0-9_]{2,}", n)}
    for name in das.API:
        doc = inspect.getdoc(getattr(das, name))
        assert not {w for w in re.findall(r"\b_?[A-Z][A-Z0-9_]{2,}\b", doc)} & internal, name
        assert "WORKERS_NOTE" not in doc


def _headings() -> dict[str, str]:
    """docs/api.md's headings of the form ### `das.NAME(...)`: name -> the text between the parentheses."""
    text = (ROOT / "docs" / "api.md").read_text()
    return {m.group(1): m.group(2) for m in re.finditer(r"^###+ .*?`das\.(\w+)\((.*?)\)(?: -> [^`]*)?`", text,
                                                          flags=re.MULTILINE)}


def _heading_names(arguments: str) -> list[str]:
    names = []
    for part in re.split(r",(?![^(]*\))", arguments):
        part = part.strip()
        if part and part not in ("*", "/"):
            names.append(part.split("=", 1)[0].strip().lstrip("*"))
    return names


@pytest.mark.parametrize("name", FUNCTIONS)
def test_docs_api_md_gives_each_function_the_signature_the_code_has(name):
    headings = _headings()
    assert name in headings, f"docs/api.md has no heading for das.{name}"
    assert _heading_names(headings[name]) == _parameters(getattr(das, name))


@pytest.mark.parametrize("name", CLASSES)
def test_docs_api_md_describes_each_class(name):
    assert re.search(rf"^###+ `das\.{name}`", (ROOT / "docs" / "api.md").read_text(), flags=re.MULTILINE)


@pytest.mark.parametrize("module", das.MODULES)
def test_each_namespace_documents_its_functions_as_the_functions_are(module):
    """das.nmf.read: each function of an API namespace has the sections every function has, and a docs/api.md heading
    with the signature the code has."""
    namespace = getattr(das, module)
    assert inspect.ismodule(namespace) and namespace is getattr(das.api, module) and namespace.__all__
    text = (ROOT / "docs" / "api.md").read_text()
    for name in namespace.__all__:
        fn = getattr(namespace, name)
        doc = inspect.getdoc(fn)
        assert [title for title in SECTIONS if title not in doc.splitlines()] == [], f"das.{module}.{name}"
        assert _documented(_section(doc, "Args:")) >= set(_parameters(fn)) and ">>>" in _section(doc, "Example:")
        heading = re.search(rf"^###+ `das\.{module}\.{name}\((.*?)\)(?: -> [^`]*)?`", text, flags=re.MULTILINE)
        assert heading and _heading_names(heading.group(1)) == _parameters(fn), f"das.{module}.{name}"
