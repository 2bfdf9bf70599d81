"""``continuous_sequence``: random-length windows over the concatenated records of each file.

Every file is one long sequence cut into records. Blocks of records are parsed
with one vectorized call and flattened along the first axis into frames;
``windows.stream`` cuts window positions from the frames, carrying the
unconsumed tail from block to block; the windows are then gathered from the
block in one ``tf.gather`` per feature.
"""
from __future__ import annotations

import numpy as np
import tensorflow as tf

from batchloaders.read import block_sizes
from batchloaders.read import global_order, origins, permutation, sharding, sources
from batchloaders.read.parsing import parse_batch
from batchloaders.transform.local_map import local_map
from batchloaders.transform.graphs import as_written, masked
from batchloaders.read.naming import EachInBlock
from batchloaders.loaders import windows
from batchloaders.core.model import LoaderConfig
from batchloaders.config.kinds import kind
from batchloaders.loaders.registry import Loader

AUTOTUNE = tf.data.AUTOTUNE


records_per_block = block_sizes.continuous  # (block_sizes.py: no TensorFlow there, for describe)


# What a block fails with when a record's selected feature lists differ in length (runtime/translate.py reads
# it back into :func:`lengths_differ`'s words): 'path: LENGTHS_DIFFER (x, y): LISTED', then the names of the
# records that differ, then their lengths (a row per record, a column per feature).
LENGTHS_DIFFER = "the selected feature lists of a record differ in length"
LISTED = "the records, then their lengths"


def _check_same_lengths(lengths: dict, filename, names) -> list:
    """Assert every record's feature lists have one length (``names``: the block's record names).

    The assertion's data are strings and int32 only, so it is a plain Assert op (other data make it a
    conditional; a conditional in the per-block function cost ~8 ms of every pipeline's start-up): what
    differs (nothing, in a sound block), made into the message when the error is read back.
    """
    if len(lengths) < 2:
        return []
    features = list(lengths)
    table = tf.stack([lengths[n] for n in features], axis=1)  # [records, features]
    differs = tf.reduce_any(tf.not_equal(table, table[:, :1]), axis=1)
    return [tf.debugging.Assert(tf.logical_not(tf.reduce_any(differs)), [
        tf.strings.join([filename, f": {LENGTHS_DIFFER} ({', '.join(features)}): {LISTED}"]),
        tf.boolean_mask(names, differs), tf.cast(tf.boolean_mask(table, differs), tf.int32)],
        summarize=len(features))]


def lengths_differ(features: list[str], lengths: list[int]) -> str:
    """What a record whose selected feature lists differ in length is told (after its name).

    Args:
        features: the selected features' names (to_name), in the check's order.
        lengths: each one's length in the record.

    Returns:
        The message's text.
    """
    detail = ", ".join(f"{n} has {length}" for n, length in zip(features, lengths))
    return (f"the selected features (by to_name) differ in length along the first axis ({detail} steps): the "
            "continuous_sequence loader concatenates records along that axis, so every selected feature needs "
            "the same length in every record")


# With source keys: each frame's record number and step within that record, carried along with the frames.
RECORD, STEP = "@record", "@step"


def frames(read: dict, file: tuple, manifest, selected: dict, *, block: int, records: bool = False) -> dict:
    """Parse a block of (at most ``block``) records ``read`` (``{"serialized": [k], "first": the number of its
    first record}``, as the reader gives it) of a data ``file`` (its path and naming.token), and
    concatenate them along the first axis: {to_name: [steps, ...]}; ``records``: also {RECORD: [steps],
    STEP: [steps]}, the record each step comes from and the step's place in it."""
    serialized, first_record = read["serialized"], read["first"]
    filename, token = file
    names = EachInBlock(filename, token, first_record, tf.size(serialized), block)
    values, lengths = parse_batch(serialized, manifest, selected, names=names)
    checks = _check_same_lengths(lengths, filename, names.vector())
    out = {}
    with tf.control_dependencies(checks):
        for name, v in values.items():
            if name in lengths:
                out[name] = masked(v, tf.sequence_mask(lengths[name], tf.shape(v)[1]))
            else:
                out[name] = tf.reshape(v, [-1] + v.shape[2:].as_list())
        if records:
            name, v = next(iter(values.items()))
            per_record = lengths[name] if name in lengths else tf.fill(tf.shape(v, out_type=tf.int64)[:1],
                                                                       tf.shape(v, out_type=tf.int64)[1])
            out[RECORD] = tf.repeat(first_record + tf.range(tf.size(per_record, out_type=tf.int64)), per_record)
            out[STEP] = tf.ragged.range(per_record).flat_values
    return out


def _steps_per_record(config: LoaderConfig) -> int:
    """Steps every record gives along the time axis (a global shuffle's features have fixed shapes, and one
    length there: the config check's rules)."""
    return next(f.steps_per_record for f in config.selected.values())


def units_per_file(config: LoaderConfig, counts) -> np.ndarray:
    """Windows of a global shuffle's epoch per file: window j of file f takes steps [j * stride, j * stride + size)
    of the file's records concatenated (stride: the window size when not given), as many as fit in the file."""
    size, step = config.window.min_window, config.window.stride or config.window.min_window
    steps = np.asarray(counts, np.int64) * _steps_per_record(config)
    return np.where(steps >= size, (steps - size) // step + 1, 0).astype(np.int64)


def _global_batches(config: LoaderConfig, shard: sharding.Shard, batch_size: int, reader) -> tf.data.Dataset:
    """Batches of windows in a global shuffle's order (global_order.py): each window's records are read at their
    offsets (as many as a window can touch), parsed, and its steps cut from them."""
    by_offset, manifest, selected = reader.by_offset, config.dataset.manifest, config.selected
    size, per_record = config.window.min_window, _steps_per_record(config)
    step = config.window.stride or size
    touched = (size - 1) // per_record + 2  # records a window of `size` steps can touch, starting anywhere
    per_file = units_per_file(config, by_offset.counts)
    windows_per_file = tf.constant(per_file, tf.int64)
    file_starts, counts = tf.constant(by_offset.starts[:-1], tf.int64), tf.constant(by_offset.counts, tf.int64)
    ids = global_order.ids(config, per_file, shard.pipeline, shard.pipelines)
    drop = config.drop_remainder or config.epochs is None

    def read(window_ids, epochs):
        file, window = permutation.file_and_record(window_ids, windows_per_file)
        begin = window * step
        first = begin // per_record
        # Past a file's last record the window needs nothing: its last record is read again and never used.
        record = tf.minimum(first[:, None] + tf.range(touched, dtype=tf.int64)[None, :],
                            tf.gather(counts, file)[:, None] - 1)
        got = by_offset.read(tf.reshape(tf.gather(file_starts, file)[:, None] + record, [-1]), epochs)
        names = reader.record_names(got["file"], got["record"])
        values, _ = parse_batch(got["serialized"], manifest, selected, names=names)
        at = (begin - first * per_record)[:, None] + tf.range(size, dtype=tf.int64)[None, :]
        out = {}
        for name, v in values.items():
            steps = tf.reshape(v, tf.concat([[-1, touched * per_record], tf.shape(v)[2:]], 0))
            out[name] = tf.gather(steps, at, batch_dims=1)
        extras = origins.extras(config, file, first, begin - first * per_record) if origins.wanted(config) else {}
        return {"values": out, "lengths": {}, "extras": extras}
    return ids.rebatch(batch_size, drop_remainder=drop).map(
        as_written(read), num_parallel_calls=config.reading.num_parallel_reads or AUTOTUNE, deterministic=True)


def batches(config: LoaderConfig, shard: sharding.Shard, batch_size: int, reader) -> tf.data.Dataset:
    if global_order.enabled(config):
        return _global_batches(config, shard, batch_size, reader)
    manifest, selected = config.dataset.manifest, config.selected
    per_block = records_per_block(config, selected)
    fixed = config.window.fixed
    keyed = origins.wanted(config)
    # Sharded by window, a pipeline keeps every nth window: no longer back to back.
    back_to_back = fixed and config.window.stride is None and shard.rule != sharding.RECORD

    def file_blocks(filename, index):
        file = (filename, reader.token(index))

        def parse(b):
            return windows.marked(frames(b, file, manifest, selected, block=per_block,
                                         records=keyed))
        if sources.parses_where_read(config):  # in the call that reads and checks the block
            return reader.blocks(filename, index, per_block, then=parse)
        # Blocks of one file must stay in order: deterministic regardless of sloppy_interleave. (Its function is
        # instantiated with every file: on the single-device runtime, local_map.py.)
        return local_map(reader.blocks(filename, index, per_block), parse,
                         num_parallel_calls=config.reading.num_parallel_parses or AUTOTUNE, deterministic=True)

    def make_windows(element):
        buffer, starts, lens = dict(element["buffer"]), element["starts"], element["lens"]
        extras = {}
        if keyed:  # a window is named by its first frame: its record and its step in the record
            extras = origins.extras(config, tf.fill(tf.shape(starts), element["file"]),
                                    tf.gather(buffer.pop(RECORD), starts), tf.gather(buffer.pop(STEP), starts))
        # (An element may hold no window: it is made into none.)
        if back_to_back:  # windows of one size: a reshape of their steps
            size = config.window.min_window
            if not windows.whole(element):  # (after a random offset) a gather of the windows' steps first
                first = tf.concat([starts, [0]], 0)[0]
                # Not a slice: a slice can share the buffer's memory, and rebatch then logs a TensorFlow error
                # ("Tensor RefCount not reliable if buf_ points to a SubBuffer") for every such tensor it takes.
                span = tf.range(first, first + tf.size(lens, out_type=tf.int64) * size)
                buffer = {name: tf.gather(v, span) for name, v in buffer.items()}
            values = {name: tf.reshape(v, [-1, size] + v.shape[1:].as_list()) for name, v in buffer.items()}
            return {"values": values, "lengths": {}, "extras": extras}
        width = config.window.min_window if fixed else tf.reduce_max(tf.concat([lens, [0]], 0))
        positions = starts[:, None] + tf.range(width, dtype=tf.int64)[None, :]
        last = tf.shape(next(iter(buffer.values())), out_type=tf.int64)[0] - 1
        positions = tf.minimum(positions, last)  # the tail past a window's length is padding
        values = {name: tf.gather(v, positions) for name, v in buffer.items()}
        return {"values": values, "lengths": {} if fixed else {name: lens for name in values}, "extras": extras}

    return windows.window_batches(config, shard, batch_size, windows.WindowMaker(
        file_blocks=file_blocks, make_windows=make_windows, max_offset=config.window.stride or config.window.max_window,
        make_in_scan=back_to_back,  # a reshape (after a random offset, a gather first): at most one copy
        unit="steps"))


class ContinuousSequence(Loader):
    """Random-length windows over each file's records concatenated along time, cut from parsed blocks."""

    kind = kind("continuous_sequence")
    units_per_file = staticmethod(units_per_file)
    batches = staticmethod(batches)


LOADER = ContinuousSequence()
