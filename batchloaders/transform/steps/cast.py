"""``cast``: convert every entry of a tensor to another dtype, as ``tf.cast`` does.

Numbers and bools convert among themselves: a number becomes ``true`` when it is not
zero, ``true``/``false`` become 1/0, a float becomes an integer by truncation toward
zero. A value the new dtype cannot hold (a NaN, infinity or number beyond an integer
dtype's range, a negative number cast to an unsigned dtype, a finite float beyond a
smaller float dtype's range) stops the run with an error naming the step and the value
(``out_of_range: error``, the default: ``tf.cast`` would wrap it or make it infinite
without a word), or is clamped to the new dtype's range, NaN becoming 0
(``out_of_range: saturate``). Padding is not checked. Strings cast only to ``string``: a cast between ``string`` and any other dtype
is refused when the config is checked. Shape and lengths are unchanged; each entry is
converted on its own, so padding cannot reach a valid entry.
"""
from __future__ import annotations

from batchloaders.transform import building
from batchloaders.transform.extend import register_step
from batchloaders.transform.registry import CheckContext
from batchloaders.core.model import DTYPES, TensorInfo


def _infer(args: dict, info: TensorInfo, ctx: CheckContext) -> TensorInfo | None:
    dtype = args["dtype"]
    if (dtype == "string") != (info.dtype == "string"):
        ctx.report(("args", "dtype"), f"found a cast from {info.dtype} to {dtype}: expected a cast between "
                                      "numeric and bool dtypes, or string to string (tf.cast cannot convert "
                                      "between strings and other dtypes)")
        return None
    return TensorInfo(dtype, info.shape)


def _may_not_fit(source, target) -> bool:
    """Whether some value of ``source`` is one ``target`` cannot hold (bool and string cast by rules of their own)."""
    if target.is_bool or source.is_bool or target == source or not (source.is_integer or source.is_floating):
        return False
    if target.is_integer:
        return not (source.is_integer and int(source.min) >= int(target.min) and int(source.max) <= int(target.max))
    return float(source.max) > float(target.max)  # a finite value beyond target.max becomes infinite


def _build(args: dict, values, lengths, info: TensorInfo, info_out: TensorInfo | None = None):
    """Cast a batch ``values`` [B, ...]; entries are independent, so ``lengths`` pass through."""
    import tensorflow as tf

    target = tf.as_dtype(args["dtype"])
    if not _may_not_fit(values.dtype, target):
        return tf.cast(values, target), lengths
    if args.get("out_of_range", "error") == "saturate":
        if values.dtype.is_floating:
            values = tf.where(tf.math.is_nan(values), tf.zeros_like(values), values)
        return tf.dtypes.saturate_cast(values, target), lengths
    with tf.control_dependencies([_fits(values, lengths, target)]):
        return tf.cast(values, target), lengths


def _fits(values, lengths, target):
    """An assertion that ``target`` holds every valid entry of ``values`` (padding beyond ``lengths`` is not
    looked at), its message naming the step (building.py) and the first value that is not."""
    import tensorflow as tf

    if target.is_floating:  # exact: a finite value the cast makes infinite (inf and NaN stay what they are)
        wrong = ~tf.math.is_finite(tf.cast(values, target))
        if values.dtype.is_floating:
            wrong = wrong & tf.math.is_finite(values)
    elif values.dtype.is_integer:  # compared in the source's own dtype, exactly
        source = values.dtype
        wrong = values > tf.constant(min(target.max, source.max), source)
        if not source.is_unsigned:
            wrong = wrong | (values < tf.constant(max(target.min, source.min), source))
    else:  # a float to an integer dtype: truncated toward zero, then within [min, max] (both exact in float64)
        wide = tf.cast(values, tf.float64)
        whole = tf.where(wide < 0, tf.math.ceil(wide), tf.math.floor(wide))
        wrong = ~((whole >= float(target.min)) & (whole < float(target.max) + 1))  # NaN is never within
    if lengths is not None:
        valid = tf.sequence_mask(lengths, tf.shape(values, out_type=tf.int64)[1])
        wrong = wrong & tf.reshape(valid, tf.concat([tf.shape(valid), tf.ones([values.shape.rank - 2], tf.int32)], 0))
    flat_wrong, flat = tf.reshape(wrong, [-1]), tf.reshape(values, [-1])
    at = tf.argmax(tf.concat([tf.cast(flat_wrong, tf.int32), [1]], 0), output_type=tf.int32)
    value = tf.concat([flat, tf.zeros([1], flat.dtype)], 0)[at]
    found = tf.strings.as_string(value, shortest=True) if flat.dtype.is_floating else tf.strings.as_string(value)
    # (TensorFlow elides the middle of a long assertion message: kept short)
    message = tf.strings.join([building.place(), f": the cast to {target.name} found the value ", found,
                               f", which {target.name} cannot hold (out_of_range: saturate clamps)"])
    return tf.debugging.Assert(tf.logical_not(tf.reduce_any(wrong)), [message], summarize=1)


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
        },
        "out_of_range": {
            "title": "out of range",
            "description": "What a value the new dtype cannot hold does: error (the default) stops the run naming "
                           "the step and the value; saturate clamps it to the dtype's range, NaN becoming 0.",
            "type": "string",
            "enum": ["error", "saturate"],
            "default": "error"
        }
    }
}


register_step("cast", schema=SCHEMA, infer=_infer, batched=True)(_build)
