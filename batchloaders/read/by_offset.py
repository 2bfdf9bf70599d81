"""Reading records of uncompressed TFRecord files at byte offsets, in tf.data (no Python per record).

The input is a dataset of places to read, in the order wanted:

* :func:`read_records`: ``(file, offset, length)`` per record: the byte offset of its frame and the
  length of its payload, as a record index gives them;
* :func:`read_runs`: ``(file, offset, span, count)`` per run of ``count`` consecutive records whose
  frames take ``span`` bytes from ``offset`` (:func:`frame_bytes` of each payload, summed).

``file`` is a path (tf.string) or, with ``files`` given, an index into that list. Each place becomes
one ``TFRecordDatasetV2`` op started at the offset, reading only that many records through a
buffer of exactly their bytes, opened by a deterministic parallel ``interleave``; records come out
in the input's order. The op checks each frame's checksums as a sequential read does.

What goes wrong, as TensorFlow raises it (the message names neither the file nor the record; the
caller knows which places it asked for):

* an offset that is not the start of a frame, or a damaged frame: ``tf.errors.DataLossError``,
  ``corrupted record at N`` where N is the offset, or the offset + 12 when the payload's checksum fails;
* an offset at or past the end of the file (a file shorter than its index says):
  ``tf.errors.FailedPreconditionError``, ``Input dataset was expected to contain 1 element but
  contained only 0 elements`` (the count asked for);
* a missing file: ``tf.errors.NotFoundError`` naming the path.

Compressed files cannot be read this way: an offset into a GZIP or ZLIB stream means nothing
without the stream before it.
"""
from __future__ import annotations

from typing import Sequence

import tensorflow as tf

from batchloaders.read.framing import FRAME_BYTES

RECORD = tf.TensorSpec([], tf.string)
MAX_BUFFER = 4 << 20  # a run's read buffer is its span, up to this
PARALLEL = 2  # places read at once; on 2 cores more buys nothing (docs/decisions/record-index.md)


def frame_bytes(length):
    """Bytes a record of ``length`` payload bytes takes in a file (its frame)."""
    return length + FRAME_BYTES


def _open(path, offset, span, count) -> tf.data.Dataset:
    """The ``count`` records from ``offset`` of ``path``, or an error when the file ends before them.

    Built from the raw op: ``tf.data.TFRecordDataset`` does not take offsets. The op serializes
    without its offsets when tf.data's default rewrites run on it as a top-level dataset; inside
    ``interleave``'s function (always, here) it is built per element and not rewritten.
    """
    variant = tf.raw_ops.TFRecordDatasetV2(
        filenames=tf.reshape(path, [1]), compression_type="",
        buffer_size=tf.minimum(span, MAX_BUFFER), byte_offsets=tf.reshape(offset, [1]))
    records = tf.data.experimental.from_variant(variant, RECORD).take(count)
    return records.apply(tf.data.experimental.assert_cardinality(count))


def _interleave(places, open_place, block: int, parallel: int) -> tf.data.Dataset:
    return places.interleave(open_place, cycle_length=parallel, block_length=block,
                             num_parallel_calls=parallel, deterministic=True)


def _path(paths, file):
    return file if paths is None else tf.gather(paths, file)


def _paths(files: Sequence[str] | None):
    return None if files is None else tf.constant(list(files) or [""], tf.string)


def read_runs(runs: tf.data.Dataset, files: Sequence[str] | None = None, *, max_count: int = 1,
              parallel: int = PARALLEL) -> tf.data.Dataset:
    """The records of each run ``(file, offset, span, count)`` of ``runs``, run after run, in order.

    ``max_count``: the largest ``count`` of a run (runs at a file's end may be shorter); the
    interleave takes up to that many records from a run before the next, so the order is the input's.
    ``parallel``: runs read at once.
    """
    paths = _paths(files)

    def open_run(file, offset, span, count):
        return _open(_path(paths, file), tf.cast(offset, tf.int64), tf.cast(span, tf.int64),
                     tf.cast(count, tf.int64))

    return _interleave(runs, open_run, max_count, parallel)


def read_records(places: tf.data.Dataset, files: Sequence[str] | None = None, *,
                 parallel: int = PARALLEL) -> tf.data.Dataset:
    """The record at each ``(file, offset, length)`` of ``places``, in order (see the module's text)."""
    paths = _paths(files)
    one = tf.constant(1, tf.int64)

    def open_record(file, offset, length):
        return _open(_path(paths, file), tf.cast(offset, tf.int64), frame_bytes(tf.cast(length, tf.int64)), one)

    return _interleave(places, open_record, 1, parallel)
