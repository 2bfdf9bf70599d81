"""discrete_sequence: every window is k whole consecutive records of one file.

Step j of record r of file f holds 10000*f + 100*r + j; the context features
are rid = 100*f + r and pair = [f, r] (see seqdata.py).
"""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import batchloaders
from batchloaders import ConfigError
from conftest import collect
from seqdata import discrete_steps, discrete_windows, sequence_config, write_discrete

# (frames, words) per record; some feature lists are empty.
FILES = [
    [(2, 1), (3, 2), (0, 1), (1, 3), (4, 0), (2, 2), (1, 1), (3, 1), (2, 2), (1, 4)],
    [(1, 1), (2, 2), (3, 3), (1, 0), (2, 1), (5, 2), (1, 1)],
    [(1, 1)],
]
PRIMARY = [("frames", "frames"), ("words", "words"), ("rid", "rid"), ("pair", "pair")]
LENGTHS = [{"to_name": f"n_{name}", "type": "length", "args": {"tensor": name}} for name in ("frames", "words", "rid")]
SHUFFLE = dict(shuffle=True, num_shuffle_buffer_elements=16, num_filenames_shuffle_buffer=3, num_mix_files=2)


def run(directory, lo, hi, primary=PRIMARY, **args):
    names = [to for _, to in primary] + [s["to_name"] for s in args.get("secondary_features", ())]
    config = sequence_config(directory, "discrete_sequence", primary, inputs=names, lo=lo, hi=hi,
                             target_batch_size=3, **args)
    return collect(batchloaders.build_input_fn(config)())


def split(batches, files=FILES):
    """[(file, first record, k)] of every window, checking each is k whole consecutive records of one file."""
    return discrete_windows(batches, files)


@pytest.mark.parametrize("compression", [None, "gzip"])
def test_windows_are_whole_consecutive_records(tmp_path, compression):
    write_discrete(tmp_path, FILES, compression=compression)
    got = split(run(tmp_path, 1, 3, padding=True, seed=5, secondary_features=LENGTHS))
    for f, records in enumerate(FILES):
        mine = [(r0, k) for g, r0, k in got if g == f]
        assert all(1 <= k <= 3 for _, k in mine)
        # Back to back from the first record; the records left at the end make less than a window.
        assert [r0 for r0, _ in mine] == list(np.cumsum([0] + [k for _, k in mine]))[:len(mine)]
        assert len(records) - sum(k for _, k in mine) < 3
    assert [f for f, _, _ in got] == sorted(f for f, _, _ in got)
    assert len({k for _, _, k in got}) > 1


def test_fixed_count_of_context_rows_needs_no_padding(tmp_path):
    write_discrete(tmp_path, FILES)
    config = sequence_config(tmp_path, "discrete_sequence", [("rid", "rid"), ("pair", "pair")],
                             inputs=["rid", "pair"], lo=3, hi=3, target_batch_size=4)
    ds = batchloaders.build_input_fn(config)()
    assert ds.element_spec["pair"].shape.as_list() == [None, 3, 2]
    rids = np.concatenate([b["rid"] for b in collect(ds)])
    np.testing.assert_array_equal(rids, [[0, 1, 2], [3, 4, 5], [6, 7, 8], [100, 101, 102], [103, 104, 105]])


def test_example_records_are_stacked(numbered_dataset):
    """Example records (id = 100*file + record, x = [id, id + 0.5]): windows stack whole records."""
    config = sequence_config(numbered_dataset, "discrete_sequence", [("id", "id"), ("x", "x")], inputs=["id", "x"],
                             lo=3, hi=3, target_batch_size=2)
    got = collect(batchloaders.build_input_fn(config)())
    ids = np.concatenate([b["id"] for b in got])
    np.testing.assert_array_equal(ids, [[0, 1, 2], [100, 101, 102], [200, 201, 202]])
    np.testing.assert_array_equal(np.concatenate([b["x"] for b in got]), np.stack([ids, ids + 0.5], -1))


def test_feature_lists_need_padding_even_with_a_fixed_count(tmp_path):
    write_discrete(tmp_path, FILES)
    config = sequence_config(tmp_path, "discrete_sequence", [("rid", "rid"), ("words", "words")],
                             inputs=["rid", "words"], lo=2, hi=2)
    with pytest.raises(ConfigError) as e:
        batchloaders.build_input_fn(config)
    assert "$.args.padding" in str(e.value) and "tensor 'words' has a variable length axis" in str(e.value)
    assert "'rid'" not in str(e.value)


def test_variable_count_needs_padding(tmp_path):
    write_discrete(tmp_path, FILES)
    config = sequence_config(tmp_path, "discrete_sequence", [("rid", "rid")], inputs=["rid"], lo=2, hi=3)
    with pytest.raises(ConfigError) as e:
        batchloaders.build_input_fn(config)
    assert "$.args.padding" in str(e.value) and "enable padding" in str(e.value)
    assert "fix the window length" in str(e.value)


def test_epochs_repeat(tmp_path):
    write_discrete(tmp_path, FILES)
    got = split(run(tmp_path, 2, 2, epochs=2, padding=True, secondary_features=LENGTHS))
    one_pass = [(0, 0, 2), (0, 2, 2), (0, 4, 2), (0, 6, 2), (0, 8, 2), (1, 0, 2), (1, 2, 2), (1, 4, 2)]
    assert got == one_pass * 2


def test_shuffle_moves_the_first_window(tmp_path):
    write_discrete(tmp_path, FILES)
    got = split(run(tmp_path, 2, 2, epochs=6, padding=True, seed=3, secondary_features=LENGTHS, **SHUFFLE))
    assert {r0 % 2 for _, r0, _ in got} == {0, 1}
    files = [f for f, _, _ in got]
    assert sum(a != b for a, b in zip(files, files[1:])) > 6


def test_windows_span_blocks(tmp_path, monkeypatch):
    """Files are streamed in blocks (64 records here); a window crossing a block boundary stays whole."""
    from batchloaders.read import block_sizes

    monkeypatch.setattr(block_sizes, "SERIALIZED_RECORDS_PER_BLOCK", 64)
    files = [[(1 + r % 3, r % 2) for r in range(95)]]
    write_discrete(tmp_path, files)
    got = split(run(tmp_path, 5, 9, padding=True, seed=2, secondary_features=LENGTHS), files)
    starts = [r0 for _, r0, _ in got]
    assert starts == list(np.cumsum([0] + [k for _, _, k in got]))[:len(got)]
    assert any(r0 < 64 < r0 + k for _, r0, k in got)
    assert 95 - sum(k for _, _, k in got) < 9


@pytest.mark.parametrize("order", [{}, SHUFFLE])
def test_windows_planned_in_max_window_slots_give_the_same_batches(tmp_path, monkeypatch, order):
    """Up to DISCRETE_SLOTS, every planned window gets max_window record slots (unshuffled, batches are then
    cut by rebatch); past it, as many as its block's widest window (padded_batch). Both give these batches."""
    from batchloaders.read import block_sizes

    write_discrete(tmp_path, FILES)
    args = dict(padding=True, seed=4, epochs=2, secondary_features=LENGTHS, **order)
    slotted = run(tmp_path, 1, 4, **args)
    monkeypatch.setattr(block_sizes, "DISCRETE_SLOTS", 3)
    widest = run(tmp_path, 1, 4, **args)
    assert [sorted(b) for b in slotted] == [sorted(b) for b in widest]
    for mine, theirs in zip(slotted, widest):
        for name in mine:
            np.testing.assert_array_equal(mine[name], theirs[name], err_msg=name)
    got = split(slotted)
    assert sum(k for _, _, k in got) > 25 and len({k for _, _, k in got}) > 2  # of 2 x 18 records


@pytest.mark.parametrize("order, slots, batched", [
    ({}, 128, "of one shape, cut into batches by rebatch a block of windows at a time"),
    ({}, 3, "batched with padded_batch"),
    (SHUFFLE, 128, "shuffled in a buffer of 16 windows, then batched with padded_batch"),
])
def test_describe_says_how_windows_are_batched(tmp_path, monkeypatch, order, slots, batched):
    from batchloaders.read import block_sizes
    from batchloaders import load_config
    from batchloaders.cli.describe import parsing_path

    write_discrete(tmp_path, FILES)
    monkeypatch.setattr(block_sizes, "DISCRETE_SLOTS", slots)
    config = load_config(sequence_config(tmp_path, "discrete_sequence", [("rid", "rid")], inputs=["rid"], lo=1, hi=4,
                                         padding=True, **order))
    assert f"; windows are {batched}; the records of each batch of windows are parsed with one " in parsing_path(config)


def test_pad_value_and_slice_on_windows(tmp_path):
    write_discrete(tmp_path, FILES)
    batches = run(tmp_path, 1, 3, padding=[{"tensor": "words", "value": -1}], seed=8, secondary_features=LENGTHS,
                  processing_steps=[{"tensor": "words", "type": "slice", "args": {"slice": "[1:]"}}])
    padded = 0
    for batch in batches:
        for i, words in enumerate(batch["words"]):
            f, r0 = divmod(int(batch["rid"][i][0]), 100)
            expected = np.concatenate([discrete_steps(f, r, FILES[f][r][1])
                                       for r in range(r0, r0 + batch["n_rid"][i])])[1:]
            np.testing.assert_array_equal(words[:len(expected)], expected)
            assert (words[len(expected):] == -1).all()
            padded += len(words) > len(expected)
    assert padded


def test_window_larger_than_every_file_fails(tmp_path):
    write_discrete(tmp_path, FILES)
    config = sequence_config(tmp_path, "discrete_sequence", [("rid", "rid")], inputs=["rid"], lo=11, hi=11)
    with pytest.raises(tf.errors.InvalidArgumentError) as e:
        collect(batchloaders.build_input_fn(config)())
    assert "$.args.min_window" in str(e.value) and "longest file: 10" in str(e.value)
    assert "records" in str(e.value)


@pytest.mark.parametrize("change,path", [
    (dict(min_window=4, max_window=2), "$.args.min_window"),
    (dict(min_window=0), "$.args.min_window"),
    (dict(max_window=0), "$.args.max_window"),
    (dict(stride=2), "$.args"),  # discrete windows never overlap
])
def test_bad_window_sizes(tmp_path, change, path):
    write_discrete(tmp_path, FILES)
    config = sequence_config(tmp_path, "discrete_sequence", [("rid", "rid")], inputs=["rid"], lo=1, hi=1)
    config["args"].update(change)
    with pytest.raises(ConfigError) as e:
        batchloaders.build_input_fn(config)
    assert path in str(e.value)


@pytest.mark.parametrize("frames, compression, expected", [
    (2, None, 1024),          # small records: 1024 per block, as always
    (200, None, "8 MiB"),     # ~34 KB records: as many as fill 8 MiB
    (2000, None, 64),         # ~320 KB: never fewer than 64
    (200, "gzip", 1024),      # compressed: the first record's size is not read
])
def test_blocks_of_large_records_hold_about_8_mib(tmp_path, frames, compression, expected):
    """A block is parsed at once, padded to its longest record: large records get fewer per block."""
    from batchloaders.loaders.discrete_sequence import records_per_block
    from batchloaders.config.config import load_config
    from conftest import feature, sequence_example, write_manifest, write_records

    write_manifest(tmp_path, [feature("f", "float32", [40], "float", True)], allow_var_len=True,
                   compression=compression)
    record = sequence_example({}, {"f": ("float", [[float(t)] * 40 for t in range(frames)])})
    write_records(tmp_path / "a.tfrecords", [record] * 3, compression)
    config = load_config(sequence_config(tmp_path, "discrete_sequence", [("f", "f")], inputs=["f"], lo=1, hi=2,
                                         padding=True, target_batch_size=1))
    assert records_per_block(config) == (8 * 2**20 // len(record) if expected == "8 MiB" else expected)
