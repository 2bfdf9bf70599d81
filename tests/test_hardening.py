"""Any config or manifest, however wrong, gets a located BatchLoaderError, with every problem at once.

Each case checks the error's file, JSON path, line and column and the words that say what was
found and what was expected; none may raise anything but a BatchLoaderError.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from batchloaders import BatchLoaderError, ConfigError, ManifestError, build_input_fn, load_config
from batchloaders.core import limits
from batchloaders.config import document
from batchloaders.config.document import MANIFEST, parse_text
from batchloaders.core.limits import (MAX_CONFIG_BYTES, MAX_CONFIG_NODES, MAX_MANIFEST_BYTES,
                                        MAX_MANIFEST_NODES)
from batchloaders.config.manifest import load_manifest
from batchloaders.config.schema import load_schema, schema_names
from conftest import collect, example, feature, loader_config, sequence_example, write_manifest, write_records

LAUGHS = 'a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]\n' + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 9)}]\n" for i in range(7))

# (description, YAML text, line, column, words of the message)
YAML_REFUSED = [
    ("int tag", "type: independent\nargs: !!int abc\n", 2, 7, "found the tag '!!int': expected plain data"),
    ("timestamp tag", "name: !!timestamp 2001-12-14\n", 1, 7, "found the tag '!!timestamp'"),
    ("set tag", "args:\n  x: !!set {a, b}\n", 2, 6, "found the tag '!!set'"),
    ("binary tag", "name: !!binary aGVsbG8=\n", 1, 7, "found the tag '!!binary'"),
    ("python tag", "name: !!python/object/apply:os.system [ls]\n", 1, 7, "found the tag '!!python/object/apply"),
    ("custom tag", "type: !mine independent\n", 1, 7, "found the tag '!mine'"),
    ("non-specific tag", "type: ! independent\n", 1, 7, "found the tag '!'"),
    ("recursive alias", "args: &x\n  self: *x\n", 1, 7, "recursive alias"),
    ("recursive list alias", "model:\n  inputs: &x [*x]\n", 2, 11, "recursive alias"),
    ("billion laughs", LAUGHS, 7, 4, "found aliases that expand to 54,480,987 more nodes: expected at most 100,000"),
    ("alias chain too deep", "".join(f"a{i}: &a{i} [{f'*a{i - 1}' if i else '1'}]\n" for i in range(70)), 69, 6,
     "nest maps and lists 71 levels deep: expected at most 64"),
    ("deep flow nesting", "[" * 10_000, 1, 65, "nested more than 64 levels deep: expected at most 64"),
    ("deep block nesting", "".join("  " * i + f"k{i}:\n" for i in range(80)) + "  " * 80 + "x: 1\n", 65, 129,
     "nested more than 64 levels deep"),
    ("integer key", "1: x\n", 1, 1, "found the int 1 as a key: expected a name"),
    ("boolean key", "on: x\n", 1, 1, "found the bool True as a key: expected a name"),
    ("list key", "? [a]\n: x\n", 1, 3, "found a list as a key: expected a name"),
    ("duplicate key", "type: a\ntype: b\n", 2, 1, "found duplicate key 'type'"),
    ("huge integer", "args:\n  epochs: " + "9" * 5000 + "\n", 2, 11, "found an integer of 5000 characters"),
    ("base-60 integer", "args:\n  epochs: 1" + ":1" * 300_000 + "\n", 2, 11, "found an integer of 600001 characters"),
    ("base-60 float", "args:\n  epochs: 1:30.5\n", 2, 11, "base-60 forms such as 1:30 are refused"),
    ("long hex integer", "args:\n  seed: 0x" + "f" * 300 + "\n", 2, 9, "found an integer of 302 characters"),
    ("two documents", "type: a\n---\ntype: b\n", 2, 1, "expected a single document"),
    ("unclosed list", "type: independent\nargs: [\n", 3, 1, "malformed YAML"),
]


@pytest.mark.parametrize("name,text,line,column,words", YAML_REFUSED, ids=[c[0] for c in YAML_REFUSED])
def test_unsafe_or_broken_yaml_is_a_located_config_error(tmp_path, name, text, line, column, words):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    (problem,) = info.value.problems
    assert (problem.file, problem.path, problem.line, problem.column) == (str(path), "$", line, column)
    assert words in problem.message, problem.message


def test_billion_laughs_is_refused_before_it_expands(monkeypatch):
    """8 lines that would expand to 54 million nodes: refused while composing, before any Python object is
    built (no timing: the constructor is made to fail if it is ever reached)."""
    from batchloaders.config import document

    def never(self, node):
        raise AssertionError("the document was constructed: the aliases were expanded")

    monkeypatch.setattr(document._PlainLoader, "construct_document", never)
    with pytest.raises(ConfigError, match="expand to 54,480,987 more nodes"):
        parse_text(LAUGHS, "laughs.yaml", ConfigError)


def test_plain_yaml_still_loads_dates_as_strings_and_merges_keys():
    doc = parse_text("name: 2024-01-01\nbase: &b {x: 1}\nc:\n  <<: *b\n  y: [*b]\neq: =\n", "c.yaml", ConfigError)
    assert doc.data == {"name": "2024-01-01", "base": {"x": 1}, "c": {"x": 1, "y": [{"x": 1}]}, "eq": "="}
    assert doc.position_of(("c", "y")) == (5, 3)


# (description, JSON text, line, column or None, words)
JSON_REFUSED = [
    ("NaN", '{"type": NaN}', None, None, "found NaN, which is not a JSON number: expected a finite number"),
    ("Infinity", '{"type": -Infinity}', None, None, "found -Infinity, which is not a JSON number"),
    ("deep nesting", "[" * 10_000, 1, 65, "nested too deep: expected at most 64 levels"),
    ("deep nesting past a string", '{"a": "[[{{",\n "b":' + " [" * 10_000, 2, 133,
     "nested too deep: expected at most 64 levels"),
    ("nesting past the limit", "[" * 65 + "]" * 65, None, None, "nested more than 64 levels deep"),
    ("duplicate key", '{"a": 1, "a": 2}', None, None, "duplicate key 'a'"),
    ("syntax", '{\n  "type": "independent",\n  "args": {,}\n}\n', 3, 12, "malformed JSON: Expecting property name"),
]


@pytest.mark.parametrize("name,text,line,column,words", JSON_REFUSED, ids=[c[0] for c in JSON_REFUSED])
def test_bad_json_is_a_config_error(tmp_path, name, text, line, column, words):
    path = tmp_path / "c.json"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    (problem,) = info.value.problems
    assert (problem.file, problem.line, problem.column) == (str(path), line, column)
    assert words in problem.message, problem.message


def test_files_that_are_not_text_are_refused(tmp_path):
    binary = tmp_path / "c.yaml"
    binary.write_bytes(b"type: independent\n\xff\xfe\x00garbage")
    with pytest.raises(ConfigError, match=r"c\.yaml: \$: found bytes that are not UTF-8 text at byte 18: expected "
                                          r"a UTF-8 text file \(is this a data file\?\) \(line 2\)"):
        load_config(binary)


def _sparse(path, size):
    with open(path, "wb") as f:  # no bytes written: a file that is read past its first byte would be all NULs
        f.truncate(size)


def _padded_config(path, size):
    text = "type: independent\n"
    path.write_text(text + "#" * (size - len(text) - 1) + "\n")


# (description, file name, writes a file of that size, loads it, size, message)
TOO_MANY_BYTES = [
    ("a config one byte over its bound", "c.yaml", _padded_config, load_config, MAX_CONFIG_BYTES + 1,
     "found a file of 1,048,577 bytes: expected a loader config of at most 1 MiB (is this a data file?)"),
    ("a config of 10 MiB", "c.json", _sparse, load_config, 10 * 2**20,
     "found a file of 10,485,760 bytes: expected a loader config of at most 1 MiB (is this a data file?)"),
    ("a manifest one byte over its bound", "m.json", _sparse, load_manifest, MAX_MANIFEST_BYTES + 1,
     "found a file of 67,108,865 bytes: expected a manifest of at most 64 MiB (is this a data file?)"),
]


@pytest.mark.parametrize("name,file,write,load,size,message", TOO_MANY_BYTES, ids=[c[0] for c in TOO_MANY_BYTES])
def test_documents_over_their_size_are_refused_before_parsing(tmp_path, name, file, write, load, size, message):
    path = tmp_path / file
    write(path, size)
    with pytest.raises(BatchLoaderError) as info:
        load(path)
    (problem,) = info.value.problems
    assert (problem.file, problem.path, problem.message, problem.line) == (str(path), "$", message, None)


def test_a_config_at_its_size_bound_is_read(tmp_path):
    path = tmp_path / "c.yaml"
    _padded_config(path, MAX_CONFIG_BYTES)
    with pytest.raises(ConfigError, match="missing required key 'args'"):  # parsed, then checked
        load_config(path)


def _zeros(fmt, key, n):
    """A document of one key holding a list of n zeros: its nodes are the map, the key, the list and the zeros
    (the zero at index i is node i + 4), so node N is at column len(head) + 3 * (N - 4) + 1 of line 1."""
    head = f'{{"{key}": [' if fmt == "json" else f"{key}: ["
    return head + "0, " * (n - 1) + "0" + ("]}" if fmt == "json" else "]") + "\n", len(head)


def _node_column(head, n):
    return head + 3 * (n - 4) + 1


TOO_MANY_NODES = [
    ("a YAML config", False, "yaml", "junk", ConfigError, lambda: MAX_CONFIG_NODES, None,
     "found more than 20,000 nodes (maps, lists, keys and values), the first too many here: expected at most "
     "20,000 in a loader config"),
    ("a JSON config", False, "json", "junk", ConfigError, lambda: MAX_CONFIG_NODES, None,
     "found more than 20,000 nodes (maps, lists, keys and values), the first too many here: expected at most "
     "20,000 in a loader config"),
    ("a JSON manifest (over the bound only: json reads 4 million values in seconds)", True, "json", "files",
     ManifestError, lambda: MAX_MANIFEST_NODES, None,
     "found more than 4,000,000 nodes (maps, lists, keys and values), the first too many here: expected at most "
     "4,000,000 in a manifest"),
    ("a YAML manifest (bound lowered: YAML's own bound is 200,000)", True, "yaml", "files", ManifestError,
     lambda: 1000, 1000,
     "found more than 1,000 nodes (maps, lists, keys and values), the first too many here: expected at most "
     "1,000 in a manifest written in YAML (write a large manifest as JSON)"),
]


@pytest.mark.parametrize("name,manifest,fmt,key,error,bound,yaml_bound,message", TOO_MANY_NODES,
                         ids=[c[0] for c in TOO_MANY_NODES])
def test_documents_with_more_nodes_than_their_bound_are_refused_at_the_first_too_many(
        monkeypatch, name, manifest, fmt, key, error, bound, yaml_bound, message):
    if yaml_bound:
        monkeypatch.setattr(document, "MAX_YAML_NODES", yaml_bound)
    bounds = {"bounds": MANIFEST} if manifest else {}
    limit = bound()
    at_bound, head = _zeros(fmt, key, limit - 3)
    if limit < 100_000:  # one value under the bound is read
        assert parse_text(at_bound, f"d.{fmt}", error, **bounds).data == {key: [0] * (limit - 3)}
    over, head = _zeros(fmt, key, limit - 2)
    with pytest.raises(error) as info:
        parse_text(over, f"d.{fmt}", error, **bounds)
    (problem,) = info.value.problems
    assert (problem.file, problem.path, problem.message, problem.line, problem.column) == (
        f"d.{fmt}", "$", message, 1, _node_column(head, limit + 1))


@pytest.mark.parametrize("fmt", ["yaml", "json"])
def test_a_huge_list_in_a_config_stops_parsing_at_the_bound(tmp_path, fmt):
    """Just under the config's byte bound, 340,000 zeros: refused after 20,000 nodes, so the peak of allocations
    stays small (PyYAML would hold about 1 KB per node of the whole list before any check). No wall-clock bound:
    a loaded CI machine would make it fail for nothing; the allocation peak is what shows parsing stopped."""
    import tracemalloc

    text, _ = _zeros(fmt, "junk", 340_000)
    assert len(text) < MAX_CONFIG_BYTES
    path = tmp_path / f"c.{fmt}"
    path.write_text(text)
    tracemalloc.start()
    try:
        with pytest.raises(ConfigError, match="found more than 20,000 nodes"):
            load_config(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 40 * 2**20, f"{peak:,} bytes"


def test_in_memory_configs_are_checked_too():
    looped: dict = {"type": "independent"}
    looped["args"] = looped
    with pytest.raises(ConfigError, match=r"<dict>: \$(\.args)+: found maps and lists nested more than 64 levels"):
        load_config(looped)
    with pytest.raises(ConfigError, match=r"<dict>: \$\.args: found the int 3 as a key: expected a string"):
        load_config({"type": "independent", "args": {3: "x"}})


# ---------------------------------------------------------------------------------------------
# Bounds: every number of every schema has a maximum, taken from batchloaders.core.limits.

def numbers(schema, where="#"):
    """(where, node) of every integer-typed node in a schema (anyOf branches included)."""
    if isinstance(schema, dict):
        types = schema.get("type")
        if types == "integer" or (isinstance(types, list) and "integer" in types):
            yield where, schema
        for key, value in schema.items():
            yield from numbers(value, f"{where}/{key}")
    elif isinstance(schema, list):
        for i, value in enumerate(schema):
            yield from numbers(value, f"{where}/{i}")


EXPECTED_MAXIMA = {
    "common_args.schema.json#/definitions/target_batch_size": limits.MAX_BATCH_SIZE,
    "common_args.schema.json#/definitions/epochs": limits.MAX_COUNT,
    "common_args.schema.json#/definitions/num_parallel_reads/anyOf/0": limits.MAX_THREADS,
    "common_args.schema.json#/definitions/num_parallel_parses/anyOf/0": limits.MAX_THREADS,
    "common_args.schema.json#/definitions/num_read_buffer_bytes": limits.MAX_READ_BUFFER_BYTES,
    "common_args.schema.json#/definitions/num_prefetch": limits.MAX_PREFETCH,
    "common_args.schema.json#/definitions/num_shuffle_buffer_elements": limits.MAX_SHUFFLE_BUFFER,
    "common_args.schema.json#/definitions/num_filenames_shuffle_buffer": limits.MAX_SHUFFLE_BUFFER,
    "common_args.schema.json#/definitions/num_mix_files": limits.MAX_OPEN_FILES,
    "common_args.schema.json#/definitions/num_interleave_out_buffer_elements": limits.MAX_COUNT,
    "common_args.schema.json#/definitions/num_interleave_in_buffer_elements": limits.MAX_COUNT,
    "common_args.schema.json#/definitions/seed": limits.MAX_SEED,
    "continuous_sequence_args.schema.json#/properties/min_window": limits.MAX_COUNT,
    "continuous_sequence_args.schema.json#/properties/max_window": limits.MAX_COUNT,
    "continuous_sequence_args.schema.json#/properties/stride": limits.MAX_COUNT,
    "discrete_sequence_args.schema.json#/properties/min_window": limits.MAX_COUNT,
    "discrete_sequence_args.schema.json#/properties/max_window": limits.MAX_COUNT,
    "manifest_feature.schema.json#/properties/shape/items": limits.MAX_DIM,
    "manifest.schema.json#/definitions/data_file/properties/num_records": limits.MAX_FILE_COUNT,
    "manifest.schema.json#/definitions/data_file/properties/size_bytes": limits.MAX_FILE_COUNT,
    "manifest.schema.json#/definitions/data_file/properties/index/properties/size_bytes": limits.MAX_FILE_COUNT,
    "manifest_feature.schema.json#/definitions/raw_args/properties/len": limits.MAX_COUNT,
    "padding.schema.json#/definitions/pad_spec/properties/shape/items": limits.MAX_DIM,
    "secondary_const.schema.json#/properties/shape/items": limits.MAX_DIM,
    # Processing steps: counts and sizes are int32 like every shape; an axis is bounded by TensorFlow's
    # largest rank (254); an id by its int64 dtype.
    "step_decode_image.schema.json#/properties/channels": None,  # an enum: 1, 3 or 4
    "step_decode_image.schema.json#/properties/size/items": limits.MAX_DIM,
    "step_decode_image.schema.json#/properties/resize/items": limits.MAX_DIM,
    "step_decode_image.schema.json#/properties/crop/items": limits.MAX_DIM,
    "step_frame_stack.schema.json#/properties/left": limits.MAX_COUNT,
    "step_frame_stack.schema.json#/properties/right": limits.MAX_COUNT,
    "step_lookup.schema.json#/properties/oov_id": limits.INT64_MAX,
    "step_normalize.schema.json#/properties/axis": 253,
    "step_normalize.schema.json#/properties/axis/items": 253,
    "step_one_hot.schema.json#/properties/depth": limits.MAX_DIM,
    "step_pad_to.schema.json#/properties/size": limits.MAX_DIM,
    "step_pad_to.schema.json#/properties/axis": 253,
    "step_reshape.schema.json#/properties/shape/items": limits.MAX_DIM,
    "step_reverse.schema.json#/properties/axis": 253,
    "step_subsample.schema.json#/properties/every": limits.MAX_COUNT,
    "step_subsample.schema.json#/properties/offset": limits.MAX_COUNT,
    "bucketing.schema.json#/properties/boundaries/items": limits.MAX_DIM,
    "bucketing.schema.json#/properties/batch_sizes/items": limits.MAX_BATCH_SIZE,
    "bucketing.schema.json#/properties/max_tokens": limits.MAX_COUNT,
    "packing.schema.json#/properties/length": 2**20,  # one row of a batch; rows x length is bounded per batch
    "packing.schema.json#/properties/groups/items/properties/length": 2**20,  # as packing.length, per group
    "chunking.schema.json#/definitions/steps": limits.MAX_COUNT,  # size, step, min_size (block and per tensor)
    "chunking.schema.json#/definitions/context/items": limits.MAX_COUNT,
    "chunking.schema.json#/properties/shuffle_buffer": limits.MAX_SHUFFLE_BUFFER,
    "segmenting.schema.json#/properties/num_unroll": 2**20,  # steps of one segment, one batch row's worth
    "segmenting.schema.json#/properties/batch_size": limits.MAX_BATCH_SIZE,
    # The tf.data service: consumers (trainers) and requests in flight, far beyond any real job.
    "service.schema.json#/properties/num_consumers": 65536,
    "service.schema.json#/properties/consumer_index": 65535,
    "service.schema.json#/properties/max_outstanding_requests": 65536,
    "common_args.schema.json#/definitions/shuffle_window_files": 1000000,  # a list dataset's most files
    "dataset.schema.json#/definitions/dir_args/properties/cache/properties/max_bytes": 9223372036854775807,
    "dataset.schema.json#/definitions/list_args/properties/cache/properties/max_bytes": 9223372036854775807,
    "dataset.schema.json#/definitions/dir_args/properties/reads_in_flight": 1024,
    "dataset.schema.json#/definitions/list_args/properties/reads_in_flight": 1024,
}


def test_every_schema_number_has_the_documented_maximum():
    found = {}
    for name in schema_names():
        for where, node in numbers(load_schema(name)):
            found[name + where] = node.get("maximum")
    assert found == EXPECTED_MAXIMA
    for name in schema_names():  # and every shape list is bounded in rank
        if name == "bucketing.schema.json":  # lists of lengths and batch sizes, not shapes: 1024 buckets at most
            assert json.dumps(load_schema(name)).count('"maxItems": 102') == 3
            continue
        if name == "chunking.schema.json":  # context: [left, right], exactly two; 1024 tensor entries at most
            schema = load_schema(name)
            assert schema["definitions"]["context"]["maxItems"] == 2
            assert schema["properties"]["tensors"]["maxItems"] == 1024
            continue
        if name == "step_decode_image.schema.json":  # size, resize and crop: [height, width], exactly two
            assert json.dumps(load_schema(name)).count('"minItems": 2, "maxItems": 2') == 3
            continue
        text = json.dumps(load_schema(name))
        shapes = text.count('"items": {"type": "integer"') + text.count('"items": {"type": ["integer", "null"]')
        assert text.count(f'"maxItems": {limits.MAX_RANK}') == shapes, name  # the rank bound, as core/limits.py says


@pytest.fixture
def data(tmp_path):
    """Records r = 0..5 of one file: id = r, x = [r, r + 0.5]."""
    d = tmp_path / "data"
    write_manifest(d, [feature("id", "int64", [], "int"), feature("x", "float32", [2], "float")])
    write_records(d / "a.tfrecords", [example(id=("int", [r]), x=("float", [r, r + 0.5])) for r in range(6)])
    return d


def base(data, **args):
    return loader_config(data, [("id", "id"), ("x", "x")], inputs=["x"], targets=["id"], **args)


# (argument, the smallest value refused, expected words)
TOO_BIG = [
    ("target_batch_size", 2**20 + 1, "expected an integer <= 1048576, found 1048577"),
    ("target_batch_size", 10**9, "expected an integer <= 1048576, found 1000000000"),
    ("num_parallel_reads", 2**31, "expected an integer from 1 to 1024 or -1, found integer 2147483648"),
    ("num_parallel_parses", 1025, "expected an integer from 1 to 1024 or -1, found integer 1025"),
    ("num_read_buffer_bytes", 2**30 + 1, "expected an integer <= 1073741824"),
    ("num_prefetch", 4097, "expected an integer <= 4096, found 4097"),
    ("epochs", 2**31, "expected an integer <= 2147483647, found 2147483648"),
    ("num_interleave_out_buffer_elements", 2**63, "expected an integer <= 2147483647"),
    ("seed", 2**63, "expected an integer <= 9223372036854775807, found 9223372036854775808"),
    ("seed", -1, "expected an integer >= 0, found -1"),
]


@pytest.mark.parametrize("key,value,words", TOO_BIG, ids=[f"{k}={v}" for k, v, _ in TOO_BIG])
def test_numbers_past_their_bound_are_refused(data, key, value, words):
    with pytest.raises(ConfigError) as info:
        build_input_fn(base(data, **{key: value}))
    assert [(p.path, words in p.message) for p in info.value.problems] == [(f"$.args.{key}", True)], \
        info.value.problems


def test_shuffle_buffers_past_their_bound_are_refused(data):
    cfg = base(data, shuffle=True, num_shuffle_buffer_elements=2**24 + 1, num_filenames_shuffle_buffer=2**30,
               num_mix_files=1025)
    with pytest.raises(ConfigError) as info:
        build_input_fn(cfg)
    assert [str(p).split(": ", 1)[1] for p in info.value.problems] == [
        "$.args.num_filenames_shuffle_buffer: expected an integer <= 16777216, found 1073741824",
        "$.args.num_mix_files: expected an integer <= 1024, found 1025",
        "$.args.num_shuffle_buffer_elements: expected an integer <= 16777216, found 16777217",
    ]


def test_every_bound_at_its_maximum_runs(data):
    # The largest value of every reading and shuffling argument at once still gives the right batch
    # (a value that crashed TensorFlow would kill this test run).
    cfg = base(data, target_batch_size=2**20, epochs=1, num_parallel_reads=1024, num_parallel_parses=1024,
               num_prefetch=4096, num_read_buffer_bytes=2**24, seed=2**63 - 1, shuffle=True,
               num_shuffle_buffer_elements=2**24, num_filenames_shuffle_buffer=2**24, num_mix_files=1024,
               num_interleave_out_buffer_elements=2**31 - 1, num_interleave_in_buffer_elements=2**31 - 1)
    ((x, ids),) = collect(build_input_fn(cfg)())
    order = np.argsort(ids["id"])
    np.testing.assert_array_equal(ids["id"][order], np.arange(6))
    np.testing.assert_array_equal(x["x"][order], np.stack([np.arange(6), np.arange(6) + 0.5], 1))


# Products of bounded numbers: what the schema cannot say. (description, config changes, path, words)
def _big_manifest(data):
    write_manifest(data, [feature("id", "int64", [], "int"), feature("x", "float32", [2], "float"),
                          feature("img", "float32", [224, 224, 3], "float")])
    return {}


TOO_MUCH = [
    ("batch of images", dict(target_batch_size=2**20, primary=[("img", "img")], inputs=["img"]),
     "$.args.target_batch_size",
     "one batch of 1048576 examples would hold at least 588 GiB (602,112 bytes per example, 602,112 of them in "
     "tensor 'img', counting variable axes as 1 step): expected at most 4 GiB; lower target_batch_size"),
    ("huge const", dict(secondary_features=[{"to_name": "c", "type": "const",
                                             "args": {"shape": [2**31 - 1, 2**31 - 1], "dtype": "float64"}}],
                        inputs=["x", "c"]),
     "$.args.target_batch_size", "would hold at least 68,719,476,672 GiB (36,893,488,113,059,364,888 bytes per example"),
    ("huge padded shape", dict(padding=[{"tensor": "x", "shape": [2**31 - 1]}]), "$.args.target_batch_size",
     "at least 16 GiB (8,589,934,596 bytes per example, 8,589,934,588 of them in tensor 'x'"),
    ("shuffle buffer", dict(primary=[("img", "img")], inputs=["img"], shuffle=True,
                            num_shuffle_buffer_elements=2**24, num_filenames_shuffle_buffer=1, num_mix_files=1),
     "$.args.num_shuffle_buffer_elements",
     "a shuffle buffer of 16,777,216 examples of at least 602,112 bytes would hold at least 9,408 GiB: expected "
     "at most 16 GiB; lower num_shuffle_buffer_elements"),
    ("step that makes a huge tensor, later cut", dict(
        target_batch_size=1024, processing_steps=[
            {"tensor": "hot", "type": "one_hot", "args": {"depth": 2**21}},
            {"tensor": "hot", "type": "slice", "args": {"slice": "[:2]"}}], primary=[("id", "hot"), ("x", "x")],
        inputs=["x", "hot"]),
     "$.args.processing_steps[0]",
     "step 'one_hot' on tensor 'hot' makes float32 [2097152] per example: a batch of 1024 holds at least 8 GiB"),
    ("read buffers", dict(shuffle=True, num_shuffle_buffer_elements=1, num_filenames_shuffle_buffer=1,
                          num_mix_files=1024, num_read_buffer_bytes=2**30), "$.args.num_read_buffer_bytes",
     "1024 open files (num_mix_files) with read buffers of 1,073,741,824 bytes would hold 1,024 GiB"),
]


@pytest.mark.parametrize("name,changes,path,words", TOO_MUCH, ids=[c[0] for c in TOO_MUCH])
def test_sizes_that_cannot_fit_in_memory_are_refused(data, name, changes, path, words):
    _big_manifest(data)
    changes = dict(changes)
    primary = changes.pop("primary", [("id", "id"), ("x", "x")])
    inputs = changes.pop("inputs", ["x"])
    targets = ["id"] if any(t == "id" for _, t in primary) else []
    cfg = loader_config(data, primary, inputs=inputs, targets=targets, **changes)
    with pytest.raises(ConfigError) as info:
        load_config(cfg)
    assert [(p.path, words in p.message) for p in info.value.problems] == [(path, True)], info.value.problems


def test_window_axes_count_at_max_window(tmp_path):
    from seqdata import sequence_config, write_continuous

    write_continuous(tmp_path, [4])
    cfg = sequence_config(tmp_path, "continuous_sequence", [("x", "x")], inputs=["x"], lo=1, hi=2**31 - 1,
                          padding=True, target_batch_size=2)
    with pytest.raises(ConfigError, match=r"\$\.args\.target_batch_size: one batch of 2 examples would hold at least "
                                          r"32 GiB .* counting variable axes as 1 step and window axes as "
                                          r"max_window\): expected at most 4 GiB; lower target_batch_size, "
                                          r"max_window or the padded shapes"):
        load_config(cfg)


# Manifests: (description, feature, path, words)
BAD_FEATURES = [
    ("zero-length var_len step", feature("f", "float32", [0], "float", var_len=True), "$.features[0].shape[0]",
     "expected an integer >= 1, found 0"),
    ("zero-length axis", feature("f", "float32", [3, 0], "float", var_len=False), "$.features[0].shape[1]",
     "expected an integer >= 1, found 0"),
    ("axis past int32", feature("f", "float32", [2**31], "float", var_len=False), "$.features[0].shape[0]",
     "expected an integer <= 2147483647, found 2147483648"),
    ("too many elements", feature("f", "float32", [2**31 - 1, 2**31 - 1], "float", var_len=False),
     "$.features[0].shape", "found 4,611,686,014,132,420,609 elements in one record's value of this feature"),
    ("too many bytes", feature("f", "float64", [2**28, 2], "float", var_len=True),
     "$.features[0].shape", "found 4,294,967,296 bytes in one step of this feature list"),
    ("raw len times shape", feature("f", "int32", [2**20], "raw", var_len=False, endian="little", len=2**12),
     "$.features[0].deserialize_args.len", "found 4,294,967,296 elements"),
    ("rank", feature("f", "float32", [1] * 33, "float", var_len=False), "$.features[0].shape",
     "expected at most 32 items, found 33"),
    ("raw uint32", feature("f", "uint32", [], "raw", var_len=False, endian="little"), "$.features[0].dtype",
     "found dtype 'uint32' for deserialize_type 'raw'"),
]


@pytest.mark.parametrize("name,item,path,words", BAD_FEATURES, ids=[c[0] for c in BAD_FEATURES])
def test_bad_manifest_features_are_located(tmp_path, name, item, path, words):
    manifest = write_manifest(tmp_path, [item], allow_var_len=True)
    with pytest.raises(ManifestError) as info:
        load_manifest(manifest)
    assert [(p.file, p.path, words in p.message) for p in info.value.problems] == [(manifest, path, True)], \
        info.value.problems


def test_raw_bool_decodes_any_non_zero_byte_as_true(tmp_path):
    write_manifest(tmp_path, [feature("flags", "bool", [4], "raw", endian="little")])
    write_records(tmp_path / "a.tfrecords", [example(flags=("bytes", [bytes([0, 1, 2, 255])])),
                                             example(flags=("bytes", [bytes([255, 0, 0, 7])]))])
    (batch,) = collect(build_input_fn(loader_config(tmp_path, [("flags", "flags")], inputs=["flags"]))())
    assert batch["flags"].dtype == np.bool_
    assert batch["flags"].tolist() == [[False, True, True, True], [True, False, False, True]]


def test_raw_bool_feature_lists_decode_per_step(tmp_path):
    write_manifest(tmp_path, [feature("flags", "bool", [2], "raw", var_len=True, endian="big")], allow_var_len=True)
    write_records(tmp_path / "a.tfrecords", [
        sequence_example({}, {"flags": ("bytes", [[bytes([0, 3])], [bytes([9, 0])]])}),
        sequence_example({}, {"flags": ("bytes", [[bytes([1, 1])]])})])
    cfg = loader_config(tmp_path, [("flags", "flags")], inputs=["flags"], padding=True)
    (batch,) = collect(build_input_fn(cfg)())
    assert batch["flags"].tolist() == [[[False, True], [True, False]], [[True, True], [False, False]]]


# ---------------------------------------------------------------------------------------------
# Schema and semantic problems in one run.

def test_schema_and_semantic_problems_are_reported_together(data, tmp_path):
    cfg = base(data, epochs="three")
    cfg["args"]["primary_features"].append({"from_name": "id", "to_name": "unused"})
    cfg["args"]["primary_features"].append({"from_name": "nope", "to_name": 7})
    cfg["args"]["padding"] = [{"tensor": "x", "shape": [1]}]
    with pytest.raises(ConfigError) as info:
        load_config(cfg)
    assert [str(p) for p in info.value.problems] == [
        "<dict>: $.args.epochs: expected integer or null, found string 'three'",
        "<dict>: $.args.primary_features[3].to_name: expected string, found integer 7",
        "<dict>: $.args.primary_features[2].to_name: to_name 'unused' is constructed but not used by the model: "
        "expected one of the model's inputs or targets (id, x)",
        "<dict>: $.args.padding[0].shape[0]: found 1 on axis 0 but the tensor is 2 long there: expected -1 or at "
        "least 2 (padding never cuts)",
    ]


def test_semantic_checks_skip_what_broke_the_schema(data):
    # A broken entry says nothing more: its from_name is not looked up, its tensor is not sliced.
    cfg = base(data, processing_steps=[{"tensor": "x", "type": "slice", "args": {"slice": 3}},
                                       {"tensor": "x", "type": "slice", "args": {"slice": "[5]"}}])
    cfg["args"]["primary_features"][0]["extra"] = 1
    with pytest.raises(ConfigError) as info:
        load_config(cfg)
    assert [(p.path, p.message.split(":")[0]) for p in info.value.problems] == [
        ("$.args.primary_features[0].extra", "unknown key 'extra'; allowed keys"),
        ("$.args.processing_steps[0].args.slice", "expected string, found integer 3"),
    ]


def test_manifest_schema_and_semantic_problems_together(tmp_path):
    path = write_manifest(tmp_path, [feature("a", "string", [], "int"), {"name": "b", "dtype": "float32"},
                                     feature("a", "int64", [2], "int")], compression="rar")
    with pytest.raises(ManifestError) as info:
        load_manifest(path)
    assert [(p.path, p.message) for p in info.value.problems] == [
        ("$.compression", "unknown compression 'rar'; expected one of: null, zlib, gzip"),
        ("$.features[1]", "missing required key 'deserialize_type'"),
        ("$.features[1]", "missing required key 'shape'"),
        ("$.features[0].dtype", "found dtype 'string' for deserialize_type 'int': expected a numeric or bool dtype "
                                "(use deserialize_type 'string' for bytes)"),
        ("$.features[2].name", "duplicate feature name 'a': every feature name must be unique"),
    ]


# ---------------------------------------------------------------------------------------------
# The CLI goes on after a bad file.

def test_validate_reports_every_file_and_counts_the_bad_ones(tmp_path, data):
    good = tmp_path / "good.yaml"
    good.write_text(json.dumps(base(data)))
    (tmp_path / "a.yaml").write_text("type: !!int abc\n")
    (tmp_path / "c.yaml").write_text(LAUGHS)
    (tmp_path / "d.json").write_text('{"type": NaN}')
    result = subprocess.run([sys.executable, "-m", "batchloaders", "validate", "a.yaml", "good.yaml", "c.yaml",
                             "d.json"], cwd=tmp_path, capture_output=True, text=True, timeout=60,
                            env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    lines = result.stdout.splitlines()
    assert [line.split(": ", 2)[:2] for line in lines[:1] + lines[2:4]] == [["a.yaml", "$"], ["c.yaml", "$"],
                                                                          ["d.json", "$"]]
    assert "found the tag '!!int'" in lines[0] and "expand to 54,480,987 more nodes" in lines[2]
    assert lines[1] == "OK good.yaml"
    assert lines[4:] == ["3 of 4 files invalid (3 problems)"]
    assert result.returncode == 1


# Found in review: values no schema bound covers.
def test_integer_too_big_for_a_float_is_out_of_range(data):
    cfg = base(data, padding=[{"tensor": "x", "value": 10**400}])
    with pytest.raises(ConfigError) as info:
        load_config(cfg)
    assert [(p.path, p.message.split(":")[0]) for p in info.value.problems] == [
        ("$.args.padding[0].value", "found an integer of 401 digits")]


@pytest.mark.parametrize("key,value", [("data_dir", "~a\x00b"), ("data_dir", "~\ud800")])
def test_paths_no_file_system_accepts_are_located(data, key, value):
    cfg = base(data)
    cfg["args"]["dataset"]["args"][key] = value
    with pytest.raises(ConfigError) as info:
        load_config(cfg)
    (problem,) = info.value.problems
    assert problem.path == f"$.args.dataset.args.{key}" and "which is not a valid path" in problem.message


def test_min_window_above_max_window_is_reported_once(tmp_path):
    from seqdata import sequence_config, write_continuous

    write_continuous(tmp_path, [4])
    cfg = sequence_config(tmp_path, "continuous_sequence", [("x", "x")], inputs=["x"], lo=5, hi=2)
    with pytest.raises(ConfigError) as info:
        load_config(cfg)
    assert [(p.path, p.message) for p in info.value.problems] == [
        ("$.args.min_window", "found min_window 5 > max_window 2: expected min_window <= max_window")]
