"""Keras with batchloaders as documented: a subclassed model's targets come the way its ``call`` returns its
outputs; data errors met inside ``fit``/``evaluate``/``predict`` of the model given to ``build_input_fn`` are
located DataErrors; the README's tutorial, run as written in fresh processes, prints no TensorFlow line.

Data: 12 Examples, x = [r, r + 0.5], y = r (record r), so a batch's values say which records it holds.
"""
from __future__ import annotations

import copy
import json
import os
import pathlib
import re
import subprocess
import sys

import numpy as np
import pytest

import batchloaders
from batchloaders import ConfigError, DataError
from conftest import example, feature, frame_offsets, loader_config, write_manifest, write_records

keras = pytest.importorskip("keras")
tf = pytest.importorskip("tensorflow")

REPO = pathlib.Path(__file__).resolve().parents[1]
RECORDS = 12


def records(bad: int | None = None) -> list[bytes]:
    """Record r: x = [r, r + 0.5], y = r; record ``bad`` has y as a float_list instead of an int64_list."""
    return [example(x=("float", [r, r + 0.5]), y=("float" if r == bad else "int", [r])) for r in range(RECORDS)]


def dataset(root: pathlib.Path, data: list[bytes] | None = None, cut: int | None = None) -> pathlib.Path:
    """A manifest (x float32 [2], y int64 [], no files listed) and one file of ``data``, its first ``cut``
    bytes only when given."""
    write_manifest(root, [feature("x", "float32", [2], "float"), feature("y", "int64", [], "int")])
    path = pathlib.Path(write_records(root / "part-0.tfrecords", records() if data is None else data))
    if cut is not None:
        path.write_bytes(path.read_bytes()[:cut])
    return root


def config(root, targets=("y",), **args) -> dict:
    primary = [("x", "x"), ("y", "y")] + [("y", t) for t in targets if t != "y"]
    return loader_config(root, primary, inputs=["x"], targets=list(targets), target_batch_size=4,
                         **{"shuffle": False, **args})


class Returns(keras.Model):
    """A subclassed model whose call returns its one output as ``returns`` says: "tensor", "list" or "dict"
    (keyed by ``key``)."""

    def __init__(self, returns: str, key: str = "y"):
        super().__init__()
        self.returns, self.key = returns, key
        self.dense = keras.layers.Dense(1)

    def call(self, features):
        out = self.dense(features["x"])
        return {"tensor": out, "list": [out], "dict": {self.key: out}}[self.returns]


class NoSymbolicCall(Returns):
    """Returns a tensor, but its outputs cannot be worked out without data (Keras's compute_output_spec refuses)."""

    def compute_output_spec(self, *args, **kwargs):
        raise NotImplementedError("no symbolic call")


def built(model):
    model({"x": np.zeros((1, 2), "float32")})
    model.compile(optimizer=keras.optimizers.SGD(1e-3), loss="mse")
    return model


def functional():
    x = keras.Input((2,), name="x")
    model = keras.Model({"x": x}, {"y": keras.layers.Dense(1, name="y")(x)})
    model.compile(optimizer=keras.optimizers.SGD(1e-3), loss="mse")
    return model


@pytest.mark.parametrize("model_of", [lambda: Returns("tensor"), lambda: Returns("list"),
                                      lambda: NoSymbolicCall("tensor")], ids=["tensor", "list", "no-symbolic-call"])
def test_a_subclassed_model_with_one_output_trains_on_its_one_target_as_a_tensor(tmp_path, model_of):
    model = built(model_of())
    input_fn = batchloaders.build_input_fn(config(dataset(tmp_path)), model=model)
    features, targets = next(iter(input_fn()))
    assert features["x"].numpy().tolist() == [[r, r + 0.5] for r in range(4)]
    assert targets.numpy().tolist() == [0, 1, 2, 3]  # a bare tensor, not {"y": ...}
    history = model.fit(input_fn(), epochs=2, verbose=0, shuffle=False)
    assert len(history.history["loss"]) == 2 and np.isfinite(history.history["loss"]).all()


def test_a_subclassed_model_returning_a_dict_gets_a_dict_of_targets(tmp_path):
    model = built(Returns("dict"))
    input_fn = batchloaders.build_input_fn(config(dataset(tmp_path)), model=model)
    _, targets = next(iter(input_fn()))
    assert {k: v.numpy().tolist() for k, v in targets.items()} == {"y": [0, 1, 2, 3]}
    assert np.isfinite(model.fit(input_fn(), epochs=1, verbose=0, shuffle=False).history["loss"]).all()


def test_a_subclassed_models_output_named_other_than_the_target_is_a_config_error(tmp_path):
    cfg = config(dataset(tmp_path))
    with pytest.raises(ConfigError) as caught:
        batchloaders.build_input_fn(cfg, model=built(Returns("dict", key="label")))
    assert [str(p) for p in caught.value.problems] == [
        "<dict>: $.model.targets: the model's output 'label' is not produced by the config; the config's "
        "targets: y",
        "<dict>: $.model.targets: the config's target 'y' has no output of the model to be compared with; the "
        "model gives: label"]


def test_a_subclassed_model_with_fewer_outputs_than_targets_is_a_config_error(tmp_path):
    cfg = config(dataset(tmp_path), targets=("y", "y_again"))
    with pytest.raises(ConfigError) as caught:
        batchloaders.build_input_fn(cfg, model=built(Returns("tensor")))
    assert [str(p) for p in caught.value.problems] == [
        "<dict>: $.model.targets: the subclassed model's outputs have no names, so they are matched by position "
        "with the config's model.targets: the model has 1 output(s), but the config names 2 (y, y_again): "
        "expected exactly 1"]


# What each damage gives, located: (the file's bytes, the cut, the DataError's path, its message).
def _bad_record(root):
    return records(bad=7), None, "record 7", (
        f"feature 'y': the manifest {root / '__manifest__.json'} says int (int64_list) of shape [] (1 value), "
        "found a float_list of 1 value")


def _cut_file(root):
    offsets = frame_offsets(records())
    return records(), offsets[9] + 20, f"batchloaders data error at byte {offsets[9]}, after record 8 (the last "\
        "good one; records count from 0)", (
        "a record frame or checksum is damaged there, or the file ends inside a record (is it a TFRecord file, "
        "and uncompressed, as the manifest says?)")


MODELS = {"functional": functional, "subclassed": lambda: built(Returns("tensor"))}
CALLS = {"fit": lambda m, ds: m.fit(ds, epochs=1, verbose=0, shuffle=False),
         "evaluate": lambda m, ds: m.evaluate(ds, verbose=0), "predict": lambda m, ds: m.predict(ds, verbose=0)}


@pytest.mark.parametrize("damage", [_bad_record, _cut_file], ids=["float-for-int64", "cut-file"])
@pytest.mark.parametrize("kind", sorted(MODELS))
@pytest.mark.parametrize("call", sorted(CALLS))
def test_a_data_error_inside_the_given_models_method_is_a_located_data_error(tmp_path, damage, kind, call):
    data, cut, where, message = damage(tmp_path)
    root = dataset(tmp_path, data, cut)
    model = MODELS[kind]()
    input_fn = batchloaders.build_input_fn(config(root), model=model)
    with pytest.raises(DataError) as caught:
        CALLS[call](model, input_fn())
    assert [(p.file, p.path, p.message) for p in caught.value.problems] == [
        (str(root / "part-0.tfrecords"), where, message)]
    # Also the TensorFlow error it stands for: code catching that keeps working.
    assert isinstance(caught.value, tf.errors.InvalidArgumentError)


def test_only_the_given_model_changes(tmp_path):
    root = dataset(tmp_path, records(bad=7))
    model, other = functional(), functional()
    input_fn = batchloaders.build_input_fn(config(root), model=model)
    batchloaders.build_input_fn(config(root), model=model)  # a second pipeline for it (validation, say)
    assert model.fit is vars(model)["fit"] and model.fit.__wrapped__.__self__ is model  # the instance's own
    assert type(model).fit is keras.Model.fit and "fit" not in vars(other)
    with pytest.raises(tf.errors.InvalidArgumentError) as caught:  # not given: TensorFlow's own error
        other.fit(input_fn(), epochs=1, verbose=0, shuffle=False)
    assert not isinstance(caught.value, DataError)
    model.save(tmp_path / "model.keras")  # saved and loaded as before, without the wrapping
    for twin in (keras.models.load_model(tmp_path / "model.keras"), copy.deepcopy(model)):  # a copy is saved too
        assert "fit" not in vars(twin) and type(twin).fit is keras.Model.fit
        np.testing.assert_array_equal(twin.get_weights()[0], model.get_weights()[0])


def test_good_data_fits_the_given_model_as_before(tmp_path):
    model = functional()
    input_fn = batchloaders.build_input_fn(config(dataset(tmp_path)), model=model)
    before = [w.copy() for w in model.get_weights()]
    history = model.fit(input_fn(), epochs=2, verbose=0, shuffle=False)
    assert len(history.history["loss"]) == 2
    assert any((a != b).any() for a, b in zip(before, model.get_weights()))
    assert model.predict(input_fn(), verbose=0)["y"].shape == (RECORDS, 1)


TF_LINE = re.compile(r"^(WARNING: All log messages before absl|[IWEF]\d{4} \d\d:\d\d:\d\d|.*cudart_stub|.*oneDNN|"
                     r"To enable the following instructions)")


def tutorial(page: str = "README.md") -> list[tuple[int, str, str]]:
    """The programs of the README's tutorial, in order."""
    from test_readme_blocks import programs

    text = (REPO / page).read_text(encoding="utf-8").splitlines()
    start = text.index("<!-- --8<-- [start:tutorial] -->") + 1
    end = text.index("<!-- --8<-- [end:tutorial] -->") + 1
    return [p for p in programs(page) if start < p[0] < end]


def test_the_tutorial_prints_no_tensorflow_line_run_as_written(tmp_path):
    """Each program in a fresh process, as a user runs it: no TF_CPP_MIN_LOG_LEVEL, nothing imported before (the
    commands of the sh block one after another in one process, as test_readme_blocks.py runs them)."""
    from test_readme_blocks import CLI_RUNNER, cli_commands

    env = {k: v for k, v in os.environ.items() if k not in ("TF_CPP_MIN_LOG_LEVEL", "PYTHONPATH")}
    env.update(HOME=str(tmp_path), PATH=os.pathsep.join([str(pathlib.Path(sys.executable).parent), env["PATH"]]))
    ran = []
    for line, language, code in tutorial():
        assert language == "python" or cli_commands(code), f"README.md line {line}: not batchloaders commands"
        argv = [sys.executable, "-c"] + ([code] if language == "python" else [CLI_RUNNER, code])
        done = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, f"README.md line {line}:\n{done.stderr[-3000:]}"
        lines = [t for t in (done.stdout + done.stderr).splitlines() if TF_LINE.match(t)]
        assert lines == [], f"README.md line {line} printed TensorFlow lines:\n" + "\n".join(lines)
        ran.append((language, done.stdout.splitlines()[-1] if done.stdout else ""))
    assert [language for language, _ in ran] == ["python", "sh", "python"]
    assert re.fullmatch(r"accuracy 0\.9\d*|accuracy 1\.0", ran[-1][1]), ran


def test_another_pipelines_error_inside_fit_stays_tensorflows(tmp_path):
    """Only errors naming a data file of our pipelines are converted: a parse error of the user's own dataset
    inside the wrapped fit is TensorFlow's, not blamed on our files."""
    model = functional()
    batchloaders.build_input_fn(config(dataset(tmp_path)), model=model)
    theirs = tf.data.Dataset.from_tensors(tf.constant(["not a proto"])).map(
        lambda s: tf.io.parse_example(s, {"x": tf.io.FixedLenFeature([], tf.float32)}))
    with pytest.raises(tf.errors.InvalidArgumentError) as raised:
        model.predict(theirs.map(lambda d: {"x": tf.stack([d["x"], d["x"]], -1)}), verbose=0)
    assert not isinstance(raised.value, DataError)


def test_a_method_the_user_set_on_the_instance_is_kept(tmp_path):
    model = functional()
    calls = []
    original = model.evaluate

    def evaluate(*args, **kwargs):
        calls.append("mine")
        return original(*args, **kwargs)
    object.__setattr__(model, "evaluate", evaluate)
    input_fn = batchloaders.build_input_fn(config(dataset(tmp_path)), model=model)
    model.evaluate(input_fn(), verbose=0)
    assert calls == ["mine"] and getattr(model.evaluate, "_batchloaders_locating", False)


@pytest.mark.parametrize("kind", sorted(MODELS))
def test_a_data_error_inside_fit_written_on_one_line_is_a_located_data_error(tmp_path, kind):
    """``model.fit(build_input_fn(config, model=model)())`` looks ``fit`` up before build_input_fn wraps it: the
    step function Keras makes inside fit is wrapped too."""
    data, cut, where, message = _cut_file(tmp_path)
    root = dataset(tmp_path, data, cut)
    model = MODELS[kind]()
    with pytest.raises(DataError) as caught:
        model.fit(batchloaders.build_input_fn(config(root), model=model)(), epochs=1, verbose=0, shuffle=False)
    assert [(p.file, p.path, p.message) for p in caught.value.problems] == [
        (str(root / "part-0.tfrecords"), where, message)]


@pytest.mark.parametrize("call", sorted(CALLS))
def test_a_file_not_its_listed_size_inside_the_given_models_method_is_a_located_data_error(tmp_path, call):
    """The manifest lists the file's size (read/proven.py): its size check fails with TensorFlow's count error,
    which names no file; the model's method still raises the DataError naming the file and the sizes."""
    root = dataset(tmp_path)
    path = root / "part-0.tfrecords"
    listed = path.stat().st_size
    manifest = json.loads((root / "__manifest__.json").read_text())
    manifest["files"] = [{"name": "part-0.tfrecords", "num_records": RECORDS, "size_bytes": listed}]
    (root / "__manifest__.json").write_text(json.dumps(manifest))
    model = functional()
    batches = batchloaders.build_input_fn(config(root), model=model)()
    cut_at = frame_offsets(records())[9]  # a record boundary: TensorFlow's reader alone would end without an error
    path.write_bytes(path.read_bytes()[:cut_at])  # after the build, which would report it
    with pytest.raises(DataError) as caught:
        CALLS[call](model, batches)
    problem, = caught.value.problems
    assert (problem.file, problem.path) == (str(path), f"batchloaders data error at byte {cut_at}")
    assert problem.message.startswith(f"the manifest {root / '__manifest__.json'} lists {listed} bytes for this "
                                      f"file (size_bytes), but it is {cut_at} bytes when it is opened")
