"""``boundaries`` (discrete_sequence): 1 at the first step of every record of a window, else 0."""
from __future__ import annotations

from batchloaders.transform.extend import register_secondary
from batchloaders.transform.registry import CheckContext
from batchloaders.transform.secondary.length import tensor_schema
from batchloaders.transform.secondary.segment_ids import infer_per_step, record_index
from batchloaders.core.model import TensorInfo


def _infer(args: dict, ctx: CheckContext) -> TensorInfo | None:
    return infer_per_step(args, ctx, "boundaries")


def _build(args: dict, batch, info: TensorInfo):
    import tensorflow as tf

    record = record_index(batch, args["tensor"])
    before = tf.pad(record[:, :-1], [[0, 0], [1, 0]], constant_values=-1)  # step 0 always starts a record
    return tf.cast(tf.not_equal(record, before), info.dtype), batch.lengths.get(args["tensor"])


SCHEMA = tensor_schema("boundaries secondary feature arguments",
                       "For each step along the first axis of a tensor, whether a new subsequence (record) starts there.",
                       "Name of the primary or secondary tensor whose subsequence starts to mark.")


register_secondary("boundaries", schema=SCHEMA, infer=_infer, batched=True, loaders=("discrete_sequence",))(_build)
