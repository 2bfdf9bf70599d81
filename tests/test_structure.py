"""tools/structure.py: the package's structure figures stay within the architecture's limits."""
from __future__ import annotations

import ast
import importlib.util
import pathlib
import textwrap

REPO = pathlib.Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("structure", REPO / "tools" / "structure.py")
structure = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(structure)


def test_the_package_meets_every_limit(capsys):
    assert structure.main([]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in printed] == list(structure.LIMITS)


def test_each_figure_names_its_offenders(tmp_path):
    """A made-up package breaking every limit once: the figures are not vacuous."""
    package = tmp_path / "pkg"
    (package / "loaders").mkdir(parents=True)
    long_body = "\n".join(f"    x{i} = {i}" for i in range(80))
    (package / "big.py").write_text(textwrap.dedent("""\
        def many(a, b, c, d, e, f, g):
            return a
        class K:
            def method(self, a, b, c, d, e, f):
                return config.bucketing or config.packing
        def kinds(config):
            return config.type == "independent" or {"discrete_sequence": 1}
        """) + "def long():\n" + long_body + "\n")
    (package / "loaders" / "mine.py").write_text("def mine(config):\n    return config.type == 'independent'\n")
    for i in range(10):
        (package / f"m{i}.py").write_text("")
    found = structure.figures(package)
    assert len(found["modules flat in the package"]) == 11
    assert found["functions over 80 lines"] == ["big.py:8 long (81 lines)"]
    assert found["functions over 6 parameters"] == ["big.py:1 many (7 parameters)"]
    assert found["files that branch on more than one regroup mode"] == ["big.py (bucketing, packing)"]
    assert found["loader-type name comparisons outside the loaders and the config check"] == [
        "big.py:7", "big.py:7 (a table keyed by loader type)"]


# (source defining f, parameters of f counted): positional and keyword-only alike, *args and **kwargs one each,
# a method's self or cls not at all (a plain function's first parameter named self is counted).
COUNTED = [
    ("def f(a, b, c, d, e, f, g): pass", 7),
    ("def f(a, b, *, c, d, e, f, g): pass", 7),
    ("def f(a, /, b, *args, c, **kwargs): pass", 5),
    ("def f(*, a=1, b=2, c=3, d=4, e=5, f=6, g=7): pass", 7),
    ("def f(self, a, b, c, d, e, f): pass", 7),
    ("class K:\n    def f(self, a, b, c, d, e, *, f): pass", 6),
    ("class K:\n    @classmethod\n    def f(cls, a, b, c, d, e, f, g): pass", 7),
    ("def outer():\n    def f(a, b, c, *, d, e, f, g=1): pass", 7),
]


def test_every_parameter_counts_toward_a_wide_function():
    for source, expected in COUNTED:
        tree = ast.parse(source)
        (node, _, method), = [found for found in structure._qualified(tree) if found[0].name == "f"]
        assert structure._parameters(node, method) == expected, source
        qualified = "K.f" if source.startswith("class") else "outer.<locals>.f" if "outer" in source else "f"
        assert structure.wide_functions({"m.py": tree}, allowed={}) == (
            [f"m.py:{node.lineno} {qualified} ({expected} parameters)"] if expected > 6 else []), source


def test_a_wide_function_is_allowed_only_by_its_qualified_name():
    tree = ast.parse("class K:\n    def f(self, a, b, c, d, e, f, g):\n        pass\n"
                     "def f(a, b, c, d, e, f, g):\n    pass\n")
    assert structure.wide_functions({"m.py": tree}, allowed={}) == ["m.py:2 K.f (7 parameters)",
                                                                    "m.py:4 f (7 parameters)"]
    assert structure.wide_functions({"m.py": tree}, allowed={"m.py:K.f": "why"}) == ["m.py:4 f (7 parameters)"]


def test_every_allowed_wide_function_exists_is_wide_and_says_why():
    """The exceptions name real functions over the limit (a stale entry would hide nothing but mislead)."""
    trees = {structure._relative(p, structure.PACKAGE): ast.parse(p.read_text())
             for p in structure.python_files()}
    widths = {f"{name}:{qualified}": structure._parameters(node, method)
              for name, tree in trees.items() for node, qualified, method in structure._qualified(tree)}
    for entry, why in structure.WIDE_ALLOWED.items():
        assert widths.get(entry, 0) > 6, entry
        assert why.strip(), entry
    assert len(structure.WIDE_ALLOWED) <= 8


def test_the_loader_contract_rule_names_literals_and_hasattr(tmp_path):
    """A loader name written outside the registry's homes and hasattr asked of a loader are named; the kinds
    table, the loaders, a registration's ``loaders=`` and hasattr on other things are not."""
    package = tmp_path / "pkg"
    for folder in ("loaders", "config", "cli"):
        (package / folder).mkdir(parents=True)
    (package / "cli" / "main.py").write_text(textwrap.dedent("""\
        CHOICES = ["independent", "discrete_sequence"]
        def pick(loader, thing):
            register_step("x", loaders=("discrete_sequence",))(pick)
            return hasattr(loader, "records") or hasattr(thing, "shape")
        """))
    (package / "config" / "kinds.py").write_text("KINDS = {'independent': 1}\n")
    (package / "loaders" / "base.py").write_text("def f(x):\n    return hasattr(x, 'source') or 'independent'\n")
    found = structure.figures(package)["loader names or hasattr on a loader outside the loader registry"]
    assert sorted(found) == ["cli/main.py:1 'discrete_sequence'", "cli/main.py:1 'independent'",
                             "cli/main.py:4 hasattr", "loaders/base.py:2 hasattr"]


def test_the_rule_knows_every_registered_loader_name():
    from batchloaders.config import kinds

    assert structure.LOADER_TYPES == kinds.BUILTIN


def test_the_stage_name_rule_names_literals_and_config_attributes(tmp_path):
    """A stage's name written as a string or read as a config's attribute outside the stages' homes is named;
    the stages, their own config checks, a spec declaring its stage, other objects' attributes of the same
    name and an allowed entry are not."""
    package = tmp_path / "pkg"
    for folder in ("regroup/stages", "config", "cli", "core", "read"):
        (package / folder).mkdir(parents=True)
    (package / "cli" / "describe.py").write_text(textwrap.dedent("""\
        def shapes(config, side, align):
            if config.regroup.stage == "bucketing":
                return self.config.chunking, side.packing, align.packing(config)
            return {"segmenting": 1}, build.loader_config.packing
        """))
    (package / "config" / "pack_rules.py").write_text("AT = ('args', 'packing')\n")
    (package / "regroup" / "stages" / "packing.py").write_text("class P:\n    name = 'packing'\n")
    (package / "core" / "model.py").write_text(textwrap.dedent("""\
        class PackSpec:
            stage: ClassVar[str] = "packing"
        class Other:
            label = "chunking"
        """))
    (package / "read" / "sharding.py").write_text("def f(config):\n    return config.bucketing\n")
    named = ["cli/describe.py:2 'bucketing'", "cli/describe.py:3 .chunking", "cli/describe.py:4 'segmenting'",
             "cli/describe.py:4 .packing", "core/model.py:4 'chunking'"]
    assert sorted(structure.figures(package)["regroup stage names outside the stages"]) == sorted(
        named + ["read/sharding.py:2 .bucketing"])
    # An allowed entry ("path what") is not named.
    trees = {structure._relative(p, package): ast.parse(p.read_text()) for p in structure.python_files(package)}
    assert sorted(structure.stage_names(trees, allowed={"read/sharding.py .bucketing": "why"})) == named


def test_the_stage_name_rule_knows_every_built_in_stage_and_its_exceptions_exist():
    from batchloaders.regroup import stage

    assert structure.REGROUP_MODES == stage.names()
    found = structure.stage_names({structure._relative(p, structure.PACKAGE): ast.parse(p.read_text())
                                   for p in structure.python_files()}, allowed={})
    assert {f"{item.split(':')[0]} {item.split(' ', 1)[1]}" for item in found} == set(structure.STAGE_NAME_ALLOWED)
