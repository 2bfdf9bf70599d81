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
"""
from __future__ import annotations

from typing import Sequence

import tensorflow as tf

BATCH = 4096  # positions permuted per vectorized call


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
