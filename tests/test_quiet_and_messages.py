"""A normal run prints no TensorFlow line, and the messages a new user meets first are short and say
what was meant.

TensorFlow's C++ side writes to file descriptor 2 (start-up lines, a failed cuInit, the
TFRecordDataset buffer-size line, which it logs whatever ``buffer_size`` is given): only a process of
its own, with no TF_CPP_MIN_LOG_LEVEL of the test run's, shows what a user would see.
"""
from __future__ import annotations

import io
import os
import re
import subprocess
import sys

import pytest
import yaml

from batchloaders import ManifestError, load_manifest
from batchloaders.cli.main import validate
from batchloaders.core.model import DTYPES
from batchloaders.errors import suggest
from conftest import example, feature, loader_config, write_manifest, write_records

TF_LINE = re.compile(r"^(WARNING: All log messages before absl|[IWEF]\d{4} |.*cudart_stub|.*oneDNN|To enable the "
                     r"following instructions)|.*tensorflow", re.IGNORECASE)

SCRIPT = """
import sys
import batchloaders
import keras

input_fn = batchloaders.build_input_fn(sys.argv[1])
features, targets = next(iter(input_fn()))
print("batch", features["x"].numpy().tolist(), targets["y"].numpy().tolist())
x = keras.Input((2,), name="x")
model = keras.Model({"x": x}, {"y": keras.layers.Dense(1, name="y")(x)})
model.compile("sgd", "mse")
model.fit(input_fn(), epochs=1, steps_per_epoch=1, verbose=0)
print("fitted")
"""


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A config of 4 records x = [i, i + 0.5], y = i % 2, read with the spec's usual 256 KiB buffer."""
    root = tmp_path_factory.mktemp("quiet")
    data = root / "data"
    write_manifest(data, [feature("x", "float32", [2], "float"), feature("y", "int64", [], "int")])
    write_records(data / "part-0.tfrecords", [example(x=("float", [i, i + 0.5]), y=("int", [i % 2])) for i in range(4)])
    config = loader_config(data, [("x", "x"), ("y", "y")], inputs=["x"], targets=["y"], num_read_buffer_bytes=262144)
    path = root / "tiny.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def run(args: list[str], *, level: str | None = None) -> str:
    """stdout and stderr, interleaved as a terminal shows them, of a fresh Python process."""
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    if level is not None:
        env["TF_CPP_MIN_LOG_LEVEL"] = level
    done = subprocess.run([sys.executable, *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stdout
    return done.stdout


def tensorflow_lines(output: str) -> list[str]:
    return [line for line in output.splitlines() if TF_LINE.match(line)]


@pytest.mark.parametrize("command", ["describe", "preview"])
def test_a_command_prints_no_tensorflow_line(tiny, command):
    output = run(["-m", "batchloaders", command, str(tiny)])
    assert output.startswith(f"config: {tiny}\n")
    assert tensorflow_lines(output) == [], output


def test_a_training_script_prints_no_tensorflow_line(tiny, tmp_path):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    output = run([str(script), str(tiny)])
    assert "batch [[0.0, 0.5], [1.0, 1.5]] [0, 1]\n" in output and output.endswith("fitted\n"), output
    assert tensorflow_lines(output) == [], output


def test_a_log_level_the_program_sets_shows_tensorflow_as_it_is(tiny, tmp_path):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    output = run([str(script), str(tiny)], level="0")  # docs/troubleshooting.md: how to see the lines again
    assert any("tf_record_dataset_op" in line for line in tensorflow_lines(output)), output


@pytest.mark.parametrize("name, choices, meant", [
    ("float", DTYPES, "float32"), ("int", DTYPES, "int64"), ("int", ["int32", "int64"], "int64"),
    ("double", DTYPES, "float64"), ("INT32", DTYPES, "int32"), ("flaot32", DTYPES, "float32"),
])
def test_a_bare_type_name_suggests_what_a_keras_user_means(name, choices, meant):
    assert suggest(name, choices) == f" (did you mean {meant!r}?)"


def test_a_manifest_dtype_float_suggests_float32(tmp_path):
    path = write_manifest(tmp_path, [feature("x", "float", [2], "float")])
    with pytest.raises(ManifestError) as info:
        load_manifest(path)
    assert [(p.path, p.message) for p in info.value.problems] == [
        ("$.features[0].dtype", "unknown dtype 'float' (did you mean 'float32'?); expected one of: float16, bfloat16, "
                                "float32, float64, int8, int16, int32, int64, uint8, uint16, uint32, uint64, bool, "
                                "string")]


def test_an_unknown_key_names_the_closest_three_and_the_reference(tiny, tmp_path):
    config = yaml.safe_load(tiny.read_text())
    config["args"]["tagret"] = 1
    path = tmp_path / "typo.yaml"
    path.write_text(yaml.safe_dump(config))
    out = io.StringIO()
    assert validate([str(path)], out) == 1
    assert out.getvalue().splitlines() == [f"{path}: $.args.tagret: unknown key 'tagret' (did you mean 'dataset'?); closest allowed "
                         "keys: dataset, target_batch_size, resume; see the reference: docs/reference.md "
                         "(line 15, column 3)",
                         "1 of 1 file invalid (1 problem)"]


@pytest.fixture
def broken_manifest(tiny, tmp_path, monkeypatch):
    """A copy of ``tiny`` whose manifest holds one problem; the working directory is the copy's."""
    data = tmp_path / "data"
    write_manifest(data, [feature("x", "float", [2], "float"), feature("y", "int64", [], "int")])
    (data / "part-0.tfrecords").write_bytes((tiny.parent / "data" / "part-0.tfrecords").read_bytes())
    config = yaml.safe_load(tiny.read_text())
    config["args"]["dataset"]["args"]["data_dir"] = "data"  # relative to the config
    (tmp_path / "tiny.yaml").write_text(yaml.safe_dump(config))
    monkeypatch.chdir(tmp_path)
    return "unknown dtype 'float' (did you mean 'float32'?)"


def test_a_manifest_and_its_config_report_the_manifests_problem_once(broken_manifest):
    out = io.StringIO()
    assert validate(["data/__manifest__.json", "tiny.yaml"], out) == 1
    assert [line.split("; expected")[0] for line in out.getvalue().splitlines()] == [
        f"data/__manifest__.json: $.features[0].dtype: {broken_manifest}",
        "tiny.yaml: $: invalid: its problems are those shown above for data/__manifest__.json",
        "2 of 2 files invalid (1 problem)"]


def test_one_file_named_twice_reports_its_problems_once(broken_manifest):
    out = io.StringIO()
    assert validate(["data/__manifest__.json", os.path.abspath("data/__manifest__.json")], out) == 1
    assert [line.split("; expected")[0] for line in out.getvalue().splitlines()] == [
        f"data/__manifest__.json: $.features[0].dtype: {broken_manifest}",
        f"{os.path.abspath('data/__manifest__.json')}: $: invalid: its problems are those shown above for "
        "data/__manifest__.json",
        "2 of 2 files invalid (1 problem)"]
