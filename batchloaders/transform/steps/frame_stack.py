"""``frame_stack``: give every step of the first (time) axis its neighbours as context.

For an example x of shape [T, D1, D2, ...] (T fixed or variable), output step t holds
the k = left + 1 + right frames x[t - left], ..., x[t], ..., x[t + right], in that
order. A frame outside the example's own steps (before 0, or at or past its own length
T, never the batch's longest) is all zeros ("" for strings, false for bools), so no
padding of the batch leaks in. With ``flatten`` (the default) the frames are
concatenated along their first axis, frame-major: [T, k*D1, D2, ...], so for [T, D]
input the row is [x[t-left, 0..D-1], ..., x[t+right, 0..D-1]] (the usual stacked speech
features). Without it they are stacked on a new axis: [T, k, D1, D2, ...]. A [T] input
gives [T, k] either way. T and the lengths are unchanged; a scalar is an error, as are
left and right both 0 (each frame alone: nothing to stack).
"""
from __future__ import annotations

from batchloaders.transform.extend import register_step
from batchloaders.transform.registry import CheckContext
from batchloaders.core.values import default_value
from batchloaders.core.model import TensorInfo

_MAX = 2**31 - 1  # TensorFlow's int32 shapes


def _out_shape(k: int, shape: tuple, flatten: bool) -> tuple:
    if len(shape) == 1:
        return shape + (k,)
    if flatten:
        return (shape[0], k * shape[1]) + shape[2:]
    return (shape[0], k) + shape[1:]


def _infer(args: dict, info: TensorInfo, ctx: CheckContext) -> TensorInfo | None:
    left, right, flatten = args.get("left", 0), args.get("right", 0), args.get("flatten", True)
    if info.rank == 0:
        ctx.report(("tensor",), f"found a scalar (shape []) of dtype {info.dtype}: expected a tensor with at least "
                                "one axis, its first axis being time ([T] or [T, D, ...])")
        return None
    if left == 0 and right == 0:
        ctx.report(("args",), "found left 0 and right 0: expected left > 0 or right > 0 (the number of frames "
                              "before and after each step to stack with it)")
        return None
    k = left + 1 + right
    shape = _out_shape(k, info.shape, flatten)
    if shape[1] > _MAX:
        ctx.report(("args",), f"found left {left} and right {right}: {k} frames of shape {list(info.shape[1:])} "
                              f"make an axis of {shape[1]}: expected at most {_MAX}")
        return None
    return TensorInfo(info.dtype, shape)


def _build(args: dict, values, lengths, info: TensorInfo, info_out: TensorInfo | None = None):
    """Stack each step of a batch ``values`` [B, T, ...] with its left/right neighbours, per example."""
    import tensorflow as tf

    left, right, flatten = args.get("left", 0), args.get("right", 0), args.get("flatten", True)
    k = left + 1 + right
    width = tf.shape(values, out_type=tf.int64)[1]
    valid_len = width if lengths is None else tf.cast(lengths, tf.int64)[:, None, None]
    # positions[t, j] = t - left + j: the input step that output step t takes as its j-th frame.
    positions = tf.range(width)[:, None] + tf.range(-left, right + 1, dtype=tf.int64)[None, :]  # [T, k]
    inside = (positions >= 0) & (positions < valid_len)  # [T, k], or [B, T, k] per example
    inside = tf.broadcast_to(inside, tf.stack([tf.shape(values, out_type=tf.int64)[0], width, k]))
    # Clipped indices read some real step; `inside` then replaces what is not the example's own.
    frames = tf.gather(values, tf.clip_by_value(positions, 0, tf.maximum(width - 1, 0)), axis=1)  # [B, T, k, ...]
    inside = tf.reshape(inside, tf.concat([tf.shape(inside), tf.ones([info.rank - 1], tf.int32)], 0))
    frames = tf.where(inside, frames, tf.constant(default_value(info.dtype), values.dtype))
    if flatten and info.rank >= 2:
        rest = list(info.shape[1:])
        shape = tf.concat([tf.shape(frames)[:2], [k * rest[0]] + rest[1:]], 0)
        frames = tf.reshape(frames, shape)  # frame-major: frame t-left's D1 entries first
    frames.set_shape([None, info.shape[0]] + list(_out_shape(k, info.shape, flatten)[1:]))
    return frames, lengths


SCHEMA = {
    "title": "frame_stack step arguments",
    "description": "Stack each step of the first (time) axis with the left steps before it and the right steps after it; steps outside the example are zeros.",
    "type": "object",
    "additionalProperties": False,
    "required": [],
    "properties": {
        "left": {
            "description": "Number of earlier frames stacked before each frame. Default 0; left and right cannot both be 0.",
            "type": "integer",
            "minimum": 0,
            "maximum": 2147483647,
            "default": 0
        },
        "right": {
            "description": "Number of later frames stacked after each frame. Default 0; left and right cannot both be 0.",
            "type": "integer",
            "minimum": 0,
            "maximum": 2147483647,
            "default": 0
        },
        "flatten": {
            "description": "true (default): concatenate the frames along their first axis, frame-major ([T, D] becomes [T, (left+1+right)*D]); false: stack them on a new axis ([T, left+1+right, D]).",
            "type": "boolean",
            "default": True
        }
    }
}


register_step("frame_stack", schema=SCHEMA, infer=_infer, batched=True)(_build)
