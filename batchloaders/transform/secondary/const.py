"""``const``: a tensor filled with one value, its shape and dtype given or copied from a primary."""
from __future__ import annotations

from batchloaders.errors import suggest
from batchloaders.transform.extend import register_secondary
from batchloaders.transform.registry import CheckContext
from batchloaders.config.model import DTYPES, TensorInfo


def default_value(dtype: str):
    return "" if dtype == "string" else (False if dtype == "bool" else 0)


def check_value(value, dtype: str) -> str | None:
    """Why ``value`` cannot fill a ``dtype`` tensor, or None if it can."""
    if dtype == "string":
        return None if isinstance(value, str) else f"found {value!r}: expected a string for dtype 'string'"
    if dtype == "bool":
        return None if isinstance(value, bool) else f"found {value!r}: expected true or false for dtype 'bool'"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"found {value!r}: expected a number for dtype {dtype!r}"
    import numpy as np  # a dependency of TensorFlow; only its type limits are used here

    if dtype.startswith(("int", "uint")):
        limits = np.iinfo(dtype)
        if not isinstance(value, int):
            return f"found {value!r}: expected an integer (without a decimal point) for dtype {dtype!r}"
    else:
        limits = np.finfo(np.float32 if dtype == "bfloat16" else dtype)
    if isinstance(value, int) and dtype.startswith(("float", "bfloat")) and abs(value) > 2**1024:
        return f"found an integer of {len(str(abs(value)))} digits: expected a value from {limits.min} to {limits.max} for dtype {dtype!r}"
    # Python numbers against Python limits: numpy would cast the value to the dtype first (and warn).
    low, high = (int(limits.min), int(limits.max)) if dtype.startswith(("int", "uint")) else (float(limits.min), float(limits.max))
    if not low <= value <= high:
        return f"found {value!r}: expected a value from {limits.min} to {limits.max} for dtype {dtype!r}"
    return None


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
