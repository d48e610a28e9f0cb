"""The package's import structure: no cycles between posenc's modules (function-local imports included, so
that none hides one), and the table/report side imports no torch."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import posenc

ROOT = Path(posenc.__file__).parent


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(ROOT.rglob("*.py")) if "conf" not in p.relative_to(ROOT).parts}


def imports_of(path: Path) -> set[str]:
    """The posenc modules ``path`` imports anywhere in its body (top level or inside functions)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("posenc")}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("posenc"):
            for alias in node.names:  # `from posenc import files`: the module posenc.files
                sub = f"{node.module}.{alias.name}"
                found.add(sub if sub in MODULES else node.module)
    return {m for m in found if m in MODULES and m != "posenc"}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """A cycle in ``graph`` as a list of nodes (first == last), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_find_cycle_finds_one_and_only_one():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_no_import_cycles_between_posenc_modules():
    graph = {name: imports_of(path) - {name} for name, path in MODULES.items()}
    # A package's __init__ re-exporting its submodules is not a cycle with them: a submodule importing
    # `posenc.encoders.base` does not need `posenc.encoders` first.
    for name in graph:
        graph[name] = {m for m in graph[name] if not (MODULES[m].name == "__init__.py" and name.startswith(m + "."))}
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph) or [])


ANALYSIS = sorted(name for name in MODULES if name == "posenc.analysis" or name.startswith("posenc.analysis."))
# Outside the package, what runs without a model too: the CLI's entry (it imports torch lazily, per command),
# the registry listing and the task facts the results side reads.
TORCH_FREE_OUTSIDE = ["posenc.cli.app", "posenc.registry", "posenc.task_facts", "posenc.files"]


def test_the_results_package_holds_every_module_it_should():
    assert len(ANALYSIS) >= 15 and "posenc.analysis.report" in ANALYSIS and "posenc.analysis.store" in ANALYSIS


@pytest.mark.parametrize("module", ANALYSIS + TORCH_FREE_OUTSIDE)
def test_tables_and_reports_import_no_torch(module):
    code = f"import {module}, sys; assert 'torch' not in sys.modules, 'torch imported'"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


MAX_FUNCTION_LINES = 80  # issue 26: a function a newcomer can hold in view, docstring included


@pytest.mark.parametrize("name", sorted(MODULES))
def test_no_function_is_longer_than_a_screenful(name):
    long = [
        f"{node.name} ({node.end_lineno - node.lineno + 1} lines)"
        for node in ast.walk(ast.parse(MODULES[name].read_text()))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES
    ]
    assert not long, f"{name}: {', '.join(long)}"


# The layers, lowest first (docs/architecture.md): a module may import its own layer and the ones below, never
# one above. analysis is the results side: torch-free by construction because nothing below it imports torch
# (test_tables_and_reports_import_no_torch checks the outcome too).
LAYERS = {
    "base": [
        "posenc.errors",
        "posenc.options",
        "posenc.files",
        "posenc.progress",
        "posenc.task_facts",
        "posenc.plugins",
        "posenc.registry",
    ],
    "analysis": ["posenc.analysis"],
    "formulas": ["posenc.functional", "posenc.encoders", "posenc.tasks"],
    "nn": ["posenc.nn"],
    "running": ["posenc.running", "posenc.conformance", "posenc.testing"],
    "cli": ["posenc.cli", "posenc.__main__"],
}
RANK = {prefix: i for i, prefixes in enumerate(LAYERS.values()) for prefix in prefixes}


def layer_of(module: str) -> int | None:
    """The rank of ``module``'s layer (the longest prefix in :data:`LAYERS`); None for the package itself."""
    found = [prefix for prefix in RANK if module == prefix or module.startswith(prefix + ".")]
    return RANK[max(found, key=len)] if found else None


def test_every_module_has_a_layer():
    assert [name for name in MODULES if name != "posenc" and layer_of(name) is None] == []


@pytest.mark.parametrize("name", sorted(n for n in MODULES if n != "posenc"))
def test_modules_import_only_their_layer_and_below(name):
    above = sorted(m for m in imports_of(MODULES[name]) if layer_of(m) > layer_of(name))
    assert not above, f"{name} imports from a layer above it: {', '.join(above)}"


def test_layer_check_catches_an_upward_import():
    assert layer_of("posenc.analysis.store") < layer_of("posenc.running.train")  # so analysis -> running fails
    assert layer_of("posenc.nn.model") < layer_of("posenc.cli.app")
