"""Running a function over each example of a batch with ``tf.map_fn``, safely when its trace fails.

In graph mode ``tf.map_fn`` sets a caching device on the variable scope it finds and unsets it
only when the function traces without raising. That scope object is shared with the eager
context, so one failed trace (a step returning the wrong shape, which the config check reports
as a ``ContractError``) would leave every later ``tf.distribute`` strategy scope in the process
failing with "Caching devices is not yet supported when eager execution is enabled". The helper
puts the scope back as it found it.
"""
from __future__ import annotations

from typing import Callable


def map_examples(fn: Callable, elems, signature):
    """``tf.map_fn(fn, elems, fn_output_signature=signature)``, leaving the variable scope as found.

    Args:
        fn: The function of one example (the elements' structure, without the batch axis).
        elems: A tensor, ragged tensor or structure of them, batched on their first axis.
        signature: ``fn``'s output signature, as ``tf.map_fn``'s ``fn_output_signature``.

    Returns:
        The stacked results of ``fn``, as ``tf.map_fn`` returns them.

    Raises:
        Whatever ``fn`` raises while traced, after the scope's caching device is restored.
    """
    import tensorflow as tf

    scope = tf.compat.v1.get_variable_scope()
    before = scope.caching_device
    try:
        return tf.map_fn(fn, elems, fn_output_signature=signature)
    except BaseException:
        if scope.caching_device is not before and not tf.executing_eagerly():
            scope.set_caching_device(before)
        raise
