"""``slice``: take a pythonic multidimensional slice of one tensor, e.g. ``[3,:,4:,:-2,1:4]``.

The slice never includes the batch axis. Only integers (possibly negative)
and colons are accepted, with steps of either sign but not zero, as in Python:
the string is parsed here, never evaluated. A variable-length first axis is
sliced per example, exactly as slicing each example before batching would.
"""
from __future__ import annotations

import re

from batchloaders.transform.extend import register_step
from batchloaders.transform.registry import CheckContext
from batchloaders.core.model import TensorInfo, format_shape

_INT = r"[+-]?\d+"
# Every integer fits TensorFlow's int32 indices, and its sum with a length fits int64.
_MAX = 2**31 - 1
_PART = re.compile(rf"^\s*(?:(?P<index>{_INT})|(?P<start>{_INT})?\s*:\s*(?P<stop>{_INT})?\s*(?::\s*(?P<step>{_INT})?)?)\s*$")


class SliceSyntaxError(ValueError):
    pass


def _short(text: str, limit: int = 40) -> str:
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def _int(token: str, text: str) -> int:
    # Count digits before int(): int() of a huge string is slow or raises its own ValueError.
    digits = token.lstrip("+-").lstrip("0")
    if len(digits) > len(str(_MAX)) or int(digits or "0") > _MAX:
        raise SliceSyntaxError(f"found the integer {_short(token)} in {_short(text)!r}: expected integers "
                               f"from -{_MAX} to {_MAX} (2**31 - 1)")
    value = int(digits or "0")  # never int(token): leading zeros alone can pass Python's digit limit
    return -value if token.startswith("-") else value


def parse_slice(text: str) -> tuple[int | slice, ...]:
    """'[3,:,-1,1:4:2]' -> (3, slice(None), -1, slice(1, 4, 2)); raises SliceSyntaxError."""
    s = text.strip()
    if not (s.startswith("[") and s.endswith("]")):
        raise SliceSyntaxError(f"found {text!r}: expected a bracketed slice such as '[1:, :-2, 3]'")
    body = s[1:-1]
    if not body.strip():
        raise SliceSyntaxError(f"found {text!r}: expected at least one index or slice inside the brackets")
    parts: list[int | slice] = []
    for raw in body.split(","):
        m = _PART.match(raw)
        if not m:
            raise SliceSyntaxError(f"found {raw.strip()!r} in {text!r}: expected an integer, a negative integer "
                                   "or a colon slice such as '1:-1' (no names, calls or expressions)")
        if m.group("index") is not None:
            parts.append(_int(m.group("index"), text))
            continue
        num = [None if m.group(g) is None else _int(m.group(g), text) for g in ("start", "stop", "step")]
        if num[2] == 0:
            raise SliceSyntaxError(f"found step 0 in {text!r}: slice step cannot be zero; expected a positive "
                                   "or negative step")
        parts.append(slice(*num))
    return tuple(parts)


def _infer(args: dict, info: TensorInfo, ctx: CheckContext) -> TensorInfo | None:
    try:
        parts = parse_slice(args["slice"])
    except SliceSyntaxError as e:
        ctx.report(("args", "slice"), str(e))
        return None
    if len(parts) > info.rank:
        ctx.report(("args", "slice"), f"found {len(parts)} indices in {args['slice']!r} for a tensor of rank "
                                      f"{info.rank} (shape {format_shape(info.shape)}): expected at most {info.rank} "
                                      "(the slice never includes the batch axis)")
        return None
    shape: list[int | None] = []
    for axis, (dim, part) in enumerate(zip(info.shape, parts)):
        if isinstance(part, int):
            if dim is not None and not -dim <= part < dim:
                ctx.report(("args", "slice"), f"index {part} on axis {axis} is out of range for length {dim}: "
                                              f"expected {-dim} <= index < {dim}")
                return None
            continue
        shape.append(None if dim is None else len(range(dim)[part]))
    shape.extend(info.shape[len(parts):])
    return TensorInfo(info.dtype, tuple(shape))


def _build(args: dict, values, lengths, info: TensorInfo, info_out: TensorInfo | None = None):
    """Slice a batch ``values`` [B, ...]; ``lengths`` [B] gives the valid length of a variable first axis."""
    import tensorflow as tf

    parts = parse_slice(args["slice"])
    if lengths is None or info.shape[0] is not None:
        return values[(slice(None),) + parts], lengths
    first, rest = parts[0], parts[1:]
    lengths = tf.cast(lengths, tf.int64)
    if isinstance(first, int):
        index = tf.fill(tf.shape(lengths), tf.constant(first, tf.int64))
        if first < 0:
            index += lengths
        check = tf.debugging.assert_less(
            index, lengths, message=f"slice {args['slice']}: index {first} is out of range for an example")
        check2 = tf.debugging.assert_non_negative(
            index, message=f"slice {args['slice']}: index {first} is out of range for an example")
        with tf.control_dependencies([check, check2]):
            values = tf.gather(values, index, axis=1, batch_dims=1)
        return values[(slice(None),) + rest], None
    step = first.step or 1
    if step > 0:
        def bound(v, default):
            if v is None:
                return default
            if v < 0:
                return tf.clip_by_value(lengths + v, 0, lengths)
            return tf.minimum(tf.constant(v, tf.int64), lengths)

        start = bound(first.start, tf.zeros_like(lengths))
        stop = bound(first.stop, lengths)
        new_len = tf.maximum((stop - start + step - 1) // step, 0)
    else:
        start, new_len = _backward(first, lengths)
    width = tf.reduce_max(tf.concat([new_len, [0]], 0))
    if step > 0 and (first.start is None or first.start >= 0):
        # Every example starts at the same step: one strided slice, no gather. Steps
        # past an example's new length are padding, which finalize overwrites.
        begin = first.start or 0
        values = values[:, begin:begin + width * step:step]
        return values[(slice(None), slice(None)) + rest], new_len
    # Negative starts or steps begin at a different step in each example: gather.
    positions = start[:, None] + tf.range(width, dtype=tf.int64)[None, :] * step
    positions = tf.clip_by_value(positions, 0, tf.maximum(tf.shape(values, out_type=tf.int64)[1] - 1, 0))
    values = tf.gather(values, positions, axis=1, batch_dims=1)
    return values[(slice(None), slice(None)) + rest], new_len


def _backward(part: slice, lengths):
    """Per example start and new length of a negative-step slice, as ``part.indices(length)`` gives them."""
    import tensorflow as tf

    def bound(v, default):
        # A negative step walks from length - 1 down; -1 means "before the first step".
        if v is None:
            return default
        if v < 0:
            return tf.maximum(lengths + v, -1)
        return tf.minimum(tf.constant(v, tf.int64), lengths - 1)

    start = bound(part.start, lengths - 1)
    stop = bound(part.stop, tf.fill(tf.shape(lengths), tf.constant(-1, tf.int64)))
    return start, tf.maximum((start - stop - part.step - 1) // -part.step, 0)


SCHEMA = {
    "title": "slice step arguments",
    "description": "Keep a multidimensional slice of the tensor.",
    "type": "object",
    "additionalProperties": False,
    "required": ["slice"],
    "properties": {
        "slice": {
            "title": "slice specifier",
            "description": "Python-style slice without the batch axis: integers, negative integers and colons between brackets, separated by commas.",
            "type": "string",
            "pattern": "^\\s*\\[\\s*(?:-?[0-9]+|(?:-?[0-9]+)?\\s*:\\s*(?:-?[0-9]+)?(?:\\s*:\\s*(?:-?[0-9]+)?)?)(?:\\s*,\\s*(?:-?[0-9]+|(?:-?[0-9]+)?\\s*:\\s*(?:-?[0-9]+)?(?:\\s*:\\s*(?:-?[0-9]+)?)?))*\\s*\\]\\s*$",
            "examples": ["[3,:,4:,:-2,1:4]", "[:, ::2]"]
        }
    }
}


register_step("slice", schema=SCHEMA, infer=_infer, batched=True)(_build)
