"""``python -m batchloaders validate`` on real files: printed lines and exit codes."""
from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]

GOOD_CONFIG = """\
type: independent
model: {inputs: [x], targets: [label]}
args:
  dataset: {type: dir, args: {data_dir: ../data}}
  target_batch_size: 2
  drop_remainder: false
  epochs: 1
  num_read_buffer_bytes: 0
  num_prefetch: 1
  primary_features:
    - {from_name: x, to_name: x}
    - {from_name: label, to_name: label}
"""


def run(*args: str, cwd: pathlib.Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    return subprocess.run([sys.executable, "-m", "batchloaders", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)


def write_examples(path: pathlib.Path, count: int) -> None:
    """``count`` Examples with x = [i, i + 0.5] and label = i."""
    import tensorflow as tf

    with tf.io.TFRecordWriter(str(path)) as writer:
        for i in range(count):
            writer.write(tf.train.Example(features=tf.train.Features(feature={
                "x": tf.train.Feature(float_list=tf.train.FloatList(value=[i, i + 0.5])),
                "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[i])),
            })).SerializeToString())


@pytest.fixture
def workspace(tmp_path):
    """tmp_path with data/ (manifest + one data file) and configs/good.yaml pointing at it."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "__manifest__.json").write_text(json.dumps({
        "compression": None, "allow_var_len": False,
        "features": [{"name": "x", "dtype": "float32", "shape": [2], "deserialize_type": "float"},
                     {"name": "label", "dtype": "int64", "shape": [], "deserialize_type": "int"}]}))
    write_examples(data / "part-0.tfrecords", 3)
    configs = tmp_path / "configs"
    configs.mkdir()
    (configs / "good.yaml").write_text(GOOD_CONFIG)
    return tmp_path


def test_valid_files_print_ok(workspace):
    result = run("validate", "configs/good.yaml", "data/__manifest__.json", cwd=workspace)
    assert result.stdout == "OK configs/good.yaml\nOK data/__manifest__.json\n"
    assert result.returncode == 0, result.stderr


def test_every_schema_problem_is_printed(workspace):
    bad = (GOOD_CONFIG.replace("epochs: 1", "epochs: many").replace("num_prefetch: 1", "num_prefetch: -5")
           .replace("{from_name: label, to_name: label}", "{from_name: label}"))
    (workspace / "configs" / "bad.yaml").write_text(bad)
    result = run("validate", "configs/bad.yaml", cwd=workspace)
    assert result.stdout.splitlines() == [
        "configs/bad.yaml: $.args.epochs: expected integer or null, found string 'many' (line 7, column 3)",
        "configs/bad.yaml: $.args.num_prefetch: expected an integer >= -1, found -5 (line 9, column 3)",
        "configs/bad.yaml: $.args.primary_features[1]: missing required key 'to_name' (line 12, column 7)",
        "1 of 1 file invalid (3 problems)",
    ]
    assert result.returncode == 1


def test_misspelt_key_gets_a_suggestion(workspace):
    (workspace / "configs" / "typo.yaml").write_text(GOOD_CONFIG.replace("target_batch_size", "tagret_batch_size"))
    result = run("validate", "configs/typo.yaml", cwd=workspace)
    lines = result.stdout.splitlines()
    assert lines[0] == "configs/typo.yaml: $.args: missing required key 'target_batch_size' (line 3, column 1)"
    assert lines[1] == ("configs/typo.yaml: $.args.tagret_batch_size: unknown key 'tagret_batch_size' (did you mean "
                        "'target_batch_size'?); closest allowed keys: target_batch_size, resume, epochs; see the "
                        "reference: docs/reference.md (line 5, column 3)")
    assert lines[2:] == ["1 of 1 file invalid (2 problems)"]
    assert result.returncode == 1


def test_problem_found_after_the_schema_check(workspace):
    # The schema accepts any from_name; the manifest does not know 'lable'.
    (workspace / "configs" / "lable.yaml").write_text(GOOD_CONFIG.replace("from_name: label", "from_name: lable"))
    result = run("validate", "configs/lable.yaml", cwd=workspace)
    assert result.returncode == 1
    assert result.stdout.startswith("configs/lable.yaml: $.args.primary_features[1].from_name: ")
    first = result.stdout.splitlines()[0]
    assert "'lable'" in first and first.endswith("(line 12, column 8)")


def test_bad_manifest(workspace):
    (workspace / "other_manifest.json").write_text(json.dumps(
        {"compression": "zip", "allow_var_len": False,
         "features": [{"name": "x", "dtype": "float32", "shape": [2], "deserialize_type": "float"}]}))
    result = run("validate", "other_manifest.json", cwd=workspace)
    assert result.stdout == ("other_manifest.json: $.compression: unknown compression 'zip' (did you mean 'gzip'?); "
                             "expected one of: null, zlib, gzip (line 1, column 2)\n1 of 1 file invalid (1 problem)\n")
    assert result.returncode == 1


def test_directory_is_searched_without_recursing(workspace):
    configs = workspace / "configs"
    (configs / "bad.yml").write_text(GOOD_CONFIG.replace("type: independent", "type: independant"))
    (configs / "old_manifest.json").write_text(json.dumps({"compression": None, "allow_var_len": False,
                                                           "features": []}))
    (configs / "README.txt").write_text("not a config")
    (configs / "nested").mkdir()
    (configs / "nested" / "broken.yaml").write_text("type: [")
    result = run("validate", "configs", cwd=workspace)
    assert result.stdout.splitlines() == [
        "configs/bad.yml: $.type: unknown loader type 'independant' (did you mean 'independent'?); "
        "expected one of: independent, continuous_sequence, discrete_sequence (line 1, column 1)",
        "OK configs/good.yaml",
        "configs/old_manifest.json: $.features: expected at least 1 item, found 0 (line 1, column 47)",
        "2 of 3 files invalid (2 problems)",
    ]
    assert result.returncode == 1


def test_dataset_directory_validates_its_manifest(workspace):
    result = run("validate", "data", cwd=workspace)
    assert result.stdout == "OK data/__manifest__.json\n"
    assert result.returncode == 0


def test_missing_and_malformed_files_are_invalid(workspace):
    (workspace / "broken.yaml").write_text("type: independent\nargs: [\n")
    result = run("validate", "missing.yaml", "broken.yaml", cwd=workspace)
    lines = result.stdout.splitlines()
    assert lines[0] == "missing.yaml: $: file not found"
    assert lines[1].startswith("broken.yaml: $: malformed YAML: ")
    assert lines[2:] == ["2 of 2 files invalid (2 problems)"]
    assert result.returncode == 1


@pytest.mark.parametrize("args", [(), ("validate",), ("validate", "empty"), ("frobnicate", "x.yaml")])
def test_usage_errors_exit_2(workspace, args):
    (workspace / "empty").mkdir()
    result = run(*args, cwd=workspace)
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr


def test_validate_does_not_import_tensorflow(workspace):
    code = textwrap.dedent("""
        import sys
        from batchloaders.cli.main import validate
        code = validate(["configs/good.yaml", "data"])
        assert code == 0, code
        assert "tensorflow" not in sys.modules, "validate imported tensorflow"
        assert "apache_beam" not in sys.modules, "validate imported Apache Beam"
    """)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    result = subprocess.run([sys.executable, "-c", code], cwd=workspace, env=env, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "OK configs/good.yaml\nOK data/__manifest__.json\n"


NO_MODEL_CONFIG = GOOD_CONFIG.replace("model: {inputs: [x], targets: [label]}\n", "")


def test_a_config_without_a_model_block_validates_and_says_what_it_assumed(workspace):
    (workspace / "configs" / "bare.yaml").write_text(NO_MODEL_CONFIG)
    result = run("validate", "configs/bare.yaml", cwd=workspace)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout == ("OK configs/bare.yaml (no model block: every feature is taken as a model input, none as "
                             "a target: x, label; build_input_fn(config, model=...) takes the model's names)\n")


def test_without_a_model_block_the_dataset_yields_every_feature_and_a_model_splits_them(workspace):
    import keras

    from batchloaders import build_input_fn

    path = workspace / "configs" / "bare.yaml"
    path.write_text(NO_MODEL_CONFIG)
    (batch,) = list(build_input_fn(str(path))().as_numpy_iterator())[:1]
    assert sorted(batch) == ["label", "x"]  # a dict of every feature, no targets
    assert batch["x"].tolist() == [[0.0, 0.5], [1.0, 1.5]] and batch["label"].tolist() == [0, 1]
    x = keras.Input((2,), name="x")
    model = keras.Model({"x": x}, {"label": keras.layers.Dense(1, name="label")(x)})
    features, targets = next(iter(build_input_fn(str(path), model=model)()))
    assert list(features) == ["x"] and targets["label"].numpy().tolist() == [0, 1]
