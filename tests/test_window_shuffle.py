"""``shuffle_window_files: K``: a global shuffle in windows of K files.

Independent: record r of file f holds id = 1000 * f + r (and a note of r % 7 + 1 bytes, so offsets fall on no
grid); 7 files of 9, 0, 13, 8, 5, 11 and 6 records (file 1 empty): 52 records. Continuous (tests/seqdata.py):
frame p of file f holds 1000 * f + p, 4 frames a record, windows of 6 frames back to back.
"""
from __future__ import annotations

import os

import numpy as np
import pytest
import tensorflow as tf

from batchloaders import ResumableIterator, build_input_fn, load_config
from batchloaders.cli.describe import reading_line
from batchloaders.cli.main import main
from batchloaders.errors import ConfigError
from batchloaders.read import global_order, permutation
from conftest import example, feature, loader_config, resumed_ids, write_manifest, write_records
from seqdata import sequence_config, write_continuous

SIZES = (9, 0, 13, 8, 5, 11, 6)
FILES = len(SIZES)
IDS = sorted(1000 * f + r for f, n in enumerate(SIZES) for r in range(n))
N = len(IDS)
ALL = "all"  # no shuffle_window_files: one window of every file


def index(directory) -> str:
    with pytest.raises(SystemExit) as done:
        main(["index", str(directory)])
    assert done.value.code == 0
    return str(directory)


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> str:
    d = tmp_path_factory.mktemp("windows") / "d"
    write_manifest(d, [feature("id", "int64", [], "int"), feature("note", "string", [], "string")])
    for f, n in enumerate(SIZES):
        write_records(os.path.join(d, f"part-{f}.tfrecords"),
                      [example(id=("int", [1000 * f + r]), note=("string", [b"n" * (r % 7 + 1)])) for r in range(n)])
    return index(d)


def config(d: str, window, **args) -> dict:
    base = dict(shuffle=True, shuffle_scope="global", seed=5, epochs=2, target_batch_size=4, resume="replay")
    if window != ALL:
        base["shuffle_window_files"] = window
    base.update(args)
    return loader_config(d, [("id", "id")], inputs=["id"], **base)


def batches(dataset) -> list[list[int]]:
    return [np.asarray(b["id"]).tolist() for b in dataset]


def flat(lists) -> list[int]:
    return [i for b in lists for i in b]


def context(pipeline: int, pipelines: int) -> tf.distribute.InputContext:
    return tf.distribute.InputContext(num_input_pipelines=pipelines, input_pipeline_id=pipeline,
                                      num_replicas_in_sync=pipelines)


@pytest.fixture(scope="module")
def runs(data) -> dict:
    """The batches of a 2-epoch run for each window (every build the tests compare)."""
    return {window: batches(build_input_fn(config(data, window))()) for window in (1, 3, FILES, 100, ALL)}


def file_windows(d: str, window: int, epoch: int) -> list[list[int]]:
    """epoch_file_order's files of the epoch, cut into its windows of ``window`` files."""
    order = global_order.epoch_file_order(load_config(config(d, window)), FILES, epoch)
    return [order[i:i + window] for i in range(0, FILES, window)]


@pytest.mark.parametrize("window", [1, 3, ALL])
def test_every_record_once_per_epoch(runs, window):
    order = flat(runs[window])
    assert [len(b) for b in runs[window]] == [4] * (2 * N // 4)
    assert sorted(order[:N]) == IDS and sorted(order[N:]) == IDS
    assert order[:N] != order[N:]


@pytest.mark.parametrize("window", [1, 3])
@pytest.mark.parametrize("epoch", [0, 1])
def test_each_window_is_its_files_records_in_one_stretch(data, runs, window, epoch):
    """The epoch's positions, cut where each window's records end, hold exactly the records of that window's K
    files (in the order epoch_file_order gives the windows): windows do not interleave, and within one the
    records are permuted across its files."""
    order = flat(runs[window])[epoch * N:(epoch + 1) * N]
    windows = file_windows(data, window, epoch)
    assert sorted(flat(windows)) == list(range(FILES))
    assert [len(w) for w in windows] == [window] * (FILES // window) + ([FILES % window] if FILES % window else [])
    start, permuted = 0, 0
    for files in windows:
        size = sum(SIZES[f] for f in files)
        stretch = order[start:start + size]
        assert sorted(stretch) == sorted(1000 * f + r for f in files for r in range(SIZES[f]))
        permuted += stretch != sorted(stretch)
        start += size
    # (index_shuffle leaves about 1 in 600 domains of 5 to 13 units in order: a window may come out sorted.)
    assert permuted >= len(windows) - 2
    if window == 3:  # the records of a window's files are mixed, not read file after file
        first = [i // 1000 for i in order[:sum(SIZES[f] for f in windows[0])]]
        runs_of_one_file = 1 + sum(a != b for a, b in zip(first, first[1:]))
        assert runs_of_one_file > len({*first})


def test_epoch_file_order_is_the_order_the_pipeline_reads(data, runs):
    """One file per window: the files in the order their first record comes are epoch_file_order's (the empty
    file left out), a new order each epoch; the windows of 3 files differ between epochs too."""
    order = flat(runs[1])
    for epoch in (0, 1):
        read = list(dict.fromkeys(i // 1000 for i in order[epoch * N:(epoch + 1) * N]))
        assert read == [f for (f,) in file_windows(data, 1, epoch) if SIZES[f]]
    assert file_windows(data, 1, 0) != file_windows(data, 1, 1)
    assert ([sorted(w) for w in file_windows(data, 3, 0)] != [sorted(w) for w in file_windows(data, 3, 1)])
    # Without windows, one window of every file; without a seed, no order known ahead.
    assert global_order.epoch_file_order(load_config(config(data, ALL)), FILES, 1) == list(range(FILES))
    with pytest.raises(ValueError, match="needs a config with a seed"):
        global_order.epoch_file_order(load_config(config(data, 3, seed=None)), FILES, 0)


@pytest.mark.parametrize("window", [FILES, 100])
def test_a_window_of_every_file_is_the_order_without_windows(runs, window):
    assert runs[window] == runs[ALL]
    assert runs[1] != runs[ALL]


@pytest.mark.parametrize("stop", [5, 17])
def test_resume_by_position_continues_exactly(data, tmp_path, stop):
    """Batches of 4: batch 5 is inside epoch 0, batch 17 inside epoch 1 (52 records an epoch)."""
    whole, resumed = resumed_ids(config(data, 3), tmp_path, stop)
    assert resumed == whole
    assert len(whole) == 2 * N // 4


def test_two_pipelines_share_the_order_and_three_go_on_after_a_restart(data, runs):
    """2 pipelines (global batch 12) read the positions g % 2 == k of the unsharded order; after 2 batches each,
    3 pipelines go on from the state one saved: every record of both epochs once, nothing lost or repeated."""
    whole = flat(runs[3])
    fn = build_input_fn(config(data, 3, target_batch_size=12))
    for k in range(2):
        assert flat(batches(fn(context(k, 2)))) == whole[k::2]
    old = [ResumableIterator(fn, context(k, 2)) for k in range(2)]
    consumed = [i for _ in range(2) for iterator in old for i in np.asarray(next(iterator)["id"]).tolist()]
    state = old[1].get_state()
    assert state["position"] == 24
    rest = []
    for k in range(3):
        iterator = ResumableIterator(fn, context(k, 3))
        iterator.set_state(state)
        rest += flat(batches(iterator))
    assert sorted(consumed) == sorted(whole[:24])
    assert sorted(consumed + rest) == sorted(IDS * 2)


CONTINUOUS_RECORDS = (5, 0, 7, 3, 4, 6)  # 20, 0, 28, 12, 16 and 24 frames: 3, 0, 4, 2, 2 and 4 windows of 6


def test_continuous_windows_go_window_of_files_by_window(tmp_path):
    d = index(write_continuous(tmp_path / "continuous", list(CONTINUOUS_RECORDS)))
    cfg = sequence_config(d, "continuous_sequence", [("y", "y")], inputs=["y"], lo=6, hi=6, shuffle=True,
                          shuffle_scope="global", seed=3, epochs=2, target_batch_size=4, shuffle_window_files=2)
    got = []
    for batch in build_input_fn(cfg)():
        for y in np.asarray(batch["y"]):
            f, p = divmod(int(y[0]), 1000)
            np.testing.assert_array_equal(y, 1000 * f + np.arange(p, p + 6))
            got.append((f, p))
    per_file = [4 * n // 6 for n in CONTINUOUS_RECORDS]
    every = sorted((f, 6 * j) for f, n in enumerate(per_file) for j in range(n))
    assert len(got) == 2 * len(every)
    for epoch in (0, 1):
        order = got[epoch * len(every):(epoch + 1) * len(every)]
        assert sorted(order) == every
        files = global_order.epoch_file_order(load_config(cfg), len(per_file), epoch)
        start = 0
        for window in (files[i:i + 2] for i in range(0, len(files), 2)):
            size = sum(per_file[f] for f in window)
            assert sorted(order[start:start + size]) == sorted(w for w in every if w[0] in window)
            start += size


@pytest.mark.parametrize("args, found", [
    (dict(shuffle_scope="buffer"), "found 2 with shuffle_scope buffer: "),
    (dict(shuffle_scope=None), "found 2 with shuffle_scope buffer (the default): "),
])
def test_a_window_without_a_global_shuffle_is_refused(data, args, found):
    cfg = config(data, 2, num_shuffle_buffer_elements=4, num_filenames_shuffle_buffer=2, num_mix_files=1, **args)
    if args["shuffle_scope"] is None:
        del cfg["args"]["shuffle_scope"]
    with pytest.raises(ConfigError) as caught:
        load_config(cfg)
    (problem,) = caught.value.problems
    assert problem.path == "$.args.shuffle_window_files"
    assert problem.message.startswith(found)
    assert "expected shuffle_scope global beside it, or no shuffle_window_files" in problem.message


def test_describe_names_the_window(data):
    assert "cut into windows of 3 files (shuffle_window_files)" in reading_line(load_config(config(data, 3)))
    assert "windows of" not in reading_line(load_config(config(data, ALL)))


@pytest.mark.parametrize("counts, window", [
    ([9, 0, 13, 8, 5, 0, 7], 1), ([9, 0, 13, 8, 5, 0, 7], 3), ([9, 0, 13, 8, 5, 0, 7], 7),
    ([9, 0, 13, 8, 5, 0, 7], 50), ([0, 0, 4], 2), ([0, 0, 0], 2), ([1], 1),
])
def test_windowed_permutation_is_a_bijection_and_one_window_is_record_at(counts, window):
    """permutation.windowed_at over a whole epoch gives every unit once; a window of every file gives record_at's
    order (the order without windows) exactly."""
    n = sum(counts)
    for epoch in (0, 3):
        windows = permutation.file_windows(np.asarray(counts, np.int64), window, (11, 22), tf.constant(epoch, tf.int64))
        got = permutation.windowed_at(tf.range(n, dtype=tf.int64), windows).numpy().tolist()
        assert sorted(got) == list(range(n))
        if window >= len(counts):
            assert got == permutation.record_at(tf.range(n, dtype=tf.int64), n, 22, epoch).numpy().tolist()
