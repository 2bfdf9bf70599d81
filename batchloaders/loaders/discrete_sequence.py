"""``discrete_sequence``: windows of a random number of whole, consecutive records of each file.

Windows are planned on the serialized records (``windows.stream`` carries the
records of an unfinished window from block to block), so the sequential part
of the pipeline never parses. Each block of planned windows is then parsed
with one vectorized call: feature lists are concatenated along their first
axis per window, context features are stacked one row per record. The
per-record lengths of every window go to ``extras["record_lengths"]`` for the
``segment_ids`` and ``boundaries`` secondary features.
"""
from __future__ import annotations

import numpy as np
import tensorflow as tf

from batchloaders.read import block_sizes
from batchloaders.read import global_order, origins, permutation, sharding
from batchloaders.read.parsing import parse_batch
from batchloaders.transform.graphs import as_written, masked
from batchloaders.loaders import windows
from batchloaders.core.model import LoaderConfig
from batchloaders.config.kinds import kind
from batchloaders.loaders.registry import Loader


def assemble(serialized, counts, manifest, selected: dict, fixed_count: int | None, names=None) -> dict:
    """Parse the records of consecutive windows and build them.

    ``serialized`` [m] holds the records of the windows back to back and
    ``counts`` [n] how many records each window takes (sum m). Returns
    ``{"values", "lengths", "extras"}`` with a leading window axis [n], every tensor cut to the
    longest window and filled with its dtype's default value (0, "", false) after each window's
    end (see :func:`zero_tails`).
    """
    values, lengths = parse_batch(serialized, manifest, selected, names=names)
    records = tf.size(serialized, out_type=tf.int64)
    width = fixed_count if fixed_count is not None else tf.reduce_max(counts)
    slot = tf.range(width, dtype=tf.int64)[None, :]
    valid = slot < counts[:, None]  # [n, width]: which slots hold a record
    out, out_lengths, record_lengths = {}, {}, {}
    for name, feature in selected.items():
        v = values[name]
        if not feature.var_len:  # one row per record
            if fixed_count is not None:  # every slot holds one: a reshape, no copy
                out[name] = tf.reshape(v, tf.concat([[-1, fixed_count], tf.shape(v)[1:]], 0))
            else:  # slots past a window's last record take a zero row appended to v
                record = tf.where(valid, tf.cumsum(counts, exclusive=True)[:, None] + slot, records)
                out[name] = tf.gather(_with_zero_row(v), record)
                out_lengths[name] = counts
            record_lengths[name] = tf.cast(valid, tf.int64)
            continue
        per_record = lengths[name]
        if fixed_count is not None:
            steps = tf.reshape(per_record, [-1, fixed_count])
        else:
            at = tf.minimum(tf.cumsum(counts, exclusive=True)[:, None] + slot, records - 1)
            steps = tf.where(valid, tf.gather(per_record, at), tf.constant(0, tf.int64))
        total = tf.reduce_sum(steps, axis=1)
        # The windows' steps back to back, then one row per window filled with the default value: two copies.
        flat = masked(v, tf.sequence_mask(per_record, tf.shape(v)[1]))
        out[name] = tf.RaggedTensor.from_row_lengths(flat, total, validate=False).to_tensor()
        out_lengths[name] = total
        record_lengths[name] = steps
    return {"values": out, "lengths": out_lengths, "extras": {"record_lengths": record_lengths}}


def _with_zero_row(x: tf.Tensor) -> tf.Tensor:
    """``x`` [k, ...] with a row of the dtype's default value (0, "", false) appended: [k + 1, ...]."""
    return tf.concat([x, tf.zeros(tf.concat([[1], tf.shape(x)[1:]], 0), x.dtype)], 0)


def zero_tails(config: LoaderConfig) -> frozenset:
    """Every tensor: :func:`assemble` fills them with the default value past each window's end, so
    padding with that value has nothing left to do (see batching.Batch)."""
    return frozenset(config.selected)


records_per_block = block_sizes.discrete  # (block_sizes.py: no TensorFlow there, for describe)


def source(config: LoaderConfig, shard: sharding.Shard, batch_size: int, reader, finish=None):
    """Batches of planned windows, still serialized, and the function that parses one (``finish`` unused).

    A planned window is ``{"serialized": [w], "record": [w], "count", "file"}`` (its records, their
    numbers in the file, how many of its w slots hold one, the file's index; the other slots hold "" and
    -1). w is max_window (block_sizes.discrete_slots_fixed), else the widest window of its block, and
    batching pads to the widest. Parsing a whole batch of windows at once, in the compiler's one map
    stage per batch, costs less than parsing each block's windows, then copying them into windows and
    again into batches (docs/decisions/performance.md).
    """
    manifest, selected = config.dataset.manifest, config.selected
    per_block = records_per_block(config)
    fixed_count = config.window.min_window if config.window.fixed else None

    def file_blocks(filename, index):
        def numbered(block):
            return windows.marked({"serialized": block["serialized"], "record": block["first"] + tf.range(
                tf.size(block["serialized"], out_type=tf.int64))})
        return reader.blocks(filename, index, per_block, then=numbered)

    # Every window gets max_window slots, so that unshuffled windows are batched by rebatch, not one by one
    # (the parse reads only each window's count of them: its output does not depend on the slots).
    width = config.window.max_window if block_sizes.discrete_slots_fixed(config) else None

    def plan(element):
        buffer, counts = element["buffer"], element["lens"]
        # Windows of one size each where the last ended: the buffer holds their records and nothing else
        # (windows.WHOLE), a reshape. Otherwise the windows' records, back to back: one copy of them (a gather
        # copies every string's bytes), and none of the empty slots. (Never a slice of the buffer: a slice can
        # share the buffer's memory, and rebatch logs a TensorFlow error for every such string tensor it
        # takes.) An element may hold no window: it plans none.
        planned = {"count": counts, "file": tf.fill(tf.shape(counts), element["file"])}
        if fixed_count is not None and windows.whole(element):  # the buffer holds the windows and nothing else
            for name in ("serialized", "record"):
                planned[name] = tf.reshape(buffer[name], [-1, fixed_count])
            return planned
        at = tf.ragged.range(element["starts"], element["starts"] + counts).flat_values
        for name, fill in (("serialized", ""), ("record", tf.constant(-1, tf.int64))):
            records = tf.gather(buffer[name], at)
            planned[name] = (tf.reshape(records, [-1, fixed_count]) if fixed_count is not None else
                             tf.RaggedTensor.from_row_lengths(records, counts, validate=False).to_tensor(
                                 fill, shape=[None, width]))
        return planned

    def parse(batch):
        valid = tf.range(tf.shape(batch["serialized"], out_type=tf.int64)[1])[None, :] < batch["count"][:, None]
        files = tf.broadcast_to(batch["file"][:, None], tf.shape(valid))
        # Windows of one size fill every slot: a reshape flattens them without copying the records.
        flat = (lambda x: tf.reshape(x, [-1])) if fixed_count is not None else (lambda x: masked(x, valid))
        names = reader.record_names(flat(files), flat(batch["record"]))
        out = assemble(flat(batch["serialized"]), batch["count"], manifest, selected, fixed_count, names)
        if origins.wanted(config):  # a window's first record names it (windows never overlap)
            out["extras"].update(origins.extras(config, batch["file"], batch["record"][:, 0]))
        return out

    if global_order.enabled(config):
        planned = _global_windows(config, shard, batch_size, reader.by_offset)
        return planned, parse
    planned = windows.window_batches(config, shard, batch_size, windows.WindowMaker(
        file_blocks=file_blocks, make_windows=plan, max_offset=config.window.max_window, unit="records",
        make_in_scan=True,  # windows never overlap: the plan holds each record once
        one_shape=width is not None))
    return planned, parse


def units_per_file(config: LoaderConfig, counts) -> np.ndarray:
    """Windows of a global shuffle's epoch per file: file f's records cut into ``counts[f] // k`` windows of k (a
    file's last records that fill no window are left out, as a file shorter than min_window gives none)."""
    return np.asarray(counts, np.int64) // config.window.min_window


def _global_windows(config: LoaderConfig, shard: sharding.Shard, batch_size: int, by_offset) -> tf.data.Dataset:
    """Batches of planned windows in a global shuffle's order: window j of file f holds records
    [j * k, (j + 1) * k) of it, read at their offsets (global_order.py)."""
    k = config.window.min_window
    windows_per_file = units_per_file(config, by_offset.counts)
    per_file = tf.constant(windows_per_file, tf.int64)
    file_starts = tf.constant(by_offset.starts[:-1], tf.int64)
    ids = global_order.ids(config, windows_per_file, shard.pipeline, shard.pipelines)
    drop = config.drop_remainder or config.epochs is None

    def read(window_ids, epochs):
        file, window = permutation.file_and_record(window_ids, per_file)
        first = tf.gather(file_starts, file) + window * k
        records = by_offset.read(tf.reshape(first[:, None] + tf.range(k, dtype=tf.int64)[None, :], [-1]), epochs)
        count = tf.size(window_ids)
        return {"serialized": tf.reshape(records["serialized"], [count, k]),
                "record": tf.reshape(records["record"], [count, k]),
                "count": tf.fill([count], tf.constant(k, tf.int64)), "file": file}
    return ids.rebatch(batch_size, drop_remainder=drop).map(
        as_written(read), num_parallel_calls=config.reading.num_parallel_reads or tf.data.AUTOTUNE, deterministic=True)


def batches(config: LoaderConfig, shard: sharding.Shard, batch_size: int, reader) -> tf.data.Dataset:
    """Parsed batches ({"values", "lengths", "extras"} dicts), as every loader provides."""
    planned, parse = source(config, shard, batch_size, reader)
    return planned.map(as_written(parse), num_parallel_calls=config.reading.num_parallel_parses or tf.data.AUTOTUNE,
                       deterministic=not config.reading.sloppy_interleave)


class DiscreteSequence(Loader):
    """Windows of whole records, planned on the serialized records and parsed a batch at a time (``source``)."""

    kind = kind("discrete_sequence")
    source = staticmethod(source)
    units_per_file = staticmethod(units_per_file)
    zero_tails = staticmethod(zero_tails)
    batches = staticmethod(batches)


LOADER = DiscreteSequence()
