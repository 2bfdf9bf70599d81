"""Blocks of transformed examples, for the stages that regroup them (bucketing, packing)."""
from __future__ import annotations

from typing import Callable

import tensorflow as tf

from batchloaders.core.model import LoaderConfig
from batchloaders.loaders.base import decoded
from batchloaders.read.sources import AUTOTUNE


def parallel(config: LoaderConfig) -> dict:
    """The map options of a per-block call: the config's parse parallelism and determinism."""
    reading = config.reading
    return dict(num_parallel_calls=reading.num_parallel_parses or AUTOTUNE, deterministic=not reading.sloppy_interleave)


def transformed(config: LoaderConfig, decode, zero_tails: frozenset, *, names, where: str,
                checks: Callable | None = None) -> Callable:
    """Loader element -> {"values", "lengths"} of tensors ``names`` of its block of examples, transformed and
    not yet padded; ``checks(batch)``: assertions to run first (a stage's own, on the whole Batch)."""
    def run(element):
        batch = decoded(element, config, decode, zero_tails)
        values = {n: batch.values[n] for n in names}
        guards = checks(batch) if checks is not None else []
        if guards:
            with tf.control_dependencies(guards):
                values = {n: tf.identity(v) for n, v in values.items()}
        lengths = {n: tf.cast(batch.lengths[n], tf.int64) for n in names if n in batch.lengths}
        # Regrouping cuts each example's steps by its length: a registered step or secondary feature whose
        # lengths run past its values would otherwise fail deep in TensorFlow, naming nothing.
        for n, l in lengths.items():
            longest, width = tf.reduce_max(tf.concat([l, [0]], 0)), tf.shape(values[n], out_type=tf.int64)[1]
            with tf.control_dependencies([tf.debugging.Assert(longest <= width, [tf.strings.format(
                    f"{config.source}: {where}: tensor {n!r} has an example of {{}} steps whose values hold "
                    f"{{}}: expected every length within its values (a processing step or secondary feature "
                    "made lengths longer than what it gave)", [longest, width])])]):
                values[n] = tf.identity(values[n])
        return {"values": values, "lengths": lengths}
    return run
