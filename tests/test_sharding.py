"""Sharding under tf.distribute (sharding.py): 1, 2, 3 and 8 input pipelines over 7 uneven files.

Every value says where it came from (record r of file f), so each pipeline's share can be
compared with what the rule gives: by file when there are at least as many files as pipelines
(pipeline i reads files i, i + n, ...), else by record (r of file f when (f + r) % n == i;
sequence loaders: window w of file f when (f + w) % n == i). The shares of all pipelines are
disjoint and together exactly the unsharded data.
"""
from __future__ import annotations

import collections
import json
import logging
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

import batchloaders
from batchloaders.errors import ConfigError
from conftest import collect, example, feature, loader_config, sequence_example, write_manifest, write_records
from seqdata import sequence_config, write_continuous, write_discrete

COUNTS = [5, 0, 3, 1, 7, 4, 2]  # records of the 7 files; file 1 is empty
FILES = len(COUNTS)
PIPELINES = [1, 2, 3, 8]
WINDOW = 3  # continuous: steps per window (4 steps per record); discrete: 2 records per window
SHUFFLED = dict(shuffle=True, num_shuffle_buffer_elements=16, num_filenames_shuffle_buffer=3, num_mix_files=2)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """{loader: data_dir}: record r of file f holds id 100f + r (independent), steps 1000f + p
    (continuous, 4 per record), rid 100f + r (discrete, 1-3 frames per record)."""
    root = tmp_path_factory.mktemp("sharding")
    independent = root / "independent"
    write_manifest(independent, [feature("id", "int64", [], "int"), feature("x", "float32", [2], "float")])
    for f, n in enumerate(COUNTS):
        write_records(independent / f"part-{f}.tfrecords",
                      [example(id=("int", [100 * f + r]), x=("float", [100 * f + r, 0.5])) for r in range(n)])
    return {"independent": independent,
            "continuous_sequence": write_continuous(root / "continuous", COUNTS),
            "discrete_sequence": write_discrete(root / "discrete", [[(1 + (f + r) % 3, 1) for r in range(n)]
                                                                    for f, n in enumerate(COUNTS)])}


def config(data, loader, **args):
    """A config per loader: batches of 4 records, or of 4 fixed windows (unshuffled, back to back)."""
    args = {"target_batch_size": 4, **args}
    if loader == "independent":
        return loader_config(data[loader], [("id", "id")], inputs=["id"], **args)
    if loader == "continuous_sequence":
        return sequence_config(data[loader], loader, [("y", "y")], inputs=["y"], lo=WINDOW, hi=WINDOW,
                               **args)
    return sequence_config(data[loader], loader, [("rid", "rid")], inputs=["rid"], lo=2, hi=2, **args)


def elements(batches, loader):
    """(file, number in the file) of every record or window of ``batches``."""
    out = []
    for b in batches:
        if loader == "independent":
            out += [divmod(int(i), 100) for i in b["id"]]
        elif loader == "continuous_sequence":
            out += [(int(w[0]) // 1000, int(w[0]) % 1000 // WINDOW) for w in b["y"]]
        else:
            out += [(int(w[0]) // 100, int(w[0]) % 100 // 2) for w in b["rid"]]
    return out


def context(n, i, replicas=1):
    return tf.distribute.InputContext(num_input_pipelines=n, input_pipeline_id=i, num_replicas_in_sync=replicas)


def rule_share(everything, n, i):
    """What the rule gives pipeline i of n, from the unsharded elements."""
    if FILES >= n:
        return sorted(e for e in everything if e[0] % n == i)
    return sorted(e for e in everything if (e[0] + e[1]) % n == i)


@pytest.mark.parametrize("loader", ["independent", "continuous_sequence", "discrete_sequence"])
@pytest.mark.parametrize("n", PIPELINES)
def test_shares_are_the_rules_disjoint_and_cover_the_data(data, loader, n, caplog):
    input_fn = batchloaders.build_input_fn(config(data, loader))
    everything = elements(collect(input_fn()), loader)
    assert len(everything) == {"independent": 22, "continuous_sequence": 27, "discrete_sequence": 9}[loader]
    caplog.set_level(logging.INFO, logger="batchloaders")
    shares = []
    for i in range(n):
        caplog.clear()
        shares.append(elements(collect(input_fn(context(n, i))), loader))
        # once per input_fn call (TensorFlow's own warnings, such as a checkpoint of an earlier test being
        # garbage-collected now, are not ours to count)
        assert [r.name for r in caplog.records if r.name != "tensorflow"] == ["batchloaders"]
        assert sorted(shares[i]) == rule_share(everything, n, i)
    assert collections.Counter(e for share in shares for e in share) == collections.Counter(everything)
    assert len(set(everything)) == len(everything)  # so the equal multisets mean disjoint shares


@pytest.mark.parametrize("loader,n,i,line", [
    ("independent", 1, 0, "input pipeline 0 of 1: not sharded, reads every data file"),
    ("independent", 3, 1, "input pipeline 1 of 3: sharded by file (7 data files >= 3 input pipelines): "
                          "reads 2 file(s), positions 1, 4"),
    ("continuous_sequence", 2, 0, "input pipeline 0 of 2: sharded by file (7 data files >= 2 input pipelines): "
                                  "reads 4 file(s), positions 0, 2, 4, 6"),
    ("discrete_sequence", 7, 0, "input pipeline 0 of 7: sharded by file (7 data files >= 7 input pipelines): "
                                "reads 1 file(s), positions 0"),
    ("independent", 8, 3, "input pipeline 3 of 8: sharded by record (7 data files < 8 input pipelines): "
                          "reads every file and keeps record r of file f when (f + r) % 8 == 3"),
    ("discrete_sequence", 8, 7, "input pipeline 7 of 8: sharded by window (7 data files < 8 input pipelines): "
                                "reads every file and keeps window w of file f when (f + w) % 8 == 7"),
])
def test_the_rule_chosen_is_logged(data, loader, n, i, line, caplog):
    input_fn = batchloaders.build_input_fn(config(data, loader))
    caplog.set_level(logging.INFO, logger="batchloaders")
    input_fn(context(n, i))
    assert [(r.name, r.levelname, r.getMessage()) for r in caplog.records] == [("batchloaders", "INFO", line)]
    caplog.clear()
    input_fn()  # no input context: nothing to say
    assert caplog.records == []


LENGTH = {"continuous_sequence": "y", "discrete_sequence": "rid"}


@pytest.mark.parametrize("loader,lo,hi", [
    ("independent", None, None),  # no seed: shares are chosen before the unseeded shuffles
    ("continuous_sequence", 2, 5),
    ("discrete_sequence", 1, 3),
])
def test_sharded_by_record_shuffled_and_random_windows_still_cover_the_data(data, loader, lo, hi):
    """Random windows are the same in every pipeline (one seed): the shares are the unsharded windows."""
    if loader == "independent":
        cfg, windows = config(data, loader, **SHUFFLED), lambda batches: elements(batches, loader)
    else:
        name = LENGTH[loader]
        cfg = sequence_config(data[loader], loader, [(name, name)], inputs=[name, "n"], lo=lo, hi=hi, padding=True,
                              target_batch_size=4, seed=7, **SHUFFLED, secondary_features=[
                                  {"to_name": "n", "type": "length", "args": {"tensor": name}}])

        def windows(batches):  # each window's values, without its padding
            return [tuple(w[:k].tolist()) for b in batches for w, k in zip(b[name], b["n"])]
    input_fn = batchloaders.build_input_fn(cfg)
    everything = collections.Counter(windows(collect(input_fn())))
    shares = [collections.Counter(windows(collect(input_fn(context(8, i))))) for i in range(8)]
    assert sum(shares, collections.Counter()) == everything
    assert all(not (a & b) for j, a in enumerate(shares) for b in shares[j + 1:])
    if loader != "independent":  # the windows really are of random lengths lo..hi
        assert {len(w) for w in everything} == set(range(lo, hi + 1))


@pytest.mark.parametrize("loader,args,why", [
    ("continuous_sequence", dict(min_window=2, max_window=5, padding=True), "lengths 2..5"),
    ("discrete_sequence", dict(SHUFFLED, min_window=2, max_window=2), "a random start offset, shuffle being true"),
])
def test_random_windows_sharded_by_window_need_a_seed(data, loader, args, why):
    cfg = config(data, loader)
    cfg["args"].update(args)
    input_fn = batchloaders.build_input_fn(cfg)
    input_fn(context(3, 2))  # by file: each pipeline draws its own files' windows, no seed needed
    with pytest.raises(ConfigError) as raised:
        input_fn(context(8, 2))
    (problem,) = raised.value.problems
    assert (problem.file, problem.path) == ("<dict>", "$.args.seed")
    assert problem.message == (
        "found null, but the dataset has 7 data file(s) for 8 input pipelines, so each pipeline reads every file "
        f"and keeps 1 window in 8, and the windows are drawn at random ({why}): every pipeline must draw the "
        "same windows, from one seed; expected a seed (any integer), or at least 8 data files (each pipeline then "
        "reads its own)")


@pytest.mark.parametrize("batch,params,replicas,per_replica,error", [
    (8, None, 4, 2, None),
    (8, None, 1, 8, None),
    (4, {"batch_size": 6}, 2, 3, None),
    (6, None, 4, None, ("<dict>", "$.args.target_batch_size", "found 6: under tf.distribute the global batch is "
                        "split evenly among the 4 replicas in sync, and 6 is not a multiple of 4; expected a "
                        "multiple of 4 (e.g. 4 or 8)")),
    (4, {"batch_size": 3}, 4, None, ("<params>", "$.batch_size", "found 3: under tf.distribute the global batch "
                                     "is split evenly among the 4 replicas in sync, and 3 is not a multiple of 4; "
                                     "expected a multiple of 4 (e.g. 4)")),
])
def test_per_replica_batch_size_and_a_batch_the_replicas_cannot_share(data, batch, params, replicas,
                                                                        per_replica, error):
    input_fn = batchloaders.build_input_fn(config(data, "independent", target_batch_size=batch))
    if error is not None:
        with pytest.raises(ConfigError) as raised:
            input_fn(context(2, 0, replicas), params=params)
        assert [(p.file, p.path, p.message) for p in raised.value.problems] == [error]
        return
    first = next(iter(input_fn(context(2, 0, replicas), params=params)))
    assert first["id"].numpy().tolist() == [0, 1, 2, 3, 4, 200, 201, 202][:per_replica]


BY_RECORD = "(sharded by record): the data gives fewer {unit}s than input pipelines, or none falls to this one"


BY_FILE = "(sharded by file): its data file(s) (positions 2 of 3) give no record"


@pytest.mark.parametrize("loader,counts,unit,why,listed", [
    # 1 file of 2 records (continuous: 2 windows of 3 steps) for 3 pipelines: pipeline 2 gets nothing.
    ("independent", [2], "record", BY_RECORD, False),
    ("independent", [2], "record", BY_RECORD, True),  # the manifest lists the record counts
    ("continuous_sequence", [2], "window", BY_RECORD, False),
    # 3 files for 3 pipelines: pipeline 2 reads the empty third.
    ("independent", [2, 2, 0], "record", BY_FILE, False),
    ("independent", [2, 2, 0], "record", BY_FILE, True),
])
def test_an_endless_pipeline_with_an_empty_share_fails_clearly(tmp_path, loader, counts, unit, why, listed):
    if loader == "independent":
        path = write_manifest(tmp_path, [feature("id", "int64", [], "int")])
        for f, n in enumerate(counts):
            write_records(tmp_path / f"part-{f}.tfrecords", [example(id=("int", [100 * f + r])) for r in range(n)])
        if listed:  # the manifest's record counts
            with open(path) as f:
                manifest = json.load(f)
            manifest["files"] = [{"name": f"part-{f}.tfrecords", "num_records": n} for f, n in enumerate(counts)]
            with open(path, "w") as f:
                json.dump(manifest, f)
        cfg = loader_config(tmp_path, [("id", "id")], inputs=["id"], epochs=None)
    else:
        write_continuous(tmp_path, counts, chunk=3)
        cfg = sequence_config(tmp_path, loader, [("y", "y")], inputs=["y"], lo=3, hi=3, epochs=None)
    input_fn = batchloaders.build_input_fn(cfg)
    assert [b[next(iter(b))].tolist() for b in collect(input_fn(context(3, 1)), 2)] == {
        (1, "independent"): [[1, 1], [1, 1]], (1, "continuous_sequence"): [[[3, 4, 5]] * 2, [[3, 4, 5]] * 2],
        (3, "independent"): [[100, 101], [100, 101]]}[len(counts), loader]
    expected = (f"input pipeline 2 of 3 got no {unit} from a full pass over its share of the data "
                f"{why.format(unit=unit)}, so with epochs null it would give no batch, ever; expected more data, "
                "or fewer input pipelines")
    if listed:  # the manifest's record counts tell before anything runs
        with pytest.raises(ConfigError) as caught:
            input_fn(context(3, 2))
        problem = caught.value.problems[0]
        assert (problem.file, problem.path, problem.message) == ("<dict>", "$.args.epochs", expected)
        return
    with pytest.raises(tf.errors.InvalidArgumentError) as raised:  # known only once read (windows: drawn)
        collect(input_fn(context(3, 2)), 2)
    assert f"<dict>: $.args.epochs: {expected}" in raised.value.message


@pytest.mark.parametrize("loader, seed", [
    ("independent", None), ("independent", 4),
    ("continuous_sequence", 4),  # shuffled windows (a random offset) sharded by window need a seed
])
def test_an_empty_share_fails_with_shardings_message_through_the_epoch_loop(tmp_path, loader, seed):
    """Endless epochs are determinism.repeat_epochs' loop (each epoch built for its number), which ends
    when epoch 0 gives nothing; sharding.endless wraps it, so a shuffled pipeline with an empty share
    still fails naming the pipeline (not with Keras's raw cardinality error, nor by spinning)."""
    if loader == "independent":  # 3 files for 3 pipelines: pipeline 2 reads the empty third
        write_manifest(tmp_path, [feature("id", "int64", [], "int")])
        for f, n in enumerate([2, 2, 0]):
            write_records(tmp_path / f"part-{f}.tfrecords", [example(id=("int", [100 * f + r])) for r in range(n)])
        cfg = loader_config(tmp_path, [("id", "id")], inputs=["id"], epochs=None, seed=seed, **SHUFFLED)
        unit, why = "record", "(sharded by file): its data file(s) (positions 2 of 3) give no record"
    else:  # 1 file of 2 windows for 3 pipelines, sharded by window: pipeline 2 keeps none
        write_continuous(tmp_path, [2], chunk=3)
        cfg = sequence_config(tmp_path, loader, [("y", "y")], inputs=["y"], lo=3, hi=3, epochs=None, seed=seed,
                              **SHUFFLED)
        unit, why = "window", BY_RECORD.format(unit="window")
    input_fn = batchloaders.build_input_fn(cfg)
    assert len(collect(input_fn(context(3, 0)), 3)) == 3  # a share with data goes on and on
    with pytest.raises(tf.errors.InvalidArgumentError) as raised:
        collect(input_fn(context(3, 2)), 2)
    assert (f"<dict>: $.args.epochs: input pipeline 2 of 3 got no {unit} from a full pass over its share of the "
            f"data {why}") in raised.value.message


MIRRORED_MODES = {
    # One input pipeline (per worker) for both replicas: each global batch of 4 split 2 and 2, in file order.
    "per_worker": ([[0, 1], [2, 3]], ["input pipeline 0 of 1: not sharded, reads every data file"]),
    # README's way around TensorFlow's MultiDeviceIterator: a pipeline per replica, on its share of the files
    # (files 0 and 2, and file 1), iterated on the host.
    "per_replica": ([[0, 1], [100, 101]], [
        "input pipeline 0 of 2: sharded by file (3 data files >= 2 input pipelines): reads 2 file(s), positions 0, 2",
        "input pipeline 1 of 2: sharded by file (3 data files >= 2 input pipelines): reads 1 file(s), positions 1"]),
}


@pytest.mark.slow
@pytest.mark.parametrize("mode", sorted(MIRRORED_MODES))
def test_mirrored_strategy_over_two_logical_cpus_fits_a_keras_model(tmp_path, mode):
    """distribute_datasets_from_function(input_fn) with Keras 3 fit, in a process whose CPU is split in two."""
    write_manifest(tmp_path, [feature("id", "int64", [], "int"), feature("x", "float32", [2], "float")])
    for f in range(3):
        write_records(tmp_path / f"part-{f}.tfrecords", [example(id=("int", [100 * f + r]), x=(
            "float", [100 * f + r, 100 * f + r + 0.5])) for r in range(4)])
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "distributed_fit.py")
    run = subprocess.run([sys.executable, script, str(tmp_path)] + (["per_replica"] if mode == "per_replica" else []),
                         capture_output=True, text=True, timeout=300, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    assert run.returncode == 0, run.stderr[-3000:]
    out = json.loads(run.stdout.strip().splitlines()[-1])
    first_batch, logged = MIRRORED_MODES[mode]
    assert out["replicas"] == 2
    assert out["first_batch"] == first_batch
    assert out["steps"] == [0, 1, 2, 0, 1, 2] and out["epochs"] == 2 and out["losses_finite"]
    assert out["logged"] == logged
    assert out["odd_batch"] == [["<dict>", "$.args.target_batch_size", (
        "found 5: under tf.distribute the global batch is split evenly among the 2 replicas in sync, and 5 is "
        "not a multiple of 2; expected a multiple of 2 (e.g. 4 or 6)")]]


@pytest.mark.parametrize("n,i,rule,files", [
    (1, 0, "none", (0, 1, 2, 3, 4, 5, 6)),
    (2, 1, "file", (1, 3, 5)),
    (7, 6, "file", (6,)),
    (8, 7, "record", (0, 1, 2, 3, 4, 5, 6)),
])
def test_the_plan_of_a_pipeline(data, n, i, rule, files):
    from batchloaders.read import sharding

    shard = sharding.plan(batchloaders.build_input_fn(config(data, "independent")).config, context(n, i))
    assert (shard.rule, shard.pipelines, shard.pipeline, shard.files) == (rule, n, i, files)


@pytest.mark.parametrize("file,count,kept", [
    (0, 5, 1),    # record 3
    (5, 4, 0),    # its first would be record 6
    (2, 20, 3),   # records 1, 9, 17
    (3, 0, 0),
    (3, 8, 1),    # record 0
])
def test_records_a_pipeline_keeps_of_a_file_sharded_by_record(file, count, kept):
    from batchloaders.read import sharding

    shard = sharding.Shard(sharding.RECORD, 8, 3, tuple(range(7)))
    assert shard.records_of(file, count) == kept == sum((file + r) % 8 == 3 for r in range(count))


@pytest.mark.parametrize("block,path,what", [
    ({"chunking": {"size": 2}}, "$.args.chunking", "a whole pass over the data gave no chunk"),
    ({"segmenting": {"num_unroll": 2}}, "$.args.segmenting", "an epoch gave no sequence of at least one step"),
])
def test_chunking_and_segmenting_say_an_empty_pass_may_be_the_pipelines_empty_share(tmp_path, block, path, what):
    """Their guards see one pipeline's pass, not the data's: one record of 6 steps for 2 pipelines (sharded by
    record) leaves pipeline 1 nothing, and its error says so besides the data's own reasons; pipeline 0 gets it."""
    write_manifest(tmp_path, [feature("v", "int64", [], "int", True)], allow_var_len=True)
    write_records(tmp_path / "part-0.tfrecords", [sequence_example({}, {"v": ("int", [[s] for s in range(1, 7)])})])
    input_fn = batchloaders.build_input_fn(loader_config(tmp_path, [("v", "v")], inputs=["v"], epochs=None,
                                                         target_batch_size=2, padding=True, **block))
    first = collect(input_fn(context(2, 0)), 1)[0]["v"].tolist()
    # chunking: the first two chunks; segmenting: lane 0 has epoch 0's sequence, lane 1 epoch 1's copy
    assert first == ([[1, 2], [3, 4]] if "chunking" in block else [[1, 2], [1, 2]])
    with pytest.raises(tf.errors.InvalidArgumentError) as raised:
        collect(input_fn(context(2, 1)), 1)
    assert f"<dict>: {path}: {what}" in raised.value.message
    assert ("; or the share of this input pipeline held none: input pipeline 1 of 2 reads its share of the data "
            "(sharded by record), which may hold no record: expected more data, or fewer input pipelines"
            ) in raised.value.message


def test_an_empty_share_with_finite_epochs_is_a_config_error_when_the_manifest_shows_it(tmp_path):
    """3 files for 3 pipelines, the third empty: pipeline 2 would end at once while the others give batches
    (it gave an empty dataset without a word); pipelines 0 and 1 read their files."""
    path = write_manifest(tmp_path, [feature("id", "int64", [], "int")])
    for f, n in enumerate([2, 2, 0]):
        write_records(tmp_path / f"part-{f}.tfrecords", [example(id=("int", [100 * f + r])) for r in range(n)])
    with open(path) as f:
        manifest = json.load(f)
    manifest["files"] = [{"name": f"part-{f}.tfrecords", "num_records": n} for f, n in enumerate([2, 2, 0])]
    with open(path, "w") as f:
        json.dump(manifest, f)
    input_fn = batchloaders.build_input_fn(loader_config(tmp_path, [("id", "id")], inputs=["id"], epochs=2))
    assert [b["id"].tolist() for b in collect(input_fn(context(3, 1)))] == [[100, 101], [100, 101]]
    with pytest.raises(ConfigError) as caught:
        input_fn(context(3, 2))
    problem = caught.value.problems[0]
    assert (problem.path, problem.message) == ("$.args.epochs", (
        "input pipeline 2 of 3 got no record from a full pass over its share of the data (sharded by file): its "
        "data file(s) (positions 2 of 3) give no record, so it would give no batch while the other input pipelines "
        "give theirs; expected more data, or fewer input pipelines"))
