"""The registries and the schemas name the same types, and each type's fragment exists."""
from __future__ import annotations

import json
import os

import pytest

from batchloaders.builtin_types import load as load_builtin_types
from batchloaders.registry import SECONDARY, STEPS, Registry

SCHEMAS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "schemas")


def enum_of(schema_file: str) -> list[str]:
    with open(os.path.join(SCHEMAS, schema_file)) as f:
        return json.load(f)["properties"]["type"]["enum"]


@pytest.mark.parametrize("registry, schema_file", [(SECONDARY, "secondary_feature.schema.json"),
                                                   (STEPS, "step.schema.json")])
def test_registry_matches_schema_enum_and_fragments_exist(registry, schema_file):
    load_builtin_types()
    assert registry.names() == sorted(enum_of(schema_file))
    for item in registry:
        with open(os.path.join(SCHEMAS, item.schema)) as f:
            assert json.load(f)["$id"] == item.schema


def test_registry_refuses_duplicates():
    load_builtin_types()
    registry = Registry("thing")
    registry.register(SECONDARY.get("const"))
    with pytest.raises(ValueError, match="'const' is registered twice"):
        registry.register(SECONDARY.get("const"))
