"""The house rules of docs/architecture.md, checked on the code: layers import only from above,
no import cycles, no private names across packages, no function over 80 lines, no function with more
than four positional parameters (the rest keyword-only)."""

import ast

import pytest
from conftest import ROOT

LAYERS = [  # docs/architecture.md, top to bottom; a module imports only from its own layer or above
    {"das", "das.specs", "das.attack", "das.io", "das.privacy", "das.research", "das.topdown", "das.core", "das.model",
     "das.frame", "das.driver",  # the packages' (empty) __init__
     "das.core.errors", "das.core.arguments",  # das's errors and the rules of its arguments (issue 36)
     "das.core.progress", "das.core.atomic", "das.core.memory", "das.core.options", "das.core.registry",
     "das.core.paths",
     "das.model.specfile", "das.model.schema", "das.model.levels", "das.model.geography", "das.model.spine",
     "das.model.rules",
     "das.model.histogram"},
    {"das.privacy.certificate", "das.privacy.strategy", "das.privacy.accounting", "das.privacy.sampler",
     "das.privacy.randomness", "das.privacy.exponential", "das.privacy.guarantee"},
    {"das.io.microdata", "das.io.areas", "das.io.nmf", "das.io.mdf", "das.io.tables", "das.io.pl94171",
     "das.io.validation", "das.io.problems", "das.io.tabular",
     "das.io.parts", "das.io.outputs", "das.io.invariants", "das.io.table_names", "das.io.partitions",
     "das.frame.pinned", "das.frame.rundir", "das.frame.manifest", "das.frame.records", "das.frame.outdir", "das.frame.signing"},
    {"das.topdown.measure", "das.topdown.problem", "das.topdown.l2", "das.topdown.solve", "das.topdown.engine",
     "das.topdown.batch", "das.topdown.matrices", "das.topdown.solvers", "das.topdown.optimality", "das.topdown.rounding",
     "das.frame.checkpoint", "das.core.executors", "das.core.distributed",
     "das.mechanisms.base", "das.mechanisms.domain", "das.mechanisms.flat", "das.mechanisms.stability",
     "das.mechanisms.mwem", "das.mechanisms.privbayes", "das.mechanisms.privsyn", "das.mechanisms.pgm",
     "das.mechanisms.mst", "das.mechanisms.aim", "das.mechanisms.registry", "das.mechanisms.rounding",
     "das.mechanisms.rap", "das.attack.rap", "das.attack.workload"},  # the relaxed projection: attack and mechanism
    {"das.driver.runspec", "das.driver.preflight", "das.driver.inputs", "das.driver.pipeline", "das.driver.partitioned",
     "das.driver.states",
     "das.driver.admission", "das.driver.run", "das.driver.postprocess",
     "das.driver.newspec", "das.frame.bundle", "das.frame.published", "das.frame.lifecycle", "das.frame.publish",
     "das.frame.summary", "das.io.summary_files",
     "das.validate", "das.validate.report", "das.validate.registry", "das.validate.reading",
     "das.validate.shards", "das.validate.release", "das.validate.files", "das.validate.certificate",
     "das.validate.optimality", "das.validate.epnum", "das.validate.records", "das.validate.nmf", "das.validate.spine",
     "das.validate.block_invariants",
     "das.validate.tables", "das.validate.invariants", "das.validate.rules", "das.validate.inputs",
     "das.validate.driver", "das.validate.signature", "das.validate.manifest"},
    {"das.research.estimators", "das.research.evaluate", "das.research.metrics", "das.research.replicate",
     "das.research.report", "das.research.compare", "das.research.compare_report", "das.research.resources",
     "das.research.series", "das.research.areas", "das.research.composition", "das.research.districts",
     "das.research.offspine", "das.research.figures", "das.research.offspine_report",
     "das.research.release_child", "das.research.estimates", "das.research.scored",
     "das.attack.audit", "das.attack.baselines", "das.attack.data", "das.attack.ip",
     "das.attack.rank", "das.attack.scenario", "das.attack.command",
     "das.attack.privacy", "das.attack.release_audit", "das.attack.detection", "das.attack.neighbours",
     "das.attack.features", "das.attack.distinguish",
     "das.io.scale_inputs", "das.mechanisms", "das.mechanisms.release"},
    {"das.api", "das.api.inputs", "das.api.release", "das.api.budget", "das.api.studies", "das.api.init",
     "das.api.synthesizer", "das.api.nmf", "das.api.postprocessing",
     "das.cli", "das.cli.args", "das.cli.release", "das.cli.research", "das.cli.attack",
     "das.cli.synth", "das.cli.__main__", "das.__main__"},
]


def _modules() -> dict[str, ast.Module]:
    found = {}
    for path in sorted((ROOT / "das").rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = ast.parse(path.read_text())
    return found


MODULES = _modules()


# The package's face: das/__init__.py imports the API (das.api, the top layer) lazily, when one of its names is
# first used (`das.run(...)`), so `import das` stays light; this one edge goes up the layers.
LAZY_FACE = ("das", "das.api")


def _imports(tree: ast.Module) -> list[tuple[str, list[str]]]:
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("das"):
            names = [a.name for a in node.names]
            out.append((node.module, names))
            out += [(f"{node.module}.{n}", []) for n in names if f"{node.module}.{n}" in MODULES]
        elif isinstance(node, ast.Import):
            out += [(a.name, []) for a in node.names if a.name.startswith("das")]
    return out


def _layer(module: str) -> int:
    for i, layer in enumerate(LAYERS):
        if module in layer:
            return i
    pytest.fail(f"{module} is in no layer of docs/architecture.md")


def test_every_module_is_in_a_layer():
    for module in MODULES:
        _layer(module)


def test_modules_import_only_from_their_layer_or_above():
    wrong = [f"{m} imports {target}" for m, tree in MODULES.items() for target, _ in _imports(tree)
             if target in MODULES and _layer(target) > _layer(m) and (m, target) != LAZY_FACE]
    assert wrong == []


def test_there_is_no_import_cycle():
    graph = {m: {t for t, _ in _imports(tree) if t in MODULES and t != m and (m, t) != LAZY_FACE}
             for m, tree in MODULES.items()}
    state: dict[str, int] = {}

    def visit(m, path):
        state[m] = 1
        for t in graph[m]:
            if state.get(t) == 1:
                pytest.fail("import cycle: " + " -> ".join(path[path.index(t):] + [t]))
            if t not in state:
                visit(t, path + [t])
        state[m] = 2

    for m in graph:
        if m not in state:
            visit(m, [m])


def test_no_private_name_is_imported_across_packages():
    def package(m):
        return m.rsplit(".", 1)[0] if m.count(".") >= 2 else "das"

    wrong = [f"{m} imports {target}.{n}" for m, tree in MODULES.items() for target, names in _imports(tree)
             for n in names if n.startswith("_") and package(target) != package(m)]
    assert wrong == []


MAX_LINES = 80
MAX_POSITIONAL = 4

# Over 80 lines: none pending now (an allow-list, should a split ever have to wait for other work).
LONG_PENDING: set[str] = set()

# More than four positional parameters: none pending now; a function that needs more takes them keyword-only.
POSITIONAL_PENDING: set[str] = set()


def _functions(node: ast.AST, prefix: str):
    """(qualified name, node) of every function under `node`, methods as module.Class.method."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
            yield f"{prefix}.{child.name}", child
            yield from _functions(child, f"{prefix}.{child.name}")
        elif isinstance(child, ast.ClassDef):
            yield from _functions(child, f"{prefix}.{child.name}")
        else:
            yield from _functions(child, prefix)


FUNCTIONS = {name: node for m, tree in MODULES.items() for name, node in _functions(tree, m)}


def _lines(node) -> int:
    return node.end_lineno - node.lineno + 1


def _positional(node) -> int:
    names = [a.arg for a in node.args.posonlyargs + node.args.args]
    return len(names) - bool(names and names[0] in ("self", "cls"))


def test_no_function_is_over_80_lines():
    wrong = [f"{name}: {_lines(node)} lines" for name, node in FUNCTIONS.items()
             if _lines(node) > MAX_LINES and name not in LONG_PENDING]
    assert wrong == [], "split these into functions named after what each part does"



def test_no_function_takes_more_than_four_positional_parameters():
    wrong = [f"{name}: {_positional(node)} positional" for name, node in FUNCTIONS.items()
             if _positional(node) > MAX_POSITIONAL and name not in POSITIONAL_PENDING]
    assert wrong == [], "take the parameters past the obvious ones after `*` (keyword-only)"


def test_the_pending_lists_name_only_functions_still_pending():
    """A split or keyword-only function leaves its allow-list: a stale entry would hide a new offender."""
    stale = sorted({n for n in LONG_PENDING if n not in FUNCTIONS or _lines(FUNCTIONS[n]) <= MAX_LINES}
                   | {n for n in POSITIONAL_PENDING if n not in FUNCTIONS or _positional(FUNCTIONS[n]) <= MAX_POSITIONAL})
    assert stale == [], "remove these from LONG_PENDING / POSITIONAL_PENDING"


def test_the_rules_see_methods_nested_functions_and_keyword_only_parameters():
    """The walk and the counts on a known source, so the rules above cannot pass by not looking."""
    source = ("class C:\n    def m(self, a, b, c, d, e):\n        def inner(x, /, y, *, z):\n            pass\n"
              "        return inner\n\n\ndef f(a, b, c, d, *rest, e=1, f=2):\n    '''doc'''\n    return a\n")
    found = dict(_functions(ast.parse(source), "mod"))
    assert sorted(found) == ["mod.C.m", "mod.C.m.inner", "mod.f"]
    assert [_positional(found[n]) for n in ("mod.C.m", "mod.C.m.inner", "mod.f")] == [5, 2, 4]
    assert [_lines(found[n]) for n in ("mod.C.m", "mod.C.m.inner", "mod.f")] == [4, 2, 3]
    assert len(FUNCTIONS) > 500 and "das.io.nmf.LevelWriter.write_answers" in FUNCTIONS



def test_every_package_is_listed_for_installation():
    """pyproject.toml lists its packages explicitly: a package missing there installs from a checkout
    (editable) but not from a wheel, so CI would not see it."""
    import tomllib

    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {".".join(p.relative_to(ROOT).parent.parts) for p in (ROOT / "das").rglob("__init__.py")}
    assert found - listed == set()


def test_no_module_is_loose_in_the_package():
    """Every module sits in the package of its layer (docs/architecture.md's layout): das/ itself holds only the
    package's face and `python -m das`."""
    loose = sorted(p.name for p in (ROOT / "das").glob("*.py"))
    assert loose == ["__init__.py", "__main__.py"]


MAX_MODULE_LINES = 500
# Over 500 lines, to be split by concept: none pending now (an allow-list, should a split ever have to wait).
LONG_MODULES_PENDING: set[str] = set()


def _module_lines() -> dict[str, int]:
    lines = {}
    for path in (ROOT / "das").rglob("*.py"):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        lines[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = len(path.read_text().splitlines())
    return lines


def test_no_module_is_over_500_lines():
    wrong = [f"{m}: {n} lines" for m, n in _module_lines().items()
             if n > MAX_MODULE_LINES and m not in LONG_MODULES_PENDING]
    assert wrong == [], "split it by concept, one module each"
    stale = sorted(m for m in LONG_MODULES_PENDING if _module_lines().get(m, 0) <= MAX_MODULE_LINES)
    assert stale == [], "remove these from LONG_MODULES_PENDING"


# A level's name is spelled once, in das.model.levels's table; code names it by that table's constants, so a new
# level is one edit there. PL 94-171's geographic header has columns of the same names (its own format's fields).
LEVEL_NAMES = {"nation", "state", "county", "tract", "block_group", "block"}
LEVEL_TABLE = "das.model.levels"
OTHER_FORMATS = {"das.io.pl94171": {"tract", "block"}}


def _prose(tree: ast.Module) -> set[int]:
    """Docstrings and the literal text of f-strings (what they say, not the names code looks up)."""
    kinds = (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    docs = {id(node.body[0].value) for node in ast.walk(tree) if isinstance(node, kinds) and node.body
            and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    return docs | {id(part) for node in ast.walk(tree) if isinstance(node, ast.JoinedStr) for part in node.values
                   if isinstance(part, ast.Constant)}


def test_level_names_are_spelled_only_in_the_geography_table():
    spelled = []
    for module, tree in MODULES.items():
        if module == LEVEL_TABLE:
            continue
        prose, allowed = _prose(tree), OTHER_FORMATS.get(module, set())
        spelled += [f"{module}:{node.lineno} {node.value!r}" for node in ast.walk(tree)
                    if isinstance(node, ast.Constant) and node.value in LEVEL_NAMES - allowed
                    and id(node) not in prose]
    assert spelled == [], "name the level by das.model.levels's constant (NATION, STATE, ..., BLOCK)"


def test_the_level_table_spells_each_name_once():
    from das.model import levels

    constants = (levels.NATION, levels.STATE, levels.COUNTY, levels.TRACT, levels.BLOCK_GROUP, levels.BLOCK)
    assert set(constants) == LEVEL_NAMES == set(levels.LEVEL_DIGITS) and constants == levels.DEFAULT_LEVELS
