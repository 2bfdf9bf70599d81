"""``chunk_index``, ``chunk_count`` and ``source_key``: where a chunk comes from (configs with ``chunking``).

The chunker (chunking.py) knows each chunk's number within its sequence, how many chunks the
sequence gave and the file and record the sequence was read from; it hands them over in
``batch.extras["chunk"]`` and these types only pick them up, once the chunks are batched.
"""
from __future__ import annotations

from batchloaders.transform.extend import register_secondary
from batchloaders.transform.registry import CheckContext
from batchloaders.core.model import TensorInfo

_DTYPE = {"title": "dtype", "description": "Integer dtype of the result (default int32).", "type": "string",
          "enum": ["int32", "int64"]}


def _schema(title: str, description: str, with_dtype: bool) -> dict:
    return {"title": title, "description": description, "type": "object", "additionalProperties": False,
            "properties": {"dtype": _DTYPE} if with_dtype else {}}


def _integer(args: dict, ctx: CheckContext) -> TensorInfo:
    return TensorInfo(args.get("dtype", "int32"), ())


def _picker(key: str):
    def build(args: dict, batch, info: TensorInfo):
        import tensorflow as tf

        value = batch.extras["chunk"][key]
        return (tf.cast(value, info.dtype) if info.dtype != "string" else value), None
    return build


register_secondary("chunk_index", schema=_schema(
    "chunk_index secondary feature arguments",
    "The chunk's number within its sequence: 0, 1, ... in the order of the sequence (needs chunking).", True),
    infer=_integer, batched=True, after_chunking=True)(_picker("index"))
register_secondary("chunk_count", schema=_schema(
    "chunk_count secondary feature arguments",
    "How many chunks the chunk's sequence gave (the dropped last piece not counted; needs chunking).", True),
    infer=_integer, batched=True, after_chunking=True)(_picker("count"))
register_secondary("source_key", schema=_schema(
    "source_key secondary feature arguments",
    "'<file path>:<record index>' of the record the chunk's sequence was read from (for windows: their first "
    "record; needs chunking).", False),
    infer=lambda args, ctx: TensorInfo("string", ()), batched=True, after_chunking=True)(_picker("source_key"))
