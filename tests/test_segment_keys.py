"""Segment keys name each sequence occurrence: no two sequences (windows) of one epoch share a key.

Data (seqdata.write_continuous, sequence layout): file f holds records of RECORDS[f] steps, step p of the
file (counted over its records) holds y = 1000*f + p, so any run of steps says which file and steps it is.
"""
from __future__ import annotations

import collections
import os

import numpy as np
import pytest

from batchloaders import build_input_fn
from conftest import loader_config
from seqdata import write_continuous

RECORDS = [[5, 3, 9], [6, 2, 4]]  # steps per record: 17 and 12 steps


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return write_continuous(tmp_path_factory.mktemp("keys") / "seq", RECORDS, layout="sequence")


def segmented(data, loader, unroll, lanes, **args):
    return loader_config(data, [("y", "y")], inputs=["y"], loader=loader, target_batch_size=lanes,
                         segmenting={"num_unroll": unroll}, **args)


def path(data, f):
    return os.path.join(data, f"part-{f}.tfrecords")


def first_keys(batches):
    """The key of every sequence, in the order the sequences start."""
    return [b["key"][i].decode() for b in batches for i in range(len(b["key"])) if b["is_first"][i]]


@pytest.mark.parametrize("loader,args,names", [
    # independent: every record is a sequence, named by its record
    ("independent", {}, [(0, "0"), (0, "1"), (0, "2"), (1, "0"), (1, "1"), (1, "2")]),
    # discrete_sequence: windows of whole records never overlap, so their first record names them
    ("discrete_sequence", {"min_window": 2, "max_window": 2}, [(0, "0"), (1, "0")]),
    # continuous_sequence: "<record>:<step within the record>" of the window's first step (y 0, 4, 8, 12)
    ("continuous_sequence", {"min_window": 4, "max_window": 4},
     [(0, "0:0"), (0, "0:4"), (0, "2:0"), (0, "2:4"), (1, "0:0"), (1, "0:4"), (1, "2:0")]),
    # overlapping windows (stride 3), several starting in one record (y 0, 3, 6, 9, 12 and 0, 3, 6)
    ("continuous_sequence", {"min_window": 5, "max_window": 5, "stride": 3},
     [(0, "0:0"), (0, "0:3"), (0, "1:1"), (0, "2:1"), (0, "2:4"), (1, "0:0"), (1, "0:3"), (1, "1:0")]),
], ids=lambda p: p if isinstance(p, str) else None)
def test_the_exact_keys_of_each_loader(data, loader, args, names):
    got = first_keys(build_input_fn(segmented(data, loader, 4, 2, **args))().as_numpy_iterator())
    assert sorted(got) == sorted(f"{path(data, f)}:{name}" for f, name in names)


def first_step(key: str, data) -> int:
    """The file step a continuous window's key names: '<path>:<record>:<step within the record>'."""
    name, record, step = key.rsplit(":", 2)
    f = int(name[-len("0.tfrecords"):-len(".tfrecords")])
    return int(sum(RECORDS[f][:int(record)]) + int(step))


@pytest.mark.parametrize("args", [
    {"min_window": 4, "max_window": 4},
    {"min_window": 5, "max_window": 5, "stride": 2},  # windows overlap
    {"min_window": 3, "max_window": 7, "shuffle": True, "seed": 3, "num_shuffle_buffer_elements": 8,
     "num_filenames_shuffle_buffer": 2, "num_mix_files": 2},
    {"min_window": 4, "max_window": 4, "stride": 1, "epochs": 2},  # the same windows again in epoch 2
], ids=str)
def test_state_kept_per_key_never_crosses_windows(data, args):
    """A StateSaver-style dict, ``state[key]``, reset at ``is_first``, carrying every step seen: before each
    segment it holds exactly the steps of the segment's own window before it, and the key names that window."""
    unroll, lanes = 2, 3
    rows = [(raw.decode(), batch["y"][i][:batch["length"][i]].tolist(), int(batch["sequence"][i]),
             bool(batch["is_first"][i]), bool(batch["is_last"][i]))
            for batch in build_input_fn(segmented(data, "continuous_sequence", unroll, lanes, **args))()
            .as_numpy_iterator() for i, raw in enumerate(batch["key"]) if batch["length"][i]]  # padding left out
    state = {}
    for key, steps, k, is_first, _ in rows:
        if is_first:
            state[key] = []
        first = steps[0] - unroll * k  # the window's first value
        assert state[key] == list(range(first, steps[0])), (key, state[key], steps)
        state[key] = state[key] + steps
    ends = collections.Counter()
    for key, steps, k, _, is_last in rows:
        first = steps[0] - unroll * k
        assert key.startswith(path(data, first // 1000) + ":") and first_step(key, data) == first % 1000, key
        ends[key] += is_last
    assert ends and set(ends.values()) == {args.get("epochs", 1)}  # each window ends once per epoch
