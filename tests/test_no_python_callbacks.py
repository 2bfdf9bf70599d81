"""No compiled pipeline calls back into Python: every op runs in TensorFlow's C++ runtime.

A Python callback (``tf.py_function``, ``tf.numpy_function``, ``from_generator``)
holds the GIL for every element and cannot be serialized or run in tf.data
service, so it would cap throughput and portability. The check walks the
dataset's serialized graph, including every function in its library (the
bodies of map, interleave, scan, filter ...), and fails on any Python op.

The one exception is ``shuffle_scope: global``, whose records are read at their offsets by a NumPy
function per batch (read/offset_reader.py; why: docs/decisions/record-index.md): there, that
stateless function is the only Python op.
"""
from __future__ import annotations

import dataclasses
import glob
import os

import pytest
import tensorflow as tf

from batchloaders import build_input_fn, load_config
from conftest import feature, loader_config, sequence_example, write_manifest, write_records
from seqdata import sequence_config, write_continuous, write_discrete

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIGS = sorted(glob.glob(os.path.join(ROOT, "configs", "*.yaml"))
                 + glob.glob(os.path.join(ROOT, "configs", "*.json")))
PYTHON_OPS = {"PyFunc", "PyFuncStateless", "EagerPyFunc", "GeneratorDataset"}


def graph_ops(dataset: tf.data.Dataset) -> list[tuple[str, str]]:
    """(where, op type) of every node of the dataset graph and of every function in its library."""
    graph = tf.compat.v1.GraphDef.FromString(dataset._as_serialized_graph().numpy())
    ops = [("graph", node.op) for node in graph.node]
    for function in graph.library.function:
        ops.extend((function.signature.name, node.op) for node in function.node_def)
    return ops


def python_ops(dataset: tf.data.Dataset) -> list[tuple[str, str]]:
    return [(where, op) for where, op in graph_ops(dataset) if op in PYTHON_OPS]


@pytest.fixture(scope="module")
def demo_data():
    from batchloaders.demo_data import generate

    generate()


@pytest.mark.parametrize("path", CONFIGS, ids=os.path.basename)
def test_example_configs_have_no_python_ops(demo_data, path):
    # A service block's pipeline, the one its workers run, as compiled in this process.
    config = load_config(path)
    ops = graph_ops(build_input_fn(dataclasses.replace(config, service=None))())
    python = [o for o in ops if o[1] in PYTHON_OPS]
    if config.shuffling.scope == "global":  # read by offset: the reader's one NumPy function, nothing else
        assert len(python) == 1 and python[0][1] == "PyFuncStateless"
        assert not any(op == "TFRecordDataset" for _, op in ops)
        return
    assert any(op == "TFRecordDataset" for _, op in ops)  # the walk reaches the reading
    assert python == []


def independent_config(tmp_path):
    """var-len feature list + padding (with a pad shape) + slices + const + length."""
    write_manifest(tmp_path, [feature("tokens", "int64", [], "int", var_len=True),
                              feature("label", "int64", [], "int", var_len=False)], allow_var_len=True)
    write_records(tmp_path / "part-0.tfrecords",
                  [sequence_example({"label": ("int", [n])}, {"tokens": ("int", [[j] for j in range(n)])})
                   for n in (2, 3, 4)])
    return loader_config(
        tmp_path, [("tokens", "tokens"), ("tokens", "next"), ("label", "label")],
        inputs=["tokens", "n", "ones"], targets=["next", "label"], padding=[{"tensor": "tokens", "shape": [8]}],
        secondary_features=[{"to_name": "n", "type": "length", "args": {"tensor": "tokens"}},
                            {"to_name": "ones", "type": "const", "args": {"shape": [3], "dtype": "float32",
                                                                         "value": 1.0}}],
        processing_steps=[{"tensor": "tokens", "type": "slice", "args": {"slice": "[:-1]"}},
                          {"tensor": "next", "type": "slice", "args": {"slice": "[1:]"}}])


def continuous_config(tmp_path):
    write_continuous(tmp_path, [5, 3])
    return sequence_config(tmp_path, "continuous_sequence", [("x", "x"), ("y", "y")], inputs=["x", "y", "n"],
                           lo=2, hi=5, padding=True, shuffle=True, num_shuffle_buffer_elements=8,
                           num_filenames_shuffle_buffer=2, num_mix_files=2, seed=1,
                           secondary_features=[{"to_name": "n", "type": "length", "args": {"tensor": "y"}}])


def discrete_config(tmp_path):
    write_discrete(tmp_path, [[(2, 1), (3, 2), (1, 1), (2, 2)], [(1, 1), (2, 3)]])
    return sequence_config(tmp_path, "discrete_sequence", [("frames", "frames"), ("words", "words"), ("rid", "rid")],
                           inputs=["frames", "words", "rid", "segments", "starts"], lo=1, hi=3, padding=True,
                           secondary_features=[
                               {"to_name": "segments", "type": "segment_ids", "args": {"tensor": "frames"}},
                               {"to_name": "starts", "type": "boundaries", "args": {"tensor": "words"}}])


@pytest.mark.parametrize("make", [independent_config, continuous_config, discrete_config],
                         ids=["independent", "continuous_sequence", "discrete_sequence"])
def test_test_configs_have_no_python_ops(tmp_path, make):
    dataset = build_input_fn(make(tmp_path))()
    assert python_ops(dataset) == []
    assert next(iter(dataset)) is not None  # the config builds a working pipeline, not just a graph


def test_the_walker_finds_a_py_function_inside_a_map():
    def plus_one(x):
        return x + 1

    dataset = tf.data.Dataset.range(3).map(lambda x: tf.py_function(plus_one, [x], tf.int64))
    assert [op for _, op in python_ops(dataset)] == ["EagerPyFunc"]
    assert python_ops(tf.data.Dataset.range(3).map(lambda x: tf.numpy_function(plus_one, [x], tf.int64)))


def test_the_walker_finds_from_generator():
    dataset = tf.data.Dataset.from_generator(lambda: iter(range(3)), output_signature=tf.TensorSpec([], tf.int64))
    found = {op for _, op in python_ops(dataset)}
    assert "GeneratorDataset" in found
    assert found & {"PyFunc", "EagerPyFunc", "PyFuncStateless"}


def test_the_walker_sees_function_bodies():
    """Ops inside map functions appear: the walk does not stop at the dataset nodes."""
    ops = graph_ops(tf.data.Dataset.range(3).map(lambda x: tf.strings.as_string(x)))
    assert any(op == "AsString" and where != "graph" for where, op in ops)
