"""Packing groups: an encoder-decoder's inputs and targets, of different lengths per example, packed into rows
of their own lengths, each example whole in one row of both, with one segment numbering across the groups.

Data: T5-style tf.train.Examples; record r holds ``inputs`` = 100 r + 1, ..., 100 r + ilen(r) and ``targets``
= 100 r + 51, ..., 100 r + 50 + tlen(r), so every token names its record and its place, and 0 is padding.
"""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from batchloaders import ConfigError, build_input_fn, load_config
from batchloaders.regroup import stage as stages
from batchloaders.runtime import resume
from conftest import example, feature, loader_config, write_manifest, write_records

GROUPS = [{"tensors": ["inputs"], "length": 8}, {"tensors": ["targets"], "length": 4}]
MADE = ["inputs_segment_ids", "inputs_positions", "targets_segment_ids", "targets_positions"]


def write_pairs(d, lengths):
    """Records of (inputs, targets) token lists with the given (ilen, tlen) per record, in one file."""
    write_manifest(d, [feature("inputs", "int64", [None], "int"), feature("targets", "int64", [None], "int")])
    write_records(d / "pairs.tfrecord", [
        example(inputs=("int", [100 * r + 1 + j for j in range(i)]), targets=("int", [100 * r + 51 + j for j in range(t)]))
        for r, (i, t) in enumerate(lengths)])
    return d


def config(d, groups=GROUPS, batch=16, **args):
    return loader_config(d, [("inputs", "inputs"), ("targets", "targets")], inputs=["inputs"] + MADE,
                         targets=["targets"], padding=True, target_batch_size=batch, packing={"groups": groups}, **args)


def only_batch(cfg):
    ((features, targets),) = list(build_input_fn(cfg)().as_numpy_iterator())
    return {**features, **targets}


def test_each_example_goes_whole_into_the_row_where_both_groups_fit(tmp_path):
    """(ilen, tlen) = (5,1) (2,3) (7,2) (3,2) (1,4) (4,1), rows of 8 and 4. By the share of a row each takes
    (5/8+1/4 = .875, 1.0, 1.375, .875, 1.125, .75) the order is r2, r4, r1, r0, r3, r5: r2 opens row 0
    (room 1, 2); r4's 4 targets fit no open row: row 1 (7, 0); r1 opens row 2 (6, 1); r0 fits only row 2
    (1, 0 left); r3 opens row 3 (5, 2); r5 fits only row 3."""
    d = write_pairs(tmp_path / "pairs", [(5, 1), (2, 3), (7, 2), (3, 2), (1, 4), (4, 1)])
    b = only_batch(config(d))
    assert b["inputs"].tolist() == [[201, 202, 203, 204, 205, 206, 207, 0], [401, 0, 0, 0, 0, 0, 0, 0],
                                    [101, 102, 1, 2, 3, 4, 5, 0], [301, 302, 303, 501, 502, 503, 504, 0]]
    assert b["targets"].tolist() == [[251, 252, 0, 0], [451, 452, 453, 454], [151, 152, 153, 51],
                                     [351, 352, 551, 0]]
    assert b["inputs_segment_ids"].tolist() == [[1] * 7 + [0], [1] + [0] * 7, [1, 1, 2, 2, 2, 2, 2, 0],
                                                [1, 1, 1, 2, 2, 2, 2, 0]]
    assert b["inputs_positions"].tolist() == [[0, 1, 2, 3, 4, 5, 6, 0], [0] * 8, [0, 1, 0, 1, 2, 3, 4, 0],
                                              [0, 1, 2, 0, 1, 2, 3, 0]]
    assert b["targets_segment_ids"].tolist() == [[1, 1, 0, 0], [1, 1, 1, 1], [1, 1, 1, 2], [1, 1, 2, 0]]
    assert b["targets_positions"].tolist() == [[0, 1, 0, 0], [0, 1, 2, 3], [0, 1, 2, 0], [0, 1, 0, 0]]


def reference_rows(lengths, capacities):
    """Joint best fit decreasing, written plainly: the records of each row, rows in the order they opened."""
    def share(sizes):
        return sum(s / c for s, c in zip(sizes, capacities))

    rows, room = [], []
    for r in sorted(range(len(lengths)), key=lambda r: -share(lengths[r])):  # stable: ties keep block order
        fits = [i for i in range(len(rows)) if all(a >= s for a, s in zip(room[i], lengths[r]))]
        left = {i: sum((a - s) * (1.0 / c) for a, s, c in zip(room[i], lengths[r], capacities)) for i in fits}
        new = sum((c - s) * (1.0 / c) for s, c in zip(lengths[r], capacities))
        best = min(fits, key=lambda i: (left[i], i)) if fits and min(left.values()) <= new else None
        if best is None:
            rows.append([r])
            room.append([c - s for c, s in zip(capacities, lengths[r])])
        else:
            rows[best].append(r)
            room[best] = [a - s for a, s in zip(room[best], lengths[r])]
    return rows


@pytest.mark.parametrize("seed", range(6))
def test_placement_is_joint_best_fit_decreasing_and_every_token_arrives(tmp_path, seed):
    rng = np.random.default_rng(seed)
    capacities = [int(rng.integers(3, 12)), int(rng.integers(2, 7))]
    # (targets may be empty; inputs are not, so that every example shows in its row)
    lengths = [(int(rng.integers(1, capacities[0] + 1)), int(rng.integers(0, capacities[1] + 1)))
               for _ in range(int(rng.integers(5, 40)))]
    d = write_pairs(tmp_path / "pairs", lengths)
    groups = [{"tensors": ["inputs"], "length": capacities[0]}, {"tensors": ["targets"], "length": capacities[1]}]
    b = only_batch(config(d, groups, batch=64))
    got = []
    for row in range(len(b["inputs"])):
        records = []
        for s in range(1, max(b["inputs_segment_ids"][row].max(), b["targets_segment_ids"][row].max()) + 1):
            x = b["inputs"][row][b["inputs_segment_ids"][row] == s]
            y = b["targets"][row][b["targets_segment_ids"][row] == s]
            r = int(x[0] // 100)
            assert x.tolist() == [100 * r + 1 + j for j in range(lengths[r][0])]
            assert y.tolist() == [100 * r + 51 + j for j in range(lengths[r][1])]
            assert b["inputs_positions"][row][b["inputs_segment_ids"][row] == s].tolist() == list(range(len(x)))
            assert b["targets_positions"][row][b["targets_segment_ids"][row] == s].tolist() == list(range(len(y)))
            records.append(r)
        got.append(records)
    assert got == reference_rows(lengths, capacities)


def test_a_group_of_two_tensors_moves_them_in_step(tmp_path):
    """seqio's encoder-decoder features: the targets as decoder inputs ([:-1]) and decoder targets ([1:]) in one
    group of rows of 4 with decoder_segment_ids and decoder_positions; inputs in rows of 8. (ilen, tlen) = (3, 3),
    (2, 2), (6, 4) give pieces (3, 2), (2, 1), (6, 3), shares .875, .5, 1.5: r2 opens row 0 (room 2, 1); r0 fits
    no open row: row 1 (5, 2); r1 fits both, row 0 leaves no room: row 0."""
    d = write_pairs(tmp_path / "pairs", [(3, 3), (2, 2), (6, 4)])
    groups = [{"tensors": ["inputs"], "length": 8},
              {"tensors": ["decoder_input_tokens", "decoder_target_tokens"], "length": 4,
               "segment_ids": "decoder_segment_ids", "positions": "decoder_positions"}]
    cfg = loader_config(
        d, [("inputs", "inputs"), ("targets", "decoder_input_tokens"), ("targets", "decoder_target_tokens")],
        inputs=["inputs", "inputs_segment_ids", "decoder_input_tokens", "decoder_segment_ids", "decoder_positions"],
        targets=["decoder_target_tokens"], padding=True, target_batch_size=8, packing={"groups": groups},
        processing_steps=[{"tensor": "decoder_input_tokens", "type": "slice", "args": {"slice": "[:-1]"}},
                          {"tensor": "decoder_target_tokens", "type": "slice", "args": {"slice": "[1:]"}}])
    b = only_batch(cfg)
    assert b["inputs"].tolist() == [[201, 202, 203, 204, 205, 206, 101, 102], [1, 2, 3, 0, 0, 0, 0, 0]]
    assert b["inputs_segment_ids"].tolist() == [[1, 1, 1, 1, 1, 1, 2, 2], [1, 1, 1, 0, 0, 0, 0, 0]]
    assert b["decoder_input_tokens"].tolist() == [[251, 252, 253, 151], [51, 52, 0, 0]]
    assert b["decoder_target_tokens"].tolist() == [[252, 253, 254, 152], [52, 53, 0, 0]]
    assert b["decoder_segment_ids"].tolist() == [[1, 1, 1, 2], [1, 1, 0, 0]]
    assert b["decoder_positions"].tolist() == [[0, 1, 2, 0], [0, 1, 0, 0]]


def test_an_example_longer_than_its_groups_row_names_the_group(tmp_path):
    d = write_pairs(tmp_path / "pairs", [(2, 1), (3, 5)])
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=r"\$\.args\.packing\.groups\[1\]\.length: found an example of 5 steps in targets, "
                             r"longer than a row of 4: expected length at least the longest example"):
        only_batch(config(d))


def test_tensors_of_one_group_must_agree_in_length(tmp_path):
    d = write_pairs(tmp_path / "pairs", [(2, 1), (3, 2)])
    cfg = config(d, [{"tensors": ["inputs", "targets"], "length": 8}])
    cfg["model"]["inputs"] = ["inputs"]
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=r"\$\.args\.packing\.groups\[0\]\.tensors: tensors inputs, targets are packed together"):
        only_batch(cfg)


@pytest.mark.parametrize("packing, model, where, words", [
    ({"groups": GROUPS, "length": 8}, None, "$.args.packing.length", "found length beside groups"),
    ({"groups": GROUPS, "allow_split": True}, None, "$.args.packing.allow_split",
     "found allow_split true with groups: expected false"),
    ({"groups": [{"tensors": ["inputs", "targets"], "length": 8}, {"tensors": ["targets"], "length": 4}]}, None,
     "$.args.packing.groups[1].tensors[0]", "tensor 'targets' is in two groups (also at "
                                            "$.args.packing.groups[0].tensors[1])"),
    ({"groups": [{"tensors": ["inputs"], "length": 8, "segment_ids": "ids"},
                 {"tensors": ["targets"], "length": 4, "segment_ids": "ids"}]}, None,
     "$.args.packing.groups[1].segment_ids", "found 'ids' for the segment ids here and at "
                                             "$.args.packing.groups[0].segment_ids: expected a name of its own"),
    ({"groups": [{"tensors": ["inputs"], "length": 8, "segment_ids": "x"},
                 {"tensors": ["targets"], "length": 4, "positions": "x"}]}, None,
     "$.args.packing.groups[1].positions", "found 'x' for the positions here and at "
                                           "$.args.packing.groups[0].segment_ids"),
    ({"groups": [{"tensors": ["inputs", "inputs_positions"], "length": 8}, GROUPS[1]]}, None,
     "$.args.packing.groups[0].tensors[1]", "tensor 'inputs_positions' is made by packing (at "
                                            "$.args.packing.groups[0].positions)"),
    ({"groups": [GROUPS[0], {"tensors": ["targets", "inputs_segment_ids"], "length": 4}]}, None,
     "$.args.packing.groups[1].tensors[1]", "tensor 'inputs_segment_ids' is made by packing (at "
                                            "$.args.packing.groups[0].segment_ids)"),
    ({"length": 8, "tensors": ["inputs", "segment_ids"]}, None,
     "$.args.packing.tensors[1]", "tensor 'segment_ids' is made by packing"),
    ({"groups": [{"tensors": ["inputs"], "length": 8, "positions": "targets"}, GROUPS[1]]}, None,
     "$.args.packing.groups[0].positions", "found 'targets', the name of a feature already"),
    ({"groups": GROUPS[:1]}, None, "$.args.packing.groups",
     "model tensor 'targets' is not packed"),
    ({"groups": [GROUPS[0], {"tensors": ["target"], "length": 4}]}, None, "$.args.packing.groups[1].tensors[0]",
     "tensor 'target' is not a primary or secondary feature (did you mean 'targets'?)"),
    ({"groups": [{"tensors": ["inputs"]}]}, None, "$.args.packing.groups[0]", "missing required key 'length'"),
    ({"segment_ids": "s"}, None, "$.args.packing", "missing required key 'length' (required without groups)"),
])
def test_group_mistakes_are_located(tmp_path, packing, model, where, words):
    d = write_pairs(tmp_path / "pairs", [(2, 1)])
    cfg = config(d)
    cfg["args"]["packing"] = packing
    with pytest.raises(ConfigError) as caught:
        load_config(cfg)
    assert (where, True) in [(p.path, words in p.message) for p in caught.value.problems], caught.value.problems


@pytest.mark.parametrize("packing, where", [
    ({"groups": GROUPS, "segment_ids": "s"}, "$.args.packing.segment_ids"),
    ({"groups": GROUPS, "allow_split": True}, "$.args.packing.allow_split"),
])
def test_a_refused_block_is_the_only_problem_reported(tmp_path, packing, where):
    """The model's segment tensors are named by the block even when it is refused: not also called unproduced."""
    cfg = config(write_pairs(tmp_path / "pairs", [(2, 1)]))
    cfg["args"]["packing"] = packing
    with pytest.raises(ConfigError) as caught:
        load_config(cfg)
    assert [p.path for p in caught.value.problems] == [where], caught.value.problems


def test_a_fixed_length_longer_than_its_groups_row_is_refused_when_the_config_loads(tmp_path):
    d = tmp_path / "fixed"
    write_manifest(d, [feature("inputs", "int64", [6], "int"), feature("targets", "int64", [None], "int")])
    write_records(d / "f.tfrecord", [example(inputs=("int", [1] * 6), targets=("int", [2]))])
    cfg = config(d, [{"tensors": ["inputs"], "length": 4}, GROUPS[1]])
    with pytest.raises(ConfigError, match=r"\$\.args\.packing\.groups\[0\]\.length: tensor 'inputs' has 6 steps per "
                                          r"example \(\[6\]\), more than a row of 4: expected a longer row$"):
        load_config(cfg)


def test_describe_names_each_groups_rows_and_the_checkpoint_fingerprint_of_one_group_is_unchanged(tmp_path):
    d = write_pairs(tmp_path / "pairs", [(2, 1)])
    grouped = load_config(config(d))
    lines = stages.of(grouped).lines(grouped)
    assert lines[1:] == ["  inputs: rows of 8 steps, with inputs_segment_ids (int32 [8]) and inputs_positions "
                         "(int32 [8])",
                         "  targets: rows of 4 steps, with targets_segment_ids (int32 [4]) and targets_positions "
                         "(int32 [4])"]
    assert [g["length"] for g in resume._parts(grouped)["packing"]["groups"]] == [8, 4]
    # describe --json: no row length or segment tensors of the whole block, which each group has of its own.
    assert stages.of(grouped).as_json(grouped) == {
        "tensors": ["inputs", "targets"], "allow_split": False,
        "groups": [{"tensors": ["inputs"], "length": 8, "segment_ids": "inputs_segment_ids",
                    "positions": "inputs_positions"},
                   {"tensors": ["targets"], "length": 4, "segment_ids": "targets_segment_ids",
                    "positions": "targets_positions"}]}
    one = load_config(loader_config(d, [("inputs", "inputs"), ("targets", "targets")], inputs=["inputs"],
                                    targets=["targets"], padding=True, target_batch_size=2,
                                    packing={"length": 8, "tensors": ["inputs", "targets"]}))
    # A checkpoint of the one-group form written before groups existed fingerprinted exactly these fields.
    assert sorted(resume._parts(one)["packing"]) == ["allow_split", "length", "positions", "segment_ids", "tensors"]


def test_a_keras_model_fits_on_packed_encoder_decoder_rows(tmp_path):
    import keras

    d = write_pairs(tmp_path / "pairs", [(r % 5 + 2, r % 3 + 2) for r in range(24)])
    groups = [{"tensors": ["inputs"], "length": 8},
              {"tensors": ["decoder_input_tokens", "decoder_target_tokens"], "length": 6,
               "segment_ids": "decoder_segment_ids", "positions": "decoder_positions"}]
    cfg = loader_config(
        d, [("inputs", "inputs"), ("targets", "decoder_input_tokens"), ("targets", "decoder_target_tokens")],
        inputs=["inputs", "inputs_segment_ids", "decoder_input_tokens", "decoder_segment_ids"],
        targets=["decoder_target_tokens"], padding=True, target_batch_size=4, packing={"groups": groups},
        processing_steps=[{"tensor": "decoder_input_tokens", "type": "slice", "args": {"slice": "[:-1]"}},
                          {"tensor": "decoder_target_tokens", "type": "slice", "args": {"slice": "[1:]"}}])
    names = {"inputs": (8,), "inputs_segment_ids": (8,), "decoder_input_tokens": (6,), "decoder_segment_ids": (6,)}
    ports = {n: keras.Input(shape, dtype="int32" if "segment" in n else "int64", name=n) for n, shape in names.items()}
    # Each decoder step sees its token and the mean of its own example's inputs (a segment-masked pooling).
    same = keras.ops.cast(keras.ops.equal(keras.ops.expand_dims(ports["decoder_segment_ids"], 2),
                                          keras.ops.expand_dims(ports["inputs_segment_ids"], 1)), "float32")  # [B, 6, 8]
    encoded = keras.layers.Embedding(2500, 8)(ports["inputs"])
    context = keras.ops.matmul(same, encoded) / keras.ops.maximum(keras.ops.sum(same, 2, keepdims=True), 1.0)
    step = keras.layers.Concatenate()([keras.layers.Embedding(2500, 8)(ports["decoder_input_tokens"]), context])
    out = keras.layers.Dense(2500, name="decoder_target_tokens")(step)
    model = keras.Model(ports, {"decoder_target_tokens": out})
    model.compile(keras.optimizers.Adam(0.05), {"decoder_target_tokens": keras.losses.SparseCategoricalCrossentropy(
        from_logits=True, ignore_class=0)})
    losses = model.fit(build_input_fn(cfg, model=model)(), epochs=10, verbose=0).history["loss"]
    assert np.isfinite(losses).all() and losses[-1] < losses[0] * 0.8


def test_bench_counts_each_groups_real_steps_by_its_own_segment_ids(tmp_path):
    from batchloaders.regroup import packing

    lengths = [(r % 7 + 1, r % 3 + 1) for r in range(40)]
    cfg = load_config(config(write_pairs(tmp_path / "pairs", lengths), batch=4))
    counts = packing.packed_counts(cfg, 4, 5)
    rows = counts["rows"]
    assert counts["real"] == {"inputs": sum(i for i, _ in lengths), "targets": sum(t for _, t in lengths)}
    assert counts["padded"] == {"inputs": 8 * rows, "targets": 4 * rows}
