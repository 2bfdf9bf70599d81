"""The loader types, each as a kind: what the type means to the code that is not the loader itself.

The config layer's half of the loader registry (loaders/registry.py), read without TensorFlow: checks,
block sizes, sharding, accounting, describe and bench ask ``kind(config.type)`` instead of comparing
names. The built-in types' rows are here; a loader registered with a kind of its own adds its row
(:func:`add`), so a new loader type is one module (tests/test_extension_loader.py). The loader
config schema's ``type`` enum, the command line's choices and the steps' default ``loaders`` are
made from this table.
"""
from __future__ import annotations

import dataclasses

from batchloaders.errors import suggest
from batchloaders.transform.registry import ALL_LOADERS


@dataclasses.dataclass(frozen=True)
class LoaderKind:
    """What a loader type means to the code that is not the loader itself: checks, block sizes, sharding,
    accounting, describe and bench ask it instead of comparing type names."""

    name: str
    sequence: bool  # examples are windows of several records (or steps), sized by min_window and max_window
    concatenates_records: bool  # records are joined along one time axis: windows count steps, stride applies
    example: str  # what one example is called: "record" or "window"
    example_is: str  # what one example is, said of a record where an error names one
    args_schema: str = ""  # the schema file of its args; default <name>_args.schema.json
    global_order: bool = False  # counts an epoch's examples from the record counts: shuffle_scope global works

    @property
    def args_file(self) -> str:
        """The schema file the config's ``args`` are checked against."""
        return self.args_schema or f"{self.name}_args.schema.json"

    @property
    def stacks_record_rows(self) -> bool:
        """A window stacks one row per record for each context feature (its first axis counts records)."""
        return self.sequence and not self.concatenates_records

    @property
    def window_unit(self) -> str | None:
        """What a window's length counts; None for a loader without windows."""
        return None if not self.sequence else ("steps" if self.concatenates_records else "records")


KINDS = {kind.name: kind for kind in (
    LoaderKind("independent", sequence=False, concatenates_records=False, example="record", global_order=True,
               example_is="the record"),
    LoaderKind("continuous_sequence", sequence=True, concatenates_records=True, example="window", global_order=True,
               example_is="the window whose first step is in this record"),
    LoaderKind("discrete_sequence", sequence=True, concatenates_records=False, example="window", global_order=True,
               example_is="the window starting at this record"),
)}
BUILTIN = tuple(KINDS)  # the shipped schema's enum (tests/test_schemas.py keeps them equal)
DEFAULT = BUILTIN[0]  # the type ``batchloaders init`` writes unless told
ALL_LOADERS.extend(KINDS)


def kind(loader_type: str) -> LoaderKind:
    """The kind of a checked config's ``type`` (the schema admits only these names).

    Args:
        loader_type: a registered loader type's name.

    Returns:
        Its LoaderKind.
    """
    return KINDS[loader_type]


def names() -> tuple[str, ...]:
    """The loader type names, built-in first, then in the order loaders registered them."""
    return tuple(KINDS)


def add(new: LoaderKind) -> None:
    """Make ``new`` a loader type the config check admits (loaders/registry.py calls it as a loader registers).

    Args:
        new: the kind; a name already in the table must come with the same kind.

    Raises:
        ValueError: for a name in the table with another kind.
    """
    known = KINDS.get(new.name)
    if known is not None and known != new:
        raise ValueError(f"loader type {new.name!r} has the kind {known}; found another: {new}")
    if known is None:
        KINDS[new.name] = new
        ALL_LOADERS.extend([new.name])


def drop(loader_type: str) -> None:
    """Forget a type :func:`add` added (a built-in row stays)."""
    if loader_type not in BUILTIN and KINDS.pop(loader_type, None) is not None:
        ALL_LOADERS.discard(loader_type)


def unknown(loader_type: str) -> str:
    """What a message says of a type no loader is registered as (the closest name, if any)."""
    return f"no loader is registered as {loader_type!r}{suggest(loader_type, KINDS)}"


def typed_schema(root: dict) -> dict:
    """The loader config schema ``root`` with every registered loader type: its ``type`` enum made from
    this table, and an ``args`` branch for each type the shipped file has none for.

    Args:
        root: the shipped loader_config.schema.json document (not modified).

    Returns:
        ``root`` itself when it lists every type; else a changed copy.
    """
    listed = root["properties"]["type"]["enum"]
    if list(listed) == list(KINDS):
        return root
    branches = [{"if": {"properties": {"type": {"const": k.name}}, "required": ["type"]},
                 "then": {"properties": {"args": {"$ref": k.args_file}}}}
                for k in KINDS.values() if k.name not in listed]
    types = {**root["properties"]["type"], "enum": list(KINDS)}
    return {**root, "properties": {**root["properties"], "type": types}, "allOf": [*root["allOf"], *branches]}
