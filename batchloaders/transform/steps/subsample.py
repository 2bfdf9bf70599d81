"""``subsample``: keep every ``every``-th step of the first axis, from step ``offset`` on.

Each example keeps steps offset, offset + every, offset + 2*every, ... of its first
axis: Python's ``x[offset::every]``. ``offset`` may be ``every`` or more (it then
skips whole periods) and may reach past an example's end, which leaves it empty. On a
variable-length first axis an example of length n keeps max(0, ceil((n - offset) /
every)) steps, only ever of its own; a fixed axis of length n becomes
``len(range(n)[offset::every])``. The other axes are unchanged.
"""
from __future__ import annotations

from batchloaders.transform.extend import register_step
from batchloaders.transform.registry import CheckContext
from batchloaders.core.model import TensorInfo


def _infer(args: dict, info: TensorInfo, ctx: CheckContext) -> TensorInfo | None:
    if info.rank == 0:
        ctx.report(("tensor",), f"found a scalar (shape []) of dtype {info.dtype}: expected a tensor with at least "
                                "one axis, whose first axis (time) subsample thins out")
        return None
    every, offset = args["every"], args.get("offset", 0)
    first = info.shape[0]
    return TensorInfo(info.dtype, (None if first is None else len(range(first)[offset::every]),) + info.shape[1:])


def _build(args: dict, values, lengths, info: TensorInfo, info_out: TensorInfo | None = None):
    """Keep steps offset::every of axis 0 of a batch ``values`` [B, ...]; new lengths on a variable axis."""
    import tensorflow as tf

    every, offset = args["every"], args.get("offset", 0)
    # Step i of the result is step offset + i*every of the input: it lies inside an example
    # exactly when i < the new length, so the batch's padding stays in the result's padding.
    values = values[:, offset::every]
    if info.shape[0] is None and lengths is not None:
        lengths = tf.cast(lengths, tf.int64)
        lengths = tf.maximum(lengths - offset + every - 1, 0) // every
    return values, lengths


SCHEMA = {
    "title": "subsample step arguments",
    "description": "Keep every every-th step of the first axis from step offset on (x[offset::every]).",
    "type": "object",
    "additionalProperties": False,
    "required": ["every"],
    "properties": {
        "every": {
            "description": "Keep one step out of every: the distance between kept steps.",
            "type": "integer",
            "minimum": 1,
            "maximum": 2147483647
        },
        "offset": {
            "description": "The first step kept (0-based). May be every or more; past an example's end it leaves the example empty. Default 0.",
            "type": "integer",
            "minimum": 0,
            "maximum": 2147483647,
            "default": 0
        }
    }
}


register_step("subsample", schema=SCHEMA, infer=_infer, batched=True)(_build)
