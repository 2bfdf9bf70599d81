"""Error messages are built off the per-iterator path: no conditional branch holds an assertion.

TensorFlow instantiates (and optimizes) both branches of every ``tf.cond`` in
a tf.data function each time an iterator starts, while a function of a dataset
built inside a branch is instantiated only when it runs. Messages naming the
file and record take tens of graph nodes each, so ours are built in a one-element
dataset's function (graphs.error_if): the checks stay, and correct data pays
nothing for them at start-up. This walks each compiled pipeline's function
library and checks both.
"""
from __future__ import annotations

import dataclasses
import glob
import os

import pytest
import tensorflow as tf

import batchloaders
from batchloaders import build_input_fn, load_config
from conftest import example, feature, loader_config, write_manifest, write_records

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIGS = sorted(glob.glob(os.path.join(ROOT, "configs", "*.yaml")))
MESSAGE_OPS = {"Assert", "StringFormat"}


def functions(dataset: tf.data.Dataset) -> dict[str, set[str]]:
    """Function name -> the op types in its body, for every function of the dataset's graph."""
    graph = tf.compat.v1.GraphDef.FromString(dataset._as_serialized_graph().numpy())
    return {f.signature.name: {node.op for node in f.node_def} for f in graph.library.function}


def branches_with_messages(dataset: tf.data.Dataset) -> list[str]:
    # tf.cond's branch functions are named cond_true_N / cond_false_N (the lowered If's then / else).
    # The file-end marker's branch (it reads the file again: Skip) runs at every file's end in every
    # run, so it stays a branch: made lazy, it was instantiated mid-run, and Keras fit under
    # MirroredStrategy segfaulted in 2 of 20 runs (tests/distributed_fit.py; 0 of 20 without).
    return sorted(name for name, ops in functions(dataset).items()
                  if name.startswith(("cond_true", "cond_false")) and ops & MESSAGE_OPS and "SkipDataset" not in ops)


@pytest.fixture(scope="module")
def demo_data():
    from batchloaders.demo_data import generate

    generate()


@pytest.mark.parametrize("path", CONFIGS, ids=os.path.basename)
def test_example_configs_keep_messages_out_of_branches(demo_data, path):
    dataset = build_input_fn(dataclasses.replace(load_config(path), service=None))()
    assert branches_with_messages(dataset) == []
    # The file-end check is still there: its message and its re-read (Skip) are in the marker's branch.
    assert any({"StringFormat", "SkipDataset"} <= ops for ops in functions(dataset).values())


def test_raw_size_check_is_kept_and_still_fails_naming_the_record(tmp_path):
    write_manifest(tmp_path, [feature("x", "float32", [2], "raw", endian="little"), feature("label", "int64", [], "int")])
    eight = b"\x00\x00\x80\x3f\x00\x00\x00\x40"  # 1.0, 2.0
    write_records(tmp_path / "part-0.tfrecords",
                  [example(x=("bytes", [eight]), label=("int", [0])),
                   example(x=("bytes", [eight[:4]]), label=("int", [1]))])
    dataset = build_input_fn(loader_config(tmp_path, [("x", "x"), ("label", "label")], inputs=["x"], targets=["label"],
                                           target_batch_size=2))()
    assert branches_with_messages(dataset) == []
    assert any("Assert" in ops and "AsString" in ops for ops in functions(dataset).values())
    with pytest.raises(batchloaders.DataError, match=r"part-0.tfrecords: record 1: feature x holds 4 bytes: the "
                                                      r"manifest says .* which takes 8 bytes per byte string"):
        with batchloaders.data_errors():
            list(dataset)
