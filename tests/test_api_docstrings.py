"""Every public callable has a Google-style docstring with the sections its code calls for, and the Python API
page (docs/api.md) shows every public name.

Public: what ``batchloaders`` exports (``__all__``, the names its ``__getattr__`` loads on first use included), the
extension points and the functions the docs show users calling. A class counts with its public methods and
properties. The docstrings are parsed by griffe, the parser the API page's mkdocstrings uses, without importing
the package (no TensorFlow). What a docstring needs:

* ``Args:`` naming every parameter (``self``/``cls`` aside) when the callable takes any, and no other name;
  a class's own ``__init__`` in the class docstring (or ``__init__``'s); a dataclass its fields as ``Attributes:``;
* ``Returns:`` when it returns a value (a return annotation other than None, or a ``return value`` in its body),
  ``Yields:`` when it yields;
* ``Raises:`` naming each BatchLoaderError class its body raises, or raises through the functions of its own
  module (and the methods of its own class) it calls, unless caught there;
* a first line saying what it is or does, and no griffe warning (what would fail the site's strict build).
"""
from __future__ import annotations

import ast
import functools
import logging
import pathlib
import re

import griffe
import pytest

import batchloaders

REPO = pathlib.Path(__file__).resolve().parents[1]

# Beyond the package's exports: the extension points and the functions the docs show users calling.
# (batchloaders.build_input_fn, checked as an export, is the one users call; input_fn.build_input_fn is what it calls.)
EXTENSION_POINTS = [
    "batchloaders.transform.registry.CheckContext",  # what a registered type's infer gets
    "batchloaders.runtime.numpy_iterator.NumpyIterator",  # what numpy_iterator returns
    "batchloaders.runtime.service.start_dispatcher",  # docs/scaling-out.md
    "batchloaders.runtime.service.start_worker",
    "batchloaders.runtime.service.bound_address",
    "batchloaders.cli.write_manifest.run",  # the preparation commands, called from Python
    "batchloaders.cli.write_index.run",
    "batchloaders.cli.verify.run",
    "batchloaders.cli.write_manifest.run_with",  # with a Beam runner
    "batchloaders.cli.write_manifest.Choices",
    "batchloaders.prepare.reshard.DestinationError",  # what batchloaders.reshard raises when DEST cannot be written
    "batchloaders.prepare.beam.BeamNotInstalled",
    "batchloaders.prepare.beam.BeamFailed",
    "batchloaders.input_fn.InputFn",
    "batchloaders.regroup.stage.Stage",
    "batchloaders.config.stage_rules.StageRules",  # the config half of a stage
    "batchloaders.loaders.registry.Loader",  # what a loader type implements
    "batchloaders.loaders.registry.register",
]



# As mkdocs.yml's mkdocstrings options parse them.
PARSE_OPTIONS = {"warn_missing_types": False, "returns_multiple_items": False}


@functools.lru_cache(maxsize=None)
def package():
    return griffe.load("batchloaders", search_paths=[str(REPO)], docstring_parser="google",
                       resolve_aliases=False)


def lazy_exports() -> dict[str, str]:
    """name -> where it is defined, of each name ``batchloaders.__getattr__`` imports on first use."""
    tree = ast.parse((REPO / "batchloaders" / "__init__.py").read_text())
    getattr_fn = next(node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == "__getattr__")
    return {alias.name: f"{node.module}.{alias.name}" for node in ast.walk(getattr_fn)
            if isinstance(node, ast.ImportFrom) for alias in node.names}


def public_paths() -> list[str]:
    """The full path of every public name's definition (an alias followed to what it names)."""
    lazy, pkg, paths = lazy_exports(), package(), []
    for name in batchloaders.__all__:
        if name == "__version__":
            continue
        if name in lazy:
            paths.append(lazy[name])
        else:
            member = pkg.members[name]
            paths.append(member.target_path if member.is_alias else member.path)
    return sorted(set(paths + EXTENSION_POINTS))


def lookup(path: str):
    obj = package()[path.removeprefix("batchloaders.")]
    return obj.final_target if obj.is_alias else obj


def error_classes() -> set[str]:
    """The names of BatchLoaderError and its subclasses (those of errors.py and transform/extend.py)."""
    names = {"BatchLoaderError"}
    classes = [c for module in ("errors", "transform.extend") for c in package()[module].classes.values()]
    while True:
        more = {c.name for c in classes if any(str(base) in names for base in c.bases)} - names
        if not more:
            return names
        names |= more


# ---- what a callable's code calls for ---------------------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def module_tree(filepath: str) -> ast.Module:
    return ast.parse(pathlib.Path(filepath).read_text())


def node_of(obj) -> ast.AST:
    """The ast node of a griffe function or class, found by its first line."""
    for node in ast.walk(module_tree(str(obj.filepath))):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == obj.name \
                and (node.lineno == obj.lineno or (node.decorator_list and node.decorator_list[0].lineno == obj.lineno)):
            return node
    raise LookupError(f"{obj.path}: no definition at line {obj.lineno}")


def own_nodes(fn: ast.AST):
    """The nodes of ``fn``'s body, not those of the functions and classes defined in it."""
    stack = list(ast.iter_child_nodes(fn))
    while stack:
        node = stack.pop()
        yield node
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            stack.extend(ast.iter_child_nodes(node))


def returns_value(fn: ast.FunctionDef) -> bool:
    annotation = fn.returns
    if annotation is not None:
        return not (isinstance(annotation, ast.Constant) and annotation.value in (None, "None")) \
            and ast.unparse(annotation) not in ("None", "NoReturn", "Iterator[None]")
    return any(isinstance(n, ast.Return) and n.value is not None
               and not (isinstance(n.value, ast.Constant) and n.value.value is None) for n in own_nodes(fn))


def yields(fn: ast.FunctionDef) -> bool:
    return any(isinstance(n, (ast.Yield, ast.YieldFrom)) for n in own_nodes(fn))


def _caught(handlers: list[ast.ExceptHandler]) -> set[str]:
    names = set()
    for handler in handlers:
        kinds = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
        names |= {ast.unparse(k).rsplit(".", 1)[-1] for k in kinds if k is not None}
        if handler.type is None:
            names.add("BaseException")
    return names


class Raised:
    """The BatchLoaderError classes a function raises, through the functions of its module and the methods of its
    class it calls (by name), leaving out those an enclosing ``except`` catches."""

    CATCH_ALL = {"BaseException", "Exception", "ValueError", "BatchLoaderError"}

    def __init__(self, tree: ast.Module, errors: set[str]):
        self.errors = errors
        self.functions = {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
        self.methods = {}
        for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
            for node in cls.body:
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    self.methods.setdefault(node.name, node)

    def of(self, fn: ast.AST, seen: frozenset = frozenset()) -> set[str]:
        found: set[str] = set()
        self._walk(fn.body, frozenset(), seen | {id(fn)}, found)
        return found

    def _walk(self, nodes, caught: frozenset, seen: frozenset, found: set) -> None:
        for node in nodes:
            if isinstance(node, ast.Try):
                inner = caught | _caught(node.handlers)
                self._walk(node.body, inner, seen, found)
                self._walk(node.handlers + node.orelse + node.finalbody, caught, seen, found)
                continue
            if isinstance(node, ast.Raise) and node.exc is not None:
                for name in self._raised_names(node.exc, seen):
                    self._add(name, caught, found)
            if isinstance(node, ast.Call):
                target = self._called(node.func)
                if target is not None and id(target) not in seen:
                    for name in self.of(target, seen):
                        self._add(name, caught, found)
            self._walk(list(ast.iter_child_nodes(node)), caught, seen, found)

    def _add(self, name: str, caught: frozenset, found: set) -> None:
        if name in self.errors and not caught & (self.CATCH_ALL | {name}):
            found.add(name)

    def _called(self, func: ast.AST):
        if isinstance(func, ast.Name):
            return self.functions.get(func.id)
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id in ("self", "cls"):
            return self.methods.get(func.attr)
        return None

    def _raised_names(self, exc: ast.AST, seen: frozenset) -> set[str]:
        """``raise X(...)``, ``raise X``, or ``raise make(...)`` where ``make`` is annotated to return X."""
        func = exc.func if isinstance(exc, ast.Call) else exc
        name = ast.unparse(func).rsplit(".", 1)[-1]
        if name in self.errors:
            return {name}
        target = self._called(func) if isinstance(exc, ast.Call) else None
        if target is not None and target.returns is not None:
            return {ast.unparse(target.returns).strip("'\"").rsplit(".", 1)[-1]}
        return set()


def expected_raises(obj, errors: set[str]) -> set[str]:
    return Raised(module_tree(str(obj.filepath)), errors).of(node_of(obj))


# ---- what a docstring says ---------------------------------------------------------------------------------------

def sections(obj, caplog) -> tuple[dict[str, list], list[str]]:
    """The docstring's sections by kind ('parameters', 'returns', ...), and the warnings griffe logs parsing it
    (the API page's strict build fails on them). Types come from the signature: a docstring need not repeat them."""
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="griffe"):
        parsed = obj.docstring.parse("google", **PARSE_OPTIONS)
    warnings = [f"{obj.path}: griffe: {r.getMessage()}" for r in caplog.records if r.levelno >= logging.WARNING]
    out: dict[str, list] = {}
    for section in parsed:
        value = section.value if isinstance(section.value, list) else [section.value]
        out.setdefault(section.kind.value, []).extend(value)
    return out, warnings


def names(items) -> set[str]:
    return {item.name.lstrip("*") for item in items}


def parameters(fn) -> set[str]:
    return {p.name for p in fn.parameters if p.name not in ("self", "cls")}


def callable_problems(fn, caplog, errors: set[str], *, in_class_doc=None) -> list[str]:
    """What ``fn``'s docstring lacks; ``errors``: the error classes Raises: must name when raised;
    ``in_class_doc``: the class's own sections (for ``__init__``)."""
    problems = []
    if "property" in fn.labels:
        if fn.docstring is None or not fn.docstring.value.strip():
            problems.append(f"{fn.path}: no docstring")
        return problems
    if fn.name == "__init__":
        said = in_class_doc
        if not said.get("parameters") and fn.docstring is not None:
            said, warnings = sections(fn, caplog)
            problems += warnings
    else:
        if fn.docstring is None or not fn.docstring.value.strip():
            return [f"{fn.path}: no docstring"]
        said, warnings = sections(fn, caplog)
        problems += warnings
        first = said.get("text", [""])[0].strip()
        if not first:
            problems.append(f"{fn.path}: the docstring begins with a section, not with what it does")
    documented, wanted = names(said.get("parameters", [])), parameters(fn)
    if documented != wanted:
        problems.append(f"{fn.path}: Args: names {sorted(documented)}, the signature takes {sorted(wanted)}")
    if fn.name != "__init__":
        node = node_of(fn)
        if yields(node):
            if not said.get("yields"):
                problems.append(f"{fn.path}: yields, and has no Yields: section")
        elif returns_value(node) and not said.get("returns"):
            problems.append(f"{fn.path}: returns a value, and has no Returns: section")
    listed = {str(item.annotation).rsplit(".", 1)[-1] for item in said.get("raises", [])}
    missing = sorted(expected_raises(fn, errors) - listed)
    if missing:
        problems.append(f"{fn.path}: raises {missing}, which its Raises: section does not name")
    return problems


def class_problems(cls, caplog, errors: set[str]) -> list[str]:
    if cls.docstring is None or not cls.docstring.value.strip():
        return [f"{cls.path}: no docstring"]
    said, problems = sections(cls, caplog)
    if "dataclass" in cls.labels:
        fields = parameters(cls.members["__init__"])  # (griffe makes a dataclass's __init__ from its fields)
        documented = names(said.get("attributes", []))
        if documented != fields:
            problems.append(f"{cls.path}: Attributes: names {sorted(documented)}, its fields are {sorted(fields)}")
    elif "__init__" in cls.members and not cls.members["__init__"].is_alias:
        problems += callable_problems(cls.members["__init__"], caplog, errors, in_class_doc=said)
    for name, member in cls.members.items():
        if name.startswith("_") or member.is_alias or member.kind.value != "function":
            continue
        problems += callable_problems(member, caplog, errors)
    return problems


@pytest.mark.parametrize("path", public_paths())
def test_public_name_has_a_google_docstring(path, caplog):
    obj = lookup(path)
    check = class_problems if obj.kind.value == "class" else callable_problems
    problems = check(obj, caplog, error_classes())
    assert not problems, "\n".join(problems)


def test_the_api_page_shows_every_public_name():
    shown = set(re.findall(r"^::: *(\S+)", (REPO / "docs" / "api.md").read_text(), re.M))
    resolved = set()
    for path in shown:
        resolved.add(lookup(path).path)
    assert set(public_paths()) <= resolved, sorted(set(public_paths()) - resolved)


# ---- the checks themselves ---------------------------------------------------------------------------------------

CHECKED = [  # (source, what the check finds missing: a part of each message)
    ('def f(a, b):\n    """Does."""\n', ["Args: names [], the signature takes ['a', 'b']"]),
    ('def f(a):\n    """Does.\n\n    Args:\n        a: one.\n        c: none.\n    """\n',
     ["Parameter 'c' does not appear in the function signature",
      "Args: names ['a', 'c'], the signature takes ['a']"]),
    ('def f() -> int:\n    """Does."""\n', ["returns a value, and has no Returns: section"]),
    ('def f():\n    """Does."""\n    return 3\n', ["returns a value, and has no Returns: section"]),
    ('def f():\n    """Does."""\n    return\n', []),
    ('def f():\n    """Does."""\n    yield 3\n', ["yields, and has no Yields: section"]),
    ('class ConfigError(Exception): pass\ndef f():\n    """Does."""\n    raise ConfigError("x")\n',
     ["raises ['ConfigError']"]),
    ('class ConfigError(Exception): pass\ndef g():\n    raise ConfigError("x")\n'
     'def f():\n    """Does."""\n    g()\n', ["raises ['ConfigError']"]),
    ('class ConfigError(Exception): pass\ndef g():\n    raise ConfigError("x")\n'
     'def f():\n    """Does."""\n    try:\n        g()\n    except ConfigError:\n        pass\n', []),
    ('class ConfigError(Exception): pass\ndef f():\n    """Does.\n\n    Raises:\n        ConfigError: when.\n    """\n'
     '    raise ConfigError("x")\n', []),
    ('def f(a, *, b=1) -> int:\n    """Does.\n\n    Args:\n        a: one.\n        b: two.\n\n'
     '    Returns:\n        three.\n    """\n    return a + b\n', []),
]


@pytest.mark.parametrize("source,missing", CHECKED)
def test_the_check_finds_what_a_docstring_lacks(source, missing, caplog, tmp_path):
    (tmp_path / "m.py").write_text(source)
    module = griffe.visit("m", filepath=tmp_path / "m.py", code=source, docstring_parser="google")
    problems = callable_problems(module["f"], caplog, {"ConfigError"})
    assert len(problems) == len(missing), problems
    for problem, part in zip(problems, missing):
        assert problem.startswith("m.f: ") and part in problem, (problem, part)
