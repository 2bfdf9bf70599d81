"""inline_map: the map stage whose function runs in the calling thread gives what Dataset.map gives."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from batchloaders import build_input_fn
from batchloaders.transform.inline_map import inline_map
from conftest import collect, example, loader_config, feature, write_manifest, write_records
from test_tuning_graph import nodes

OFFSET = tf.constant(1000, tf.int64)  # a captured tensor


def elements(n: int) -> tf.data.Dataset:
    """{"i": i, "v": [i, 2i] float32, "s": b"e<i>"}: each element says which it is."""
    return tf.data.Dataset.range(n).map(lambda i: {"i": i, "v": tf.cast(tf.stack([i, 2 * i]), tf.float32),
                                                   "s": tf.strings.join(["e", tf.strings.as_string(i)])})


def arithmetic(e):
    return {"j": e["i"] + OFFSET, "w": e["v"] * 10.0, "t": tf.strings.join([e["s"], "!"])}


def as_tuple(e):  # another structure out than in
    return e["s"], tf.reduce_sum(e["v"])


def with_cond(e):
    return {"j": tf.cond(e["i"] > 2, lambda: e["i"] * 100, lambda: e["i"])}


def with_loop(e):
    return {"j": tf.while_loop(lambda k: k < e["i"], lambda k: [k + 1], [tf.constant(0, tf.int64)])[0]}


@tf.function(autograph=False)
def _clipped(x):
    return tf.cond(x > 2, lambda: x * 100, lambda: x)


def with_nested_cond(e):  # the conditional is in a function it calls
    return {"j": _clipped(e["i"])}


def ragged_out(e):
    return {"r": tf.RaggedTensor.from_row_lengths(tf.range(e["i"]), [e["i"]])}


def listed(dataset) -> list:
    return [tf.nest.map_structure(lambda t: np.asarray(t.numpy()).tolist(), e) for e in dataset]


@pytest.mark.parametrize("fn", [arithmetic, as_tuple], ids=["dict", "tuple"])
def test_values_equal_dataset_map(fn):
    inlined = inline_map(elements(6), fn)
    assert inlined is not None
    assert inlined.element_spec == elements(6).map(fn).element_spec
    assert listed(inlined) == listed(elements(6).map(fn))
    assert listed(inlined)[4] == ({"j": 1004, "w": [40.0, 80.0], "t": b"e4!"} if fn is arithmetic
                                  else (b"e4", 12.0))


def test_inside_an_interleave_function():
    """As the loaders use it: built while tracing another dataset's function."""
    def per_file(f):
        return inline_map(tf.data.Dataset.range(3).map(lambda r: {"i": 10 * f + r, "v": tf.zeros([2]),
                                                                  "s": tf.constant("x")}), arithmetic)
    got = [e["j"] for e in listed(tf.data.Dataset.range(3).interleave(per_file, cycle_length=2))]
    assert got == [1000, 1010, 1001, 1011, 1002, 1012, 1020, 1021, 1022]


@pytest.mark.parametrize("fn", [with_cond, with_loop, with_nested_cond, ragged_out],
                         ids=["cond", "while_loop", "cond in a called function", "ragged"])
def test_control_flow_and_composite_outputs_are_refused(fn):
    """The single-threaded executor runs no control flow, and only dense tensors are passed through: None,
    and the caller maps as usual (which gives these)."""
    assert inline_map(elements(5), fn) is None
    assert len(listed(elements(5).map(fn))) == 5


def test_the_independent_loader_parses_blocks_in_an_inline_map(tmp_path):
    """Blocks parsed where read (num_parallel_parses <= files read at once) go through an inline map, and the
    batches are those of the map stage (num_parallel_parses AUTOTUNE)."""
    write_manifest(tmp_path, [feature("x", "int64", [2], "int"), feature("y", "float32", [], "float")])
    for f in range(3):
        write_records(tmp_path / f"p{f}.tfrecords", [example(x=("int", [100 * f + r, -r]), y=("float", [f + r / 10]))
                                                     for r in range(5 + f)])
    cfg = loader_config(tmp_path, [("x", "x"), ("y", "y")], inputs=["x"], targets=["y"], target_batch_size=4,
                        num_parallel_reads=2, num_parallel_parses=1, num_prefetch=2)
    dataset = build_input_fn(cfg)()
    inline = [node for node, _ in nodes(dataset)
              if node.op == "MapDataset" and not node.attr["use_inter_op_parallelism"].b]
    assert len(inline) == 1
    batches = collect(dataset)
    del cfg["args"]["num_parallel_parses"]
    as_lists = lambda bs: [tf.nest.map_structure(lambda a: a.tolist(), b) for b in bs]  # noqa: E731
    assert as_lists(batches) == as_lists(collect(build_input_fn(cfg)()))
    xs = np.concatenate([b[0]["x"] for b in batches])
    # Files 0 and 1 alternate block by block (each file is one block here), then file 2.
    assert xs[:, 0].tolist() == [0, 1, 2, 3, 4, 100, 101, 102, 103, 104, 105, 200, 201, 202, 203, 204, 205, 206]
