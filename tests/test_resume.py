"""Deterministic order and resuming (README, Scaling out): checkpoints of every loader's iterator, both modes.

Tested the way tf.data tests its own checkpointing: a run saves at break points spread evenly over two
epochs plus seeded random ones, the iterator unused and exhausted included; each checkpoint restored into a
freshly built pipeline must give exactly the rest of the uninterrupted run.
"""
from __future__ import annotations

import hashlib
import json
import os
import pathlib
import pickle
import random
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given, settings, strategies as st

import batchloaders
from batchloaders import ResumableIterator, ResumeError
from conftest import collect, feature, loader_config, sequence_example, write_manifest, write_records
from seqdata import sequence_config, write_continuous, write_discrete

RECORDS = [5, 0, 9, 3]  # records per file: uneven, one empty
SHUFFLE = dict(shuffle=True, num_shuffle_buffer_elements=6, num_filenames_shuffle_buffer=3, num_mix_files=2)


@pytest.fixture(autouse=True)
def _collect_checkpoints():
    """A restore refused halfway leaves TensorFlow objects that warn when garbage-collected: collect them here, so
    that their warnings do not land in a later test's captured log."""
    yield
    import gc

    gc.collect()


def write_independent(d: pathlib.Path) -> None:
    """Record r of file f: context id = 1000f + r, feature list v of 1 + r % 3 steps, each = id."""
    write_manifest(d, [feature("id", "int64", [], "int", False), feature("v", "int64", [], "int", True)],
                   allow_var_len=True)
    for f, n in enumerate(RECORDS):
        write_records(d / f"part-{f}.tfrecords", [sequence_example(
            {"id": ("int", [1000 * f + r])}, {"v": ("int", [[1000 * f + r]] * (1 + r % 3))}) for r in range(n)])


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("resume")
    write_independent(root / "independent")
    write_independent(root / "counted")  # the same, with its files' record counts in the manifest
    path = root / "counted" / "__manifest__.json"
    manifest = json.loads(path.read_text())
    manifest["files"] = [{"name": f"part-{f}.tfrecords", "num_records": n} for f, n in enumerate(RECORDS)]
    path.write_text(json.dumps(manifest))
    write_continuous(root / "continuous", [3, 0, 5, 2], chunk=4)
    write_discrete(root / "discrete", [[(2, 1)] * 4, [], [(1, 2)] * 7, [(3, 1)] * 2])
    return root


IDS = sorted(1000 * f + r for f, n in enumerate(RECORDS) for r in range(n))
CONTINUOUS = [("x", "x"), ("y", "y")]
DISCRETE = [("rid", "rid"), ("pair", "pair")]


def config(data, loader, *, shuffle=False, padding=False, seed=7, epochs=2, counted=False, **args):
    extra = {**(SHUFFLE if shuffle else {}), "seed": seed, "epochs": epochs, "target_batch_size": 3, **args}
    if loader == "independent":
        primary = [("id", "id"), ("v", "v")] if padding else [("id", "id")]
        return loader_config(data / ("counted" if counted else "independent"), primary,
                             inputs=[t for _, t in primary], padding=padding, **extra)
    if loader == "continuous_sequence":
        lo, hi = (3, 6) if padding else (4, 4)
        return sequence_config(data / "continuous", loader, CONTINUOUS, inputs=["x", "y"], lo=lo, hi=hi,
                               padding=padding, **extra)
    lo, hi = (1, 3) if padding else (2, 2)
    return sequence_config(data / "discrete", loader, DISCRETE, inputs=["rid", "pair"], lo=lo, hi=hi,
                           padding=padding, **extra)


ROWS = [("independent", False, False), ("independent", True, False), ("independent", False, True),
        ("independent", True, True), ("continuous_sequence", False, False), ("continuous_sequence", True, True),
        ("discrete_sequence", False, True), ("discrete_sequence", True, False)]


def flat(batch) -> tuple:
    """A batch as comparable bytes: every tensor's name, dtype, shape and values."""
    return tuple((k, str(v.dtype), v.shape, v.tobytes()) for k, v in sorted(batch.items()) for v in [np.asarray(v)])


def break_points(n: int, seed: int) -> list[int]:
    """0 (unused), n (exhausted), two evenly spaced ones and a seeded random one."""
    return sorted({0, n, n // 3, 2 * n // 3, random.Random(seed).randrange(n + 1)})


def check_epochs(loader, batches, shuffle):
    """Exact values: each epoch of the independent loader holds every record once."""
    if loader != "independent":
        return
    ids = np.concatenate([b["id"] for b in batches]).tolist()
    assert sorted(ids) == sorted(IDS * 2)
    first, second = ids[:len(IDS)], ids[len(IDS):]
    assert sorted(first) == IDS and sorted(second) == IDS
    assert (first != second) == shuffle  # reshuffled each epoch, and only when shuffling
    if "v" in batches[0]:
        for b in batches:
            for row, i in zip(b["v"], b["id"]):
                n = 1 + (i % 1000) % 3
                assert row[:n].tolist() == [i] * n and not row[n:].any()


@pytest.mark.parametrize("loader,shuffle,padding", ROWS)
def test_state_checkpoint_continues_the_uninterrupted_run(data, tmp_path, loader, shuffle, padding):
    input_fn = batchloaders.build_input_fn(config(data, loader, shuffle=shuffle, padding=padding))
    reference = collect(input_fn())
    check_epochs(loader, reference, shuffle)
    points = break_points(len(reference), len(loader) + shuffle + 2 * padding)
    iterator, saved = iter(input_fn()), {}
    for k in range(len(reference) + 1):
        if k in points:
            saved[k] = tf.train.Checkpoint(iterator=iterator).save(str(tmp_path / f"at{k}"))
        if k < len(reference):
            assert flat(next(iterator)) == flat(reference[k])  # a second iterator: the same batches
    for k, path in saved.items():
        restored = iter(input_fn())
        tf.train.Checkpoint(iterator=restored).restore(path).assert_consumed()
        assert [flat(b) for b in restored] == [flat(b) for b in reference[k:]], f"restored at batch {k}"


@pytest.mark.parametrize("loader,shuffle,padding", ROWS)
def test_replay_checkpoint_continues_as_the_state_one(data, tmp_path, loader, shuffle, padding):
    input_fn = batchloaders.build_input_fn(config(data, loader, shuffle=shuffle, padding=padding, resume="replay"))
    reference = [flat(b) for b in collect(input_fn())]
    rng = random.Random(loader)
    points = sorted({0, len(reference), rng.randrange(len(reference) + 1)})
    iterator, saved = ResumableIterator(input_fn), {}
    for k in range(len(reference) + 1):
        if k in points:
            saved[k] = tf.train.Checkpoint(iterator=iterator).save(str(tmp_path / f"at{k}"))
        if k < len(reference):
            assert flat({n: v.numpy() for n, v in next(iterator).items()}) == reference[k]
    with pytest.raises(StopIteration):
        next(iterator)
    for k, path in saved.items():
        restored = ResumableIterator(input_fn)
        tf.train.Checkpoint(iterator=restored).restore(path)
        assert [flat({n: v.numpy() for n, v in b.items()}) for b in restored] == reference[k:], f"at batch {k}"
        assert restored.batches_consumed == len(reference)
        assert os.path.getsize(path + ".data-00000-of-00001") < 4096  # bytes, not a shuffle buffer


def test_a_resumable_iterator_in_state_mode_restores_too_and_a_config_without_seed_keeps_its_draws(data, tmp_path):
    input_fn = batchloaders.build_input_fn(config(data, "discrete_sequence", shuffle=True, padding=True, seed=None))
    first = ResumableIterator(input_fn)
    head = [flat({n: v.numpy() for n, v in next(first).items()}) for _ in range(3)]
    path = tf.train.Checkpoint(iterator=first).save(str(tmp_path / "ckpt"))
    rest = [flat({n: v.numpy() for n, v in b.items()}) for b in first]
    restored = ResumableIterator(input_fn)
    tf.train.Checkpoint(iterator=restored).restore(path)
    assert [flat({n: v.numpy() for n, v in b.items()}) for b in restored] == rest
    assert head  # (the seed was drawn by the first iterator and kept in its checkpoint)


def test_without_a_seed_each_call_draws_its_own_and_a_state_restore_keeps_it(data, tmp_path):
    input_fn = batchloaders.build_input_fn(config(data, "independent", shuffle=True, seed=None))
    dataset = input_fn()
    first = [flat(b) for b in collect(dataset)]
    assert [flat(b) for b in collect(dataset)] == first  # the iterators of one dataset share its seed
    assert [flat(b) for b in collect(input_fn())] != first
    iterator = iter(dataset)
    next(iterator)
    path = tf.train.Checkpoint(iterator=iterator).save(str(tmp_path / "ckpt"))
    restored = iter(input_fn())  # another call, another seed: the checkpoint's comes back
    tf.train.Checkpoint(iterator=restored).restore(path)
    assert [flat(b) for b in restored] == first[1:]


def test_a_checkpoint_restores_into_a_fresh_build_of_the_same_config_whose_manifest_lists_its_files(data, tmp_path):
    """As a restarted job does: the config loaded and compiled anew. (The fingerprint once took in where the
    manifest's entries sit, an object that differs at every load, and refused every such restore.)"""
    saving = ResumableIterator(batchloaders.build_input_fn(config(data, "independent", shuffle=True, counted=True)))
    head = [flat({n: v.numpy() for n, v in next(saving).items()}) for _ in range(2)]
    path = tf.train.Checkpoint(iterator=saving).save(str(tmp_path / "ckpt"))
    rest = [flat({n: v.numpy() for n, v in b.items()}) for b in saving]
    loaded = pickle.loads(pickle.dumps(batchloaders.load_config(config(data, "independent", shuffle=True,
                                                                       counted=True))))  # sent to a worker, say
    assert next(iter(loaded.dataset.manifest.files.values())).line is not None  # its lines still found
    restored = ResumableIterator(batchloaders.build_input_fn(loaded))
    tf.train.Checkpoint(iterator=restored).restore(path)
    assert [flat({n: v.numpy() for n, v in b.items()}) for b in restored] == rest
    assert len(head) == 2 and rest


@pytest.mark.parametrize("change,named", [
    ({"target_batch_size": 2}, "target_batch_size"),
    ({"num_shuffle_buffer_elements": 5}, "num_shuffle_buffer_elements"),
    ({"seed": 8}, "seed"),
    ({"resume": "replay"}, "mode"),
])
def test_a_checkpoint_of_another_config_is_a_resume_error_naming_what_differs(data, tmp_path, change, named):
    saving = ResumableIterator(batchloaders.build_input_fn(config(data, "independent", shuffle=True)))
    next(saving)
    path = tf.train.Checkpoint(iterator=saving).save(str(tmp_path / "ckpt"))
    other = ResumableIterator(batchloaders.build_input_fn(config(data, "independent", shuffle=True, **change)))
    tf.train.Checkpoint(iterator=other).restore(path)
    with pytest.raises(ResumeError, match=named):
        next(other)


def test_a_state_checkpoint_of_a_pipeline_built_differently_is_a_resume_error(data, tmp_path, monkeypatch):
    """The same config, compiled another way (here: discrete windows planned in fewer record slots than
    max_window, so batched by padded_batch instead of rebatch, as before 2026-11-25): TensorFlow cannot
    restore the saved state into the new pipeline; a ResumeError says why and what to do."""
    from batchloaders.read import block_sizes

    discrete = config(data, "discrete_sequence", padding=True)
    saving = ResumableIterator(batchloaders.build_input_fn(discrete))
    next(saving)
    path = tf.train.Checkpoint(iterator=saving).save(str(tmp_path / "ckpt"))
    monkeypatch.setattr(block_sizes, "DISCRETE_SLOTS", 1)
    other = ResumableIterator(batchloaders.build_input_fn(discrete))
    tf.train.Checkpoint(iterator=other).restore(path)
    with pytest.raises(ResumeError) as raised:
        next(other)
    message = str(raised.value)
    assert "<checkpoint>: $.iterator: the saved iterator state does not fit this pipeline (TensorFlow: Failed to " \
           "restore dataset iterator from checkpoint" in message
    assert "expected a checkpoint saved by this version, or resume: replay" in message
    # A replay checkpoint of the same run fits both builds: the same batches follow.
    replaying = config(data, "discrete_sequence", padding=True, resume="replay")
    monkeypatch.setattr(block_sizes, "DISCRETE_SLOTS", 128)
    saving = ResumableIterator(batchloaders.build_input_fn(replaying))
    next(saving)
    path = tf.train.Checkpoint(iterator=saving).save(str(tmp_path / "replay"))
    rest = [flat(b) for b in saving]
    monkeypatch.setattr(block_sizes, "DISCRETE_SLOTS", 1)
    other = ResumableIterator(batchloaders.build_input_fn(replaying))
    tf.train.Checkpoint(iterator=other).restore(path)
    assert len(rest) > 3 and [flat(b) for b in other] == rest


def test_params_seed_overrides_the_config_seed_and_each_seed_gives_its_own_order(data):
    input_fn = batchloaders.build_input_fn(config(data, "continuous_sequence", shuffle=True, padding=True))
    ids = {}
    for seed in (7, 8):
        ids[seed] = [flat(b) for b in collect(input_fn(params={"seed": seed}))]
    assert ids[7] == [flat(b) for b in collect(input_fn())]
    assert ids[7] != ids[8]
    with pytest.raises(batchloaders.ConfigError, match=r"\$\.seed"):
        input_fn(params={"seed": -1})


SCRIPT = """
import hashlib, sys
sys.path.insert(0, {tests!r})
import batchloaders
from conftest import collect
from test_resume import config, flat
import pathlib
digest = hashlib.sha256()
for loader in ("independent", "discrete_sequence"):
    for batch in collect(batchloaders.build_input_fn(config(pathlib.Path({data!r}), loader, shuffle=True,
                                                             padding=True))()):
        digest.update(repr(flat(batch)).encode())
print(digest.hexdigest())
"""


def test_two_fresh_processes_give_byte_identical_batches(data):
    script = SCRIPT.format(tests=str(pathlib.Path(__file__).parent), data=str(data))
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    runs = [subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                             env=env, text=True) for _ in range(2)]
    out = [run.communicate(timeout=120)[0].strip() for run in runs]
    digest = hashlib.sha256()
    for loader in ("independent", "discrete_sequence"):
        for batch in collect(batchloaders.build_input_fn(config(data, loader, shuffle=True, padding=True))()):
            digest.update(repr(flat(batch)).encode())
    assert out[0] == out[1] == digest.hexdigest()


# Exactly once: property tests over seeds, parallelism and shuffle settings (uneven files, one empty).
READING = dict(num_mix_files=st.integers(1, 4), num_parallel_reads=st.integers(1, 3),
               num_parallel_parses=st.sampled_from([1, 2, -1]), buffer=st.integers(1, 12),
               batch=st.integers(1, 5))


def reading_args(shuffle, num_mix_files, num_parallel_reads, num_parallel_parses, buffer, batch):
    args = dict(num_parallel_reads=num_parallel_reads, num_parallel_parses=num_parallel_parses,
                target_batch_size=batch)
    if shuffle:
        args.update(shuffle=True, num_shuffle_buffer_elements=buffer, num_filenames_shuffle_buffer=buffer,
                    num_mix_files=num_mix_files)
    return args


@settings(max_examples=6, deadline=None)
@given(seed=st.integers(0, 2**40), shuffle=st.booleans(), **READING)
def test_every_record_once_per_epoch(data, seed, shuffle, **reading):
    args = reading_args(shuffle, **reading)
    input_fn = batchloaders.build_input_fn(config(data, "independent", seed=seed, epochs=1, **args))
    ids = np.concatenate([b["id"] for b in collect(input_fn())]).tolist()
    assert sorted(ids) == IDS


_WINDOWS: dict = {}


def discrete_windows(batches) -> list[tuple]:
    """(file, first record, records) of every window; its records consecutive in one file."""
    out = []
    for b in batches:
        for row in b["rid"]:
            f, r0 = divmod(int(row[0]), 100)
            k = int(np.count_nonzero(row[1:] > 0)) + 1  # padding is 0; rid 0 (file 0, record 0) comes first
            assert row[:k].tolist() == [100 * f + r0 + j for j in range(k)]
            out.append((f, r0, k))
    return out


@settings(max_examples=6, deadline=None)
@given(seed=st.sampled_from([0, 1, 2**40]), shuffle=st.booleans(), **READING)
def test_every_drawn_window_once_per_epoch_whatever_the_reading(data, seed, shuffle, **reading):
    """The windows drawn are a function of seed, epoch and file (not of reading order, parallelism or
    buffers): every reading gives each of them once, and a file's windows do not overlap."""
    key = (seed, shuffle)
    if key not in _WINDOWS:
        plain = reading_args(shuffle, 1, 1, 1, 1, 3)
        _WINDOWS[key] = sorted(discrete_windows(collect(batchloaders.build_input_fn(config(
            data, "discrete_sequence", padding=True, seed=seed, epochs=1, **plain))())))
    got = sorted(discrete_windows(collect(batchloaders.build_input_fn(config(
        data, "discrete_sequence", padding=True, seed=seed, epochs=1, **reading_args(shuffle, **reading)))())))
    assert got == _WINDOWS[key]
    assert len(set(got)) == len(got)
    for (f, r0, k), (g, s0, _) in zip(got, got[1:]):
        assert f != g or r0 + k <= s0


def test_endless_epochs_of_no_data_end_in_an_error_not_a_spin(tmp_path):
    """Epochs are a flat_map over an endless count (each built for its number): one that gives nothing
    must stop it, as Dataset.repeat stops after an empty pass."""
    write_manifest(tmp_path, [feature("id", "int64", [], "int")])
    write_records(tmp_path / "part-0.tfrecords", [])
    for shuffle in (False, True):
        input_fn = batchloaders.build_input_fn(loader_config(tmp_path, [("id", "id")], inputs=["id"], epochs=None,
                                                             **(SHUFFLE if shuffle else {})))
        with pytest.raises(tf.errors.FailedPreconditionError, match="infinite number of elements but contained only"):
            next(iter(input_fn()))


@pytest.mark.parametrize("loader", ["independent", "continuous_sequence", "discrete_sequence"])
def test_tensorflows_global_seed_plays_no_part(data, loader):
    """The shuffles and windows draw from the config's seed alone (README): the same batches with no global
    seed, with global seed 0 and with another one, and the same as a second call's."""
    input_fn = batchloaders.build_input_fn(config(data, loader, shuffle=True, padding=True))
    try:
        runs = []
        for global_seed in (None, 0, 5):
            tf.random.set_seed(global_seed)
            runs.append([flat(b) for b in input_fn().as_numpy_iterator()])
    finally:
        tf.random.set_seed(None)
    assert len(runs[0]) > 3 and runs[0] == runs[1] == runs[2]


# --- input_fn(skip_batches=N): what a replay restores with ---------------------------------------------------

EPOCH = len(IDS)  # 17 records per epoch; batches of 3 straddle epochs


@pytest.mark.parametrize("shuffle,padding,epochs,counted", [
    (s, p, e, c) for s in (False, True) for p in (False, True) for e in (3, None) for c in (True, False)
    if c or not p])
def test_skip_batches_gives_the_rest_of_the_run_from_any_batch(data, shuffle, padding, epochs, counted):
    """Every reading path of the independent loader (blocks parsed where read, blocks of serialized records,
    shuffled records), finite and endless, with the manifest's counts (epochs skipped unread) and without
    (batches made and dropped): the batches after N are those of the whole run after N, at epoch
    boundaries, inside an epoch and in the last one; with counts, the dataset knows how many are left."""
    input_fn = batchloaders.build_input_fn(config(data, "independent", shuffle=shuffle, padding=padding,
                                                  epochs=epochs, counted=counted))
    whole = [flat(b) for b in input_fn().take(60).as_numpy_iterator()]
    assert len(whole) == (17 if epochs == 3 else 60)  # 51 records in batches of 3
    # Batches 5 and 11 hold the last records of an epoch and the first of the next; 6 begins a record into
    # the second epoch; 16 is the last batch of a finite run.
    for n in (5, 6, 11, 16):
        dataset = input_fn(skip_batches=n)
        assert [flat(b) for b in dataset.take(60 - n).as_numpy_iterator()] == whole[n:n + 60 - n], f"after {n}"
        if epochs == 3 and counted:
            assert int(dataset.cardinality()) == 17 - n


@pytest.mark.parametrize("shuffle", [False, True])
def test_skip_batches_leaves_whole_epochs_unread(data, shuffle):
    """A trillion batches in, the first batch comes at once: the epochs before are not read, not made and
    dropped (which would not end). Unshuffled, it holds the records that far into the repeated epoch order;
    shuffled, skipping one batch fewer and taking the second gives it too."""
    input_fn = batchloaders.build_input_fn(config(data, "independent", shuffle=shuffle, epochs=None, counted=True))
    far = 10**12
    batches = list(input_fn(skip_batches=far).take(2).as_numpy_iterator())
    got = [flat(b) for b in batches]
    if not shuffle:
        order = np.concatenate([b["id"] for b in input_fn().take(EPOCH).as_numpy_iterator()])[:EPOCH]
        assert sorted(order.tolist()) == IDS
        assert np.concatenate([b["id"] for b in batches]).tolist() == [order[(far * 3 + k) % EPOCH] for k in range(6)]
    assert got[0] == [flat(b) for b in input_fn(skip_batches=far - 1).take(2).as_numpy_iterator()][1]
    assert got[1] == [flat(b) for b in input_fn(skip_batches=far + 1).take(1).as_numpy_iterator()][0]


def test_skip_batches_of_a_sequence_loader_drops_the_batches_made(data):
    """Windows are drawn, so their count is not fixed by the manifest: the batches are made and left out."""
    input_fn = batchloaders.build_input_fn(config(data, "continuous_sequence", shuffle=True, padding=True))
    whole = [flat(b) for b in input_fn().as_numpy_iterator()]
    assert [flat(b) for b in input_fn(skip_batches=4).as_numpy_iterator()] == whole[4:]


@pytest.mark.parametrize("bad", [-1, 1.5, True, "3"])
def test_skip_batches_must_be_a_count(data, bad):
    input_fn = batchloaders.build_input_fn(config(data, "independent"))
    with pytest.raises(batchloaders.ConfigError, match=r"\$\.skip_batches: found .*expected an integer >= 0"):
        input_fn(skip_batches=bad)


@pytest.mark.parametrize("mode", ["state", "replay"])
def test_a_restore_into_a_running_iterator_is_checked_too(data, tmp_path, mode):
    """Restored into a ResumableIterator that has given batches: another config's checkpoint at the same count is
    a ResumeError at the next batch (it went on silently: the count alone decided whether to look), and the same
    config's goes on from the saved position."""
    input_fn = batchloaders.build_input_fn(config(data, "independent", shuffle=True, resume=mode))
    reference = [flat(b) for b in collect(input_fn())]
    saving = ResumableIterator(input_fn)
    for _ in range(2):
        next(saving)
    path = tf.train.Checkpoint(iterator=saving).save(str(tmp_path / "two"))
    other = ResumableIterator(batchloaders.build_input_fn(config(data, "independent", shuffle=True, resume=mode,
                                                                 target_batch_size=2)))
    for _ in range(2):
        next(other)
    with pytest.raises(ResumeError, match=r"\$\.iterator: the checkpoint was saved by a pipeline whose batch_size"):
        # state: the running tf.data iterator refuses the saved state as it is restored; replay: the next batch
        tf.train.Checkpoint(iterator=other).restore(path)
        next(other)
    same = ResumableIterator(input_fn)  # state: the running tf.data iterator takes the saved state in place
    for _ in range(5):
        next(same)
    tf.train.Checkpoint(iterator=same).restore(path)
    assert [flat({n: v.numpy() for n, v in b.items()}) for b in same] == reference[2:]
