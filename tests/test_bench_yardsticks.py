"""benchmarks/harness.py's same-work check: a rival is admitted when its epoch holds the same examples (padding
removed) in as many batches of the same sizes as ours, in any order. Real TFRecord files: 2 files of
SequenceExamples, 7 + 6 records; record r of file f: id = 100 * f + r, 1 + r % 4 steps, step s has the frames
[id, s] and the label id + 1 (never 0, so the non-zero labels of a padded row give its length)."""
from __future__ import annotations

import pathlib
import sys

import numpy as np
import pytest

from conftest import sequence_example, write_records

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "benchmarks"))
import harness  # noqa: E402

PER_FILE = (7, 6)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    directory = tmp_path_factory.mktemp("yardsticks")
    out = []
    for f, count in enumerate(PER_FILE):
        records = []
        for r in range(count):
            ident = 100 * f + r
            steps = range(1 + r % 4)
            records.append(sequence_example({"id": ("int", [ident])},
                                            {"frames": ("float", [[ident, s] for s in steps]),
                                             "labels": ("int", [[ident + 1] for _ in steps])}))
        out.append(write_records(directory / f"part-{f}.tfrecords", records))
    return out


def parse(serialized):
    import tensorflow as tf

    context, lists, _ = tf.io.parse_sequence_example(
        serialized, context_features={"id": tf.io.FixedLenFeature([], tf.int64)},
        sequence_features={"frames": tf.io.FixedLenSequenceFeature([2], tf.float32),
                           "labels": tf.io.FixedLenSequenceFeature([], tf.int64)})
    return {"frames": lists["frames"], "id": context["id"]}, {"labels": lists["labels"]}


def records(files, interleave=True):
    import tensorflow as tf

    if interleave:  # file 0 and file 1 alternating record by record
        return tf.data.Dataset.from_tensor_slices(files).interleave(tf.data.TFRecordDataset, cycle_length=2)
    return tf.data.TFRecordDataset(list(reversed(files)))  # file 1, then file 0


def lengths(batch):
    return np.count_nonzero(batch[1]["labels"], axis=1)


def check(make):
    return harness.epoch(make, lengths_of=lengths)


def test_reordered_examples_with_other_padding_are_the_same_work(files):
    ours = check(lambda: records(files).batch(4).map(parse))
    theirs = check(lambda: records(files, interleave=False).batch(4).map(parse))
    assert ours.examples == theirs.examples == [4, 4, 4, 1]
    assert ours.digest != theirs.digest  # another order, other padding per batch
    assert harness.same_work(ours, theirs) is None
    assert ours.multiset == theirs.multiset
    assert ours.example_digests.size == 13 and np.unique(ours.example_digests).size == 13


def test_a_dropped_example_is_other_work(files):
    ours = check(lambda: records(files).batch(4).map(parse))
    theirs = check(lambda: records(files).batch(4).map(parse).map(
        lambda x, y: ({k: v[:-1] for k, v in x.items()}, {k: v[:-1] for k, v in y.items()})))
    assert theirs.examples == [3, 3, 3, 0]
    assert harness.same_work(ours, theirs) == (
        "other batch sizes; 9 examples, ours 13; 4 of ours' not among theirs, 0 of theirs not among ours'")
    first = next(iter(records(files))).numpy()
    one_less = check(lambda: records(files).filter(lambda s: s != first).batch(4).map(parse))
    assert one_less.examples == [4, 4, 4]
    assert harness.same_work(ours, one_less) == (
        "3 batches, ours 4; 12 examples, ours 13; 1 of ours' not among theirs, 0 of theirs not among ours'")


def test_a_changed_value_is_other_work(files):
    import tensorflow as tf

    def changed(x, y):  # example 100 (file 1, record 0): its one frame [100, 0] becomes [100, 1]
        hit = tf.cast(tf.equal(x["id"], 100), tf.float32)[:, None, None] * tf.constant([[[0.0, 1.0]]])
        return {"frames": x["frames"] + hit, "id": x["id"]}, y

    ours = check(lambda: records(files).batch(4).map(parse))
    theirs = check(lambda: records(files).batch(4).map(parse).map(changed))
    assert theirs.examples == ours.examples
    assert harness.same_work(ours, theirs) == (
        "13 examples, ours 13; 1 of ours' not among theirs, 1 of theirs not among ours'")


def test_same_examples_in_other_batch_sizes_are_other_work(files):
    ours = check(lambda: records(files).batch(4).map(parse))
    theirs = check(lambda: records(files).take(11).batch(4).concatenate(records(files).skip(11).batch(4)).map(parse))
    assert theirs.examples == [4, 4, 3, 2]
    assert harness.same_work(ours, theirs) == "other batch sizes"


def test_fixed_shape_examples_are_compared_row_by_row(files):
    ids = lambda rs: rs.batch(4).map(lambda s: parse(s)[0]["id"])  # noqa: E731
    ours = harness.epoch(lambda: ids(records(files)))
    assert harness.same_work(ours, harness.epoch(lambda: ids(records(files, interleave=False)))) is None
    assert harness.same_work(ours, harness.epoch(lambda: ids(records(files)).map(lambda i: i + 1000))) == (
        "13 examples, ours 13; 13 of ours' not among theirs, 13 of theirs not among ours'")
