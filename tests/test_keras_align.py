"""build_input_fn(config, model=model) checks the model against the config before any batch is made.

Each refused case asserts the whole message and that build_input_fn raised it: model.fit is never
reached, so no Keras error (or silently dropped key) can follow.
"""
from __future__ import annotations

import numpy as np
import pytest

from batchloaders import build_input_fn
from batchloaders.errors import ConfigError
from conftest import example, feature, loader_config, write_manifest, write_records

keras = pytest.importorskip("keras")


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """2 files x 4 Examples: frames float32 [16], ids int64 [16], label int64 []."""
    d = tmp_path_factory.mktemp("align")
    write_manifest(d, [feature("frames", "float32", [16], "float"), feature("ids", "int64", [16], "int"),
                       feature("label", "int64", [], "int")])
    for f in range(2):
        write_records(d / f"part-{f}.tfrecords", [
            example(frames=("float", [0.1 * (4 * f + r)] * 16), ids=("int", [(4 * f + r) % 7] * 16),
                    label=("int", [(4 * f + r) % 2])) for r in range(4)])
    return d


def config(data, inputs=("frames",), targets=("label",), **args):
    primary = [(n, n) for n in ("frames", "ids", "label") if n in (*inputs, *targets)]
    return loader_config(data, primary, inputs=inputs, targets=targets, target_batch_size=4, epochs=None, **args)


def functional(inputs: dict, output="label"):
    """A dict-in, dict-out functional model: every input flattened, cast to float and summed into one Dense."""
    flat = [keras.layers.Flatten()(keras.ops.cast(t, "float32")) for t in inputs.values()]
    joined = flat[0] if len(flat) == 1 else keras.layers.Concatenate()(flat)
    return keras.Model(inputs, {output: keras.layers.Dense(1, name=output)(joined)})


def fit(model, input_fn):
    model.compile(optimizer=keras.optimizers.SGD(1e-3), loss="mse")
    history = model.fit(input_fn(), steps_per_epoch=2, epochs=1, verbose=0, shuffle=False)
    assert np.isfinite(history.history["loss"]).all()


class Subclassed(keras.Model):
    """Takes the dict of features its config names."""

    def __init__(self):
        super().__init__()
        self.dense = keras.layers.Dense(1)

    def call(self, features):
        return {"label": self.dense(features["frames"])}


class SumsItsInputs(keras.Model):
    """Takes any dict of features (all concatenated): built on a dict, Keras records only its keys."""

    def __init__(self):
        super().__init__()
        self.dense = keras.layers.Dense(1)

    def call(self, features):
        return {"label": self.dense(keras.ops.concatenate([keras.ops.cast(v, "float32") for v in features.values()],
                                                          -1))}


def built_subclassed(*keys):
    model = SumsItsInputs()
    model({key: np.zeros((1, 16), "float32") for key in keys})
    return model


def sequential(width=16, outputs=1):
    return keras.Sequential([keras.Input((width,)), keras.layers.Dense(outputs)])


def test_an_aligned_functional_model_trains(data):
    model = functional({"frames": keras.Input((16,), name="frames")})
    input_fn = build_input_fn(config(data), model=model)
    features, targets = next(iter(input_fn()))
    assert list(features) == ["frames"] and features["frames"].shape == (4, 16) and list(targets) == ["label"]
    fit(model, input_fn)


def test_an_aligned_functional_model_with_several_inputs_trains(data):
    model = functional({"frames": keras.Input((16,), name="frames"),
                        "ids": keras.Input((16,), dtype="int64", name="ids")})
    fit(model, build_input_fn(config(data, inputs=("frames", "ids")), model=model))


def test_an_aligned_sequential_model_trains_by_position(data):
    model = sequential()
    input_fn = build_input_fn(config(data), model=model)
    features, targets = next(iter(input_fn()))
    assert features.shape == (4, 16) and targets.shape == (4,)  # single tensors, not dicts
    fit(model, input_fn)


def test_a_built_subclassed_model_is_accepted_and_trains(data):
    model = Subclassed()
    model({"frames": np.zeros((1, 16), "float32")})  # built
    input_fn = build_input_fn(config(data), model=model)
    features, targets = next(iter(input_fn()))
    assert list(features) == ["frames"] and list(targets) == ["label"]  # the config's model block names them
    fit(model, input_fn)


UNBUILT = ("<model>: $: the {} model is not built, so its inputs are not known and Keras would build it from "
           "whatever the first batch holds: build it first (call it on one batch of features, or "
           "model.build(input_shape); a Sequential model can start with a keras.Input)")

WHERE = "<dict>: $.args.primary_features[{}].to_name: "

REFUSED = [
    ("misnamed input",
     lambda: functional({"frame": keras.Input((16,), name="frame")}), {},
     ["<dict>: $.model.inputs: the model's input 'frame' is not produced by the config (did you mean the "
      "config's input 'frames'?): rename one of them so that they match"]),
    ("missing input",
     lambda: functional({"frames": keras.Input((16,), name="frames"), "speaker": keras.Input((1,), name="speaker")}),
     {}, ["<dict>: $.model.inputs: the model's input 'speaker' is not produced by the config; the config's "
          "inputs: frames"]),
    ("an input that is a config target",
     lambda: functional({"frames": keras.Input((16,), name="frames"), "label": keras.Input((1,), name="label")},
                        output="y"), {},
     ["<dict>: $.model.inputs: the model's input 'label' is a target in the config: expected it among the "
      "config's inputs (model.inputs)",
      "<dict>: $.model.targets: the model's output 'y' is not produced by the config; the config's targets: label",
      "<dict>: $.model.targets: the config's target 'label' has no output of the model to be compared with; the "
      "model gives: y"]),
    ("extra config tensor",
     lambda: functional({"frames": keras.Input((16,), name="frames")}), {"inputs": ("frames", "ids")},
     ["<dict>: $.model.inputs: the config's input 'ids' is not taken by the model (Keras 3 would drop an extra "
      "dict key with only a warning); the model takes: frames"]),
    ("misnamed output",
     lambda: functional({"frames": keras.Input((16,), name="frames")}, output="labels"), {},
     ["<dict>: $.model.targets: the model's output 'labels' is not produced by the config (did you mean the "
      "config's target 'label'?): rename one of them so that they match"]),
    ("shape",
     lambda: functional({"frames": keras.Input((20,), name="frames")}), {},
     [WHERE.format(0) + "tensor 'frames' has shape [B, 16] once batched, but the model input 'frames' takes "
      "[None, 20]: expected the same rank and the same length on every axis both fix"]),
    ("rank",
     lambda: functional({"frames": keras.Input((4, 4), name="frames")}), {},
     [WHERE.format(0) + "tensor 'frames' has shape [B, 16] once batched, but the model input 'frames' takes "
      "[None, 4, 4]: expected the same rank and the same length on every axis both fix"]),
    ("int into float",  # Keras would cast silently: mostly a keras.Input left at its float32 default
     lambda: functional({"ids": keras.Input((16,), name="ids")}), {"inputs": ("ids",)},
     [WHERE.format(0) + "tensor 'ids' is int64 (int), but the model input 'ids' takes float32 (float): expected "
      "the same kind of dtype (give the keras.Input dtype='int64', or add a cast step to 'ids')"]),
    ("float into string",
     lambda: functional({"frames": keras.Input((16,), dtype="string", name="frames")}), {},
     [WHERE.format(0) + "tensor 'frames' is float32 (float), but the model input 'frames' takes string (string): "
      "expected the same kind of dtype (give the keras.Input dtype='float32', or add a cast step to 'frames')"]),
    ("ragged input, padded tensor",
     lambda: functional({"frames": keras.Input((16,), ragged=True, name="frames")}), {},
     [WHERE.format(0) + "the model input 'frames' is ragged (ragged=True), but the config batches 'frames' as "
      "dense: expected batching: ragged in the padding entry of 'frames'"]),
    ("every mismatch at once",
     lambda: functional({"frame": keras.Input((16,), name="frame"), "ids": keras.Input((20,), name="ids")}),
     {"inputs": ("frames", "ids", "label"), "targets": ()},
     ["<dict>: $.model.inputs: the model's input 'frame' is not produced by the config (did you mean the "
      "config's input 'frames'?): rename one of them so that they match",
      "<dict>: $.model.inputs: the config's input 'label' is not taken by the model (Keras 3 would drop an extra "
      "dict key with only a warning); the model takes: frame, ids",
      WHERE.format(1) + "tensor 'ids' is int64 (int), but the model input 'ids' takes float32 (float): expected "
      "the same kind of dtype (give the keras.Input dtype='int64', or add a cast step to 'ids')",
      WHERE.format(1) + "tensor 'ids' has shape [B, 16] once batched, but the model input 'ids' takes "
      "[None, 20]: expected the same rank and the same length on every axis both fix",
      "<dict>: $.model.targets: the model's output 'label' is an input in the config: expected it among the "
      "config's targets (model.targets)"]),
    ("sequential shape",
     lambda: sequential(width=20), {},
     [WHERE.format(0) + "tensor 'frames' has shape [B, 16] once batched, but the model's input 0 takes "
      "[None, 20]: expected the same rank and the same length on every axis both fix"]),
    ("sequential count",
     lambda: sequential(), {"inputs": ("frames", "ids")},
     ["<dict>: $.model.inputs: the sequential model's inputs have no names, so they are matched by position "
      "with the config's model.inputs: the model has 1 input(s), but the config names 2 (frames, ids): "
      "expected exactly 1"]),
    ("unbuilt subclassed", Subclassed, {}, [UNBUILT.format("Subclassed")]),
    ("built subclassed, misnamed", lambda: built_subclassed("frame"), {},
     ["<dict>: $.model.inputs: the subclassed model was built on a dict with key 'frame', which the config's inputs "
      "lack (did you mean 'frames'?): its call would fail on the first batch; the config's inputs: frames"]),
    ("built subclassed, a target", lambda: built_subclassed("frames", "label"), {},
     ["<dict>: $.model.inputs: the subclassed model was built on a dict with key 'label', which the config's "
      "inputs lack (the config has it as a target): its call would fail on the first batch; the config's "
      "inputs: frames"]),
    ("unbuilt sequential", lambda: keras.Sequential([keras.layers.Dense(1)]), {}, [UNBUILT.format("Sequential")]),
]


@pytest.mark.parametrize("make, args, expected", [r[1:] for r in REFUSED], ids=[r[0] for r in REFUSED])
def test_a_misaligned_model_is_refused_before_training(data, make, args, expected):
    model = make()
    with pytest.raises(ConfigError) as caught:
        build_input_fn(config(data, **args), model=model)  # raised here: fit is never called
    assert [str(p) for p in caught.value.problems] == expected


def test_without_the_check_keras_would_drop_an_extra_key_with_only_a_warning(data):
    """Why the check exists: the same misaligned pair, batches made without model=, trains silently."""
    model = functional({"frames": keras.Input((16,), name="frames")})
    with pytest.warns(UserWarning, match="structure of `inputs` doesn't match"):
        fit(model, build_input_fn(config(data, inputs=("frames", "ids"))))


def test_a_config_without_a_model_block_takes_a_named_models_names(data):
    cfg = config(data)
    del cfg["model"]
    model = functional({"frames": keras.Input((16,), name="frames")})
    input_fn = build_input_fn(cfg, model=model)
    assert (input_fn.config.inputs, input_fn.config.targets) == (("frames",), ("label",))


def test_a_sequential_model_needs_the_config_to_name_its_tensors(data):
    cfg = config(data)
    del cfg["model"]
    with pytest.raises(ConfigError) as caught:
        build_input_fn(cfg, model=sequential())
    assert str(caught.value.problems[0]) == ("<model>: $: the sequential model's tensors have no names: the "
                                             "config's model block names them, in the model's order")


def test_padding_to_the_models_length_aligns(data):
    cfg = config(data, padding=[{"tensor": "frames", "shape": [20]}])
    model = functional({"frames": keras.Input((20,), name="frames")})
    fit(model, build_input_fn(cfg, model=model))


@pytest.mark.parametrize("model_input, fragment", [
    (("frames", 20), r"has shape \[B, 16\] once batched, but the model input 'frames' takes \[None, 20\]"),
    (("frame", 16), r"the model's input 'frame' is not produced by the config \(did you mean the config's input "
                    r"'frames'\?\)"),
])
def test_a_checked_config_is_checked_against_the_model_too(data, model_input, fragment):
    from batchloaders.config.config import load_config

    name, width = model_input
    with pytest.raises(ConfigError, match=fragment):
        build_input_fn(load_config(config(data)), model=functional({name: keras.Input((width,), name=name)}))


def test_something_that_is_not_a_keras_model_is_refused(data):
    with pytest.raises(ConfigError, match=r"found a dict: expected a Keras model \(functional, Sequential or a "
                                          r"keras.Model subclass\)"):
        build_input_fn(config(data), model={"frames": None})


def test_a_functional_model_with_unnamed_inputs_matches_them_by_position(data):
    unnamed = keras.Input((16,))  # Keras names it keras_tensor_N
    model = keras.Model([unnamed], [keras.layers.Dense(1, name="label")(unnamed)])
    input_fn = build_input_fn(config(data), model=model)
    features, targets = next(iter(input_fn()))
    assert isinstance(features, tuple) and features[0].shape == (4, 16) and targets[0].shape == (4,)
    fit(model, input_fn)
