"""``reverse``: reverse the order of the steps along one axis of every example.

``axis`` counts the example's axes (never the batch axis) and may be negative, as in
Python; a scalar has no axis to reverse. On a variable-length first axis only each
example's own steps are reversed (its last step comes first), exactly as reversing
each example before batching: the batch's padding stays after them. Shape, dtype
and lengths are unchanged.
"""
from __future__ import annotations

from batchloaders.transform.extend import register_step
from batchloaders.transform.registry import CheckContext
from batchloaders.core.model import TensorInfo
from batchloaders.transform.steps.pad_to import normalize_axis


def _infer(args: dict, info: TensorInfo, ctx: CheckContext) -> TensorInfo | None:
    if normalize_axis(args.get("axis", 0), info, ctx, "reverse") is None:
        return None
    return info


def _build(args: dict, values, lengths, info: TensorInfo, info_out: TensorInfo | None = None):
    """Reverse axis ``axis`` of a batch ``values`` [B, ...]; per example on a variable axis 0."""
    import tensorflow as tf

    axis = args.get("axis", 0) % info.rank
    if axis == 0 and info.shape[0] is None and lengths is not None:
        # tf.reverse would bring the batch's padding to the front of shorter examples.
        return tf.reverse_sequence(values, tf.cast(lengths, tf.int64), seq_axis=1, batch_axis=0), lengths
    return tf.reverse(values, [axis + 1]), lengths


SCHEMA = {
    "title": "reverse step arguments",
    "description": "Reverse the order of the steps along one axis of every example.",
    "type": "object",
    "additionalProperties": False,
    "required": [],
    "properties": {
        "axis": {
            "description": "The axis to reverse, counted without the batch axis; negative counts from the last axis. Default 0 (on a variable-length first axis, each example's own steps).",
            "type": "integer",
            "minimum": -254,
            "maximum": 253,
            "default": 0
        }
    }
}


register_step("reverse", schema=SCHEMA, infer=_infer, batched=True)(_build)
