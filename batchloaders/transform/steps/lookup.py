"""``lookup``: map string tokens to integer ids through a vocabulary file.

The vocabulary is a text file with one token per line; a token's id is its 0-based
line number. A relative path is relative to the config file's directory. Lines end
with "\\n" or "\\r\\n" (the "\\r" is not part of the token); the file's last line may
or may not end with one, and a final line ending never makes an empty token. Tokens
are compared byte for byte (UTF-8 as written, spaces included; a UTF-8 byte order
mark at the start of the file is dropped). A file that cannot be read, holds no
tokens, has an empty line or holds a token twice is a ConfigError when the config is
checked, naming the lines. A string not in the vocabulary gets ``oov_id`` (default:
the number of tokens, one past the last id). The result has dtype ``dtype`` (int64 by
default, or int32) and the input's shape and lengths; the input must be dtype string.
"""
from __future__ import annotations

import hashlib
import os
import weakref

from batchloaders.transform.extend import BuildError, register_step
from batchloaders.transform.registry import CheckContext
from batchloaders.core.model import TensorInfo

_LIMITS = {"int32": (-2**31, 2**31 - 1), "int64": (-2**63, 2**63 - 1)}
# graph (None when eager) -> {(path, sha256 of the file, oov_id, dtype): StaticHashTable}, created
# once: a table made inside a tf.data function would be remade (and re-read) every time it is traced.
# Weak on graphs: a graph that is gone takes its tables with it.
_TABLES = weakref.WeakKeyDictionary()
_EAGER_TABLES: dict = {}


class VocabularyError(ValueError):
    pass


def resolve(path: str, base_dir: str) -> str:
    return os.path.normpath(os.path.join(os.path.abspath(base_dir), os.path.expanduser(path)))


def read_vocabulary(path: str) -> tuple[list[bytes], str]:
    """(tokens in id order, sha256 of the file) of a vocabulary file; raises VocabularyError."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as error:
        raise VocabularyError(f"cannot read the vocabulary file {path}: {error.strerror or error}: expected a "
                              "readable text file with one token per line") from None
    digest = hashlib.sha256(data).hexdigest()
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    lines = data.split(b"\n")
    if lines[-1] == b"":
        lines.pop()  # the last line's own line ending, not an empty token
    tokens = [line[:-1] if line.endswith(b"\r") else line for line in lines]
    if not tokens:
        raise VocabularyError(f"found no tokens in the vocabulary file {path}: expected one token per line")
    first_line: dict[bytes, int] = {}
    for number, token in enumerate(tokens, start=1):
        if token == b"":
            raise VocabularyError(f"line {number} of the vocabulary file {path} is empty: expected one token per "
                                  "line (an empty line would silently be the empty string's id)")
        if token in first_line:
            raise VocabularyError(f"token {_show(token)} is on line {first_line[token]} and again on line {number} "
                                  f"of the vocabulary file {path}: expected each token once (its id is its line "
                                  "number - 1)")
        first_line[token] = number
    return tokens, digest


def _show(token: bytes) -> str:
    text = repr(token.decode("utf-8", "backslashreplace"))
    return text if len(text) <= 60 else text[:57] + "..."


def _infer(args: dict, info: TensorInfo, ctx: CheckContext) -> TensorInfo | None:
    dtype = args.get("dtype", "int64")
    ok = True
    if info.dtype != "string":
        ctx.report(("tensor",), f"found dtype {info.dtype}: expected a string tensor (lookup maps tokens to ids)")
        ok = False
    path = resolve(args["vocabulary"], ctx.base_dir)
    try:
        tokens, _ = read_vocabulary(path)
    except VocabularyError as error:
        ctx.report(("args", "vocabulary"), str(error))
        return None
    # The build gets no base_dir: it reads the resolved absolute path stored here (these args are
    # the config's own copy, the one the pipeline is built from).
    args["vocabulary"] = path
    lo, hi = _LIMITS[dtype]
    largest = len(tokens) - 1 if "oov_id" in args else len(tokens)  # the default oov_id is one past the last id
    if largest > hi:
        ctx.report(("args", "dtype"), f"found {len(tokens)} tokens in {path}: ids up to {largest} do not fit "
                                      f"{dtype}: expected int64")
        ok = False
    if "oov_id" in args and not lo <= args["oov_id"] <= hi:
        ctx.report(("args", "oov_id"), f"found oov_id {args['oov_id']}: expected a value from {lo} to {hi} for "
                                       f"dtype {dtype!r}")
        ok = False
    return TensorInfo(dtype, info.shape) if ok else None


def _table(path: str, oov_id: int | None, dtype: str):
    import tensorflow as tf

    try:
        tokens, digest = read_vocabulary(path)
    except VocabularyError as error:  # changed since the config was checked
        raise BuildError(f"lookup step: {error}") from None
    oov = len(tokens) if oov_id is None else oov_id
    with tf.init_scope():
        # Outside every tf.function and dataset trace: the table is made once per graph (or
        # once eagerly) and every traced batch function captures that same table.
        tables = _EAGER_TABLES if tf.executing_eagerly() else _TABLES.setdefault(tf.compat.v1.get_default_graph(), {})
        key = (path, digest, oov, dtype)
        if key not in tables:
            tf_dtype = tf.as_dtype(dtype)
            initializer = tf.lookup.KeyValueTensorInitializer(
                tf.constant(tokens, tf.string), tf.range(len(tokens), dtype=tf_dtype))
            tables[key] = tf.lookup.StaticHashTable(initializer, default_value=tf.constant(oov, tf_dtype))
        return tables[key]


def table_count() -> int:
    """Tables made so far (and not yet collected with their graph)."""
    return len(_EAGER_TABLES) + sum(len(tables) for tables in list(_TABLES.values()))


def _build(args: dict, values, lengths, info: TensorInfo, info_out: TensorInfo | None = None):
    """Ids of the tokens of a string batch ``values`` [B, ...]; shape and lengths unchanged."""
    table = _table(args["vocabulary"], args.get("oov_id"), args.get("dtype", "int64"))
    # Padding looks up garbage too; finalize overwrites it past each example's length.
    return table.lookup(values), lengths


SCHEMA = {
    "title": "lookup step arguments",
    "description": "Map string tokens to integer ids: a token's id is its 0-based line number in a vocabulary file.",
    "type": "object",
    "additionalProperties": False,
    "required": ["vocabulary"],
    "properties": {
        "vocabulary": {
            "description": "Path of a text file with one token per line (\\n or \\r\\n line endings), relative to the config file's directory. No empty lines or repeated tokens.",
            "type": "string",
            "minLength": 1
        },
        "oov_id": {
            "description": "The id of a string not in the vocabulary, within the range of dtype. Default: the number of tokens (one past the last id).",
            "type": "integer",
            "minimum": -9223372036854775808,
            "maximum": 9223372036854775807
        },
        "dtype": {
            "description": "The ids' dtype. Default int64.",
            "type": "string",
            "enum": ["int32", "int64"],
            "default": "int64"
        }
    }
}


register_step("lookup", schema=SCHEMA, infer=_infer, batched=True)(_build)
