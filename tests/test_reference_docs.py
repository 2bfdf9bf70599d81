"""docs/reference.md is the schemas' own text, up to date; and every default a schema states is the one
the loader applies (a config with the key set to it means exactly what the config without the key means)."""
from __future__ import annotations

import copy
import os
import pathlib

import pytest
import yaml

from batchloaders import load_config
from batchloaders.cli import reference

REPO = pathlib.Path(__file__).resolve().parents[1]
SCHEMAS = reference.load(str(REPO / "schemas"))
DOCS = reference.Reference(SCHEMAS)


def test_the_committed_reference_is_what_the_schemas_give():
    committed = (REPO / "docs" / "reference.md").read_text(encoding="utf-8")
    assert committed == reference.render(str(REPO / "schemas")), (
        "docs/reference.md is out of date: python -m batchloaders.cli.reference")


def test_every_object_and_key_of_the_schemas_is_in_the_reference():
    text = reference.render(str(REPO / "schemas"))
    for name in ("loader_config", "independent_args", "continuous_sequence_args", "discrete_sequence_args",
                 "dataset", "manifest", "manifest_feature", "bucketing", "packing", "step_one_hot",
                 "secondary_length", "padding[]"):
        assert f"\n## {name}\n" in text
    for name, schema in SCHEMAS.items():
        for key in schema.get("properties", {}):
            assert f"| `{key}` |" in text, (name, key)


def _properties(node, where):
    """(where, key) of every property of every object in a schema, branches and definitions included."""
    if not isinstance(node, dict):
        return
    for key, value in node.get("properties", {}).items():
        yield where, key
        yield from _properties(value, f"{where}.{key}")
    for part in ("items", "then", "else"):
        yield from _properties(node.get(part), where)
    for branch in node.get("allOf", ()):
        yield from _properties(branch, where)
    for name, definition in node.get("definitions", {}).items():
        yield from _properties(definition, f"{where}#{name}")


def test_the_reference_names_every_property_nested_ones_included():
    """A raw feature's deserialize_args (endian, len) sit in a branch's definition: listed too."""
    text = reference.render(str(REPO / "schemas"))
    missing = [(where, key) for name, schema in SCHEMAS.items() for where, key in _properties(schema, name)
               if f"| `{key}` |" not in text]
    assert missing == []
    assert "\n## manifest_feature.deserialize_args (raw)\n" in text


def test_shared_loader_arguments_are_listed_once():
    text = reference.render(str(REPO / "schemas"))
    assert text.count("| `target_batch_size` |") == 1
    assert text.count("It also takes every one of the [arguments of every loader](#arguments-of-every-loader).") == 3


def test_a_table_row_gives_type_bounds_default_and_description():
    text = reference.render(str(REPO / "schemas"))
    section = text.split("\n## arguments of every loader\n")[1].split("\n## ")[0]  # the shared loader arguments
    row = next(line for line in section.splitlines() if line.startswith("| `num_interleave_out_buffer_elements` |"))
    assert row.split(" | ")[1:5] == ["integer", "", "`1`", ">= 1, <= 2147483647"]
    assert "Elements buffered per open file" in row
    row = next(line for line in section.splitlines() if line.startswith("| `target_batch_size` |"))
    assert row.split(" | ")[1:5] == ["integer", "yes", "", ">= 1, <= 1048576"]


# --- the defaults the schemas state ---------------------------------------------------------------

BASES = {"independent": "chars_independent.yaml", "continuous_sequence": "stream_continuous.yaml",
         "discrete_sequence": "sentences_discrete.yaml"}


def stated_defaults(loader: str) -> list[tuple[str, object]]:
    args = SCHEMAS[f"{loader}_args"]
    out = []
    for key, prop in args["properties"].items():
        has, value = DOCS.defaulted(prop, f"{loader}_args")
        if has:
            out.append((key, value))
    return out


def minimal(loader: str) -> dict:
    """The example config of ``loader`` cut down to its required args (and padding, which windows of
    whole sentences need): every other optional key is then absent."""
    base = yaml.safe_load((REPO / "configs" / BASES[loader]).read_text())
    # (dataset and primary_features are required unless sources replace them: the schema's dataset_or_sources rule)
    keep = (set(SCHEMAS[f"{loader}_args"]["required"]) | {"dataset", "primary_features"}
            | ({"padding"} if loader == "discrete_sequence" else set()))
    args = {k: v for k, v in base["args"].items() if k in keep}
    if "padding" in args:
        args["padding"] = True
    return {"type": loader, "model": {"inputs": [f["to_name"] for f in args["primary_features"]]}, "args": args}


CASES = [(loader, key, value) for loader in BASES for key, value in stated_defaults(loader)
         if key not in minimal(loader)["args"]]


@pytest.fixture(scope="module")
def configs_dir():
    from batchloaders.demo_data import generate

    generate()
    return REPO / "configs"


def loaded(data: dict, configs_dir):
    cwd = os.getcwd()
    os.chdir(configs_dir)  # the example configs' data_dir is relative to their folder
    try:
        return load_config(data)
    finally:
        os.chdir(cwd)


def test_each_loader_states_defaults():
    assert {key for loader, key, _ in CASES if loader == "independent"} >= {
        "shuffle", "padding", "seed", "on_corrupt", "num_parallel_reads", "multi_load"}
    assert ("continuous_sequence", "stride", None) in CASES


@pytest.mark.parametrize("loader, key, value", CASES, ids=[f"{a}-{b}" for a, b, _ in CASES])
def test_a_stated_default_is_the_default_applied(configs_dir, loader, key, value):
    without = minimal(loader)
    with_default = copy.deepcopy(without)
    with_default["args"][key] = value
    assert loaded(with_default, configs_dir) == loaded(without, configs_dir)


@pytest.mark.parametrize("where, key, value", [(("model",), "targets", []), ((), "plugins", [])])
def test_top_level_defaults_are_applied(configs_dir, where, key, value):
    stated = SCHEMAS["loader_config"]["properties"]
    for part in where:
        stated = stated[part]["properties"]
    assert stated[key]["default"] == value
    base = yaml.safe_load((configs_dir / "chars_independent.yaml").read_text())
    base["model"] = {"inputs": ["context", "next_char"]}  # every loaded feature an input: no targets given
    with_default = copy.deepcopy(base)
    node = with_default
    for part in where:
        node = node[part]
    node[key] = value
    assert loaded(with_default, configs_dir) == loaded(base, configs_dir)
