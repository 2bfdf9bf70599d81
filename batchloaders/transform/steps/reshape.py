"""``reshape``: give each example's tensor a new shape holding the same entries in the same order.

``shape`` never includes the batch axis. Its sizes are at least 1, except one that may be
-1: that size is whatever makes the number of entries match (it must come out whole).
A fixed input shape must hold exactly as many entries as the new shape, as
``numpy.reshape`` requires.

A variable-length first axis (shape ``[?, d1, ...]``) stays variable: the -1 must be on
axis 0 and the entries per step of the new shape (the product of its other sizes) must
divide the entries per step of the input, so that whole input steps split into a whole
number of new steps, e.g. ``[?, 40]`` to ``[-1, 4, 10]`` or ``[-1, 20]`` (an example of
length n gets length 2n). Merging several steps into one would depend on each example's
length and is refused (frame_stack stacks consecutive steps).
"""
from __future__ import annotations

import math

from batchloaders.transform.extend import register_step
from batchloaders.transform.registry import CheckContext
from batchloaders.core.model import TensorInfo, format_shape


def resolve(new: list, info: TensorInfo) -> tuple[tuple[int | None, ...], int | None] | str:
    """(output shape, steps of output per step of input or None) for ``new``, or why it cannot be."""
    zero = [axis for axis, d in enumerate(new) if d == 0 or d < -1]
    if zero:
        return (f"found size {new[zero[0]]} on axis {zero[0]} of {format_shape(new)}: expected sizes >= 1, or -1 on one axis "
                "for the size that makes the number of entries match")
    unknown = [axis for axis, d in enumerate(new) if d == -1]
    if len(unknown) > 1:
        return f"found -1 on axes {unknown[0]} and {unknown[1]} of {format_shape(new)}: expected at most one -1"
    known = math.prod(d for d in new if d != -1)
    if info.shape[:1] == (None,):
        inner = math.prod(info.shape[1:])
        if unknown != [0] or inner % known:
            return (f"found shape {format_shape(new)} for a tensor of shape {format_shape(info.shape)}, whose first axis varies in "
                    f"length: expected -1 on axis 0 and sizes on the other axes whose product divides {inner} (the "
                    f"entries of one step), e.g. {format_shape([-1] + list(info.shape[1:]))}, so that each step splits into "
                    "whole new steps; steps of a variable-length axis cannot be merged (frame_stack stacks "
                    "consecutive steps)")
        return (None,) + tuple(new[1:]), inner // known
    total = math.prod(info.shape)
    if unknown:
        if total % known:
            return (f"found shape {format_shape(new)} ({known} entries times the -1 axis) for a tensor of shape "
                    f"{format_shape(info.shape)} ({total} entries): expected sizes whose product divides {total}")
        new = [total // known if d == -1 else d for d in new]
    elif known != total:
        return (f"found shape {format_shape(new)} ({known} entries) for a tensor of shape {format_shape(info.shape)} ({total} "
                f"entries): expected a shape of {total} entries")
    return tuple(new), None


def _infer(args: dict, info: TensorInfo, ctx: CheckContext) -> TensorInfo | None:
    out = resolve(list(args["shape"]), info)
    if isinstance(out, str):
        ctx.report(("args", "shape"), out)
        return None
    return TensorInfo(info.dtype, out[0])


def _build(args: dict, values, lengths, info: TensorInfo, info_out: TensorInfo | None = None):
    """Reshape a batch ``values`` [B, ...]; ``lengths`` [B] gives the valid length of a variable first axis."""
    import tensorflow as tf

    out = resolve(list(args["shape"]), info)
    if isinstance(out, str):  # the config checker refuses these first
        raise ValueError(out)
    shape, per_step = out
    batch = tf.shape(values, out_type=tf.int64)[:1]
    if per_step is None:
        return tf.reshape(values, tf.concat([batch, tf.constant(shape, tf.int64)], 0)), None
    # Each step's entries become per_step whole new steps in place, so the valid
    # steps of an example stay in front of its padding.
    steps = tf.shape(values, out_type=tf.int64)[1:2] * per_step
    values = tf.reshape(values, tf.concat([batch, steps, tf.constant(shape[1:], tf.int64)], 0))
    return values, tf.cast(lengths, tf.int64) * per_step


SCHEMA = {
    "title": "reshape step arguments",
    "description": "Give each example's tensor a new shape with the same entries in the same order.",
    "type": "object",
    "additionalProperties": False,
    "required": ["shape"],
    "properties": {
        "shape": {
            "title": "new shape",
            "description": "Sizes without the batch axis, each >= 1 except at most one -1 (the size that makes the number of entries match). When the first axis varies in length, the -1 must be on axis 0 and the other sizes' product must divide the entries of one step.",
            "type": "array",
            "maxItems": 32,
            "items": {
                "type": "integer",
                "minimum": -1,
                "maximum": 2147483647
            },
            "examples": [[-1, 4, 10], [8, 5]]
        }
    }
}


register_step("reshape", schema=SCHEMA, infer=_infer, batched=True)(_build)
