"""Parse a batch of serialized records into the tensors a manifest describes.

Storage and model tensors are kept apart: ``storage_spec`` says how a feature
sits in the protobuf (int64/float/bytes lists), ``decode`` turns what was
parsed into the manifest's dtype and shape (raw bytes, casts, reshapes).
Parsing is always batched: one ``parse_example`` / ``parse_sequence_example``
call per batch of serialized records, which gives the same tensors as
record-by-record parsing followed by batching, many times faster.
"""
from __future__ import annotations

import math

import tensorflow as tf

from batchloaders.read import naming
from batchloaders.core.model import Manifest, ManifestFeature

_STORED = {"int": tf.int64, "float": tf.float32, "string": tf.string, "raw": tf.string}


def tf_dtype(name: str) -> tf.DType:
    return tf.dtypes.as_dtype(name)


def storage_spec(feature: ManifestFeature):
    """The tf.io feature spec that reads ``feature`` as stored (before decoding)."""
    stored = _STORED[feature.deserialize_type]
    if feature.ragged:  # a value list of any length: [B, None] (one byte string per row for raw)
        return tf.io.RaggedFeature(stored, row_splits_dtype=tf.int64)
    if feature.deserialize_type == "raw":
        if feature.var_len:  # one byte string per sequence step
            return tf.io.FixedLenSequenceFeature([], stored, allow_missing=False)
        return tf.io.FixedLenFeature([feature.raw_len] if feature.raw_len > 1 else [], stored)
    size = math.prod(feature.shape)
    if feature.var_len:
        return tf.io.FixedLenSequenceFeature([size], stored, allow_missing=False)
    return tf.io.FixedLenFeature([size], stored)


def check_raw_sizes(x: tf.Tensor, feature: ManifestFeature, names, mask=None) -> tf.Operation:
    """Fail, naming the record, when a raw byte string does not hold exactly one value of the manifest's shape.

    Without this, a wrong size surfaces as a reshape error naming no record, or
    not at all when a later step slices the tensor (the optimizer drops the reshape).
    The message is built at every call, not in a conditional: the parse runs in an inline map
    (inline_map.py), whose executor takes no control flow; it costs a handful of small ops a call.
    """
    expected = math.prod(feature.shape) * tf_dtype(feature.dtype).size
    sizes = tf.strings.length(x)
    wrong = tf.not_equal(sizes, expected)
    if mask is not None:
        wrong = tf.logical_and(wrong, mask)
    flat_wrong, flat_sizes = tf.reshape(wrong, [-1]), tf.reshape(sizes, [-1])
    # The first wrong byte string; one past the end when none is (and when there is none at all).
    at = tf.argmax(tf.concat([tf.cast(flat_wrong, tf.int32), [1]], 0), output_type=tf.int32)
    if names is None:
        record = tf.constant("a record")
    else:
        per_record = tf.maximum(tf.size(flat_wrong) // tf.maximum(tf.shape(x, out_type=tf.int32)[0], 1), 1)
        record = naming.at(names, at // per_record)
    where = ("a byte string of feature" if feature.ragged else "a step of feature list" if feature.var_len
             else "feature")
    message = tf.strings.join([
        record, f": {where} {feature.name} holds ", tf.strings.as_string(tf.concat([flat_sizes, [0]], 0)[at]),
        f" bytes: the manifest says deserialize_type raw, dtype {feature.dtype}, shape {list(feature.shape)}, "
        f"which takes {expected} bytes per byte string"])
    return tf.debugging.Assert(tf.logical_not(tf.reduce_any(wrong)), [message], summarize=1)


def _range_of(stored: str, dtype: tf.DType) -> tuple | None:
    """(lowest, highest) of ``dtype`` when values stored as ``stored`` (int, float) may not fit it; else None."""
    # int64 read as uint64 is how unsigned ids and hashes are stored (tf.cast gives them back): not checked
    if stored == "int" and dtype.is_integer and dtype not in (tf.int64, tf.uint64):
        return dtype.min, dtype.max
    if stored == "float" and dtype == tf.float16:
        return float(dtype.min), float(dtype.max)
    return None


def check_range(x: tf.Tensor, feature: ManifestFeature, names, manifest_path="") -> tf.Operation | None:
    """Fail, naming the record, when a stored value does not fit the manifest's narrower dtype (an int64
    read as int32, a float32 read as float16), which tf.cast would wrap or make infinite without a word;
    None when every stored value fits. The message is built at every call, as in :func:`check_raw_sizes`.
    ``manifest_path``: the manifest's path, or a [B] string tensor of each record's (a mixture's records)."""
    dtype = tf_dtype(feature.dtype)
    bounds = _range_of(feature.deserialize_type, dtype)
    if bounds is None:
        return None
    lo, hi = bounds
    flat = tf.reshape(x, [-1])
    wrong = (flat < tf.constant(lo, flat.dtype)) | (flat > tf.constant(hi, flat.dtype))
    if flat.dtype.is_floating:  # inf and NaN are held by float16 as they are
        wrong = wrong & tf.math.is_finite(flat)
    at = tf.argmax(tf.concat([tf.cast(wrong, tf.int32), [1]], 0), output_type=tf.int32)
    per_record = tf.maximum(tf.size(flat) // tf.maximum(tf.shape(x, out_type=tf.int32)[0], 1), 1)
    record = tf.constant("a record") if names is None else naming.at(names, at // per_record)
    stored = "int64 (int64_list)" if feature.deserialize_type == "int" else "float32 (float_list)"
    said = (f", which the manifest's dtype {feature.dtype} cannot hold (values from {lo} to {hi}; the record stores "
            f"{stored}): expected a dtype that holds the data in the manifest")
    if isinstance(manifest_path, str):
        tail = [f"{said} {manifest_path}".rstrip()]
    else:  # the wrong record's own (one past the last when none is wrong)
        tail = [said + " ", tf.concat([manifest_path, [""]], 0)[at // per_record]]
    message = tf.strings.join([
        record, f": feature {feature.name!r} holds ", tf.strings.as_string(tf.concat([flat, [0]], 0)[at]), *tail])
    return tf.debugging.Assert(tf.logical_not(tf.reduce_any(wrong)), [message], summarize=1)


def decode(x: tf.Tensor, feature: ManifestFeature, lead: tf.Tensor, lengths=None, names=None,
           manifest_path="") -> tf.Tensor:
    """Turn a parsed storage tensor into the manifest's dtype and shape.

    ``lead``: the number of leading axes to keep (1 for [B], 2 for [B, T]) or a
    tensor of their sizes; ``lengths`` [B] marks the valid steps of a feature list;
    ``names`` [B] names the records in errors.
    """
    dtype = tf_dtype(feature.dtype)
    shape = list(feature.shape)
    if feature.deserialize_type == "raw":
        mask = tf.sequence_mask(lengths, tf.shape(x)[1]) if lengths is not None else None
        with tf.control_dependencies([check_raw_sizes(x, feature, names, mask)]):
            x = tf.identity(x)
        if lengths is not None:
            # Padded steps hold b"", which decode_raw cannot split into elements; give
            # them zero bytes of the right size (they are masked out later anyway).
            zero = b"\0" * (math.prod(shape) * dtype.size)
            x = tf.where(mask, x, tf.constant(zero))
        # Raw bools are bytes: any byte but 0 is true (decode_raw to bool would copy bytes
        # such as 2 into bools, which C++ leaves undefined).
        stored = tf.uint8 if dtype == tf.bool else dtype
        out = tf.io.decode_raw(x, stored, little_endian=feature.endian != "big")
        if not feature.var_len and feature.raw_len > 1:
            shape = [feature.raw_len] + shape
        if isinstance(lead, int):
            # Keep the batch axis explicit: a byte string of the wrong size must fail, not
            # silently change the number of examples.
            lead = tf.shape(x)[:lead]
        out = _reshape(out, lead, shape)
        return tf.not_equal(out, 0) if dtype == tf.bool else out
    out = _reshape(x, lead, shape)
    if out.dtype == dtype:
        return out
    fits = check_range(out, feature, names, manifest_path)
    if fits is not None:
        with tf.control_dependencies([fits]):
            out = tf.identity(out)
    return tf.cast(out, dtype)


def check_rows(counts: tf.Tensor, feature: ManifestFeature, names) -> tf.Operation:
    """The check that every record's value count of a variable-length feature is a whole number of rows.

    Built as :func:`check_raw_sizes` is: the message at every call, no control flow.

    Args:
        counts: [B] int64, the number of values each record stores.
        feature: the manifest feature, its ``shape`` one row's (``[3]`` for a manifest shape ``[null, 3]``).
        names: [B] record names ('path: record N'), a naming.BlockNames, RecordNames or EachInBlock, or None.

    Returns:
        An assertion that fails, naming the first such record, when a count is not a multiple of the row size.
    """
    size = math.prod(feature.shape)
    wrong = tf.not_equal(counts % size, 0)
    at = tf.argmax(tf.concat([tf.cast(wrong, tf.int32), [1]], 0), output_type=tf.int32)
    record = tf.constant("a record") if names is None else naming.at(names, at)
    message = tf.strings.join([
        record, f": feature {feature.name} holds ", tf.strings.as_string(tf.concat([counts, [0]], 0)[at]),
        f" values: the manifest says shape [null, {', '.join(map(str, feature.shape))}] "
        f"({feature.deserialize_type}), rows of {size} values, so a multiple of {size}"])
    return tf.debugging.Assert(tf.logical_not(tf.reduce_any(wrong)), [message], summarize=1)


def decode_ragged(x: tf.RaggedTensor, feature: ManifestFeature, names=None, manifest_path=""):
    """A variable-length feature's value lists as the padded values and lengths a feature list gives.

    Args:
        x: [B, None] the value lists as parsed (one byte string per row for raw).
        feature: the manifest feature (``ragged``), its ``shape`` one row's.
        names: [B] record names for the checks' messages, a naming.BlockNames, RecordNames or EachInBlock, or
            None.
        manifest_path: as :func:`decode` takes it.

    Returns:
        ``(values, lengths)``: values [B, T, *shape] in the manifest's dtype, padded with the dtype's default
        value to the longest record's T rows; lengths [B] int64, each record's rows.

    Raises:
        tf.errors.InvalidArgumentError: when run, for a record whose value count is not a whole number of rows
            (:func:`check_rows`), a raw byte string of the wrong size, or a value the dtype cannot hold.
    """
    counts = x.row_lengths()
    if feature.deserialize_type == "raw":
        return decode(x.to_tensor(), feature, 2, counts, names=names, manifest_path=manifest_path), counts
    size = math.prod(feature.shape)
    dense = x.to_tensor()
    if size > 1:
        with tf.control_dependencies([check_rows(counts, feature, names)]):
            dense = tf.identity(dense)
    lead = tf.shape(dense, out_type=tf.int32)
    # [B, T * size] -> [B, T, size]: explicit sizes, as -1 cannot be inferred for an empty batch
    rows = tf.reshape(dense, tf.stack([lead[0], lead[1] // size, size]))
    return decode(rows, feature, 2, counts // size, names=names, manifest_path=manifest_path), counts // size


def _reshape(x: tf.Tensor, lead, shape: list[int]) -> tf.Tensor:
    """Reshape to lead + shape; a single leading axis needs no run-time shape arithmetic."""
    if isinstance(lead, int):
        return tf.reshape(x, [-1] + shape) if lead == 1 else tf.reshape(
            x, tf.concat([tf.shape(x)[:lead], tf.constant(shape, tf.int32)], 0))
    return tf.reshape(x, tf.concat([lead, tf.constant(shape, tf.int32)], 0))


def parse_batch(serialized: tf.Tensor, manifest: Manifest, selected: dict[str, ManifestFeature], names=None,
                manifest_paths=None):
    """Parse a [B] vector of serialized records.

    ``names`` [B] ('path: record N'), or a naming.BlockNames, RecordNames or EachInBlock, makes TensorFlow's
    parse errors and our own checks say which record of which file disagrees with the manifest;
    ``manifest_paths`` [B], each record's manifest when they differ (a mixture's records), else
    ``manifest.path``. Returns ``(values, lengths)``: ``values[to_name]`` is [B, ...] (feature lists padded to
    the batch maximum), ``lengths[to_name]`` is the [B] valid length of each feature list's first axis.
    """
    by_name = {f.name: f for f in selected.values()}
    values, lengths = {}, {}
    path = manifest.path if manifest_paths is None else manifest_paths
    if not manifest.allow_var_len:
        parsed = tf.io.parse_example(serialized, {n: storage_spec(f) for n, f in by_name.items()},
                                     example_names=naming.vector(names))
        for to_name, f in selected.items():
            if f.ragged:
                values[to_name], lengths[to_name] = decode_ragged(parsed[f.name], f, names, path)
            else:
                values[to_name] = decode(parsed[f.name], f, 1, names=names, manifest_path=path)
        return values, lengths
    context = {n: storage_spec(f) for n, f in by_name.items() if f.ragged or not f.var_len}
    sequence = {n: storage_spec(f) for n, f in by_name.items() if f.var_len and not f.ragged}
    ctx, seq, seq_len = tf.io.parse_sequence_example(serialized, context_features=context or None,
                                                     sequence_features=sequence or None,
                                                     example_names=naming.vector(names))
    for to_name, f in selected.items():
        if f.ragged:
            values[to_name], lengths[to_name] = decode_ragged(ctx[f.name], f, names, path)
        elif f.var_len:
            x = seq[f.name]
            n = tf.cast(seq_len[f.name], tf.int64)
            values[to_name] = decode(x, f, 2, n, names=names, manifest_path=path)
            lengths[to_name] = n
        else:
            values[to_name] = decode(ctx[f.name], f, 1, names=names, manifest_path=path)
    return values, lengths
