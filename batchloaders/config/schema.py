"""Check a parsed document against the JSON Schemas in ``schemas/``.

Every schema error becomes one :class:`~batchloaders.errors.Problem` that names
the file, the JSON path, the line, what was found and what was expected, so a
user can fix a whole config in one pass::

    doc = load_file("configs/mnist.yaml", ConfigError)
    problems = schema_problems(doc, "loader_config.schema.json")

The schemas ship inside the wheel as the ``batchloaders.schemas`` package and
refer to each other by file name, so ``$ref`` resolution never touches the
network.
"""
from __future__ import annotations

import difflib
import functools
import json
import re
from typing import Any, Iterator

import jsonschema
import referencing
import referencing.exceptions
from referencing.jsonschema import DRAFT202012

from batchloaders.errors import Problem, json_path, suggest
from batchloaders.transform import registry
from batchloaders.config import stage_rules
from batchloaders.config import kinds
from batchloaders.config.document import Document
from batchloaders.config.schema_files import load_schema, schema_names, schema_text, schemas_dir
from batchloaders.config.type_schemas import generated

LOADER_CONFIG = "loader_config.schema.json"
__all__ = ["schema_problems", "schema_check", "schema_names", "load_schema", "schema_text"]


_schemas_dir = schemas_dir  # the name the command line asks (cli/main.py)


def _resource(contents: dict) -> referencing.Resource:
    # Without "$schema" a fragment is validated by our own (strict-integer) validator class;
    # with it, jsonschema would switch back to the stock 2020-12 validator inside the $ref.
    contents = {k: v for k, v in contents.items() if k != "$schema"}
    return referencing.Resource.from_contents(contents, default_specification=DRAFT202012)


@functools.cache
def _retrieve_shipped(uri: str) -> referencing.Resource:
    # Every schema's $id is its bare file name, so a sibling $ref arrives here
    # as that file name. Cached: the registry asks again on every validation.
    try:
        contents = load_schema(uri)
    except KeyError:
        raise referencing.exceptions.NoSuchResource(ref=uri) from None
    return _resource(contents)


# JSON Schema counts 2.0 as an integer; TensorFlow does not, so neither do we.
_STRICT = jsonschema.Draft202012Validator.TYPE_CHECKER.redefine(
    "integer", lambda checker, value: isinstance(value, int) and not isinstance(value, bool))
_Validator = jsonschema.validators.extend(jsonschema.Draft202012Validator, type_checker=_STRICT)


def _validator(schema_file: str, scopes=None):
    return _validator_at(schema_file, (registry.version(), stage_rules.version()),
                         frozenset(registry.ALWAYS if scopes is None else scopes))


@functools.lru_cache(maxsize=32)
def _validator_at(schema_file: str, version: tuple, scopes: frozenset):
    # The step, secondary feature, batching and args files come from the registries as they are now,
    # with the types ``scopes`` may see and every regroup stage; the shipped copies hold the built-ins only.
    types = {name: _resource(doc) for name, doc in generated(scopes).items()}

    def retrieve(uri: str) -> referencing.Resource:
        return types[uri] if uri in types else _retrieve_shipped(uri)

    references = referencing.Registry(retrieve=retrieve)
    root = types[schema_file].contents if schema_file in types else load_schema(schema_file)
    if schema_file == LOADER_CONFIG:  # every registered loader type, the shipped file's and any other
        root = kinds.typed_schema(root)
    return _Validator(root, registry=references)


def schema_problems(doc: Document, schema_file: str) -> list[Problem]:
    """Every way ``doc.data`` breaks ``schema_file``, sorted by JSON path; empty when valid."""
    return schema_check(doc, schema_file)[0]


def schema_check(doc: Document, schema_file: str, scopes=None) -> tuple[list[Problem], set[tuple]]:
    """(problems, invalid paths): the paths whose values broke the schema or are missing.

    Semantic checks run on everything outside the invalid paths, so that one
    run reports structural and semantic problems together. An unknown key
    invalidates nothing (no check reads it); a missing required key
    invalidates just that key.
    """
    errors = list(_validator(schema_file, scopes).iter_errors(doc.data))
    invalid: set[tuple] = set()
    for error in errors:
        parts = tuple(error.absolute_path)
        if error.validator == "additionalProperties":
            continue
        if error.validator == "required" and isinstance(error.instance, dict):
            invalid.update(parts + (key,) for key in error.validator_value if key not in error.instance)
        else:
            invalid.add(parts)
    return _problems(doc, errors), invalid


def _problems(doc: Document, errors: list) -> list[Problem]:
    typed_paths = {tuple(e.absolute_path) for e in errors if e.validator == "type"}
    seen: set[tuple[tuple, str]] = set()
    found: list[tuple[tuple, str]] = []
    for error in errors:
        parts = tuple(error.absolute_path)
        # A value of the wrong type fails its enum, minimum, ... too: the type
        # error alone says what to fix.
        if error.validator != "type" and parts in typed_paths:
            continue
        for where, message in _explain(error):
            # One $ref'd schema can be reached through two branches (base
            # properties and an if/then), which repeats the same complaint.
            if (where, message) not in seen:
                seen.add((where, message))
                found.append((where, message))
    found.sort(key=lambda item: (_sort_key(item[0]), item[1]))
    return [doc.problem(where, message) for where, message in found]


def _sort_key(parts: tuple) -> tuple:
    # Numeric order for list indices ([2] before [10]); keys sort by name.
    return tuple((0, p, "") if isinstance(p, int) else (1, 0, str(p)) for p in parts)


# An unknown key's message names this many allowed keys, the closest first, and the page listing them all.
CLOSEST_KEYS = 3
REFERENCE = "docs/reference.md"


def _unknown_key_hint(key: str, allowed: list[str]) -> str:
    if len(allowed) <= CLOSEST_KEYS:
        return f"{suggest(key, allowed)}; allowed keys: {', '.join(allowed)}"
    closest = difflib.get_close_matches(key, allowed, n=CLOSEST_KEYS, cutoff=0)
    return f"{suggest(key, allowed)}; closest allowed keys: {', '.join(closest)}; see the reference: {REFERENCE}"


def _explain(error: jsonschema.ValidationError) -> Iterator[tuple[tuple, str]]:
    """Yield (path parts, message) for one schema error; some errors split into several."""
    parts = tuple(error.absolute_path)
    schema, value, instance = error.schema, error.validator_value, error.instance
    kind = error.validator
    if kind == "additionalProperties":
        allowed = list(schema.get("properties", {}))
        patterns = list(schema.get("patternProperties", {}))
        for key in instance:
            if key in allowed or any(re.search(p, str(key)) for p in patterns):
                continue
            if allowed:
                hint = _unknown_key_hint(str(key), allowed)
            else:
                hint = f"; {schema.get('description', 'no keys are allowed here')}"
            yield parts + (str(key),), f"unknown key {key!r}{hint}"
    elif kind == "required":
        for key in value:
            if key not in instance:
                yield parts, f"missing required key {key!r}{_reason(schema)}"
    elif kind == "enum":
        names = [v for v in value if isinstance(v, str)]
        hint = suggest(instance, names) if isinstance(instance, str) else ""
        choices = _choices(value)
        what = schema.get("title")
        found = f"unknown {what} {_literal(instance)}" if what else f"unexpected value {_literal(instance)}"
        yield parts, f"{found}{hint}; expected one of: {choices}"
    elif kind == "const":
        yield parts, f"expected {_literal(value)}, found {_literal(instance)}{_reason(schema)}"
    elif kind == "type":
        yield parts, f"expected {_type_names(value)}, found {_found(instance)}"
    elif kind == "pattern":
        what = schema.get("title", "value")
        examples = schema.get("examples")
        expected = f"a form like {' or '.join(examples)}" if examples else f"a string matching {value}"
        yield parts, f"invalid {what} {instance!r}; expected {expected}"
    elif kind in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        op = {"minimum": ">=", "maximum": "<=", "exclusiveMinimum": ">", "exclusiveMaximum": "<"}[kind]
        yield parts, f"expected {_number_noun(schema)} {op} {value}, found {_literal(instance)}"
    elif kind == "minProperties":
        yield parts, f"expected at least {value} key{'s' * (value != 1)}{_reason(schema)}, found {len(instance)}"
    elif kind == "dependentRequired":
        for key, needs in value.items():
            missing = [n for n in needs if key in instance and n not in instance]
            if missing:
                yield parts, f"{key!r} needs {', '.join(map(repr, missing))} too: missing required key {missing[0]!r}"
    elif kind == "maxItems":
        yield parts, f"expected at most {value} items, found {len(instance)}"
    elif kind == "minItems":
        yield parts, f"expected at least {value} item{'s' * (value != 1)}, found {len(instance)}"
    elif kind == "minLength":
        expected = "a non-empty string" if value == 1 else f"a string of at least {value} characters"
        yield parts, f"expected {expected}, found {_literal(instance)}"
    elif kind == "maxProperties":
        # With additionalProperties false and no properties, that error already
        # names every key; counting them again is noise.
        if not (schema.get("additionalProperties") is False and not schema.get("properties")):
            yield parts, f"expected at most {value} keys, found {len(instance)}"
    elif kind == "uniqueItems":
        for index, item in enumerate(instance):
            if item in instance[:index]:
                yield parts + (index,), f"duplicate item {_literal(item)}; items must be unique"
    elif kind in ("anyOf", "oneOf"):
        expected = " or ".join(_expected(branch) for branch in value)
        yield parts, f"expected {expected}, found {_found(instance)}"
    else:
        yield parts, error.message


def _reason(schema: dict) -> str:
    # Conditional fragments (the then-branches) have no "type" of their own and
    # carry why the rule applies in their description.
    if "type" not in schema and schema.get("description"):
        return f" ({schema['description']})"
    return ""


def _literal(value: Any) -> str:
    """A value as the user would write it: strings quoted, null/true/false as in JSON."""
    if isinstance(value, str):
        text = repr(value)
        return text if len(text) <= 60 else text[:57] + "...'"
    if value is None or isinstance(value, (bool, int, float)):
        return json.dumps(value)
    return {dict: "an object", list: "an array"}.get(type(value), repr(value))


def _choices(values: list) -> str:
    """Enum members as a plain list: names unquoted, null as in JSON."""
    return ", ".join(v if isinstance(v, str) else json.dumps(v) for v in values)


def _found(value: Any) -> str:
    """A value with its JSON type, e.g. "string 'abc'" or "integer 3"."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"boolean {json.dumps(value)}"
    if isinstance(value, int):
        return f"integer {value}"
    if isinstance(value, float):
        return f"number {value}"
    if isinstance(value, str):
        return f"string {_literal(value)}"
    return {dict: "object", list: "array"}.get(type(value), type(value).__name__)


def _type_names(types: str | list) -> str:
    return " or ".join([types] if isinstance(types, str) else types)


def _number_noun(schema: dict) -> str:
    types = schema.get("type", [])
    return "an integer" if "integer" in ([types] if isinstance(types, str) else types) else "a number"


def _expected(schema: dict) -> str:
    """Short phrase for what one anyOf/oneOf branch accepts."""
    if "const" in schema:
        return _literal(schema["const"])
    if "enum" in schema:
        return "one of: " + _choices(schema["enum"])
    if "minimum" in schema and "maximum" in schema:
        return f"{_number_noun(schema)} from {schema['minimum']} to {schema['maximum']}"
    if "minimum" in schema:
        return f"{_number_noun(schema)} >= {schema['minimum']}"
    if "type" in schema:
        return _type_names(schema["type"])
    return "a valid value"
