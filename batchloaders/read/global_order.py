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

With ``shuffle_window_files: K`` the epoch draws a permutation of the files too (from the seed and the epoch,
with a key of its own), cuts it into windows of K consecutive files and gives all units of window 0 in a
permutation of their own, then window 1's, and so on (permutation.file_windows): still one unit per position,
known from the position alone, so restores and sharding by position are unchanged. The windows are read
one after another; with K >= the number of files, the order is the one without windows.
"""
from __future__ import annotations

import numpy as np
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


def ids(config: LoaderConfig, units, pipeline: int, pipelines: int) -> tf.data.Dataset:
    """Pairs of vectors (global unit ids, their epochs): the ids (files in order, each file's units in order) of
    this pipeline's positions in
    order from the start the pipeline is built for (determinism.started_at: (epoch, position); else the
    beginning), over the config's epochs. ``units``: the units (records or windows) of each file, a NumPy int64
    array; with ``shuffling.window_files`` the epoch goes window of files by window (:func:`_windowed`)."""
    units = np.asarray(units, np.int64)
    start = determinism.started_at() or (0, 0)
    first_epoch, first_position = int(start[0]), int(start[1])
    epochs = (tf.data.Dataset.range(first_epoch, config.epochs) if config.epochs is not None
              else tf.data.Dataset.counter(first_epoch))
    count = tf.constant(int(units.sum()), tf.int64)
    window_files = config.shuffling.window_files

    def one_epoch(epoch):
        begin = tf.where(tf.equal(epoch, first_epoch), tf.constant(first_position, tf.int64), 0)
        first = begin + tf.math.floormod(pipeline - epoch * count - begin, pipelines)
        key = _key(config, determinism.EXAMPLES, epoch)
        positions = tf.data.Dataset.range(first, count, pipelines).batch(IDS_PER_STEP)
        if window_files is None:
            return positions.map(as_written(lambda p: (permutation.record_at(p, count, key, epoch), _each(p, epoch))))
        windows = permutation.file_windows(units, window_files, (_key(config, determinism.FILES, epoch), key), epoch)
        return positions.map(as_written(lambda p: (permutation.windowed_at(p, windows), _each(p, epoch))))
    return epochs.flat_map(as_written(one_epoch))


def _each(positions, epoch) -> tf.Tensor:
    """The epoch of each position (a reader fetching files ahead follows the epoch's order of files with it)."""
    return tf.fill(tf.shape(positions), tf.cast(epoch, tf.int64))


def _key(config: LoaderConfig, purpose: int, epoch) -> tf.Tensor:
    """The epoch's key of one permutation (determinism.seed); built outside per_iterator without a seed: a fresh
    one."""
    key = determinism.seed(config.seed, purpose, epoch=epoch)
    if key is None:
        key = tf.random.uniform([], maxval=determinism.MAX_SEED, dtype=tf.int64)
    return key


def epoch_file_order(config: LoaderConfig, num_files: int, epoch: int) -> list[int]:
    """The files of epoch ``epoch`` in the order a global shuffle reads them: window of files by window
    (``shuffling.window_files``; without it, one window of all files), each window's files in ascending order
    (its units are read permuted among them, so all of a window's files are needed from its first positions).
    The same permutation the pipeline draws, for fetching files ahead (files without units included).

    Args:
        config: the checked config; its seed fixes the order.
        num_files: the config's data files.
        epoch: the epoch's number.

    Returns:
        The files' indexes, each once.

    Raises:
        ValueError: for a config without a seed: each ``input_fn()`` call then draws its own order, which is
            not known before its pipeline runs.
    """
    if config.seed is None:
        raise ValueError("epoch_file_order needs a config with a seed: without one each input_fn() call draws "
                         "its own order")
    window = config.shuffling.window_files or max(num_files, 1)
    epoch = tf.constant(epoch, tf.int64)
    return [int(f) for f in permutation.file_order(num_files, window, _key(config, determinism.FILES, epoch), epoch)]
