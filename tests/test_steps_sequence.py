"""The pad_to, reverse, lookup, frame_stack and subsample steps: exact values, errors, all three loaders.

Every value says where it came from. In the step tables, step s of example b holds 10*(b+1) + s
(frames: [that, -that]; grids: 100*(b+1) + 10*i + j) and the batch's padding holds GARBAGE, a value
no example holds, which no step may let into an example. In the pipelines, step s of record r of the
independent SequenceExample data holds 100*(r+1) + s and the token f"t{(r+s) % 6}"; the Example data
hold g[i, j] = 1000*(r+1) + 10*i + j; the sequence loaders' data are seqdata's (continuous 1000*f + p,
discrete 10000*f + 100*r + j). Each pipeline's batches are compared with numpy applied to each
example of the same pipeline without the step, padded with a PAD value no record holds, so
equality also checks every example's new length.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

import batchloaders
from batchloaders import ConfigError, build_input_fn, load_config
from batchloaders.transform import builtin_types
from batchloaders.transform.registry import STEPS, CheckContext
from batchloaders.core.model import TensorInfo
from conftest import collect, example, feature, loader_config, sequence_example, write_manifest, write_records
from seqdata import write_continuous, write_discrete

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GARBAGE = 999
G = GARBAGE

# ---------------------------------------------------------------- the step on small batches

X = [[10, 11, 12, G, G], [20, 21, G, G, G], [G] * 5, [40, 41, 42, 43, 44]]  # [4, ?]
LX = [3, 2, 0, 5]
F = [[[10, -10], [11, -11], [G, G]], [[20, -20], [21, -21], [22, -22]], [[G, G]] * 3]  # [3, ?, 2]
LF = [2, 3, 0]
FIXED = [[10, 11, 12], [20, 21, 22]]  # [2, 3]
GRID = [[[100, 101, 102], [110, 111, 112]], [[200, 201, 202], [210, 211, 212]]]  # [2, 2, 3]
CUBE = [[[[1, 2], [3, 4]], [[5, 6], [7, 8]]]]  # [1, 2, 2, 2]: x[t][i][j]
S = [["a0", "a1", "zz"], ["b0", "zz", "zz"]]  # padding "zz"
LS = [2, 1]
WORDS = [["t0", "t1", "t2", "zz"], ["t4", "t0\r", "", "t3"]]  # "t3" of example 1 is padding
LW = [3, 2]
# Written by the vocab_dir fixture: ids are line numbers from 0.
VOCABS = {
    "mixed.txt": b"t3\nt0\r\nt4\nt1\n",  # "\r\n" and "\n" line endings, a final newline: t3=0 t0=1 t4=2 t1=3
    "bom.txt": b"\xef\xbb\xbfb\r\na",  # a byte order mark, no final newline: b=0 a=1
    "spaces.txt": b"a b\nc\n",  # tokens keep their spaces: "a b"=0 c=1
}

INT, FLOAT, STR, BOOL = "int64", "float32", "string", "bool"
V = None  # a variable-length first axis

# (step, input values, input lengths or None, per-example shape, dtype, args, expected, expected lengths).
# Expected: the whole output when its first axis is fixed (lengths None), else each example's valid part.
ROWS = [
    # pad_to: each example padded after its own length, never after the batch's garbage
    ("pad_to", X, LX, (V,), INT, {"size": 4}, [[10, 11, 12, 0], [20, 21, 0, 0], [0, 0, 0, 0], [40, 41, 42, 43]], None),
    ("pad_to", X, LX, (V,), INT, {"size": 6, "value": -1},
     [[10, 11, 12, -1, -1, -1], [20, 21, -1, -1, -1, -1], [-1] * 6, [40, 41, 42, 43, 44, -1]], None),
    ("pad_to", X, LX, (V,), INT, {"size": 1}, [[10], [20], [0], [40]], None),
    ("pad_to", F, LF, (V, 2), FLOAT, {"size": 2, "value": 7},
     [[[10, -10], [11, -11]], [[20, -20], [21, -21]], [[7, 7], [7, 7]]], None),
    ("pad_to", F, LF, (V, 2), FLOAT, {"size": 3, "axis": 1, "value": 0.5},
     [[[10, -10, .5], [11, -11, .5]], [[20, -20, .5], [21, -21, .5], [22, -22, .5]], []], LF),
    ("pad_to", F, LF, (V, 2), FLOAT, {"size": 1, "axis": -1}, [[[10], [11]], [[20], [21], [22]], []], LF),
    ("pad_to", FIXED, None, (3,), INT, {"size": 5, "value": 9}, [[10, 11, 12, 9, 9], [20, 21, 22, 9, 9]], None),
    ("pad_to", FIXED, None, (3,), INT, {"size": 2, "axis": -1}, [[10, 11], [20, 21]], None),
    ("pad_to", GRID, None, (2, 3), INT, {"size": 3},
     [[[100, 101, 102], [110, 111, 112], [0, 0, 0]], [[200, 201, 202], [210, 211, 212], [0, 0, 0]]], None),
    ("pad_to", S, LS, (V,), STR, {"size": 3}, [[b"a0", b"a1", b""], [b"b0", b"", b""]], None),
    ("pad_to", S, LS, (V,), STR, {"size": 2, "value": "<s>"}, [[b"a0", b"a1"], [b"b0", b"<s>"]], None),
    ("pad_to", [[True] * 3] * 2, [1, 2], (V,), BOOL, {"size": 3}, [[True, False, False], [True, True, False]], None),
    # reverse: on a variable axis, each example's own steps only
    ("reverse", X, LX, (V,), INT, {}, [[12, 11, 10], [21, 20], [], [44, 43, 42, 41, 40]], LX),
    ("reverse", X, LX, (V,), INT, {"axis": -1}, [[12, 11, 10], [21, 20], [], [44, 43, 42, 41, 40]], LX),
    ("reverse", F, LF, (V, 2), FLOAT, {}, [[[11, -11], [10, -10]], [[22, -22], [21, -21], [20, -20]], []], LF),
    ("reverse", F, LF, (V, 2), FLOAT, {"axis": -2}, [[[11, -11], [10, -10]], [[22, -22], [21, -21], [20, -20]], []],
     LF),
    ("reverse", F, LF, (V, 2), FLOAT, {"axis": 1}, [[[-10, 10], [-11, 11]], [[-20, 20], [-21, 21], [-22, 22]], []], LF),
    ("reverse", FIXED, None, (3,), INT, {}, [[12, 11, 10], [22, 21, 20]], None),
    ("reverse", GRID, None, (2, 3), INT, {"axis": 1},
     [[[102, 101, 100], [112, 111, 110]], [[202, 201, 200], [212, 211, 210]]], None),
    ("reverse", GRID, None, (2, 3), INT, {"axis": -2},
     [[[110, 111, 112], [100, 101, 102]], [[210, 211, 212], [200, 201, 202]]], None),
    ("reverse", S, LS, (V,), STR, {}, [[b"a1", b"a0"], [b"b0"]], LS),
    # subsample: x[offset::every] per example
    ("subsample", X, LX, (V,), INT, {"every": 2}, [[10, 12], [20], [], [40, 42, 44]], [2, 1, 0, 3]),
    ("subsample", X, LX, (V,), INT, {"every": 2, "offset": 1}, [[11], [21], [], [41, 43]], [1, 1, 0, 2]),
    ("subsample", X, LX, (V,), INT, {"every": 4, "offset": 2}, [[12], [], [], [42]], [1, 0, 0, 1]),
    ("subsample", X, LX, (V,), INT, {"every": 3, "offset": 4}, [[], [], [], [44]], [0, 0, 0, 1]),  # offset >= every
    ("subsample", X, LX, (V,), INT, {"every": 1, "offset": 5}, [[], [], [], []], [0, 0, 0, 0]),
    ("subsample", X, LX, (V,), INT, {"every": 1}, [[10, 11, 12], [20, 21], [], [40, 41, 42, 43, 44]], LX),
    ("subsample", F, LF, (V, 2), FLOAT, {"every": 2, "offset": 1}, [[[11, -11]], [[21, -21]], []], [1, 1, 0]),
    ("subsample", FIXED, None, (3,), INT, {"every": 2}, [[10, 12], [20, 22]], None),
    ("subsample", FIXED, None, (3,), INT, {"every": 2, "offset": 1}, [[11], [21]], None),
    ("subsample", FIXED, None, (3,), INT, {"every": 5, "offset": 3}, np.zeros((2, 0), np.int64), None),
    ("subsample", GRID, None, (2, 3), INT, {"every": 2, "offset": 1}, [[[110, 111, 112]], [[210, 211, 212]]], None),
    # frame_stack: zeros outside each example's own steps, frame-major when flattened
    ("frame_stack", X, LX, (V,), INT, {"left": 1, "right": 1},
     [[[0, 10, 11], [10, 11, 12], [11, 12, 0]], [[0, 20, 21], [20, 21, 0]], [],
      [[0, 40, 41], [40, 41, 42], [41, 42, 43], [42, 43, 44], [43, 44, 0]]], LX),
    ("frame_stack", X, LX, (V,), INT, {"left": 3},
     [[[0, 0, 0, 10], [0, 0, 10, 11], [0, 10, 11, 12]], [[0, 0, 0, 20], [0, 0, 20, 21]], [],
      [[0, 0, 0, 40], [0, 0, 40, 41], [0, 40, 41, 42], [40, 41, 42, 43], [41, 42, 43, 44]]], LX),
    ("frame_stack", X, LX, (V,), INT, {"right": 2, "flatten": False},
     [[[10, 11, 12], [11, 12, 0], [12, 0, 0]], [[20, 21, 0], [21, 0, 0]], [],
      [[40, 41, 42], [41, 42, 43], [42, 43, 44], [43, 44, 0], [44, 0, 0]]], LX),
    ("frame_stack", F, LF, (V, 2), FLOAT, {"left": 1},
     [[[0, 0, 10, -10], [10, -10, 11, -11]], [[0, 0, 20, -20], [20, -20, 21, -21], [21, -21, 22, -22]], []], LF),
    ("frame_stack", F, LF, (V, 2), FLOAT, {"right": 1, "flatten": False},
     [[[[10, -10], [11, -11]], [[11, -11], [0, 0]]],
      [[[20, -20], [21, -21]], [[21, -21], [22, -22]], [[22, -22], [0, 0]]], []], LF),
    ("frame_stack", FIXED, None, (3,), INT, {"left": 1, "right": 1},
     [[[0, 10, 11], [10, 11, 12], [11, 12, 0]], [[0, 20, 21], [20, 21, 22], [21, 22, 0]]], None),
    ("frame_stack", GRID, None, (2, 3), INT, {"left": 1},
     [[[0, 0, 0, 100, 101, 102], [100, 101, 102, 110, 111, 112]],
      [[0, 0, 0, 200, 201, 202], [200, 201, 202, 210, 211, 212]]], None),
    ("frame_stack", CUBE, None, (2, 2, 2), INT, {"left": 1},  # flatten joins the frames' first axes
     [[[[0, 0], [0, 0], [1, 2], [3, 4]], [[1, 2], [3, 4], [5, 6], [7, 8]]]], None),
    ("frame_stack", CUBE, None, (2, 2, 2), INT, {"left": 1, "flatten": False},
     [[[[[0, 0], [0, 0]], [[1, 2], [3, 4]]], [[[1, 2], [3, 4]], [[5, 6], [7, 8]]]]], None),
    ("frame_stack", S, LS, (V,), STR, {"left": 1}, [[[b"", b"a0"], [b"a0", b"a1"]], [[b"", b"b0"]]], LS),
    # lookup: ids are 0-based line numbers; "\r" ends a line, it is not part of a token
    ("lookup", WORDS, LW, (V,), STR, {"vocabulary": "mixed.txt"}, [[1, 3, 4], [2, 4]], LW),
    ("lookup", WORDS, LW, (V,), STR, {"vocabulary": "mixed.txt", "oov_id": -1, "dtype": "int32"},
     [[1, 3, -1], [2, -1]], LW),
    ("lookup", [["t3", "t1"], ["t9", "t4"]], None, (2,), STR, {"vocabulary": "mixed.txt", "oov_id": 7},
     [[0, 3], [7, 2]], None),
    ("lookup", [["a", "b", "\ufeffb", "b\r"]], None, (4,), STR, {"vocabulary": "bom.txt"}, [[1, 0, 2, 2]], None),
    ("lookup", [["a b", "c", "a", " c"]], None, (4,), STR, {"vocabulary": "spaces.txt"}, [[0, 1, 2, 2]], None),
]


@pytest.fixture(scope="module")
def vocab_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("vocab")
    for name, data in VOCABS.items():
        (d / name).write_bytes(data)
    return d


def infer(name, args, info, base_dir="."):
    builtin_types.load()  # the registry holds the built-ins once they are imported
    problems = []
    out = STEPS.get(name).infer(args, info, CheckContext("independent", {}, {}, lambda p, m: problems.append((p, m)),
                                                         str(base_dir)))
    assert problems == []
    return out


@pytest.mark.parametrize("name, values, lengths, shape, dtype, args, want, want_lengths", ROWS)
def test_step_on_a_batch(vocab_dir, name, values, lengths, shape, dtype, args, want, want_lengths):
    args = dict(args)
    info = TensorInfo(dtype, shape)
    out_info = infer(name, args, info, vocab_dir)
    # Traced on unknown batch and variable lengths: the static shape is what infer promised.
    specs = [tf.TensorSpec((None,) + shape, dtype)] + ([tf.TensorSpec([None], tf.int64)] if lengths else [])
    run = tf.function(lambda v, *l: STEPS.get(name).build(args, v, l[0] if l else None, info, out_info))
    concrete = run.get_concrete_function(*specs)
    assert concrete.structured_outputs[0].shape.as_list() == [None] + list(out_info.shape)
    out, new_lengths = run(tf.constant(values, dtype), *([tf.constant(lengths, tf.int64)] if lengths else []))
    assert out.dtype.name == out_info.dtype
    out = out.numpy()
    if want_lengths is None:
        assert new_lengths is None and out_info.shape[0] is not None
        want = np.array(want, dtype=out.dtype)
        assert out.shape == want.shape
        np.testing.assert_array_equal(out, want)
        return
    assert out_info.shape[0] is None
    assert new_lengths.numpy().tolist() == want_lengths
    assert out.shape[1] >= max(want_lengths)
    for row, n, expected in zip(out, want_lengths, want):
        expected = np.array(expected, dtype=out.dtype).reshape((n,) + out.shape[2:])
        np.testing.assert_array_equal(row[:n], expected)


# ---------------------------------------------------------------- errors when the config is checked

@pytest.fixture(scope="module")
def typed_data(tmp_path_factory):
    """One tensor of each kind the errors need: tokens [?] int64, frames [?, 2] float32, words [?] string,
    label [] int64, pix [2, 3] uint8; and vocabulary files good and bad."""
    d = tmp_path_factory.mktemp("typed")
    write_manifest(d, [feature("tokens", "int64", [], "int", var_len=True),
                       feature("frames", "float32", [2], "float", var_len=True),
                       feature("words", "string", [], "string", var_len=True),
                       feature("label", "int64", [], "int", var_len=False),
                       feature("pix", "uint8", [2, 3], "int", var_len=False)], allow_var_len=True)
    write_records(d / "a.tfrecords", [sequence_example(
        {"label": ("int", [r]), "pix": ("int", [r] * 6)},
        {"tokens": ("int", [[r]]), "frames": ("float", [[r, -r]]), "words": ("bytes", [["t0"]])}) for r in range(2)])
    for name, data in {"vocab.txt": b"t0\nt1\n", "empty.txt": b"", "newline.txt": b"\n",
                       "twice.txt": b"a\nb\nc\r\nb\n", "blank.txt": b"a\n\nb\n"}.items():
        (d / name).write_bytes(data)
    return d


def step_config(data, tensor, kind, args=None, loader_args=None):
    step = {"tensor": tensor, "type": kind}
    if args is not None:
        step["args"] = args
    return loader_config(data, [(tensor, tensor)], inputs=[tensor], padding=True, processing_steps=[step],
                         **(loader_args or {}))


STEP = "$.args.processing_steps[0]"
# (step, tensor, args (None: no args key), JSON path after the step's, fragments of the message)
ERRORS = [
    ("pad_to", "frames", {"size": 0}, ".args.size", ["expected an integer >= 1, found 0"]),
    ("pad_to", "frames", None, "", ["missing required key 'args'"]),
    ("pad_to", "frames", {}, ".args", ["missing required key 'size'"]),
    ("pad_to", "frames", {"size": 2, "length": 3}, ".args.length", ["unknown key 'length'"]),
    ("pad_to", "frames", {"size": 2, "axis": 2}, ".args.axis",
     ["found axis 2 for a tensor of rank 2 (shape [?, 2])", "expected -2 <= axis < 2", "never counts the batch"]),
    ("pad_to", "frames", {"size": 2, "axis": -3}, ".args.axis", ["found axis -3", "expected -2 <= axis < 2"]),
    ("pad_to", "label", {"size": 2}, ".args.axis", ["found axis 0 for a tensor of rank 0 (shape [])"]),
    ("pad_to", "tokens", {"size": 2, "value": "x"}, ".args.value", ["found 'x': expected a number for dtype 'int64'"]),
    ("pad_to", "tokens", {"size": 2, "value": 1.5}, ".args.value", ["found 1.5: expected an integer"]),
    ("pad_to", "pix", {"size": 2, "value": 256}, ".args.value",
     ["found 256: expected a value from 0 to 255 for dtype 'uint8'"]),
    ("pad_to", "words", {"size": 2, "value": 0}, ".args.value", ["found 0: expected a string for dtype 'string'"]),
    ("pad_to", "frames", {"size": 2, "value": True}, ".args.value", ["found True: expected a number"]),
    ("reverse", "tokens", {"axis": 1}, ".args.axis", ["found axis 1 for a tensor of rank 1 (shape [?])",
                                                      "expected -1 <= axis < 1"]),
    ("reverse", "pix", {"axis": -3}, ".args.axis", ["found axis -3 for a tensor of rank 2 (shape [2, 3])"]),
    ("reverse", "label", None, ".args.axis", ["found axis 0 for a tensor of rank 0", "a scalar has none"]),
    ("reverse", "tokens", {"axis": "0"}, ".args.axis", ["expected integer, found string '0'"]),
    ("lookup", "words", {"vocabulary": "missing.txt"}, ".args.vocabulary",
     ["cannot read the vocabulary file {d}/missing.txt: No such file or directory"]),
    ("lookup", "words", {"vocabulary": "."}, ".args.vocabulary", ["cannot read the vocabulary file {d}:"]),
    ("lookup", "words", {"vocabulary": "empty.txt"}, ".args.vocabulary",
     ["found no tokens in the vocabulary file {d}/empty.txt"]),
    ("lookup", "words", {"vocabulary": "newline.txt"}, ".args.vocabulary", ["line 1 of the vocabulary file",
                                                                            "is empty"]),
    ("lookup", "words", {"vocabulary": "blank.txt"}, ".args.vocabulary", ["line 2 of the vocabulary file {d}/blank.txt "
                                                                          "is empty"]),
    ("lookup", "words", {"vocabulary": "twice.txt"}, ".args.vocabulary",
     ["token 'b' is on line 2 and again on line 4 of the vocabulary file {d}/twice.txt", "expected each token once"]),
    ("lookup", "tokens", {"vocabulary": "vocab.txt"}, ".tensor",
     ["found dtype int64: expected a string tensor"]),
    ("lookup", "words", {"vocabulary": "vocab.txt", "dtype": "int16"}, ".args.dtype",
     ["unexpected value 'int16'", "int32", "int64"]),
    ("lookup", "words", {"vocabulary": "vocab.txt", "dtype": "int32", "oov_id": 2**31}, ".args.oov_id",
     [f"found oov_id {2**31}: expected a value from -2147483648 to 2147483647 for dtype 'int32'"]),
    ("lookup", "words", {}, ".args", ["missing required key 'vocabulary'"]),
    ("frame_stack", "frames", {}, ".args", ["found left 0 and right 0: expected left > 0 or right > 0"]),
    ("frame_stack", "frames", {"left": 0, "right": 0, "flatten": False}, ".args", ["found left 0 and right 0"]),
    ("frame_stack", "label", {"left": 1}, ".tensor", ["found a scalar (shape []) of dtype int64",
                                                      "expected a tensor with at least one axis"]),
    ("frame_stack", "frames", {"left": -1}, ".args.left", ["expected an integer >= 0, found -1"]),
    ("frame_stack", "frames", {"right": 1, "flatten": "yes"}, ".args.flatten",
     ["expected boolean, found string 'yes'"]),
    ("frame_stack", "frames", {"left": 2**31 - 1, "right": 1}, ".args",
     [f"{2**31 + 1} frames of shape [2] make an axis of {2 * (2**31 + 1)}: expected at most 2147483647"]),
    ("subsample", "frames", {"every": 0}, ".args.every", ["expected an integer >= 1, found 0"]),
    ("subsample", "frames", {"every": 2, "offset": -1}, ".args.offset", ["expected an integer >= 0, found -1"]),
    ("subsample", "frames", {"offset": 1}, ".args", ["missing required key 'every'"]),
    ("subsample", "label", {"every": 2}, ".tensor", ["found a scalar (shape []) of dtype int64"]),
]


@pytest.mark.parametrize("kind, tensor, args, where, fragments", ERRORS)
def test_bad_args_are_config_errors_at_their_path(typed_data, kind, tensor, args, where, fragments, monkeypatch):
    monkeypatch.chdir(typed_data)  # a dict config's relative paths are relative to the working directory
    with pytest.raises(ConfigError) as info:
        load_config(step_config(typed_data, tensor, kind, args))
    assert len(info.value.problems) == 1, str(info.value)
    problem = info.value.problems[0]
    assert problem.path == STEP + where
    assert f"{STEP + where}: " in str(info.value)
    for fragment in fragments:
        assert fragment.format(d=typed_data) in problem.message


# (step, tensor, args, the tensor's dtype and shape afterwards)
SHAPES = [
    ("pad_to", "frames", {"size": 5}, TensorInfo("float32", (5, 2))),
    ("pad_to", "frames", {"size": 5, "axis": -1}, TensorInfo("float32", (None, 5))),
    ("pad_to", "pix", {"size": 4, "axis": 1}, TensorInfo("uint8", (2, 4))),
    ("reverse", "frames", {"axis": 1}, TensorInfo("float32", (None, 2))),
    ("lookup", "words", {"vocabulary": "vocab.txt"}, TensorInfo("int64", (None,))),
    ("lookup", "words", {"vocabulary": "vocab.txt", "dtype": "int32"}, TensorInfo("int32", (None,))),
    ("frame_stack", "frames", {"left": 2, "right": 1}, TensorInfo("float32", (None, 8))),
    ("frame_stack", "frames", {"left": 2, "right": 1, "flatten": False}, TensorInfo("float32", (None, 4, 2))),
    ("frame_stack", "tokens", {"right": 1}, TensorInfo("int64", (None, 2))),
    ("frame_stack", "pix", {"left": 1}, TensorInfo("uint8", (2, 6))),
    ("subsample", "pix", {"every": 2}, TensorInfo("uint8", (1, 3))),
    ("subsample", "pix", {"every": 1, "offset": 2}, TensorInfo("uint8", (0, 3))),
    ("subsample", "tokens", {"every": 3, "offset": 7}, TensorInfo("int64", (None,))),
]


@pytest.mark.parametrize("kind, tensor, args, want", SHAPES)
def test_checked_config_knows_the_output_shape(typed_data, kind, tensor, args, want, monkeypatch):
    monkeypatch.chdir(typed_data)  # a dict config's relative paths are relative to the working directory
    config = load_config(step_config(typed_data, tensor, kind, args))
    assert config.tensors[tensor] == want
    assert config.processing_steps[0].output_info == want


# ---------------------------------------------------------------- real pipelines on every loader

LENGTHS = [3, 0, 1, 6, 4, 2]  # independent records; batches of 3: [3, 0, 1] and [6, 4, 2]
CONTINUOUS = [[5, 3, 4], [2, 6]]  # record lengths of each file (sequence layout)
DISCRETE = [[(2, 1), (3, 2), (0, 1), (1, 3), (4, 0), (2, 2)], [(1, 1), (2, 2), (3, 3), (1, 0)]]
PIPELINE_VOCAB = ["t3", "t0", "t4", "t1"]  # t2 and t5 are out of the vocabulary
PAD = {"int64": -3, "int32": -3, "float32": -3.25, "string": "<pad>"}  # no record holds these


def word(*where) -> str:
    return f"t{sum(where) % 6}"


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("pipelines")
    seq = root / "seq"
    write_manifest(seq, [feature("tokens", "int64", [], "int", var_len=True),
                         feature("frames", "float32", [2], "float", var_len=True),
                         feature("words", "string", [], "string", var_len=True)], allow_var_len=True)
    write_records(seq / "s.tfrecords", [sequence_example({}, {
        "tokens": ("int", [[100 * (r + 1) + s] for s in range(n)]),
        "frames": ("float", [[100 * (r + 1) + s, -(100 * (r + 1) + s)] for s in range(n)]),
        "words": ("bytes", [[word(r, s)] for s in range(n)])}) for r, n in enumerate(LENGTHS)])
    ex = root / "ex"
    write_manifest(ex, [feature("g", "int64", [4, 3], "int"), feature("s", "string", [3], "string")])
    grid = np.arange(4)[:, None] * 10 + np.arange(3)[None, :]
    write_records(ex / "e.tfrecords", [example(g=("int", (grid + 1000 * (r + 1)).ravel().tolist()),
                                               s=("bytes", [word(r, j) for j in range(3)])) for r in range(3)])
    write_continuous(root / "cont", CONTINUOUS, layout="sequence")
    write_continuous(root / "cont_fixed", [3, 2], layout="example")
    write_discrete(root / "disc", DISCRETE)
    # String feature lists for the sequence loaders: step p of file f (continuous), step j of
    # record r of file f (discrete) holds word(f, p) / word(f, r, j).
    for name, files in (("cont_words", CONTINUOUS), ("disc_words", [[n for n, _ in f] for f in DISCRETE])):
        write_manifest(root / name, [feature("w", "string", [], "string", var_len=True)], allow_var_len=True)
        for f, records in enumerate(files):
            out, position = [], 0
            for r, n in enumerate(records):
                steps = range(position, position + n) if name == "cont_words" else [r + j for j in range(n)]
                out.append(sequence_example({}, {"w": ("bytes", [[word(f, p)] for p in steps])}))
                position += n
            write_records(root / name / f"part-{f}.tfrecords", out)
    (root / "vocab.txt").write_text("\n".join(PIPELINE_VOCAB) + "\n")
    return root


# name -> (loader, arguments of the config)
LOADERS = {
    "seq": ("independent", {"target_batch_size": 3}),
    "ex": ("independent", {"target_batch_size": 2}),
    "cont": ("continuous_sequence", {"min_window": 2, "max_window": 6, "seed": 1}),
    "cont_fixed": ("continuous_sequence", {"min_window": 5, "max_window": 5, "stride": 3}),
    "cont_words": ("continuous_sequence", {"min_window": 2, "max_window": 5, "seed": 2}),
    "disc": ("discrete_sequence", {"min_window": 1, "max_window": 3, "seed": 6, "target_batch_size": 3}),
    "disc_words": ("discrete_sequence", {"min_window": 1, "max_window": 3, "seed": 4, "target_batch_size": 2}),
}
_BASES: dict = {}  # batches of each pipeline without the step, shared by the rows


def pipeline(data, dataset, tensor, dtype, steps=(), secondary=()):
    loader, args = LOADERS[dataset]
    return loader_config(data / dataset, [(tensor, tensor)], inputs=[tensor] + [s["to_name"] for s in secondary],
                         loader=loader, padding=[{"tensor": tensor, "value": PAD[dtype]}],
                         processing_steps=list(steps), secondary_features=list(secondary), **args)


def base_batches(data, dataset, tensor, dtype):
    """Batches without the step, and ``n``: each example's valid length."""
    key = (str(data), dataset, tensor)
    if key not in _BASES:
        length = {"to_name": "n", "type": "length", "args": {"tensor": tensor}}
        _BASES[key] = collect(build_input_fn(pipeline(data, dataset, tensor, dtype, secondary=[length]))())
    return _BASES[key]


def numpy_pad_to(x, size, axis=0, value=0):
    axis %= x.ndim
    x = x[(slice(None),) * axis + (slice(0, size),)]
    widths = [(0, 0)] * x.ndim
    widths[axis] = (0, size - x.shape[axis])
    return np.pad(x, widths, constant_values=value)


def numpy_frame_stack(x, left=0, right=0, flatten=True):
    rows = []
    for t in range(len(x)):
        frames = [x[t + o] if 0 <= t + o < len(x) else np.zeros_like(x[0]) for o in range(-left, right + 1)]
        rows.append(np.concatenate(frames) if flatten and x.ndim >= 2 else np.stack(frames))
    tail = ((left + 1 + right) * x.shape[1],) + x.shape[2:] if flatten and x.ndim >= 2 else \
        (left + 1 + right,) + x.shape[1:]
    return np.stack(rows) if rows else np.zeros((0,) + tail, x.dtype)


def numpy_lookup(x, oov_id=len(PIPELINE_VOCAB), dtype="int64", vocabulary=None):
    ids = {t.encode(): i for i, t in enumerate(PIPELINE_VOCAB)}
    return np.array([ids.get(t, oov_id) for t in x.ravel()], dtype).reshape(x.shape)


NUMPY = {
    "pad_to": numpy_pad_to,
    "reverse": lambda x, axis=0: np.flip(x, axis),
    "subsample": lambda x, every, offset=0: x[offset::every],
    "frame_stack": numpy_frame_stack,
    "lookup": numpy_lookup,
}

# (dataset, tensor, its dtype, step, args); lookup's vocabulary is the data's vocab.txt
PIPELINES = [
    ("seq", "frames", "float32", "pad_to", {"size": 4, "value": 0.5}),
    ("seq", "tokens", "int64", "pad_to", {"size": 2}),
    ("ex", "g", "int64", "pad_to", {"size": 5, "axis": 1, "value": -1}),
    ("cont", "x", "float32", "pad_to", {"size": 4, "value": 9.5}),
    ("disc", "words", "int64", "pad_to", {"size": 3}),
    ("disc", "frames", "float32", "pad_to", {"size": 3, "axis": -1}),
    ("seq", "frames", "float32", "reverse", {}),
    ("ex", "g", "int64", "reverse", {"axis": 1}),
    ("cont", "y", "int64", "reverse", {}),
    ("disc", "frames", "float32", "reverse", {}),
    ("disc", "frames", "float32", "reverse", {"axis": 1}),
    ("seq", "words", "string", "lookup", {}),
    ("ex", "s", "string", "lookup", {"oov_id": -1, "dtype": "int32"}),
    ("cont_words", "w", "string", "lookup", {}),
    ("disc_words", "w", "string", "lookup", {"dtype": "int32"}),
    ("seq", "frames", "float32", "frame_stack", {"left": 2, "right": 1}),
    ("ex", "g", "int64", "frame_stack", {"left": 1, "flatten": False}),
    ("cont", "x", "float32", "frame_stack", {"left": 1, "right": 1}),
    ("cont_fixed", "x", "float32", "frame_stack", {"right": 2}),
    ("disc", "frames", "float32", "frame_stack", {"left": 1, "right": 2}),
    ("disc", "words", "int64", "frame_stack", {"left": 1, "flatten": False}),
    ("seq", "tokens", "int64", "subsample", {"every": 2, "offset": 1}),
    ("ex", "g", "int64", "subsample", {"every": 3}),
    ("cont", "x", "float32", "subsample", {"every": 2}),
    ("cont_fixed", "y", "int64", "subsample", {"every": 2, "offset": 3}),
    ("disc", "frames", "float32", "subsample", {"every": 3, "offset": 1}),
]


@pytest.mark.parametrize("dataset, tensor, dtype, kind, args", PIPELINES)
def test_pipeline_equals_numpy_on_each_example(data, dataset, tensor, dtype, kind, args):
    if kind == "lookup":
        args = {**args, "vocabulary": str(data / "vocab.txt")}
    out_dtype = args.get("dtype", "int64") if kind == "lookup" else dtype
    step = {"tensor": tensor, "type": kind, "args": args}
    got = collect(build_input_fn(pipeline(data, dataset, tensor, out_dtype, steps=[step]))())
    base = base_batches(data, dataset, tensor, dtype)
    assert len(got) == len(base) >= 2
    for before, after in zip(base, got):
        rows = [NUMPY[kind](x[:n], **args) for x, n in zip(before[tensor], before["n"])]
        width = max(len(r) for r in rows)
        want = np.full((len(rows), width) + rows[0].shape[1:], PAD[out_dtype], after[tensor].dtype)
        for i, r in enumerate(rows):
            want[i, :len(r)] = r
        assert after[tensor].dtype == np.dtype(out_dtype if out_dtype != "string" else object)
        assert after[tensor].shape == want.shape
        np.testing.assert_array_equal(after[tensor], want)


def test_frame_stack_with_padding_true_has_zeros_at_each_examples_own_end(data):
    config = loader_config(data / "seq", [("tokens", "tokens")], inputs=["tokens", "n"], target_batch_size=3,
                           padding=True, secondary_features=[{"to_name": "n", "type": "length",
                                                              "args": {"tensor": "tokens"}}],
                           processing_steps=[{"tensor": "tokens", "type": "frame_stack",
                                              "args": {"left": 1, "right": 1}}])
    b1, b2 = collect(build_input_fn(config)())
    assert b1["n"].tolist() == [3, 0, 1] and b2["n"].tolist() == [6, 4, 2]  # lengths unchanged
    np.testing.assert_array_equal(b1["tokens"], [
        [[0, 100, 101], [100, 101, 102], [101, 102, 0]],
        [[0, 0, 0], [0, 0, 0], [0, 0, 0]],
        [[0, 300, 0], [0, 0, 0], [0, 0, 0]]])
    np.testing.assert_array_equal(b2["tokens"], [
        [[0, 400, 401], [400, 401, 402], [401, 402, 403], [402, 403, 404], [403, 404, 405], [404, 405, 0]],
        [[0, 500, 501], [500, 501, 502], [501, 502, 503], [502, 503, 0], [0, 0, 0], [0, 0, 0]],
        [[0, 600, 601], [600, 601, 0], [0, 0, 0], [0, 0, 0], [0, 0, 0], [0, 0, 0]]])


def test_lookup_table_is_made_once_per_vocabulary(data):
    from batchloaders.transform.steps import lookup

    vocab = data / "once.txt"
    vocab.write_text("t1\nt0\n")  # a file no other test uses: its table is new
    config = pipeline(data, "seq", "words", "int64", steps=[
        {"tensor": "words", "type": "lookup", "args": {"vocabulary": str(vocab)}}])
    before = lookup.table_count()
    first = collect(build_input_fn(config)())  # traces the batch function, then runs 2 batches
    assert lookup.table_count() == before + 1
    again = collect(build_input_fn(config)())
    assert lookup.table_count() == before + 1
    for batches in (first, again):
        ids = np.concatenate([b["words"].ravel() for b in batches])
        assert sorted(set(ids.tolist())) == [-3, 0, 1, 2]  # t1, t0, the rest out of vocabulary, padding


def test_a_vocabulary_removed_after_the_check_is_a_config_error_when_built(data):
    vocab = data / "gone.txt"
    vocab.write_text("t1\nt0\n")
    config = pipeline(data, "seq", "words", "int64", steps=[
        {"tensor": "words", "type": "lookup", "args": {"vocabulary": str(vocab)}}])
    input_fn = build_input_fn(config)  # checked: the file is there
    vocab.unlink()
    with pytest.raises(ConfigError, match=r"\$\.args\.processing_steps\[0\]: lookup step: cannot read the "
                                          r"vocabulary file .*gone.txt"):
        input_fn()


# ---------------------------------------------------------------- a config file naming all five steps

ALL_FIVE = [
    {"tensor": "tokens", "type": "reverse"},
    {"tensor": "tokens", "type": "subsample", "args": {"every": 2}},
    {"tensor": "tokens", "type": "frame_stack", "args": {"left": 1}},
    {"tensor": "frames", "type": "pad_to", "args": {"size": 3, "value": 0.5}},
    {"tensor": "words", "type": "lookup", "args": {"vocabulary": "../vocab.txt"}},  # relative to the config file
]


@pytest.fixture(scope="module")
def config_file(data):
    conf = data / "conf"
    conf.mkdir(exist_ok=True)
    config = loader_config("../seq", [(n, n) for n in ("tokens", "frames", "words")],
                           inputs=["tokens", "frames", "words"], target_batch_size=3, padding=True,
                           processing_steps=ALL_FIVE)
    path = conf / "all_five.yaml"
    path.write_text(json.dumps(config, indent=1))  # JSON is YAML
    return path


def test_validating_all_five_steps_does_not_import_tensorflow(config_file):
    code = ("import batchloaders, sys; batchloaders.load_config(sys.argv[1]); "
            "assert 'tensorflow' not in sys.modules, 'validating imported tensorflow'")
    env = dict(os.environ, PYTHONPATH=REPO)
    result = subprocess.run([sys.executable, "-c", code, str(config_file)], env=env, capture_output=True, text=True,
                            timeout=120, cwd="/")
    assert result.returncode == 0, result.stderr


def test_all_five_steps_from_a_config_file(config_file, data):
    config = load_config(str(config_file))
    assert config.processing_steps[4].args["vocabulary"] == str(data / "vocab.txt")  # resolved for the build
    assert {n: config.tensors[n] for n in ("tokens", "frames", "words")} == {
        "tokens": TensorInfo("int64", (None, 2)), "frames": TensorInfo("float32", (3, 2)),
        "words": TensorInfo("int64", (None,))}
    dataset = batchloaders.build_input_fn(str(config_file))()
    # Every op runs in TensorFlow, the lookup table included (it serializes with the dataset).
    graph = tf.compat.v1.GraphDef.FromString(dataset._as_serialized_graph().numpy())
    ops = {n.op for n in graph.node} | {n.op for f in graph.library.function for n in f.node_def}
    assert "LookupTableFindV2" in ops and "ReverseSequence" in ops
    assert not ops & {"PyFunc", "PyFuncStateless", "EagerPyFunc", "GeneratorDataset"}
    batches = collect(dataset)
    assert len(batches) == 2
    for b, records in zip(batches, (range(0, 3), range(3, 6))):
        tokens, frames, words = [], [], []
        for r in records:
            steps = np.arange(LENGTHS[r])
            v = 100 * (r + 1) + steps
            tokens.append(numpy_frame_stack(v[::-1][::2], left=1))
            frames.append(numpy_pad_to(np.stack([v, -v], 1).astype(np.float32), 3, value=0.5))
            words.append(numpy_lookup(np.array([word(r, s).encode() for s in steps], object)))
        np.testing.assert_array_equal(b["frames"], np.stack(frames))
        for name, rows in (("tokens", tokens), ("words", words)):
            width = max(len(r) for r in rows)
            assert b[name].shape[1] == width
            for row, want in zip(b[name], rows):
                np.testing.assert_array_equal(row[:len(want)], want)
                assert (row[len(want):] == 0).all()  # padding true pads with 0
