"""Packing: rows of a fixed length holding several examples, which unpack into exactly the examples.

Data: 40 SequenceExamples; example r has (r * 7) % 11 + 1 steps with x = 1000*r + j and
y = -(1000*r + j), so every packed step says which example and which step it is.
"""
from __future__ import annotations

import collections

import numpy as np
import pytest
import tensorflow as tf

from batchloaders import ConfigError, build_input_fn, load_config
from conftest import feature, loader_config, sequence_example, write_manifest, write_records
from seqdata import sequence_config, write_continuous

N = 40


def length_of(r: int) -> int:
    return (r * 7) % 11 + 1


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    d = tmp_path_factory.mktemp("packing") / "xy"
    write_manifest(d, [feature("x", "int64", [], "int", var_len=True), feature("y", "int64", [], "int", var_len=True),
                       feature("id", "int64", [], "int", var_len=False)], allow_var_len=True)
    for f in range(2):
        write_records(d / f"part-{f}.tfrecords", [
            sequence_example({"id": ("int", [r])}, {"x": ("int", [[1000 * r + j] for j in range(length_of(r))]),
                                                    "y": ("int", [[-(1000 * r + j)] for j in range(length_of(r))])})
            for r in range(f * N // 2, (f + 1) * N // 2)])
    return d


def config(data, packing, inputs=("x", "segment_ids", "positions"), **args):
    return loader_config(data, [("x", "x"), ("y", "y")], inputs=list(inputs), targets=["y"], target_batch_size=4,
                         packing=packing, padding=[{"tensor": "x", "value": -1}], **args)


def rows_of(cfg):
    out = []
    for features, targets in build_input_fn(cfg)().as_numpy_iterator():
        for i in range(len(features["x"])):
            out.append((features["x"][i], features["segment_ids"][i], features["positions"][i], targets["y"][i]))
    return out


def segments(rows):
    """(x values, positions) of every segment of every row, checking y and the padding on the way."""
    found = []
    for x, seg, pos, y in rows:
        np.testing.assert_array_equal(y[seg > 0], -x[seg > 0])
        assert (x[seg == 0] == -1).all() and (y[seg == 0] == 0).all() and (pos[seg == 0] == 0).all()
        used = seg[seg > 0]
        assert list(dict.fromkeys(used)) == list(range(1, used.max() + 1)) if used.size else True  # 1, 2, ...
        for s in range(1, int(seg.max()) + 1):
            found.append((x[seg == s], pos[seg == s]))
    return found


def test_rows_unpack_into_exactly_the_examples(data):
    rows = rows_of(config(data, {"length": 12, "tensors": ["x", "y"]}))
    assert all(len(x) == 12 for x, *_ in rows)
    found = segments(rows)
    by_example = {}
    for x, pos in found:
        r = int(x[0]) // 1000
        np.testing.assert_array_equal(x, 1000 * r + np.arange(length_of(r)))  # whole, in order
        np.testing.assert_array_equal(pos, np.arange(length_of(r)))  # positions restart per example
        assert r not in by_example
        by_example[r] = x
    assert sorted(by_example) == list(range(N))
    real = sum(length_of(r) for r in range(N))
    assert real / (12 * len(rows)) > 0.9  # best fit leaves little room


def test_split_pieces_reassemble_into_the_examples(data):
    rows = rows_of(config(data, {"length": 5, "tensors": ["x", "y"], "allow_split": True}))
    pieces = collections.defaultdict(list)
    for x, pos in segments(rows):
        assert 1 <= len(x) <= 5
        np.testing.assert_array_equal(pos, np.arange(len(x)))  # each piece is its own segment
        pieces[int(x[0]) // 1000].append(x)
    for r in range(N):
        np.testing.assert_array_equal(np.sort(np.concatenate(pieces[r])), 1000 * r + np.arange(length_of(r)))
        assert len(pieces[r]) == -(-length_of(r) // 5)


def test_an_example_longer_than_a_row_is_an_error_naming_its_length(data):
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"packing.length: found an example of 1[01] steps, "
                                                             r"longer than a row of 9"):
        rows_of(config(data, {"length": 9, "tensors": ["x", "y"]}))


def test_fixed_windows_pack_whole(tmp_path):
    write_continuous(tmp_path, [12, 12])  # 48 frames per file, x = [v, -v], y = v
    cfg = sequence_config(tmp_path, "continuous_sequence", [("x", "x"), ("y", "y")],
                          inputs=["x", "segment_ids"], targets=["y"], lo=5, hi=5, target_batch_size=2,
                          packing={"length": 12, "tensors": ["x", "y"]})
    windows = []
    for features, targets in build_input_fn(cfg)().as_numpy_iterator():
        for x, seg, y in zip(features["x"], features["segment_ids"], targets["y"]):
            assert list(seg) == [1] * 5 + [2] * 5 + [0] * 2 or list(seg) == [1] * 5 + [0] * 7
            for s in (1, 2):
                if (seg == s).any():
                    w = y[seg == s]
                    np.testing.assert_array_equal(w, w[0] + np.arange(5))  # 5 consecutive frames
                    np.testing.assert_array_equal(x[seg == s][:, 0], w)
                    windows.append(int(w[0]))
    assert len(windows) == 2 * (48 // 5)


@pytest.mark.parametrize("packing, extra, where, words", [
    ({"length": 12, "tensors": ["x"]}, {}, "$.args.packing.tensors",
     "model tensor 'y' is not packed"),
    ({"length": 12, "tensors": ["x", "yy"]}, {}, "$.args.packing.tensors[1]",
     "tensor 'yy' is not a primary or secondary feature (did you mean 'y'?)"),
    ({"length": 12, "tensors": ["x", "y"], "segment_ids": "x"}, {"inputs": ("x", "positions")},
     "$.args.packing.segment_ids",
     "found 'x', the name of a feature already"),
    ({"length": 12, "tensors": ["x", "y"]}, {"bucketing": {"by": "x", "max_tokens": 40}}, "$.args.packing",
     "found packing and bucketing together"),
])
def test_packing_mistakes_are_located(data, packing, extra, where, words):
    with pytest.raises(ConfigError) as caught:
        load_config(config(data, packing, **extra))
    assert [(p.path, words in p.message) for p in caught.value.problems] == [(where, True)], caught.value.problems


def test_a_scalar_cannot_be_packed(data):
    cfg = loader_config(data, [("x", "x"), ("id", "id")], inputs=["x", "segment_ids"], targets=["id"],
                        target_batch_size=4, packing={"length": 12, "tensors": ["x", "id"]})
    with pytest.raises(ConfigError, match=r"\$\.args\.packing\.tensors\[1\]: tensor 'id' is a scalar per example"):
        load_config(cfg)


def reference_rows(lengths, capacity):
    """Best fit decreasing, written plainly: the examples of each row, rows in the order they opened."""
    rows, room = [], []
    for r in sorted(range(len(lengths)), key=lambda r: -lengths[r]):  # stable: ties keep their order
        fits = [i for i in range(len(rows)) if room[i] >= lengths[r]]
        if fits:
            best = min(fits, key=lambda i: room[i])
            rows[best].append(r)
            room[best] -= lengths[r]
        else:
            rows.append([r])
            room.append(capacity - lengths[r])
    return rows


def test_placement_is_best_fit_decreasing(data):
    """All 40 examples are one block: the rows must be what best fit decreasing makes of it."""
    cfg = loader_config(data, [("x", "x"), ("y", "y")], inputs=["x", "segment_ids"], targets=["y"],
                        target_batch_size=64, packing={"length": 13, "tensors": ["x", "y"]})
    (batch,) = list(build_input_fn(cfg)().as_numpy_iterator())
    features, _ = batch
    got = []
    for x, seg in zip(features["x"], features["segment_ids"]):
        got.append([int(x[seg == s][0]) // 1000 for s in range(1, seg.max() + 1)])
    order = sorted(range(N), key=lambda r: (r // (N // 2), r))  # file by file, as the loader reads them
    lengths = [length_of(r) for r in order]
    want = [[order[i] for i in row] for row in reference_rows(lengths, 13)]
    assert got == want


def test_packed_tensors_of_different_lengths_are_an_error(data):
    cfg = config(data, {"length": 12, "tensors": ["x", "y"]},
                 processing_steps=[{"tensor": "x", "type": "slice", "args": {"slice": "[:-1]"}}])
    with pytest.raises(tf.errors.InvalidArgumentError, match="are packed together and need the same length"):
        rows_of(cfg)


def test_a_packed_tensor_cannot_be_ragged(data):
    cfg = config(data, {"length": 12, "tensors": ["x", "y"]})
    cfg["args"]["padding"] = [{"tensor": "x", "batching": "ragged"}]
    with pytest.raises(ConfigError, match=r"\$\.args\.padding\[0\]\.batching: found batching 'ragged' for tensor 'x', "
                                          "which packing fills rows"):
        load_config(cfg)


@pytest.mark.parametrize("seed", range(30))
def test_grouped_placement_equals_placing_one_at_a_time(seed):
    """Placing equal sizes together must give exactly the rows and offsets one-at-a-time best fit gives."""
    from batchloaders.regroup.packing import _best_fit

    rng = np.random.default_rng(seed)
    capacity = int(rng.integers(1, 30))
    sizes = sorted(rng.integers(0, capacity + 1, int(rng.integers(1, 60))).tolist(), reverse=True)
    rows, offsets, count = (t.numpy() for t in _best_fit(tf.constant(sizes, tf.int64), capacity))
    room, want_rows, want_offsets = [], [], []
    for size in sizes:
        fits = [i for i in range(len(room)) if room[i] >= size]
        row = min(fits, key=lambda i: (room[i], i)) if fits else len(room)
        if not fits:
            room.append(capacity)
        want_rows.append(row)
        want_offsets.append(capacity - room[row])
        room[row] -= size
    assert (rows.tolist(), offsets.tolist(), int(count)) == (want_rows, want_offsets, len(room))


@pytest.mark.parametrize("args, static", [({"epochs": None}, 4), ({"epochs": 1, "drop_remainder": True}, 4),
                                          ({"epochs": 1}, None)])
def test_batches_of_rows_have_the_static_size_that_is_known(data, args, static):
    """Rows are finished per block, before rebatching: the batch size is static exactly when every batch is full."""
    ds = build_input_fn(config(data, {"length": 12, "tensors": ["x", "y"]}, **args))()
    features, targets = ds.element_spec
    assert features["x"].shape.as_list() == [static, 12] and targets["y"].shape.as_list() == [static, 12]
    assert features["segment_ids"].shape.as_list() == [static, 12]
    rows = [len(f["x"]) for f, _ in ds.take(12).as_numpy_iterator()]
    # 40 examples of 1..11 steps in rows of 12: an epoch fills more rows than 4 divides evenly only without a drop.
    assert all(r == 4 for r in rows[:-1]) and (rows[-1] == 4 if static else 1 <= rows[-1] <= 4)


def test_a_block_of_empty_examples_packs_into_one_row_of_padding(tmp_path):
    """Examples of 0 steps are placed (size 0 fits anywhere) without a single step to move: one row, all
    padding, segment ids 0 (the placement loop runs no step at all)."""
    d = tmp_path / "empty"
    write_manifest(d, [feature("x", "int64", [], "int", var_len=True)], allow_var_len=True)
    write_records(d / "a.tfrecords", [sequence_example({}, {"x": ("int", [])}) for _ in range(3)])
    cfg = loader_config(d, [("x", "x")], inputs=["x", "segment_ids", "positions"], target_batch_size=2,
                        packing={"length": 4, "tensors": ["x"]}, padding=[{"tensor": "x", "value": -1}])
    batches = list(build_input_fn(cfg)().as_numpy_iterator())
    assert len(batches) == 1
    np.testing.assert_array_equal(batches[0]["x"], [[-1, -1, -1, -1]])
    np.testing.assert_array_equal(batches[0]["segment_ids"], [[0, 0, 0, 0]])


@pytest.fixture(scope="module")
def triples(tmp_path_factory):
    """3,000 examples of 3 steps each (x = 10*r + j), tiny records: 4,096 of them make a block."""
    d = tmp_path_factory.mktemp("packing") / "triples"
    write_manifest(d, [feature("x", "int64", [], "int", var_len=True)], allow_var_len=True)
    write_records(d / "a.tfrecords", [sequence_example({}, {"x": ("int", [[10 * r + j] for j in range(3)])})
                                      for r in range(3000)])
    return d


@pytest.mark.parametrize("block_bytes, rows", [
    (None, 1000),  # one block of all 3,000: three examples in each of 1,000 rows
    (1, 342 + 342 + 318),  # the smallest blocks, 1,024 examples: each block's last row holds what is left
])
def test_rows_are_filled_within_blocks_as_large_as_the_records_allow(triples, monkeypatch, block_bytes, rows):
    from batchloaders.read import block_sizes

    if block_bytes is not None:
        monkeypatch.setattr(block_sizes, "REGROUP_BLOCK_BYTES", block_bytes)
    cfg = loader_config(triples, [("x", "x")], inputs=["x", "segment_ids"], target_batch_size=100,
                        packing={"length": 10, "tensors": ["x"]}, padding=[{"tensor": "x", "value": -1}])
    packed = np.concatenate([b["x"] for b in build_input_fn(cfg)().as_numpy_iterator()])
    assert len(packed) == rows
    real = packed[packed >= 0]
    assert sorted(real.tolist()) == [10 * r + j for r in range(3000) for j in range(3)]
    np.testing.assert_array_equal(packed[:1000 if block_bytes is None else 341, :9].reshape(-1) % 10,
                                  np.tile([0, 1, 2], 3 * (1000 if block_bytes is None else 341)))


def test_block_sizes_follow_the_largest_sampled_record(tmp_path):
    """Examples per block: 128 MiB over the largest first record sampled, between 1,024 and 4,096."""
    from batchloaders.read import block_sizes
    from batchloaders import load_config

    found = {}
    for steps in (1, 5000, 60000):  # records of about 30 bytes, 55 KB and 660 KB
        d = tmp_path / f"s{steps}"
        write_manifest(d, [feature("x", "int64", [], "int", var_len=True)], allow_var_len=True)
        record = sequence_example({}, {"x": ("int", [[2**40 + j] for j in range(steps)])})
        write_records(d / "a.tfrecords", [record])
        cfg = load_config(loader_config(d, [("x", "x")], inputs=["x", "segment_ids"],
                                        packing={"length": 70000, "tensors": ["x"]}))
        found[steps] = (block_sizes.regroup(cfg, 2), 128 * 2**20 // len(record))
    assert found[1][0] == 4096
    assert found[5000][0] == found[5000][1] and 1024 < found[5000][0] < 4096
    assert found[60000][0] == 1024
    assert block_sizes.regroup(cfg, 5000) == 5000  # a larger batch makes the block


@pytest.mark.parametrize("case", ["gzip", "step"])
def test_blocks_stay_at_1024_examples_where_their_size_cannot_be_told_from_the_records(tmp_path, case):
    """Compressed files cannot be sampled (a feature list may hold anything), and a processing step can make an
    example far larger than its record: blocks then stay at 1,024 examples; the same tiny records, plain, get 4,096."""
    from batchloaders.read import block_sizes
    from batchloaders import load_config
    from batchloaders.cli.describe import describe

    def block(name, compression=None, steps=()):
        d = tmp_path / name
        write_manifest(d, [feature("x", "int64", [], "int", var_len=True)], allow_var_len=True, compression=compression)
        write_records(d / "a.tfrecords", [sequence_example({}, {"x": ("int", [[7]])})], compression=compression)
        cfg = load_config(loader_config(d, [("x", "x")], inputs=["x", "segment_ids"],
                                        packing={"length": 8, "tensors": ["x"]}, processing_steps=list(steps)))
        size = block_sizes.regroup(cfg, 2)
        assert f"rows filled within blocks of {size} examples" in "\n".join(describe(cfg))  # describe says it
        return size

    assert block("plain") == 4096
    if case == "gzip":
        assert block("gzip", compression="gzip") == 1024
    else:
        assert block("step", steps=[{"tensor": "x", "type": "reverse"}]) == 1024
