"""Record accounting: a manifest's files[] counts make configs that give no batch fail when built,
give the dataset a known cardinality, and catch files changed since the manifest was written."""
from __future__ import annotations

import json
import os

import pytest

import batchloaders
from batchloaders.errors import ConfigError, ManifestError
from conftest import example, write_records

COUNTS = {"a.tfrecords": 5, "b.tfrecords": 7}  # record r of file f holds x = [100 * f + r]


def dataset(root, counts=COUNTS, *, listed=True, sizes=False, steps=1) -> str:
    d = str(root)
    entries = []
    for f, (name, n) in enumerate(counts.items(), 1):
        path = write_records(os.path.join(d, name), [example(x=("int", [100 * f + r] * steps)) for r in range(n)])
        entry = {"name": name, "num_records": n}
        if sizes:
            entry["size_bytes"] = os.path.getsize(path)
        entries.append(entry)
    manifest = {"compression": None, "allow_var_len": False,
                "features": [{"name": "x", "dtype": "int64", "shape": [steps], "deserialize_type": "int"}]}
    if listed:
        manifest["files"] = entries
    with open(os.path.join(d, "__manifest__.json"), "w") as f:
        json.dump(manifest, f)
    return d


def config(data_dir, loader="independent", **args) -> dict:
    base = {"dataset": {"type": "dir", "args": {"data_dir": data_dir}}, "target_batch_size": 4,
            "drop_remainder": False, "epochs": 1, "num_parallel_reads": 1, "num_read_buffer_bytes": 0,
            "num_prefetch": 0, "primary_features": [{"from_name": "x", "to_name": "x"}]}
    if loader != "independent":
        base.update(min_window=1, max_window=1)
    base.update(args)
    return {"type": loader, "model": {"inputs": ["x"], "targets": []}, "args": base}


@pytest.mark.parametrize("batch,drop,epochs,expected", [
    (4, False, 1, 3),   # 12 records: 4 + 4 + 4
    (5, False, 1, 3),   # 5 + 5 + 2
    (5, True, 1, 2),
    (5, True, 3, 7),    # 36 records
    (12, True, 1, 1),
])
def test_listed_counts_give_the_cardinality(tmp_path, batch, drop, epochs, expected):
    input_fn = batchloaders.build_input_fn(config(dataset(tmp_path), target_batch_size=batch,
                                                  drop_remainder=drop, epochs=epochs))
    ds = input_fn()
    assert int(ds.cardinality()) == expected
    batches = [b["x"].numpy()[:, 0].tolist() for b in ds]
    assert len(batches) == expected
    flat = [v for b in batches for v in b]
    assert len(flat) == (expected * batch if drop else 12 * epochs)
    assert set(flat) <= {100 + r for r in range(5)} | {200 + r for r in range(7)}


def test_keras_fit_knows_the_steps_per_epoch(tmp_path):
    import keras

    d = dataset(tmp_path)
    cfg = config(d, target_batch_size=4)
    cfg["model"] = {"inputs": ["x"], "targets": ["y"]}
    cfg["args"]["primary_features"].append({"from_name": "x", "to_name": "y"})
    inputs = keras.Input(shape=(1,), name="x", dtype="int64")
    model = keras.Model(inputs, keras.layers.Dense(1, name="y")(keras.ops.cast(inputs, "float32")))
    model.compile(optimizer="sgd", loss="mse")
    ds = batchloaders.build_input_fn(cfg, model=model)()
    steps = []

    class Steps(keras.callbacks.Callback):
        def on_train_begin(self, logs=None):
            steps.append(self.params["steps"])  # what the progress bar counts to

        def on_train_batch_end(self, batch, logs=None):
            steps.append(batch)

    model.fit(ds, epochs=2, verbose=0, callbacks=[Steps()], shuffle=False)
    assert steps == [3, 0, 1, 2, 0, 1, 2]  # known before the first epoch; 3 batches each epoch


def test_unlisted_files_leave_the_cardinality_unknown(tmp_path):
    ds = batchloaders.build_input_fn(config(dataset(tmp_path, listed=False)))()
    assert int(ds.cardinality()) < 0


def test_skip_file_leaves_the_cardinality_unknown(tmp_path):
    ds = batchloaders.build_input_fn(config(dataset(tmp_path), on_corrupt="skip_file"))()
    assert int(ds.cardinality()) < 0


@pytest.mark.parametrize("loader,args,counts,where,says", [
    ("independent", {"target_batch_size": 13, "drop_remainder": True}, COUNTS, "$.args.target_batch_size",
     "lists 12 records in the 2 data file(s), 12 examples in 1 epoch(s), fewer than target_batch_size 13"),
    ("independent", {}, {"a.tfrecords": 0, "b.tfrecords": 0}, "$.args.dataset", "every data file is empty"),
    ("discrete_sequence", {"min_window": 8, "max_window": 9, "padding": True}, COUNTS, "$.args.min_window",
     "the longest file holds 7 records, fewer than min_window = 8"),
    ("discrete_sequence", {"min_window": 3, "max_window": 3, "target_batch_size": 4, "drop_remainder": True},
     COUNTS, "$.args.target_batch_size", "give at most 3 windows of min_window = 3 records per epoch"),
    ("continuous_sequence", {"min_window": 5, "max_window": 5, "stride": 1, "target_batch_size": 10,
                             "drop_remainder": True}, COUNTS, "$.args.target_batch_size",
     "give at most 4 windows of min_window = 5 steps per epoch"),
])
def test_configs_that_give_no_batch_are_refused(tmp_path, loader, args, counts, where, says):
    cfg = config(dataset(tmp_path, counts), loader, **args)
    with pytest.raises(ConfigError) as raised:
        batchloaders.build_input_fn(cfg)
    (problem,) = raised.value.problems
    assert problem.path == where and says in problem.message, problem


def test_the_same_configs_build_when_they_give_a_batch(tmp_path):
    d = dataset(tmp_path)
    ds = batchloaders.build_input_fn(config(d, "discrete_sequence", min_window=3, max_window=3,
                                            target_batch_size=3, drop_remainder=True))()
    windows = [w for b in ds for w in b["x"].numpy()[:, :, 0].tolist()]
    assert windows == [[100, 101, 102], [200, 201, 202], [203, 204, 205]]


def test_a_file_changed_since_the_manifest_fails_the_build(tmp_path):
    d = dataset(tmp_path, sizes=True)
    with open(os.path.join(d, "b.tfrecords"), "ab") as f:
        f.write(b"appended")
    with pytest.raises(ManifestError) as raised:
        batchloaders.build_input_fn(config(d))
    (problem,) = raised.value.problems
    assert problem.file == os.path.join(d, "__manifest__.json") and problem.path == "$.files[1].size_bytes"
    assert problem.line == 1  # json.dump writes one line
    size = os.path.getsize(os.path.join(d, "b.tfrecords"))
    assert f"data file {os.path.join(d, 'b.tfrecords')} is {size:,} bytes, but the manifest records " \
           f"{size - 8:,} bytes (7 records)" in problem.message


@pytest.mark.parametrize("pipeline,batches", [
    (0, [[100, 103, 202, 205]]),  # record r of file f when (f + r) % 3 == pipeline (a: f 0, b: f 1)
    (1, [[101, 104, 200, 203], [206]]),
    (2, [[102, 201, 204]]),
])
def test_more_input_pipelines_than_files_shard_by_record_with_the_cardinality(tmp_path, pipeline, batches):
    import tensorflow as tf

    input_fn = batchloaders.build_input_fn(config(dataset(tmp_path)))
    ds = input_fn(tf.distribute.InputContext(num_input_pipelines=3, input_pipeline_id=pipeline, num_replicas_in_sync=1))
    assert int(ds.cardinality()) == len(batches)
    assert [b["x"].numpy()[:, 0].tolist() for b in ds] == batches


def test_as_many_files_as_input_pipelines_shard_by_file(tmp_path):
    import tensorflow as tf

    input_fn = batchloaders.build_input_fn(config(dataset(tmp_path)))
    context = tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=1, num_replicas_in_sync=2)
    ds = input_fn(context)  # 2 pipelines: pipeline 1 reads b.tfrecords, batches of 4 // 2 = 2
    assert int(ds.cardinality()) == 4
    assert [b["x"].numpy()[:, 0].tolist() for b in ds] == [[200, 201], [202, 203], [204, 205], [206]]


@pytest.mark.parametrize("entry,says", [
    ({"name": "../a.tfrecords", "num_records": 1}, "outside the manifest's directory"),
    ({"name": "/abs/a.tfrecords", "num_records": 1}, "outside the manifest's directory"),
    ({"name": "a.tfrecords", "num_records": -1}, "$.files[0].num_records"),
    ({"name": "a.tfrecords", "num_records": 1, "sha256": "XYZ"}, "$.files[0].sha256"),
])
def test_bad_files_entries_are_manifest_errors(tmp_path, entry, says):
    d = dataset(tmp_path, listed=False)
    path = os.path.join(d, "__manifest__.json")
    manifest = json.load(open(path))
    manifest["files"] = [entry]
    json.dump(manifest, open(path, "w"))
    with pytest.raises(ManifestError) as raised:
        batchloaders.load_manifest(path)
    assert says in str(raised.value)
