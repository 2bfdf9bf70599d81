"""Functions handed to tf.data are traced as written, without AutoGraph.

None of them branches or loops on a tensor in Python (they say ``tf.cond`` and
``tf.where`` where they mean it), so converting them only costs time: about
30 ms of every ``input_fn()`` call for the independent loader's 12 functions.
"""
from __future__ import annotations

import contextlib

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


@contextlib.contextmanager
def functional_conds():
    """``tf.cond``s built inside stay functional ``If`` ops, not lowered into the enclosing graph.

    A lowered conditional's branches are part of its function: instantiated and optimized with it at
    every iterator start, even a branch that runs once per file, at its end (the end-of-file check's
    re-reading and reporting: about 25 ms of the first batch of every ``input_fn()`` here). A
    functional one instantiates its branches when it first runs. Same results either way. TensorFlow
    has no public switch for this, so the private one is set while tracing and left alone if absent.
    """
    try:
        from tensorflow.python.ops import control_flow_util_v2 as flow
    except ImportError:  # pragma: no cover - another TensorFlow: lowered conds, as before
        yield
        return
    saved = getattr(flow, "_DISABLE_LOWER_USING_SWITCH_MERGE", None)
    if saved is None:  # pragma: no cover
        yield
        return
    flow._DISABLE_LOWER_USING_SWITCH_MERGE = True
    try:
        yield
    finally:
        flow._DISABLE_LOWER_USING_SWITCH_MERGE = saved
