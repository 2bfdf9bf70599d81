"""read/permutation.py: an epoch's order from (seed, epoch), the global id -> (file, record) map, the
sharding of positions over pipelines and the block variant, checked on exact values."""
from __future__ import annotations

import pytest
import tensorflow as tf

from batchloaders.read import permutation


def ids(ds) -> list[int]:
    return [int(x) for x in ds.as_numpy_iterator()]


def order(n, seed=3, epoch=0) -> list[int]:
    return permutation.record_at(tf.range(n, dtype=tf.int64), n, seed, epoch).numpy().tolist()


@pytest.mark.parametrize("n", [1, 2, 7, 1000])
def test_every_position_maps_to_a_distinct_record(n):
    assert sorted(order(n)) == list(range(n))


def test_a_large_epoch_maps_a_sample_of_positions_to_distinct_records_in_range():
    n = 2 ** 40 + 3
    sample = tf.range(0, n, n // 20_000, dtype=tf.int64)
    got = permutation.record_at(sample, n, 11, 2).numpy()
    assert len(set(got.tolist())) == len(got) and got.min() >= 0 and got.max() < n


# TensorFlow's index_shuffle defines these orders; a checkpoint stores positions in them, so a change
# of TensorFlow that changes them must be seen.
@pytest.mark.parametrize("n, seed, epoch, expected", [
    (10, 3, 0, [4, 0, 2, 9, 1, 3, 5, 8, 6, 7]),
    (10, 3, 1, [9, 3, 5, 1, 0, 7, 8, 4, 2, 6]),
    (10, 4, 0, [7, 8, 3, 9, 6, 2, 1, 4, 0, 5]),
])
def test_the_orders_are_pinned(n, seed, epoch, expected):
    assert order(n, seed, epoch) == expected


def test_another_epoch_or_seed_gives_another_order():
    base = order(1000, 3, 0)
    assert order(1000, 3, 1) != base
    assert order(1000, 4, 0) != base
    assert order(1000, 3, 0) == base


def test_positions_one_by_one_equal_the_batch():
    batch = order(50, 9, 4)
    assert [int(permutation.record_at(p, 50, 9, 4)) for p in range(50)] == batch


def test_the_dataset_gives_the_epoch_order():
    assert ids(permutation.epoch_order(5000, 9, 4)) == order(5000, 9, 4)
    assert ids(permutation.epoch_order(0, 9, 4)) == []


@pytest.mark.parametrize("counts, expected", [
    ([3, 0, 2, 0, 0, 4], [(0, 0), (0, 1), (0, 2), (2, 0), (2, 1), (5, 0), (5, 1), (5, 2), (5, 3)]),
    ([0, 1], [(1, 0)]),
    ([2], [(0, 0), (0, 1)]),
])
def test_global_ids_map_to_file_and_record_skipping_empty_files(counts, expected):
    file, record = permutation.file_and_record(tf.range(sum(counts)), counts)
    assert list(zip(file.numpy().tolist(), record.numpy().tolist())) == expected
    one_file, one_record = permutation.file_and_record(sum(counts) - 1, counts)
    assert (int(one_file), int(one_record)) == expected[-1]


@pytest.mark.parametrize("pipelines", [1, 2, 3])
@pytest.mark.parametrize("start", [0, 5])
def test_pipelines_share_the_remaining_positions_exactly_once(pipelines, start):
    n = 23
    shares = [ids(permutation.positions(n, start=start, pipeline=k, pipelines=pipelines))
              for k in range(pipelines)]
    assert sorted(p for share in shares for p in share) == list(range(start, n))
    assert all(p % pipelines == k for k, share in enumerate(shares) for p in share)


def test_a_job_continues_the_global_order_with_another_number_of_pipelines():
    """Two pipelines consumed positions 0..10; three take over from 11 (pipeline 2 first: 11 % 3 == 2):
    in turn they give the epoch's order from 11 on, each record once."""
    n, consumed = 40, 11
    full = order(n, 1, 7)
    shares = [ids(permutation.epoch_order(n, 1, 7, start=consumed, pipeline=k, pipelines=3)) for k in range(3)]
    turns = [shares[2], shares[0], shares[1]]
    merged = [share[i] for i in range(max(map(len, turns))) for share in turns if i < len(share)]
    assert merged == full[consumed:]


def test_a_pipeline_outside_the_count_is_refused():
    with pytest.raises(ValueError, match="pipeline 3 of 3"):
        permutation.positions(10, pipeline=3, pipelines=3)


@pytest.mark.parametrize("counts, run, expected", [
    ([5, 0, 3], 2, [(0, 0, 2), (0, 2, 2), (0, 4, 1), (2, 0, 2), (2, 2, 1)]),
    ([4, 4], 4, [(0, 0, 4), (1, 0, 4)]),
    ([3], 8, [(0, 0, 3)]),
])
def test_blocks_cover_each_file_in_runs(counts, run, expected):
    blocks = int(tf.reduce_sum(permutation.block_counts(counts, run)))
    file, first, count = permutation.block_run(tf.range(blocks), counts, run)
    assert list(zip(file.numpy().tolist(), first.numpy().tolist(), count.numpy().tolist())) == expected


def test_a_permutation_of_blocks_reads_every_record_once():
    counts, run = [5, 0, 3, 9], 4
    blocks = int(tf.reduce_sum(permutation.block_counts(counts, run)))
    file, first, count = permutation.block_run(permutation.record_at(tf.range(blocks), blocks, 2, 0), counts, run)
    records = [(f, r) for f, a, c in zip(file.numpy(), first.numpy(), count.numpy()) for r in range(a, a + c)]
    assert sorted(records) == [(f, r) for f, c in enumerate(counts) for r in range(c)]
