"""``mixture_source``: which source of a mixture (``args.sources``) each example was drawn from.

loaders/mixture.py puts every example's source index and name in ``batch.extras``; this type picks
one of them up, per batch.
"""
from __future__ import annotations

from batchloaders.transform.extend import register_secondary
from batchloaders.transform.registry import CheckContext
from batchloaders.core.model import TensorInfo

# The extras of every example of a mixture (loaders/mixture.py puts them there).
SOURCE_INDEX, SOURCE_NAME = "mixture_source", "mixture_source_name"

SCHEMA = {
    "title": "mixture_source secondary feature arguments",
    "description": "The source each example was drawn from (needs sources): its index in args.sources (from 0), "
                   "or its name.",
    "type": "object", "additionalProperties": False,
    "properties": {
        "value": {"description": "index (the default) or name.", "type": "string", "enum": ["index", "name"]},
        "dtype": {"title": "dtype", "description": "Integer dtype of an index (default int32).", "type": "string",
                  "enum": ["int32", "int64"]},
    },
}


def _info(args: dict, ctx: CheckContext) -> TensorInfo:
    if args.get("value", "index") == "name":
        return TensorInfo("string", ())
    return TensorInfo(args.get("dtype", "int32"), ())


@register_secondary("mixture_source", schema=SCHEMA, infer=_info, batched=True)
def mixture_source(args: dict, batch, info: TensorInfo):
    import tensorflow as tf  # deferred: registering the type needs no TensorFlow (describe, validate)

    if args.get("value", "index") == "name":
        return batch.extras[SOURCE_NAME], None
    return tf.cast(batch.extras[SOURCE_INDEX], info.dtype), None
