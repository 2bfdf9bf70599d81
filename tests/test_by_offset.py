"""read/by_offset.py: records read at byte offsets of real TFRecord files, in the order asked, and the
errors a damaged frame, a short file or a missing file give."""
from __future__ import annotations

import pytest
import tensorflow as tf

from batchloaders.read import by_offset
from conftest import flip_byte, frame_offsets, write_records

COUNTS = [5, 1, 3]  # records per file


def payload(f: int, r: int) -> bytes:
    """A payload saying where it is, of a length that differs from record to record."""
    return f"file{f}-record{r}|".encode() * (1 + (3 * f + r) % 4)


@pytest.fixture
def data(tmp_path):
    """(paths, offsets per file: each frame's start then the file's end)."""
    paths, offsets = [], []
    for f, count in enumerate(COUNTS):
        records = [payload(f, r) for r in range(count)]
        paths.append(write_records(tmp_path / f"part-{f}.tfrecord", records))
        offsets.append(frame_offsets(records))
    return paths, offsets


def places(data, wanted, by_path=False):
    paths, offsets = data
    rows = [(paths[f] if by_path else f, offsets[f][r], len(payload(f, r))) for f, r in wanted]
    if not rows:
        return tf.data.Dataset.from_tensor_slices((tf.zeros([0], tf.int64),) * 3)
    return tf.data.Dataset.from_tensor_slices(tuple(map(list, zip(*rows))))


def read(ds) -> list[bytes]:
    return list(ds.as_numpy_iterator())


SHUFFLED = [(2, 1), (0, 4), (1, 0), (0, 0), (2, 2), (0, 2), (2, 0), (0, 1), (0, 3)]


@pytest.mark.parametrize("wanted", [
    SHUFFLED,
    [(0, 0), (0, 4), (2, 0), (2, 2)],  # the first and last record of files
    [(1, 0), (1, 0)],  # the same record twice
    [],
])
@pytest.mark.parametrize("parallel", [1, 2])
def test_records_come_in_the_order_asked(data, wanted, parallel):
    got = read(by_offset.read_records(places(data, wanted), data[0], parallel=parallel))
    assert got == [payload(f, r) for f, r in wanted]


def test_files_can_be_named_by_path(data):
    assert read(by_offset.read_records(places(data, SHUFFLED, by_path=True))) == [payload(f, r) for f, r in SHUFFLED]


@pytest.mark.parametrize("optimized", [True, False])
def test_the_order_holds_with_tf_data_rewrites_on_and_off(data, optimized):
    options = tf.data.Options()
    options.experimental_optimization.apply_default_optimizations = optimized
    ds = by_offset.read_records(places(data, SHUFFLED), data[0]).map(lambda r: r).batch(4).with_options(options)
    assert [x for b in ds.as_numpy_iterator() for x in b] == [payload(f, r) for f, r in SHUFFLED]


@pytest.mark.parametrize("runs, max_count", [
    ([(0, 3, 2), (2, 0, 2), (0, 0, 2), (2, 2, 1), (1, 0, 1), (0, 2, 1)], 2),  # short runs at files' ends
    ([(2, 0, 3), (0, 0, 5), (1, 0, 1)], 8),  # whole files, shorter than the largest run
    ([(0, 1, 3)], 3),
])
def test_runs_come_whole_in_the_order_asked(data, runs, max_count):
    paths, offsets = data
    rows = [(f, offsets[f][a], offsets[f][a + c] - offsets[f][a], c) for f, a, c in runs]
    ds = tf.data.Dataset.from_tensor_slices(tuple(map(list, zip(*rows))))
    got = read(by_offset.read_runs(ds, paths, max_count=max_count))
    assert got == [payload(f, r) for f, a, c in runs for r in range(a, a + c)]


def damage(path: str, at: int) -> None:
    with open(path, "rb") as f:
        data = f.read()
    with open(path, "wb") as f:
        f.write(flip_byte(data, at))


# (what is wrong, the error, its message); record 2 of file 0 is read, its frame at offsets[0][2]
@pytest.mark.parametrize("case, error, message", [
    ("payload", tf.errors.DataLossError, "corrupted record at {payload_at}"),
    ("length", tf.errors.DataLossError, "corrupted record at {at}"),
    ("not a frame", tf.errors.DataLossError, "corrupted record at {inside}"),
    ("past the end", tf.errors.FailedPreconditionError, "expected to contain 1 element but contained only 0"),
    ("missing file", tf.errors.NotFoundError, "{path}"),
])
def test_what_cannot_be_read_raises_a_tensorflow_error(data, case, error, message):
    paths, offsets = data
    at, length = offsets[0][2], len(payload(0, 2))
    path, offset = paths[0], at
    if case == "payload":
        damage(path, at + 12 + 3)
    elif case == "length":
        damage(path, at + 1)
    elif case == "not a frame":
        offset = at + 5
    elif case == "past the end":
        offset = offsets[0][-1]
    else:
        path = path + ".gone"
    ds = tf.data.Dataset.from_tensor_slices(([path], [offset], [length]))
    expected = message.format(payload_at=at + 12, at=at, inside=at + 5, path=path)
    with pytest.raises(error, match=expected):
        read(by_offset.read_records(ds))
