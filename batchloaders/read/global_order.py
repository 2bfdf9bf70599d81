"""``shuffle_scope: global``: every epoch is one permutation of all records, read at their offsets.

The run is one stream of global positions ``g``: epoch ``g // n``, position ``g % n`` of that epoch,
``n`` the records of the dataset. Position ``p`` of epoch ``e`` reads record
``index_shuffle(p, key(seed, e))`` (permutation.py): no list of record ids is held, and any position's
record is known without reading what comes before it.

Input pipeline ``k`` of ``N`` reads the positions ``g`` with ``g % N == k`` (sharding by position: it
reads only its own records). When the ``N`` pipelines have each given ``c`` batches of ``B`` examples,
the positions ``[0, c * B * N)`` are exactly the ones consumed, whatever ``N`` was, so a run can go on
from there with another number of pipelines (:func:`start_of`): every remaining position once.

A run that starts at ``g0`` (a restore) builds its first epoch from ``g0 % n``: nothing before is read.
"""
from __future__ import annotations

import tensorflow as tf

from batchloaders.read import determinism, permutation
from batchloaders.core.model import LoaderConfig
from batchloaders.transform.graphs import as_written

GLOBAL = "global"
IDS_PER_STEP = 1024  # positions permuted per vectorized call (then rebatched into batches)


def enabled(config: LoaderConfig) -> bool:
    """Whether ``config`` shuffles all records of each epoch at once."""
    return config.shuffling.shuffle and config.shuffling.scope == GLOBAL


def positional(config: LoaderConfig) -> bool:
    """Whether a position of the run's order fixes the batches: a global shuffle batched as the examples come
    (no regroup stage, which would fill its batches by length or budget). A restore then starts reading at the
    position, with any batch size and number of input pipelines; otherwise it replays the batches."""
    return enabled(config) and config.regroup is None


def first_at_or_after(g: int, pipeline: int, pipelines: int) -> int:
    """The first position >= ``g`` that pipeline ``pipeline`` of ``pipelines`` reads."""
    return g + (pipeline - g) % pipelines


def examples(n: int, epochs: int | None, start: int, pipeline: int, pipelines: int) -> int | None:
    """Examples pipeline ``pipeline`` gives from global position ``start`` to the run's end (None: endless)."""
    if epochs is None:
        return None
    first = first_at_or_after(start, pipeline, pipelines)
    return max(0, -(-(epochs * n - first) // pipelines))


def start_of(n: int, position: int) -> tuple[int, int]:
    """(epoch, position in it) of global position ``position``."""
    return (position // n, position % n) if n else (0, 0)


def ids(config: LoaderConfig, n: int, pipeline: int, pipelines: int) -> tf.data.Dataset:
    """Vectors of global record ids, this pipeline's positions in order from the start the pipeline is built
    for (determinism.started_at: (epoch, position); else the beginning), over the config's epochs."""
    start = determinism.started_at() or (0, 0)
    first_epoch, first_position = int(start[0]), int(start[1])
    epochs = (tf.data.Dataset.range(first_epoch, config.epochs) if config.epochs is not None
              else tf.data.Dataset.counter(first_epoch))
    count = tf.constant(n, tf.int64)

    def one_epoch(epoch):
        begin = tf.where(tf.equal(epoch, first_epoch), tf.constant(first_position, tf.int64), 0)
        first = begin + tf.math.floormod(pipeline - epoch * count - begin, pipelines)
        key = determinism.seed(config.seed, determinism.EXAMPLES, epoch=epoch)
        if key is None:  # built outside per_iterator without a seed: a fresh permutation
            key = tf.random.uniform([], maxval=determinism.MAX_SEED, dtype=tf.int64)
        positions = tf.data.Dataset.range(first, count, pipelines).batch(IDS_PER_STEP)
        return positions.map(as_written(lambda p: permutation.record_at(p, count, key, epoch)))
    return epochs.flat_map(as_written(one_epoch))
