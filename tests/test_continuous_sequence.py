"""continuous_sequence: every window is a contiguous slice of one file's concatenated frames.

Frame p of file f holds y = 1000*f + p and x = [y, -y] (see seqdata.py), so a
window's values alone say which file and positions it came from.
"""
from __future__ import annotations

import threading

import numpy as np
import pytest
import tensorflow as tf

import batchloaders
from batchloaders.read import naming
from batchloaders import ConfigError
from conftest import collect, example, feature, sequence_example, write_manifest, write_records
from seqdata import continuous_value, sequence_config, write_continuous

LENGTH = [{"to_name": "n", "type": "length", "args": {"tensor": "y"}}]
SEQUENCE_LENGTHS = [[3, 1, 5, 2, 4, 1, 2, 6], [2, 2, 2, 2, 2, 2], [4]]  # 24, 12 and 4 frames


def run(directory, lo, hi, **args):
    args.setdefault("target_batch_size", 3)
    config = sequence_config(directory, "continuous_sequence", [("x", "x"), ("y", "y")],
                             inputs=["x", "y"] + (["n"] if "secondary_features" in args else []), lo=lo, hi=hi,
                             **args)
    return collect(batchloaders.build_input_fn(config)())


def split(batches, trim=True):
    """[(file, start, y values)] of every window, checking it is a contiguous slice of one file."""
    out = []
    for batch in batches:
        for i, y in enumerate(batch["y"]):
            n = batch["n"][i] if trim else len(y)
            y, x = y[:n], batch["x"][i][:n]
            f, start = divmod(int(y[0]), 1000)
            np.testing.assert_array_equal(y, continuous_value(f, np.arange(start, start + n)))
            np.testing.assert_array_equal(x, np.stack([y, -y], 1))
            out.append((f, start, y))
    return out


def frames_per_file(layout):
    return [24, 12, 4] if layout == "example" else [sum(s) for s in SEQUENCE_LENGTHS]


@pytest.mark.parametrize("layout,compression", [("example", None), ("sequence", None), ("example", "gzip"),
                                                ("sequence", "zlib")])
def test_null_stride_windows_tile_each_file(tmp_path, layout, compression):
    records = [6, 3, 1] if layout == "example" else SEQUENCE_LENGTHS
    write_continuous(tmp_path, records, layout=layout, compression=compression)
    got = split(run(tmp_path, 3, 6, padding=True, seed=7, secondary_features=LENGTH))
    sizes = frames_per_file(layout)
    for f, size in enumerate(sizes):
        mine = [(start, len(y)) for g, start, y in got if g == f]
        assert all(3 <= n <= 6 for _, n in mine)
        # Back to back from the start of the file; the piece left at the end is shorter than a window.
        assert [s for s, _ in mine] == list(np.cumsum([0] + [n for _, n in mine]))[:len(mine)]
        end = sum(n for _, n in mine)
        assert end <= size and size - end < 6
        assert mine or size < 6
    assert [f for f, _, _ in got] == sorted(f for f, _, _ in got)  # files in order, none mixed
    assert len({len(y) for _, _, y in got}) > 1  # window lengths really vary


@pytest.mark.parametrize("layout,lo,hi,stride,starts", [
    ("example", 5, 5, 3, [0, 3, 6, 9, 12, 15, 18]),  # overlapping
    ("example", 3, 3, 7, [0, 7, 14, 21]),  # gaps between windows
    ("example", 4, 4, None, [0, 4, 8, 12, 16, 20]),
    ("sequence", 5, 5, None, [0, 5, 10, 15]),
])
def test_fixed_window_starts(tmp_path, layout, lo, hi, stride, starts):
    write_continuous(tmp_path, [6] if layout == "example" else SEQUENCE_LENGTHS[:1], layout=layout)  # 24 frames
    config = sequence_config(tmp_path, "continuous_sequence", [("x", "x"), ("y", "y")], inputs=["x", "y"],
                             lo=lo, hi=hi, stride=stride, target_batch_size=2)
    ds = batchloaders.build_input_fn(config)()
    assert ds.element_spec["x"].shape.as_list() == [None, lo, 2]  # fixed windows need no padding
    assert [s for _, s, _ in split(collect(ds), trim=False)] == starts


def test_raw_strings_are_the_time_axis(tmp_path):
    """A raw feature with len 3: three byte strings per record, each one [2] int16 frame."""
    write_manifest(tmp_path, [feature("y", "int16", [2], "raw", endian="little", len=3)])
    for f in range(2):
        frames = [np.array([1000 * f + p, -p], "<i2").tobytes() for p in range(12)]
        write_records(tmp_path / f"part-{f}.tfrecords",
                      [example(y=("string", frames[i:i + 3])) for i in range(0, 12, 3)])
    config = sequence_config(tmp_path, "continuous_sequence", [("y", "y")], inputs=["y"], lo=5, hi=5, stride=2)
    got = np.concatenate([b["y"] for b in collect(batchloaders.build_input_fn(config)())])
    expected = [[[1000 * f + p, -p] for p in range(start, start + 5)] for f in range(2) for start in (0, 2, 4, 6)]
    np.testing.assert_array_equal(got, expected)


def test_input_pipelines_read_their_shard(tmp_path):
    write_continuous(tmp_path, [6, 6, 6])
    config = sequence_config(tmp_path, "continuous_sequence", [("x", "x"), ("y", "y")], inputs=["x", "y"],
                             lo=4, hi=4)
    context = tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=1)
    got = split(collect(batchloaders.build_input_fn(config)(context)), trim=False)
    assert [(f, s) for f, s, _ in got] == [(1, s) for s in range(0, 24, 4)]


def test_random_lengths_with_stride(tmp_path):
    write_continuous(tmp_path, [6, 6])
    got = split(run(tmp_path, 3, 6, stride=4, padding=True, seed=3, secondary_features=LENGTH))
    for f in range(2):
        starts = [s for g, s, _ in got if g == f]
        assert starts == list(range(0, 4 * len(starts), 4)) and 24 - starts[-1] < 6 + 4


def test_epochs_repeat_with_new_window_lengths(tmp_path):
    write_continuous(tmp_path, [6])
    got = split(run(tmp_path, 2, 7, epochs=2, padding=True, seed=5, secondary_features=LENGTH))
    passes = [i for i, (_, start, _) in enumerate(got) if start == 0]
    assert len(passes) == 2
    first, second = got[:passes[1]], got[passes[1]:]
    for one in (first, second):
        assert [s for _, s, _ in one] == list(np.cumsum([0] + [len(y) for _, _, y in one]))[:len(one)]
    assert [len(y) for *_, y in first] != [len(y) for *_, y in second]


SHUFFLE = dict(shuffle=True, num_shuffle_buffer_elements=16, num_filenames_shuffle_buffer=3, num_mix_files=2)


def test_shuffle_moves_the_first_window_and_mixes_files(tmp_path):
    write_continuous(tmp_path, [6, 6, 6])
    config = sequence_config(tmp_path, "continuous_sequence", [("x", "x"), ("y", "y")], inputs=["x", "y"],
                             lo=4, hi=4, epochs=6, seed=11, **SHUFFLE)
    got = split(collect(batchloaders.build_input_fn(config)()), trim=False)
    assert len({start % 4 for _, start, _ in got}) > 1  # cut at different offsets across epochs
    files = [f for f, _, _ in got]
    assert sum(a != b for a, b in zip(files, files[1:])) > 3 * 6  # not one file after the other
    assert len(got) >= 3 * 6 * 5  # at most one window per file and epoch lost to the offset


def test_seed_makes_runs_identical(tmp_path):
    write_continuous(tmp_path, [6, 6, 6])
    config = sequence_config(tmp_path, "continuous_sequence", [("x", "x"), ("y", "y")], inputs=["x", "y", "n"],
                             lo=2, hi=6, epochs=2, seed=4, padding=True, secondary_features=LENGTH, **SHUFFLE)
    first, second = (split(collect(batchloaders.build_input_fn(config)())) for _ in range(2))
    assert [(f, s, len(y)) for f, s, y in first] == [(f, s, len(y)) for f, s, y in second]


@pytest.mark.parametrize("layout,patch", [("example", {"MAX_CONTINUOUS_RECORDS_PER_BLOCK": 1}),
                                          ("sequence", {"CONTINUOUS_RECORDS_PER_BLOCK": 2})])
def test_windows_span_blocks(tmp_path, monkeypatch, layout, patch):
    """Files are streamed in blocks much shorter than a window; windows must still be exact."""
    from batchloaders.read import block_sizes

    for name, value in patch.items():
        monkeypatch.setattr(block_sizes, name, value)
    records = [12, 5] if layout == "example" else SEQUENCE_LENGTHS
    write_continuous(tmp_path, records, layout=layout, chunk=2)
    got = split(run(tmp_path, 5, 9, padding=True, seed=2, secondary_features=LENGTH))
    sizes = [24, 10] if layout == "example" else frames_per_file(layout)
    for f, size in enumerate(sizes):
        mine = [(start, len(y)) for g, start, y in got if g == f]
        assert [s for s, _ in mine] == list(np.cumsum([0] + [n for _, n in mine]))[:len(mine)]
        assert size - sum(n for _, n in mine) < 9 and (mine or size < 9)


def test_pad_value_and_slice_on_windows(tmp_path):
    write_continuous(tmp_path, [6, 6])
    batches = run(tmp_path, 3, 7, padding=[{"tensor": "y", "value": -7}], seed=9, secondary_features=LENGTH,
                  processing_steps=[{"tensor": "y", "type": "slice", "args": {"slice": "[1:-1]"}}])
    seen = 0
    for batch in batches:
        n = batch["n"] + 2  # window length: length measures y after its [1:-1] slice
        assert batch["y"].shape[1] == max(n) - 2
        assert batch["x"].shape[1] == max(n)
        for i, y in enumerate(batch["y"]):
            f, start = divmod(int(batch["x"][i][0][0]), 1000)
            np.testing.assert_array_equal(y[:n[i] - 2], continuous_value(f, np.arange(start + 1, start + n[i] - 1)))
            assert (y[n[i] - 2:] == -7).all()
            assert (batch["x"][i][n[i]:] == 0).all()
            seen += int(n[i] < max(n))
    assert seen  # some windows really were padded


def test_variable_window_needs_padding(tmp_path):
    write_continuous(tmp_path, [6])
    config = sequence_config(tmp_path, "continuous_sequence", [("x", "x"), ("y", "y")], inputs=["x", "y"],
                             lo=3, hi=5)
    with pytest.raises(ConfigError) as e:
        batchloaders.build_input_fn(config)
    assert "$.args.padding" in str(e.value)
    assert "enable padding" in str(e.value) and "fix the window length" in str(e.value)


@pytest.mark.parametrize("change,path,fragment", [
    (dict(min_window=5, max_window=3), "$.args.min_window", "min_window 5 > max_window 3"),
    (dict(min_window=0, max_window=3), "$.args.min_window", ""),
    (dict(min_window=2, max_window=-1), "$.args.max_window", ""),
    (dict(min_window=2, max_window=3, stride=0), "$.args.stride", ""),
])
def test_bad_window_sizes(tmp_path, change, path, fragment):
    write_continuous(tmp_path, [6])
    config = sequence_config(tmp_path, "continuous_sequence", [("x", "x"), ("y", "y")], inputs=["x", "y"],
                             lo=1, hi=1, padding=True)
    config["args"].update(change)
    with pytest.raises(ConfigError) as e:
        batchloaders.build_input_fn(config)
    assert path in str(e.value) and fragment in str(e.value)


def test_example_features_with_different_record_lengths(tmp_path):
    write_manifest(tmp_path, [feature("x", "float32", [4, 2], "float"), feature("y", "int64", [3], "int")])
    write_records(tmp_path / "a.tfrecords", [])
    config = sequence_config(tmp_path, "continuous_sequence", [("x", "x"), ("y", "y")], inputs=["x", "y"],
                             lo=2, hi=2)
    with pytest.raises(ConfigError) as e:
        batchloaders.build_input_fn(config)
    assert "$.args.primary_features[1].from_name" in str(e.value)
    assert "'y' has 3 steps per record" in str(e.value) and "'x' has 4" in str(e.value)


def test_feature_lists_with_different_record_lengths(tmp_path):
    write_continuous(tmp_path, [[2, 2]], layout="sequence")
    bad = sequence_example({}, {"x": ("float", [[1.0, -1.0]] * 3), "y": ("int", [[1]] * 2)})
    good = sequence_example({}, {"x": ("float", [[1.0, -1.0]] * 2), "y": ("int", [[1]] * 2)})
    path = write_records(tmp_path / "part-1.tfrecords", [good, good, bad, good])
    config = sequence_config(tmp_path, "continuous_sequence", [("x", "x"), ("y", "y")], inputs=["x", "y"],
                             lo=2, hi=2)
    with pytest.raises(batchloaders.DataError) as e:
        list(batchloaders.build_input_fn(config)())
    assert str(e.value).splitlines()[0] == (
        f"{path}: record 2: the selected features (by to_name) differ in length along the first axis (x has 3, "
        "y has 2 steps): the continuous_sequence loader concatenates records along that axis, so every selected "
        "feature needs the same length in every record")
    # A dataset made from it (take, map, ...) raises TensorFlow's error: it still names the file, the records
    # (by the file's token) and their lengths.
    with pytest.raises(tf.errors.InvalidArgumentError) as e:
        collect(batchloaders.build_input_fn(config)())
    assert (f"assertion failed: [{path}: the selected feature lists of a record differ in length (x, y): the "
            f"records, then their lengths] [{naming.token(str(path))}:0+2] [[3 2]]") in str(e.value)


def first_batch_or_hang(ds, seconds=60):
    """Iterate a dataset in a thread; a hang fails the test instead of blocking it."""
    result = {}

    def target():
        try:
            result["value"] = next(iter(ds))
        except Exception as e:  # noqa: BLE001  (handed to the test)
            result["error"] = e

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), "the dataset hangs instead of failing"
    return result


def test_window_longer_than_every_file_fails_instead_of_hanging(tmp_path):
    write_continuous(tmp_path, [6, 3])  # 24 and 12 frames
    config = sequence_config(tmp_path, "continuous_sequence", [("x", "x"), ("y", "y")], inputs=["x", "y"],
                             lo=25, hi=25, epochs=None)
    result = first_batch_or_hang(batchloaders.build_input_fn(config)())
    assert isinstance(result.get("error"), tf.errors.InvalidArgumentError)
    message = str(result["error"])
    assert "$.args.min_window" in message and "gave no window" in message and "longest file: 24" in message


def test_short_files_are_skipped_when_others_give_windows(tmp_path):
    write_continuous(tmp_path, [1, 6, 1])  # 4, 24 and 4 frames
    config = sequence_config(tmp_path, "continuous_sequence", [("x", "x"), ("y", "y")], inputs=["x", "y"],
                             lo=10, hi=10, epochs=None, target_batch_size=4, **SHUFFLE)
    result = first_batch_or_hang(batchloaders.build_input_fn(config)().take(5))
    assert "error" not in result
    got = split([{k: v.numpy() for k, v in result["value"].items()}], trim=False)
    assert {f for f, _, _ in got} == {1}
