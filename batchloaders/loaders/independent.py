"""``independent``: every record is one example.

Records are shuffled and batched while still serialized, then each batch is
parsed with one vectorized call (see read/parsing.py).
"""
from __future__ import annotations

import numpy as np
import tensorflow as tf

from batchloaders.read import determinism
from batchloaders.read import global_order, origins, sharding, sources
from batchloaders.read.parsing import parse_batch
from batchloaders.transform.graphs import as_written
from batchloaders.core.model import LoaderConfig
from batchloaders.config.kinds import kind
from batchloaders.loaders.registry import Loader

AUTOTUNE = tf.data.AUTOTUNE


def source(config: LoaderConfig, shard: sharding.Shard, batch_size: int, reader, finish=None):
    """Batches, and the function that parses one (identity when they come parsed, None when ``finish``
    made them the model's already).

    Unshuffled, records stay in blocks up to batching (several files alternate block by block), and
    fixed-size features are parsed a block at a time (``num_parallel_parses`` blocks at once): fewer,
    larger parse calls; ``finish`` (base.finisher, offered when it acts on each example alone) runs
    there too, and the batches need no map stage of their own. Otherwise the compiler runs the parse
    in the same map as secondary features, steps and padding: one map stage per batch.
    """
    drop = config.drop_remainder or config.epochs is None
    manifest, selected = config.dataset.manifest, config.selected
    # Sharded by record, each block keeps this pipeline's records, named one by one (the paths below).
    keep = sharding.keep_records(shard)

    def files():
        return sources.file_names(config, shard, repeat=False)

    def parse(serialized, names):
        values, lengths = parse_batch(serialized, manifest, selected, names=names)
        return {"values": values, "lengths": lengths}

    if global_order.enabled(config):
        # Each batch's records are read at their offsets, in the epoch's permuted order (global_order.py).
        by_offset = reader.by_offset
        ids = global_order.ids(config, units_per_file(config, by_offset.counts), shard.pipeline, shard.pipelines)
        read = ids.rebatch(batch_size, drop_remainder=drop).map(
            as_written(lambda units, epochs: by_offset.read(units, epochs)), num_parallel_calls=config.reading.num_parallel_reads or AUTOTUNE,
            deterministic=True)
        return read, _decoder(config, reader)
    fixed = not manifest.allow_var_len and not any(f.var_len for f in selected.values())
    if sources.reads_in_blocks(config) and fixed and keep is None:
        # A parsed block holds [k, ...] tensors of one shape, so rebatch cuts them as it cuts records.
        def per_block(b):
            count = tf.size(b["serialized"])
            parsed = parse(b["serialized"], reader.block_names(b["file"], b["first"], count))
            if origins.wanted(config):  # (chunking: finish is None)
                records = b["first"] + tf.range(tf.cast(count, tf.int64))
                parsed["extras"] = origins.extras(config, tf.fill([count], b["file"]), records)
            return finish(parsed) if finish is not None else parsed

        def epoch_of_blocks():
            if sources.parses_where_read(config):
                # Parsed in the thread that reads the file, in an inline map (no hand-over to the
                # inter-op pool): as many blocks are parsed at once as files are open.
                return sources.read_blocks(config, reader, files(), form=sources.COMPACT, then=per_block)
            return sources.read_blocks(config, reader, files(), form=sources.COMPACT).map(
                as_written(per_block), num_parallel_calls=config.reading.num_parallel_parses or AUTOTUNE,
                deterministic=not config.reading.sloppy_interleave)
        batches = sources.repeat_epochs(config, epoch_of_blocks, shard, blocks=True).rebatch(batch_size, drop_remainder=drop)
        return batches, (None if finish is not None else _parsed)
    return records(config, shard, batch_size, reader)


def records(config: LoaderConfig, shard: sharding.Shard, batch_size: int, reader):
    """(blocks of up to ``batch_size`` serialized records ``{"serialized", "file", "record"}`` in the order
    batches take them, the function that parses one): the records before any parsing, for the configs
    parsed in the compiler's map stage, and for a mixture that draws records before parsing them
    (loaders/mixture.py)."""
    drop = config.drop_remainder or config.epochs is None
    keep = sharding.keep_records(shard)

    def files():
        return sources.file_names(config, shard, repeat=False)

    if sources.reads_in_blocks(config):
        # Blocks of one file after another, or of several alternating: rebatch cuts them into batches
        # without a step per record (alternating record by record cost more CPU: docs/decisions/performance.md).
        blocks = sources.repeat_epochs(config, lambda: sources.read_blocks(config, reader, files(), keep=keep),
                                       shard, blocks=True).rebatch(batch_size, drop_remainder=drop)
        return blocks, _decoder(config, reader)

    def epoch_of_records():
        records = sources.read_blocks(config, reader, files(), form=sources.RECORDS, keep=keep)
        if config.shuffling.shuffle:  # each epoch's buffer from its own seed (determinism.py)
            records = records.shuffle(config.shuffling.num_shuffle_buffer_elements,
                                      seed=determinism.seed(config.seed, determinism.EXAMPLES),
                                      reshuffle_each_iteration=determinism.reshuffles())
        return records
    batches = sources.repeat_epochs(config, epoch_of_records, shard, blocks=False).batch(batch_size,
                                                                                          drop_remainder=drop)
    return batches, _decoder(config, reader)


def _decoder(config: LoaderConfig, reader):
    """The function parsing a block of serialized records ``{"serialized", "file", "record"}``."""
    manifest, selected = config.dataset.manifest, config.selected

    def decode(records):
        values, lengths = parse_batch(records["serialized"], manifest, selected,
                                      names=reader.record_names(records["file"], records["record"]))
        parsed = {"values": values, "lengths": lengths}
        if origins.wanted(config):
            parsed["extras"] = origins.extras(config, records["file"], records["record"])
        return parsed
    return decode


def units_per_file(config: LoaderConfig, counts) -> np.ndarray:
    """Examples of a global shuffle's epoch per file: every record."""
    return np.asarray(counts, np.int64)


def _parsed(batch):
    return batch


def zero_tails(config: LoaderConfig) -> frozenset:
    """Feature lists: parse_sequence_example pads them with zeros (raw ones: zero bytes, see
    parsing.decode) to the batch's longest, so padding with zeros has nothing left to do."""
    return frozenset(name for name, f in config.selected.items() if f.var_len)


def batches(config: LoaderConfig, shard: sharding.Shard, batch_size: int, reader) -> tf.data.Dataset:
    """Parsed batches ({"values", "lengths"} dicts), as every loader provides."""
    records, parse = source(config, shard, batch_size, reader)
    return records.map(as_written(parse), num_parallel_calls=config.reading.num_parallel_parses or AUTOTUNE,
                       deterministic=not config.reading.sloppy_interleave)


class Independent(Loader):
    """Every record one example: its blocks parsed in the compiler's map stage (``source``), or a block at a
    time where they are read."""

    kind = kind("independent")
    reads_records = True
    source = staticmethod(source)
    records = staticmethod(records)
    units_per_file = staticmethod(units_per_file)
    zero_tails = staticmethod(zero_tails)
    batches = staticmethod(batches)


LOADER = Independent()
