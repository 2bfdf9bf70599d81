"""The end of a call's pipeline (loaders/sources.py: PlainSource.pipeline): the run's known cardinality, the
last prefetch and the pipeline's options, and the batches before a start that no count fixes left out."""
from __future__ import annotations

import tensorflow as tf

from batchloaders.errors import ConfigError, Problem
from batchloaders.read.sources import options
from batchloaders.core.limits import INT32_MAX, INT64_MAX
from batchloaders.core.model import LoaderConfig


def finished(config: LoaderConfig, ds: tf.data.Dataset, cardinality: int | None) -> tf.data.Dataset:
    """``ds`` with its known cardinality, the last prefetch and the pipeline's options.

    Args:
        config: the call's config.
        ds: the call's batches.
        cardinality: their count when the manifests' counts fix it, else None.

    Returns:
        The finished dataset.
    """
    if config.epochs is None:
        # Interleaving hides the repeat from tf.data's cardinality; tell Keras the truth.
        ds = ds.apply(tf.data.experimental.assert_cardinality(tf.data.INFINITE_CARDINALITY))
    elif cardinality is not None:
        # Keras then knows the steps per epoch. The end-of-file checks fail first if a count is off.
        ds = ds.apply(tf.data.experimental.assert_cardinality(cardinality))
    if config.reading.num_prefetch is None:
        ds = ds.prefetch(tf.data.AUTOTUNE)
    elif config.reading.num_prefetch > 0:
        ds = ds.prefetch(config.reading.num_prefetch)
    return ds.with_options(options(config))


def skip(dataset: tf.data.Dataset, count: int) -> tf.data.Dataset:
    """``dataset`` without its first ``count`` elements, for any count, in one step. tf.data's skip counts in
    int32 (``skip(2**31)`` skips nothing), and a chain of skips nests one dataset per 2**31 elements.

    Args:
        dataset: a call's finished batches.
        count: the batches to leave out (``skip_batches``).

    Returns:
        The rest of ``dataset``; nothing, unread, past the end of a finite run.

    Raises:
        ConfigError: for an endless run and a count past int64.
    """
    if count <= INT32_MAX:
        return dataset.skip(count)
    known = tf.get_static_value(dataset.cardinality())
    endless = known == tf.data.INFINITE_CARDINALITY
    if not endless and (count > INT64_MAX or (known is not None and 0 <= known <= count)):
        return dataset.take(0)  # past the run's end (a finite run never holds 2**63 batches): nothing, unread
    if count > INT64_MAX:
        raise ConfigError(Problem("<input_fn>", "$.skip_batches", (
            f"found {count}: the run is endless, and its batches are counted as int64; expected at most "
            f"{INT64_MAX:,}")))
    rest = dataset.enumerate().filter(lambda i, _: i >= count).map(lambda _, element: element)
    if endless or (known is not None and known >= 0):
        rest = rest.apply(tf.data.experimental.assert_cardinality(known if endless else known - count))
    return rest
