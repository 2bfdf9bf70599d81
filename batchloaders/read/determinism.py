"""Same seed, same batches: from every ``input_fn()`` call, every iterator, and after a restore.

Every random choice takes its seed from :func:`seed`: a stateless function of the run's base seed, the
epoch and what the draw is for (file order, a shuffle buffer, one file's windows). tf.data's own
per-epoch reseeding (``reshuffle_each_iteration``, ``Dataset.random(rerandomize_each_iteration)``) draws
from a seed generator shared by every iterator of a dataset whose position a restored iterator does not
get back: a restore before an epoch boundary gave the next epoch another order. Here each epoch's
pipeline is built for its epoch number (:func:`repeat_epochs`), inside a pipeline built per iterator
(:func:`per_iterator`) for its base seed: the config's seed, or without one a seed ``Dataset.random``
draws once per ``input_fn()`` call, kept in the iterator's checkpoint (flat_map saves its element).

Under a tf.data service (``flat``) the pipeline keeps the shape the service's sharding follows: the
file names at its source and the epochs a ``Dataset.repeat``, no flat_map over seeds or epoch numbers
(dynamic mode hands out the elements of the pipeline's source, the file names; file mode traces the
pipeline back to them). Its shuffles then reshuffle each epoch from the seed as tf.data does: the
order is the service's anyway, and its iterators are not checkpointed.
"""
from __future__ import annotations

import contextlib
import operator
import threading
from typing import Any, Callable, Mapping

import tensorflow as tf

from batchloaders.errors import BatchLoaderError, ConfigError, Problem
from batchloaders.config.kinds import kind
from batchloaders.config.stage_rules import of_spec
from batchloaders.transform.graphs import as_written

MAX_SEED = 2**63 - 1


# What a draw is for: the second half of its stateless seed (with the file's index for WINDOWS).
FILES, EXAMPLES, WINDOWS, CHUNKS, MIXING = 1, 2, 3, 4, 5
SOURCES = 1 << 20  # added to a mixture source's index: its base seed's key (for_source)


class _Scope(threading.local):
    """What the pipeline being built in this thread draws from ("base", "epoch": tensors; "nested", "flat": see
    per_iterator, repeat_epochs). Per thread: input_fn may build pipelines in several threads at once."""

    def __init__(self):
        self.values: dict = {}


_local = _Scope()


@contextlib.contextmanager
def _using(**values):
    scope = _local.values
    saved = dict(scope)
    scope.update(values)
    try:
        yield
    finally:
        scope.clear()
        scope.update(saved)


def _without_global_seed() -> None:
    """In the dataset function being traced: leave TensorFlow's global seed (tf.random.set_seed,
    keras.utils.set_random_seed) out of ``Dataset.shuffle``'s seeds, which are all ours; with it a
    shuffle's seed pair is (global seed, ours), and a global seed of 0 made Python compare our seed
    tensor with 0 (random_seed.get_seed), which fails while tracing."""
    tf.compat.v1.get_default_graph().seed = None


@contextlib.contextmanager
def for_source(index: int):
    """Build a mixture's source ``index``: its draws from a base seed of its own, a stateless function of the
    run's base seed and the index (the same files read by two sources are not shuffled alike)."""
    base = _local.values.get("base")
    if base is None:
        yield
        return
    own = tf.random.stateless_uniform([], seed=tf.stack([base, tf.constant(SOURCES + index, tf.int64)]),
                                      minval=None, maxval=None, dtype=tf.int64)
    with _using(base=own):
        yield


def draws(config) -> bool:
    """Whether the pipeline of ``config`` (a LoaderConfig) draws anything at random: shuffles (of files,
    examples or windows, chunks) or window lengths. One that draws nothing gives the same batches in
    every epoch order and from every iterator without being rebuilt per iterator and per epoch, so it is
    built flat (:func:`per_iterator`), which shortens every iterator's start-up (docs/decisions/performance.md)."""
    random_windows = kind(config.type).sequence and not config.window.fixed
    stage = of_spec(config.regroup)
    stage_draws = stage is not None and stage.draws_at_random(config.regroup)
    return bool(config.shuffling.shuffle or random_windows or stage_draws or getattr(config, "sources", ()))


def per_iterator(build: Callable[[], tf.data.Dataset], seed: int | None, *, flat: bool = False,
                 start: tuple[int, int] | None = None) -> tf.data.Dataset:
    """The dataset ``build()`` returns, built anew for every iterator, its draws from ``seed`` (None: a seed
    drawn per ``input_fn()`` call, kept in the iterator's checkpoint). ``flat`` (a tf.data service runs the
    pipeline): ``build()`` once, its epochs repeated, its draws from ``seed`` as tf.data makes them (see above).
    ``start``: (epoch, examples of it already consumed): the pipeline begins there (see :func:`repeat_epochs`)."""
    if flat:
        with _using(flat=True, start=start):
            return build()
    if seed is not None:  # every iterator draws from the same seed: nothing to build per iterator
        with _using(base=tf.constant(seed, tf.int64), epoch=tf.constant(0, tf.int64), start=start):
            return build()
    bases = tf.data.Dataset.random().take(1)

    raised = []

    @as_written
    def one(base):
        _without_global_seed()
        with _using(base=base, epoch=tf.constant(0, tf.int64), start=start):
            try:
                return build()
            except Exception as error:  # a ConfigError of a step or plugin, not autograph's wrapper of it
                raised.append(error)
                raise
    try:
        return bases.flat_map(one)
    except Exception:
        if raised:
            raise _original(raised[0]) from None
        raise


def _original(error: BaseException) -> BaseException:
    """The first of our own errors (BatchLoaderError, PluginError) in ``error``'s chain, else ``error``."""
    seen = error
    while seen is not None:
        if isinstance(seen, BatchLoaderError) or type(seen).__module__.startswith("batchloaders"):
            return seen
        seen = seen.__cause__ or seen.__context__
    return error


def repeat_epochs(epochs: int | None, make: Callable[[], tf.data.Dataset],
                  skip: Callable[[tf.data.Dataset, int], tf.data.Dataset] | None = None) -> tf.data.Dataset:
    """``make()`` once per epoch (``epochs`` None: without end), each built for its epoch's draws.

    Inside another epoch loop (chunking and segmenting repeat a source of one epoch) the source is
    that loop's epoch: ``make()`` as it is. Built to start part-way (:func:`per_iterator`'s ``start``,
    a replay's restore), the epochs before the start epoch are not made at all and ``skip(dataset, n)``
    drops the first ``n`` examples of the start epoch's."""
    if _local.values.get("nested"):
        if epochs != 1:
            raise ValueError(f"an epoch loop inside another repeats {epochs} epochs: expected 1")
        return make()
    start = _local.values.get("start") if skip is not None else None
    if _local.values.get("flat"):  # (per_iterator): one epoch's pipeline, repeated; an empty pass ends the repeat
        with _using(nested=True):
            if start is None:
                return make().repeat(epochs)
            first, count = start  # every epoch is the same: the rest of one, then the epochs left
            return skip(make(), count).concatenate(make().repeat(None if epochs is None else epochs - first - 1))

    @as_written
    def one(epoch):
        _without_global_seed()
        with _using(epoch=epoch, nested=True):
            return make()
    if start is not None:
        first, count = start
        rest = (tf.data.Dataset.range(first + 1, epochs) if epochs is not None
                else tf.data.Dataset.counter(first + 1))  # the data gave batches before: no empty-pass guard
        return tf.data.Dataset.from_tensors(tf.constant(first, tf.int64)).flat_map(
            as_written(lambda epoch: skip(one(epoch), count))).concatenate(rest.flat_map(one))
    if epochs is not None:
        return tf.data.Dataset.range(epochs).flat_map(one)

    @as_written
    def goes_on(epoch):
        # Data giving nothing would make endless epochs spin forever (Dataset.repeat ends after an empty
        # pass): before epoch 1, look again for epoch 0's first element (once per iterator; a shuffled
        # pipeline fills its buffer for it). Later epochs read the same files.
        def epoch_0_gave_any():
            return one(tf.constant(0, tf.int64)).take(1).reduce(tf.constant(False),
                                                                as_written(lambda _, __: tf.constant(True)))
        return tf.cond(tf.equal(epoch, 1), epoch_0_gave_any, lambda: tf.constant(True))
    return tf.data.Dataset.counter().take_while(goes_on).flat_map(one)


def started_at() -> tuple[int, int] | None:
    """The (epoch, examples of it consumed) the pipeline being built starts at (:func:`per_iterator`'s ``start``)."""
    return _local.values.get("start")


def seed(config_seed: int | None, purpose: int, index=None, *, epoch=None) -> tf.Tensor | None:
    """The int64 seed of one draw of the current epoch, or None (TensorFlow's own random seed) for a
    dataset built outside :func:`per_iterator` from a config without a seed. Flat (see :func:`per_iterator`),
    a shuffle's seed is the config's, reshuffled each epoch by tf.data (:func:`reshuffles`). ``epoch``: the
    epoch's number as a tensor, for a pipeline that spans epochs itself (global_order.py)."""
    if _local.values.get("flat") and index is None:
        return config_seed
    base = _local.values.get("base")
    if base is None:
        if config_seed is None:  # (a file's windows need a seed tensor: a fresh one, as TensorFlow's would be)
            return None if index is None else tf.random.uniform([], maxval=MAX_SEED, dtype=tf.int64)
        base = tf.constant(config_seed, tf.int64)
    epoch = tf.cast(_local.values.get("epoch", 0) if epoch is None else epoch, tf.int64)
    per_epoch = tf.random.stateless_uniform([], seed=tf.stack([base, epoch]), minval=None, maxval=None,
                                            dtype=tf.int64)
    what = tf.constant(purpose << 40, tf.int64) + (0 if index is None else tf.cast(index, tf.int64))
    return tf.random.stateless_uniform([], seed=tf.stack([per_epoch, what]), minval=None, maxval=None,
                                       dtype=tf.int64)


def reshuffles() -> bool:
    """``reshuffle_each_iteration`` for a shuffle seeded by :func:`seed`: False (each epoch's shuffle is built
    with that epoch's seed) but in a flat pipeline (see :func:`per_iterator`), whose shuffles are repeated."""
    return bool(_local.values.get("flat"))


def seed_of(config_seed: int | None, params: Mapping[str, Any] | None) -> int | None:
    """``params["seed"]`` when given (None included: a new order every run), else the config's seed."""
    if not params or "seed" not in params:
        return config_seed
    seed = params["seed"]
    if seed is None:
        return None
    try:
        value = None if isinstance(seed, bool) else operator.index(seed)  # numpy's ints too
    except TypeError:
        value = None
    if value is None or not 0 <= value <= MAX_SEED:
        raise ConfigError(Problem("<params>", "$.seed", f"found {seed!r}: expected an integer from 0 to {MAX_SEED} "
                                                        "or None (TensorFlow seeds are int64)"))
    return value
