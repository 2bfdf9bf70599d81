"""Per-tensor batching policies: dense, ragged, sparse and batchers users register, on all three loaders.

Each case builds the same seeded pipeline twice: once with the policy under test on one
tensor, once with plain padding (padding: true). The padded batch is the reference: its
rows cut to the `length` feature are the examples, so ragged rows must equal them, a
sparse batch must densify to it (entries past a length are absent, never zeros stored),
and a batcher must compute its function of exactly those rows. Values come from the
seqdata fixtures, where every step says which file, record and step it is.
"""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import batchloaders
from batchloaders import ConfigError, build_input_fn, load_config
from batchloaders.transform.builtin_types import load as load_builtin_types
from batchloaders.transform.registry import BATCHERS
from conftest import collect, feature, loader_config, sequence_example, write_manifest, write_records
from seqdata import sequence_config, write_continuous, write_discrete


@pytest.fixture(scope="module")
def datasets(tmp_path_factory):
    root = tmp_path_factory.mktemp("policies")
    indep = root / "indep"
    write_manifest(indep, [feature("x", "float32", [2], "float", var_len=True),
                           feature("id", "int64", [], "int", var_len=False)], allow_var_len=True)
    write_records(indep / "a.tfrecords", [
        sequence_example({"id": ("int", [r])}, {"x": ("float", [[10.0 * r + j, -(10.0 * r + j)]
                                                                for j in range(r % 4)])})
        for r in range(7)])  # lengths 0, 1, 2, 3, 0, 1, 2: an empty example too
    write_continuous(root / "cont", [[3, 1, 5, 2], [4, 4]], layout="sequence")
    write_discrete(root / "disc", [[(1 + (f + r) % 4, 1 + r % 2) for r in range(8)] for f in range(3)])
    return root


def config(datasets, loader, padding):
    """(config, tensor under test): a seeded pipeline whose tensor varies in length, with its length `n`."""
    length = [{"to_name": "n", "type": "length", "args": {"tensor": "x"}}]
    if loader == "independent":
        return loader_config(datasets / "indep", [("x", "x"), ("id", "id")], inputs=["x", "n"], targets=["id"],
                             target_batch_size=3, padding=padding, secondary_features=length)
    if loader == "continuous_sequence":
        return sequence_config(datasets / "cont", loader, [("x", "x"), ("y", "y")], inputs=["x", "n", "y"], lo=2,
                               hi=5, seed=5, shuffle=False, target_batch_size=3, padding=padding,
                               secondary_features=length)
    return sequence_config(datasets / "disc", loader, [("frames", "x"), ("words", "words")],
                           inputs=["x", "n", "words"], lo=1, hi=3, seed=5, target_batch_size=3, padding=padding,
                           secondary_features=length)


def features(dataset):
    """Every batch's features as eager values (ragged and sparse tensors stay what they are)."""
    return [b[0] if isinstance(b, tuple) else b for b in dataset]


LOADERS = ["independent", "continuous_sequence", "discrete_sequence"]


def reference(datasets, loader):
    """The padded batches: (x [B, max, 2], n [B]) per batch."""
    return [(f["x"].numpy(), f["n"].numpy()) for f in features(build_input_fn(config(datasets, loader, True))())]


@pytest.mark.parametrize("loader", LOADERS)
def test_ragged_rows_are_the_examples(datasets, loader):
    batches = features(build_input_fn(config(datasets, loader, [{"tensor": "x", "batching": "ragged"}]))())
    want = reference(datasets, loader)
    assert len(batches) == len(want) > 1
    for got, (x, n) in zip(batches, want):
        assert isinstance(got["x"], tf.RaggedTensor)
        np.testing.assert_array_equal(got["x"].row_lengths(), n)
        for row, full, length in zip(got["x"], x, n):
            np.testing.assert_array_equal(row.numpy(), full[:length])


@pytest.mark.parametrize("loader", LOADERS)
def test_sparse_holds_exactly_the_examples_entries(datasets, loader):
    batches = features(build_input_fn(config(datasets, loader, [{"tensor": "x", "batching": "sparse"}]))())
    want = reference(datasets, loader)
    for got, (x, n) in zip(batches, want):
        sparse = got["x"]
        assert isinstance(sparse, tf.SparseTensor)
        np.testing.assert_array_equal(sparse.dense_shape, (len(n), max(n), 2))  # the batch maximum
        np.testing.assert_array_equal(tf.sparse.to_dense(sparse), x)
        # Present means within the example: every step of every example, zeros included, nothing past it.
        steps = sparse.indices.numpy()[:, :2]
        assert len(steps) == 2 * int(np.sum(n))
        assert all(step < n[row] for row, step in steps)


@pytest.fixture
def batchers():
    load_builtin_types()
    before = BATCHERS.snapshot()
    yield
    BATCHERS.restore(before)


def test_a_registered_batcher_sees_exactly_the_examples(datasets, batchers):
    @batchloaders.register_batcher("mean_and_count", schema={
        "type": "object", "additionalProperties": False, "properties": {"scale": {"type": "number"}}})
    def mean_and_count(examples, scale=1.0):
        # The mean of each example's first column, and its length: padding would change both.
        count = tf.cast(examples.row_lengths(), tf.float32)
        total = tf.reduce_sum(examples[:, :, 0], axis=1)
        return tf.stack([scale * total / tf.maximum(count, 1.0), count], 1)

    cfg = config(datasets, "discrete_sequence", [{"tensor": "x", "batching": "mean_and_count",
                                                  "batching_args": {"scale": 2.0}}])
    batches = features(build_input_fn(cfg)())
    for got, (x, n) in zip(batches, reference(datasets, "discrete_sequence")):
        want = [[2.0 * row[:k, 0].mean(), k] for row, k in zip(x, n)]
        np.testing.assert_allclose(got["x"], want, rtol=1e-6)


def test_batcher_contract_and_args_are_checked(datasets, batchers):
    @batchloaders.register_batcher("as_numpy", schema={"type": "object", "required": ["k"],
                                                       "properties": {"k": {"type": "integer", "minimum": 1}}})
    def as_numpy(examples, k):
        return np.zeros(k)

    bad_arg = config(datasets, "independent", [{"tensor": "x", "batching": "as_numpy", "batching_args": {"k": 0}}])
    with pytest.raises(ConfigError, match=r"\$\.args\.padding\[0\]\.batching_args\.k: expected an integer >= 1, "
                                          r"found 0"):
        load_config(bad_arg)
    missing = config(datasets, "independent", [{"tensor": "x", "batching": "as_numpy"}])
    with pytest.raises(ConfigError, match=r"\$\.args\.padding\[0\]: missing required key 'batching_args' \(the "
                                          r"as_numpy batcher needs batching_args\)"):
        load_config(missing)
    python_value = config(datasets, "independent", [{"tensor": "x", "batching": "as_numpy", "batching_args": {"k": 2}}])
    with pytest.raises(ConfigError, match=r"\$\.args\.padding\[0\]: batcher 'as_numpy' \(tests/test_batching_policies.py: "
                                          r"function test_batcher_contract_and_args_are_checked.<locals>.as_numpy, "
                                          r"line \d+\) returned ndarray"):
        build_input_fn(python_value)()
    with pytest.raises(batchloaders.PluginError, match="it is a built-in batching policy"):
        batchloaders.register_batcher("ragged")(lambda examples: examples)


@pytest.mark.parametrize("entry, where, words", [
    ({"tensor": "x", "batching": "dense"}, "$.args.padding[0].batching",
     "tensor 'x' has shape [?, 2], whose length varies between examples: dense batching stacks examples of one "
     "shape"),
    ({"tensor": "x", "batching": "raged"}, "$.args.padding[0].batching",
     "unknown batching policy 'raged' (did you mean 'ragged'?); expected one of: padded, dense, ragged, sparse"),
    ({"tensor": "x", "batching": "ragged", "value": -1}, "$.args.padding[0].value",
     "found value with batching 'ragged': shape and value apply to padded batching only"),
    ({"tensor": "x", "batching": "sparse", "shape": [-1, 2]}, "$.args.padding[0].shape",
     "found shape with batching 'sparse'"),
    ({"tensor": "x", "batching": "ragged", "batching_args": {}}, "$.args.padding[0].batching_args",
     "found batching_args with batching 'ragged': expected them only with a registered batcher"),
    ({"tensor": "id", "batching": "ragged"}, "$.args.padding[0].batching",
     "tensor 'id' is a scalar per example (shape []): ragged batching needs an axis"),
])
def test_policy_mistakes_are_located(datasets, entry, where, words):
    cfg = config(datasets, "independent", [entry])
    cfg["model"]["targets"] = ["id"]
    with pytest.raises(ConfigError) as caught:
        load_config(cfg)
    assert [(p.path, words in p.message) for p in caught.value.problems] == [(where, True)], caught.value.problems


def test_dense_stacks_fixed_tensors_and_equals_padding(datasets):
    cfg = config(datasets, "independent", [{"tensor": "id", "batching": "dense"}])
    got = collect(build_input_fn(cfg)())
    np.testing.assert_array_equal(np.concatenate([t["id"] for _, t in got]), np.arange(7))


def test_keras_fits_a_ragged_input(datasets):
    """README's example: a model whose input is ragged gets a tf.RaggedTensor and trains."""
    import keras

    class SumOverSteps(keras.layers.Layer):
        def call(self, x):
            return tf.reduce_sum(x, axis=1)  # over each example's own steps (an empty one sums to 0)

    x = keras.Input(shape=(None, 2), ragged=True, name="x")
    model = keras.Model({"x": x}, {"id": keras.layers.Dense(1, name="id")(SumOverSteps()(x))})
    model.compile(optimizer="sgd", loss="mse")
    cfg = loader_config(datasets / "indep", [("x", "x"), ("id", "id")], inputs=["x"], targets=["id"],
                        target_batch_size=3, epochs=None, padding=[{"tensor": "x", "batching": "ragged"}])
    history = model.fit(build_input_fn(cfg, model=model)(), steps_per_epoch=3, epochs=2, verbose=0, shuffle=False)
    assert len(history.history["loss"]) == 2 and all(np.isfinite(history.history["loss"]))
