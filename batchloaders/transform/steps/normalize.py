"""``normalize``: shift and scale a float tensor, by given statistics or by each example's own moments.

Two forms, exactly one per step:

* ``{mean, std}``: ``(x - mean) / std``. Each is a number, or a list of numbers as long as
  the last axis (which must then have a fixed size), applied along it. std entries must be > 0.
* ``{axis, epsilon}``: ``(x - m) / sqrt(v + epsilon)`` with ``m`` and ``v`` the mean and
  (population) variance of each example over the axes ``axis`` (an integer or a list; the
  batch axis is not counted and negative axes count from the last), e.g. per-utterance
  normalization over the time axis 0. ``epsilon`` > 0 defaults to 1e-5. When the first axis
  varies in length only an example's valid steps count; an example of length 0 has no
  entries to normalize.

Only float tensors (float16, bfloat16, float32, float64) are accepted; float16 and bfloat16
are computed in float32 and the result cast back. dtype, shape and lengths are unchanged.
"""
from __future__ import annotations

from batchloaders.transform.extend import register_step
from batchloaders.transform.registry import CheckContext
from batchloaders.core.values import check_value
from batchloaders.core.model import TensorInfo, format_shape

FLOATS = ("float16", "bfloat16", "float32", "float64")
EPSILON = 1e-5


def _compute_dtype(dtype: str) -> str:
    # Half precision sums lose too much: moments and scaling run in float32.
    return "float64" if dtype == "float64" else "float32"


def _axes(axis, rank: int) -> list[int]:
    return sorted({a % rank for a in ([axis] if isinstance(axis, int) else axis)}) if rank else []


def _check_stat(key: str, value, info: TensorInfo, ctx: CheckContext) -> bool:
    import numpy as np  # only for the compute dtype's rounding of std

    compute = _compute_dtype(info.dtype)
    if isinstance(value, list):
        last = info.shape[-1] if info.shape else None
        if last != len(value):
            why = ("a scalar per example has no last axis" if not info.shape else
                   "its last axis varies in length" if last is None else f"its last axis has size {last}")
            expected = "a single number" if last is None else f"a number or a list of {last} numbers"
            ctx.report(("args", key), f"found a list of {len(value)} numbers for a tensor of shape "
                                      f"{format_shape(info.shape)} ({why}): expected {expected}")
            return False
    for v in value if isinstance(value, list) else [value]:
        why = check_value(v, compute)  # refuses NaN, infinities and values beyond the compute dtype
        if why is None and key == "std" and not np.asarray(v, compute) > 0:
            why = f"found std {v!r}" + (f", which is 0 in {compute}" if v > 0 else "") + ": expected numbers > 0"
        if why:
            ctx.report(("args", key), why)
            return False
    return True


def _infer(args: dict, info: TensorInfo, ctx: CheckContext) -> TensorInfo | None:
    import numpy as np  # only for the compute dtype's rounding of epsilon

    if info.dtype not in FLOATS:
        ctx.report(("tensor",), f"found dtype {info.dtype} (shape {format_shape(info.shape)}): expected a float dtype "
                                f"({', '.join(FLOATS)}); cast it first")
        return None
    stats = [k for k in ("mean", "std") if k in args]
    moments = [k for k in ("axis", "epsilon") if k in args]
    forms = "expected either mean and std (fixed statistics) or axis, with an optional epsilon (each example's moments)"
    if stats and moments:
        ctx.report(("args",), f"found {' and '.join(stats)} together with {' and '.join(moments)}: {forms}")
        return None
    if not stats and "axis" not in args:
        ctx.report(("args",), f"found {'epsilon alone' if moments else 'no arguments'}: {forms}")
        return None
    if stats:
        if len(stats) == 1:
            missing = "std" if stats == ["mean"] else "mean"
            ctx.report(("args",), f"found {stats[0]} without {missing}: expected both mean and std")
            return None
        if not all([_check_stat(k, args[k], info, ctx) for k in stats]):
            return None
        return info
    axis, rank = args["axis"], info.rank
    for a in [axis] if isinstance(axis, int) else axis:
        if not -rank <= a < rank:
            expected = ("a scalar per example has no axis to normalize over" if not rank else
                        f"expected {-rank} <= axis < {rank} (the batch axis is not counted)")
            ctx.report(("args", "axis"), f"found axis {a} for a tensor of rank {rank} (shape {format_shape(info.shape)}): "
                                         f"{expected}")
            return None
    if isinstance(axis, list) and len(_axes(axis, rank)) < len(axis):
        ctx.report(("args", "axis"), f"found axes {axis} for a tensor of rank {rank} (shape {format_shape(info.shape)}): "
                                     "expected each axis once (a negative axis counts from the last)")
        return None
    epsilon = args.get("epsilon", EPSILON)
    compute = _compute_dtype(info.dtype)
    if check_value(epsilon, compute) is not None or not np.asarray(epsilon, compute) > 0:
        ctx.report(("args", "epsilon"), f"found epsilon {epsilon!r}: expected a finite number > 0 (and > 0 once "
                                        f"rounded to {compute})")
        return None
    return info


def _build(args: dict, values, lengths, info: TensorInfo, info_out: TensorInfo | None = None):
    """Normalize a batch ``values`` [B, ...]; ``lengths`` [B] gives the valid length of a variable first axis."""
    import tensorflow as tf

    compute = tf.as_dtype(_compute_dtype(info.dtype))
    x = tf.cast(values, compute)
    if "mean" in args:
        x = (x - tf.constant(args["mean"], compute)) / tf.constant(args["std"], compute)
        return tf.cast(x, values.dtype), lengths
    axes = [a + 1 for a in _axes(args["axis"], info.rank)]  # past the batch axis
    if 1 in axes and info.shape[0] is None and lengths is not None:
        # Padding steps hold anything (even NaN): keep them out of every sum with where, not a product.
        mask = tf.sequence_mask(lengths, tf.shape(x)[1])
        mask = tf.reshape(mask, tf.concat([tf.shape(mask), tf.ones([info.rank - 1], tf.int32)], 0))
        mask = tf.broadcast_to(mask, tf.shape(x))
        zero = tf.zeros_like(x)
        # An example without valid steps counts 1, not 0: it has no entry to divide anyway.
        count = tf.maximum(tf.reduce_sum(tf.cast(mask, compute), axes, keepdims=True), 1)
        mean = tf.reduce_sum(tf.where(mask, x, zero), axes, keepdims=True) / count
        deviation = tf.where(mask, x - mean, zero)
        variance = tf.reduce_sum(deviation * deviation, axes, keepdims=True) / count
    else:
        mean = tf.reduce_mean(x, axes, keepdims=True)
        variance = tf.reduce_mean(tf.square(x - mean), axes, keepdims=True)
    x = (x - mean) / tf.sqrt(variance + tf.constant(args.get("epsilon", EPSILON), compute))
    return tf.cast(x, values.dtype), lengths


_NUMBERS = {"type": ["number", "array"], "items": {"type": "number"}, "minItems": 1}

SCHEMA = {
    "title": "normalize step arguments",
    "description": "Shift and scale a float tensor: (x - mean) / std with given mean and std, or (x - m) / sqrt(v + epsilon) with each example's mean m and variance v over axis.",
    "type": "object",
    "additionalProperties": False,
    "required": [],
    "properties": {
        "mean": {
            "description": "Subtracted first: a number, or a list of numbers as long as the last axis. Give it with std, without axis.",
            **_NUMBERS
        },
        "std": {
            "description": "Divides after the mean is subtracted: a number > 0, or a list of numbers > 0 as long as the last axis. Give it with mean, without axis.",
            **_NUMBERS
        },
        "axis": {
            "description": "Axis, or list of axes, over which each example's mean and variance are computed (the batch axis is not counted; negative axes count from the last). Give it without mean and std.",
            "type": ["integer", "array"],
            "minimum": -254,
            "maximum": 253,
            "items": {"type": "integer", "minimum": -254, "maximum": 253},
            "minItems": 1,
            "maxItems": 32
        },
        "epsilon": {
            "description": "Added to the variance before its square root, a number > 0 (with axis only). Defaults to 1e-5.",
            "type": "number",
            "default": EPSILON
        }
    }
}


register_step("normalize", schema=SCHEMA, infer=_infer, batched=True)(_build)
