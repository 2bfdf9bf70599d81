"""Load a YAML or JSON document safely and remember where every JSON path is.

Configs and manifests are plain data: maps with string keys, lists, strings,
numbers, booleans and null. Anything else a YAML or JSON parser would accept
(tags such as ``!!set``, timestamps, recursive aliases, alias chains that
expand to billions of nodes, nesting thousands deep, NaN or infinity anywhere, huge files,
more nodes than a config or manifest holds) is refused here with an error naming the file, line and column, before any
other code walks the data.

Errors about a document name the line and column as well as the JSON path,
so the loader keeps a map from path tuples to positions (YAML, and JSON
files that the YAML reader can also read, which is nearly all of them).
"""
from __future__ import annotations

import dataclasses
import functools
import json
import math
import numbers
import os
import re
from typing import Any, Callable

import yaml

from batchloaders.errors import BatchLoaderError, Problem, json_path
from batchloaders.core.limits import (MAX_ALIAS_NODES, MAX_CONFIG_BYTES, MAX_CONFIG_NODES, MAX_DEPTH,
                                        MAX_MANIFEST_BYTES, MAX_MANIFEST_NODES, MAX_YAML_NODES)


@dataclasses.dataclass(frozen=True)
class Bounds:
    """How large a kind of document may be: its file in bytes, and its nodes (maps, lists, keys and values)."""

    kind: str  # what the messages call it
    max_bytes: int
    max_nodes: int


CONFIG = Bounds("loader config", MAX_CONFIG_BYTES, MAX_CONFIG_NODES)
MANIFEST = Bounds("manifest", MAX_MANIFEST_BYTES, MAX_MANIFEST_NODES)


@dataclasses.dataclass(frozen=True)
class Document:
    """A parsed document, the file it came from, and a path -> (line, column) map (1-based)."""

    data: Any
    source: str  # the file name used in error messages ("<dict>" for in-memory)
    base_dir: str  # directory that relative paths inside the document resolve against
    positions: dict[tuple, tuple[int, int]] | Callable[[], dict] = dataclasses.field(default_factory=dict,
                                                                                     compare=False)

    @functools.cached_property
    def lines(self) -> dict[tuple, tuple[int, int]]:
        """path -> (line, column); given as a function, worked out when first asked (an error is reported)."""
        return self.positions() if callable(self.positions) else self.positions

    def position_of(self, path: tuple) -> tuple[int, int] | None:
        """(line, column) of the closest enclosing node that has one."""
        path = tuple(path)
        while True:
            if path in self.lines:
                return self.lines[path]
            if not path:
                return None
            path = path[:-1]

    def line_of(self, path: tuple) -> int | None:
        position = self.position_of(path)
        return position[0] if position else None

    def problem(self, path: tuple, message: str) -> Problem:
        """A Problem at ``path`` of this document, with its line and column when known."""
        position = self.position_of(path)
        line, column = position if position else (None, None)
        return Problem(self.source, json_path(path), message, line, column)


def _yaml_lines(node: yaml.Node, path: tuple, out: dict) -> None:
    out[path] = (node.start_mark.line + 1, node.start_mark.column + 1)
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            if isinstance(key, yaml.ScalarNode):
                _yaml_lines(value, path + (key.value,), out)
                # A key's own position is where a user looks for it.
                out[path + (key.value,)] = (key.start_mark.line + 1, key.start_mark.column + 1)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _yaml_lines(item, path + (i,), out)


class _Refused(yaml.MarkedYAMLError):
    """Input that is valid YAML but not plain data."""


class _TooLarge(yaml.MarkedYAMLError):
    """A document with more nodes than its kind may hold."""


def _too_many_nodes(bounds: Bounds, limit: int) -> str:
    yaml_only = " written in YAML (write a large manifest as JSON)" if limit < bounds.max_nodes else ""
    return (f"found more than {limit:,} nodes (maps, lists, keys and values), the first too many here: expected "
            f"at most {limit:,} in a {bounds.kind}{yaml_only}")


class _PlainLoader(yaml.SafeLoader):
    """SafeLoader limited to plain data: no tags, no timestamps, string keys only, bounded depth.

    Also rejects a key given twice in one mapping (YAML silently keeps the last).
    """

    def __init__(self, stream, bounds: Bounds):
        super().__init__(stream)
        self._depth = 0
        self._nodes = 0
        self._bounds = bounds
        self._max_nodes = min(bounds.max_nodes, MAX_YAML_NODES)
        self.alias_targets: list[yaml.Node] = []
        self.non_finite = False  # a .nan or .inf was read

    def compose_node(self, parent, index):
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent):
            node = super().compose_node(parent, index)
            self.alias_targets.append(node)
            return node
        if event.tag is not None:  # an explicit tag: !!int, !!set, !custom, or "!"
            tag = event.tag.replace("tag:yaml.org,2002:", "!!")
            raise _Refused(None, None, f"found the tag {tag!r}: expected plain data without tags "
                                       "(remove the tag; quote the value if it is a string)", event.start_mark)
        self._nodes += 1  # counted before the node is built, so a huge list stops at the first node too many
        if self._nodes > self._max_nodes:
            raise _TooLarge(None, None, _too_many_nodes(self._bounds, self._max_nodes), event.start_mark)
        if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            if self._depth >= MAX_DEPTH:
                raise _Refused(None, None, f"found maps and lists nested more than {MAX_DEPTH} levels deep: "
                                           f"expected at most {MAX_DEPTH}", event.start_mark)
            self._depth += 1
            try:
                return super().compose_node(parent, index)
            finally:
                self._depth -= 1
        return super().compose_node(parent, index)

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            self.flatten_mapping(node)  # resolve "<<" merge keys first, as SafeLoader does
        seen = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if not isinstance(key, str):
                what = (f"a {type(key).__name__}" if isinstance(key, (list, dict))
                        else f"the {type(key).__name__} {key!r}")
                raise _Refused(None, None, f"found {what} as a key: expected a name (quote it to make it a "
                                           "string)", key_node.start_mark)
            if key in seen:
                raise _Refused(None, None, f"found duplicate key {key!r}: expected each key once (YAML would "
                                           "silently keep the last)", key_node.start_mark)
            seen[key] = True
        return super().construct_mapping(node, deep=deep)

    def construct_yaml_int(self, node):
        # Base-60 forms (1:2:3) are built digit by digit in quadratic time; no config number is
        # longer than 32 characters (2**63 has 19 digits, 0x/0b forms and underscores add some).
        if len(node.value) > 32:
            raise _Refused(None, None, f"found an integer of {len(node.value)} characters: expected a number "
                                       "TensorFlow can hold (at most 19 digits)", node.start_mark)
        try:
            return super().construct_yaml_int(node)
        except ValueError:  # more digits than Python converts
            raise _Refused(None, None, f"found an integer of {len(node.value)} characters: expected a number "
                                       "TensorFlow can hold (at most 19 digits)", node.start_mark) from None


    def construct_yaml_float(self, node):
        if len(node.value) > 400 or ":" in node.value:  # base-60 floats: quadratic, and never meant
            raise _Refused(None, None, f"found the number {node.value[:40]!r}: expected a decimal number of at "
                                       "most 400 characters (base-60 forms such as 1:30 are refused; quote a "
                                       "string)", node.start_mark)
        value = super().construct_yaml_float(node)
        self.non_finite = self.non_finite or not math.isfinite(value)  # (.nan, .inf: refused with their paths)
        return value


_PlainLoader.add_constructor("tag:yaml.org,2002:int", _PlainLoader.construct_yaml_int)
_PlainLoader.add_constructor("tag:yaml.org,2002:float", _PlainLoader.construct_yaml_float)
# Dates stay strings (a name such as 2024-01-01 must not turn into a datetime) and "="
# stays a string (SafeLoader has no constructor for YAML's value tag).
_PlainLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers
            if tag not in ("tag:yaml.org,2002:timestamp", "tag:yaml.org,2002:value")]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}


def _expansion(root: yaml.Node) -> tuple[int, int, int, yaml.Node | None]:
    """(expanded node count, distinct node count, expanded nesting depth, a node on an alias cycle or None).

    Computed once per distinct node and without recursion, so an alias chain
    that expands to billions of nodes costs as much as its text.
    """
    size: dict[int, int] = {}
    depth: dict[int, int] = {}
    on_path: set[int] = set()

    def children(node):
        if isinstance(node, yaml.MappingNode):
            return [n for pair in node.value for n in pair]
        if isinstance(node, yaml.SequenceNode):
            return list(node.value)
        return []

    stack = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        if done:
            kids = children(node)
            size[key] = 1 + sum(size[id(k)] for k in kids)
            depth[key] = (1 if isinstance(node, yaml.CollectionNode) else 0) + max(
                (depth[id(k)] for k in kids), default=0)
            on_path.discard(key)
            continue
        if key in size:
            continue
        if key in on_path:
            return 0, 0, 0, node
        on_path.add(key)
        stack.append((node, True))
        stack.extend((kid, False) for kid in children(node) if id(kid) not in size)
    return size[id(root)], len(size), depth[id(root)], None


def _is_non_finite(value: Any) -> bool:
    """Whether ``value`` is a number that is NaN or infinite (floats, and numpy's, are; integers never)."""
    if isinstance(value, float):
        return not math.isfinite(value)
    if isinstance(value, (str, int, dict, list, tuple)) or value is None:  # (every value of a parsed document)
        return False
    return (isinstance(value, numbers.Real) and not isinstance(value, numbers.Integral)
            and not math.isfinite(value))


def _non_finite_problems(data: Any, problem: Callable[[tuple, str], Problem]) -> list[Problem]:
    """One problem for every NaN or infinity in ``data``, in document order.

    No key takes one: a weight, a padding value, a step's number or a timeout of NaN passes every
    comparison a bound makes and fails only once TensorFlow runs; an infinity cannot be written in
    JSON at all, so a YAML config and its JSON form say the same.
    """
    found, stack = [], [(data, ())]
    while stack:
        value, path = stack.pop()
        if isinstance(value, dict):
            stack.extend((item, path + (key,)) for key, item in reversed(list(value.items())))
        elif isinstance(value, (list, tuple)):
            stack.extend((item, path + (i,)) for i, item in reversed(list(enumerate(value))))
        elif _is_non_finite(value):
            what = "NaN (not a number)" if math.isnan(value) else ("infinity" if value > 0 else "-infinity")
            found.append(problem(path, f"found {what}: expected a finite number"))
    return found


def check_plain(data: Any, source: str, error_cls: type[BatchLoaderError]) -> None:
    """Refuse in-memory data (a dict config) that is not plain, finite and shallow."""
    stack = [(data, (), 0)]
    non_finite = False
    while stack:
        value, path, depth = stack.pop()
        if isinstance(value, (dict, list, tuple)):
            if depth >= MAX_DEPTH:  # also ends a walk round a dict that contains itself
                raise error_cls(Problem(source, json_path(path), f"found maps and lists nested more than "
                                                                 f"{MAX_DEPTH} levels deep: expected at most "
                                                                 f"{MAX_DEPTH}"))
            if isinstance(value, dict):
                for key, item in value.items():
                    if not isinstance(key, str):
                        raise error_cls(Problem(source, json_path(path), f"found the {type(key).__name__} "
                                                                         f"{key!r} as a key: expected a string"))
                    stack.append((item, path + (key,), depth + 1))
            else:
                stack.extend((item, path + (i,), depth + 1) for i, item in enumerate(value))
        elif not non_finite and _is_non_finite(value):
            non_finite = True
    if non_finite:
        raise error_cls(_non_finite_problems(data, lambda path, message: Problem(source, json_path(path), message)))


def parse_text(text: str, source: str, error_cls: type[BatchLoaderError], *, base_dir: str = ".",
               fmt: str | None = None, bounds: Bounds = CONFIG) -> Document:
    """Parse YAML or JSON text; malformed, non-plain or too large input raises ``error_cls`` naming the line."""
    if fmt is None:
        fmt = "json" if source.endswith(".json") else "yaml"
    if fmt == "json":
        nodes = _json_nodes(text, source, error_cls, bounds)
        # Worked out only when a message needs a line: it was most of reading a JSON manifest
        # (docs/decisions/performance.md).
        positions = _YamlPositions(text, source) if nodes <= MAX_YAML_NODES else {}
        return Document(_parse_json(text, source, error_cls), source, base_dir, positions)
    data, lines = _parse_yaml(text, source, error_cls, bounds)
    return Document(data, source, base_dir, lines)


_JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')
_JSON_EMPTY = re.compile(r"[\[{]\s*[\]}]")
_JSON_TOKEN = re.compile(_JSON_STRING.pattern + "|" + _JSON_EMPTY.pattern + r"|[,:\[{]")


def _json_nodes(text: str, source: str, error_cls: type[BatchLoaderError], bounds: Bounds) -> int:
    """The nodes of a JSON text (maps, lists, keys and values; exact when it is valid), counted on the text
    before json builds any of them; more than ``bounds`` allow raises ``error_cls`` at the first too many."""
    bare = _JSON_STRING.sub('""', text)
    # Every node but the first follows a ',' or ':' or the bracket opening a non-empty map or list.
    nodes = 1 + sum(bare.count(c) for c in ",:[{") - len(_JSON_EMPTY.findall(bare))
    if nodes > bounds.max_nodes:
        line, column = _json_node_position(text, bounds.max_nodes + 1)
        raise error_cls(Problem(source, "$", _too_many_nodes(bounds, bounds.max_nodes), line, column))
    return nodes


def _json_node_position(text: str, n: int) -> tuple[int, int]:
    """(line, column) where node ``n`` (1 is the whole document) of a JSON text begins."""
    seen, at = 1, 0
    for match in _JSON_TOKEN.finditer(text):
        if len(match.group()) == 1:  # a separator or an opening bracket, not a string or an empty map or list
            seen += 1
            if seen == n:
                at = match.end()
                break
    while at < len(text) and text[at] in " \t\r\n":
        at += 1
    start = text.rfind("\n", 0, at) + 1
    return text.count("\n", 0, at) + 1, at - start + 1


@dataclasses.dataclass(frozen=True)
class _YamlPositions:
    """A JSON text's path -> (line, column) map, from YAML's reading of it (JSON is nearly always YAML
    too); {} when YAML cannot read it. A class, not a closure, so that configs still pickle."""

    text: str
    source: str

    def __call__(self) -> dict[tuple, tuple[int, int]]:
        try:
            return _parse_yaml(self.text, self.source, BatchLoaderError, MANIFEST)[1]
        except BatchLoaderError:
            return {}


def _too_deep_at(text: str) -> tuple[int | None, int | None]:
    """(line, column) of the bracket that opens level MAX_DEPTH + 1 of a JSON text, strings skipped over."""
    depth, line, start, quoted, escaped = 0, 1, 0, False, False
    for at, char in enumerate(text):
        if quoted:
            escaped, quoted = (not escaped and char == "\\"), quoted and (escaped or char != '"')
        elif char == '"':
            quoted = True
        elif char in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                return line, at - start + 1
        elif char in "]}":
            depth -= 1
        if char == "\n":
            line, start = line + 1, at + 1
    return None, None


def _parse_json(text: str, source: str, error_cls: type[BatchLoaderError]) -> Any:
    def no_duplicates(pairs):
        keys = [k for k, _ in pairs]
        dup = next((k for k in keys if keys.count(k) > 1), None)
        if dup is not None:
            raise ValueError(f"duplicate key {dup!r}")
        return dict(pairs)

    def no_constant(name):
        raise ValueError(f"found {name}, which is not a JSON number: expected a finite number")

    try:
        data = json.loads(text, object_pairs_hook=no_duplicates, parse_constant=no_constant)
    except json.JSONDecodeError as e:
        raise error_cls(Problem(source, "$", f"malformed JSON: {e.msg}", e.lineno, e.colno)) from None
    except RecursionError:
        raise error_cls(Problem(source, "$", f"malformed JSON: maps and lists nested too deep: expected at "
                                             f"most {MAX_DEPTH} levels", *_too_deep_at(text))) from None
    except ValueError as e:
        raise error_cls(Problem(source, "$", f"malformed JSON: {e}")) from None
    check_plain(data, source, error_cls)
    return data


def _parse_yaml(text: str, source: str, error_cls: type[BatchLoaderError], bounds: Bounds) -> tuple[Any, dict]:
    loader = None
    try:
        loader = _PlainLoader(text, bounds)  # reads the whole text: unprintable characters fail here
        node = loader.get_single_node()
        if node is not None:
            added, deepest, cycle = 0, 0, None
            if loader.alias_targets:
                expanded, distinct, deepest, cycle = _expansion(node)
                added = expanded - distinct
            if cycle is not None:
                raise _Refused(None, None, "found an alias inside the node it refers to (a recursive "
                                           "alias): expected plain, finite data", cycle.start_mark)
            if added > MAX_ALIAS_NODES:
                raise _Refused(None, None, f"found aliases that expand to {added:,} more nodes: expected at "
                                           f"most {MAX_ALIAS_NODES:,} (write the repeated parts out, or use "
                                           "fewer nested aliases)", loader.alias_targets[-1].start_mark)
            if deepest > MAX_DEPTH:
                raise _Refused(None, None, f"found aliases that nest maps and lists {deepest} levels deep: "
                                           f"expected at most {MAX_DEPTH}", loader.alias_targets[-1].start_mark)
        data = loader.construct_document(node) if node is not None else None
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        line, column = (mark.line + 1, mark.column + 1) if mark else (None, None)
        what = " ".join(x for x in (e.context, e.problem) if x)
        kind = {_Refused: "unsupported YAML: ", _TooLarge: ""}.get(type(e), "malformed YAML: ")
        raise error_cls(Problem(source, "$", f"{kind}{what}", line, column)) from None
    except yaml.YAMLError as e:
        raise error_cls(Problem(source, "$", f"malformed YAML: {e}")) from None
    finally:
        if loader is not None:
            loader.dispose()
    lines: dict[tuple, tuple[int, int]] = {}
    if node is not None:
        _yaml_lines(node, (), lines)
    if loader.non_finite:
        raise error_cls(_non_finite_problems(data, Document(data, source, ".", lines).problem))
    return data, lines


def load_file(path: str | os.PathLike, error_cls: type[BatchLoaderError], bounds: Bounds = CONFIG) -> Document:
    """Read a .yaml/.yml/.json file; a missing, unreadable or oversized file raises ``error_cls``.

    ``bounds``: CONFIG or MANIFEST, how large the file and its document may be.
    """
    path = os.fspath(path)
    if not path.endswith((".yaml", ".yml", ".json")):
        raise error_cls(Problem(path, "$", "unsupported file type: expected a .yaml, .yml or .json file"))
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            raw = f.read(bounds.max_bytes + 1) if size <= bounds.max_bytes else b""
    except FileNotFoundError:
        raise error_cls(Problem(path, "$", "file not found")) from None
    except OSError as e:
        raise error_cls(Problem(path, "$", f"cannot read file: {e.strerror or e}")) from None
    if size > bounds.max_bytes or len(raw) > bounds.max_bytes:  # or it grew since fstat
        raise error_cls(Problem(path, "$", f"found a file of {max(size, len(raw)):,} bytes: expected a "
                                           f"{bounds.kind} of at most {bounds.max_bytes // 2**20} MiB "
                                           "(is this a data file?)"))
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = raw[:e.start].count(b"\n") + 1
        raise error_cls(Problem(path, "$", f"found bytes that are not UTF-8 text at byte {e.start}: expected a "
                                           "UTF-8 text file (is this a data file?)", line)) from None
    return parse_text(text, path, error_cls, base_dir=os.path.dirname(os.path.abspath(path)),
                      fmt="json" if path.endswith(".json") else "yaml", bounds=bounds)
