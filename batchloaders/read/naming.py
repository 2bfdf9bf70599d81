"""How parse calls name the records they parse, so that errors say which record of which file.

A record is named ``'path: record N'``, one string per record. For a block of one file's
records (the independent loader's unshuffled fixed-size path), a string per record is a real
share of an epoch of small records (docs/decisions/performance.md); the block is named instead:
every record of it gets the same ``'path: records F..L'``. TensorFlow's parse errors then say the record's place in the block
(``Key: x, Index: j``), our own checks name it exactly (:meth:`BlockNames.at`), and an error that
says neither (a missing feature) is located by ``errors.data_error_from`` reading the block again.
"""
from __future__ import annotations

import dataclasses

import tensorflow as tf


@dataclasses.dataclass(frozen=True)
class BlockNames:
    """The records ``first``, ``first + 1``, ... (``count`` of them) of the data file ``path``."""

    path: tf.Tensor  # scalar string
    first: tf.Tensor  # scalar int64
    count: tf.Tensor  # scalar int32

    def vector(self) -> tf.Tensor:
        """[count] copies of 'path: records F..L': what the parse ops get (a fill, no string per record)."""
        last = self.first + tf.cast(self.count, tf.int64) - 1
        span = tf.strings.join([self.path, ": records ", tf.strings.as_string(self.first), "..",
                                tf.strings.as_string(last)])
        return tf.fill([self.count], span)

    def at(self, j: tf.Tensor) -> tf.Tensor:
        """'path: record N' of the j-th record (what a check's message names)."""
        return tf.strings.join([self.path, ": record ", tf.strings.as_string(self.first + tf.cast(j, tf.int64))])


def record_names(paths, file_index: tf.Tensor, record: tf.Tensor) -> tf.Tensor:
    """'path: record N' of each record: ``paths`` the data files ``file_index`` counts in."""
    names = tf.gather(tf.constant(list(paths)), file_index)
    return tf.strings.join([names, ": record ", tf.strings.as_string(tf.cast(record, tf.int64))])


def vector(names):
    """What a parse op's ``example_names`` takes: a [B] string tensor (or None)."""
    return names.vector() if isinstance(names, BlockNames) else names


def at(names, j: tf.Tensor) -> tf.Tensor:
    """The name of the j-th record; j may be one past the last (a check that found nothing builds its
    message anyway): that gives an empty name (a slice and a join: no copy of the names)."""
    return names.at(j) if isinstance(names, BlockNames) else tf.strings.reduce_join(names[j:j + 1])
