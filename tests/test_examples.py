"""Every example manifest and config validates, builds, and yields batches made of the corpus text."""
from __future__ import annotations

import glob
import os

import numpy as np
import pytest

from batchloaders import build_input_fn, load_config, load_manifest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIGS = sorted(glob.glob(os.path.join(ROOT, "configs", "*.yaml")) + glob.glob(os.path.join(ROOT, "configs", "*.json")))
MANIFESTS = sorted(glob.glob(os.path.join(ROOT, "manifests", "*.json")))


@pytest.fixture(scope="module")
def corpus():
    from batchloaders.demo_data import corpus, generate

    generate()
    return [g.encode("ascii") for g in corpus()]


def test_there_is_an_example_config_for_every_loader_type(corpus):
    types = {load_config(p).type for p in CONFIGS}
    assert types == {"independent", "continuous_sequence", "discrete_sequence"}


@pytest.mark.parametrize("path", CONFIGS, ids=os.path.basename)
def test_yaml_configs_name_their_schema_on_the_first_line(path):
    first = open(path).readline().strip()
    assert first == "# yaml-language-server: $schema=../schemas/loader_config.schema.json"
    assert os.path.isfile(os.path.join(os.path.dirname(path), first.split("=", 1)[1]))


@pytest.mark.parametrize("path", MANIFESTS, ids=os.path.basename)
def test_manifests_validate(path):
    assert load_manifest(path).features


def windows_of(path, corpus, batches=3):
    config = load_config(path)
    return config, list(build_input_fn(path)().take(batches).as_numpy_iterator())


def in_corpus(seq, corpus) -> bool:
    data = bytes(int(c) for c in seq)
    return any(data in group for group in corpus)


def test_chars_examples_are_context_and_following_character(corpus):
    _, batches = windows_of(os.path.join(ROOT, "configs", "chars_independent.yaml"), corpus)
    for features, targets in batches:
        assert features["context"].shape == (64, 16)
        for context, nxt in zip(features["context"], targets["next_char"]):
            assert in_corpus(list(context) + [nxt], corpus)


def test_the_demo_reads_the_service_config_through_a_service_of_its_own(corpus, capsys):
    """make demo builds every example config: chars_service.yaml names a dispatcher at localhost:5050 that
    nobody started (the demo stopped there with a ServiceError), so the demo starts one in-process and
    reads the config's batches through it: examples of the corpus, as the local config gives."""
    from batchloaders import demo

    input_fn, dataset = demo.dataset_of(os.path.join(ROOT, "configs", "chars_service.yaml"))
    assert input_fn.config.service.address == "grpc://localhost:5050"
    assert "an in-process tf.data service at localhost:" in capsys.readouterr().out
    for features, targets in dataset.take(2).as_numpy_iterator():
        assert features["context"].shape == (64, 16)
        for context, nxt in zip(features["context"], targets["next_char"]):
            assert in_corpus(list(context) + [nxt], corpus)
    local_fn, local = demo.dataset_of(os.path.join(ROOT, "configs", "chars_independent.yaml"))  # no service
    first, expected = next(local.as_numpy_iterator()), next(local_fn().as_numpy_iterator())
    np.testing.assert_array_equal(first[0]["context"], expected[0]["context"])


def test_stream_windows_are_text_and_the_same_text_shifted_by_one(corpus):
    _, batches = windows_of(os.path.join(ROOT, "configs", "stream_continuous.yaml"), corpus)
    for features, targets in batches:
        np.testing.assert_array_equal(features["text"][:, 1:], targets["next_text"][:, :-1])
        for text, nxt in zip(features["text"], targets["next_text"]):
            assert in_corpus(list(text) + [nxt[-1]], corpus)


def test_sentence_windows_are_whole_consecutive_sentences(corpus):
    from batchloaders.demo_data import corpus as groups, split_sentences

    files = [split_sentences(g) for g in groups()]
    _, batches = windows_of(os.path.join(ROOT, "configs", "sentences_discrete.yaml"), corpus)
    for features, targets in batches:
        for chars, ids, nxt in zip(features["chars"], features["sentence_ids"], targets["next_chars"]):
            n = int((ids >= 0).sum())
            text = bytes(int(c) for c in list(chars[:n]) + [nxt[n - 1]])
            k = len(set(ids[:n].tolist()))
            assert 2 <= k <= 4  # 2..4 sentences per window
            assert any(text == b"".join(sents[i:i + k]) for sents in files for i in range(len(sents)))


def test_chars_plugin_lowercases_reverses_and_one_hots(corpus):
    _, batches = windows_of(os.path.join(ROOT, "configs", "chars_plugin.yaml"), corpus)
    lowered = [group.lower() for group in corpus]
    upper_seen = 0
    for features, targets in batches:
        assert features["context"].shape == (64, 16) and targets["next_char"].shape == (64, 128)
        np.testing.assert_array_equal(targets["next_char"].sum(1), 1.0)
        for context, one_hot in zip(features["context"], targets["next_char"]):
            nxt = int(one_hot.argmax())
            text = bytes(int(c) for c in context[::-1])  # reverse undone: oldest character first
            assert not any(65 <= c <= 90 for c in text)  # lowercase ran on every character
            assert any(text + bytes([nxt]).lower() in group for group in lowered)
            upper_seen += all(text + bytes([nxt]) not in group for group in corpus)
    assert upper_seen  # the corpus has capitals: some contexts were changed by the plugin


def test_sentences_ragged_rows_are_whole_sentences(corpus):
    import tensorflow as tf

    from batchloaders.demo_data import corpus as groups, split_sentences

    files = [split_sentences(g) for g in groups()]
    dataset = build_input_fn(os.path.join(ROOT, "configs", "sentences_ragged.yaml"))()
    for features, targets in dataset.take(3):
        chars, words, nxt = features["chars"], features["words"], targets["next_chars"]
        assert isinstance(chars, tf.RaggedTensor) and isinstance(words, tf.RaggedTensor)
        assert isinstance(nxt, tf.SparseTensor)
        np.testing.assert_array_equal(words.row_lengths(), features["sentences"])  # dense: one count per window
        dense_next = tf.sparse.to_dense(nxt).numpy()
        for i, row in enumerate(chars):
            n = int(row.shape[0])
            assert (nxt.indices.numpy()[:, 0] == i).sum() == n  # the sparse row holds exactly n characters
            text = bytes(int(c) for c in list(row.numpy()) + [dense_next[i, n - 1]])
            k = int(features["sentences"][i])
            assert 2 <= k <= 4
            assert any(text == b"".join(sents[j:j + k]) for sents in files for j in range(len(sents)))


def test_sentences_bucketed_batches_keep_the_budget_and_the_text(corpus):
    from batchloaders.demo_data import corpus as groups, split_sentences

    files = [split_sentences(g) for g in groups()]
    real = padded = 0
    for features, targets in build_input_fn(os.path.join(ROOT, "configs", "sentences_bucketed.yaml"))().take(20):
        chars, n, nxt = features["chars"].numpy(), features["n"].numpy(), targets["next_chars"].numpy()
        assert chars.size <= 4096 and chars.shape[1] == n.max()
        real, padded = real + n.sum(), padded + chars.size
        for row, k, follow in zip(chars, n, nxt):
            text = bytes(int(c) for c in list(row[:k]) + [follow[k - 1]])
            assert not row[k:].any()
            assert any(text in b"".join(sents) for sents in files)
    assert real / padded > 0.85


def test_sentences_packed_rows_hold_whole_windows_of_text(corpus):
    from batchloaders.demo_data import corpus as groups, split_sentences

    texts = [b"".join(split_sentences(g)) for g in groups()]
    real = total = 0
    for features, targets in build_input_fn(os.path.join(ROOT, "configs", "sentences_packed.yaml"))().take(5):
        chars, seg, pos, nxt = (features["chars"].numpy(), features["segment_ids"].numpy(),
                                features["positions"].numpy(), targets["next_chars"].numpy())
        assert chars.shape == (8, 1024)
        for row_chars, row_seg, row_pos, row_next in zip(chars, seg, pos, nxt):
            for s in range(1, row_seg.max() + 1):
                piece = row_chars[row_seg == s]
                np.testing.assert_array_equal(row_pos[row_seg == s], np.arange(len(piece)))
                np.testing.assert_array_equal(row_next[row_seg == s][:-1], piece[1:])  # next character
                assert any(bytes(int(c) for c in piece) in text for text in texts)
        real, total = real + (seg > 0).sum(), total + seg.size
    assert real / total > 0.95


def test_sentences_encoder_decoder_rows_pair_each_prefix_with_its_own_continuation(corpus):
    from batchloaders.demo_data import corpus as groups, split_sentences

    texts = [b"".join(split_sentences(g)) for g in groups()]
    windows = 0
    for features, targets in build_input_fn(os.path.join(ROOT, "configs", "sentences_encoder_decoder.yaml"))().take(3):
        f = {k: v.numpy() for k, v in features.items()}
        nxt = targets["decoder_target_tokens"].numpy()
        assert f["inputs"].shape == (8, 1024) and nxt.shape == (8, 128)
        for row in range(8):
            enc, dec = f["inputs_segment_ids"][row], f["decoder_segment_ids"][row]
            assert enc.max() <= dec.max()  # every window has decoder characters (a short one no prefix)
            for s in range(1, dec.max() + 1):
                prefix, read, predicted = f["inputs"][row][enc == s], f["decoder_input_tokens"][row][dec == s], nxt[row][dec == s]
                assert (len(read) == 24 if len(prefix) else 0 < len(read) <= 24) and (predicted[:-1] == read[1:]).all()
                np.testing.assert_array_equal(f["decoder_positions"][row][dec == s], np.arange(len(read)))
                np.testing.assert_array_equal(f["inputs_positions"][row][enc == s], np.arange(len(prefix)))
                # The prefix and the decoder's characters of segment s are one window of text.
                window = bytes(int(c) for c in list(prefix) + [read[0]] + list(predicted))
                assert any(window in t for t in texts)
                windows += 1
    assert windows >= 3 * 8 * 2


def test_sentences_chunked_chunks_are_text_after_their_left_context(corpus):
    from batchloaders.demo_data import corpus as groups, split_sentences

    texts = [b"".join(split_sentences(g)) for g in groups()]
    input_fn = build_input_fn(os.path.join(ROOT, "configs", "sentences_chunked.yaml"))
    firsts = 0
    for features, targets in input_fn().take(5):
        chars, chunk, nxt = features["chars"].numpy(), features["chunk"].numpy(), targets["next_chars"].numpy()
        assert chars.shape == (32, 72) and nxt.shape == (32, 64)
        for row, k, follow in zip(chars, chunk, nxt):
            n = int((follow != 0).sum())  # the core's length (the text holds no NUL; padding is 0)
            assert 16 <= n <= 64 and not follow[n:].any() and not row[8 + n:].any()
            core = row[8:8 + n]
            np.testing.assert_array_equal(follow[:n - 1], core[1:])  # the targets: the next characters
            if k == 0:  # the window's start: its context is zero padding
                assert not row[:8].any()
                firsts += 1
            else:  # the 8 characters before the core, from the same text
                assert row[:8].all()
            text = bytes(int(c) for c in list(row[:8][row[:8] > 0]) + list(core) + [follow[n - 1]])
            assert any(text in t for t in texts)
    assert firsts and input_fn.chunk_report().chunks >= 5 * 32


def test_sentences_segmented_lanes_carry_whole_windows_of_text(corpus):
    from batchloaders.demo_data import corpus as groups, split_sentences

    texts = [b"".join(split_sentences(g)) for g in groups()]
    windows, done = {}, 0
    for features, targets in build_input_fn(os.path.join(ROOT, "configs", "sentences_segmented.yaml"))().take(40):
        f = {k: v.numpy() for k, v in features.items()}
        nxt = targets["next_chars"].numpy()
        assert f["chars"].shape == (16, 32) and f["slot"].tolist() == list(range(16))
        for lane in range(16):
            n, key = int(f["length"][lane]), f["key"][lane]
            np.testing.assert_array_equal(f["chars"][lane][1:n], nxt[lane][:n - 1])  # the next characters
            assert not f["chars"][lane][n:].any()
            if f["is_first"][lane]:
                windows[(lane, key)] = []
            if (lane, key) not in windows:  # (the window began before the ones this test saw)
                continue
            part = windows[(lane, key)]
            assert int(f["sequence"][lane]) * 32 == sum(len(p) for p in part)  # consecutive segments, in order
            part.append(bytes(int(c) for c in f["chars"][lane][:n]))
            if f["is_last"][lane]:
                text = b"".join(part)
                assert len(text) + 1 == int(f["total_length"][lane]) + 1 and any(text in t for t in texts)
                done += 1
    assert done >= 16


def test_chars_service_runs_on_a_dispatcher_and_its_workers(corpus):
    """The config names localhost:5050, which validates without a dispatcher; input_fn's params give the one
    running (TensorFlow's servers, in this process, on ports the system chooses)."""
    from batchloaders.runtime import service

    dispatcher = service.start_dispatcher()
    address = service.bound_address(dispatcher)
    workers = [service.start_worker(address, heartbeat_ms=200) for _ in range(2)]  # quick to delete
    try:
        path = os.path.join(ROOT, "configs", "chars_service.yaml")
        dataset = build_input_fn(path)(params={"service_address": address})
        batches = list(dataset.take(3).as_numpy_iterator())
    finally:
        for server in workers + [dispatcher]:
            server.stop()
    assert load_config(path).service.address == "grpc://localhost:5050"
    assert len(batches) == 3
    for features, targets in batches:
        assert features["context"].shape == (64, 16)
        for context, nxt in zip(features["context"], targets["next_char"]):
            assert in_corpus(list(context) + [nxt], corpus)


def test_the_mixture_draws_both_corpora_by_weight(corpus):
    from batchloaders.demo_data import zen

    text = zen().encode("ascii")
    batches = list(build_input_fn(os.path.join(ROOT, "configs", "chars_mixture.yaml"))().take(40).as_numpy_iterator())
    sources = np.concatenate([features["corpus"] for features, _ in batches])
    assert abs((sources == 1).mean() - 0.1) < 0.045  # weights 9:1; 5 standard deviations over 2,560 draws
    for features, targets in batches:
        for context, nxt, source in zip(features["context"], targets["next_char"], features["corpus"]):
            seq = bytes(int(c) for c in list(context) + [nxt])
            assert (seq in text) if source == 1 else in_corpus(list(seq), corpus)


@pytest.mark.parametrize("name, groups", [("sentences_packed", 1), ("sentences_encoder_decoder", 2)])
def test_bench_reports_packing_efficiency_for_windows_of_varying_length(corpus, name, groups):
    """bench measures the loader's window units on the loader's own tensors, not the packed rows' (whose segment
    tensors only packing makes): each packed tensor's real steps are at most its rows' steps."""
    import io
    import re

    from batchloaders.cli import bench

    out = io.StringIO()
    bench.run(os.path.join(ROOT, "configs", f"{name}.yaml"), batches=3, seconds=30, out=out, progress=io.StringIO())
    found = re.findall(r"^  (\w+): (0\.\d{4}) \((\d+) / (\d+)\)$", out.getvalue(), re.M)
    rows = int(re.search(r"over the ([\d,]+) rows", out.getvalue()).group(1).replace(",", ""))
    lengths = load_config(os.path.join(ROOT, "configs", f"{name}.yaml")).packing.packed_groups
    want = {n: g.length * rows for g in lengths for n in g.tensors}
    assert {n: int(padded) for n, _, _, padded in found} == want
    assert all(0 < int(real) <= int(padded) and abs(int(real) / int(padded) - float(rate)) < 1e-4
               for _, rate, real, padded in found)
    assert len({g.segment_ids for g in lengths}) == groups
