"""``clip``: limit every entry of a numeric tensor to ``[min, max]``.

Entries below ``min`` become ``min`` and entries above ``max`` become ``max``; give
either bound alone for a one-sided clip, or both with min <= max. The tensor must be
numeric (not string or bool) and each bound must fit its dtype (an integer within the
dtype's range for integer dtypes). NaN entries of a float tensor stay NaN. dtype, shape
and lengths are unchanged.
"""
from __future__ import annotations

from batchloaders.transform.extend import register_step
from batchloaders.transform.registry import CheckContext
from batchloaders.core.values import check_value
from batchloaders.core.model import TensorInfo, format_shape


def _infer(args: dict, info: TensorInfo, ctx: CheckContext) -> TensorInfo | None:
    if info.dtype in ("string", "bool"):
        ctx.report(("tensor",), f"found dtype {info.dtype} (shape {format_shape(info.shape)}): expected a numeric "
                                "dtype (an integer or float dtype) to clip")
        return None
    bounds = [k for k in ("min", "max") if k in args]
    if not bounds:
        ctx.report(("args",), "found neither min nor max: expected min, max or both")
        return None
    ok = True
    for key in bounds:
        why = check_value(args[key], info.dtype)
        if why:
            ctx.report(("args", key), why)
            ok = False
    if ok and len(bounds) == 2 and args["min"] > args["max"]:
        ctx.report(("args", "max"), f"found min {args['min']!r} > max {args['max']!r}: expected min <= max")
        ok = False
    return info if ok else None


def _build(args: dict, values, lengths, info: TensorInfo, info_out: TensorInfo | None = None):
    """Clip a batch ``values`` [B, ...]; entries are independent, so ``lengths`` pass through."""
    import tensorflow as tf

    if "min" in args:
        values = tf.maximum(values, tf.constant(args["min"], values.dtype))
    if "max" in args:
        values = tf.minimum(values, tf.constant(args["max"], values.dtype))
    return values, lengths


SCHEMA = {
    "title": "clip step arguments",
    "description": "Limit every entry of a numeric tensor to [min, max]; either bound may be left out.",
    "type": "object",
    "additionalProperties": False,
    "required": [],
    "properties": {
        "min": {
            "description": "Entries below it become it; a value of the tensor's dtype (an integer for integer dtypes). At most max.",
            "type": "number"
        },
        "max": {
            "description": "Entries above it become it; a value of the tensor's dtype (an integer for integer dtypes). At least min.",
            "type": "number"
        }
    }
}


register_step("clip", schema=SCHEMA, infer=_infer, batched=True)(_build)
