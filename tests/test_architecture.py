"""The house rules of docs/architecture.md, checked on the code: layers import only from above,
no import cycles, no private names across packages, no function over seven parameters."""

import ast

import pytest
from conftest import ROOT

LAYERS = [  # docs/architecture.md, top to bottom; a module imports only from its own layer or above
    {"das", "das.schema", "das.geography", "das.rules", "das.atomic", "das.histogram", "das.specs",
     "das.attack", "das.io", "das.privacy", "das.research", "das.topdown"},  # the packages' (empty) __init__
    {"das.privacy.certificate", "das.privacy.strategy", "das.privacy.accounting", "das.privacy.sampler",
     "das.privacy.randomness",
     "das.privacy.exponential"},
    {"das.io.microdata", "das.io.nmf", "das.io.mdf", "das.io.tables", "das.io.pl94171", "das.io.validation", "das.io.parts",
     "das.io.outputs",
     "das.rundir", "das.partitions"},
    {"das.measure", "das.topdown.problem", "das.topdown.l2", "das.topdown.solve", "das.topdown.engine",
     "das.checkpoint", "das.executors", "das.distributed"},
    {"das.runspec", "das.preflight", "das.pipeline", "das.partitioned", "das.bundle", "das.frame", "das.run", "das.validate",
     "das.validate.report", "das.validate.registry", "das.validate.reading", "das.validate.release", "das.validate.files",
     "das.validate.certificate", "das.validate.epnum", "das.validate.records", "das.validate.nmf", "das.validate.tables",
     "das.validate.invariants", "das.validate.rules", "das.validate.inputs", "das.validate.driver"},
    {"das.research.estimators", "das.research.evaluate", "das.research.metrics", "das.research.replicate",
     "das.research.report", "das.research.compare", "das.research.compare_report", "das.research.resources",
     "das.attack.audit", "das.attack.baselines", "das.attack.data", "das.attack.ip",
     "das.attack.rank", "das.attack.rap", "das.attack.scenario", "das.attack.workload", "das.attack.privacy",
     "das.scale_inputs", "das.mechanisms", "das.mechanisms.base", "das.mechanisms.domain", "das.mechanisms.flat",
     "das.mechanisms.stability", "das.mechanisms.mwem", "das.mechanisms.privbayes", "das.mechanisms.privsyn",
     "das.mechanisms.pgm", "das.mechanisms.median", "das.mechanisms.registry", "das.mechanisms.release"},
    {"das.cli", "das.cli.release", "das.cli.research", "das.cli.attack", "das.cli.synth", "das.cli.__main__"},
]


def _modules() -> dict[str, ast.Module]:
    found = {}
    for path in sorted((ROOT / "das").rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = ast.parse(path.read_text())
    return found


MODULES = _modules()


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
             if target in MODULES and _layer(target) > _layer(m)]
    assert wrong == []


def test_there_is_no_import_cycle():
    graph = {m: {t for t, _ in _imports(tree) if t in MODULES and t != m} for m, tree in MODULES.items()}
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


def test_no_function_takes_more_than_seven_parameters():
    wrong = []
    for m, tree in MODULES.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                a = node.args
                n = len(a.posonlyargs) + len(a.args) + len(a.kwonlyargs) + (a.vararg is not None) + (a.kwarg is not None)
                n -= bool(a.args and a.args[0].arg in ("self", "cls"))
                if n > 7:
                    wrong.append(f"{m}.{node.name}: {n}")
    assert wrong == []
