"""An epoch's order of records, drawn from (seed, epoch), computed per position without a list of ids.

* :func:`record_at`: position p of an epoch of n records -> the record id read there, one position or
  a vector of them (``tf.random.experimental.index_shuffle``: a keyed bijection of ``[0, n)``, the one
  tf.data's global shuffle uses; any n from 1 to 2**63 - 1, ids int64).
* :func:`positions`: the positions one pipeline of several reads: pipeline k of m takes p with
  p % m == k, from a global position ``start`` on. The epoch's order is the same for any m, so a job
  that consumed ``start`` positions with n pipelines continues with m, every remaining position once.
* :func:`epoch_order`: both as a tf.data dataset of record ids.
* :func:`file_and_record`: a global record id -> (file, record in file) from per-file record counts
  (empty files allowed).
* :func:`block_counts` and :func:`block_run`: the block variant: each file cut into runs of up to r
  consecutive records, and the blocks of all files permuted instead of the records.
* :func:`file_windows` and :func:`windowed_at`: the windowed variant: the files permuted and cut into
  windows of K consecutive files, an epoch giving all units of window 0 (permuted among themselves),
  then window 1, and so on; with K >= the number of files, the same order as :func:`record_at`.
"""
from __future__ import annotations

import dataclasses
from typing import Sequence

import tensorflow as tf

BATCH = 4096  # positions permuted per vectorized call
# index_shuffle's fixed first word of its 3-word seed: tf.random.experimental.index_shuffle pads a [2] seed
# with it; a [n, 2] seed it pads along the wrong axis, so per-element seeds are padded here (_index_shuffle).
_SEED_PAD = 498247692
_ROUNDS = 4  # as tf.random.experimental.index_shuffle


def _seed(seed, epoch) -> tf.Tensor:
    """index_shuffle's key, shape [2]: another epoch or seed gives another permutation."""
    return tf.stack([tf.cast(seed, tf.int64), tf.cast(epoch, tf.int64)])


def record_at(position, n, seed, epoch) -> tf.Tensor:
    """The record id (int64) at ``position`` (a scalar or a vector, each in ``[0, n)``) of the epoch."""
    position = tf.cast(position, tf.int64)
    return tf.random.experimental.index_shuffle(position, _seed(seed, epoch),
                                                tf.maximum(tf.cast(n, tf.int64) - 1, 0))


def positions(n, *, start=0, pipeline: int = 0, pipelines: int = 1) -> tf.data.Dataset:
    """The positions p of ``[start, n)`` with p % pipelines == pipeline, in order.

    Which pipeline reads a position depends on the position and the number of pipelines only, not
    on ``start``: the shares after a restart are the same whatever was consumed before.
    """
    if not 0 <= pipeline < pipelines:
        raise ValueError(f"pipeline {pipeline} of {pipelines}: expected 0 <= pipeline < pipelines")
    start = tf.cast(start, tf.int64)
    first = start + tf.math.floormod(pipeline - start, pipelines)  # the first p >= start with p % m == k
    return tf.data.Dataset.range(first, tf.cast(n, tf.int64), pipelines)


def epoch_order(n, seed, epoch, *, start=0, pipeline: int = 0, pipelines: int = 1) -> tf.data.Dataset:
    """The record ids one pipeline reads in this epoch (:func:`positions` through :func:`record_at`)."""
    batches = positions(n, start=start, pipeline=pipeline, pipelines=pipelines).batch(BATCH)
    return batches.map(lambda p: record_at(p, n, seed, epoch)).unbatch()


def _ends(counts) -> tf.Tensor:
    return tf.cumsum(tf.cast(counts, tf.int64))


def file_and_record(ids, counts: Sequence[int] | tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """Global record ids (files in order, each file's records in order) -> (file, record in file).

    ``counts``: records per file, zeros allowed; ids must be below their sum.
    """
    ends = _ends(counts)
    ids = tf.cast(ids, tf.int64)
    # The file is the number of files that end at or before the id: empty files end where the one
    # before them does, so an id never lands in one.
    file = tf.searchsorted(ends, tf.reshape(ids, [-1]), side="right", out_type=tf.int64)
    file = tf.reshape(file, tf.shape(ids))
    starts = tf.concat([[0], ends[:-1]], 0)
    return file, ids - tf.gather(starts, file)


def block_counts(counts: Sequence[int] | tf.Tensor, run: int) -> tf.Tensor:
    """Blocks of up to ``run`` consecutive records per file (the last block of a file may be shorter)."""
    counts = tf.cast(counts, tf.int64)
    return (counts + run - 1) // run


def block_run(blocks, counts: Sequence[int] | tf.Tensor, run: int):
    """Global block ids -> (file, first record in file, records in the block)."""
    counts = tf.cast(counts, tf.int64)
    file, block = file_and_record(blocks, block_counts(counts, run))
    first = block * run
    return file, first, tf.minimum(tf.gather(counts, file) - first, run)


@dataclasses.dataclass(frozen=True)
class FileWindows:
    """One epoch's windows of files (:func:`file_windows`), as tensors.

    ``layout`` [F]: the files in the order their units are laid out, window by window, ascending within a
    window; ``layout_counts`` [F]: their unit counts; ``file_starts`` [F]: where each file's units begin in
    the unwindowed layout (files in order); ``ends`` [W]: the units up to the end of each window;
    ``seeds`` [W, 2]: each window's index_shuffle seed.
    """

    layout: tf.Tensor
    layout_counts: tf.Tensor
    file_starts: tf.Tensor
    ends: tf.Tensor
    seeds: tf.Tensor


def file_order(num_files: int, window_files: int, seed, epoch) -> tf.Tensor:
    """The epoch's files [num_files] as their units are laid out: a permutation of the files keyed by
    (``seed``, ``epoch``) cut into windows of ``window_files`` consecutive files (the last may hold fewer),
    window by window, each window's files in ascending order (with one window: 0, 1, ...)."""
    if num_files == 0:
        return tf.zeros([0], tf.int64)
    permuted = record_at(tf.range(num_files, dtype=tf.int64), num_files, seed, epoch)
    window = tf.range(num_files, dtype=tf.int64) // window_files
    return tf.sort(window * num_files + permuted) % num_files


def file_windows(counts, window_files: int, keys: tuple, epoch) -> FileWindows:
    """An epoch's windows of files, from the units per file ``counts`` (a NumPy array: its length fixes the
    windows' number).

    Args:
        counts: units (records or windows of records) per file, zeros allowed.
        window_files: files per window (K >= 1).
        keys: (the files' key, the units' key): the files are permuted with the first; window 0's units with
            the second, as :func:`record_at` permutes all units, the later windows with keys drawn from it.
        epoch: the epoch (a scalar tensor).

    Returns:
        The FileWindows.
    """
    files = len(counts)
    windows = max(1, -(-files // window_files))
    counts = tf.constant(counts, tf.int64)
    layout = file_order(files, window_files, keys[0], epoch)
    layout_counts = tf.gather(counts, layout)
    # The layout holds the files of window w at places [w K, (w + 1) K).
    per_window = tf.math.unsorted_segment_sum(layout_counts, tf.range(files, dtype=tf.int64) // window_files,
                                              windows)
    units_key = tf.cast(keys[1], tf.int64)
    later = tf.random.stateless_uniform([windows - 1], seed=tf.stack([units_key, tf.cast(epoch, tf.int64)]),
                                        minval=None, maxval=None, dtype=tf.int64)
    window_keys = tf.concat([[units_key], later], 0)
    seeds = tf.stack([window_keys, tf.fill([windows], tf.cast(epoch, tf.int64))], 1)
    return FileWindows(layout, layout_counts, tf.cumsum(counts, exclusive=True), tf.cumsum(per_window), seeds)


def windowed_at(position, windows: FileWindows) -> tf.Tensor:
    """The unit ids (int64; files in order, each file's units in order) at ``position`` (a vector) of an epoch
    in windows of files: the window the position falls in, its place there permuted with the window's key,
    the unit there in the window's layout."""
    position = tf.cast(position, tf.int64)
    # Windows without units end where the one before them does: no position lands in one.
    window = tf.searchsorted(windows.ends, position, side="right", out_type=tf.int64)
    end = tf.gather(windows.ends, window)
    start = tf.concat([[0], windows.ends[:-1]], 0)
    size = end - tf.gather(start, window)
    permuted = _index_shuffle(position - (end - size), tf.gather(windows.seeds, window), size - 1)
    slot, unit = file_and_record(end - size + permuted, windows.layout_counts)
    return tf.gather(windows.file_starts, tf.gather(windows.layout, slot)) + unit


def _index_shuffle(index, seeds, max_index) -> tf.Tensor:
    """tf.random.experimental.index_shuffle with one seed [2] per element (``seeds`` [n, 2]): element i the same
    as ``index_shuffle(index[i], seeds[i], max_index[i])``."""
    padded = tf.concat([tf.fill([tf.shape(seeds)[0], 1], tf.constant(_SEED_PAD, seeds.dtype)), seeds], 1)
    return tf.raw_ops.RandomIndexShuffle(index=index, seed=padded, max_index=max_index, rounds=_ROUNDS)
