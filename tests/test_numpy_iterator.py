"""batchloaders.numpy_iterator: NumPy batches as input_fn's, exact restores from a JSON state at any batch,
each process's share, the refusal of ragged and sparse outputs, and batches into a jitted JAX function."""
from __future__ import annotations

import gc
import json
import weakref

import numpy as np
import pytest
import tensorflow as tf

import batchloaders
from batchloaders import ConfigError, ResumeError, build_input_fn
from batchloaders.runtime.numpy_iterator import NumpyIterator
from conftest import collect, example, feature, loader_config, sequence_example, write_manifest, write_records

FILES, RECORDS = 4, 6  # record r of file f holds id = 100 * f + r and x = [id, id + 0.5]
ALL_IDS = sorted(100 * f + r for f in range(FILES) for r in range(RECORDS))


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    d = tmp_path_factory.mktemp("numbered")
    write_manifest(d, [feature("id", "int64", [], "int"), feature("x", "float32", [2], "float")])
    for f in range(FILES):
        write_records(d / f"part-{f}.tfrecords", [example(id=("int", [100 * f + r]), x=("float", [100 * f + r,
                                                                                                    100 * f + r + 0.5]))
                                                   for r in range(RECORDS)])
    return d


def config(data, **args):
    return loader_config(data, [("id", "id"), ("x", "x")], inputs=["x"], targets=["id"], **args)


def shuffled(data, **args):
    return config(data, **{"target_batch_size": 4, "shuffle": True, "seed": 7, "num_shuffle_buffer_elements": 8,
                           "num_mix_files": 2, "num_filenames_shuffle_buffer": 4, "epochs": 2, **args})


def ids(batches) -> list[int]:
    return [int(i) for _, targets in batches for i in targets["id"]]


def same(a, b) -> bool:
    """Two lists of (features, targets) batches hold the same arrays."""
    return len(a) == len(b) and all(
        fa.keys() == fb.keys() and ta.keys() == tb.keys() and all(np.array_equal(fa[k], fb[k]) for k in fa)
        and all(np.array_equal(ta[k], tb[k]) for k in ta) for (fa, ta), (fb, tb) in zip(a, b))


@pytest.mark.parametrize("prefetch", [0, 1, 3])
def test_the_batches_are_input_fns_as_numpy_arrays(data, prefetch):
    cfg = shuffled(data)
    got = list(batchloaders.numpy_iterator(cfg, prefetch=prefetch))
    assert same(got, collect(build_input_fn(cfg)()))
    assert len(got) == 12 and sorted(ids(got)) == sorted(ALL_IDS * 2)  # 2 epochs of 24 records, batches of 4
    features, targets = got[0]
    assert isinstance(features["x"], np.ndarray) and features["x"].dtype == np.float32
    assert features["x"].shape == (4, 2) and targets["id"].dtype == np.int64
    assert np.array_equal(features["x"][:, 0], targets["id"].astype(np.float32))  # each row its own record
    assert tf.config.get_visible_devices("GPU") == []  # hidden before the pipeline was built


def test_a_restored_state_gives_the_uninterrupted_runs_batches(data):
    input_fn = build_input_fn(shuffled(data))
    whole = list(NumpyIterator(input_fn))
    for stop in (0, 1, 5, 6, 11, 12):  # the start, within epoch 1, at the epoch's end, the last, past it
        first = NumpyIterator(input_fn, prefetch=2)
        taken = [next(first) for _ in range(stop)]
        state = json.loads(json.dumps(first.get_state()))
        assert state["batches_consumed"] == stop  # the batches given, not the ones made ahead
        resumed = NumpyIterator(input_fn)
        resumed.set_state(state)
        assert same(taken + list(resumed), whole), stop
        first.close()


def test_set_state_goes_back_within_a_running_iterator(data):
    it = batchloaders.numpy_iterator(shuffled(data))
    whole = [next(it) for _ in range(8)]
    it.set_state({**it.get_state(), "batches_consumed": 3})
    assert same([next(it) for _ in range(5)], whole[3:])
    it.close()  # the batches made ahead are dropped: the next one is still the one after the last given
    assert it.get_state()["batches_consumed"] == 8 and same([next(it)], collect(build_input_fn(shuffled(data))())[8:9])


def test_a_state_of_another_process_share_is_refused(data):
    cfg = shuffled(data)
    zero = batchloaders.numpy_iterator(cfg, process_index=0, process_count=2)
    next(zero)
    one = batchloaders.numpy_iterator(cfg, process_index=1, process_count=2)
    with pytest.raises(ResumeError, match=r"\$\.config: found '[0-9a-f]{16}', this pipeline's config is "):
        one.set_state(zero.get_state())


@pytest.mark.parametrize("epochs", [1, 2])
def test_processes_together_read_every_record_once_per_epoch(data, epochs):
    cfg = shuffled(data, epochs=epochs)
    shares = [list(batchloaders.numpy_iterator(cfg, process_index=i, process_count=2)) for i in range(2)]
    assert sorted(ids(shares[0]) + ids(shares[1])) == sorted(ALL_IDS * epochs)
    assert set(ids(shares[0])).isdisjoint(ids(shares[1]))  # a record is read by one process only
    assert {len(t["id"]) for share in shares for _, t in share} == {2}  # the global batch of 4, split in 2


@pytest.mark.parametrize("kwargs, where, said", [
    ({"process_index": 1}, "$.process_count", "missing while process_index is given"),
    ({"process_count": 2}, "$.process_index", "missing while process_count is given"),
    ({"process_index": 2, "process_count": 2}, "$.process_index", "found 2 with process_count 2: expected 0 to 1"),
    ({"process_index": 0, "process_count": 0}, "$.process_count", "found 0: expected an integer >= 1"),
    ({"process_index": -1, "process_count": 2}, "$.process_index", "found -1: expected an integer >= 0"),
    ({"prefetch": -1}, "$.prefetch", "found -1: expected an integer >= 0"),
])
def test_arguments_that_make_no_share_are_config_errors(data, kwargs, where, said):
    with pytest.raises(ConfigError) as raised:
        batchloaders.numpy_iterator(config(data), **kwargs)
    problem, = raised.value.problems
    assert (problem.file, problem.path) == ("<numpy_iterator>", where) and said in problem.message


def test_ragged_and_sparse_outputs_are_refused_naming_the_tensor(tmp_path):
    write_manifest(tmp_path, [feature("x", "float32", [2], "float", var_len=True),
                              feature("id", "int64", [], "int", var_len=False)], allow_var_len=True)
    write_records(tmp_path / "a.tfrecords", [sequence_example({"id": ("int", [r])}, {"x": ("float", [[r, r]] * r)})
                                             for r in range(1, 5)])
    cfg = loader_config(tmp_path, [("x", "x"), ("x", "y"), ("id", "id")], inputs=["x", "y"], targets=["id"],
                        padding=[{"tensor": "x", "batching": "ragged"}, {"tensor": "y", "batching": "sparse"}])
    with pytest.raises(ConfigError) as raised:
        batchloaders.numpy_iterator(cfg)
    assert [(p.path, p.message.split(",")[0]) for p in raised.value.problems] == [
        ("$.args.padding[0]", "tensor 'x' comes out ragged (a tf.RaggedTensor)"),
        ("$.args.padding[1]", "tensor 'y' comes out sparse (a tf.SparseTensor)")]
    assert "expected batching: padded" in raised.value.problems[0].message
    assert "{to_name: x_length, type: length, args: {tensor: x}}" in raised.value.problems[0].message
    cfg["args"]["padding"] = True  # padded: the same data as dense arrays
    batches = list(batchloaders.numpy_iterator(cfg))
    assert [b[0]["x"].shape for b in batches] == [(2, 2, 2), (2, 4, 2)]


def test_batches_go_into_a_jitted_jax_function(data):
    jax = pytest.importorskip("jax", reason="jax is not installed (the test extra installs jax[cpu])")
    traced = []

    @jax.jit
    def step(total, features, targets):
        traced.append(features["x"].shape)  # runs only when jax traces (compiles) the step
        return total + (features["x"][:, 1] - features["x"][:, 0]).sum() * 2 + targets["id"].sum()

    cpu = jax.devices("cpu")[0]
    total = jax.numpy.zeros((), "float32")  # (a Python 0 would trace the step again for the float it becomes)
    for features, targets in batchloaders.numpy_iterator(shuffled(data, drop_remainder=True), device_put=cpu):
        assert isinstance(features["x"], jax.Array) and features["x"].devices() == {cpu}
        total = step(total, features, targets)
    # every record twice: its id, plus 2 * 0.5; one compile for the one batch shape
    assert int(total) == 2 * sum(ALL_IDS) + 2 * len(ALL_IDS) and traced == [(4, 2)]


def test_a_damaged_file_is_a_data_error_at_its_batch(tmp_path):
    from conftest import flip_byte, frame_offsets

    records = [example(id=("int", [r]), x=("float", [r, r])) for r in range(6)]
    path = write_records(tmp_path / "a.tfrecords", records)
    write_manifest(tmp_path, [feature("id", "int64", [], "int"), feature("x", "float32", [2], "float")])
    data = open(path, "rb").read()
    with open(path, "wb") as f:  # record 4's payload damaged: its checksum no longer matches
        f.write(flip_byte(data, frame_offsets(records)[4] + 14))
    it = batchloaders.numpy_iterator(config(tmp_path))
    assert [ids([next(it)]) for _ in range(2)] == [[0, 1], [2, 3]]
    with pytest.raises(batchloaders.DataError, match="a.tfrecords"):  # raised here, not in the prefetching thread
        next(it)
    assert it.get_state()["batches_consumed"] == 2


def test_one_process_unless_jax_runs_several(data):
    pytest.importorskip("jax", reason="jax is not installed (the test extra installs jax[cpu])")
    it = batchloaders.numpy_iterator(config(data))  # jax imported, one process: the whole data
    assert (it.process_index, it.process_count, it.input_context) == (0, 1, None)
    assert sorted(ids(it)) == ALL_IDS


def test_a_global_shuffles_state_holds_the_position_all_processes_consumed(data, tmp_path):
    import shutil

    from batchloaders.cli.main import main

    indexed = tmp_path / "indexed"
    shutil.copytree(data, indexed)
    with pytest.raises(SystemExit) as done:
        main(["index", str(indexed)])
    assert done.value.code == 0
    cfg = shuffled(indexed, shuffle_scope="global")
    whole = list(batchloaders.numpy_iterator(cfg))
    assert sorted(ids(whole)) == sorted(ALL_IDS * 2)
    for stop in (0, 2, 7):
        first = batchloaders.numpy_iterator(cfg, prefetch=3)
        taken = [next(first) for _ in range(stop)]
        state = json.loads(json.dumps(first.get_state()))
        assert (state["batches_consumed"], state["position"]) == (stop, 4 * stop)
        resumed = batchloaders.numpy_iterator(cfg)
        resumed.set_state(state)
        assert same(taken + list(resumed), whole), stop
    half = batchloaders.numpy_iterator(cfg, process_index=1, process_count=2, prefetch=2)
    next(half), next(half)
    assert half.get_state()["position"] == 8  # 2 batches of 2 from each of the 2 processes


def test_a_models_packing_is_kept(data):
    import keras

    x = keras.Input(shape=(2,), name="x")
    model = keras.Model(x, keras.layers.Dense(1, name="id")(x))
    features, targets = next(batchloaders.numpy_iterator(config(data), model=model))  # single tensors, not dicts
    assert isinstance(features, np.ndarray) and features.shape == (2, 2) and targets.tolist() == [0, 1]
    assert features.tolist() == [[0.0, 0.5], [1.0, 1.5]]


@pytest.mark.parametrize("prefetch", [0, 1])
def test_an_iterator_collected_while_a_function_is_traced_leaves_that_graph_alone(data, prefetch):
    """The garbage collector may run anywhere, here while tf.function traces (and holds its graph's lock, where
    TensorFlow work waited for ever: the suite hung on it). Collecting an iterator that made batches ahead puts no
    op into the graph being traced, and its thread stops."""
    iterators = [batchloaders.numpy_iterator(shuffled(data), prefetch=prefetch)]
    given = [ids([next(iterators[0])]) for _ in range(2)]
    collected = weakref.ref(iterators[0])
    thread = getattr(iterators[0]._holder["ahead"], "thread", None)  # (prefetch 0: none)
    inside = []

    @tf.function(autograph=False)
    def traced():
        iterators.clear()  # the last reference: collected here, inside the trace
        gc.collect()
        inside.append(collected() is None)
        return tf.constant(1)

    ops = [op.type for op in traced.get_concrete_function().graph.get_operations()]
    assert inside == [True]
    assert ops == ["Const", "Identity"]
    if thread is not None:
        thread.join(timeout=30)
        assert not thread.is_alive()
    again = batchloaders.numpy_iterator(shuffled(data), prefetch=prefetch)
    assert [ids([next(again)]) for _ in range(2)] == given  # a new iterator starts from the first batch
