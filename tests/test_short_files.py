"""Files shorter than max_window (or than the random offset plus the first window).

Rule: a file that ends before any window was cut from it gives one window of
the length drawn for its first window clipped to the file's length, started
at the drawn offset moved back just enough to fit; a file shorter than
min_window gives none. Files whose first window fits are cut exactly as
before: ``test_long_files_are_cut_as_before`` compares every batch with
hashes recorded before the rule existed (tests/data/window_hashes.json;
``python tests/test_short_files.py`` rewrites them, which is only right for
a deliberate change of the cutting).
"""
from __future__ import annotations

import hashlib
import json
import pathlib
import sys

import numpy as np
import pytest
import tensorflow as tf

import batchloaders
from batchloaders.read import block_sizes
from batchloaders.loaders import windows as windows_module
from conftest import collect
from seqdata import (continuous_value, discrete_windows, sequence_config, write_continuous,
                     write_discrete)

HASHES = pathlib.Path(__file__).parent / "data" / "window_hashes.json"
SHUFFLE = dict(shuffle=True, num_shuffle_buffer_elements=16, num_filenames_shuffle_buffer=3, num_mix_files=2)
CONTINUOUS = [("x", "x"), ("y", "y")]
DISCRETE = [("frames", "frames"), ("words", "words"), ("rid", "rid"), ("pair", "pair")]
CONTINUOUS_LENGTH = [{"to_name": "n", "type": "length", "args": {"tensor": "y"}}]
DISCRETE_LENGTHS = [{"to_name": f"n_{name}", "type": "length", "args": {"tensor": name}}
                    for name in ("frames", "words", "rid")]


def stream_windows(lengths, seeds, block, lo, hi, stride, max_offset):
    """{(seed, units): ([(start, length)] of the windows, largest buffer)} of ``windows.stream`` over
    files of ``units`` units numbered from 0, read ``block`` units at a time."""
    def one(seed, units):
        blocks = tf.data.Dataset.range(units).batch(block).map(lambda b: windows_module.marked({"u": b}))
        cuts = windows_module.stream(blocks, seed, windows_module.Cutting(lo, hi, stride, max_offset))
        return cuts.map(lambda c: (seed, units, tf.gather(c["buffer"]["u"], c["starts"]), c["lens"],
                                   tf.size(c["buffer"]["u"], out_type=tf.int64)))

    pairs = [(s, n) for s in seeds for n in lengths]
    ds = tf.data.Dataset.from_tensor_slices(tuple(np.array(pairs, np.int64).T)).flat_map(one)
    out = {pair: ([], 0) for pair in pairs}
    for seed, units, starts, lens, size in ds.as_numpy_iterator():
        windows, largest = out[seed, units]
        out[seed, units] = (windows + list(zip(starts.tolist(), lens.tolist())), max(largest, size))
    return out


def check_first_window(windows, units, lo, reference):
    """The rule, given the (offset, length) a long file with the same seed starts with. Returns the
    clipped window (start, length, offset, drawn) when the rule made one, else None."""
    offset, drawn = reference
    if units < lo:
        assert windows == []
        return None
    if offset + drawn <= units:  # fits: cut as always
        assert min(windows) == (offset, drawn)
        return None
    length = min(drawn, units)
    assert lo <= length <= units
    assert windows == [(min(offset, units - length), length)]
    return windows[0] + reference


@pytest.mark.parametrize("block", [1, 4, 64])
@pytest.mark.parametrize("stride,max_offset", [(None, 0), (None, 9), (4, 4)])
def test_stream_clips_the_first_window_of_a_short_file(block, stride, max_offset):
    lo, hi, seeds, lengths = 3, 9, range(20), [0, 2, 3, 4, 6, 9, 11, 14]
    got = stream_windows(lengths + [60], seeds, block, lo, hi, stride, max_offset)
    for seed in seeds:
        reference = got[seed, 60][0][0]  # the drawn offset and first length: 60 units hold them
        for units in lengths + [60]:
            windows, largest = got[seed, units]
            if units < 60:
                check_first_window(windows, units, lo, reference)
            assert all(lo <= n <= hi and 0 <= s and s + n <= units for s, n in windows)
            # Units are kept until the first window is cut, no longer: offset + first window + a block.
            assert largest < max(max_offset, 1) + hi + block


@pytest.mark.parametrize("block", [1, 3, 4, 64])
@pytest.mark.parametrize("size", [1, 3, 4])
def test_windows_of_one_length_back_to_back_are_cut_as_the_general_step_cuts_them(monkeypatch, block, size):
    """Windows of one length from each file's first unit take a step of their own (windows._back_to_back):
    every element gives the windows (their units), counts and ends the general step gives, for files shorter
    than one window, of exactly one, and longer, read in blocks smaller and larger than a window; and its
    buffer holds those windows and nothing else, back to back (windows.WHOLE)."""
    lengths, seeds = [0, 1, size - 1, size, size + 1, 2 * size, 2 * size + 1, 37], [0, 5]

    def elements():
        def one(seed, units):
            blocks = tf.data.Dataset.range(units).batch(block).map(lambda b: windows_module.marked({"u": b}))
            cuts = windows_module.stream(blocks, seed, windows_module.Cutting(size, size), file=seed)
            return cuts.map(lambda c: (c["buffer"]["u"], c["starts"], c["lens"], c["end"], c["windows"], c["units"],
                                       c["cut"], c["file"]))
        pairs = np.array([(s, n) for s in seeds for n in lengths], np.int64).T
        out = []
        for buffer, starts, lens, *counts in tf.data.Dataset.from_tensor_slices(tuple(pairs)).flat_map(
                one).as_numpy_iterator():
            cut = [buffer[s:s + n].tolist() for s, n in zip(starts, lens)]
            out.append((cut, buffer.tolist(), *(int(c) for c in counts)))
        return out

    fast = elements()
    monkeypatch.setattr(windows_module, "back_to_back", lambda cutting: False)  # the general step
    reference = elements()
    assert [(e[0], *e[2:]) for e in fast] == [(e[0], *e[2:]) for e in reference]
    # Each file's units are 0, 1, 2, ... in order: its windows are consecutive runs of `size` of them.
    assert all(window == list(range(window[0], window[0] + size)) for e in fast for window in e[0])
    assert all(e[1] == [unit for window in e[0] for unit in window] for e in fast)
    assert sum(e[5] for e in fast) == sum(n // size for n in lengths) * len(seeds)


@pytest.mark.parametrize("cutting, whole", [
    (windows_module.Cutting(3, 3), True),
    (windows_module.Cutting(3, 3, max_offset=4), False),  # (shuffled) a random offset first
    (windows_module.Cutting(2, 4), False)])
def test_then_is_told_when_the_buffer_holds_only_the_windows(cutting, whole):
    """windows.WHOLE reaches the step's ``then`` for windows of one length back to back, whose buffer is then
    the windows' units in order (a file of 0..10 in blocks of 4: windows 0-2, 3-5, 6-8)."""
    told, cuts = [], []

    def then(element):
        told.append(windows_module.whole(element))
        return {"buffer": element["buffer"]["u"], "starts": element["starts"], "lens": element["lens"]}
    blocks = tf.data.Dataset.range(11).batch(4).map(lambda b: windows_module.marked({"u": b}))
    for e in windows_module.stream(blocks, tf.constant(3, tf.int64), cutting, then=then).as_numpy_iterator():
        cuts.extend(e["made"]["buffer"][s:s + n].tolist() for s, n in zip(e["made"]["starts"], e["made"]["lens"]))
        if whole:  # the windows tile the buffer from its first unit
            lens = e["made"]["lens"].tolist()
            assert e["made"]["starts"].tolist() == np.cumsum([0] + lens)[:-1].tolist()
            assert len(e["made"]["buffer"]) == sum(lens)
    assert told and set(told) == {whole}
    if whole:
        assert cuts == [[0, 1, 2], [3, 4, 5], [6, 7, 8]]


def _gathers(dataset) -> tuple[list[int], int]:
    """How many gathers each scan step of ``dataset`` holds, and all its functions together."""
    graph = tf.compat.v1.GraphDef.FromString(dataset._as_serialized_graph().numpy())
    library = {f.signature.name: f for f in graph.library.function}
    steps = [library[n.attr["f"].func.name] for f in graph.library.function for n in f.node_def
             if n.op == "ScanDataset"]
    count = lambda f: sum(n.op == "GatherV2" for n in f.node_def)  # noqa: E731
    return [count(step) for step in steps], sum(count(f) for f in graph.library.function)


@pytest.mark.parametrize("loader", ["continuous_sequence", "discrete_sequence"])
def test_windows_of_one_length_are_made_without_a_gather_unless_sharded_by_window(tmp_path, loader):
    """A loader whose windows are one length back to back reshapes the buffer (windows.WHOLE); sharded by
    window, a pipeline keeps every third window and gathers them, in the scan or after it (the batches
    themselves: the hash and sharding tests)."""
    if loader == "continuous_sequence":
        write_continuous(tmp_path, [6, 4], chunk=4)
        primary, inputs = [("x", "x"), ("y", "y")], ["x", "y"]
    else:
        write_discrete(tmp_path, [[(2, 1)] * 9, [(1, 2)] * 7])
        primary, inputs = [("frames", "frames")], ["frames"]
    config = sequence_config(tmp_path, loader, primary, inputs=inputs, lo=3, hi=3, target_batch_size=2,
                             padding=True, num_parallel_reads=1)
    in_scans, total = _gathers(batchloaders.build_input_fn(config)())
    assert in_scans and not any(in_scans)  # each file's cut, the guard over the pass
    # Three pipelines over two files: each keeps every third window (sharding.RECORD).
    _, sharded = _gathers(batchloaders.build_input_fn(config)(tf.distribute.InputContext(3, 0, 1)))
    assert sharded > total


def continuous_windows(batches):
    """[(file, start, length)] of every window, checking it is a contiguous slice of one file."""
    out = []
    for batch in batches:
        for i, y in enumerate(batch["y"]):
            n = batch["n"][i]
            y, x = y[:n], batch["x"][i][:n]
            f, start = divmod(int(y[0]), 1000)
            np.testing.assert_array_equal(y, continuous_value(f, np.arange(start, start + n)))
            np.testing.assert_array_equal(x, np.stack([y, -y], 1))
            assert (batch["y"][i][n:] == 0).all()  # padding past the window's length
            out.append((f, start, int(n)))
    return out


def compare_with_long_files(short, long, units, lo):
    """Every file of ``short`` (units[f] long) against the same-seeded file of ``long`` (a file's seed
    comes from the run's seed, the epoch and the file's index: determinism.py).
    Returns the clipped windows."""
    short_, long_ = {}, {}
    for windows, out in ((short, short_), (long, long_)):
        for f, start, length in windows:
            out.setdefault(f, []).append((start, length))
    clipped = [check_first_window(sorted(short_.get(f, [])), n, lo, min(long_[f])) for f, n in enumerate(units)]
    return [c for c in clipped if c]


# 20 files of 5..44 frames (one frame per record), each with its own seed; the long files
# (2 * max_window) hold every first window, so they show what was drawn.
FRAMES = [44 - (7 * f) % 40 for f in range(20)]


@pytest.mark.parametrize("lo,hi,stride,shuffle,small", [
    (10, 40, None, False, False),
    (10, 40, None, False, True),  # one frame per block: the first window spans blocks
    (10, 40, None, True, False),
    (10, 40, 7, True, False),
    (10, 10, None, True, False),  # fixed windows, slice fast path: only the offset can push a window back
    (10, 10, 7, True, True),
])
def test_continuous_short_files(tmp_path, monkeypatch, lo, hi, stride, shuffle, small):
    if small:
        monkeypatch.setattr(block_sizes, "MAX_CONTINUOUS_RECORDS_PER_BLOCK", 1)
    got = {}
    for name, frames in (("short", FRAMES), ("long", [2 * hi] * len(FRAMES))):
        write_continuous(tmp_path / name, frames, chunk=1)
        config = sequence_config(tmp_path / name, "continuous_sequence", CONTINUOUS, inputs=["x", "y", "n"],
                                 lo=lo, hi=hi, stride=stride, padding=True, secondary_features=CONTINUOUS_LENGTH,
                                 seed=18, target_batch_size=8, **(SHUFFLE if shuffle else {}))
        got[name] = continuous_windows(collect(batchloaders.build_input_fn(config)()))
    assert all(lo <= n <= hi and s + n <= FRAMES[f] for f, s, n in got["short"])
    clipped = compare_with_long_files(got["short"], got["long"], FRAMES, lo)
    # The cases really occur: windows clipped to their file (random lengths), moved back (offsets).
    assert (lo < hi) == any(n < drawn for _, n, _, drawn in clipped)
    assert shuffle == any(start < offset for start, _, offset, _ in clipped)


# 20 files of 2..14 records; the long files hold 2 * max_window records.
RECORDS = [14 - (3 * f) % 13 for f in range(20)]


def discrete_files(counts):
    return [[(1 + r % 3, r % 2) for r in range(count)] for count in counts]


@pytest.mark.parametrize("lo,hi,shuffle", [(3, 12, False), (3, 12, True), (4, 4, True)])
def test_discrete_short_files(tmp_path, lo, hi, shuffle):
    got = {}
    for name, counts in (("short", RECORDS), ("long", [2 * hi] * len(RECORDS))):
        files = discrete_files(counts)
        write_discrete(tmp_path / name, files)
        config = sequence_config(tmp_path / name, "discrete_sequence", DISCRETE,
                                 inputs=[to for _, to in DISCRETE] + [s["to_name"] for s in DISCRETE_LENGTHS],
                                 lo=lo, hi=hi, padding=True, secondary_features=DISCRETE_LENGTHS, seed=23,
                                 target_batch_size=8, **(SHUFFLE if shuffle else {}))
        got[name] = discrete_windows(collect(batchloaders.build_input_fn(config)()), files)
    assert all(lo <= k <= hi and r0 + k <= RECORDS[f] for f, r0, k in got["short"])
    clipped = compare_with_long_files(got["short"], got["long"], RECORDS, lo)
    assert (lo < hi) == any(k < drawn for _, k, _, drawn in clipped)
    assert shuffle == any(r0 < offset for r0, _, offset, _ in clipped)


@pytest.mark.parametrize("shuffle", [False, True])
def test_file_shorter_than_max_window_gives_a_window_every_epoch(tmp_path, shuffle):
    """The tracker's case: one file of 50 frames, windows of 10..100. The guard fails any epoch
    without a window, so 20 epochs without an error are 20 seeds that all gave one."""
    write_continuous(tmp_path / "c", [50], chunk=1)
    config = sequence_config(tmp_path / "c", "continuous_sequence", CONTINUOUS, inputs=["x", "y", "n"], lo=10,
                             hi=100, padding=True, secondary_features=CONTINUOUS_LENGTH, seed=5, epochs=20,
                             target_batch_size=8, **(SHUFFLE if shuffle else {}))
    got = continuous_windows(collect(batchloaders.build_input_fn(config)()))
    assert len(got) >= 20 and all(10 <= n <= 50 and s + n <= 50 for _, s, n in got)

    files = discrete_files([5])
    write_discrete(tmp_path / "d", files)
    config = sequence_config(tmp_path / "d", "discrete_sequence", DISCRETE,
                             inputs=[to for _, to in DISCRETE] + [s["to_name"] for s in DISCRETE_LENGTHS], lo=2,
                             hi=12, padding=True, secondary_features=DISCRETE_LENGTHS, seed=5, epochs=20,
                             target_batch_size=8, **(SHUFFLE if shuffle else {}))
    got = discrete_windows(collect(batchloaders.build_input_fn(config)()), files)
    assert len(got) >= 20 and all(2 <= k <= 5 and r0 + k <= 5 for _, r0, k in got)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_files_shorter_than_min_window_fail_whatever_the_seed(tmp_path, seed):
    write_continuous(tmp_path / "c", [8, 9], chunk=1)
    config = sequence_config(tmp_path / "c", "continuous_sequence", CONTINUOUS, inputs=["x", "y"], lo=10, hi=100,
                             padding=True, seed=seed, **SHUFFLE)
    with pytest.raises(tf.errors.InvalidArgumentError) as e:
        collect(batchloaders.build_input_fn(config)())
    message = str(e.value)
    assert "$.args.min_window" in message and "gave no window" in message and "longest file: 9" in message
    assert "every file is shorter than min_window = 10 steps" in message

    write_discrete(tmp_path / "d", discrete_files([2]))
    config = sequence_config(tmp_path / "d", "discrete_sequence", [("rid", "rid")], inputs=["rid"], lo=3, hi=12,
                             padding=True, seed=seed, **SHUFFLE)
    with pytest.raises(tf.errors.InvalidArgumentError) as e:
        collect(batchloaders.build_input_fn(config)())
    message = str(e.value)
    assert "$.args.min_window" in message and "longest file: 2" in message
    assert "every file is shorter than min_window = 3 records" in message


# Datasets for the hash comparison: every file holds at least max_offset - 1 + max_window units
# of every config below, so its first window always fits.
HASH_DATA = {
    "example": lambda d: write_continuous(d, [8, 6, 10]),  # 32, 24 and 40 frames, 4 per record
    "sequence": lambda d: write_continuous(d, [[3, 1, 5, 2, 4, 1, 2, 6], [2, 2, 2, 2, 2, 2, 2, 2, 2]],
                                           layout="sequence"),  # 24 and 18 frames
    "discrete": lambda d: write_discrete(d, [[(1 + r % 3, r % 2) for r in range(12)],
                                             [(r % 4, 1 + r % 2) for r in range(9)],
                                             [(2, 1)] * 15]),
}
SMALL_BLOCKS = {"example": ("MAX_CONTINUOUS_RECORDS_PER_BLOCK", 1), "sequence": ("CONTINUOUS_RECORDS_PER_BLOCK", 2),
                "discrete": ("SERIALIZED_RECORDS_PER_BLOCK", 1)}  # in batchloaders/read/block_sizes.py


def _hash_configs():
    out = {}
    for data in ("example", "sequence"):
        for lo, hi in ((4, 4), (3, 6)):
            for stride in (None, 3):
                for shuffle in (False, True):
                    for small in (False, True) if data == "example" else (True,):
                        name = f"continuous-{data}-{lo}..{hi}-stride{stride}-{'shuffle' if shuffle else 'ordered'}"
                        out[name + ("-small" if small else "")] = ("continuous_sequence", data, small, dict(
                            lo=lo, hi=hi, stride=stride, seed=13, epochs=2, **(SHUFFLE if shuffle else {})))
    for lo, hi in ((2, 2), (1, 4)):
        for shuffle in (False, True):
            for small in (False, True):
                name = f"discrete-{lo}..{hi}-{'shuffle' if shuffle else 'ordered'}" + ("-small" if small else "")
                out[name] = ("discrete_sequence", "discrete", small, dict(
                    lo=lo, hi=hi, seed=21, epochs=2, **(SHUFFLE if shuffle else {})))
    return out


HASH_CONFIGS = _hash_configs()


def _digest(value) -> str:
    value = np.asarray(value)
    return hashlib.sha256(f"{value.dtype}{value.shape}".encode() + value.tobytes()).hexdigest()


def batch_hashes(root, name, patch) -> list:
    """sha256 of every tensor of every batch of the named hash config (``patch(module, attr, value)``
    shrinks the blocks)."""
    loader, data, small, args = HASH_CONFIGS[name]
    directory = pathlib.Path(root) / data
    if not directory.exists():
        HASH_DATA[data](directory)
    if small:
        attr, value = SMALL_BLOCKS[data]
        patch(block_sizes, attr, value)
    primary, secondary = ((CONTINUOUS, CONTINUOUS_LENGTH) if loader == "continuous_sequence"
                          else (DISCRETE, DISCRETE_LENGTHS))
    inputs = [to for _, to in primary] + [s["to_name"] for s in secondary]
    config = sequence_config(directory, loader, primary, inputs=inputs, padding=True, secondary_features=secondary,
                             target_batch_size=3, **args)
    return [{key: _digest(value) for key, value in sorted(batch.items())}
            for batch in collect(batchloaders.build_input_fn(config)())]


@pytest.mark.parametrize("name", sorted(HASH_CONFIGS))
def test_long_files_are_cut_as_before(tmp_path_factory, monkeypatch, name):
    root = tmp_path_factory.getbasetemp() / "hash-data"
    expected = json.loads(HASHES.read_text())[name]
    assert batch_hashes(root, name, monkeypatch.setattr) == expected


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as root:
        hashes = {}
        for config_name in sorted(HASH_CONFIGS):
            with pytest.MonkeyPatch.context() as mp:
                hashes[config_name] = batch_hashes(root, config_name, mp.setattr)
        HASHES.parent.mkdir(exist_ok=True)
        HASHES.write_text(json.dumps(hashes, indent=1, sort_keys=True) + "\n")
        print(f"{len(hashes)} configs, {sum(map(len, hashes.values()))} batches -> {HASHES}", file=sys.stderr)
