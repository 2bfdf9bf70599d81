"""``pad_to``: pad or cut one axis of every example to exactly ``size`` steps.

An axis shorter than ``size`` gets ``value`` appended after its steps (default 0,
"" for strings, false for bools; it must fit the tensor's dtype); a longer one
keeps its first ``size`` steps. ``axis`` counts the example's axes (the batch axis
is never one of them) and may be negative, as in Python. On a variable-length
first axis each example is padded after its own length, never after the batch's
longest example, so no padding of the batch shows through: an example of length
3 padded to 5 holds its 3 steps then 2 ``value``s. The axis then has the fixed
length ``size`` (lengths are no longer tracked). An axis out of range for the
tensor's rank (any axis of a scalar) and a value the dtype cannot hold are
ConfigErrors when the config is checked.
"""
from __future__ import annotations

from batchloaders.transform.extend import register_step
from batchloaders.transform.registry import CheckContext
from batchloaders.core.values import check_value, default_value
from batchloaders.core.model import TensorInfo, format_shape


def normalize_axis(axis: int, info: TensorInfo, ctx: CheckContext, step: str) -> int | None:
    """``axis`` as a non-negative example axis, or None after reporting why it is out of range."""
    rank = info.rank
    if not -rank <= axis < rank:
        where = f"{-rank} <= axis < {rank}" if rank else "no axis at all (a scalar has none to work on)"
        ctx.report(("args", "axis"), f"found axis {axis} for a tensor of rank {rank} (shape {format_shape(info.shape)}): "
                                     f"expected {where}; {step} never counts the batch axis")
        return None
    return axis % rank


def _infer(args: dict, info: TensorInfo, ctx: CheckContext) -> TensorInfo | None:
    axis = normalize_axis(args.get("axis", 0), info, ctx, "pad_to")
    ok = axis is not None
    if "value" in args:
        why = check_value(args["value"], info.dtype)
        if why:
            ctx.report(("args", "value"), f"{why} (the tensor's dtype)")
            ok = False
    if not ok:
        return None
    shape = list(info.shape)
    shape[axis] = args["size"]
    return TensorInfo(info.dtype, tuple(shape))


def _build(args: dict, values, lengths, info: TensorInfo, info_out: TensorInfo | None = None):
    """Pad or cut axis ``axis`` of a batch ``values`` [B, ...] to ``size``; per example on a variable axis 0."""
    import tensorflow as tf

    size, axis = args["size"], args.get("axis", 0) % info.rank
    fill = tf.constant(args.get("value", default_value(info.dtype)), values.dtype)
    batch_axis = axis + 1
    if axis == 0 and info.shape[0] is None:
        have = tf.shape(values, out_type=tf.int64)[1]
        lengths = tf.fill(tf.shape(values)[:1], have) if lengths is None else tf.cast(lengths, tf.int64)
        # Make the padded batch at least ``size`` long, cut it to ``size``, then overwrite every
        # step at or past the example's own length: the batch's padding is garbage.
        paddings = [[0, 0], [0, tf.maximum(size - have, 0)]] + [[0, 0]] * (info.rank - 1)
        values = tf.pad(values, paddings, constant_values=fill)[:, :size]
        mask = tf.sequence_mask(lengths, size)
        mask = tf.reshape(mask, tf.concat([tf.shape(mask), tf.ones([info.rank - 1], tf.int32)], 0))
        values = tf.where(mask, values, fill)
        values.set_shape([None, size] + list(info.shape[1:]))  # padded to >= size, then cut to size
        return values, None
    have = info.shape[axis]  # fixed: every axis but a variable first one is
    cut = [slice(None)] * (info.rank + 1)
    cut[batch_axis] = slice(0, size)
    values = values[tuple(cut)]
    if have < size:
        paddings = [[0, 0]] * (info.rank + 1)
        paddings[batch_axis] = [0, size - have]
        values = tf.pad(values, paddings, constant_values=fill)
    return values, lengths


SCHEMA = {
    "title": "pad_to step arguments",
    "description": "Pad (with value) or cut one axis of every example to exactly size steps.",
    "type": "object",
    "additionalProperties": False,
    "required": ["size"],
    "properties": {
        "size": {
            "description": "The axis's length afterwards: shorter examples are padded after their last step, longer ones keep their first size steps.",
            "type": "integer",
            "minimum": 1,
            "maximum": 2147483647
        },
        "axis": {
            "description": "The axis to pad or cut, counted without the batch axis; negative counts from the last axis. Default 0.",
            "type": "integer",
            "minimum": -254,
            "maximum": 253,
            "default": 0
        },
        "value": {
            "description": "The fill value, of the tensor's dtype. Defaults to 0, the empty string for strings, false for bools.",
            "type": ["string", "number", "boolean"]
        }
    }
}


register_step("pad_to", schema=SCHEMA, infer=_infer, batched=True)(_build)
