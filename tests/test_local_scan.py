"""local_scan: the scan whose step runs on TensorFlow's single-device runtime gives what Dataset.scan gives.

Why it exists (each file's scan steps are instantiated when the file opens) is measured in benchmarks/, not
here: docs/decisions/performance.md.
"""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from batchloaders import build_input_fn
from batchloaders.transform.graphs import growing
from batchloaders.transform.local_scan import local_scan
from conftest import collect, example, feature, loader_config, write_manifest, write_records
from seqdata import continuous_value, sequence_config, write_continuous

OFFSET = tf.constant(1000, tf.int64)  # a captured tensor


def elements(n: int) -> tf.data.Dataset:
    """{"i": i, "s": b"e<i>"}: each element says which it is."""
    return tf.data.Dataset.range(n).map(lambda i: {"i": i, "s": tf.strings.join(["e", tf.strings.as_string(i)])})


def running_sum(state, e):  # a scalar state; a dict out with a captured tensor
    total = state + e["i"]
    return total, {"total": total + OFFSET, "s": tf.strings.join([e["s"], "/", tf.strings.as_string(total)])}


def two_states(state, e):  # a tuple state, a tuple out
    count, longest = state
    length = tf.cast(tf.strings.length(e["s"]), longest.dtype)
    return (count + 1, tf.maximum(longest, length)), (count, e["s"])


def carried(state, e):  # a state whose leading axis grows: every i so far
    seen = tf.concat([state, [e["i"]]], 0)
    return seen, tf.reduce_sum(seen)


def sized(state, e):  # reads the state's shape: traced with a known [0] it would say 0 for ever
    seen = tf.concat([state, [e["i"]]], 0)
    return seen, tf.size(seen, out_type=tf.int64)


def with_cond(state, e):  # control flow in the step: an If kernel on that runtime
    total = tf.cond(e["i"] % 2 == 0, lambda: state + e["i"], lambda: state - 1)
    return total, total


SHORT = tf.constant(7, tf.int32)


def counted(state, e):  # any numeric state: the step only adds to it
    return state + 1, e["i"] * 10 + tf.cast(state, tf.int64)


def int32_captured(state, e):
    return state + e["i"], tf.cast(SHORT, tf.int64) + state


def growing_in_a_function(dataset_of):
    """As the loaders build it: inside an interleave's function, where graphs.growing leaves the axis unknown."""
    return tf.data.Dataset.range(1).flat_map(lambda _: dataset_of(growing(tf.zeros([0], tf.int64))))


# (step, initial state, expected to run on the single-device runtime)
STEPS = [(running_sum, lambda: tf.constant(0, tf.int64), True),
         (two_states, lambda: (tf.constant(0, tf.int64), tf.constant(0, tf.int64)), True),
         (two_states, lambda: (tf.constant(0, tf.int64), tf.constant(0)), False),  # an int32 state
         (with_cond, lambda: tf.constant(0, tf.int64), True),
         (int32_captured, lambda: tf.constant(0, tf.int64), False),
         (sized, lambda: tf.zeros([0], tf.int64), False),  # a known shape the step changes
         (counted, lambda: 0, False)]  # a Python number: an int32 tensor
IDS = ["dict out", "tuple state", "int32 state", "cond", "int32 captured", "shape changed", "python number"]


def listed(dataset) -> list:
    return [tf.nest.map_structure(lambda t: np.asarray(t.numpy()).tolist(), e) for e in dataset]


@pytest.mark.parametrize("step, initial, marked", STEPS, ids=IDS)
def test_values_equal_dataset_scan(step, initial, marked):
    scanned = local_scan(elements(6), initial(), step)
    expected = elements(6).scan(initial(), step)
    assert scanned.element_spec == expected.element_spec
    assert listed(scanned) == listed(expected)
    assert _scan_functions(scanned)[0].attr["experimental_ints_on_device"].b is marked


def test_a_growing_state_started_in_a_function_runs_on_it():
    for step, expected in ((carried, [0, 1, 3, 6, 10, 15]), (sized, [1, 2, 3, 4, 5, 6])):
        scanned = growing_in_a_function(lambda initial, step=step: local_scan(elements(6), initial, step))
        assert listed(scanned) == expected
        assert _scan_functions(scanned)[0].attr["experimental_ints_on_device"].b


def test_the_values_say_what_the_step_did():
    """Checked against numbers worked out by hand, not only against Dataset.scan."""
    assert listed(local_scan(elements(4), tf.constant(0, tf.int64), running_sum)) == [
        {"total": 1000, "s": b"e0/0"}, {"total": 1001, "s": b"e1/1"}, {"total": 1003, "s": b"e2/3"},
        {"total": 1006, "s": b"e3/6"}]
    assert listed(local_scan(elements(5), tf.constant(0, tf.int64), with_cond)) == [0, -1, 1, 0, 4]
    assert listed(local_scan(elements(4), tf.zeros([0], tf.int64), sized)) == [1, 2, 3, 4]
    assert listed(local_scan(elements(3), tf.constant(0, tf.int64), int32_captured)) == [7, 7, 8]


def _scan_functions(dataset) -> list:
    graph = tf.compat.v1.GraphDef.FromString(dataset._as_serialized_graph().numpy())
    library = {f.signature.name: f for f in graph.library.function}
    scans = [n for n in list(graph.node) + [n for f in graph.library.function for n in f.node_def]
             if n.op == "ScanDataset"]
    return [library[n.attr["f"].func.name] for n in scans]


def test_the_step_is_marked_for_the_single_device_runtime():
    (step,) = _scan_functions(local_scan(elements(3), tf.constant(0, tf.int64), running_sum))
    assert step.attr["experimental_ints_on_device"].b
    assert step.attr["_tf_data_function"].b  # (Grappler leaves it out of the functions around it)


def test_a_ragged_output_falls_back_to_dataset_scan():
    def ragged(state, e):
        return state + 1, tf.RaggedTensor.from_row_lengths(tf.range(e["i"]), [e["i"]])
    scanned = local_scan(elements(4), tf.constant(0, tf.int64), ragged)
    assert [r.to_list() for r in scanned] == [[[]], [[0]], [[0, 1]], [[0, 1, 2]]]
    assert _scan_functions(scanned)[0].attr["experimental_ints_on_device"].b is False


def _rewritten(dataset) -> tf.data.Dataset:
    options = tf.data.Options()
    options.experimental_optimization.apply_default_optimizations = True
    options.autotune.enabled = True
    return dataset.with_options(options)


@pytest.mark.parametrize("step, initial, marked", STEPS, ids=IDS)
def test_tf_datas_rewrites_turned_on_and_a_reduce_inside_a_function_take_it(step, initial, marked):
    """An int32 result of a function on that runtime is a node tf.data's rewrites take for a pipeline's output
    ("Expected only one fetch node"): such steps stay on Dataset.scan, and the others pass the rewrites, on
    the dataset (a user's options) and inside a function (a dataset reduced there is finalized on its own)."""
    scanned = local_scan(elements(6), initial(), step)
    assert listed(_rewritten(scanned)) == listed(elements(6).scan(initial(), step))

    @tf.function(autograph=False)
    def count():
        return local_scan(elements(6), initial(), step).reduce(tf.constant(0, tf.int64), lambda n, _: n + 1)
    assert int(count()) == 6


def test_every_files_scan_in_a_pipeline_runs_on_it_and_rewrites_turned_back_on_change_nothing(tmp_path):
    """Each file's end-of-file check is such a scan; a user who turns tf.data's rewrites and autotuning back
    on (docs/performance.md) gets the same batches."""
    write_manifest(tmp_path, [feature("x", "int64", [2], "int")])
    for f in range(3):
        write_records(tmp_path / f"p{f}.tfrecords", [example(x=("int", [100 * f + r, -r])) for r in range(4 + f)])
    cfg = loader_config(tmp_path, [("x", "x")], inputs=["x"], target_batch_size=5, num_parallel_reads=2,
                        num_parallel_parses=1, num_prefetch=2)
    dataset = build_input_fn(cfg)()
    assert all(f.attr["experimental_ints_on_device"].b for f in _scan_functions(dataset))
    plain, rewritten = collect(dataset), collect(_rewritten(dataset))
    xs = np.concatenate([b["x"] for b in plain])[:, 0].tolist()
    # Files 0 and 1 alternate block by block (each file one block here), then file 2.
    assert xs == [0, 1, 2, 3, 100, 101, 102, 103, 104, 200, 201, 202, 203, 204, 205]
    assert [b["x"].tolist() for b in rewritten] == [b["x"].tolist() for b in plain]


def test_the_window_cutting_scans_of_a_sequence_loader_run_on_it(tmp_path):
    """Each file's end-of-file check and window cutting, and the guard over whole passes (loaders/windows.py);
    the windows are those of the data: frame p of file f holds y = 1000*f + p."""
    write_continuous(tmp_path, [3, 2], chunk=4)  # 12 and 8 frames
    config = sequence_config(tmp_path, "continuous_sequence", [("y", "y")], inputs=["y"], lo=4, hi=4,
                             target_batch_size=2, num_parallel_reads=1)
    dataset = build_input_fn(config)()
    marks = [f.attr["experimental_ints_on_device"].b for f in _scan_functions(dataset)]
    assert marks == [True] * 3  # the per-file ones, and the guard over whole passes (one scan per epoch)
    windows = [w.tolist() for b in collect(dataset) for w in b["y"]]
    assert windows == [continuous_value(f, range(s, s + 4)).tolist() for f, n in ((0, 12), (1, 8))
                       for s in range(0, n, 4)]
