"""Variable-length features of tf.train.Example records (a manifest shape that begins with null), as seqio, T5
and TFDS write token lists: inferred by ``manifest`` and ``init``, read as padded values with lengths (as feature
lists are), and padded, bucketed, packed and joined into windows like feature lists.

The T5-style data are plain tf.train.Examples: record r (24 of them, 12 per file) holds
``inputs`` = 100 r + 1, ..., 100 r + ilen(r) and ``targets`` = 100 r + 50, ..., 100 r + 49 + tlen(r), ``id`` r and
``span`` [r, -r] (fixed), so every token says which record and which place it comes from.
"""
from __future__ import annotations

import json

import numpy as np
import pytest

from batchloaders import build_input_fn, load_config
from batchloaders.cli import init
from batchloaders.cli.progress import Printed
from batchloaders.prepare.manifest import write_manifest
from batchloaders.prepare.infer import parse_raw
from batchloaders.config.manifest import load_manifest
from batchloaders.errors import ConfigError, DataError, ManifestError
from batchloaders.read.records import check_record
from conftest import example, feature, loader_config, sequence_example, write_records
from conftest import write_manifest as write_manifest_file

N, PER_FILE = 24, 12


def ilen(r: int) -> int:
    return r % 5 + 2


def tlen(r: int) -> int:
    return (r * 3) % 4 + 1


def inputs_of(r: int) -> list[int]:
    return [100 * r + 1 + j for j in range(ilen(r))]


def targets_of(r: int) -> list[int]:
    return [100 * r + 50 + j for j in range(tlen(r))]


def write_t5(d, with_manifest: bool = True):
    """The T5-style dataset under ``d`` (files t5-0.tfrecord, t5-1.tfrecord); its manifest when asked."""
    if with_manifest:
        write_manifest_file(d, [feature("inputs", "int64", [None], "int"), feature("targets", "int64", [None], "int"),
                                feature("id", "int64", [], "int"), feature("span", "int64", [2], "int")])
    for f in range(2):
        write_records(d / f"t5-{f}.tfrecord", [
            example(inputs=("int", inputs_of(r)), targets=("int", targets_of(r)), id=("int", [r]),
                    span=("int", [r, -r]))
            for r in range(f * PER_FILE, (f + 1) * PER_FILE)])
    return d


@pytest.fixture(scope="module")
def t5(tmp_path_factory):
    return write_t5(tmp_path_factory.mktemp("t5") / "t5")


def unpadded(row) -> list[int]:
    """A padded row of tokens (all >= 1) without its padding."""
    return [int(v) for v in row if v != 0]


# ------------------------------------------------------------------------------------ manifest and init


def test_manifest_infers_variable_length_features(tmp_path):
    d = write_t5(tmp_path / "t5", with_manifest=False)
    err = _Lines()
    lines = write_manifest(str(d), reporter=Printed(err)).lines()
    assert err.lines == []  # nothing left out
    assert lines[0] == ("features inferred from 24 records of 2 files (tf.train.Example, compression null): "
                        "id (int64 []), inputs (int64 [null]), span (int64 [2]), targets (int64 [null])")
    assert lines[-3:] == [
        "guessed: inputs: int64 [null] (an int64_list of 2 to 6 values in the records looked at: a variable length)",
        "guessed: span: int64 [2] (an int64_list of 2 values in every record looked at)",
        "guessed: targets: int64 [null] (an int64_list of 1 to 4 values in the records looked at: a variable length)"]
    manifest = json.loads((d / "__manifest__.json").read_text())
    assert manifest["allow_var_len"] is False
    assert manifest["features"] == [
        {"name": "id", "dtype": "int64", "shape": [], "var_len": False, "deserialize_type": "int"},
        {"name": "inputs", "dtype": "int64", "shape": [None], "var_len": False, "deserialize_type": "int"},
        {"name": "span", "dtype": "int64", "shape": [2], "var_len": False, "deserialize_type": "int"},
        {"name": "targets", "dtype": "int64", "shape": [None], "var_len": False, "deserialize_type": "int"}]
    assert '"shape": [null]' in (d / "__manifest__.json").read_text()


class _Lines:
    """A text stream that keeps the lines written to it."""

    def __init__(self):
        self.lines = []

    def write(self, text):
        self.lines += text.splitlines()

    def flush(self):
        pass


def test_init_writes_a_config_that_a_keras_model_fits(tmp_path):
    import keras

    d = write_t5(tmp_path / "t5", with_manifest=False)
    path = str(tmp_path / "t5.yaml")
    assert init.run(str(d), init.Choices(inputs=["inputs"], targets=["targets"], output=path), err=_Lines()) == 0
    text = open(path).read()
    assert "inputs: [inputs]" in text and "targets: [targets]" in text
    assert '- {from_name: "inputs", to_name: "inputs"}  # int64 [null], a variable length' in text
    assert "padding: true" in text
    # Every record once per pass (init shuffles), each row its record's tokens, padded with zeros.
    seen = []
    for features, targets in build_input_fn(path)().as_numpy_iterator():
        for x, y in zip(features["inputs"], targets["targets"]):
            r = int(x[0]) // 100
            assert (unpadded(x), unpadded(y)) == (inputs_of(r), targets_of(r))
            assert len(x) == max(ilen(int(row[0]) // 100) for row in features["inputs"])
            seen.append(r)
    assert sorted(seen) == list(range(N))

    # A bag-of-tokens model: the mean embedding of the inputs gives a distribution over the target tokens.
    tokens = keras.Input((None,), dtype="int64", name="inputs")
    pooled = keras.layers.GlobalAveragePooling1D()(keras.layers.Embedding(100 * N, 8)(tokens))
    model = keras.Model({"inputs": tokens}, {"targets": keras.layers.Dense(100 * N, name="targets")(pooled)})

    def target_tokens_loss(y_true, y_pred):  # y_true [B, T] padded with 0, y_pred [B, vocabulary] logits
        ops = keras.ops
        picked = ops.take_along_axis(ops.log_softmax(y_pred), ops.cast(y_true, "int32"), axis=1)
        real = ops.cast(y_true > 0, "float32")
        return -ops.sum(picked * real) / ops.maximum(ops.sum(real), 1.0)

    model.compile(keras.optimizers.Adam(0.05), {"targets": target_tokens_loss})
    history = model.fit(build_input_fn(path)(), epochs=4, verbose=0, shuffle=False)
    losses = history.history["loss"]
    assert np.isfinite(losses).all() and losses[-1] < losses[0]


# ------------------------------------------------------------------------------------------------ reading


def test_rows_of_a_value_list_read_as_a_feature_lists_steps(tmp_path):
    """[null, 2] reads a flat float list as rows of 2; raw [null, 2] one int16 pair per byte string; a
    ``length`` secondary feature counts the rows; a narrower dtype is checked and cast as for fixed features."""
    d = tmp_path / "rows"
    write_manifest_file(d, [feature("pts", "float32", [None, 2], "float"),
                            feature("pairs", "int16", [None, 2], "raw", endian="little"),
                            feature("tokens", "int32", [None], "int")])
    write_records(d / "rows.tfrecord", [
        example(pts=("float", [v for k in range(r % 3) for v in (10 * r + k, -(10 * r + k))]),
                pairs=("string", [np.array([r, -k], "<i2").tobytes() for k in range(r % 2 + 1)]),
                tokens=("int", list(range(100 * r, 100 * r + r))))
        for r in range(4)])
    config = loader_config(d, [("pts", "pts"), ("pairs", "pairs"), ("tokens", "tokens")],
                           inputs=["pts", "pairs", "tokens", "n"], target_batch_size=4, padding=True,
                           secondary_features=[{"to_name": "n", "type": "length", "args": {"tensor": "pts"}}])
    (batch,) = list(build_input_fn(config)().as_numpy_iterator())
    assert batch["pts"].dtype == np.float32 and batch["pts"].tolist() == [
        [[0, 0], [0, 0]], [[10, -10], [0, 0]], [[20, -20], [21, -21]], [[0, 0], [0, 0]]]
    assert batch["n"].tolist() == [0, 1, 2, 0]
    assert batch["pairs"].dtype == np.int16 and batch["pairs"].tolist() == [
        [[0, 0], [0, 0]], [[1, 0], [1, -1]], [[2, 0], [0, 0]], [[3, 0], [3, -1]]]
    assert batch["tokens"].dtype == np.int32 and batch["tokens"].tolist() == [
        [0, 0, 0], [100, 0, 0], [200, 201, 0], [300, 301, 302]]


def test_a_sequence_examples_context_value_list(tmp_path):
    """A SequenceExample's context feature may vary in length too (var_len false, shape [null]), beside its
    feature lists."""
    d = tmp_path / "seq"
    write_manifest_file(d, [feature("words", "int64", [None], "int", var_len=False),
                            feature("frames", "float32", [1], "float", var_len=True)], allow_var_len=True)
    write_records(d / "seq.tfrecord", [
        sequence_example({"words": ("int", [100 * r + k for k in range(r)])},
                         {"frames": ("float", [[r + k / 10] for k in range(3 - r)])}) for r in range(3)])
    config = loader_config(d, [("words", "words"), ("frames", "frames")], inputs=["words", "frames", "n"],
                           target_batch_size=3, padding=True,
                           secondary_features=[{"to_name": "n", "type": "length", "args": {"tensor": "words"}}])
    (batch,) = list(build_input_fn(config)().as_numpy_iterator())
    assert batch["words"].tolist() == [[0, 0], [100, 0], [200, 201]]
    assert batch["n"].tolist() == [0, 1, 2]
    np.testing.assert_allclose(batch["frames"][..., 0], [[0, 0.1, 0.2], [1, 1.1, 0], [2, 0, 0]])


def test_bucketing_with_a_token_budget(t5):
    config = loader_config(t5, [("inputs", "inputs"), ("targets", "targets")], inputs=["inputs"],
                           targets=["targets"], target_batch_size=8, padding=True,
                           bucketing={"by": "inputs", "max_tokens": 12})
    seen = []
    for features, targets in build_input_fn(config)().as_numpy_iterator():
        x = features["inputs"]
        assert x.shape[0] * x.shape[1] <= 12
        for row, y in zip(x, targets["targets"]):
            r = int(row[0]) // 100
            assert (unpadded(row), unpadded(y)) == (inputs_of(r), targets_of(r))
            seen.append(r)
    assert sorted(seen) == list(range(N))


def test_chunking_cuts_each_value_list_into_chunks(t5):
    config = loader_config(t5, [("inputs", "inputs")], inputs=["inputs"], target_batch_size=4, padding=True,
                           chunking={"size": 3, "tensors": [{"tensor": "inputs"}]})
    chunks = [c for batch in build_input_fn(config)().as_numpy_iterator() for c in batch["inputs"].tolist()]
    expected = [(inputs_of(r)[i:i + 3] + [0, 0])[:3] for r in range(N) for i in range(0, ilen(r), 3)]
    assert chunks == expected


def test_continuous_windows_join_the_value_lists(t5):
    config = loader_config(t5, [("inputs", "inputs")], inputs=["inputs"], loader="continuous_sequence",
                           min_window=4, max_window=4, target_batch_size=2)
    windows = [w for batch in build_input_fn(config)().as_numpy_iterator() for w in batch["inputs"].tolist()]
    for f in range(2):  # each file's tokens end to end, cut into windows of 4 (its last partial one dropped)
        tokens = [t for r in range(f * PER_FILE, (f + 1) * PER_FILE) for t in inputs_of(r)]
        first = sum(len(inputs_of(r)) for r in range(PER_FILE)) // 4 if f else 0
        count = len(tokens) // 4
        assert windows[first:first + count] == [tokens[4 * i:4 * i + 4] for i in range(count)]


def test_continuous_windows_refuse_a_fixed_feature_beside_a_variable_one(t5):
    """Records are joined along their first axis: 2 steps of span per record cannot go with inputs' varying
    number (which would give the window's tensors different lengths)."""
    config = loader_config(t5, [("inputs", "inputs"), ("span", "span")], inputs=["inputs", "span"],
                           loader="continuous_sequence", min_window=4, max_window=4)
    with pytest.raises(ConfigError) as caught:
        load_config(config)
    assert [(p.path, p.message) for p in caught.value.problems] == [(
        "$.args.primary_features[1].from_name",
        "feature 'span' has 2 steps per record along its first axis but 'inputs' a variable number (its shape "
        "begins with null): the continuous_sequence loader concatenates records along that axis, so every selected "
        "feature needs the same length per record")]


# ------------------------------------------------------------------------------------------------ packing


def test_inputs_and_targets_pack_with_exact_segment_ids_and_positions(tmp_path):
    """Token lists of lengths 5, 3, 4, 2, 6, 1 (inputs and targets of one length per example) in rows of 8, best
    fit longest first: 6 opens row 0, 5 row 1, 4 row 2; 3 fills row 1, 2 fills row 0, 1 goes to row 2."""
    d = tmp_path / "tagged"
    write_manifest_file(d, [feature("inputs", "int64", [None], "int"), feature("targets", "int64", [None], "int")])
    write_records(d / "tagged.tfrecord", [
        example(inputs=("int", [100 * r + 1 + j for j in range(n)]), targets=("int", [100 * r + 51 + j for j in range(n)]))
        for r, n in enumerate([5, 3, 4, 2, 6, 1])])
    config = loader_config(d, [("inputs", "inputs"), ("targets", "targets")],
                           inputs=["inputs", "segment_ids", "positions"], targets=["targets"], padding=True,
                           target_batch_size=3, packing={"length": 8, "tensors": ["inputs", "targets"]})
    ((features, targets),) = list(build_input_fn(config)().as_numpy_iterator())
    assert features["inputs"].tolist() == [[401, 402, 403, 404, 405, 406, 301, 302],
                                           [1, 2, 3, 4, 5, 101, 102, 103],
                                           [201, 202, 203, 204, 501, 0, 0, 0]]
    assert (targets["targets"] == np.where(features["inputs"] > 0, features["inputs"] + 50, 0)).all()
    assert features["segment_ids"].tolist() == [[1, 1, 1, 1, 1, 1, 2, 2], [1, 1, 1, 1, 1, 2, 2, 2],
                                                [1, 1, 1, 1, 2, 0, 0, 0]]
    assert features["positions"].tolist() == [[0, 1, 2, 3, 4, 5, 0, 1], [0, 1, 2, 3, 4, 0, 1, 2],
                                              [0, 1, 2, 3, 0, 0, 0, 0]]


def test_seqio_lm_packing_of_t5_targets(tmp_path):
    """seqio's decoder-only layout on T5-style data (inputs and targets of different lengths): the targets, as
    decoder inputs (all but the last token) and decoder targets (all but the first), packed into rows of 8 with
    decoder_segment_ids and decoder_positions. Targets of 6, 3, 5, 2, 4, 7 tokens give pieces of 5, 2, 4, 1, 3, 6."""
    d = tmp_path / "t5_lm"
    write_manifest_file(d, [feature("inputs", "int64", [None], "int"), feature("targets", "int64", [None], "int")])
    write_records(d / "t5.tfrecord", [
        example(inputs=("int", [100 * r + 1 + j for j in range(r + 2)]),
                targets=("int", [100 * r + 51 + j for j in range(n)])) for r, n in enumerate([6, 3, 5, 2, 4, 7])])
    config = loader_config(
        d, [("targets", "decoder_input_tokens"), ("targets", "decoder_target_tokens")],
        inputs=["decoder_input_tokens", "decoder_segment_ids", "decoder_positions"],
        targets=["decoder_target_tokens"], padding=True, target_batch_size=4,
        processing_steps=[{"tensor": "decoder_input_tokens", "type": "slice", "args": {"slice": "[:-1]"}},
                          {"tensor": "decoder_target_tokens", "type": "slice", "args": {"slice": "[1:]"}}],
        packing={"length": 8, "tensors": ["decoder_input_tokens", "decoder_target_tokens"],
                 "segment_ids": "decoder_segment_ids", "positions": "decoder_positions"})
    ((features, targets),) = list(build_input_fn(config)().as_numpy_iterator())
    assert features["decoder_input_tokens"].tolist() == [[551, 552, 553, 554, 555, 556, 151, 152],
                                                         [51, 52, 53, 54, 55, 451, 452, 453],
                                                         [251, 252, 253, 254, 351, 0, 0, 0]]
    assert targets["decoder_target_tokens"].tolist() == [[552, 553, 554, 555, 556, 557, 152, 153],
                                                         [52, 53, 54, 55, 56, 452, 453, 454],
                                                         [252, 253, 254, 255, 352, 0, 0, 0]]
    assert features["decoder_segment_ids"].tolist() == [[1, 1, 1, 1, 1, 1, 2, 2], [1, 1, 1, 1, 1, 2, 2, 2],
                                                        [1, 1, 1, 1, 2, 0, 0, 0]]
    assert features["decoder_positions"].tolist() == [[0, 1, 2, 3, 4, 5, 0, 1], [0, 1, 2, 3, 4, 0, 1, 2],
                                                      [0, 1, 2, 3, 0, 0, 0, 0]]


# ---------------------------------------------------------------------------------------- what is refused


def test_a_value_count_that_is_not_whole_rows_names_the_record(tmp_path):
    d = tmp_path / "bad"
    write_manifest_file(d, [feature("pts", "int64", [None, 3], "int")])
    write_records(d / "bad.tfrecord", [example(pts=("int", [1, 2, 3])), example(pts=("int", [4, 5, 6, 7]))])
    config = loader_config(d, [("pts", "pts")], inputs=["pts"], padding=True)
    with pytest.raises(DataError) as caught:
        for _ in build_input_fn(config)():
            pass
    (problem,) = caught.value.problems
    assert (problem.file, problem.path) == (str(d / "bad.tfrecord"), "record 1")
    assert problem.message == ("feature pts holds 4 values: the manifest says shape [null, 3] (int), rows of 3 "
                               "values, so a multiple of 3")


def test_records_are_checked_against_a_variable_length_feature(tmp_path):
    d = tmp_path / "checked"
    path = write_manifest_file(d, [feature("pts", "int64", [None, 3], "int"),
                                   feature("blobs", "uint8", [None, 2], "raw", endian="little")])
    manifest = load_manifest(path)
    says = "feature {!r}: the manifest says {}, found {}"
    pts = "int (int64_list) of shape [null, 3] (a multiple of 3 values)"
    blobs = "raw uint8 of shape [null, 2] (a bytes_list of any number of byte strings of 2 bytes each)"
    assert check_record(example(pts=("int", []), blobs=("string", [])), manifest) == []
    assert check_record(example(pts=("int", [1, 2, 3] * 2), blobs=("string", [b"ab"] * 3)), manifest) == []
    assert check_record(example(pts=("int", [1] * 4), blobs=("string", [b"abc"])), manifest) == [
        says.format("pts", pts, "an int64_list of 4 values"),
        says.format("blobs", blobs, "a bytes_list of 1 byte string of 3 bytes")]
    assert check_record(example(blobs=("string", [b"ab"])), manifest) == [
        says.format("pts", pts, "no such feature")]


MANIFEST_CASES = {
    # name: (allow_var_len, the feature, the path and message of the one problem)
    "null past the first axis": (False, feature("x", "int64", [3, None], "int"), (
        "$.features[0].shape[1]", "found null at axis 1 of shape [3, null]: expected an axis length (1 or more); "
                                  "only the first axis may be null (a variable length)")),
    "a feature list of variable steps": (True, feature("x", "int64", [None], "int", var_len=True), (
        "$.features[0].shape[0]", "found shape [null] with var_len true: expected a step shape of fixed lengths (a "
                                  "feature list varies in its number of steps already), or var_len false for a "
                                  "feature whose value list varies in length")),
    "a feature list in an Example": (False, feature("x", "int64", [None], "int", var_len=True), (
        "$.features[0].var_len", "expected false, found true (must be false when allow_var_len is false)")),
}


@pytest.mark.parametrize("case", list(MANIFEST_CASES))
def test_manifest_refuses(tmp_path, case):
    allow_var_len, declared, expected = MANIFEST_CASES[case]
    path = write_manifest_file(tmp_path / "m", [declared], allow_var_len=allow_var_len)
    with pytest.raises(ManifestError) as caught:
        load_manifest(path)
    assert [(p.path, p.message) for p in caught.value.problems] == [expected]


def test_raw_byte_strings_of_a_varying_count_are_declared_as_rows(tmp_path):
    d = tmp_path / "blobs"
    write_records(d / "blobs.tfrecord", [example(blobs=("string", [bytes([r, k, 0, 0]) for k in range(r + 1)]))
                                         for r in range(3)])
    lines = write_manifest(str(d), raws=[parse_raw("blobs=int16[2]")]).lines()
    assert lines[0] == ("features inferred from 3 records of 1 file (tf.train.Example, compression null): "
                        "blobs (raw int16 [null, 2])")
    (declared,) = json.loads((d / "__manifest__.json").read_text())["features"]
    assert declared == {"name": "blobs", "dtype": "int16", "shape": [None, 2], "var_len": False,
                        "deserialize_type": "raw", "deserialize_args": {"endian": "little"}}
    config = loader_config(d, [("blobs", "blobs")], inputs=["blobs"], target_batch_size=3, padding=True)
    (batch,) = list(build_input_fn(config)().as_numpy_iterator())
    assert batch["blobs"].tolist() == [[[0, 0], [0, 0], [0, 0]], [[1, 0], [1 + 256, 0], [0, 0]],
                                       [[2, 0], [2 + 256, 0], [2 + 512, 0]]]


def test_multi_load_is_refused_with_variable_length_features(t5):
    config = loader_config(t5, [("inputs", "inputs")], inputs=["inputs"], padding=True, multi_load=True)
    with pytest.raises(ConfigError) as caught:
        load_config(config)
    assert [(p.path, p.message.split(" (the compiler")[0]) for p in caught.value.problems] == [(
        "$.args.multi_load", "multi_load must be false when records are variable length (allow_var_len is true, or "
                             "a feature's shape begins with null) and padding is enabled")]
