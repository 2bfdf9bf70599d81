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
    """Batches of serialized records and the function that parses one.

    The compiler runs the parse in the same map as secondary features, steps
    and padding: one map stage per batch, as a hand-written pipeline would.
    """
    files = sources.file_names(config, input_context, repeat=False)
    drop = config.drop_remainder or config.epochs is None
    if sources.reads_in_blocks(config):
        # Blocks of one file after another: rebatch cuts them into batches without a step per record.
        blocks = sources.read_blocks(config, reader, files, unbatch=False)
        records = sources.repeat_epochs(config, blocks).rebatch(batch_size, drop_remainder=drop)
    else:
        records = sources.read_blocks(config, reader, files, unbatch=True)
        if config.shuffle:
            records = records.shuffle(config.num_shuffle_buffer_elements, seed=config.seed,
                                      reshuffle_each_iteration=True)
        records = sources.repeat_epochs(config, records).batch(batch_size, drop_remainder=drop)
    manifest, selected = config.dataset.manifest, config.selected

    def parse(records):
        values, lengths = parse_batch(records["serialized"], manifest, selected,
                                      names=reader.record_names(records["file"], records["record"]))
        return {"values": values, "lengths": lengths}

    return records, parse


def zero_tails(config: LoaderConfig) -> frozenset:
    """Feature lists: parse_sequence_example pads them with zeros (raw ones: zero bytes, see
    parsing.decode) to the batch's longest, so padding with zeros has nothing left to do."""
    return frozenset(name for name, f in config.selected.items() if f.var_len)


def batches(config: LoaderConfig, input_context, batch_size: int, reader) -> tf.data.Dataset:
    """Parsed batches ({"values", "lengths"} dicts), as every loader provides."""
    records, parse = source(config, input_context, batch_size, reader)
    return records.map(parse, num_parallel_calls=config.num_parallel_parses or AUTOTUNE,
                       deterministic=not config.sloppy_interleave)
