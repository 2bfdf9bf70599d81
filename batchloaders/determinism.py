"""Same seed, same batches: from every ``input_fn()`` call and every iterator of its dataset.

tf.data's seeded shuffles (``reshuffle_each_iteration``) and ``Dataset.random(rerandomize_each_iteration)``
draw each epoch's seeds from a seed generator made with the dataset and shared by all its iterators, so
a second iterator of one dataset would continue where the first left off. Building the pipeline inside
a ``flat_map`` makes those generators part of each iterator: every iterator starts from the config's
seed, its later epochs are still reshuffled, and the generators' positions go into its checkpoint.
"""
from __future__ import annotations

import operator
from typing import Any, Callable, Mapping

import tensorflow as tf

from batchloaders.errors import ConfigError, Problem

MAX_SEED = 2**63 - 1


def per_iterator(build: Callable[[], tf.data.Dataset]) -> tf.data.Dataset:
    """The dataset ``build()`` returns, built anew (random state included) for every iterator."""
    return tf.data.Dataset.range(1).flat_map(lambda _: build())


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
