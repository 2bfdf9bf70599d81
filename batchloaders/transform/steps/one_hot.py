"""``one_hot``: replace each integer entry i by a new last axis of ``depth`` entries, ``on_value`` at i.

The input must have an integer dtype. The output has the input's shape plus a last axis
of size ``depth``; entry k of the row of index i is ``on_value`` when k == i and
``off_value`` otherwise, so an index outside [0, depth) (negative or too large) gives a
row of ``off_value`` only, as ``tf.one_hot`` does. ``dtype`` (default float32; any
numeric dtype or bool) is the output's; ``on_value`` and ``off_value`` default to 1 and 0
(true and false for bool) and must fit it. Lengths are unchanged.
"""
from __future__ import annotations

from batchloaders.transform.extend import register_step
from batchloaders.transform.registry import CheckContext
from batchloaders.core.values import check_value
from batchloaders.core.model import DTYPES, TensorInfo, format_shape

INTEGERS = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")


def _values(args: dict) -> tuple[str, object, object]:
    dtype = args.get("dtype", "float32")
    on, off = (True, False) if dtype == "bool" else (1, 0)
    return dtype, args.get("on_value", on), args.get("off_value", off)


def _infer(args: dict, info: TensorInfo, ctx: CheckContext) -> TensorInfo | None:
    ok = True
    if info.dtype not in INTEGERS:
        ctx.report(("tensor",), f"found dtype {info.dtype} (shape {format_shape(info.shape)}): expected an integer "
                                f"dtype ({', '.join(INTEGERS)}) holding the indices to one-hot encode")
        ok = False
    dtype, on, off = _values(args)
    for key, value in (("on_value", on), ("off_value", off)):
        why = check_value(value, dtype)  # the defaults always fit: only a given value can fail
        if why:
            ctx.report(("args", key), why)
            ok = False
    return TensorInfo(dtype, info.shape + (args["depth"],)) if ok else None


def _build(args: dict, values, lengths, info: TensorInfo, info_out: TensorInfo | None = None):
    """One-hot encode a batch ``values`` [B, ...]; each entry is encoded on its own, so ``lengths`` pass through."""
    import tensorflow as tf

    dtype, on, off = _values(args)
    dtype = tf.as_dtype(dtype)
    # tf.one_hot takes int32/int64/uint8/int8 indices. int64 holds every index of the other
    # integer dtypes except uint64 values >= 2**63, which wrap to negatives: off rows, as they should be.
    indices = values if values.dtype in (tf.int64, tf.int32, tf.uint8, tf.int8) else tf.cast(values, tf.int64)
    return tf.one_hot(indices, args["depth"], on_value=tf.constant(on, dtype), off_value=tf.constant(off, dtype),
                      dtype=dtype), lengths


SCHEMA = {
    "title": "one_hot step arguments",
    "description": "Encode integer indices as one-hot rows on a new last axis.",
    "type": "object",
    "additionalProperties": False,
    "required": ["depth"],
    "properties": {
        "depth": {
            "description": "Size of the new last axis: indices 0 to depth - 1 get their own entry; others give a row of off_value only.",
            "type": "integer",
            "minimum": 1,
            "maximum": 2147483647
        },
        "on_value": {
            "description": "Value at the index of each row, of the output dtype. Defaults to 1 (true for bool).",
            "type": ["number", "boolean"]
        },
        "off_value": {
            "description": "Value everywhere else, of the output dtype. Defaults to 0 (false for bool).",
            "type": ["number", "boolean"]
        },
        "dtype": {
            "title": "output dtype",
            "description": "dtype of the output: a numeric dtype or bool. Defaults to float32.",
            "type": "string",
            "enum": [d for d in DTYPES if d != "string"],
            "default": "float32"
        }
    }
}


register_step("one_hot", schema=SCHEMA, infer=_infer, batched=True)(_build)
