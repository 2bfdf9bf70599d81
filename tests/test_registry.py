"""A name is taken once (the shipped schema files are checked against the registries in test_plugins)."""
from __future__ import annotations

import pytest

from batchloaders.transform.builtin_types import load as load_builtin_types
from batchloaders.transform.registry import SECONDARY, DuplicateName, Registry


def test_registry_refuses_duplicates():
    load_builtin_types()
    registry = Registry("thing")
    registry.register(SECONDARY.get("const"))
    with pytest.raises(DuplicateName, match="'const' is registered twice: first by batchloaders.transform.secondary.const"):
        registry.register(SECONDARY.get("const"))
