"""docs/reference.md from the JSON Schemas: one table per object (key, type, required, default, bounds,
description).

    python -m batchloaders.cli.reference            # rewrite docs/reference.md from schemas/
    python -m batchloaders.cli.reference --check    # exit 1 when docs/reference.md is out of date

The descriptions live in the schemas (the editor shows the same text); this only lays them out. An
object is a schema with ``properties``: every schema file's top level, and any object met inside one
(a property's own object, an array's items, a definition behind a ``$ref``), each documented once
under the first key path that reaches it. A type's arguments (``step_*``, ``secondary_*``) get a
table per type. Reads the shipped schemas (built-in types only; ``batchloaders schema --plugins``
writes schema files for plugin types).
"""
from __future__ import annotations

import argparse
import json
import os
import sys

from batchloaders.config import stage_rules
from batchloaders.config.schema import _schemas_dir

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "docs", "reference.md")

# Top-level schema files in reading order (the regroup stages' shipped ones in registration order); the rest
# follow alphabetically.
FIRST = ("loader_config", "independent_args", "continuous_sequence_args", "discrete_sequence_args", "dataset",
         "primary_feature", "secondary_feature", "step", "padding", "batching",
         *(stage.schema.removesuffix(".schema.json") for stage in stage_rules.blocks() if isinstance(stage.schema, str)),
         "manifest", "manifest_feature")
LOADERS = ("independent_args", "continuous_sequence_args", "discrete_sequence_args")
SHARED = "arguments of every loader"  # the section of the loader arguments all three take alike
BOUNDS = (("minimum", ">= {}"), ("exclusiveMinimum", "> {}"), ("maximum", "<= {}"), ("exclusiveMaximum", "< {}"),
          ("minLength", "length >= {}"), ("maxLength", "length <= {}"), ("minItems", "items >= {}"),
          ("maxItems", "items <= {}"), ("pattern", "matches `{}`"))


def load(directory: str) -> dict[str, dict]:
    """{file stem: schema} of every ``*.schema.json`` in ``directory``."""
    out = {}
    for name in sorted(os.listdir(directory)):
        if name.endswith(".schema.json"):
            with open(os.path.join(directory, name), encoding="utf-8") as f:
                out[name[: -len(".schema.json")]] = json.load(f)
    return out


class Reference:
    def __init__(self, schemas: dict[str, dict]):
        self.schemas = schemas
        self.sections: list[tuple[str, str, list[str]]] = []  # (title, description, table and note lines)
        self.documented: dict[int, str] = {}  # id(schema object) -> its section title, given before it is written
        self.written: set[int] = set()
        self.shared = self._shared_loader_keys()

    def _shared_loader_keys(self) -> dict[str, dict]:
        """{key: property} of the loader arguments every loader takes from common_args alike: one table."""
        loaders = [self.schemas[name].get("properties", {}) for name in LOADERS if name in self.schemas]
        if len(loaders) < len(LOADERS):
            return {}
        return {key: prop for key, prop in loaders[0].items()
                if all(props.get(key) == prop for props in loaders) and "common_args" in prop.get("$ref", "")}

    def _follow(self, node: dict, base: str) -> tuple[dict, str]:
        """One ``$ref`` step: the node it names (in another file, or ``#/definitions/...`` of ``base``)."""
        target, _, fragment = node["$ref"].partition("#")
        if target:
            base = target[: -len(".schema.json")]
        node = self.schemas[base]
        for part in filter(None, fragment.split("/")):
            node = node[part]
        return node, base

    def resolve(self, node: dict, base: str) -> tuple[dict, str]:
        """Follow ``$ref`` to the node that defines the value."""
        while "$ref" in node:
            node, base = self._follow(node, base)
        return node, base

    def described(self, node: dict, base: str) -> str:
        """The first description along ``node``'s ``$ref`` chain (the nearest says most about this use)."""
        while "description" not in node and "$ref" in node:
            node, base = self._follow(node, base)
        return node.get("description", "")

    def defaulted(self, node: dict, base: str):
        """The first ``default`` along ``node``'s ``$ref`` chain, as (True, value), or (False, None)."""
        while "default" not in node and "$ref" in node:
            node, base = self._follow(node, base)
        return ("default" in node), node.get("default")

    def type_of(self, node: dict, base: str) -> str:
        node, base = self.resolve(node, base)
        if id(node) in self.documented:
            return f"object ([{self.documented[id(node)]}](#{anchor(self.documented[id(node)])}))"
        if "const" in node:
            return f"`{json.dumps(node['const'])}`"
        if "enum" in node:
            return "one of " + ", ".join(f"`{json.dumps(v)}`" for v in node["enum"])
        for key in ("anyOf", "oneOf"):
            if key in node:
                return " or ".join(self.type_of(alt, base) for alt in node[key])
        kind = node.get("type", "any")
        kind = " or ".join(kind) if isinstance(kind, list) else kind
        if kind == "array" and isinstance(node.get("items"), dict):
            kind = f"array of {self.type_of(node['items'], base)}"
        return kind

    def bounds(self, node: dict, base: str) -> str:
        node, _ = self.resolve(node, base)
        parts = [text.format(node[key]) for key, text in BOUNDS if key in node]
        if node.get("uniqueItems"):
            parts.append("unique items")
        if node.get("type") == "array" and isinstance(node.get("items"), dict):
            inner, _ = self.resolve(node["items"], base)
            inner_bounds = [text.format(inner[key]) for key, text in BOUNDS if key in inner]
            if inner_bounds:
                parts.append("each " + ", ".join(inner_bounds))
        return ", ".join(parts)

    def document(self, title: str, node: dict, base: str) -> None:
        """A section for the object ``node`` (already resolved), then for the objects inside it that have
        no section of their own (objects with one are linked from the type column)."""
        if id(node) in self.written:
            return
        self.written.add(id(node))
        self.documented.setdefault(id(node), title)
        required = set(node.get("required", ()))
        lines = ["| key | type | required | default | bounds | description |", "| --- | --- | --- | --- | --- | --- |"]
        nested = []
        loader = title in LOADERS and self.shared
        for key, prop in node.get("properties", {}).items():
            if loader and key in self.shared:
                continue
            target, target_base = self.resolve(prop, base)
            inner = target.get("items") if target.get("type") == "array" else None
            if isinstance(inner, dict):
                inner, inner_base = self.resolve(inner, target_base)
                if "properties" in inner and id(inner) not in self.documented:
                    self.documented[id(inner)] = f"{title}.{key}[]"
                    nested.append((f"{title}.{key}[]", inner, inner_base))
            if "properties" in target and id(target) not in self.documented:
                self.documented[id(target)] = f"{title}.{key}"
                nested.append((f"{title}.{key}", target, target_base))
            has_default, value = self.defaulted(prop, base)
            default = f"`{json.dumps(value)}`" if has_default else ""
            description = self.described(prop, base)
            lines.append("| " + " | ".join([f"`{key}`", self.type_of(prop, base), "yes" if key in required else "",
                                            default, self.bounds(prop, base), cell(description)]) + " |")
        if loader:
            lines += ["", f"It also takes every one of the [{SHARED}](#{anchor(SHARED)})."]
        branches = []
        for branch in node.get("allOf", ()):  # per-type arguments (loader, dataset, step and feature types)
            # the key whose value chooses the branch: `type`, or another (a manifest feature's deserialize_type)
            chosen = [(k, v["const"]) for k, v in branch.get("if", {}).get("properties", {}).items()
                      if isinstance(v, dict) and "const" in v]
            field, when = chosen[0] if chosen else (None, None)
            for key, prop in branch.get("then", {}).get("properties", {}).items():
                target, target_base = self.resolve(prop, base)
                if "properties" in target and when is not None:
                    if id(target) not in self.documented:
                        self.documented[id(target)] = f"{title}.{key} ({when})"
                        nested.append((self.documented[id(target)], target, target_base))
                    branches.append(f"- `{key}` when `{field}` is `{when}`: "
                                    f"[{self.documented[id(target)]}](#{anchor(self.documented[id(target)])})")
        self.sections.append((title, node.get("description", ""), lines + ([""] + branches if branches else [])))
        for sub_title, sub, sub_base in nested:
            self.document(sub_title, sub, sub_base)

    def build(self) -> str:
        order = [n for n in FIRST if n in self.schemas] + sorted(n for n in self.schemas if n not in FIRST)
        roots = []
        for name in order:  # every file's object is titled first, so that others link to it
            node, base = self.resolve(self.schemas[name], name)
            if "properties" not in node and isinstance(node.get("items"), dict):  # padding: a list of entries
                name, (node, base) = f"{name}[]", self.resolve(node["items"], base)
            if "properties" in node:
                self.documented.setdefault(id(node), name)
                roots.append((name, node, base))
        for name, node, base in roots:
            if name == LOADERS[0] and self.shared:
                self.document(SHARED, {"description": "Every loader (independent, continuous_sequence, "
                                       "discrete_sequence) takes these arguments, alike.",
                                       "properties": self.shared,
                                       "required": [k for k in node.get("required", ()) if k in self.shared]}, base)
            self.document(name, node, base)
        out = ["# Config and manifest reference", "",
               "Generated from the JSON Schemas in `schemas/` by `python -m batchloaders.cli.reference`; do "
               "not edit by hand (`tests/test_reference_docs.py` fails when this file is out of date). Each "
               "table is one object: its keys, their JSON types, whether they are required, their default "
               "when the schema states one, their bounds, and the schema's description. The guide explains "
               "the concepts; plugin types document themselves the same way in the files "
               "`batchloaders schema --plugins MODULE DIR` writes.", "", "## Contents", ""]
        out += [f"- [{title}](#{anchor(title)})" for title, _, _ in self.sections]
        for title, description, lines in self.sections:
            out += ["", f"## {title}", ""]
            if description:
                out += [description, ""]
            out += lines
        return "\n".join(out) + "\n"


def cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def anchor(title: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation but - and _ dropped, spaces to -."""
    kept = "".join(c for c in title.lower() if c.isalnum() or c in " -_")
    return kept.replace(" ", "-")


def render(directory: str | None = None) -> str:
    return Reference(load(directory or str(_schemas_dir()))).build()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when the file differs instead of writing it")
    parser.add_argument("--output", default=OUT, help=f"the file to write (default {os.path.relpath(OUT, ROOT)})")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        try:
            with open(args.output, encoding="utf-8") as f:
                current = f.read()
        except OSError:
            current = None
        if current != text:
            print(f"{args.output} is out of date: run python -m batchloaders.cli.reference", file=sys.stderr)
            return 1
        return 0
    os.makedirs(os.path.dirname(args.output), exist_ok=True)
    with open(args.output, "w", encoding="utf-8") as f:
        f.write(text)
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
