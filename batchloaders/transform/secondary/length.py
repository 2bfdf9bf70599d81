"""``length``: the length of a tensor along its first axis before padding, one scalar per example.

It measures the tensor as the processing steps leave it (a ``[:-1]`` slice shortens
it by one): the feature is built once every step on that tensor has run.
"""
from __future__ import annotations

from batchloaders.errors import suggest
from batchloaders.transform.extend import register_secondary
from batchloaders.transform.registry import CheckContext
from batchloaders.core.model import TensorInfo


def named_tensor(args: dict, ctx: CheckContext, what: str) -> TensorInfo | None:
    """The info of ``args["tensor"]`` if it is an earlier tensor with at least one axis, else report and None."""
    name = args["tensor"]
    info = ctx.tensors.get(name)
    if info is None:
        known = ", ".join(ctx.tensors) or "none"
        ctx.report(("args", "tensor"), f"tensor {name!r} is not a primary feature or an earlier secondary "
                                       f"feature{suggest(name, ctx.tensors)}; expected one of: {known}")
        return None
    if info.rank < 1:
        ctx.report(("args", "tensor"), f"tensor {name!r} is a scalar per example (shape []): {what} needs a "
                                       "tensor with at least one axis")
        return None
    return info


def _infer(args: dict, ctx: CheckContext) -> TensorInfo | None:
    if named_tensor(args, ctx, "length") is None:
        return None
    return TensorInfo(args.get("dtype", "int32"), ())


def _build(args: dict, batch, info: TensorInfo):
    import tensorflow as tf

    values = batch.values[args["tensor"]]
    lengths = batch.lengths.get(args["tensor"])
    if lengths is None:  # a fixed first axis: every example has the full length
        lengths = tf.fill(tf.shape(values)[:1], tf.shape(values)[1])
    return tf.cast(lengths, info.dtype), None



def tensor_schema(title: str, description: str, tensor: str) -> dict:
    """Args schema of a secondary type that reads one tensor and makes an integer result."""
    return {
        "title": title,
        "description": description,
        "type": "object",
        "additionalProperties": False,
        "required": ["tensor"],
        "properties": {
            "tensor": {"description": tensor, "type": "string", "minLength": 1},
            "dtype": {"title": "dtype", "description": "Integer dtype of the result. Defaults to int32.",
                      "type": "string", "enum": ["int32", "int64"], "default": "int32"},
        },
    }


SCHEMA = tensor_schema("length secondary feature arguments",
                       "The length of a tensor along its first axis (for example a sequence length).",
                       "Name of the primary or secondary tensor whose first-axis length to take.")


register_secondary("length", schema=SCHEMA, infer=_infer, batched=True, measures="tensor")(_build)
