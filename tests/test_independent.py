"""The independent loader: every argument of the spec, checked on batch values.

Fixture records encode where they came from: record r of file f has id 100*f + r.
"""
from __future__ import annotations

import collections

import numpy as np
import pytest
import tensorflow as tf

from batchloaders import build_input_fn
from conftest import (collect, example, feature, loader_config, sequence_example, write_manifest,
                      write_records)

IDS = [100 * f + r for f in range(3) for r in range(4)]  # file order, record order


def ids_of(batches):
    return [[int(i) for i in (b[1]["id"] if isinstance(b, tuple) else b["id"])] for b in batches]


def flat(batches):
    return [i for b in ids_of(batches) for i in b]


def run(data_dir, **args):
    cfg = loader_config(data_dir, [("id", "id"), ("x", "x")], inputs=["x"], targets=["id"], **args)
    return collect(build_input_fn(cfg)())


def test_unshuffled_batches_follow_file_and_record_order(numbered_dataset):
    batches = run(numbered_dataset, target_batch_size=5)
    assert ids_of(batches) == [IDS[0:5], IDS[5:10], IDS[10:12]]
    features, targets = batches[0]
    np.testing.assert_array_equal(features["x"], [[i, i + 0.5] for i in IDS[0:5]])
    assert features["x"].dtype == np.float32 and targets["id"].dtype == np.int64


@pytest.mark.parametrize("drop, expected", [(True, [IDS[0:5], IDS[5:10]]), (False, [IDS[0:5], IDS[5:10], IDS[10:12]])])
def test_drop_remainder(numbered_dataset, drop, expected):
    assert ids_of(run(numbered_dataset, target_batch_size=5, drop_remainder=drop)) == expected


def test_drop_remainder_gives_static_batch_dimension(numbered_dataset):
    cfg = loader_config(numbered_dataset, [("x", "x")], inputs=["x"], target_batch_size=4, drop_remainder=True)
    assert build_input_fn(cfg)().element_spec["x"].shape.as_list() == [4, 2]
    cfg["args"]["drop_remainder"] = False
    assert build_input_fn(cfg)().element_spec["x"].shape.as_list() == [None, 2]


def test_epochs_repeat_and_batches_cross_epoch_boundaries(numbered_dataset):
    assert flat(run(numbered_dataset, epochs=2, target_batch_size=5)) == IDS + IDS
    assert ids_of(run(numbered_dataset, epochs=2, target_batch_size=5))[2] == IDS[10:12] + IDS[0:3]


def test_epochs_null_repeats_forever_with_full_batches(numbered_dataset):
    cfg = loader_config(numbered_dataset, [("id", "id")], inputs=["id"], epochs=None, target_batch_size=5)
    ds = build_input_fn(cfg)()
    assert ds.cardinality().numpy() == tf.data.INFINITE_CARDINALITY
    got = [int(i) for b in ds.take(12).as_numpy_iterator() for i in b["id"]]
    assert got == (IDS * 5)[:60]
    assert ds.element_spec["id"].shape.as_list() == [5]


def test_params_batch_size_overrides_target_batch_size(numbered_dataset):
    cfg = loader_config(numbered_dataset, [("id", "id")], inputs=["id"], target_batch_size=5)
    input_fn = build_input_fn(cfg)
    assert [len(b["id"]) for b in collect(input_fn(params={"batch_size": 3}))] == [3, 3, 3, 3]
    assert [len(b["id"]) for b in collect(input_fn({"batch_size": 6}))] == [6, 6]  # Estimator style


def test_features_only_when_no_targets(numbered_dataset):
    cfg = loader_config(numbered_dataset, [("id", "id")], inputs=["id"], target_batch_size=12)
    (only,) = collect(build_input_fn(cfg)())
    assert isinstance(only, dict) and list(only["id"]) == IDS


def test_shuffle_is_seeded_complete_and_reshuffled_each_epoch(numbered_dataset):
    args = dict(shuffle=True, num_shuffle_buffer_elements=100, num_filenames_shuffle_buffer=3, num_mix_files=2,
                seed=7, epochs=2, target_batch_size=12)
    first, second = ids_of(run(numbered_dataset, **args))
    assert sorted(first) == IDS and sorted(second) == IDS
    assert first != IDS and first != second
    assert ids_of(run(numbered_dataset, **args)) == [first, second]  # same seed, same order


def test_num_mix_files_one_keeps_each_file_contiguous_with_files_shuffled(numbered_dataset):
    orders = set()
    for seed in range(6):
        got = flat(run(numbered_dataset, shuffle=True, num_shuffle_buffer_elements=1,
                       num_filenames_shuffle_buffer=3, num_mix_files=1, seed=seed, target_batch_size=12))
        files = [got[i:i + 4] for i in (0, 4, 8)]
        assert all(chunk == [chunk[0] + r for r in range(4)] for chunk in files)  # whole files, in order
        orders.add(tuple(c[0] // 100 for c in files))
    assert len(orders) > 1  # the file name buffer reorders files


def test_num_mix_files_interleaves_records_of_that_many_files(numbered_dataset):
    got = flat(run(numbered_dataset, shuffle=True, num_shuffle_buffer_elements=1, num_filenames_shuffle_buffer=1,
                   num_mix_files=3, target_batch_size=12))
    # A buffer of one keeps file and record order: the cycle takes one record from each file in turn.
    assert got == [100 * f + r for r in range(4) for f in range(3)]


@pytest.mark.parametrize("reads", [2, 3])
def test_num_parallel_reads_without_shuffle_keeps_small_files_whole(numbered_dataset, reads):
    # Files alternate block by block (1024 records of this size): files shorter than a block come whole.
    assert flat(run(numbered_dataset, num_parallel_reads=reads, target_batch_size=12)) == IDS


@pytest.fixture
def long_files(tmp_path):
    """3 files of 1500, 1024 and 700 records (more, exactly and less than one block of 1024);
    record r of file f has id 10000*f + r."""
    d = tmp_path / "long"
    write_manifest(d, [feature("id", "int64", [], "int")])
    for f, n in enumerate([1500, 1024, 700]):
        write_records(d / f"part-{f}.tfrecords", [example(id=("int", [10000 * f + r])) for r in range(n)])
    return d


@pytest.mark.parametrize("reads, expected", [
    # Two files open: the first blocks of files 0 and 1, then the rest of file 0; file 2 takes the
    # place of file 1 (which ended with its one whole block) one round after it ended.
    (2, [(0, 0, 1024), (1, 0, 1024), (0, 1024, 1500), (2, 0, 700)]),
    (3, [(0, 0, 1024), (1, 0, 1024), (2, 0, 700), (0, 1024, 1500)]),
    (1, [(0, 0, 1500), (1, 0, 1024), (2, 0, 700)]),
])
def test_num_parallel_reads_without_shuffle_alternates_blocks_of_files(long_files, reads, expected):
    cfg = loader_config(long_files, [("id", "id")], inputs=["id"], num_parallel_reads=reads, target_batch_size=500)
    batches = collect(build_input_fn(cfg)())
    assert [len(b["id"]) for b in batches[:-1]] == [500] * (len(batches) - 1)
    assert [int(i) for b in batches for i in b["id"]] == [10000 * f + r for f, a, z in expected for r in range(a, z)]


@pytest.mark.parametrize("args", [
    {"sloppy_interleave": True, "num_parallel_reads": 3, "num_parallel_parses": 2},
    {"num_interleave_out_buffer_elements": 4, "num_interleave_in_buffer_elements": 3, "num_parallel_reads": 2},
    {"num_read_buffer_bytes": 1 << 20},
    {"num_prefetch": 3},
    {"num_prefetch": -1, "num_parallel_reads": -1, "num_parallel_parses": -1},
    {"multi_load": True},
])
def test_tuning_arguments_keep_every_value(numbered_dataset, args):
    batches = run(numbered_dataset, target_batch_size=4, **args)
    pairs = sorted((int(i), tuple(x)) for f, t in batches for i, x in zip(t["id"], f["x"]))
    assert pairs == [(i, (i, i + 0.5)) for i in IDS]
    if not args.get("sloppy_interleave") and args.get("num_parallel_reads", 1) in (1, -1):
        assert flat(batches) == IDS


@pytest.mark.parametrize("compression", ["gzip", "zlib", None])
def test_compressed_files(tmp_path, compression):
    write_manifest(tmp_path, [feature("id", "int64", [], "int")], compression=compression)
    write_records(tmp_path / "a.tfrecords", [example(id=("int", [i])) for i in range(5)], compression)
    cfg = loader_config(tmp_path, [("id", "id")], inputs=["id"], target_batch_size=5)
    assert [list(b["id"]) for b in collect(build_input_fn(cfg)())] == [[0, 1, 2, 3, 4]]


def test_deserialize_types_and_casts(tmp_path):
    write_manifest(tmp_path, [
        feature("i", "int32", [2], "int"),
        feature("f_as_half", "float16", [], "float"),
        feature("i_as_float", "float32", [], "int"),
        feature("s", "string", [2], "string"),
        feature("raw_le", "int16", [2], "raw", endian="little"),
        feature("raw_be", "float32", [], "raw", endian="big"),
        feature("raw_stack", "uint8", [2, 2], "raw", endian="little", len=3),
    ])
    records = []
    for r in range(2):
        records.append(example(
            i=("int", [r, -r]), f_as_half=("float", [r + 0.25]), i_as_float=("int", [7 * r]),
            s=("bytes", [f"a{r}", f"b{r}"]),
            raw_le=("bytes", [np.array([r, 300 + r], "<i2").tobytes()]),
            raw_be=("bytes", [np.array([r + 0.5], ">f4").tobytes()]),
            raw_stack=("bytes", [bytes([10 * k + r + 40 * i for i in range(4)]) for k in range(3)])))
    write_records(tmp_path / "d.tfrecords", records)
    names = ["i", "f_as_half", "i_as_float", "s", "raw_le", "raw_be", "raw_stack"]
    cfg = loader_config(tmp_path, [(n, n) for n in names], inputs=names, target_batch_size=2)
    (b,) = collect(build_input_fn(cfg)())
    np.testing.assert_array_equal(b["i"], [[0, 0], [1, -1]])
    assert b["i"].dtype == np.int32
    np.testing.assert_array_equal(b["f_as_half"], np.array([0.25, 1.25], np.float16))
    assert b["f_as_half"].dtype == np.float16
    np.testing.assert_array_equal(b["i_as_float"], [0.0, 7.0])
    assert b["i_as_float"].dtype == np.float32
    assert b["s"].tolist() == [[b"a0", b"b0"], [b"a1", b"b1"]]
    np.testing.assert_array_equal(b["raw_le"], [[0, 300], [1, 301]])
    np.testing.assert_array_equal(b["raw_be"], [0.5, 1.5])
    assert b["raw_stack"].shape == (2, 3, 2, 2)
    # record 1, string k holds bytes 10k+1 + 40i in row-major [2, 2] order
    np.testing.assert_array_equal(b["raw_stack"][1], [[[10 * k + 1, 10 * k + 41], [10 * k + 81, 10 * k + 121]]
                                                      for k in range(3)])


@pytest.fixture
def sequences(tmp_path):
    """SequenceExamples: record r has context label=r and a feature list 'frames' of r+1 steps [r, step]."""
    write_manifest(tmp_path, [feature("label", "int64", [], "int", var_len=False),
                              feature("frames", "float32", [2], "float", var_len=True),
                              feature("tokens", "int32", [], "raw", var_len=True, endian="little")],
                   allow_var_len=True)
    recs = [sequence_example({"label": ("int", [r])},
                             {"frames": ("float", [[r, s] for s in range(r + 1)]),
                              "tokens": ("bytes", [[np.array([10 * r + s], "<i4").tobytes()] for s in range(r + 1)])})
            for r in range(4)]
    write_records(tmp_path / "s.tfrecords", recs)
    return tmp_path


def test_var_len_feature_lists_padded_to_batch_max(sequences):
    cfg = loader_config(sequences, [("label", "label"), ("frames", "frames"), ("tokens", "tokens")],
                        inputs=["frames", "tokens"], targets=["label"], target_batch_size=2, padding=True)
    (f1, t1), (f2, t2) = collect(build_input_fn(cfg)())
    np.testing.assert_array_equal(f1["frames"], [[[0, 0], [0, 0]], [[1, 0], [1, 1]]])
    np.testing.assert_array_equal(f2["tokens"], [[20, 21, 22, 0], [30, 31, 32, 33]])
    assert list(t2["label"]) == [2, 3]


def test_padding_list_sets_value_and_fixed_shape_and_pads_every_other_tensor(sequences):
    cfg = loader_config(sequences, [("label", "label"), ("frames", "frames"), ("tokens", "tokens")],
                        inputs=["frames", "tokens"], targets=["label"], target_batch_size=2,
                        padding=[{"tensor": "tokens", "shape": [6], "value": -1},
                                 {"tensor": "frames", "shape": [-1, 3], "value": 9.5}])
    (f1, _), (f2, _) = collect(build_input_fn(cfg)())
    np.testing.assert_array_equal(f1["tokens"], [[0, -1, -1, -1, -1, -1], [10, 11, -1, -1, -1, -1]])
    np.testing.assert_array_equal(f1["frames"], [[[0, 0, 9.5], [9.5, 9.5, 9.5]], [[1, 0, 9.5], [1, 1, 9.5]]])
    assert f2["frames"].shape == (2, 4, 3)
    ds = build_input_fn(cfg)()
    assert ds.element_spec[0]["tokens"].shape.as_list() == [None, 6]


@pytest.mark.parametrize("loader", ["independent", "discrete_sequence"])
def test_padding_with_negative_zero_writes_negative_zero(sequences, loader):
    """-0.0 equals 0 but is another value: tails that parsing already zero-filled are overwritten."""
    window = {} if loader == "independent" else {"min_window": 1, "max_window": 1}  # a record a window
    cfg = loader_config(sequences, [("label", "label"), ("frames", "frames")], inputs=["frames", "n"],
                        targets=["label"], target_batch_size=4, loader=loader,
                        secondary_features=[{"to_name": "n", "type": "length", "args": {"tensor": "frames"}}],
                        padding=[{"tensor": "frames", "value": -0.0}], **window)
    rows = 0
    for features, _ in collect(build_input_fn(cfg)()):
        for frames, n in zip(features["frames"], features["n"]):
            # Real steps are [r, step] (never negative, never -0.0); every step past n is -0.0.
            assert not np.signbit(frames[:n]).any() and np.signbit(frames[n:]).all(), (frames, n)
            rows += 1
    assert rows >= 2


def test_padding_shape_shorter_than_data_fails_at_run_time_naming_the_tensor(sequences):
    cfg = loader_config(sequences, [("tokens", "tokens")], inputs=["tokens"], target_batch_size=4,
                        padding=[{"tensor": "tokens", "shape": [2]}])
    with pytest.raises(tf.errors.InvalidArgumentError, match="tokens"):
        collect(build_input_fn(cfg)())


def test_const_secondary_features(numbered_dataset):
    cfg = loader_config(numbered_dataset, [("id", "id"), ("x", "x")], inputs=["x", "ones", "copy", "s"],
                        targets=["id"], target_batch_size=2, secondary_features=[
                            {"to_name": "ones", "type": "const", "args": {"shape": [3], "dtype": "int32", "value": 1}},
                            {"to_name": "copy", "type": "const", "args": {"shape": "x", "dtype": "x"}},
                            {"to_name": "s", "type": "const", "args": {"shape": [], "dtype": "string"}}])
    features, _ = collect(build_input_fn(cfg)())[0]
    np.testing.assert_array_equal(features["ones"], [[1, 1, 1], [1, 1, 1]])
    assert features["ones"].dtype == np.int32
    np.testing.assert_array_equal(features["copy"], np.zeros((2, 2), np.float32))
    assert features["copy"].dtype == np.float32
    assert features["s"].tolist() == [b"", b""]


def test_const_copying_a_var_len_shape_follows_each_example(sequences):
    cfg = loader_config(sequences, [("frames", "frames")], inputs=["frames", "mask"], target_batch_size=2,
                        padding=[{"tensor": "mask", "value": 0}], secondary_features=[
                            {"to_name": "mask", "type": "const", "args": {"shape": "frames", "dtype": "int32",
                                                                          "value": 1}}])
    b1, b2 = collect(build_input_fn(cfg)())
    np.testing.assert_array_equal(b2["mask"][:, :, 0], [[1, 1, 1, 0], [1, 1, 1, 1]])


@pytest.mark.parametrize("spec, expected", [
    ("[1:]", lambda x: x[1:]),
    ("[-1]", lambda x: x[-1]),
    ("[:, 0]", lambda x: x[:, 0]),
    ("[::2, 1:]", lambda x: x[::2, 1:]),
    ("[-2:, -1]", lambda x: x[-2:, -1]),
    ("[1:-1]", lambda x: x[1:-1]),
])
def test_slice_step_on_fixed_tensor(tmp_path, spec, expected):
    grid = np.arange(12, dtype=np.float32).reshape(4, 3)
    write_manifest(tmp_path, [feature("g", "float32", [4, 3], "float")])
    write_records(tmp_path / "g.tfrecords", [example(g=("float", (grid + 100 * r).ravel())) for r in range(2)])
    cfg = loader_config(tmp_path, [("g", "g")], inputs=["g"], target_batch_size=2,
                        processing_steps=[{"tensor": "g", "type": "slice", "args": {"slice": spec}}])
    (b,) = collect(build_input_fn(cfg)())
    np.testing.assert_array_equal(b["g"], np.stack([expected(grid + 100 * r) for r in range(2)]))


@pytest.mark.parametrize("spec", ["[1:]", "[:-1]", "[-2:]", "[::2]", "[1:3]", "[-3:-1]", "[0]", "[-1]"])
def test_slice_on_var_len_axis_equals_slicing_each_example(sequences, spec):
    cfg = loader_config(sequences, [("tokens", "tokens")], inputs=["tokens"], target_batch_size=4,
                        padding=[{"tensor": "tokens", "value": -7}],
                        processing_steps=[{"tensor": "tokens", "type": "slice", "args": {"slice": spec}}])
    if spec in ("[0]",):
        (b,) = collect(build_input_fn(cfg)())
        np.testing.assert_array_equal(b["tokens"], [0, 10, 20, 30])
        return
    if spec == "[-1]":
        (b,) = collect(build_input_fn(cfg)())
        np.testing.assert_array_equal(b["tokens"], [0, 11, 22, 33])
        return
    (b,) = collect(build_input_fn(cfg)())
    from batchloaders.transform.steps.slice import parse_slice

    (part,) = parse_slice(spec)
    rows = [list(np.arange(10 * r, 10 * r + r + 1)[part]) for r in range(4)]
    width = max(len(r) for r in rows)
    np.testing.assert_array_equal(b["tokens"], [r + [-7] * (width - len(r)) for r in rows])


def test_steps_run_in_order_and_overwrite_the_tensor(numbered_dataset):
    cfg = loader_config(numbered_dataset, [("x", "x")], inputs=["x"], target_batch_size=2, processing_steps=[
        {"tensor": "x", "type": "slice", "args": {"slice": "[1:]"}},
        {"tensor": "x", "type": "slice", "args": {"slice": "[0]"}}])
    b = collect(build_input_fn(cfg)())[0]
    np.testing.assert_array_equal(b["x"], [0.5, 1.5])


def test_list_dataset_with_relative_paths_from_a_yaml_file(tmp_path, numbered_dataset):
    (tmp_path / "lists").mkdir()
    (tmp_path / "lists" / "files.txt").write_text(
        f"{numbered_dataset}/part-2.tfrecords\n\n../numbered/part-0.tfrecords\n")
    (tmp_path / "cfg").mkdir()
    (tmp_path / "cfg" / "c.yaml").write_text(f"""
type: independent
model: {{inputs: [id]}}
args:
  dataset: {{type: list, args: {{manifest_file: ../numbered/__manifest__.json, list_file: ../lists/files.txt}}}}
  target_batch_size: 8
  drop_remainder: false
  epochs: 1
  num_read_buffer_bytes: 0
  num_prefetch: 1
  primary_features: [{{from_name: id, to_name: id}}]
""")
    (b,) = collect(build_input_fn(tmp_path / "cfg" / "c.yaml")())
    assert list(b["id"]) == [200, 201, 202, 203, 0, 1, 2, 3]


def test_dir_dataset_walks_subdirectories_in_sorted_order(tmp_path):
    write_manifest(tmp_path, [feature("id", "int64", [], "int")])
    write_records(tmp_path / "b" / "deep" / "z.tfrecords", [example(id=("int", [3]))])
    write_records(tmp_path / "a.tfrecords", [example(id=("int", [1]))])
    write_records(tmp_path / "b" / "y.tfrecords", [example(id=("int", [2]))])
    (tmp_path / "b" / "ignored.txt").write_text("not data")
    cfg = loader_config(tmp_path, [("id", "id")], inputs=["id"], target_batch_size=5)
    # Sorted by relative path (a.tfrecords, b/deep/z.tfrecords, b/y.tfrecords), not in walk order.
    assert [list(b["id"]) for b in collect(build_input_fn(cfg)())] == [[1, 3, 2]]


def test_input_context_shards_files_and_uses_per_replica_batch(numbered_dataset):
    cfg = loader_config(numbered_dataset, [("id", "id")], inputs=["id"], target_batch_size=4)
    input_fn = build_input_fn(cfg)
    ctx = tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=1, num_replicas_in_sync=2)
    assert [list(b["id"]) for b in collect(input_fn(ctx))] == [[100, 101], [102, 103]]


@pytest.mark.parametrize("structure", ["dict", "single", "list"])
def test_keras_fit_with_model_names_taken_from_the_model(numbered_dataset, structure):
    import keras

    x = keras.Input(shape=(2,), name="x")
    out = keras.layers.Dense(1, name="id")(x)
    model = {"dict": lambda: keras.Model({"x": x}, {"id": out}), "single": lambda: keras.Model(x, out),
             "list": lambda: keras.Model([x], [out])}[structure]()
    model.compile(optimizer=keras.optimizers.SGD(1e-5), loss="mse")
    cfg = loader_config(numbered_dataset, [("id", "id"), ("x", "x")], inputs=[], target_batch_size=4, epochs=None)
    del cfg["model"]
    input_fn = build_input_fn(cfg, model=model)
    assert input_fn.config.inputs == ("x",) and input_fn.config.targets == ("id",)
    features, targets = next(iter(input_fn()))
    first = {"dict": lambda t: t["id"], "single": lambda t: t, "list": lambda t: t[0]}[structure]
    assert list(first(targets).numpy()) == [0, 1, 2, 3]
    before = model.evaluate(input_fn(), steps=3, verbose=0)
    model.fit(input_fn(), steps_per_epoch=3, epochs=3, verbose=0, shuffle=False)
    assert model.evaluate(input_fn(), steps=3, verbose=0) < before  # it learned from the batches


def test_a_distribution_strategy_consumes_the_input_fn(numbered_dataset):
    cfg = loader_config(numbered_dataset, [("id", "id"), ("x", "x")], inputs=["x"], targets=["id"],
                        target_batch_size=4, drop_remainder=True)
    strategy = tf.distribute.MirroredStrategy(["/cpu:0"])
    seen = []
    for features, targets in strategy.distribute_datasets_from_function(build_input_fn(cfg)):
        seen.extend(int(i) for i in strategy.experimental_local_results(targets["id"])[0])
        np.testing.assert_array_equal(strategy.experimental_local_results(features["x"])[0][:, 1] -
                                      strategy.experimental_local_results(features["x"])[0][:, 0], 0.5)
    assert seen == IDS
