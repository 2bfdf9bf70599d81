"""``cast``: convert every entry of a tensor to another dtype, as ``tf.cast`` does.

Numbers and bools convert among themselves: a number becomes ``true`` when it is not
zero, ``true``/``false`` become 1/0, a float becomes an integer by truncation toward
zero. A value the new dtype cannot hold (a NaN or a float beyond an integer dtype's
range, a negative number cast to an unsigned dtype) gives what ``tf.cast`` gives on the
platform. Strings cast only to ``string``: a cast between ``string`` and any other dtype
is refused when the config is checked. Shape and lengths are unchanged; each entry is
converted on its own, so padding cannot reach a valid entry.
"""
from __future__ import annotations

from batchloaders.extend import register_step
from batchloaders.registry import CheckContext
from batchloaders.config.model import DTYPES, TensorInfo


def _infer(args: dict, info: TensorInfo, ctx: CheckContext) -> TensorInfo | None:
    dtype = args["dtype"]
    if (dtype == "string") != (info.dtype == "string"):
        ctx.report(("args", "dtype"), f"found a cast from {info.dtype} to {dtype}: expected a cast between "
                                      "numeric and bool dtypes, or string to string (tf.cast cannot convert "
                                      "between strings and other dtypes)")
        return None
    return TensorInfo(dtype, info.shape)


def _build(args: dict, values, lengths, info: TensorInfo, info_out: TensorInfo | None = None):
    """Cast a batch ``values`` [B, ...]; entries are independent, so ``lengths`` pass through."""
    import tensorflow as tf

    return tf.cast(values, tf.as_dtype(args["dtype"])), lengths


SCHEMA = {
    "title": "cast step arguments",
    "description": "Convert every entry to another dtype (numbers and bools among themselves; strings only to string).",
    "type": "object",
    "additionalProperties": False,
    "required": ["dtype"],
    "properties": {
        "dtype": {
            "title": "dtype",
            "description": "The dtype after the cast.",
            "type": "string",
            "enum": list(DTYPES)
        }
    }
}


register_step("cast", schema=SCHEMA, infer=_infer, batched=True)(_build)
