"""The length, segment_ids and boundaries secondary features, values checked exactly."""
from __future__ import annotations

import numpy as np
import pytest

import batchloaders
from batchloaders import ConfigError
from conftest import collect, loader_config
from seqdata import continuous_value, sequence_config, write_continuous, write_discrete

FILES = [
    [(2, 1), (3, 2), (0, 1), (1, 3), (4, 0), (2, 2), (1, 1), (3, 1)],
    [(1, 1), (2, 2), (3, 3), (1, 0), (2, 1)],
]


def secondary(to_name, kind, tensor, **args):
    return {"to_name": to_name, "type": kind, "args": {"tensor": tensor, **args}}


def test_length_of_continuous_windows(tmp_path):
    write_continuous(tmp_path, [6, 6])
    config = sequence_config(tmp_path, "continuous_sequence", [("y", "y")], inputs=["y", "n"], lo=2, hi=7,
                             padding=True, seed=1, secondary_features=[secondary("n", "length", "y", dtype="int64")])
    lengths = []
    for batch in collect(batchloaders.build_input_fn(config)()):
        assert batch["n"].dtype == np.int64
        for y, n in zip(batch["y"], batch["n"]):
            f, start = divmod(int(y[0]), 1000)
            # The window really holds n frames: the first n are contiguous, the rest is padding.
            np.testing.assert_array_equal(y[:n], continuous_value(f, np.arange(start, start + n)))
            assert (y[n:] == 0).all() and (n == len(y) or y[n] != y[n - 1] + 1)
            lengths.append(int(n))
    assert len(lengths) >= 4 and len(set(lengths)) > 1 and all(2 <= n <= 7 for n in lengths)


def test_length_of_fixed_windows_and_independent_examples(tmp_path, numbered_dataset):
    write_continuous(tmp_path / "c", [6])
    config = sequence_config(tmp_path / "c", "continuous_sequence", [("x", "x")], inputs=["x", "n"], lo=5, hi=5,
                             secondary_features=[secondary("n", "length", "x")])
    batches = collect(batchloaders.build_input_fn(config)())
    assert np.concatenate([b["n"] for b in batches]).tolist() == [5, 5, 5, 5]
    assert batches[0]["n"].dtype == np.int32
    config = loader_config(numbered_dataset, [("x", "x")], inputs=["x", "n"],
                           secondary_features=[secondary("n", "length", "x")])
    assert np.concatenate([b["n"] for b in collect(batchloaders.build_input_fn(config)())]).tolist() == [2] * 12


def discrete_batches(tmp_path, extra, **args):
    write_discrete(tmp_path, FILES)
    features = [secondary("n_rid", "length", "rid")] + extra
    config = sequence_config(tmp_path, "discrete_sequence", [("frames", "frames"), ("words", "words"), ("rid", "rid")],
                             inputs=["frames", "words", "rid"] + [s["to_name"] for s in features], lo=1, hi=4,
                             seed=1, target_batch_size=3, **args, secondary_features=features)
    return collect(batchloaders.build_input_fn(config)())


def window_records(batch, i):
    """(file, record list) of window i, from its stacked rid rows."""
    rids = batch["rid"][i][:batch["n_rid"][i]]
    return int(rids[0]) // 100, [int(r) % 100 for r in rids]


def test_length_segment_ids_and_boundaries_of_discrete_windows(tmp_path):
    extra = [secondary("n_frames", "length", "frames"), secondary("n_words", "length", "words", dtype="int64"),
             secondary("seg_frames", "segment_ids", "frames"), secondary("seg_words", "segment_ids", "words"),
             secondary("seg_rid", "segment_ids", "rid", dtype="int64"),
             secondary("start_frames", "boundaries", "frames"), secondary("start_words", "boundaries", "words")]
    padding = [{"tensor": name, "value": -3} for name in ("seg_frames", "seg_words", "start_frames")]
    batches = discrete_batches(tmp_path, extra, padding=padding)
    checked = set()
    for batch in batches:
        assert batch["seg_rid"].dtype == np.int64 and batch["seg_frames"].dtype == np.int32
        for i in range(len(batch["rid"])):
            f, records = window_records(batch, i)
            k = len(records)
            assert batch["n_rid"][i] == k and 1 <= k <= 4
            np.testing.assert_array_equal(batch["seg_rid"][i][:k], np.arange(k))
            for name, column in (("frames", 0), ("words", 1)):
                sizes = [FILES[f][r][column] for r in records]
                total = sum(sizes)
                assert batch[f"n_{name}"][i] == total
                segment = np.repeat(np.arange(k), sizes)
                np.testing.assert_array_equal(batch[f"seg_{name}"][i][:total], segment)
                assert (batch[f"seg_{name}"][i][total:] == -3).all()
                starts = np.zeros(total, np.int32)  # 1 where a non-empty record starts
                starts[np.cumsum([0] + sizes[:-1])[np.array(sizes) > 0]] = 1
                np.testing.assert_array_equal(batch[f"start_{name}"][i][:total], starts)
            assert (batch["start_frames"][i][batch["n_frames"][i]:] == -3).all()
            checked.add((f, tuple(records)))
    assert any(0 in [FILES[f][r][0] for r in records[:-1]] for f, records in checked)  # an empty record inside


def test_segment_ids_are_built_before_processing_steps(tmp_path):
    """segment_ids is built before processing steps; slicing the tensor afterwards leaves it alone."""
    extra = [secondary("seg_words", "segment_ids", "words")]
    batches = discrete_batches(tmp_path, extra, padding=True,
                               processing_steps=[{"tensor": "words", "type": "slice", "args": {"slice": "[1:]"}}])
    for batch in batches:
        for i in range(len(batch["rid"])):
            f, records = window_records(batch, i)
            sizes = [FILES[f][r][1] for r in records]
            np.testing.assert_array_equal(batch["seg_words"][i][:sum(sizes)], np.repeat(np.arange(len(sizes)), sizes))


@pytest.mark.parametrize("loader,features,path,fragments", [
    ("discrete_sequence", [secondary("n", "length", "wrods")], "$.args.secondary_features[0].args.tensor",
     ["'wrods' is not a primary feature or an earlier secondary feature", "did you mean 'words'"]),
    ("discrete_sequence", [secondary("n", "length", "m"), secondary("m", "length", "words")],
     "$.args.secondary_features[0].args.tensor", ["'m' is not a primary feature or an earlier secondary"]),
    ("discrete_sequence", [secondary("n", "length", "words"), secondary("m", "length", "n")],
     "$.args.secondary_features[1].args.tensor", ["'n' is a scalar per example", "at least one axis"]),
    ("discrete_sequence", [{"to_name": "c", "type": "const", "args": {"shape": [3], "dtype": "int32"}},
                           secondary("m", "segment_ids", "c")],
     "$.args.secondary_features[1].args.tensor", ["'c' is a secondary feature", "needs a primary feature"]),
    ("discrete_sequence", [secondary("m", "boundaries", "frame")], "$.args.secondary_features[0].args.tensor",
     ["did you mean 'frames'"]),
    ("continuous_sequence", [secondary("m", "segment_ids", "words")], "$.args.secondary_features[0].type",
     ["not available for the continuous_sequence loader", "discrete_sequence"]),
    ("independent", [secondary("m", "boundaries", "words")], "$.args.secondary_features[0].type",
     ["not available for the independent loader"]),
    ("discrete_sequence", [secondary("m", "length", "words", dtype="float32")],
     "$.args.secondary_features[0].args.dtype", ["int32"]),
    ("discrete_sequence", [{"to_name": "m", "type": "segment_ids", "args": {}}],
     "$.args.secondary_features[0].args", ["tensor"]),
])
def test_bad_secondary_features(tmp_path, loader, features, path, fragments):
    write_discrete(tmp_path, FILES)
    names = ["frames", "words"] + [s["to_name"] for s in features]
    args = dict(padding=True, secondary_features=features)
    if loader != "independent":
        args.update(min_window=1, max_window=2)
    config = loader_config(tmp_path, [("frames", "frames"), ("words", "words")], inputs=names, loader=loader, **args)
    with pytest.raises(ConfigError) as e:
        batchloaders.load_config(config)
    assert path in str(e.value)
    for fragment in fragments:
        assert fragment in str(e.value)
