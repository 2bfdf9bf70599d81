"""``const``: a tensor filled with one value, its shape and dtype given or copied from a primary."""
from __future__ import annotations

from batchloaders.errors import suggest
from batchloaders.transform.extend import register_secondary
from batchloaders.transform.registry import CheckContext
from batchloaders.core.model import DTYPES, TensorInfo
from batchloaders.core.values import check_value, default_value  # noqa: F401 (also imported from here)


def _infer(args: dict, ctx: CheckContext) -> TensorInfo | None:
    shape, dtype = args["shape"], args["dtype"]
    ok = True
    if isinstance(shape, str):
        if shape not in ctx.primaries:
            ctx.report(("args", "shape"), f"found {shape!r}: expected a list of integers or the to_name of a "
                                          f"primary feature{suggest(shape, ctx.primaries)}")
            ok = False
        else:
            shape = ctx.tensors[shape].shape
    if dtype not in DTYPES:
        if dtype in ctx.primaries:
            dtype = ctx.tensors[dtype].dtype
        else:
            ctx.report(("args", "dtype"), f"found {dtype!r}: expected a dtype ({', '.join(DTYPES)}) or the "
                                          f"to_name of a primary feature{suggest(dtype, list(DTYPES) + list(ctx.primaries))}")
            ok = False
    if not ok:
        return None
    if "value" in args:
        why = check_value(args["value"], dtype)
        if why:
            ctx.report(("args", "value"), why)
            return None
    return TensorInfo(dtype, tuple(shape))


def _build(args: dict, batch, info: TensorInfo):
    import tensorflow as tf

    value = args.get("value", default_value(info.dtype))
    shape = args["shape"]
    lengths = None
    if isinstance(shape, str):  # copy the primary's shape as it is in this batch, variable axis included
        dims = tf.shape(batch.values[shape])[1:]
        lengths = batch.lengths.get(shape)
    else:
        dims = tf.constant(shape, tf.int32)
    full = tf.concat([[batch.size], tf.cast(dims, tf.int32)], 0)
    return tf.fill(full, tf.constant(value, dtype=tf.dtypes.as_dtype(info.dtype))), lengths


SCHEMA = {
    "title": "const secondary feature arguments",
    "description": "A tensor with every entry set to one value.",
    "type": "object",
    "additionalProperties": False,
    "required": ["shape", "dtype"],
    "properties": {
        "shape": {
            "description": "Shape without the batch axis, or the to_name of a primary feature whose shape to copy. Each axis at most 2147483647, at most 32 axes.",
            "type": ["array", "string"],
            "minLength": 1,
            "maxItems": 32,
            "items": {
                "type": "integer",
                "minimum": 0,
                "maximum": 2147483647
            }
        },
        "dtype": {
            "description": "A TensorFlow dtype name, or the to_name of a primary feature whose dtype to copy.",
            "type": "string",
            "minLength": 1
        },
        "value": {
            "description": "The fill value, of the tensor's dtype. Defaults to 0, or the empty string for strings.",
            "type": ["string", "number", "boolean"]
        }
    }
}


register_secondary("const", schema=SCHEMA, infer=_infer, batched=True)(_build)
