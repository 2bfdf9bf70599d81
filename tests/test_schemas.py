"""The JSON Schemas and the messages schema_problems builds from them.

Most tests are rows of (document, JSON path, message fragment): each bad row
changes one thing in a known-good document and names the problem it expects.
"""
from __future__ import annotations

import copy
import json
import pathlib

import jsonschema
import pytest
import yaml

from batchloaders.errors import ConfigError, ManifestError
from batchloaders.core import model
from batchloaders.config import kinds
from batchloaders.config.document import parse_text
from batchloaders.config.schema import load_schema, schema_names, schema_problems

SCHEMAS_DIR = pathlib.Path(__file__).resolve().parents[1] / "schemas"
CONFIG = "loader_config.schema.json"
MANIFEST = "manifest.schema.json"

GOOD_CONFIG = {
    "type": "independent",
    "model": {"inputs": ["image"], "targets": ["label"]},
    "args": {
        "dataset": {"type": "dir", "args": {"data_dir": "data/mnist"}},
        "target_batch_size": 32,
        "drop_remainder": False,
        "epochs": 1,
        "num_read_buffer_bytes": 0,
        "num_prefetch": 1,
        "primary_features": [{"from_name": "image", "to_name": "image"},
                             {"from_name": "label", "to_name": "label"}],
    },
}

GOOD_MANIFEST = {
    "compression": None,
    "allow_var_len": False,
    "features": [
        {"name": "image", "dtype": "uint8", "shape": [28, 28], "deserialize_type": "raw",
         "deserialize_args": {"endian": "little"}},
        {"name": "label", "dtype": "int64", "shape": [], "deserialize_type": "int"},
    ],
}


def config(*, drop=(), **changes):
    """GOOD_CONFIG with top-level keys replaced/removed; ``args__x`` changes args key x."""
    doc = copy.deepcopy(GOOD_CONFIG)
    for key, value in changes.items():
        target, key = (doc["args"], key[6:]) if key.startswith("args__") else (doc, key)
        target[key] = value
    for key in drop:
        target, key = (doc["args"], key[6:]) if key.startswith("args__") else (doc, key)
        del target[key]
    return doc


def manifest(*, drop=(), **changes):
    """GOOD_MANIFEST with top-level keys replaced/removed; ``feature__x`` changes features[0].x."""
    doc = copy.deepcopy(GOOD_MANIFEST)
    for key, value in changes.items():
        target, key = (doc["features"][0], key[9:]) if key.startswith("feature__") else (doc, key)
        target[key] = value
    for key in drop:
        target, key = (doc["features"][0], key[9:]) if key.startswith("feature__") else (doc, key)
        del target[key]
    return doc


def problems_of(data, schema_file, source="doc.yaml"):
    """Validate ``data`` as YAML text (a dict is dumped to YAML first)."""
    text = data if isinstance(data, str) else yaml.safe_dump(data, sort_keys=False)
    error_cls = ManifestError if schema_file == MANIFEST else ConfigError
    return schema_problems(parse_text(text, source, error_cls, fmt="yaml"), schema_file)


def secondary(*features):
    return config(args__secondary_features=list(features))


def step(slice_text):
    return config(args__processing_steps=[{"tensor": "image", "type": "slice", "args": {"slice": slice_text}}])


def sequence(kind, **args):
    doc = config(type=kind)
    doc["args"].update(args)
    return doc


BAD_CONFIGS = [
    # segmenting
    (config(args__segmenting={"num_unroll": 0}), "$.args.segmenting.num_unroll", "expected an integer >= 1, found 0"),
    (config(args__segmenting={"pad": True}), "$.args.segmenting", "missing required key 'num_unroll'"),
    (config(args__segmenting={"num_unroll": 4, "lanes": 2}), "$.args.segmenting.lanes", "unknown key 'lanes'"),
    (config(args__segmenting={"num_unroll": 4, "context": ["a", "a"]}), "$.args.segmenting.context[1]",
     "items must be unique"),
    # chunking
    (config(args__chunking={"size": 0}), "$.args.chunking.size", "expected an integer >= 1, found 0"),
    (config(args__chunking={"size": 4, "context": [1]}), "$.args.chunking.context", "expected at least 2 items"),
    (config(args__chunking={"size": 4, "tensors": [{"tensor": "label", "rate": 4}]}),
     "$.args.chunking.tensors[0].rate", "unknown key 'rate'"),
    # misspelt keys, with the suggestion
    (config(args__tagret_batch_size=32, drop=["args__target_batch_size"]), "$.args.tagret_batch_size",
     "unknown key 'tagret_batch_size' (did you mean 'target_batch_size'?); closest allowed keys: target_batch_size, "
     "resume, epochs; see the reference: docs/reference.md"),
    (config(modle={"inputs": ["image"]}, drop=["model"]), "$.modle", "unknown key 'modle' (did you mean 'model'?)"),
    (config(model={"inputs": ["image"], "target": ["label"]}), "$.model.target",
     "unknown key 'target' (did you mean 'targets'?); allowed keys: inputs, targets"),
    (config(args__dataset={"type": "dir", "args": {"datadir": "x"}}), "$.args.dataset.args.datadir",
     "unknown key 'datadir' (did you mean 'data_dir'?)"),
    (sequence("continuous_sequence", min_window=2, max_window=4, multi_load=True), "$.args.multi_load",
     "unknown key 'multi_load'"),
    # wrong types and out-of-range values
    (config(args__epochs="abc"), "$.args.epochs", "expected integer or null, found string 'abc'"),
    (config(args__target_batch_size=True), "$.args.target_batch_size", "expected integer, found boolean true"),
    (config(args__target_batch_size=0), "$.args.target_batch_size", "expected an integer >= 1, found 0"),
    (config(args__target_batch_size=2.5), "$.args.target_batch_size", "expected integer, found number 2.5"),
    (config(args__num_parallel_reads=0), "$.args.num_parallel_reads", "expected an integer from 1 to 1024 or -1, found integer 0"),
    (config(args__num_prefetch=-2), "$.args.num_prefetch", "expected an integer >= -1, found -2"),
    (config(args__num_interleave_in_buffer_elements=True), "$.args.num_interleave_in_buffer_elements",
     "expected integer, found boolean true"),
    (config(args__seed="42"), "$.args.seed", "expected integer or null, found string '42'"),
    (config(args__primary_features=[]), "$.args.primary_features", "expected at least 1 item, found 0"),
    (config(args__primary_features=[{"from_name": "", "to_name": "x"}]), "$.args.primary_features[0].from_name",
     "expected a non-empty string"),
    (config(model={"inputs": ["image", "image"]}), "$.model.inputs[1]", "duplicate item 'image'"),
    (sequence("continuous_sequence", min_window=2, max_window=4, stride=0), "$.args.stride",
     "expected an integer >= 1, found 0"),
    ("- just\n- a list\n", "$", "expected object, found array"),
    # unknown types
    (config(type="independant"), "$.type",
     "unknown loader type 'independant' (did you mean 'independent'?); expected one of: independent, "
     "continuous_sequence, discrete_sequence"),
    (config(args__dataset={"type": "lst", "args": {}}), "$.args.dataset.type",
     "unknown dataset type 'lst' (did you mean 'list'?); expected one of: dir, list"),
    (secondary({"to_name": "c", "type": "konst", "args": {}}), "$.args.secondary_features[0].type",
     "unknown secondary feature type 'konst' (did you mean 'const'?); expected one of: boundaries, chunk_count, chunk_index, const, length, "),
    (config(args__processing_steps=[{"tensor": "image", "type": "slise"}]), "$.args.processing_steps[0].type",
     "unknown processing step type 'slise' (did you mean 'slice'?); expected one of: cast, clip, decode_image, frame_stack, "),
    (secondary({"to_name": "n", "type": "length", "args": {"tensor": "image", "dtype": "int16"}}),
     "$.args.secondary_features[0].args.dtype", "unknown dtype 'int16' (did you mean 'int64'?); expected one of: int32, int64"),
    # per-type arguments
    (secondary({"to_name": "c", "type": "const"}), "$.args.secondary_features[0]",
     "missing required key 'args' (const features need args with shape and dtype)"),
    (secondary({"to_name": "c", "type": "const", "args": {"shape": [2]}}), "$.args.secondary_features[0].args",
     "missing required key 'dtype'"),
    (secondary({"to_name": "c", "type": "const", "args": {"shape": [-1], "dtype": "int32"}}),
     "$.args.secondary_features[0].args.shape[0]", "expected an integer >= 0, found -1"),
    (secondary({"to_name": "c", "type": "const", "args": {"shape": 3, "dtype": "int32"}}),
     "$.args.secondary_features[0].args.shape", "expected array or string, found integer 3"),
    (secondary({"to_name": "c", "type": "const", "args": {"shape": [], "dtype": "int32", "value": [1]}}),
     "$.args.secondary_features[0].args.value", "expected string or number or boolean, found array"),
    (secondary({"to_name": "s", "type": "segment_ids", "args": {}}), "$.args.secondary_features[0].args",
     "missing required key 'tensor'"),
    (config(args__dataset={"type": "list", "args": {"manifest_file": "m.json"}}), "$.args.dataset.args",
     "missing required key 'list_file'"),
    # slices
    (step("[len(x)]"), "$.args.processing_steps[0].args.slice",
     "invalid slice specifier '[len(x)]'; expected a form like [3,:,4:,:-2,1:4]"),
    (step("[1.5]"), "$.args.processing_steps[0].args.slice", "invalid slice specifier '[1.5]'"),
    (step("[a:b]"), "$.args.processing_steps[0].args.slice", "invalid slice specifier '[a:b]'"),
    (step("[]"), "$.args.processing_steps[0].args.slice", "invalid slice specifier '[]'"),
    (step("1:2"), "$.args.processing_steps[0].args.slice", "invalid slice specifier '1:2'"),
    (step("[1:2:3:4]"), "$.args.processing_steps[0].args.slice", "invalid slice specifier"),
    (config(args__processing_steps=[{"tensor": "image", "type": "slice"}]), "$.args.processing_steps[0]",
     "missing required key 'args' (slice steps need args with slice)"),
    # padding
    (config(args__padding=[{"tensor": "image", "shape": [-2, 3]}]), "$.args.padding[0].shape[0]",
     "expected an integer >= -1, found -2"),
    (config(args__padding="yes"), "$.args.padding", "expected boolean or array, found string 'yes'"),
    (config(args__padding=[{"shape": [3]}]), "$.args.padding[0]", "missing required key 'tensor'"),
    # missing required keys
    (config(drop=["args__epochs"]), "$.args", "missing required key 'epochs'"),
    (config(drop=["args"]), "$", "missing required key 'args'"),
    (config(drop=["type"]), "$", "missing required key 'type'"),
    (config(args__shuffle=True), "$.args",
     "missing required key 'num_mix_files' (required when shuffle is true and shuffle_scope is buffer)"),
    (sequence("continuous_sequence", max_window=4), "$.args", "missing required key 'min_window'"),
    (sequence("discrete_sequence", min_window=1), "$.args", "missing required key 'max_window'"),
]

BAD_MANIFESTS = [
    (manifest(compresion=None, drop=["compression"]), "$.compresion",
     "unknown key 'compresion' (did you mean 'compression'?); closest allowed keys: compression, allow_var_len, "
     "features; see the reference: docs/reference.md"),
    (manifest(compression="zip"), "$.compression",
     "unknown compression 'zip' (did you mean 'gzip'?); expected one of: null, zlib, gzip"),
    (manifest(allow_var_len="no"), "$.allow_var_len", "expected boolean, found string 'no'"),
    (manifest(features=[]), "$.features", "expected at least 1 item, found 0"),
    (manifest(drop=["allow_var_len"]), "$", "missing required key 'allow_var_len'"),
    (manifest(feature__dtype="flaot32"), "$.features[0].dtype",
     "unknown dtype 'flaot32' (did you mean 'float32'?); expected one of: float16, "),
    (manifest(feature__name=""), "$.features[0].name", "expected a non-empty string"),
    (manifest(feature__shape=[28, -1]), "$.features[0].shape[1]", "expected an integer >= 1, found -1"),
    (manifest(feature__shape="28x28"), "$.features[0].shape", "expected array, found string '28x28'"),
    (manifest(feature__deserialize_type="integer"), "$.features[0].deserialize_type",
     "unknown deserialize type 'integer'"),
    (manifest(feature__deserialise_type="raw", drop=["feature__deserialize_type"]),
     "$.features[0].deserialise_type", "unknown key 'deserialise_type' (did you mean 'deserialize_type'?)"),
    (manifest(drop=["feature__deserialize_args"]), "$.features[0]",
     "missing required key 'deserialize_args' (raw deserialization needs deserialize_args with at least 'endian')"),
    (manifest(feature__deserialize_args={"endian": "middle"}), "$.features[0].deserialize_args.endian",
     "unknown endianness 'middle'; expected one of: little, big"),
    (manifest(feature__deserialize_args={"endian": "big", "len": 0}), "$.features[0].deserialize_args.len",
     "expected an integer >= 1, found 0"),
    (manifest(feature__deserialize_args={"endian": "big", "length": 2}), "$.features[0].deserialize_args.length",
     "unknown key 'length' (did you mean 'len'?)"),
    (manifest(feature__deserialize_type="float", feature__deserialize_args={"endian": "big"}),
     "$.features[0].deserialize_args.endian", "unknown key 'endian'; only raw deserialization takes deserialize_args"),
    (manifest(feature__var_len=True), "$.features[0].var_len",
     "expected false, found true (must be false when allow_var_len is false)"),
    (manifest(allow_var_len=True), "$.features[0]",
     "missing required key 'var_len' (required when allow_var_len is true)"),
]


@pytest.mark.parametrize(("data", "path", "fragment"), BAD_CONFIGS)
def test_bad_config(data, path, fragment):
    problems = problems_of(data, CONFIG)
    assert any(p.path == path and fragment in p.message for p in problems), problems


@pytest.mark.parametrize(("data", "path", "fragment"), BAD_MANIFESTS)
def test_bad_manifest(data, path, fragment):
    problems = problems_of(data, MANIFEST, source="__manifest__.json")
    assert any(p.path == path and fragment in p.message for p in problems), problems


GOOD_CONFIGS = [
    GOOD_CONFIG,
    config(model={"inputs": ["image"]}),
    config(drop=["model"], name="mnist", **{"$schema": "../schemas/loader_config.schema.json"}),
    config(args__dataset={"type": "list", "args": {"manifest_file": "m.json", "list_file": "files.txt"}}),
    config(args__epochs=None, args__seed=None, args__num_parallel_reads=-1, args__num_parallel_parses=4,
           args__num_prefetch=-1, args__sloppy_interleave=True, args__num_interleave_out_buffer_elements=2,
           args__num_interleave_in_buffer_elements=3, args__multi_load=False),
    config(args__shuffle=True, args__num_shuffle_buffer_elements=100, args__num_filenames_shuffle_buffer=10,
           args__num_mix_files=2, args__seed=7),
    config(args__shuffle=False),
    config(args__padding=True),
    config(args__padding=[{"tensor": "image", "shape": [-1, 30], "value": 0}, {"tensor": "label"}]),
    secondary({"to_name": "c", "type": "const", "args": {"shape": [2, 3], "dtype": "float32", "value": 1.5}},
              {"to_name": "d", "type": "const", "args": {"shape": "image", "dtype": "image"}},
              {"to_name": "n", "type": "length", "args": {"tensor": "image", "dtype": "int64"}},
              {"to_name": "s", "type": "segment_ids", "args": {"tensor": "image"}},
              {"to_name": "b", "type": "boundaries", "args": {"tensor": "image", "dtype": "int32"}}),
    step("[3,:,4:,:-2,1:4]"),
    step(" [ : , ::2 , -1 ] "),
    step("[1:10:3]"),
    sequence("continuous_sequence", min_window=2, max_window=8, stride=None),
    sequence("continuous_sequence", min_window=2, max_window=8, stride=3),
    sequence("discrete_sequence", min_window=3, max_window=5),
    config(args__chunking={"size": 40, "step": 20, "context": [2, 2], "min_size": 10, "shuffle_buffer": 64,
                           "tensors": [{"tensor": "label", "size": 10, "step": 5, "context": [0, 0]}]}),
    secondary({"to_name": "i", "type": "chunk_index", "args": {"dtype": "int64"}},
              {"to_name": "c", "type": "chunk_count"}, {"to_name": "k", "type": "source_key"}),
    config(args__segmenting={"num_unroll": 20, "batch_size": 32, "pad": False, "allow_small_batch": True,
                             "context": ["label"], "key": "name", "prefix": "seg_"}),
]

GOOD_MANIFESTS = [
    GOOD_MANIFEST,
    manifest(compression="gzip", feature__var_len=False),
    manifest(feature__deserialize_args={"endian": "big", "len": 3}),
    {"compression": "zlib", "allow_var_len": True, "features": [
        {"name": "tokens", "dtype": "int32", "shape": [], "var_len": True, "deserialize_type": "int",
         "deserialize_args": {}},
        {"name": "text", "dtype": "string", "shape": [], "var_len": False, "deserialize_type": "string"},
        {"name": "audio", "dtype": "float32", "shape": [2], "var_len": True, "deserialize_type": "raw",
         "deserialize_args": {"endian": "little"}}]},
]


@pytest.mark.parametrize("data", GOOD_CONFIGS)
def test_good_config(data):
    assert problems_of(data, CONFIG) == []


@pytest.mark.parametrize("data", GOOD_MANIFESTS)
def test_good_manifest(data):
    assert problems_of(data, MANIFEST) == []


def test_problems_carry_file_path_and_line():
    text = ("type: independent\n"                    # 1
            "args:\n"                                # 2
            "  dataset: {type: dir, args: {data_dir: d}}\n"
            "  target_batch_size: 8\n"               # 4
            "  drop_remainder: false\n"
            "  epochs: many\n"                       # 6
            "  num_read_buffer_bytes: 0\n"
            "  num_prefetch: 1\n"
            "  primary_features:\n"                  # 9
            "    - {from_name: a, to_name: a}\n"
            "    - {from_name: b, to_nme: b}\n")     # 11
    problems = problems_of(text, CONFIG, source="configs/x.yaml")
    assert [str(p) for p in problems] == [
        "configs/x.yaml: $.args.epochs: expected integer or null, found string 'many' (line 6, column 3)",
        "configs/x.yaml: $.args.primary_features[1]: missing required key 'to_name' (line 11, column 7)",
        "configs/x.yaml: $.args.primary_features[1].to_nme: unknown key 'to_nme' (did you mean 'to_name'?); "
        "allowed keys: from_name, to_name (line 11, column 22)",
    ]


def test_json_documents_have_line_and_column():
    text = json.dumps(manifest(compression="rar"), indent=2)
    line = next(i for i, t in enumerate(text.splitlines(), 1) if '"compression"' in t)
    problems = schema_problems(parse_text(text, "m/__manifest__.json", ManifestError), MANIFEST)
    assert [(p.file, p.path, p.line, p.column) for p in problems] == [
        ("m/__manifest__.json", "$.compression", line, 3)]


def test_every_error_is_reported_sorted_by_path():
    data = config(args__epochs="x", args__target_batch_size=0, args__secondary_features=[
        {"to_name": f"c{i}", "type": "konst"} for i in range(11)], drop=["args__num_prefetch"])
    data["args"]["num_prefech"] = 1
    problems = problems_of(data, CONFIG)
    paths = [p.path for p in problems]
    assert paths == ["$.args", "$.args.epochs", "$.args.num_prefech"] + [
        f"$.args.secondary_features[{i}].type" for i in range(11)] + ["$.args.target_batch_size"]
    assert "missing required key 'num_prefetch'" in problems[0].message
    assert "did you mean 'num_prefetch'" in problems[2].message


def test_failed_discriminator_is_reported_alone():
    # With an unknown type no args schema applies, so junk args add no noise.
    problems = problems_of({"type": "batched", "args": {"junk": 1}}, CONFIG)
    assert [(p.path, p.message.split(";")[0]) for p in problems] == [("$.type", "unknown loader type 'batched'")]
    problems = problems_of(secondary({"to_name": "c", "type": 3, "args": {"x": 1}}), CONFIG)
    assert [p.message for p in problems] == ["expected string, found integer 3"]


def test_same_problem_is_not_repeated():
    # args is checked by the base properties and by the const branch: one message.
    problems = problems_of(secondary({"to_name": "c", "type": "const", "args": 5}), CONFIG)
    assert [p.message for p in problems] == ["expected object, found integer 5"]


# --- the schema files themselves -------------------------------------------------------------

SCHEMA_FILES = sorted(p.name for p in SCHEMAS_DIR.glob("*.json"))
FORBIDDEN = {"unevaluatedProperties", "unevaluatedItems", "prefixItems", "$defs", "$dynamicRef", "$dynamicAnchor"}


def nodes(schema, where="#"):
    """Every subschema with its JSON pointer (property names are not subschemas themselves)."""
    if isinstance(schema, dict):
        yield where, schema
        for key, value in schema.items():
            if key in ("properties", "definitions", "patternProperties"):
                for name, sub in value.items():
                    yield from nodes(sub, f"{where}/{key}/{name}")
            elif key in ("allOf", "anyOf", "oneOf") and isinstance(value, list):
                for i, sub in enumerate(value):
                    yield from nodes(sub, f"{where}/{key}/{i}")
            elif key in ("items", "if", "then", "else", "not", "additionalProperties"):
                yield from nodes(value, f"{where}/{key}")


def resolve(ref, base):
    """Follow a '$ref' to (file, node), the way the registry does."""
    file, _, pointer = ref.partition("#")
    file = file or base
    node = json.loads((SCHEMAS_DIR / file).read_text())
    for part in filter(None, pointer.split("/")):
        node = node[part]
    return file, node


def test_all_schema_files_are_listed():
    assert schema_names() == SCHEMA_FILES
    assert len(SCHEMA_FILES) == 38  # + step_decode_image.schema.json
    assert (SCHEMAS_DIR / "__init__.py").exists()


@pytest.mark.parametrize("name", SCHEMA_FILES)
def test_schema_file_is_portable(name):
    text = (SCHEMAS_DIR / name).read_text()
    schema = json.loads(text)
    assert schema["$id"] == name
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    jsonschema.Draft202012Validator.check_schema(schema)
    # Draft-07 editors must understand it too.
    jsonschema.Draft7Validator.check_schema({k: v for k, v in schema.items() if k != "$schema"})
    for word in FORBIDDEN:
        assert f'"{word}"' not in text, word
    for where, node in nodes(schema):
        types = node.get("type", [])
        if "object" in ([types] if isinstance(types, str) else types) and "properties" in node:
            assert node.get("additionalProperties") is False, f"{name}{where}"
        if "$ref" in node:
            resolve(node["$ref"], name)  # raises if it points nowhere


@pytest.mark.parametrize("name", SCHEMA_FILES)
def test_every_property_is_described(name):
    for where, node in nodes(load_schema(name)):
        for prop, sub in node.get("properties", {}).items():
            if "$ref" in sub and "description" not in sub:
                _, sub = resolve(sub["$ref"], name)
            # Properties inside if/then fragments only narrow a described property.
            if "/if" not in where and "/then" not in where:
                assert sub.get("description"), f"{name}{where}/properties/{prop}"


def test_enums_match_the_model_constants():
    assert load_schema(CONFIG)["properties"]["type"]["enum"] == list(kinds.BUILTIN)
    assert load_schema("manifest_feature.schema.json")["properties"]["dtype"]["enum"] == list(model.DTYPES)
    assert load_schema("manifest_feature.schema.json")["properties"]["deserialize_type"]["enum"] == list(
        model.DESERIALIZE_TYPES)
    assert load_schema(MANIFEST)["properties"]["compression"]["enum"] == list(model.COMPRESSIONS)


def test_loader_args_list_every_common_argument():
    common = set(load_schema("common_args.schema.json")["definitions"]) - {"shuffle_needs_buffers", "dataset_or_sources"}
    for kind in kinds.BUILTIN:
        props = load_schema(f"{kind}_args.schema.json")["properties"]
        assert common <= set(props), kind
