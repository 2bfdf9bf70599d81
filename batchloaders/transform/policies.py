"""Batching policies other than padding: what a tensor's batch becomes when its padding entry says
``batching: dense | ragged | sparse | <registered batcher>`` (``padded``, the default, is
:func:`batching.finalize`'s own).

Every policy starts from the batch form all loaders produce (values [B, ...] whose
entries past each example's length are padding, plus the lengths) and never lets that
padding into what the model receives: a ragged row holds exactly its example, a sparse
batch holds exactly the examples' entries (zeros included) and a batcher sees the examples
as a ragged tensor.
"""
from __future__ import annotations

import tensorflow as tf

from batchloaders.transform.extend import called
from batchloaders.transform.registry import BATCHERS


def ragged(values, lengths):
    """[B, (length), ...]: ragged along the first example axis (uniform rows when it is fixed)."""
    if lengths is None:
        return tf.RaggedTensor.from_tensor(values)
    return tf.RaggedTensor.from_tensor(values, lengths=tf.cast(lengths, tf.int64))


def sparse(values, lengths):
    """A SparseTensor of every entry within the examples' lengths; dense shape: the batch maximum."""
    if lengths is None:
        mask = tf.ones_like(values, tf.bool)
    else:
        lengths = tf.cast(lengths, tf.int64)
        width = tf.reduce_max(tf.concat([lengths, [0]], 0))
        values = values[:, :width]
        mask = tf.sequence_mask(lengths, width)
        rank = values.shape.rank
        mask = tf.reshape(mask, tf.concat([tf.shape(mask), tf.ones([rank - 2], tf.int32)], 0))
        mask = tf.broadcast_to(mask, tf.shape(values))
    indices = tf.where(mask)
    return tf.SparseTensor(indices, tf.gather_nd(values, indices), tf.shape(values, out_type=tf.int64))


def registered(spec, values, lengths, source: str):
    """The output of the batcher the padding entry names, checked to be TensorFlow values (extend.called)."""
    kind = BATCHERS.get(spec.batching)
    return called(kind, "batcher", source, spec.json_path,
                  lambda: kind.build(ragged(values, lengths) if lengths is not None else values, **spec.batching_args))


def batch(spec, values, lengths, source: str):
    if spec.batching == "ragged":
        return ragged(values, lengths)
    if spec.batching == "sparse":
        return sparse(values, lengths)
    return registered(spec, values, lengths, source)
