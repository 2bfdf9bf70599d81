"""Functions handed to tf.data are traced as written, without AutoGraph.

None of them branches or loops on a tensor in Python (they say ``tf.cond`` and
``tf.where`` where they mean it), so converting them only costs time: about
30 ms of every ``input_fn()`` call for the independent loader's 12 functions.
"""
from __future__ import annotations

import tensorflow as tf

as_written = tf.autograph.experimental.do_not_convert


def masked(tensor: tf.Tensor, mask: tf.Tensor) -> tf.Tensor:
    """``tf.boolean_mask(tensor, mask)`` (a mask over the leading axes) in two graph nodes instead of about 27.

    Every node of a tf.data function is paid again at each ``input_fn()`` and
    iterator start (tracing, then instantiating: about 0.3 ms a node here).
    """
    return tf.gather_nd(tensor, tf.where(mask))


def growing(tensor: tf.Tensor) -> tf.Tensor:
    """``tensor`` as the start of a ``Dataset.scan`` state that grows: its leading axis statically
    unknown, so that scan traces its step once, not a second time with the shape relaxed (~25 ms of
    every ``input_fn()`` for a large step). Only inside a traced function (a scan built in an
    interleave's function): an eager tensor's shape is always known."""
    return tf.compat.v1.placeholder_with_default(tensor, [None] + tensor.shape[1:].as_list())
