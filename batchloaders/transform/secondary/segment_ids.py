"""``segment_ids`` (discrete_sequence): for each step of a window, the index of the record it came from.

The loader gives the per-record lengths of every window in
``extras["record_lengths"][tensor]`` ([B, records], 0 past the window's last
record); a step belongs to the record whose cumulative end is the first one
past it, found with one batched ``searchsorted``.
"""
from __future__ import annotations

from batchloaders.errors import suggest
from batchloaders.transform.extend import register_secondary
from batchloaders.transform.registry import CheckContext
from batchloaders.transform.secondary.length import named_tensor, tensor_schema
from batchloaders.core.model import TensorInfo


def infer_per_step(args: dict, ctx: CheckContext, what: str) -> TensorInfo | None:
    """[steps] of the named primary's first axis; only primaries know their records."""
    name = args["tensor"]
    if name in ctx.tensors and name not in ctx.primaries:
        ctx.report(("args", "tensor"), f"tensor {name!r} is a secondary feature: {what} needs a primary "
                                       "feature, whose windows the loader assembles from records"
                                       f"{suggest(name, ctx.primaries)}; expected one of: {', '.join(ctx.primaries)}")
        return None
    info = named_tensor(args, ctx, what)
    if info is None:
        return None
    return TensorInfo(args.get("dtype", "int32"), info.shape[:1])


def record_index(batch, tensor: str):
    """[B, steps] int64: the record (within its window) of every step of ``tensor``'s first axis."""
    import tensorflow as tf

    record_lengths = tf.cast(batch.extras["record_lengths"][tensor], tf.int64)  # [B, records]
    ends = tf.cumsum(record_lengths, axis=1)
    values = batch.values[tensor]
    steps = tf.range(tf.shape(values, out_type=tf.int64)[1])
    steps = tf.broadcast_to(steps[None, :], tf.stack([tf.shape(ends, out_type=tf.int64)[0], tf.size(steps, tf.int64)]))
    return tf.searchsorted(ends, steps, side="right", out_type=tf.int64)


def _infer(args: dict, ctx: CheckContext) -> TensorInfo | None:
    return infer_per_step(args, ctx, "segment_ids")


def _build(args: dict, batch, info: TensorInfo):
    import tensorflow as tf

    return tf.cast(record_index(batch, args["tensor"]), info.dtype), batch.lengths.get(args["tensor"])


SCHEMA = tensor_schema("segment_ids secondary feature arguments",
                       "For each step along the first axis of a tensor, the index of the subsequence (record) it came from.",
                       "Name of the primary or secondary tensor whose subsequences to number.")


register_secondary("segment_ids", schema=SCHEMA, infer=_infer, batched=True, loaders=("discrete_sequence",))(_build)
