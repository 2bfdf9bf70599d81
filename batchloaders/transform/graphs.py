"""Functions handed to tf.data are traced as written, without AutoGraph.

None of them branches or loops on a tensor in Python (they say ``tf.cond`` and
``tf.where`` where they mean it), so converting them only adds start-up time
to every ``input_fn()`` call (docs/decisions/performance.md).
"""
from __future__ import annotations

import tensorflow as tf

as_written = tf.autograph.experimental.do_not_convert


def masked(tensor: tf.Tensor, mask: tf.Tensor) -> tf.Tensor:
    """``tf.boolean_mask(tensor, mask)`` (a mask over the leading axes) in two graph nodes instead of about 27.

    Every node of a tf.data function is paid again at each ``input_fn()`` and
    iterator start, in tracing and then instantiating (docs/decisions/performance.md).
    """
    return tf.gather_nd(tensor, tf.where(mask))


def growing(tensor: tf.Tensor) -> tf.Tensor:
    """``tensor`` as the start of a ``Dataset.scan`` state that grows: its leading axis statically
    unknown, so that scan traces its step once, not a second time with the shape relaxed (a large
    step's tracing is paid at every ``input_fn()``; docs/decisions/performance.md). Only inside a
    traced function (a scan built in an interleave's function): an eager tensor's shape is always known."""
    return tf.compat.v1.placeholder_with_default(tensor, [None] + tensor.shape[1:].as_list())


# What a traced function holds that computes nothing: its arguments, its results, and names for them.
_MOVES = frozenset({"Placeholder", "Identity", "IdentityN", "NoOp"})


def mapped(dataset: tf.data.Dataset, fn, **parallel) -> tf.data.Dataset:
    """``dataset.map(fn, **parallel)``, or a plain ``map`` where ``fn`` computes nothing.

    A function that only renames and regroups its element's tensors (the model's (features, targets) of an
    element already made) gains nothing from parallel calls, and each hand-over to another thread costs
    more than the call (~5% of a window stream's batches/s, docs/decisions/performance.md).

    Args:
        dataset: the elements.
        fn: the function, as ``Dataset.map`` takes it.
        **parallel: ``Dataset.map``'s ``num_parallel_calls`` and ``deterministic``.

    Returns:
        The mapped dataset: the same elements either way.
    """
    out = dataset.map(fn, **parallel)
    graph = out._map_func.function.graph  # (tf.data's traced function: a private attribute, stable since TF 2.0)
    if parallel and all(op.type in _MOVES for op in graph.get_operations()):
        return dataset.map(fn)
    return out
