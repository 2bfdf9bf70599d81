"""The shipped schema files (``schemas/``, the ``batchloaders.schemas`` package), read without jsonschema."""
from __future__ import annotations

import functools
import importlib.resources
import json
import pathlib

from batchloaders.errors import suggest


def schemas_dir():
    """The folder holding the schema files, installed or in a source checkout."""
    try:
        return importlib.resources.files("batchloaders.schemas")
    except ModuleNotFoundError:
        # batchloaders/schemas is a symlink to the top-level schemas/ folder: a
        # checkout made without symlinks (core.symlinks false) has a plain file there.
        return pathlib.Path(__file__).resolve().parents[2] / "schemas"


def schema_names() -> list[str]:
    """File names of all shipped schemas, e.g. ``["common_args.schema.json", ...]``."""
    return sorted(p.name for p in schemas_dir().iterdir() if p.name.endswith(".schema.json"))


def schema_text(schema_file: str) -> str:
    """The raw text of one schema file (for ``describe`` output or writing it next to a config).

    Args:
        schema_file: a shipped file's name.

    Returns:
        The file's text.

    Raises:
        KeyError: no shipped schema has that name.
    """
    if schema_file not in schema_names():
        raise KeyError(f"no schema named {schema_file!r}{suggest(schema_file, schema_names())}")
    return schemas_dir().joinpath(schema_file).read_text(encoding="utf-8")


@functools.cache
def load_schema(schema_file: str) -> dict:
    """The parsed schema (shared and cached: do not modify it)."""
    return json.loads(schema_text(schema_file))
