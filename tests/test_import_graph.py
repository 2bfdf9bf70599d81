"""The package's modules import each other without a cycle (function-level imports count too), and only
from their own layer or the layers below (docs/architecture.md); an import inside a function says why.

An import cycle makes what a module sees depend on which module was imported
first; the registry in particular must know nothing of the types that register into it.
"""
from __future__ import annotations

import ast
import pathlib
import re

PACKAGE = pathlib.Path(__file__).resolve().parent.parent / "batchloaders"


def modules() -> dict[str, pathlib.Path]:
    """Dotted module name -> file, for every module of the package (a package by its __init__.py)."""
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def imports(path: pathlib.Path, known: dict) -> set[str]:
    """The package's modules that ``path`` imports anywhere in it (a parent package is not counted:
    Python imports it first, and an import of a package's name from within it is not a cycle)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name in known)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module in known:
            submodules = {f"{node.module}.{alias.name}" for alias in node.names} & set(known)
            found.update(submodules)
            if len(submodules) < len(node.names):  # some names are the module's own
                found.add(node.module)
    return found


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module, or a module importing itself (Tarjan)."""
    index, low, stack, on_stack, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1 or v in graph[v]:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_package_has_no_import_cycle():
    known = modules()
    graph = {name: imports(path, known) - {name.rsplit(".", 1)[0] if "." in name else ""} for name, path in
             known.items()}
    assert "batchloaders.transform.registry" in graph and graph["batchloaders.transform.registry"] == set()
    assert cycles(graph) == []


def test_the_cycle_finder_finds_a_cycle():
    """The check above would pass vacuously if the finder could not see one."""
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"a"}}) == [["a"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


# Lowest first. A module belongs to the layer of its longest matching prefix; the typed config (core/: the
# model, its limits and dtype values) is the vocabulary every layer speaks, so it sits at the bottom.
LAYERS = [
    ("foundation", ["batchloaders.errors", "batchloaders.core.model", "batchloaders.core.limits",
                    "batchloaders.core.values"]),
    ("transform", ["batchloaders.transform"]),
    ("config", ["batchloaders.config", "batchloaders.schemas"]),
    ("read", ["batchloaders.read"]),
    # Preparing datasets (manifests, indexes, verify's checks, resharding, Beam runs) and its Python API: reads
    # data and writes manifests; the commands print what it returns and raises.
    ("prepare", ["batchloaders.prepare"]),
    ("loaders", ["batchloaders.loaders"]),
    ("regroup", ["batchloaders.regroup"]),
    ("runtime", ["batchloaders.runtime"]),
    ("compile", ["batchloaders.input_fn"]),
    ("commands", ["batchloaders", "batchloaders.cli", "batchloaders.demo", "batchloaders.demo_data",
                  "batchloaders.__main__"]),
]


def layer_of(module: str) -> int:
    best = max(((len(prefix), index) for index, (_, prefixes) in enumerate(LAYERS) for prefix in prefixes
                if module == prefix or module.startswith(prefix + ".")), default=None)
    assert best is not None, f"{module} is in no layer: add its folder to LAYERS"
    return best[1]


def upward_imports(known: dict) -> list[str]:
    out = []
    for name, path in sorted(known.items()):
        for target in sorted(imports(path, known)):
            if layer_of(target) > layer_of(name):
                out.append(f"{name} ({LAYERS[layer_of(name)][0]}) imports {target} ({LAYERS[layer_of(target)][0]})")
    return out


def test_no_module_imports_a_layer_above_its_own():
    assert upward_imports(modules()) == []


def test_the_layer_check_sees_an_upward_import(tmp_path):
    """A read/ module importing a regroup/ module is named (the check is not vacuous)."""
    (tmp_path / "sources.py").write_text("from batchloaders.regroup import bucketing\n")
    (tmp_path / "bucketing.py").write_text("")
    (tmp_path / "__init__.py").write_text("")
    known = {"batchloaders.read.sources": tmp_path / "sources.py", "batchloaders.regroup": tmp_path / "__init__.py",
             "batchloaders.regroup.bucketing": tmp_path / "bucketing.py"}
    assert upward_imports(known) == ["batchloaders.read.sources (read) imports batchloaders.regroup.bucketing (regroup)"]
    assert [LAYERS[layer_of(m)][0] for m in ("batchloaders.core.model", "batchloaders.config.schema",
                                             "batchloaders.cli.bench", "batchloaders")] == [
        "foundation", "config", "commands", "commands"]


# A function-level import of the package's own modules is kept only for a reason named on its line (it imports
# TensorFlow or jsonschema where the module is used without them, or must come after something); one that
# merely dodged a cycle hides the cycle from the tests above.
DEFERRED = re.compile(r"#\s*deferred:\s*\S")


def _imports_package(node: ast.AST) -> bool:
    if isinstance(node, ast.Import):
        return any(alias.name == "batchloaders" or alias.name.startswith("batchloaders.") for alias in node.names)
    return isinstance(node, ast.ImportFrom) and (node.level > 0 or node.module == "batchloaders" or
                                                 (node.module or "").startswith("batchloaders."))


def unmarked_deferred_imports(source: str, name: str) -> list[str]:
    """The "name:line" of each import of a package module inside a function without "# deferred: <reason>" on
    its (first) line."""
    lines = source.splitlines()
    found = set()
    for function in ast.walk(ast.parse(source, name)):
        if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            found.update(node.lineno for node in ast.walk(function)
                         if _imports_package(node) and not DEFERRED.search(lines[node.lineno - 1]))
    return [f"{name}:{line}" for line in sorted(found)]


def test_every_function_level_import_of_the_package_says_why_it_is_deferred():
    unmarked = [entry for path in sorted(PACKAGE.rglob("*.py"))
                for entry in unmarked_deferred_imports(path.read_text(), str(path.relative_to(PACKAGE.parent)))]
    assert unmarked == []


def test_the_deferred_check_sees_an_unmarked_import():
    """Unmarked, marked without a reason, relative and nested imports are named; marked ones and module-level
    ones are not (the check is not vacuous)."""
    source = ("from batchloaders.errors import Problem\n"
              "def f():\n"
              "    from batchloaders.config import config\n"
              "    from batchloaders.input_fn import build_input_fn  # deferred: imports TensorFlow\n"
              "    import batchloaders.read.records  # deferred:\n"
              "    import json\n"
              "    def g():\n"
              "        from . import sibling\n"
              "    from batchloaders.runtime.service import (  # deferred: imports TensorFlow\n"
              "        start_worker)\n"
              "class C:\n"
              "    async def h(self):\n"
              "        import batchloaders\n")
    assert unmarked_deferred_imports(source, "made_up.py") == ["made_up.py:3", "made_up.py:5", "made_up.py:8",
                                                               "made_up.py:13"]
