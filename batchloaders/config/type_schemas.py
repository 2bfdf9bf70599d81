"""The schema files of registered types, generated from the registries.

``step.schema.json`` and ``secondary_feature.schema.json`` list the registered
type names and check each item's ``args`` against the schema its type was
registered with (``step_<name>.schema.json``, ``secondary_<name>.schema.json``).
``common_args.schema.json`` and each loader's ``<type>_args.schema.json`` are the
shipped files with a block for every registered regroup stage (config/stage_rules.py),
its schema a shipped file (the built-ins) or ``regroup_<name>.schema.json``.
The config checker validates against these documents as generated now, so a
plugin's types are checked exactly like the built-ins. The copies shipped in
``schemas/`` are this generation with only the built-ins registered (a test keeps
them equal; ``batchloaders schema --write DIR`` regenerates them, with
``--plugins`` for an editor that should know a project's own types).
"""
from __future__ import annotations

import copy
import functools
import json
import os

from batchloaders.transform import builtin_types, registry
from batchloaders.config import stage_rules
from batchloaders.config.schema_files import load_schema, schema_names

DRAFT = "https://json-schema.org/draft/2020-12/schema"

_KINDS = {
    # file: (registry, prefix of args files, title, item description, what `type` chooses, noun for messages)
    "step.schema.json": (
        registry.STEPS, "step", "Processing step",
        "One operation applied, in order, to a primary or secondary tensor; the result replaces the tensor.",
        {"tensor": {"description": "Name of the primary or secondary tensor to transform.",
                    "type": "string", "minLength": 1}},
        ["tensor", "type"], "processing step type", "steps"),
    "secondary_feature.schema.json": (
        registry.SECONDARY, "secondary", "Secondary feature",
        "A tensor built after the primary features are loaded.",
        {"to_name": {"description": "Name of the tensor in the pipeline: a model input or target, unique "
                                    "among all features.", "type": "string", "minLength": 1}},
        ["to_name", "type"], "secondary feature type", "features"),
}


def args_file(prefix: str, name: str) -> str:
    return f"{prefix}_{name}.schema.json"


def generated(scopes=None) -> dict[str, dict]:
    """File name -> schema document, for every generated file, as the registries are now, with
    the types registered in ``scopes`` (default: the built-ins and global registrations)."""
    builtin_types.load()  # the built-ins are always there, like any plugin imported before
    version = (registry.version(), stage_rules.version())
    return dict(_generated(version, frozenset(registry.ALWAYS if scopes is None else scopes)))


@functools.lru_cache(maxsize=32)
def _generated(version: tuple, scopes: frozenset) -> tuple:
    del version  # part of the cache key: a registration changes it
    out = {}
    for file, (reg, prefix, title, description, first, required, type_title, noun) in _KINDS.items():
        names = reg.names(scopes)
        branches = []
        for name in names:
            item = reg.get(name)
            schema = dict(item.schema)
            file_name = args_file(prefix, name)
            out[file_name] = {"$schema": DRAFT, "$id": file_name,
                              "title": schema.pop("title", f"{name} arguments"), **schema}
            then = {"properties": {"args": {"$ref": file_name}}}
            if schema.get("required"):
                keys = schema["required"]
                keys = keys[0] if len(keys) == 1 else ", ".join(keys[:-1]) + " and " + keys[-1]
                then = {"description": f"{name} {noun} need args with {keys}",
                        "required": ["args"], **then}
            branches.append({"if": {"properties": {"type": {"const": name}}, "required": ["type"]}, "then": then})
        out[file] = {
            "$schema": DRAFT, "$id": file, "title": title, "description": description, "type": "object",
            "additionalProperties": False, "required": required,
            "properties": {**first,
                           "type": {"title": type_title,
                                    "description": "A registered type: " + ", ".join(names)
                                                   + " (docs/steps-and-plugins.md describes the built-ins; plugins add more).",
                                    "type": "string", "enum": names},
                           "args": {"description": "Arguments of the type, checked against its schema.",
                                    "type": "object"}},
            "allOf": branches,
        }
    out.update(_batching(scopes))
    out.update(_regroup())
    return tuple(out.items())


def _batching(scopes: frozenset) -> dict:
    """batching.schema.json: the policy names, and each registered batcher's args schema."""
    out, branches = {}, []
    for name in registry.BATCHERS.names(scopes):
        schema = dict(registry.BATCHERS.get(name).schema)
        file_name = args_file("batcher", name)
        out[file_name] = {"$schema": DRAFT, "$id": file_name, "title": schema.pop("title", f"{name} arguments"),
                          **schema}
        then = {"properties": {"batching_args": {"$ref": file_name}}}
        if schema.get("required"):
            then = {"description": f"the {name} batcher needs batching_args", "required": ["batching_args"], **then}
        branches.append({"if": {"properties": {"batching": {"const": name}}, "required": ["batching"]},
                         "then": then})
    names = list(registry.POLICIES) + [n for n in registry.BATCHERS.names(scopes) if n not in registry.POLICIES]
    out["batching.schema.json"] = {
        "$schema": DRAFT, "$id": "batching.schema.json", "title": "Batching policy",
        "description": "The batching policy names and the arguments of each registered batcher (applied to a "
                       "padding list entry).",
        "properties": {"batching": {"title": "batching policy",
                                    "description": "A batching policy: " + ", ".join(names) + ".",
                                    "enum": names}},
        **({"allOf": branches} if branches else {}),  # draft-07 editors refuse an empty allOf
    }
    return out


COMMON = "common_args.schema.json"


def _regroup() -> dict:
    """The args schemas with a block for each registered regroup stage: common_args.schema.json defines it
    (described, its schema by reference), each loader's args schema admits it; a stage's schema given as a
    dict becomes ``regroup_<name>.schema.json``."""
    common = copy.deepcopy(load_schema(COMMON))
    loaders = {name: copy.deepcopy(load_schema(name)) for name in schema_names()
               if name.endswith("_args.schema.json") and name != COMMON}
    out = {}
    for stage in stage_rules.blocks():
        ref = stage.schema
        if isinstance(stage.schema, dict):
            ref = f"regroup_{stage.name}.schema.json"
            schema = dict(stage.schema)
            out[ref] = {"$schema": DRAFT, "$id": ref, "title": schema.pop("title", f"{stage.name} block"), **schema}
        common["definitions"][stage.name] = {"description": stage.description or f"The {stage.name} stage.",
                                             "$ref": ref}
        for doc in loaders.values():
            doc["properties"][stage.name] = {"$ref": f"{COMMON}#/definitions/{stage.name}"}
    return {COMMON: common, **loaders, **out}


def write(directory: str) -> list[str]:
    """Write every generated file into ``directory``; returns the paths written."""
    os.makedirs(directory, exist_ok=True)
    paths = []
    for name, doc in generated().items():
        path = os.path.join(directory, name)
        with open(path, "w", encoding="utf-8") as f:
            f.write(json.dumps(doc, indent=2) + "\n")
        paths.append(path)
    return paths
