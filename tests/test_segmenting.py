"""Segmenting: sequences cut into num_unroll segments and batched in lanes, against a plain reference.

Data: two files of SequenceExamples; record r of file f holds a sequence x of LENGTHS[f][r] steps with
x[j] = v(f, r, j) = 100000*f + 1000*r + j + 1 (never 0, so padding is never a real step), the same
steps as floats in xf (for the RNN), a scalar id = 100*f + r and a string name "f<f>r<r>". Every
segment step therefore says which file, record and step it shows. Expected batches come from a plain
Python scheduler (:func:`reference`) that does what the issue says: at each batch, the free lanes,
lowest first, take the waiting sequences in input order.
"""
from __future__ import annotations

import collections
import os

import numpy as np
import pytest
import tensorflow as tf

from batchloaders import ConfigError, StateSaver, build_input_fn
from conftest import feature, loader_config, sequence_example, write_manifest, write_records
from seqdata import write_discrete

LENGTHS = [[7, 10, 3, 0, 12, 1], [9, 4, 16, 5]]


def v(f, r, j):
    return 100000 * f + 1000 * r + np.asarray(j) + 1


def write(directory, lengths, names=None):
    write_manifest(directory, [feature("x", "int64", [], "int", var_len=True),
                               feature("xf", "float32", [1], "float", var_len=True),
                               feature("id", "int64", [], "int", var_len=False),
                               feature("name", "string", [], "string", var_len=False)], allow_var_len=True)
    for f, file_lengths in enumerate(lengths):
        records = []
        for r, n in enumerate(file_lengths):
            steps = v(f, r, np.arange(n))
            name = names[f][r] if names else f"f{f}r{r}"
            records.append(sequence_example({"id": ("int", [100 * f + r]), "name": ("string", [name])},
                                            {"x": ("int", [[int(a)] for a in steps]),
                                             "xf": ("float", [[float(a) / 100000] for a in steps])}))
        write_records(directory / f"part-{f}.tfrecords", records)
    return directory


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return write(tmp_path_factory.mktemp("segmenting") / "xy", LENGTHS)


def config(data, segmenting, inputs=("x", "id"), **args):
    base = dict(target_batch_size=3, segmenting={"context": ["id"], **segmenting})
    base.update(args)
    return loader_config(data, [("x", "x"), ("id", "id")], inputs=list(inputs), **base)


def source_key(data, f, r):
    return f"{os.path.join(data, f'part-{f}.tfrecords')}:{r}"


def sequences(data, order=None):
    """(key, id, steps) of every sequence in input order (file order unless ``order`` gives (f, r) pairs)."""
    order = order or [(f, r) for f in range(len(LENGTHS)) for r in range(len(LENGTHS[f]))]
    return [(source_key(data, f, r), 100 * f + r, list(v(f, r, np.arange(LENGTHS[f][r])))) for f, r in order]


def reference(seqs, unroll, lanes, small=False):
    """The batches a lane scheduler gives, written plainly: rows (slot, key, id, sequence, count, length, total,
    is_first, is_last, steps) per batch; padding rows hold key "", zeros and false flags (dropped when small)."""
    waiting = collections.deque(s for s in seqs if s[2])  # a zero-length sequence is skipped
    busy = [None] * lanes  # (sequence, next segment) per lane
    batches = []
    while True:
        for j in range(lanes):
            if busy[j] is None and waiting:
                busy[j] = (waiting.popleft(), 0)
        if all(b is None for b in busy):
            return batches
        rows = []
        for j, b in enumerate(busy):
            if b is None:
                if not small:
                    rows.append((j, "", 0, 0, 0, 0, 0, False, False, [0] * unroll))
                continue
            (key, ident, steps), k = b
            count = -(-len(steps) // unroll)
            part = steps[k * unroll:(k + 1) * unroll]
            rows.append((j, key, ident, k, count, len(part), len(steps), k == 0, k == count - 1,
                         part + [0] * (unroll - len(part))))
            busy[j] = ((key, ident, steps), k + 1) if k + 1 < count else None
        batches.append(rows)


def rows_of(dataset):
    out = []
    for batch in dataset.as_numpy_iterator():
        batch = batch if isinstance(batch, dict) else {**batch[0], **batch[1]}
        out.append([(int(batch["slot"][i]), batch["key"][i].decode(), int(batch["id"][i]), int(batch["sequence"][i]),
                     int(batch["sequence_count"][i]), int(batch["length"][i]), int(batch["total_length"][i]),
                     bool(batch["is_first"][i]), bool(batch["is_last"][i]), [int(a) for a in batch["x"][i]])
                    for i in range(len(batch["slot"]))])
    return out


def lanes_hold_every_sequence_once_in_order(batches, seqs, lanes):
    """Per slot, the real steps of consecutive batches are whole sequences, back to back, each exactly once."""
    per_slot = collections.defaultdict(list)
    for rows in batches:
        for slot, key, _, k, count, length, *_rest, steps in rows:
            if key:
                per_slot[slot].append((key, k, steps[:length]))
    seen = []
    for slot in range(lanes):
        for key, k, steps in per_slot[slot]:
            if k == 0:
                seen.append([key, []])
            assert seen[-1][0] == key
            seen[-1][1].extend(steps)
    want = {key: steps for key, _, steps in seqs if steps}
    assert sorted(key for key, _ in seen) == sorted(want)  # each once
    for key, steps in seen:
        assert steps == want[key]


@pytest.mark.parametrize("unroll,lanes,small,epochs", [
    (4, 3, False, 1),
    (4, 3, True, 1),
    (3, 2, False, 1),
    (5, 1, False, 1),   # one lane: every sequence after the other
    (20, 3, False, 1),  # every sequence shorter than num_unroll: one padded segment each
    (4, 12, False, 1),  # more lanes than sequences: the extra lanes hold padding segments only
    (4, 12, True, 1),   # ... or are left out
    (4, 3, False, 2),   # epochs follow one another in the same lanes
    (2, 4, True, 3),
], ids=str)
def test_batches_are_exactly_the_reference(data, unroll, lanes, small, epochs):
    input_fn = build_input_fn(config(data, {"num_unroll": unroll, "allow_small_batch": small},
                                     target_batch_size=lanes, epochs=epochs))
    got = rows_of(input_fn())
    seqs = sequences(data) * epochs
    assert got == reference(seqs, unroll, lanes, small)
    report = input_fn.segment_report()
    assert (report.sequences, report.segments, report.skipped) == (
        9 * epochs, sum(-(-len(s) // unroll) for _, _, s in seqs), epochs)  # one sequence of 0 steps per epoch
    if epochs == 1:
        lanes_hold_every_sequence_once_in_order(got, seqs, lanes)
    if not small:
        assert {len(rows) for rows in got} == {lanes}


def test_a_single_sequence_shorter_than_num_unroll(tmp_path):
    d = write(tmp_path / "one", [[3]])
    got = rows_of(build_input_fn(config(d, {"num_unroll": 8}, target_batch_size=2))())
    assert got == [[(0, source_key(d, 0, 0), 0, 0, 1, 3, 3, True, True, [1, 2, 3, 0, 0, 0, 0, 0]),
                    (1, "", 0, 0, 0, 0, 0, False, False, [0] * 8)]]


def test_static_batch_dimension_and_dtypes(data):
    ds = build_input_fn(config(data, {"num_unroll": 4}))()
    features = ds.element_spec
    assert features["x"].shape == (3, 4) and features["id"].shape == (3,)
    assert {n: (s.dtype.name, tuple(s.shape)) for n, s in features.items() if n not in ("x", "id")} == {
        "key": ("string", (3,)), "sequence": ("int32", (3,)), "sequence_count": ("int32", (3,)),
        "length": ("int32", (3,)), "total_length": ("int32", (3,)), "is_first": ("bool", (3,)),
        "is_last": ("bool", (3,)), "slot": ("int32", (3,))}
    small = build_input_fn(config(data, {"num_unroll": 4, "allow_small_batch": True}))().element_spec
    assert small["x"].shape.as_list() == [None, 4]


def test_prefix_renames_the_counters_and_the_model_may_name_them(data):
    cfg = config(data, {"num_unroll": 4, "prefix": "seg_"}, inputs=("x", "id", "seg_length"))
    batch = next(build_input_fn(cfg)().as_numpy_iterator())
    assert sorted(batch) == sorted(["x", "id", "seg_key", "seg_sequence", "seg_sequence_count", "seg_length",
                                    "seg_total_length", "seg_is_first", "seg_is_last", "seg_slot"])
    assert batch["seg_length"].tolist() == [4, 4, 3]


def test_pad_false_takes_multiples_and_names_the_key_of_any_other_length(data, tmp_path):
    even = write(tmp_path / "even", [[4, 8, 0, 12]])
    got = rows_of(build_input_fn(config(even, {"num_unroll": 4, "pad": False}))())
    seqs = [(source_key(even, 0, r), r, list(v(0, r, np.arange(n)))) for r, n in enumerate([4, 8, 0, 12])]
    assert got == reference(seqs, 4, 3)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"segmenting\.pad: the sequence with key "
                       + source_key(data, 0, 0).replace(".", r"\.") + " has 7 steps, not a multiple of num_unroll 4"):
        rows_of(build_input_fn(config(data, {"num_unroll": 4, "pad": False}))())


def test_a_key_feature_names_the_sequences_and_may_not_repeat_within_an_epoch(data, tmp_path):
    got = rows_of(build_input_fn(config(data, {"num_unroll": 4, "key": "name"}, epochs=2))())
    named = [(f"f{f}r{r}", 100 * f + r, s) for (_, _, s), (f, r) in zip(
        sequences(data), [(f, r) for f in range(len(LENGTHS)) for r in range(len(LENGTHS[f]))])]
    assert got == reference(named * 2, 4, 3)  # the same keys again in the next epoch are fine
    twice = write(tmp_path / "twice", [[3, 5], [2, 6]], names=[["a", "b"], ["c", "b"]])
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"segmenting\.key: the key b repeats within an epoch"):
        rows_of(build_input_fn(config(twice, {"num_unroll": 4, "key": "name"}))())


def test_shuffled_lanes_are_the_reference_of_their_own_order_and_the_same_for_one_seed(data):
    def run(seed):
        return rows_of(build_input_fn(config(data, {"num_unroll": 4}, epochs=2, shuffle=True,
                                             num_shuffle_buffer_elements=4, num_filenames_shuffle_buffer=2,
                                             num_mix_files=2, seed=seed))())
    first = run(5)
    assert first == run(5)
    # Sequences start in input order: by batch, then lane. The shuffled order, fed to the reference, gives it all.
    started = [(row[1], row[2]) for rows in first for row in rows if row[7]]
    by_key = {key: steps for key, _, steps in sequences(data)}
    order = [(key, ident, list(by_key[key])) for key, ident in started]
    assert first == reference(order, 4, 3)
    assert sorted(started[:9]) == sorted(started[9:]) and started[:9] != [s[:2] for s in sequences(data) if s[2]]


def test_discrete_windows_are_segmented_with_the_key_of_their_first_record(tmp_path):
    files = [[(3, 1), (4, 1), (2, 1), (5, 1)]]
    d = write_discrete(tmp_path / "d", files)
    cfg = loader_config(d, [("frames", "frames")], inputs=["frames"], loader="discrete_sequence", min_window=2,
                        max_window=2, target_batch_size=2, segmenting={"num_unroll": 3})
    batches = list(build_input_fn(cfg)().as_numpy_iterator())
    joined = collections.defaultdict(list)
    for b in batches:
        for i in range(2):
            if b["length"][i]:
                joined[b["key"][i].decode()].extend(b["frames"][i][:b["length"][i], 0].tolist())
    path = os.path.join(d, "part-0.tfrecords")
    assert joined == {f"{path}:0": [100 * r + j for r in (0, 1) for j in range(files[0][r][0])],
                      f"{path}:2": [100 * r + j for r in (2, 3) for j in range(files[0][r][0])]}


def test_a_per_record_tensor_of_windows_of_several_sizes_is_refused(tmp_path):
    d = write_discrete(tmp_path / "d", [[(3, 1), (4, 1)]])
    cfg = loader_config(d, [("frames", "frames"), ("rid", "rid")], inputs=["frames", "rid"], loader="discrete_sequence",
                        min_window=1, max_window=2, segmenting={"num_unroll": 3})
    with pytest.raises(ConfigError, match=r"\$\.args\.segmenting\.context: model tensor 'rid' has one row per record"):
        build_input_fn(cfg)
    cfg["args"].update(min_window=2, segmenting={"num_unroll": 3, "context": ["rid"]})
    batch = next(build_input_fn(cfg)().as_numpy_iterator())
    assert batch["rid"].tolist() == [[0, 1], [0, 0]] and batch["length"].tolist() == [3, 0]  # lane 1: padding


def test_an_rnn_carrying_its_state_across_segments_equals_the_rnn_over_whole_sequences(data):
    """The equivalence the feature exists for: truncated BPTT's forward pass is the whole-sequence forward pass."""
    import keras

    units, lanes, unroll = 5, 3, 4
    cfg = loader_config(data, [("xf", "xf")], inputs=["xf"], target_batch_size=lanes,
                        segmenting={"num_unroll": unroll, "allow_small_batch": True})
    lstm = keras.layers.LSTM(units, return_sequences=True, return_state=True)
    saver = StateSaver({"h": tf.zeros([units]), "c": tf.zeros([units])}, lanes)

    @tf.function
    def step(features):
        h, c = saver.state("h", features), saver.state("c", features)
        mask = tf.sequence_mask(features["length"], unroll)
        out, h, c = lstm(features["xf"], mask=mask, initial_state=[h, c])
        saver.save_state("h", h, features)
        saver.save_state("c", c, features)
        return out, h

    outputs, finals = collections.defaultdict(list), {}
    for features in build_input_fn(cfg)():
        out, h = (t.numpy() for t in step(features))
        for i, key in enumerate(features["key"].numpy()):
            n = int(features["length"][i])
            outputs[key.decode()].append(out[i, :n])
            if features["is_last"][i]:
                finals[key.decode()] = h[i]  # the state the sequence ends with
    for key, _, steps in sequences(data):
        if not steps:
            assert key not in outputs
            continue
        x = (np.asarray(steps, np.float32) / 100000)[None, :, None]
        whole, h, _ = lstm(x)
        np.testing.assert_allclose(np.concatenate(outputs[key]), whole.numpy()[0], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(finals[key], h.numpy()[0], rtol=1e-5, atol=1e-6)


def test_state_saver_resets_first_segments_saves_per_slot_and_restores_from_a_checkpoint(tmp_path):
    saver = StateSaver({"h": tf.constant([1.0, 2.0])}, batch_size=3)
    features = {"is_first": tf.constant([True, False, True]), "slot": tf.constant([0, 1, 2])}
    np.testing.assert_array_equal(saver.state("h", features), [[1, 2], [1, 2], [1, 2]])
    saver.save_state("h", tf.constant([[5.0, 5], [6, 6], [7, 7]]))
    np.testing.assert_array_equal(saver.state("h", features), [[1, 2], [6, 6], [1, 2]])
    saver.save_state("h", tf.constant([[8.0, 8]]), {"is_first": tf.constant([False]), "slot": tf.constant([2])})
    np.testing.assert_array_equal(saver.state("h", {"is_first": tf.constant([False] * 3)}), [[5, 5], [6, 6], [8, 8]])
    path = tf.train.Checkpoint(saver=saver).save(str(tmp_path / "ckpt"))
    saver.reset()
    np.testing.assert_array_equal(saver.state("h", {"is_first": tf.constant([False] * 3)}), [[1, 2]] * 3)
    tf.train.Checkpoint(saver=saver).restore(path).assert_consumed()
    np.testing.assert_array_equal(saver.state("h", {"is_first": tf.constant([False] * 3)}), [[5, 5], [6, 6], [8, 8]])
    with pytest.raises(ConfigError, match="unknown state .c."):
        saver.state("c", features)


def test_the_iterator_and_the_saver_checkpoint_together(data, tmp_path):
    """The scan's lanes go into the iterator's checkpoint: batches after a restore are the batches after the save."""
    cfg = config(data, {"num_unroll": 3}, epochs=2, shuffle=True, num_shuffle_buffer_elements=4,
                 num_filenames_shuffle_buffer=2, num_mix_files=2, seed=2)
    iterator = iter(build_input_fn(cfg)())
    saver = StateSaver({"n": tf.constant(0, tf.int64)}, 3)
    checkpoint = tf.train.Checkpoint(iterator=iterator, saver=saver)
    for _ in range(3):
        features = next(iterator)
        saver.save_state("n", saver.state("n", features) + tf.cast(features["length"], tf.int64))
    path = checkpoint.save(str(tmp_path / "ckpt"))
    after = [next(iterator)["x"].numpy() for _ in range(2)]
    state = saver.state("n", {"is_first": tf.constant([False] * 3)}).numpy()
    saver.reset()
    checkpoint.restore(path)
    assert saver.state("n", {"is_first": tf.constant([False] * 3)}).numpy().tolist() == state.tolist()
    np.testing.assert_array_equal([next(iterator)["x"].numpy() for _ in range(2)], after)


@pytest.mark.parametrize("segmenting,args,inputs,path,fragment", [
    ({"num_unroll": 4, "batch_size": 2}, {}, ("x", "id"), "$.args.segmenting.batch_size",
     "found batch_size 2 and target_batch_size 3: expected them equal"),
    ({"num_unroll": 4, "context": ["x", "id"]}, {}, ("x", "id"), "$.args.segmenting.context[0]",
     "tensor 'x' has shape [?], which varies in time: expected a tensor of a fixed shape in context"),
    ({"num_unroll": 4, "context": []}, {}, ("x", "id"), "$.args.segmenting.context",
     "model tensor 'id' has shape [], which does not vary in time, and is not in segmenting.context"),
    ({"num_unroll": 4, "context": ["idd"]}, {}, ("x", "id"), "$.args.segmenting.context[0]",
     "tensor 'idd' is not a primary or secondary feature (did you mean 'id'?)"),
    ({"num_unroll": 4, "key": "nmae"}, {}, ("x", "id"), "$.args.segmenting.key",
     "key 'nmae' is neither a tensor the config makes nor a manifest feature (did you mean 'name'?)"),
    ({"num_unroll": 4, "key": "xf"}, {}, ("x", "id"), "$.args.segmenting.key",
     "manifest feature 'xf' is a feature list"),
    ({"num_unroll": 4}, {"secondary_features": [{"to_name": "length", "type": "length", "args": {"tensor": "x"}}]},
     ("x", "id", "length"), "$.args.segmenting",
     "counter 'length' is named 'length', which is a feature already (at $.args.secondary_features[0].to_name): "
     "expected a prefix that makes the counter names new (e.g. prefix: 'seg_')"),
    ({"num_unroll": 4, "prefix": "seg_"},
     {"secondary_features": [{"to_name": "seg_length", "type": "length", "args": {"tensor": "x"}}]},
     ("x", "id", "seg_length"), "$.args.segmenting.prefix", "counter 'length' is named 'seg_length'"),
    ({"num_unroll": 4}, {"chunking": {"size": 4}}, ("x", "id"), "$.args.segmenting",
     "found segmenting and chunking together: expected one"),
    ({"num_unroll": 4}, {"packing": {"length": 8, "tensors": ["x"]}}, ("x",), "$.args.segmenting",
     "found segmenting and packing together"),
    ({"num_unroll": 0}, {}, ("x", "id"), "$.args.segmenting.num_unroll", "expected an integer >= 1, found 0"),
    ({"num_unroll": 4}, {"padding": [{"tensor": "x", "batching": "ragged"}]}, ("x", "id"),
     "$.args.padding[0].batching", "found batching 'ragged' for tensor 'x', which segmenting cuts into segments of "
                                   "num_unroll steps: expected padded"),
    ({"num_unroll": 4, "key": "x"}, {}, ("x", "id"), "$.args.segmenting.key",
     "key tensor 'x' has shape [?]: expected a scalar per example"),
], ids=lambda p: p if isinstance(p, str) else None)
def test_config_errors_are_located(data, segmenting, args, inputs, path, fragment):
    cfg = config(data, segmenting, inputs=inputs, **args)
    if "context" in segmenting:
        cfg["args"]["segmenting"]["context"] = segmenting["context"]
    with pytest.raises(ConfigError) as caught:
        build_input_fn(cfg)
    assert any(p.path == path and fragment in p.message for p in caught.value.problems), caught.value.problems


def test_continuous_windows_are_segmented_with_the_key_of_their_first_step(tmp_path):
    from seqdata import write_continuous

    d = write_continuous(tmp_path / "c", [5, 3])  # records of 4 frames: 20 and 12 frames; y = 1000 * f + p
    cfg = loader_config(d, [("y", "y"), ("x", "x")], inputs=["x"], targets=["y"], loader="continuous_sequence",
                        min_window=6, max_window=6, target_batch_size=2, segmenting={"num_unroll": 4})
    joined = collections.defaultdict(list)
    for features, targets in build_input_fn(cfg)().as_numpy_iterator():
        for i in range(2):
            n = int(features["length"][i])
            np.testing.assert_array_equal(features["x"][i][:n, 0], targets["y"][i][:n])
            if n:
                joined[features["key"][i].decode()].append((int(features["sequence"][i]), targets["y"][i][:n].tolist()))
    want = {}
    for f, frames in ((0, 20), (1, 12)):
        for start in range(0, frames - 5, 6):  # back-to-back windows of 6 frames; a shorter end piece is dropped
            steps = [1000 * f + p for p in range(start, start + 6)]
            want[f"{os.path.join(d, f'part-{f}.tfrecords')}:{start // 4}:{start % 4}"] = [(0, steps[:4]),
                                                                                            (1, steps[4:])]
    assert joined == want


def test_endless_epochs_keep_the_lanes_running_and_an_empty_epoch_is_an_error(data, tmp_path):
    got = rows_of(build_input_fn(config(data, {"num_unroll": 4}, epochs=None))().take(30))
    assert got == reference(sequences(data) * 6, 4, 3)[:30]
    empty = write(tmp_path / "empty", [[0, 0]])
    with pytest.raises(tf.errors.InvalidArgumentError, match="an epoch gave no sequence of at least one step"):
        rows_of(build_input_fn(config(empty, {"num_unroll": 4}, epochs=None))().take(1))


def test_a_key_tensor_of_integers_names_the_sequences(data):
    got = rows_of(build_input_fn(config(data, {"num_unroll": 4, "key": "id"}))())
    assert got == reference([(str(ident), ident, steps) for _, ident, steps in sequences(data)], 4, 3)


# --- found by review: keys repeated across blocks, StateSaver misuse, checkpoints, models without a dict ---

def test_a_key_repeated_in_a_later_block_of_64_is_an_error(tmp_path):
    names = [[f"s{i}" for i in range(70)] + ["s3"]]  # the repeat comes in the second block of 64
    d = write(tmp_path / "many", [[2] * 71], names=names)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"segmenting\.key: the key s3 repeats within an epoch"):
        rows_of(build_input_fn(config(d, {"num_unroll": 4, "key": "name"}))())
    d = write(tmp_path / "fine", [[2] * 71], names=[[f"s{i}" for i in range(71)]])
    assert len(rows_of(build_input_fn(config(d, {"num_unroll": 4, "key": "name"}))())) == 24  # ceil(71 / 3)


def test_state_saver_mistakes_are_config_errors_naming_what_is_wrong():
    saver = StateSaver({"h": tf.zeros([2])}, np.int64(3))  # a numpy integer is an integer
    assert saver.batch_size == 3
    with pytest.raises(ConfigError, match=r"<StateSaver>: \$\.features: the features hold no 'seg_is_first'.*is "
                                          r"the StateSaver's prefix 'seg_' the config's segmenting.prefix"):
        StateSaver({"h": tf.zeros([2])}, 3, prefix="seg_").state("h", {"is_first": tf.constant([True] * 3)})
    with pytest.raises(ConfigError, match=r"\$\.batch_size: found batch_size 2\.0"):
        StateSaver({"h": tf.zeros([2])}, 2.0)
    with pytest.raises(tf.errors.InvalidArgumentError, match="a slot beyond the StateSaver's batch_size 3"):
        saver.state("h", {"is_first": tf.constant([False]), "slot": tf.constant([5])})


def test_a_sequence_loaders_segmented_iterator_restores_into_the_same_windows(tmp_path):
    """Its pipeline checkpoints (README, Scaling out): after a restore into a fresh pipeline come the very
    batches that came after the save, values and counters alike, across epochs."""
    from seqdata import write_continuous

    d = write_continuous(tmp_path / "c", [5, 3])
    cfg = loader_config(d, [("y", "y")], inputs=["y"], loader="continuous_sequence", min_window=3, max_window=7,
                        seed=1, epochs=3, target_batch_size=2, padding=True, segmenting={"num_unroll": 2})
    input_fn = build_input_fn(cfg)
    reference = list(input_fn().as_numpy_iterator())
    iterator = iter(input_fn())
    next(iterator)
    path = tf.train.Checkpoint(iterator=iterator).save(str(tmp_path / "ckpt"))
    restored = iter(input_fn())
    tf.train.Checkpoint(iterator=restored).restore(path)
    got = [tf.nest.map_structure(lambda t: t.numpy(), batch) for batch in restored]
    assert len(got) == len(reference) - 1 > 2
    for a, b in zip(got, reference[1:]):  # values and the segment counters alike
        assert sorted(a) == sorted(b)
        for name in a:
            np.testing.assert_array_equal(a[name], b[name])


@pytest.mark.parametrize("counters", [(), ("length",), ("length", "is_first", "key")], ids=str)
def test_a_functional_model_gets_the_counters_it_names_and_no_other_and_fits_without_a_warning(data, counters):
    """Keras 3 drops a dict key the model has no Input for, with a warning at fit time: the dataset built for a
    functional model yields exactly its inputs (the counters it names among them), with the reference's values."""
    import warnings

    import keras

    dtypes = {"key": "string", "is_first": "bool"}
    inputs = {"x": keras.Input((4,), dtype="int64", name="x"),
              **{c: keras.Input((), dtype=dtypes.get(c, "int32"), name=c) for c in counters}}
    taken = [keras.ops.cast(inputs["x"], "float32")] + [
        keras.ops.cast(inputs[c], "float32")[:, None] for c in counters if c != "key"]
    out = keras.layers.Dense(1, name="id")(keras.layers.Concatenate()(taken) if len(taken) > 1 else taken[0])
    model = keras.Model(inputs, {"id": out})
    cfg = config(data, {"num_unroll": 4})
    cfg.pop("model")  # the model's names: inputs x and the counters, target id
    dataset = build_input_fn(cfg, model=model)()
    rows = reference(sequences(data), 4, 3)  # (slot, key, id, sequence, count, length, total, first, last, steps)
    column = {"key": 1, "length": 5, "is_first": 7}
    batches = list(dataset.as_numpy_iterator())
    assert len(batches) == len(rows)
    for (features, targets), want in zip(batches, rows):
        assert sorted(features) == sorted(("x",) + counters) and sorted(targets) == ["id"]
        assert features["x"].tolist() == [r[9] for r in want] and targets["id"].tolist() == [r[2] for r in want]
        for c in counters:
            got = [v.decode() if isinstance(v, bytes) else v for v in features[c].tolist()]
            assert got == [r[column[c]] for r in want]
    model.compile(optimizer="sgd", loss={"id": "mse"}, jit_compile=False)  # (XLA takes no string key)
    # Endless, as for training (a finite segmented dataset has no known length: Keras warns when it ends).
    endless = build_input_fn({**cfg, "args": {**cfg["args"], "epochs": None}}, model=model)()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        history = model.fit(endless, steps_per_epoch=4, epochs=2, verbose=0, shuffle=False)
    assert [str(w.message) for w in caught] == []
    assert len(history.history["loss"]) == 2


def test_a_subclassed_model_gets_every_counter(data):
    """Keras keeps no inputs of a subclassed model: its call(features) takes what it uses, so it gets them all."""
    import keras

    class Model(keras.Model):
        def __init__(self):
            super().__init__()
            self.dense = keras.layers.Dense(1)

        def call(self, features):
            return self.dense(keras.ops.cast(features["x"], "float32"))

    cfg = config(data, {"num_unroll": 4})
    model = Model()
    model(next(iter(build_input_fn(cfg)())))  # built on a batch
    batch = next(build_input_fn(cfg, model=model)().as_numpy_iterator())
    assert sorted(batch) == sorted(["x", "id", "key", "sequence", "sequence_count", "length", "total_length",
                                    "is_first", "is_last", "slot"])
    assert batch["length"].tolist() == [r[5] for r in reference(sequences(data), 4, 3)[0]]


def test_a_model_taking_a_single_tensor_gets_it_alone(data):
    """A functional model's inputs are known: one keras.Input and no counter named, one tensor per batch (was:
    a ConfigError, the counters having no place; a functional model cannot take what it declares no Input for)."""
    import keras

    x = keras.Input((4,), dtype="int64", name="x")
    model = keras.Model(x, keras.layers.Dense(1, name="id")(keras.ops.cast(x, "float32")))
    cfg = config(data, {"num_unroll": 4})
    cfg.pop("model")  # the model's names: input x, target id
    features, targets = next(build_input_fn(cfg, model=model)().as_numpy_iterator())
    first = reference(sequences(data), 4, 3)[0]
    assert features.tolist() == [r[9] for r in first] and targets.tolist() == [r[2] for r in first]


@pytest.mark.parametrize("name,dtype,want,kinds", [
    ("is_first", "float32", "bool", "(bool), but the model input 'is_first' takes float32 (float)"),
    ("x", "float32", "int64", "(int), but the model input 'x' takes float32 (float)"),
])
def test_a_counter_of_the_wrong_dtype_kind_is_told_to_fix_the_input_not_to_cast(data, name, dtype, want, kinds):
    """A cast step acts on features, not on segmenting's counters: the error offers it for x, not for is_first."""
    import keras

    inputs = {"x": keras.Input((4,), dtype="float32" if name == "x" else "int64", name="x"),
              "is_first": keras.Input((), dtype=dtype if name == "is_first" else "bool", name="is_first")}
    out = keras.layers.Dense(1, name="id")(keras.layers.Concatenate()([
        keras.ops.cast(inputs["x"], "float32"), keras.ops.cast(inputs["is_first"], "float32")[:, None]]))
    cfg = config(data, {"num_unroll": 4})
    cfg.pop("model")
    with pytest.raises(ConfigError) as raised:
        build_input_fn(cfg, model=keras.Model(inputs, {"id": out}))
    message = str(raised.value)
    assert f"tensor {name!r} is {want} {kinds}: expected the same kind of dtype (give the keras.Input dtype={want!r}" \
        in message
    assert (f"or add a cast step to {name!r}" in message) == (name == "x")
