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


def error_if(condition: tf.Tensor, message) -> tf.Tensor:
    """A bool tensor to depend on: True, or the error ``message()`` (a string tensor) when ``condition`` holds.

    The message is built in a one-element dataset's function, which TensorFlow instantiates (and
    optimizes) when it first runs, that is, when the data is wrong. A conditional branch is
    instantiated with every iterator instead: a message of ~35 graph nodes cost ~5 ms of each
    ``input_fn()``'s time to its first batch, for an error that almost never happens.
    Only for what runs when data is wrong: work every run does (a file's end, integrity.py) would
    then be instantiated mid-run, and Keras fit under MirroredStrategy segfaulted in 2 of 20 runs
    with the file-end work made so (a crash in TensorFlow's MultiDeviceIterator background thread).
    """
    def fail(_):
        with tf.control_dependencies([tf.debugging.Assert(False, [message()], summarize=1)]):
            return tf.constant(False)
    return tf.cond(condition, lambda: tf.data.Dataset.from_tensors(0).map(as_written(fail)).get_single_element(),
                   lambda: tf.constant(True))
