"""Structure figures for the package: what a newcomer meets when reading it.

    python tools/structure.py            # prints the figures, exits 1 if a limit is broken
    python tools/structure.py --details  # also names each offender

The limits are the architecture's (docs/architecture.md): a handful of modules flat in the package,
short functions with few parameters, regroup modes and loader types that each have one home.
"""
from __future__ import annotations

import argparse
import ast
import pathlib
import sys

PACKAGE = pathlib.Path(__file__).resolve().parent.parent / "batchloaders"

REGROUP_MODES = ("bucketing", "packing", "chunking", "segmenting")
LOADER_TYPES = ("independent", "continuous_sequence", "discrete_sequence")
# Where a loader type's name may be compared: the loaders themselves, and the table of loader kinds the
# config check reads the document's `type` key into.
LOADER_HOMES = ("loaders/",)
LOADER_TYPE_CHECK = ("config/kinds.py",)

# Functions allowed more than 6 parameters, each with why: a public signature users call, or a module that
# is being restructured (its signature changes there).
WIDE_ALLOWED = {
    "transform/extend.py:register_secondary": "a public decorator plugins call with these keywords "
                                              "(docs/python-api.md)",
    "prepare/api.py:reshard": "a public function users call with these keywords, like write_manifest's (an "
                              "options object beside the shard count repeated it; docs/preparing.md)",
}

# Where a regroup stage's name may be written: the stages (regroup/) and their own config checks, which sit
# in the config layer because the config check, below regroup/, runs them. Elsewhere code asks the stage
# (config/stage_rules.py's StageRules, regroup/stage.py's Stage) what it is instead of naming it. A spec
# declaring its stage (``stage = "packing"`` in a class body, core/model.py) names it and is not counted.
STAGE_NAME_HOMES = ("regroup/", "config/bucket_rules.py", "config/chunk_rules.py", "config/pack_rules.py",
                    "config/segment_rules.py")
# Stage names allowed elsewhere ("path what" -> why): none now; an entry needs its reason.
STAGE_NAME_ALLOWED: dict[str, str] = {
}

LIMITS = {
    "modules flat in the package": 10,
    "functions over 80 lines": 0,
    "functions over 6 parameters": 0,
    "files that branch on more than one regroup mode": 2,
    "loader-type name comparisons outside the loaders and the config check": 0,
    "loader names or hasattr on a loader outside the loader registry": 0,
    "regroup stage names outside the stages": 0,
}


def python_files(root: pathlib.Path = PACKAGE) -> list[pathlib.Path]:
    return sorted(p for p in root.rglob("*.py") if "__pycache__" not in p.parts)


def _relative(path: pathlib.Path, root: pathlib.Path) -> str:
    return path.relative_to(root).as_posix()


def flat_modules(root: pathlib.Path = PACKAGE) -> list[str]:
    return sorted(p.name for p in root.glob("*.py") if p.name != "__init__.py")


def _functions(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node


def _parameters(node: ast.FunctionDef, method: bool) -> int:
    """Every parameter a caller may pass: positional, keyword-only, and ``*args``/``**kwargs`` one each; a
    method's ``self`` or ``cls`` is not counted."""
    args = node.args
    names = [a.arg for a in args.posonlyargs + args.args]
    if method and names and names[0] in ("self", "cls"):
        names = names[1:]
    return len(names) + len(args.kwonlyargs) + (args.vararg is not None) + (args.kwarg is not None)


def _qualified(tree: ast.AST, prefix: str = "", in_class: bool = False):
    """(function node, qualified name such as ``InputFn.__call__``, whether it is a method) of every function."""
    for child in ast.iter_child_nodes(tree):
        if isinstance(child, ast.ClassDef):
            yield from _qualified(child, f"{prefix}{child.name}.", True)
        elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield child, prefix + child.name, in_class
            yield from _qualified(child, f"{prefix}{child.name}.<locals>.", False)
        else:
            yield from _qualified(child, prefix, in_class)


def long_functions(trees: dict[str, ast.AST], limit: int = 80) -> list[str]:
    out = []
    for name, tree in trees.items():
        for node in _functions(tree):
            length = node.end_lineno - node.lineno + 1
            if length > limit:
                out.append(f"{name}:{node.lineno} {node.name} ({length} lines)")
    return out


def wide_functions(trees: dict[str, ast.AST], limit: int = 6, allowed: dict[str, str] | None = None) -> list[str]:
    """Functions taking more than ``limit`` parameters of any kind, but for those ``allowed`` names
    ("path:qualified name" -> why)."""
    allowed = WIDE_ALLOWED if allowed is None else allowed
    out = []
    for name, tree in trees.items():
        for node, qualified, method in _qualified(tree):
            count = _parameters(node, method)
            if count > limit and f"{name}:{qualified}" not in allowed:
                out.append(f"{name}:{node.lineno} {qualified} ({count} parameters)")
    return out


def regroup_branching(trees: dict[str, ast.AST]) -> list[str]:
    """Files that read two or more of the config's regroup-mode fields (``x.bucketing``, ``x.packing`` ...)."""
    out = []
    for name, tree in trees.items():
        modes = {node.attr for node in ast.walk(tree)
                 if isinstance(node, ast.Attribute) and node.attr in REGROUP_MODES}
        if len(modes) > 1:
            out.append(f"{name} ({', '.join(sorted(modes))})")
    return out


def _names_loader_type(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant):
        return node.value in LOADER_TYPES
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return any(_names_loader_type(e) for e in node.elts)
    return False


def loader_type_comparisons(trees: dict[str, ast.AST]) -> list[str]:
    out = []
    for name, tree in trees.items():
        if name.startswith(LOADER_HOMES) or name in LOADER_TYPE_CHECK:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Compare) and any(
                    _names_loader_type(side) for side in [node.left, *node.comparators]):
                out.append(f"{name}:{node.lineno}")
            elif isinstance(node, ast.Dict) and any(_names_loader_type(k) for k in node.keys if k):
                out.append(f"{name}:{node.lineno} (a table keyed by loader type)")
    return out


# Where a loader type's name may be written: the loaders, and the kinds table (config/kinds.py: the config
# layer's half of the loader registry). Elsewhere names come from the registry, except where a registered
# step or secondary feature names the loaders it serves (its ``loaders=`` argument).
LOADER_NAME_HOMES = ("loaders/", "config/kinds.py")


def loader_contract(trees: dict[str, ast.AST]) -> list[str]:
    """A loader type's name written outside its homes, and ``hasattr`` asked of a loader anywhere (a loader's
    capabilities are attributes with defaults: loaders/registry.py)."""
    out = []
    for name, tree in trees.items():
        served = {id(inner) for node in ast.walk(tree) if isinstance(node, ast.Call)
                  for k in node.keywords if k.arg == "loaders" for inner in ast.walk(k.value)}
        for node in ast.walk(tree):
            if (isinstance(node, ast.Call) and getattr(node.func, "id", None) == "hasattr" and node.args
                    and (name.startswith("loaders/") or "loader" in ast.unparse(node.args[0]).lower())):
                out.append(f"{name}:{node.lineno} hasattr")
            elif (isinstance(node, ast.Constant) and node.value in LOADER_TYPES and id(node) not in served
                  and not name.startswith(LOADER_NAME_HOMES)):
                out.append(f"{name}:{node.lineno} {node.value!r}")
    return out


def _declares_stage(node: ast.AST) -> set[int]:
    """The ids of the string constants that class bodies assign to ``stage`` (a spec naming its stage)."""
    out = set()
    for cls in ast.walk(node):
        for item in cls.body if isinstance(cls, ast.ClassDef) else ():
            target = item.target if isinstance(item, ast.AnnAssign) else (
                item.targets[0] if isinstance(item, ast.Assign) and len(item.targets) == 1 else None)
            if getattr(target, "id", None) == "stage" and isinstance(item.value, ast.Constant):
                out.add(id(item.value))
    return out


def stage_names(trees: dict[str, ast.AST], allowed: dict[str, str] | None = None) -> list[str]:
    """A regroup stage's name written outside the stages' homes: as a string, or as an attribute of a config
    (``config.packing``, ``self.config.chunking``), but for those ``allowed`` ("path what" -> why)."""
    allowed = STAGE_NAME_ALLOWED if allowed is None else allowed
    out = []
    for name, tree in trees.items():
        if name.startswith(STAGE_NAME_HOMES):
            continue
        declared = _declares_stage(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and node.value in REGROUP_MODES and id(node) not in declared:
                what = repr(node.value)
            elif (isinstance(node, ast.Attribute) and node.attr in REGROUP_MODES
                  and "config" in ast.unparse(node.value).lower()):
                what = f".{node.attr}"
            else:
                continue
            if f"{name} {what}" not in allowed:
                out.append(f"{name}:{node.lineno} {what}")
    return out


def figures(root: pathlib.Path = PACKAGE) -> dict[str, list[str]]:
    trees = {_relative(p, root): ast.parse(p.read_text(), str(p)) for p in python_files(root)}
    return {
        "modules flat in the package": flat_modules(root),
        "functions over 80 lines": long_functions(trees),
        "functions over 6 parameters": wide_functions(trees),
        "files that branch on more than one regroup mode": regroup_branching(trees),
        "loader-type name comparisons outside the loaders and the config check": loader_type_comparisons(trees),
        "loader names or hasattr on a loader outside the loader registry": loader_contract(trees),
        "regroup stage names outside the stages": stage_names(trees),
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--details", action="store_true", help="name each offender")
    args = parser.parse_args(argv)
    broken = 0
    for label, items in figures().items():
        limit = LIMITS[label]
        ok = len(items) <= limit
        broken += not ok
        print(f"{label}: {len(items)} (limit {limit}){'' if ok else '  <-- over'}")
        if args.details or not ok:
            for item in items:
                print(f"    {item}")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
