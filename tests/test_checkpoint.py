"""tf.train.Checkpoint(iterator=...) saves and restores every loader's iterator within an epoch.

The pipelines hold nested datasets in the end-of-file check (a damaged file's tail read again, a
probe of a file) that keep nothing between calls; tf.data refused to save them ("... is stateful")
until sources.options() let checkpoints ignore external state. Each config is the example config of
its loader (shuffled ones included); after a restore into a freshly built dataset the next batches
must equal, value for value, those that followed the save.
"""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from batchloaders import build_input_fn
from batchloaders.demo_data import generate


@pytest.fixture(scope="module", autouse=True)
def demo_data():
    generate()  # the example configs point at demo_data/


def values(batch):
    return [np.asarray(t) for t in tf.nest.flatten(batch)]


@pytest.mark.parametrize("config, before", [
    ("configs/chars_independent.yaml", 3),   # independent, shuffled with a seed
    ("configs/stream_continuous.yaml", 2),   # continuous windows
    ("configs/sentences_discrete.yaml", 4),  # discrete windows
])
def test_a_restored_iterator_continues_where_the_saved_one_was(tmp_path, config, before):
    input_fn = build_input_fn(config)
    iterator = iter(input_fn())
    for _ in range(before):
        next(iterator)
    path = tf.train.Checkpoint(iterator=iterator).save(str(tmp_path / "ckpt"))
    expected = [values(next(iterator)) for _ in range(3)]
    restored = iter(input_fn())
    tf.train.Checkpoint(iterator=restored).restore(path)
    got = [values(next(restored)) for _ in range(3)]
    assert len(got) == len(expected) == 3
    for got_batch, expected_batch in zip(got, expected):
        assert len(got_batch) == len(expected_batch)
        for a, b in zip(got_batch, expected_batch):
            np.testing.assert_array_equal(a, b)
    fresh = [values(b) for b in input_fn().take(before + 1)]  # the continuation is not the start again
    assert any(not np.array_equal(a, b) for a, b in zip(fresh[0], got[0]))
