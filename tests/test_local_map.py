"""local_map: the map whose function runs on TensorFlow's single-device runtime gives what Dataset.map gives.

Why it exists (each file's parse function is instantiated when the file opens) is measured in benchmarks/, not
here: docs/decisions/performance.md.
"""
from __future__ import annotations

import json

import numpy as np
import pytest
import tensorflow as tf

from batchloaders import build_input_fn
from batchloaders.transform.local_map import local_map
from conftest import collect
from seqdata import continuous_value, sequence_config, write_continuous

OFFSET = tf.constant(1000, tf.int64)  # a captured tensor
SHORT = tf.constant(7, tf.int32)


def elements(n: int) -> tf.data.Dataset:
    """{"i": i, "s": b"e<i>"}: each element says which it is."""
    return tf.data.Dataset.range(n).map(lambda i: {"i": i, "s": tf.strings.join(["e", tf.strings.as_string(i)])})


def shifted(e):  # a dict out, a captured tensor
    return {"i": e["i"] + OFFSET, "s": tf.strings.join([e["s"], "!"])}


def with_cond(e):  # control flow: an If kernel on that runtime
    return tf.cond(e["i"] % 2 == 0, lambda: e["i"] * 10, lambda: -e["i"])


def int32_out(e):
    return tf.cast(e["i"], tf.int32) * 2


def int32_captured(e):
    return e["i"] + tf.cast(SHORT, tf.int64)


def ragged_out(e):
    return tf.RaggedTensor.from_row_lengths(tf.range(e["i"]), [e["i"]])


# (function, what it gives for elements 0..3, expected on the single-device runtime)
MAPS = [(shifted, [{"i": 1000, "s": b"e0!"}, {"i": 1001, "s": b"e1!"}, {"i": 1002, "s": b"e2!"},
                   {"i": 1003, "s": b"e3!"}], True),
        (with_cond, [0, -1, 20, -3], True),
        (int32_out, [0, 2, 4, 6], False),
        (int32_captured, [7, 8, 9, 10], False),
        (ragged_out, [[[]], [[0]], [[0, 1]], [[0, 1, 2]]], False)]
IDS = ["dict out", "cond", "int32 out", "int32 captured", "ragged out"]


def listed(dataset) -> list:
    return [tf.nest.map_structure(lambda t: np.asarray(t.to_list() if hasattr(t, "to_list") else t.numpy()).tolist(),
                                  e) for e in dataset]


def _map_functions(dataset) -> list:
    graph = tf.compat.v1.GraphDef.FromString(dataset._as_serialized_graph().numpy())
    library = {f.signature.name: f for f in graph.library.function}
    maps = [n for n in list(graph.node) + [n for f in graph.library.function for n in f.node_def]
            if n.op in ("MapDataset", "ParallelMapDatasetV2") and n.attr["f"].func.name in library]
    return [library[n.attr["f"].func.name] for n in maps]


@pytest.mark.parametrize("fn, expected, marked", MAPS, ids=IDS)
def test_values_are_dataset_maps_and_the_function_runs_where_its_data_allow(fn, expected, marked):
    mapped = local_map(elements(4), fn)
    assert mapped.element_spec == elements(4).map(fn).element_spec
    assert listed(mapped) == expected == listed(elements(4).map(fn))
    # The last map is ours (elements() has one of its own before it).
    assert _map_functions(mapped)[-1].attr["experimental_ints_on_device"].b is marked


def test_the_function_is_marked_as_tf_data_marks_its_own():
    function = _map_functions(local_map(elements(3), shifted))[-1]
    assert function.attr["experimental_ints_on_device"].b
    assert function.attr["_tf_data_function"].b  # (Grappler leaves it out of the functions around it)


@pytest.mark.parametrize("fn, expected, marked", MAPS[:2], ids=IDS[:2])
def test_tf_datas_rewrites_turned_on_and_a_reduce_inside_a_function_take_it(fn, expected, marked):
    options = tf.data.Options()
    options.experimental_optimization.apply_default_optimizations = True
    options.autotune.enabled = True
    assert listed(local_map(elements(4), fn).with_options(options)) == expected

    @tf.function(autograph=False)
    def count():
        return local_map(elements(4), fn).reduce(tf.constant(0, tf.int64), lambda n, _: n + 1)
    assert int(count()) == 4


def test_built_inside_an_interleaves_function_as_each_file_opens():
    def per_file(f):
        return local_map(tf.data.Dataset.range(3).map(lambda i: {"i": i + 10 * f, "s": tf.strings.as_string(i)}),
                         shifted)
    got = listed(tf.data.Dataset.range(2).interleave(per_file, cycle_length=2))
    assert [e["i"] for e in got] == [1000, 1010, 1001, 1011, 1002, 1012]


@pytest.mark.parametrize("parses", [1, -1], ids=["in the reading thread", "in a parallel map per file"])
def test_each_files_parse_in_a_sequence_loader_runs_on_it(tmp_path, parses):
    """Each file's blocks are parsed by such a map, in the call that reads them (read/proven.py) or in a parallel
    map of the file's own (continuous_sequence.py); the windows are those of the data: frame p of file f holds
    y = 1000*f + p."""
    write_continuous(tmp_path, [3, 2], chunk=4)  # 12 and 8 frames
    manifest = json.loads((tmp_path / "__manifest__.json").read_text())
    manifest["files"] = [{"name": f"part-{f}.tfrecords", "num_records": n,  # sizes listed: read/proven.py
                          "size_bytes": (tmp_path / f"part-{f}.tfrecords").stat().st_size} for f, n in enumerate([3, 2])]
    (tmp_path / "__manifest__.json").write_text(json.dumps(manifest))
    config = sequence_config(tmp_path, "continuous_sequence", [("y", "y")], inputs=["y"], lo=4, hi=4,
                             target_batch_size=2, num_parallel_reads=1, num_parallel_parses=parses)
    dataset = build_input_fn(config)()
    parse_ops = ("ParseExample", "ParseSequenceExample")
    parses_found = [f for f in _map_functions(dataset) if any(n.op.startswith(parse_ops) for n in f.node_def)]
    assert len(parses_found) == 1 and parses_found[0].attr["experimental_ints_on_device"].b
    windows = [w.tolist() for b in collect(dataset) for w in b["y"]]
    assert windows == [continuous_value(f, range(s, s + 4)).tolist() for f, n in ((0, 12), (1, 8))
                       for s in range(0, n, 4)]


@pytest.mark.parametrize("calls, deterministic, attribute", [(2, True, b"true"), (tf.data.AUTOTUNE, True, b"true"),
                                                             (2, False, b"false"), (2, None, b"default")])
def test_parallel_calls_give_what_dataset_map_gives(calls, deterministic, attribute):
    mapped = local_map(elements(40), shifted, num_parallel_calls=calls, deterministic=deterministic)
    got = listed(mapped)
    expected = [{"i": 1000 + i, "s": f"e{i}!".encode()} for i in range(40)]
    assert (got if deterministic is not False else sorted(got, key=lambda e: e["i"])) == expected
    assert _map_functions(mapped)[-1].attr["experimental_ints_on_device"].b
    graph = tf.compat.v1.GraphDef.FromString(mapped._as_serialized_graph().numpy())
    (node,) = [n for n in graph.node if n.op == "ParallelMapDatasetV2"]
    assert node.attr["deterministic"].s == attribute  # as Dataset.map sets it (None: the options decide)
