"""Chunking: sequences cut into chunks of size/step with zero context, which reassemble into the sequences.

Data: two files of SequenceExamples; record r of file f holds a sequence x of LENGTHS[f][r] steps with
x[j] = v(f, r, j) = 100000*f + 1000*r + j + 1 (never 0, so a context zero is never a real step), labels
y at a quarter of the rate (ceil(n / 4) steps, y[i] = -v(f, r, 4*i)) and a scalar id = 100*f + r. Every
chunk step therefore says which file, record and step it shows. Expected chunks come from a plain
Python reference (:func:`reference_chunks`).
"""
from __future__ import annotations

import collections
import math
import os

import numpy as np
import pytest
import tensorflow as tf

from batchloaders import ConfigError, build_input_fn, load_config
from conftest import feature, loader_config, sequence_example, write_manifest, write_records
from seqdata import discrete_steps, sequence_config, write_continuous, write_discrete

LENGTHS = [[7, 10, 3, 0, 12, 1], [9, 4, 16, 5]]
PAD = -7  # the padding value of x: past a chunk's length, never inside it


def v(f, r, j):
    return 100000 * f + 1000 * r + np.asarray(j) + 1


def sequence(f, r):
    return v(f, r, np.arange(LENGTHS[f][r]))


def labels(f, r):
    return -v(f, r, 4 * np.arange(math.ceil(LENGTHS[f][r] / 4)))  # the label of every fourth step


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    d = tmp_path_factory.mktemp("chunking") / "xy"
    write_manifest(d, [feature("x", "int64", [], "int", var_len=True), feature("y", "int64", [], "int", var_len=True),
                       feature("id", "int64", [], "int", var_len=False)], allow_var_len=True)
    for f, lengths in enumerate(LENGTHS):
        write_records(d / f"part-{f}.tfrecords", [
            sequence_example({"id": ("int", [100 * f + r])}, {"x": ("int", [[int(a)] for a in sequence(f, r)]),
                                                             "y": ("int", [[int(a)] for a in labels(f, r)])})
            for r in range(len(lengths))])
    return d


def reference_chunks(seq, size, step, left=0, right=0, min_size=1):
    """(chunks, dropped): the chunks of ``seq``, written plainly: cores at 0, step, ... up to the first that
    reaches the end, each with ``left``/``right`` steps of context from the sequence padded with zeros."""
    padded = [0] * left + list(seq) + [0] * right
    out, cores, start = [], [], 0
    while start < len(seq):
        core = min(size, len(seq) - start)
        out.append(padded[start:start + left + core + right])
        cores.append(core)
        if start + size >= len(seq):
            break
        start += step
    if cores and cores[-1] < min_size:
        return out[:-1], 1
    return out, 0


SECONDARY = [{"to_name": "n", "type": "length", "args": {"tensor": "x"}},
             {"to_name": "k", "type": "chunk_index"}, {"to_name": "count", "type": "chunk_count", "args": {"dtype": "int64"}},
             {"to_name": "key", "type": "source_key"}]


def config(data, chunking, **args):
    base = dict(target_batch_size=3, padding=[{"tensor": "x", "value": PAD}], secondary_features=SECONDARY,
                chunking=chunking)
    base.update(args)
    return loader_config(data, [("x", "x"), ("id", "id")], inputs=["x", "id", "n", "k", "count", "key"], **base)


def chunks_of(dataset):
    """Every chunk of every batch, in order: dicts of numpy values, x trimmed to the chunk's length."""
    out = []
    for batch in dataset.as_numpy_iterator():
        batch = batch if isinstance(batch, dict) else {**batch[0], **batch[1]}
        for i in range(len(next(iter(batch.values())))):
            chunk = {name: batch[name][i] for name in batch}
            if "n" in chunk:
                assert (chunk["x"][chunk["n"]:] == PAD).all()  # padding only past the chunk
                chunk["x"] = chunk["x"][:chunk["n"]]
            out.append(chunk)
    return out


def file_order():
    return [(f, r) for f in range(len(LENGTHS)) for r in range(len(LENGTHS[f]))]


@pytest.mark.parametrize("chunking", [
    {"size": 4},
    {"size": 4, "context": [1, 2], "min_size": 2},
    {"size": 5, "step": 3, "context": [2, 0]},
    {"size": 3, "step": 5, "context": [0, 1]},  # gaps between cores
    {"size": 4, "step": 2, "context": [1, 1], "min_size": 4},  # overlapping cores; short last pieces dropped
    {"size": 20, "context": [3, 3]},  # every sequence is one chunk
], ids=str)
def test_chunks_are_exactly_the_reference(data, chunking):
    input_fn = build_input_fn(config(data, chunking))
    got = chunks_of(input_fn())
    args = (chunking["size"], chunking.get("step", chunking["size"]), *chunking.get("context", [0, 0]),
            chunking.get("min_size", 1))
    want, dropped = [], 0
    for f, r in file_order():
        pieces, lost = reference_chunks(sequence(f, r), *args)
        dropped += lost
        key = f"{os.path.join(data, f'part-{f}.tfrecords')}:{r}".encode()
        want += [(list(p), f * 100 + r, k, len(pieces), key) for k, p in enumerate(pieces)]
    assert [(list(c["x"]), c["id"], c["k"], c["count"], c["key"]) for c in got] == want
    report = input_fn.chunk_report()
    assert (report.sequences, report.chunks, report.dropped) == (len(file_order()), len(want), dropped)
    assert str(report).startswith(f"{len(file_order())} sequence(s) cut into {len(want)} chunk(s); {dropped} last")


def test_the_drop_count_is_exact(data):
    """min_size 3 with size 4: the last cores of 7 (3 kept), 10 (2), 3 (3 kept), 12 (4), 1 (1), 9 (1), 4 (4),
    16 (4), 5 (1) steps: 4 dropped; the 1-step sequence gives no chunk at all."""
    input_fn = build_input_fn(config(data, {"size": 4, "min_size": 3}))
    got = chunks_of(input_fn())
    report = input_fn.chunk_report()
    assert report.dropped == 4 and report.chunks == len(got) == 2 + 2 + 1 + 3 + 0 + 2 + 1 + 4 + 1
    assert 100 * 0 + 5 not in {int(c["id"]) for c in got}  # record 5 of file 0 (1 step) is gone
    assert all(len(c["x"]) >= 3 for c in got)


@pytest.mark.parametrize("size, step, left, right", [(4, 4, 2, 1), (5, 3, 1, 3), (3, 1, 2, 2)])
def test_chunks_with_context_reassemble_into_the_sequences(data, size, step, left, right):
    """Strip the context, keep the new steps of each core (cores overlap when step < size) and concatenate
    them by chunk_index per source_key: every sequence comes back, each exactly once."""
    got = chunks_of(build_input_fn(config(data, {"size": size, "step": step, "context": [left, right]}))())
    by_key = collections.defaultdict(dict)
    for c in got:
        core = c["x"][left:len(c["x"]) - right]
        assert len(core) == min(size, len(core))  # the context is exactly left + right steps
        assert c["k"] not in by_key[c["key"]]
        by_key[c["key"]][int(c["k"])] = core
    for f, r in file_order():
        key = f"{os.path.join(data, f'part-{f}.tfrecords')}:{r}".encode()
        cores = by_key.pop(key, {})
        assert sorted(cores) == list(range(len(cores)))
        rebuilt = []
        for k in sorted(cores):  # core k starts at k * step: take the steps not seen yet
            rebuilt += list(cores[k][max(0, len(rebuilt) - k * step):])
        np.testing.assert_array_equal(rebuilt, sequence(f, r))
    assert not by_key


def test_labels_at_a_quarter_of_the_rate(data):
    """x in cores of 8 with context [2, 1]; labels (ceil(n / 4) of them) in cores of 2 without context:
    chunk k's labels are exactly the labels of chunk k's frames."""
    cfg = loader_config(data, [("x", "x"), ("y", "y")], inputs=["x", "n", "k", "key"], targets=["y"],
                        target_batch_size=4, padding=[{"tensor": "x", "value": PAD}, {"tensor": "y", "value": 99}],
                        secondary_features=[SECONDARY[0], SECONDARY[1], SECONDARY[3]],
                        chunking={"size": 8, "context": [2, 1],
                                  "tensors": [{"tensor": "y", "size": 2, "context": [0, 0]}]})
    got = chunks_of(build_input_fn(cfg)())
    want = []
    for f, r in file_order():
        frames, _ = reference_chunks(sequence(f, r), 8, 8, 2, 1)
        marks, _ = reference_chunks(labels(f, r), 2, 2)
        assert len(frames) == len(marks)
        want += list(zip(map(list, frames), map(list, marks)))
    assert len(got) == len(want)
    for c, (frames, marks) in zip(got, want):
        assert list(c["x"]) == frames
        y = list(c["y"])
        assert y[:len(marks)] == marks and set(y[len(marks):]) <= {99}
        core = [a for a in frames[2:len(frames) - 1]]
        assert marks == [-a for a in core[::4]]  # the label of every fourth frame of the core


def test_tensors_whose_chunk_counts_disagree_stop_the_run_naming_the_lengths(data):
    cfg = loader_config(data, [("x", "x"), ("y", "y")], inputs=["x"], targets=["y"], padding=True,
                        chunking={"size": 4, "tensors": [{"tensor": "y", "size": 4}]})  # y is not at x's rate
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=r"\$\.args\.chunking\.tensors: an example whose chunked tensors give different numbers "
                             r"of chunks: x 7 steps \(size 4, step 4: 2 chunks\), y 2 steps \(size 4, step 4: 1 chunks\)"):
        chunks_of(build_input_fn(cfg)())


def all_chunks(data, **chunking):
    cfg = config(data, {"size": 4, "context": [1, 1], **chunking})
    return [(tuple(c["x"]), c["key"]) for c in chunks_of(build_input_fn(cfg)())]


def test_shuffled_chunks_hold_every_chunk_once_per_epoch_and_repeat_with_the_seed(data):
    shuffled = dict(shuffle_buffer=16)
    plain = all_chunks(data)
    cfg = config(data, {"size": 4, "context": [1, 1], **shuffled}, epochs=2, seed=5, shuffle=True,
                 num_shuffle_buffer_elements=4, num_filenames_shuffle_buffer=2, num_mix_files=2)
    runs = [[(tuple(c["x"]), c["key"]) for c in chunks_of(build_input_fn(cfg)())] for _ in range(2)]
    assert runs[0] == runs[1]  # the seed fixes the order
    first, second = runs[0][:len(plain)], runs[0][len(plain):]
    assert collections.Counter(first) == collections.Counter(plain)  # each epoch: every chunk exactly once
    assert collections.Counter(second) == collections.Counter(plain)
    assert first != plain and first != second  # and the order is shuffled, differently each epoch
    cfg["args"]["seed"] = 6
    assert [(tuple(c["x"]), c["key"]) for c in chunks_of(build_input_fn(cfg)())] != runs[0]


def test_target_batch_size_counts_chunks_and_drop_remainder_keeps_full_batches(data):
    total = len(all_chunks(data))
    cfg = config(data, {"size": 4, "context": [1, 1]}, target_batch_size=4, drop_remainder=True,
                 padding=[{"tensor": "x", "value": PAD, "shape": [6]}])
    dataset = build_input_fn(cfg)()
    assert dataset.element_spec["x"].shape == (4, 6)  # static: full batches of chunks padded to 1 + 4 + 1
    sizes = [len(b["x"]) for b in dataset.as_numpy_iterator()]
    assert sizes == [4] * (total // 4)


def test_epochs_null_repeats_the_chunks(data):
    total = len(all_chunks(data))
    cfg = config(data, {"size": 4, "context": [1, 1]}, epochs=None)
    dataset = build_input_fn(cfg)()
    assert dataset.cardinality() == tf.data.INFINITE_CARDINALITY
    got = [(tuple(c["x"]), c["key"]) for c in chunks_of(dataset.take(-(-2 * total // 3)))]
    assert got[:total] == got[total:2 * total] == all_chunks(data)


def test_ragged_chunks_are_each_one_chunk(data):
    cfg = config(data, {"size": 4, "context": [1, 1]},
                 padding=[{"tensor": "x", "batching": "ragged"}])
    got = []
    for batch in build_input_fn(cfg)():
        assert isinstance(batch["x"], tf.RaggedTensor)
        np.testing.assert_array_equal(batch["x"].row_lengths(), batch["n"])
        got += [(tuple(row.numpy()), key) for row, key in zip(batch["x"], batch["key"].numpy())]
    assert got == all_chunks(data)


def test_continuous_windows_are_chunked_and_named_by_their_first_record(tmp_path):
    """Windows of 10 frames (records of 4 frames, frame p of file f is 1000*f + p): chunks of 4 with
    context [1, 1], each named by the record holding the window's first frame."""
    write_continuous(tmp_path, [6, 5])
    cfg = sequence_config(tmp_path, "continuous_sequence", [("y", "y")], inputs=["y", "k", "key"],
                          lo=10, hi=10, stride=7, target_batch_size=2, padding=[{"tensor": "y", "value": -1}],
                          secondary_features=[SECONDARY[1], SECONDARY[3]],
                          chunking={"size": 4, "context": [1, 1], "tensors": [{"tensor": "y"}]})  # a fixed window: named
    got = chunks_of(build_input_fn(cfg)())
    want = []
    for f, frames in enumerate([24, 20]):
        for start in range(0, frames - 10 + 1, 7):
            window = 1000 * f + np.arange(start, start + 10)
            key = f"{os.path.join(tmp_path, f'part-{f}.tfrecords')}:{start // 4}".encode()
            pieces, _ = reference_chunks(window, 4, 4, 1, 1)
            want += [(list(p), k, key) for k, p in enumerate(pieces)]
    assert [([a for a in c["y"] if a != -1], c["k"], c["key"]) for c in got] == want  # -1: padding only


def test_discrete_windows_are_chunked_and_named_by_their_first_record(tmp_path):
    files = [[(3, 2), (6, 4), (3, 2), (9, 6)], [(3, 2), (6, 4)]]  # frames at 3/2 of the words' rate
    write_discrete(tmp_path, files)
    cfg = sequence_config(tmp_path, "discrete_sequence", [("words", "words"), ("frames", "frames")],
                          inputs=["words", "frames", "k", "key"], lo=2, hi=2, target_batch_size=3, padding=True,
                          secondary_features=[SECONDARY[1], SECONDARY[3]],
                          chunking={"size": 2, "tensors": [{"tensor": "frames", "size": 3, "context": [1, 0]}]})
    got = chunks_of(build_input_fn(cfg)())
    want = []
    for f, records in enumerate(files):
        for r0 in range(0, len(records) - 1, 2):
            words = np.concatenate([discrete_steps(f, r, records[r][1]) for r in (r0, r0 + 1)])
            frames = np.concatenate([discrete_steps(f, r, records[r][0]) for r in (r0, r0 + 1)])
            key = f"{os.path.join(tmp_path, f'part-{f}.tfrecords')}:{r0}".encode()
            w, _ = reference_chunks(words, 2, 2)
            fr, _ = reference_chunks(frames, 3, 3, 1, 0)
            assert len(w) == len(fr)
            want += [(list(a), list(b), k, key) for k, (a, b) in enumerate(zip(w, fr))]
    assert [(list(c["words"][:len(w)]), list(c["frames"][:len(fr), 0]), c["k"], c["key"])
            for c, (w, fr, _, _) in zip(got, want)] == want
    assert len(got) == len(want)


@pytest.mark.parametrize("chunking, extra, where, words", [
    ({"size": 0}, {}, "$.args.chunking.size", "expected an integer >= 1, found 0"),
    ({"size": -3}, {}, "$.args.chunking.size", "expected an integer >= 1, found -3"),
    ({"size": 4, "step": 0}, {}, "$.args.chunking.step", "expected an integer >= 1, found 0"),
    ({"size": 4, "context": [1, -1]}, {}, "$.args.chunking.context[1]", "expected an integer >= 0, found -1"),
    ({"size": 4, "min_size": 5}, {}, "$.args.chunking.min_size", "found min_size 5 > size 4: expected at most size"),
    ({"size": 4, "tensors": [{"tensor": "xs"}]}, {}, "$.args.chunking.tensors[0].tensor",
     "tensor 'xs' is not a primary or secondary feature that exists before chunking (did you mean 'x'?)"),
    ({"size": 4, "tensors": [{"tensor": "x", "size": 0}]}, {}, "$.args.chunking.tensors[0].size",
     "expected an integer >= 1, found 0"),
    ({"size": 4, "tensors": [{"tensor": "id"}]}, {}, "$.args.chunking.tensors[0].tensor",
     "tensor 'id' is a scalar per example (shape [])"),
    ({"size": 4, "tensors": [{"tensor": "x", "size": 2}]}, {}, "$.args.chunking.tensors",
     "every chunked tensor (x) overrides size or step: expected at least one at the block's size 4 and step 4"),
    ({"size": 4}, {"packing": {"length": 8, "tensors": ["x", "id"]}}, "$.args.chunking",
     "found chunking and packing together: expected one"),
    ({"size": 4}, {"bucketing": {"by": "x", "max_tokens": 40}}, "$.args.chunking",
     "found chunking and bucketing together: expected one"),
    ({"size": 4, "shuffle_buffer": 2**24}, {"padding": [{"tensor": "x", "shape": [2**20]}]},
     "$.args.chunking.shuffle_buffer", "a chunk shuffle buffer of 16,777,216 chunks of at least 8,388,620 bytes"),
    ({"size": 4}, {"processing_steps": [{"tensor": "k", "type": "cast", "args": {"dtype": "int64"}}]},
     "$.args.processing_steps[0].tensor", "tensor 'k' is built on the chunks, after every processing step has run"),
])
def test_chunking_mistakes_are_located(data, chunking, extra, where, words):
    cfg = loader_config(data, [("x", "x"), ("id", "id")], inputs=["x", "id", "k"],
                        **{"padding": True, "secondary_features": [SECONDARY[1]], "chunking": chunking, **extra})
    with pytest.raises(ConfigError) as caught:
        load_config(cfg)
    assert [(p.path, words in p.message) for p in caught.value.problems
            if not p.path.startswith("$.args.packing")] == [(where, True)], caught.value.problems


@pytest.mark.parametrize("kind", ["chunk_index", "chunk_count", "source_key"])
def test_chunk_metadata_without_chunking_is_located(data, kind):
    cfg = loader_config(data, [("x", "x")], inputs=["x", "m"], padding=True,
                        secondary_features=[{"to_name": "m", "type": kind}])
    with pytest.raises(ConfigError) as caught:
        load_config(cfg)
    assert [(p.path, p.message.split(":")[0]) for p in caught.value.problems] == [
        ("$.args.secondary_features[0].type", f"secondary feature type {kind!r} describes a chunk, and there are "
                                              "no chunks")]
    assert "expected a chunking block in args" in caught.value.problems[0].message


def test_a_chunked_tensor_needs_padding(data):
    cfg = loader_config(data, [("x", "x")], inputs=["x"], chunking={"size": 4})
    with pytest.raises(ConfigError, match=r"\$\.args\.padding: tensor 'x' has a variable length axis"):
        load_config(cfg)


def test_the_chunked_shapes_are_what_the_config_says(data):
    cfg = load_config(config(data, {"size": 4, "context": [1, 1]}))
    assert cfg.chunking.names == ("x",) and cfg.chunking.copied == ("id",) and cfg.chunking.reference == "x"
    assert cfg.tensors["x"].shape == (None,) and cfg.tensors["key"].dtype == "string"


def test_bench_counts_the_chunks_and_their_padding(data, tmp_path):
    """Batches of 3 chunks padded to their longest: the real and padded elements of x worked out from the
    reference chunks, and the chunk counts of the timed pass."""
    import io
    import json

    from batchloaders.cli import bench

    path = tmp_path / "chunked.json"
    path.write_text(json.dumps(config(data, {"size": 4, "context": [1, 2], "min_size": 2})))
    out = io.StringIO()
    bench.run(str(path), batches=100, out=out)
    widths, dropped = [], 0
    for f, r in file_order():
        pieces, lost = reference_chunks(sequence(f, r), 4, 4, 1, 2, 2)
        widths += [len(p) for p in pieces]
        dropped += lost
    padded = sum(3 * max(widths[i:i + 3]) for i in range(0, len(widths), 3) if len(widths[i:i + 3]) == 3)
    padded += len(widths) % 3 * max(widths[-(len(widths) % 3):]) if len(widths) % 3 else 0
    text = out.getvalue()
    assert f"examples: {len(widths)}\n" in text
    assert (f"chunks (examples are chunks): {len(file_order())} sequence(s) cut into {len(widths)} chunk(s); "
            f"{dropped} last piece(s)") in text
    assert f"  x: {sum(widths) / padded:.4f} ({sum(widths)} / {padded})" in text


def test_a_fixed_length_example_named_in_tensors_is_chunked(tmp_path):
    """Examples (not SequenceExamples) of 10 steps, read unshuffled in parsed blocks: x is chunked because
    tensors names it; the scalar id is copied; keys name file and record."""
    from conftest import example

    write_manifest(tmp_path, [feature("x", "int64", [10], "int"), feature("id", "int64", [], "int")])
    for f in range(2):
        write_records(tmp_path / f"part-{f}.tfrecords", [
            example(x=("int", (v(f, r, np.arange(10))).tolist()), id=("int", [100 * f + r])) for r in range(3)])
    cfg = loader_config(tmp_path, [("x", "x"), ("id", "id")], inputs=["x", "id", "k", "key"], target_batch_size=4,
                        padding=[{"tensor": "x", "value": PAD}], secondary_features=[SECONDARY[1], SECONDARY[3]],
                        chunking={"size": 4, "step": 3, "context": [0, 1], "tensors": [{"tensor": "x"}]})
    got = [([a for a in c["x"] if a != PAD], c["id"], c["k"], c["key"]) for c in chunks_of(build_input_fn(cfg)())]
    want = []
    for f in range(2):
        for r in range(3):
            pieces, _ = reference_chunks(v(f, r, np.arange(10)), 4, 3, 0, 1)
            key = f"{os.path.join(tmp_path, f'part-{f}.tfrecords')}:{r}".encode()
            want += [(list(p), 100 * f + r, k, key) for k, p in enumerate(pieces)]
    assert got == want and len(want) == 2 * 3 * 3


def test_a_plugin_built_on_chunks_must_be_batched():
    from batchloaders import PluginError, register_secondary

    with pytest.raises(PluginError, match="found after_chunking without batched"):
        register_secondary("chunk_thing", after_chunking=True)(lambda features: features)


# --- found by review: record axes, no chunk with epochs null, memory, batch counts, plugins' source keys ---

def test_a_discrete_windows_per_record_feature_is_copied_whatever_the_window_sizes(tmp_path):
    """rid has one row per record: a record axis, not a time axis. Windows of 1 to 3 records make it [?],
    and it must still be copied to every chunk of its window, not cut at the words' rate."""
    files = [[(2, 3), (2, 5), (2, 1), (2, 4)], [(2, 2), (2, 6)]]
    write_discrete(tmp_path, files)
    cfg = sequence_config(tmp_path, "discrete_sequence", [("words", "words"), ("rid", "rid")],
                          inputs=["words", "rid", "n"], lo=1, hi=3, target_batch_size=4, seed=3,
                          padding=[{"tensor": "rid", "value": -1}, {"tensor": "words", "value": -1}],
                          secondary_features=[{"to_name": "n", "type": "length", "args": {"tensor": "words"}}],
                          chunking={"size": 2})
    assert load_config(cfg).chunking.copied == ("rid",)
    words_seen = collections.Counter()
    for batch in build_input_fn(cfg)().as_numpy_iterator():
        for words, rid, n in zip(batch["words"], batch["rid"], batch["n"]):
            real = [int(r) for r in rid if r != -1]
            assert list(rid) == real + [-1] * (len(rid) - len(real))  # -1 (not a loader's 0) past the records
            assert 1 <= len(real) <= 3 and real == list(range(real[0], real[0] + len(real)))  # one window's records
            # word 10000 f + 100 r + j belongs to record rid 100 f + r: every word of the chunk is the window's
            assert {int(w) // 100 for w in words[:n]} <= set(real), (words, real)
            words_seen.update(int(w) for w in words[:n])
    # Windows of whole records cover the files (each record once per epoch: the draws of seed 3 leave no
    # file's last records out), chunks cover the windows.
    assert words_seen == collections.Counter(int(w) for f, records in enumerate(files)
                                             for r, (_, n_words) in enumerate(records)
                                             for w in discrete_steps(f, r, n_words))


def test_epochs_null_with_no_chunk_at_all_fails_instead_of_hanging(data):
    cfg = config(data, {"size": 40, "min_size": 40}, epochs=None)  # the longest sequence has 16 steps
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"\$\.args\.chunking: a whole pass over the data gave "
                                                             "no chunk .*min_size 40"):
        next(iter(build_input_fn(cfg)()))


def test_epochs_null_with_a_chunk_shuffle_and_no_chunk_fails_too(data):
    cfg = config(data, {"size": 40, "min_size": 40, "shuffle_buffer": 8}, epochs=None)
    with pytest.raises(tf.errors.InvalidArgumentError, match="a whole pass over the data gave no chunk"):
        next(iter(build_input_fn(cfg)()))


def test_chunks_count_at_their_full_width_against_the_memory_limits(data):
    """Chunks are made and shuffled left + size + right steps wide: a huge size is a config error, not an OOM."""
    with pytest.raises(ConfigError, match=r"\$\.args\.target_batch_size: one batch of 3 examples would hold at least"):
        load_config(config(data, {"size": 2**31 - 1}))
    with pytest.raises(ConfigError, match=r"\$\.args\.chunking\.shuffle_buffer: a chunk shuffle buffer of 16,384 "
                                          r"chunks of at least 8,388,6\d\d bytes"):
        load_config(config(data, {"size": 2**20, "shuffle_buffer": 2**14}))


def test_describe_gives_no_batch_count_for_chunks(data, tmp_path):
    from batchloaders.cli.describe import steps_line, total_batches

    checked = load_config(config(data, {"size": 4}, epochs=1))
    assert total_batches(checked) is None
    assert steps_line(checked) == "steps per epoch: unknown (chunking: chunks are counted only once made)"


def test_a_plugin_chunk_type_gets_the_source_key(data):
    """extend.py promises after_chunking types extras["chunk"]["source_key"], with no source_key feature."""
    from batchloaders import register_secondary
    from batchloaders.transform.builtin_types import load
    from batchloaders.transform.registry import SECONDARY
    from batchloaders.core.model import TensorInfo

    load()
    saved = SECONDARY.snapshot()
    try:
        @register_secondary("key_length", schema={"type": "object", "additionalProperties": False},
                            infer=lambda args, ctx: TensorInfo("int32", ()), batched=True, after_chunking=True)
        def key_length(args, batch, info):
            return tf.strings.length(batch.extras["chunk"]["source_key"]), None

        cfg = loader_config(data, [("x", "x")], inputs=["x", "kl"], target_batch_size=4, padding=True,
                            secondary_features=[{"to_name": "kl", "type": "key_length"}], chunking={"size": 5})
        got = [int(k) for batch in build_input_fn(cfg)().as_numpy_iterator() for k in batch["kl"]]
    finally:
        SECONDARY.restore(saved)
    want = [len(f"{data / f'part-{f}.tfrecords'}:{r}") for f, r in file_order()
            for _ in reference_chunks(sequence(f, r), 5, 5)[0]]
    assert got == want
