"""Bad configs and manifests: each gives ConfigError/ManifestError naming file, JSON path, found and expected."""
from __future__ import annotations

import copy
import json

import pytest

from batchloaders import BatchLoaderError, ConfigError, ManifestError, build_input_fn, load_config
from batchloaders.config.config import config_from_text
from conftest import example, feature, loader_config, write_manifest, write_records


@pytest.fixture
def data(tmp_path):
    d = tmp_path / "data"
    write_manifest(d, [feature("id", "int64", [], "int"), feature("x", "float32", [2, 3], "float"),
                       feature("name", "string", [], "string")])
    write_records(d / "a.tfrecords", [example(id=("int", [1]), x=("float", [0] * 6), name=("bytes", ["n"]))])
    return d


def base(data):
    return loader_config(data, [("id", "id"), ("x", "x")], inputs=["x"], targets=["id"])


def set_in(cfg, path, value):
    node = cfg
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return cfg


# (description, mutation of the base config, expected JSON path, expected message fragment)
SEMANTIC = [
    ("duplicate to_name", lambda c: c["args"]["primary_features"].append({"from_name": "name", "to_name": "x"}),
     "$.args.primary_features[2].to_name", "duplicate to_name 'x'"),
    ("unused to_name", lambda c: c["args"]["primary_features"].append({"from_name": "name", "to_name": "nm"}),
     "$.args.primary_features[2].to_name", "'nm' is constructed but not used by the model"),
    ("missing model input", lambda c: c["model"]["inputs"].append("y"),
     "$.model.inputs", "model tensor 'y' is not produced"),
    ("unknown from_name", lambda c: set_in(c, ["args", "primary_features", 1, "from_name"], "xx"),
     "$.args.primary_features[1].from_name", "'xx' is not in the manifest"),
    ("suggests closest from_name", lambda c: set_in(c, ["args", "primary_features", 1, "from_name"], "nme"),
     "$.args.primary_features[1].from_name", "did you mean 'name'?"),
    ("shuffle without its arguments", lambda c: set_in(c, ["args", "shuffle"], True),
     "$.args", "missing required key 'num_shuffle_buffer_elements' (required when shuffle is true and shuffle_scope is buffer)"),
    ("multi_load with steps", lambda c: (set_in(c, ["args", "multi_load"], True), set_in(
        c, ["args", "processing_steps"], [{"tensor": "x", "type": "slice", "args": {"slice": "[0]"}}])),
     "$.args.multi_load", "multi_load must be false when processing_steps are given"),
    ("slice rank", lambda c: set_in(c, ["args", "processing_steps"],
                                    [{"tensor": "x", "type": "slice", "args": {"slice": "[0, 1, 2]"}}]),
     "$.args.processing_steps[0].args.slice", "found 3 indices"),
    ("slice index out of range", lambda c: set_in(c, ["args", "processing_steps"],
                                                  [{"tensor": "x", "type": "slice", "args": {"slice": "[:, 3]"}}]),
     "$.args.processing_steps[0].args.slice", "index 3 on axis 1 is out of range for length 3"),
    ("step on unknown tensor", lambda c: set_in(c, ["args", "processing_steps"],
                                                [{"tensor": "z", "type": "slice", "args": {"slice": "[0]"}}]),
     "$.args.processing_steps[0].tensor", "tensor 'z' is not a primary or secondary feature"),
    ("padding shape of wrong rank", lambda c: set_in(c, ["args", "padding"], [{"tensor": "x", "shape": [4]}]),
     "$.args.padding[0].shape", "found a shape of rank 1 [4] for tensor 'x' of rank 2"),
    ("padding shape that would cut", lambda c: set_in(c, ["args", "padding"], [{"tensor": "x", "shape": [1, -1]}]),
     "$.args.padding[0].shape[0]", "expected -1 or at least 2"),
    ("padding value of the wrong type", lambda c: set_in(c, ["args", "padding"], [{"tensor": "x", "value": "a"}]),
     "$.args.padding[0].value", "expected a number for dtype 'float32'"),
    ("padding unknown tensor", lambda c: set_in(c, ["args", "padding"], [{"tensor": "q"}]),
     "$.args.padding[0].tensor", "tensor 'q' is not a primary or secondary feature"),
    ("const copies an unknown primary", lambda c: (c["model"]["inputs"].append("k"), set_in(
        c, ["args", "secondary_features"], [{"to_name": "k", "type": "const", "args": {"shape": "xx", "dtype": "x"}}])),
     "$.args.secondary_features[0].args.shape", "did you mean 'x'?"),
    ("const value of the wrong type", lambda c: (c["model"]["inputs"].append("k"), set_in(
        c, ["args", "secondary_features"],
        [{"to_name": "k", "type": "const", "args": {"shape": [], "dtype": "int32", "value": 1.5}}])),
     "$.args.secondary_features[0].args.value", "expected an integer (without a decimal point) for dtype 'int32'"),
    ("const dtype neither dtype nor primary", lambda c: (c["model"]["inputs"].append("k"), set_in(
        c, ["args", "secondary_features"], [{"to_name": "k", "type": "const", "args": {"shape": [], "dtype": "flaot32"}}])),
     "$.args.secondary_features[0].args.dtype", "did you mean 'float32'?"),
    ("input and target at once", lambda c: c["model"]["targets"].append("x"),
     "$.model.targets", "'x' is both a model input and a model target"),
]


@pytest.mark.parametrize("name, mutate, path, fragment", SEMANTIC, ids=[r[0] for r in SEMANTIC])
def test_semantic_problems(data, name, mutate, path, fragment):
    cfg = base(data)
    mutate(cfg)
    with pytest.raises(ConfigError) as info:
        build_input_fn(cfg)
    messages = [str(p) for p in info.value.problems]
    assert any(m.startswith(f"<dict>: {path}: ") and fragment in m for m in messages), messages


def test_every_problem_is_reported_at_once(data):
    cfg = base(data)
    cfg["model"]["inputs"].append("missing")
    cfg["args"]["primary_features"].append({"from_name": "nope", "to_name": "id"})
    with pytest.raises(ConfigError) as info:
        load_config(cfg)
    paths = [p.path for p in info.value.problems]
    assert "$.model.inputs" in paths and "$.args.primary_features[2].to_name" in paths
    assert "$.args.primary_features[2].from_name" in paths


def test_errors_are_value_errors_of_the_public_hierarchy():
    assert issubclass(ConfigError, BatchLoaderError) and issubclass(ManifestError, BatchLoaderError)
    assert issubclass(BatchLoaderError, ValueError)


def test_var_len_tensor_without_padding(tmp_path):
    write_manifest(tmp_path, [feature("seq", "int64", [], "int", var_len=True)], allow_var_len=True)
    write_records(tmp_path / "a.tfrecords", [b""])
    cfg = loader_config(tmp_path, [("seq", "seq")], inputs=["seq"])
    with pytest.raises(ConfigError, match=r"\$\.args\.padding: tensor 'seq' has a variable length axis .* "
                                          r"expected padding true"):
        load_config(cfg)


# Dataset and manifest problems: (description, setup(tmp_path) -> config dict, error class, path, fragment)
def _dir_without_manifest(tmp_path):
    write_records(tmp_path / "a.tfrecords", [b""])
    return loader_config(tmp_path, [("id", "id")], inputs=["id"])


def _empty_dir(tmp_path):
    write_manifest(tmp_path, [feature("id", "int64", [], "int")])
    return loader_config(tmp_path, [("id", "id")], inputs=["id"])


def _missing_dir(tmp_path):
    return loader_config(tmp_path / "nowhere", [("id", "id")], inputs=["id"])


def _list_naming_missing_files(tmp_path):
    write_manifest(tmp_path, [feature("id", "int64", [], "int")])
    write_records(tmp_path / "a.tfrecords", [b""])
    (tmp_path / "files.txt").write_text(f"{tmp_path}/a.tfrecords\n{tmp_path}/gone.tfrecords\n")
    cfg = loader_config(tmp_path, [("id", "id")], inputs=["id"])
    cfg["args"]["dataset"] = {"type": "list", "args": {"manifest_file": str(tmp_path / "__manifest__.json"),
                                                       "list_file": str(tmp_path / "files.txt")}}
    return cfg


def _list_with_missing_manifest(tmp_path):
    cfg = _list_naming_missing_files(tmp_path)
    cfg["args"]["dataset"]["args"]["manifest_file"] = str(tmp_path / "none.json")
    return cfg


def _manifest_with_var_len_in_examples(tmp_path):
    write_manifest(tmp_path, [feature("id", "int64", [], "int", var_len=True)])
    write_records(tmp_path / "a.tfrecords", [b""])
    return loader_config(tmp_path, [("id", "id")], inputs=["id"])


def _manifest_missing_var_len(tmp_path):
    write_manifest(tmp_path, [feature("id", "int64", [], "int")], allow_var_len=True)
    write_records(tmp_path / "a.tfrecords", [b""])
    return loader_config(tmp_path, [("id", "id")], inputs=["id"])


def _manifest_string_dtype_mismatch(tmp_path):
    write_manifest(tmp_path, [feature("id", "int64", [], "string")])
    write_records(tmp_path / "a.tfrecords", [b""])
    return loader_config(tmp_path, [("id", "id")], inputs=["id"])


def _malformed_manifest(tmp_path):
    (tmp_path / "__manifest__.json").write_text('{"compression": null,\n "allow_var_len": false,\n "features": [}\n')
    write_records(tmp_path / "a.tfrecords", [b""])
    return loader_config(tmp_path, [("id", "id")], inputs=["id"])


DATASETS = [
    ("no manifest in data_dir", _dir_without_manifest, ConfigError, "$.args.dataset.args.data_dir",
     "no __manifest__.json in"),
    ("no data file in data_dir", _empty_dir, ConfigError, "$.args.dataset.args.data_dir", "matches no file under"),
    ("data_dir does not exist", _missing_dir, ConfigError, "$.args.dataset.args.data_dir",
     "expected an existing directory"),
    ("list file names missing files", _list_naming_missing_files, ConfigError, "$.args.dataset.args.list_file",
     "line 2: "),
    ("manifest_file missing", _list_with_missing_manifest, ConfigError, "$.args.dataset.args.manifest_file",
     "no such manifest file"),
    ("var_len in an Example manifest", _manifest_with_var_len_in_examples, ManifestError, "$.features[0].var_len",
     "allow_var_len is false"),
    ("var_len required for SequenceExamples", _manifest_missing_var_len, ManifestError, "$.features[0]",
     "missing required key 'var_len'"),
    ("string deserialize with int dtype", _manifest_string_dtype_mismatch, ManifestError, "$.features[0].dtype",
     "expected 'string'"),
    ("malformed manifest JSON", _malformed_manifest, ManifestError, "$", "malformed JSON"),
]


@pytest.mark.parametrize("name, setup, cls, path, fragment", DATASETS, ids=[r[0] for r in DATASETS])
def test_dataset_and_manifest_problems(tmp_path, name, setup, cls, path, fragment):
    with pytest.raises(cls) as info:
        build_input_fn(setup(tmp_path))
    messages = [str(p) for p in info.value.problems]
    assert any(f": {path}: " in m and fragment in m for m in messages), messages
    if cls is ManifestError:
        assert all(p.file.endswith("__manifest__.json") for p in info.value.problems)


def test_malformed_yaml_names_the_line(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("type: independent\nargs:\n  epochs: [1\n  drop_remainder: true\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    (problem,) = info.value.problems
    assert problem.file == str(path) and problem.line == 4 and "malformed YAML" in problem.message


def test_malformed_json_names_the_line(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text('{\n  "type": "independent",\n  "args": {,}\n}\n')
    with pytest.raises(ConfigError, match=r"bad\.json: \$: malformed JSON: .* \(line 3, column 12\)"):
        load_config(path)


def test_yaml_problem_carries_file_and_line(data, tmp_path):
    cfg = base(data)
    cfg["args"]["primary_features"][1]["from_name"] = "nope"
    import yaml

    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    with pytest.raises(ConfigError) as info:
        load_config(path)
    (problem,) = info.value.problems
    line = path.read_text().splitlines()[problem.line - 1]
    assert problem.path == "$.args.primary_features[1].from_name" and "nope" in line
    assert str(problem).startswith(f"{path}: $.args.primary_features[1].from_name: feature 'nope' is not in")


def test_slice_with_a_function_call_is_rejected(data):
    cfg = base(data)
    cfg["args"]["processing_steps"] = [{"tensor": "x", "type": "slice", "args": {"slice": "[len(x)]"}}]
    with pytest.raises(ConfigError, match=r"\$\.args\.processing_steps\[0\]\.args\.slice"):
        load_config(cfg)


def test_bad_batch_size_param(data):
    with pytest.raises(ConfigError, match=r"batch_size: found 0"):
        build_input_fn(base(data))(params={"batch_size": 0})


# Problems found in review: each once crashed inside TensorFlow or passed silently.
MORE = [
    ("integer given as 1.0", lambda c: set_in(c, ["args", "epochs"], 1.0), "$.args.epochs", "expected integer"),
    ("empty model", lambda c: set_in(c, ["model"], {"inputs": [], "targets": []}), "$.model",
     "found no model input"),
    ("const value out of range", lambda c: (c["model"]["inputs"].append("k"), set_in(
        c, ["args", "secondary_features"], [{"to_name": "k", "type": "const",
                                             "args": {"shape": [], "dtype": "uint8", "value": 300}}])),
     "$.args.secondary_features[0].args.value", "expected a value from 0 to 255 for dtype 'uint8'"),
    ("padding value out of range", lambda c: set_in(c, ["args", "padding"], [{"tensor": "id", "value": 1e300}]),
     "$.args.padding[0].value", "found 1e+300: expected an integer"),
]


@pytest.mark.parametrize("name, mutate, path, fragment", MORE, ids=[r[0] for r in MORE])
def test_more_semantic_problems(data, name, mutate, path, fragment):
    test_semantic_problems(data, name, mutate, path, fragment)


def test_dataset_problem_is_reported_with_the_other_problems(data):
    cfg = base(data)
    cfg["args"]["dataset"]["args"]["data_dir"] = str(data) + "-missing"
    cfg["args"]["primary_features"].append({"from_name": "name", "to_name": "x"})
    cfg["model"]["inputs"].append("ghost")
    with pytest.raises(ConfigError) as info:
        load_config(cfg)
    assert [p.path for p in info.value.problems] == [
        "$.args.dataset.args.data_dir", "$.args.primary_features[2].to_name", "$.model.inputs"]


def test_list_file_that_is_a_directory(tmp_path, data):
    cfg = base(data)
    cfg["args"]["dataset"] = {"type": "list", "args": {"manifest_file": str(data / "__manifest__.json"),
                                                       "list_file": str(tmp_path)}}
    with pytest.raises(ConfigError, match=r"\$\.args\.dataset\.args\.list_file: found .*, a directory: expected a file"):
        load_config(cfg)


def test_raw_dtypes_decode_raw_cannot_produce(tmp_path):
    write_manifest(tmp_path, [feature("r", "uint32", [2], "raw", endian="little")])
    write_records(tmp_path / "a.tfrecords", [b""])
    with pytest.raises(ManifestError, match=r"\$\.features\[0\]\.dtype: found dtype 'uint32' for deserialize_type 'raw'"):
        load_config(loader_config(tmp_path, [("r", "r")], inputs=["r"]))


def test_raw_record_of_the_wrong_size_fails_instead_of_changing_the_batch(tmp_path):
    import numpy as np
    import tensorflow as tf

    write_manifest(tmp_path, [feature("r", "float32", [2], "raw", endian="little")])
    write_records(tmp_path / "a.tfrecords", [example(r=("bytes", [np.arange(4, dtype="<f4").tobytes()]))] * 2)
    with pytest.raises(tf.errors.InvalidArgumentError):
        list(build_input_fn(loader_config(tmp_path, [("r", "r")], inputs=["r"]))())


def test_yaml_merge_keys_work_and_non_scalar_keys_are_errors(data, tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(f"""
common: &common {{from_name: x}}
type: independent
model: {{inputs: [x]}}
args:
  dataset: {{type: dir, args: {{data_dir: {data}}}}}
  target_batch_size: 1
  drop_remainder: false
  epochs: 1
  num_read_buffer_bytes: 0
  num_prefetch: 0
  primary_features: [{{<<: *common, to_name: x}}]
""")
    with pytest.raises(ConfigError, match=r"\$\.common: unknown key 'common'"):
        load_config(path)  # the anchor's host key is not a config key; the merge itself worked
    path.write_text(path.read_text().replace("common: &common {from_name: x}\n", "").replace(
        "[{<<: *common, to_name: x}]", "[{from_name: x, to_name: x}]").replace("type: independent", "? [a]\n: 1\ntype: independent"))
    with pytest.raises(ConfigError, match=r"found a list as a key: expected a name"):
        load_config(path)


def test_merged_mapping_builds(data, tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(f"""
type: independent
model: {{inputs: [x]}}
args: &args
  dataset: {{type: dir, args: {{data_dir: {data}}}}}
  target_batch_size: 1
  drop_remainder: false
  epochs: 1
  num_read_buffer_bytes: 0
  num_prefetch: 0
  primary_features:
    - &x {{from_name: x, to_name: x}}
""")
    config = load_config(path)
    assert config.primary_features[0].to_name == "x"
    path.write_text(path.read_text().replace("    - &x {from_name: x, to_name: x}",
                                             "    - {<<: {from_name: x}, to_name: x}"))
    assert load_config(path).primary_features[0].from_name == "x"


@pytest.mark.parametrize("call, fragment", [
    (lambda fn: fn("abc"), "found a str as the first argument"),
    (lambda fn: fn(params=5), "found a int: expected a dict"),
])
def test_bad_input_fn_arguments(data, call, fragment):
    with pytest.raises(ConfigError, match=fragment):
        call(build_input_fn(base(data)))


def test_model_that_is_not_a_keras_model(data):
    with pytest.raises(ConfigError, match="found a str: expected a Keras model"):
        build_input_fn(base(data), model="m")


@pytest.mark.parametrize("parts", [("args", "padding", 0), ("args", "processing_steps", 12, "args"), ("a b", 3, "c"), ()])
def test_path_parts_reads_back_what_json_path_writes(parts):
    from batchloaders.errors import json_path, path_parts

    assert path_parts(json_path(parts)) == parts
