"""Tuning arguments change no values, so prove they reach the compiled tf.data graph."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from batchloaders import build_input_fn
from conftest import collect, loader_config


def nodes(dataset):
    """Every node of the dataset graph and its function library, with the values of Const inputs."""
    graph = tf.compat.v1.GraphDef.FromString(dataset._as_serialized_graph().numpy())
    scopes = [list(graph.node)] + [list(f.node_def) for f in graph.library.function]
    for scope in scopes:
        consts = {n.name: _value(n) for n in scope if n.op == "Const"}
        for node in scope:
            values = [consts.get(i.split(":")[0].lstrip("^")) for i in node.input]
            yield node, [None if v is None else v.tolist() for v in values]


def _value(node):
    try:
        return tf.make_ndarray(node.attr["value"].tensor)
    except (ValueError, KeyError):  # variant and resource constants: not needed here
        return None


def has(dataset, op, value=None, attr=None):
    for node, inputs in nodes(dataset):
        if node.op != op:
            continue
        if value is not None and value not in inputs:
            continue
        if attr is not None and node.attr[attr[0]].s != attr[1]:
            continue
        return True
    return False


@pytest.mark.parametrize("args, op, value, attr", [
    ({"num_prefetch": 3}, "PrefetchDataset", 3, None),
    ({"num_read_buffer_bytes": 12345}, "TFRecordDataset", 12345, None),
    ({"num_read_buffer_bytes": 12345, "num_parallel_reads": 2}, "TFRecordDataset", 12345, None),
    ({"num_parallel_parses": 3}, "ParallelMapDatasetV2", 3, None),
    # Local files, unshuffled: num_parallel_reads files read at once, each file's blocks in a thread of its own.
    ({"num_parallel_reads": 2}, "ParallelInterleaveDatasetV4", 2, ("deterministic", b"true")),
    ({"num_interleave_in_buffer_elements": 4}, "PrefetchDataset", 4, None),
    # Unshuffled: whole blocks read ahead, records' worth rounded up (1024 records a block here).
    ({"num_interleave_out_buffer_elements": 2000, "num_parallel_reads": 2}, "PrefetchDataset", 2, None),
    ({"num_interleave_out_buffer_elements": 5, "num_parallel_reads": 2, "shuffle": True,
      "num_shuffle_buffer_elements": 7, "num_filenames_shuffle_buffer": 2, "num_mix_files": 2},
     "PrefetchDataset", 5, None),
    ({"sloppy_interleave": True}, "ParallelMapDatasetV2", None, ("deterministic", b"false")),
    ({}, "ParallelMapDatasetV2", None, ("deterministic", b"true")),
    ({"shuffle": True, "num_shuffle_buffer_elements": 7, "num_filenames_shuffle_buffer": 2, "num_mix_files": 2},
     "ShuffleDatasetV3", 7, None),
    ({"shuffle": True, "num_shuffle_buffer_elements": 7, "num_filenames_shuffle_buffer": 2, "num_mix_files": 3},
     "InterleaveDataset", 3, None),
])
def test_argument_reaches_the_graph(numbered_dataset, args, op, value, attr):
    cfg = loader_config(numbered_dataset, [("x", "x")], inputs=["x"], **args)
    dataset = build_input_fn(cfg)()
    assert has(dataset, op, value, attr), sorted({n.op for n, _ in nodes(dataset)})
    baseline = build_input_fn(loader_config(numbered_dataset, [("x", "x")], inputs=["x"]))()
    if value is not None:  # the value is there because of the argument, not by default
        assert not has(baseline, op, value, attr) or args == {}


@pytest.mark.parametrize("args, op, value, attr", [
    ({"num_parallel_reads": 2}, "ParallelInterleaveDatasetV4", 2, ("deterministic", b"true")),
    ({"num_parallel_reads": 2, "sloppy_interleave": True}, "ParallelInterleaveDatasetV4", 2,
     ("deterministic", b"false")),
])
def test_remote_files_are_read_by_parallel_threads(numbered_dataset, tmp_path, args, op, value, attr):
    """Reads of remote files wait on the network, so they overlap in threads. TensorFlow's in-memory
    file system (ram://) stands in for remote storage: any URL scheme counts as remote."""
    for f in range(2):
        with open(numbered_dataset / f"part-{f}.tfrecords", "rb") as local, \
                tf.io.gfile.GFile(f"ram://{tmp_path.name}/part-{f}.tfrecords", "wb") as remote:
            remote.write(local.read())
    (tmp_path / "files.txt").write_text("".join(f"ram://{tmp_path.name}/part-{f}.tfrecords\n" for f in range(2)))
    cfg = loader_config(numbered_dataset, [("x", "x")], inputs=["x"], **args)
    cfg["args"]["dataset"] = {"type": "list", "args": {"list_file": str(tmp_path / "files.txt"),
                                                        "manifest_file": str(numbered_dataset / "__manifest__.json")}}
    dataset = build_input_fn(cfg)()
    assert has(dataset, op, value, attr), sorted({n.op for n, _ in nodes(dataset)})
    assert not has(dataset, "InterleaveDataset")
    ids = sorted(float(x) for batch in dataset.as_numpy_iterator() for x in np.ravel(batch["x"] if isinstance(
        batch, dict) else batch)[::2])
    assert ids == [100.0 * f + r for f in range(2) for r in range(4)]


@pytest.mark.parametrize("reads", [2, 3])
def test_local_interleave_gives_the_parallel_order(numbered_dataset, reads):
    """Record r of each open file in turn: exactly what a deterministic parallel interleave gives.
    (Shuffled records alternate one by one; buffers of one keep the order.)"""
    cfg = loader_config(numbered_dataset, [("id", "id")], inputs=["id"], num_parallel_reads=reads,
                        target_batch_size=1, shuffle=True, num_shuffle_buffer_elements=1,
                        num_filenames_shuffle_buffer=1, num_mix_files=reads)
    got = [int(b["id"][0]) if isinstance(b, dict) else int(b[0]) for b in build_input_fn(cfg)().as_numpy_iterator()]
    files = [[100 * f + r for r in range(4)] for f in range(3)]
    expected = tf.data.Dataset.from_tensor_slices(files).interleave(
        tf.data.Dataset.from_tensor_slices, cycle_length=reads, block_length=1, num_parallel_calls=reads,
        deterministic=True)
    assert got == [int(x) for x in expected.as_numpy_iterator()]


def test_missing_feature_list_is_an_error_not_an_empty_sequence(tmp_path):
    from conftest import feature, sequence_example, write_manifest, write_records

    write_manifest(tmp_path, [feature("tokenz", "int64", [], "int", var_len=True)], allow_var_len=True)
    write_records(tmp_path / "a.tfrecords", [sequence_example({}, {"tokens": ("int", [[1], [2]])})])
    cfg = loader_config(tmp_path, [("tokenz", "t")], inputs=["t"], padding=True)
    with pytest.raises(tf.errors.InvalidArgumentError, match="tokenz"):
        list(build_input_fn(cfg)())


def test_feature_lists_parsing_padded_with_zeros_are_not_masked_again(tmp_path):
    """The finalize shortcut is taken only when the pad value is the default (values: test_same_batches)."""
    from conftest import feature, sequence_example, write_manifest, write_records

    write_manifest(tmp_path, [feature("tokens", "int64", [], "int", var_len=True)], allow_var_len=True)
    write_records(tmp_path / "a.tfrecords", [sequence_example({}, {"tokens": ("int", [[1], [2]])}),
                                             sequence_example({}, {"tokens": ("int", [[3]])})])
    selects, values = [], []
    for padding in (True, [{"tensor": "t", "value": 7}]):
        dataset = build_input_fn(loader_config(tmp_path, [("tokens", "t")], inputs=["t"], padding=padding))()
        selects.append(sum(node.op == "SelectV2" for node, _ in nodes(dataset)))  # tf.where over invalid steps
        values.append([b["t"].tolist() for b in dataset.as_numpy_iterator()])
    assert selects[1] == selects[0] + 1
    assert values == [[[[1, 2], [3, 0]]], [[[1, 2], [3, 7]]]]


@pytest.mark.parametrize("reads, read_ahead", [(64, True), (65, False)])
def test_blocks_are_read_ahead_only_while_few_files_are_open(numbered_dataset, reads, read_ahead):
    """A thread and a block (up to 8 MiB) per open file: not for up to 1024 open files."""
    cfg = loader_config(numbered_dataset, [("id", "id")], inputs=["id"], num_parallel_reads=reads)
    dataset = build_input_fn(cfg)()  # num_prefetch 0, no file-name prefetch: the only prefetch is per file
    assert has(dataset, "PrefetchDataset") == read_ahead
    assert [int(i) for b in dataset.as_numpy_iterator() for i in b["id"]] == [100 * f + r for f in range(3)
                                                                               for r in range(4)]


@pytest.mark.parametrize("parses, reads, parsed_where_read", [(2, 2, True), (2, 3, True), (3, 2, False)])
def test_blocks_are_parsed_where_read_when_the_open_files_give_the_parallelism(numbered_dataset, parses, reads,
                                                                               parsed_where_read):
    """num_parallel_parses no larger than the files read ahead at once: each block is parsed in its file's
    read-ahead thread (no map stage); larger: a map stage of that many threads. The batches are the same."""
    cfg = loader_config(numbered_dataset, [("x", "x")], inputs=["x"], num_parallel_parses=parses,
                        num_parallel_reads=reads, target_batch_size=5, drop_remainder=False)
    dataset = build_input_fn(cfg)()
    assert has(dataset, "ParallelMapDatasetV2") != parsed_where_read
    assert has(dataset, "ParallelMapDatasetV2", parses) != parsed_where_read
    # Files alternate block by block (each file is one block of 4 records here): files 0..reads-1 first.
    order = [f * 100 + r for f in range(3) for r in range(4)]
    got = [x for batch in collect(dataset) for x in batch["x"][:, 0].tolist()]
    assert got == order


def test_a_per_batch_call_that_only_regroups_runs_without_parallel_calls():
    """graphs.mapped: a function that only renames and regroups tensors is a plain map (a parallel map hands
    every batch to another thread for nothing); one that computes keeps its parallel calls. Same values."""
    from batchloaders.transform.graphs import mapped

    ds = tf.data.Dataset.range(6).batch(2).map(lambda x: {"a": x, "b": x * 10})
    moves = mapped(ds, lambda e: ({"x": e["a"]}, {"y": e["b"]}), num_parallel_calls=2, deterministic=True)
    computes = mapped(ds, lambda e: ({"x": e["a"] + 1}, {"y": e["b"]}), num_parallel_calls=2, deterministic=True)
    assert has(moves, "MapDataset") and not has(moves, "ParallelMapDatasetV2")
    assert has(computes, "ParallelMapDatasetV2")
    assert [(x["x"].tolist(), y["y"].tolist()) for x, y in collect(moves)] == [([0, 1], [0, 10]), ([2, 3], [20, 30]),
                                                                               ([4, 5], [40, 50])]
    assert [x["x"].tolist() for x, _ in collect(computes)] == [[1, 2], [3, 4], [5, 6]]


def test_continuous_windows_reach_the_model_without_a_parallel_map(tmp_path):
    """continuous_sequence's windows are made where they are cut: the plain stage's call only regroups them."""
    from seqdata import sequence_config, write_continuous

    write_continuous(tmp_path, [4, 4])
    fn = build_input_fn(sequence_config(tmp_path, "continuous_sequence", [("x", "x"), ("y", "y")], inputs=["x", "y"],
                                        lo=3, hi=3))
    ds = fn()
    top = {n.op for n in tf.compat.v1.GraphDef.FromString(ds._as_serialized_graph().numpy()).node}  # (not in functions)
    assert "ParallelMapDatasetV2" not in top and "MapDataset" in top
    # Two files of 16 steps (y: 1000 * file + step), each 5 windows of 3 back to back.
    windows = sorted(w for batch in collect(ds) for w in batch["y"].tolist())
    assert windows == [[1000 * f + 3 * k + j for j in range(3)] for f in range(2) for k in range(5)]
