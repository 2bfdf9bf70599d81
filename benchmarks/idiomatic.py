"""The idiomatic rival: what the TensorFlow performance guide teaches, one per case.

Files interleaved 4 at a time (``num_parallel_calls=AUTOTUNE``, deterministic), each read by a
``TFRecordDataset`` with a 1 MiB buffer; ``batch`` then one vectorized parse per batch (or each
record parsed then ``padded_batch``, whichever ran faster for the case: see each case's comment);
``prefetch(AUTOTUNE)``. Windows are cut per file the natural way: ``parse -> unbatch -> batch(75)``
for continuous windows, ``batch(3) -> parse -> concatenate`` then ``padded_batch`` for discrete
ones. Nothing is taken from our pipeline: no block size, no order.

They do the same work as our configs (the same examples per epoch, batch sizes and padding), in
another order: run.py admits them by the multiset of the epoch's examples (harness.same_work),
not by the in-order digest. Every function returns ``make(files, batch_size)``.
"""
from __future__ import annotations

import tensorflow as tf

import handwritten as hw

AUTOTUNE = tf.data.AUTOTUNE
CYCLE = 4  # files open at once
BUFFER = 1 << 20  # read buffer, bytes


def _reader(filename):
    return tf.data.TFRecordDataset(filename, buffer_size=BUFFER)


def _interleave(files, per_file) -> tf.data.Dataset:
    return tf.data.Dataset.from_tensor_slices(files).interleave(
        per_file, cycle_length=CYCLE, num_parallel_calls=AUTOTUNE, deterministic=True)


def batch_then_parse(parse):
    """Records interleaved, batched, each batch parsed with one vectorized call (``hw.parse_*``)."""
    def make(files, batch_size):
        return (_interleave(files, _reader).batch(batch_size).map(parse, num_parallel_calls=AUTOTUNE)
                .prefetch(AUTOTUNE))
    return make


def parse_then_padded_batch(parse_one, padding_values=None):
    """Records interleaved, each parsed on its own (``parse_one``), then ``padded_batch``."""
    def make(files, batch_size):
        return (_interleave(files, _reader).map(parse_one, num_parallel_calls=AUTOTUNE)
                .padded_batch(batch_size, padding_values=padding_values).prefetch(AUTOTUNE))
    return make


def _speech_one(serialized):
    _, lists = tf.io.parse_single_sequence_example(serialized, sequence_features=hw.SPEECH)
    return lists


def speech_one(serialized):
    lists = _speech_one(serialized)
    return {"frames": lists["frames"]}, {"labels": lists["labels"]}


def speech_slices_one(serialized):
    """The speech_slices config for one record: frames[:-1], its length, labels[1:] (padded with -1)."""
    lists = _speech_one(serialized)
    frames = lists["frames"][:-1]
    return {"frames": frames, "n": tf.shape(frames, tf.int32)[0]}, {"next": lists["labels"][1:]}


SLICES_PADDING = ({"frames": 0.0, "n": 0}, {"next": tf.constant(-1, tf.int64)})


def continuous(size: int = 75):
    """Per file: parse each record, unbatch its frames, ``batch(size, drop_remainder=True)``; files
    interleaved window by window, windows batched."""
    def make(files, batch_size):
        def windows_of(filename):
            return (_reader(filename).map(_speech_one, num_parallel_calls=AUTOTUNE).unbatch()
                    .batch(size, drop_remainder=True))
        return (_interleave(files, windows_of).batch(batch_size)
                .map(lambda w: ({"frames": w["frames"]}, {"labels": w["labels"]}), num_parallel_calls=AUTOTUNE)
                .prefetch(AUTOTUNE))
    return make


def discrete(k: int = 3):
    """Per file: ``batch(k)`` records, parse them with one call and concatenate their frames
    (``hw.frames_of_block``); files interleaved window by window, windows ``padded_batch``."""
    def make(files, batch_size):
        def windows_of(filename):
            return _reader(filename).batch(k, drop_remainder=True).map(hw.frames_of_block,
                                                                        num_parallel_calls=AUTOTUNE)
        return (_interleave(files, windows_of).padded_batch(batch_size)
                .map(lambda w: ({"frames": w["frames"]}, {"labels": w["labels"]}), num_parallel_calls=AUTOTUNE)
                .prefetch(AUTOTUNE))
    return make
