"""TensorFlow's readers of one file, without the function their public classes wrap around them.

``tf.data.TFRecordDataset(name)`` and ``tf.data.FixedLengthRecordDataset(name)`` read their files through
a ``flat_map`` over the names, whose function is traced at every ``input_fn()`` and instantiated at every
file an epoch opens. The pipelines here open each file in a dataset of its own, so they build the reader
op itself: the same records, one dataset op, no function.
"""
from __future__ import annotations

import tensorflow as tf
from tensorflow.python.data.ops import readers


def records(filename: tf.Tensor, compression_type: str | None = None, buffer_size=None) -> tf.data.Dataset:
    """The records of one TFRecord file, as ``tf.data.TFRecordDataset(filename, ...)`` gives them.

    Args:
        filename: the file's path (a scalar string tensor).
        compression_type: ``""``/None, ``"GZIP"`` or ``"ZLIB"``.
        buffer_size: bytes of the read buffer; None: TensorFlow's default.

    Returns:
        A dataset of scalar strings.
    """
    return readers._TFRecordDataset(filename, compression_type, buffer_size)  # noqa: SLF001 - the op, no flat_map


def fixed_length(filename: tf.Tensor, record_bytes, footer_bytes=None, buffer_size=None) -> tf.data.Dataset:
    """The ``record_bytes``-long records of one uncompressed file, as ``tf.data.FixedLengthRecordDataset`` gives them.

    Args:
        filename: the file's path (a scalar string tensor).
        record_bytes: bytes per record.
        footer_bytes: bytes at the file's end that are not read; None: 0.
        buffer_size: bytes of the read buffer; None: TensorFlow's default.

    Returns:
        A dataset of scalar strings.
    """
    return readers._FixedLengthRecordDataset(  # noqa: SLF001 - the op, no flat_map
        filename, record_bytes, footer_bytes=footer_bytes, buffer_size=buffer_size)
