"""``independent``: every record is one example.

Records are shuffled and batched while still serialized, then each batch is
parsed with one vectorized call (see features/parsing.py).
"""
from __future__ import annotations

import tensorflow as tf

from batchloaders import sources
from batchloaders.features.parsing import parse_batch
from batchloaders.spec.model import LoaderConfig

AUTOTUNE = tf.data.AUTOTUNE


def source(config: LoaderConfig, input_context, batch_size: int, reader):
    """Batches, and the function that parses one (identity when they come parsed).

    Unshuffled, records stay in blocks up to batching (several files alternate block by block), and
    fixed-size features are parsed a block at a time where the block is read, in each file's own
    thread: fewer, larger parse calls, spread over the open files. Otherwise the compiler runs the
    parse in the same map as secondary features, steps and padding: one map stage per batch.
    """
    files = sources.file_names(config, input_context, repeat=False)
    drop = config.drop_remainder or config.epochs is None
    manifest, selected = config.dataset.manifest, config.selected

    def parse(serialized, names):
        values, lengths = parse_batch(serialized, manifest, selected, names=names)
        return {"values": values, "lengths": lengths}

    if sources.reads_in_blocks(config) and not manifest.allow_var_len:
        # A parsed block holds [k, ...] tensors of one shape, so rebatch cuts them as it cuts records.
        blocks = sources.read_blocks(config, reader, files, per_block=lambda serialized, file, records: parse(
            serialized, reader.record_names(file, records)))
        return sources.repeat_epochs(config, blocks).rebatch(batch_size, drop_remainder=drop), _parsed
    if sources.reads_in_blocks(config):
        # Blocks of one file after another, or of several alternating: rebatch cuts them into batches
        # without a step per record (alternating record by record cost 1.3-1.6x the CPU: README, Performance).
        blocks = sources.read_blocks(config, reader, files)
        records = sources.repeat_epochs(config, blocks).rebatch(batch_size, drop_remainder=drop)
    else:
        records = sources.read_blocks(config, reader, files, unbatch=True)
        if config.shuffle:
            records = records.shuffle(config.num_shuffle_buffer_elements, seed=config.seed,
                                      reshuffle_each_iteration=True)
        records = sources.repeat_epochs(config, records).batch(batch_size, drop_remainder=drop)
    return records, lambda records: parse(records["serialized"],
                                          reader.record_names(records["file"], records["record"]))


def _parsed(batch):
    return batch


def zero_tails(config: LoaderConfig) -> frozenset:
    """Feature lists: parse_sequence_example pads them with zeros (raw ones: zero bytes, see
    parsing.decode) to the batch's longest, so padding with zeros has nothing left to do."""
    return frozenset(name for name, f in config.selected.items() if f.var_len)


def batches(config: LoaderConfig, input_context, batch_size: int, reader) -> tf.data.Dataset:
    """Parsed batches ({"values", "lengths"} dicts), as every loader provides."""
    records, parse = source(config, input_context, batch_size, reader)
    return records.map(parse, num_parallel_calls=config.num_parallel_parses or AUTOTUNE,
                       deterministic=not config.sloppy_interleave)
