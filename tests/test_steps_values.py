"""The cast, reshape, one_hot, normalize and clip steps: values checked exactly.

Unit tables call each step's batched build on tf.constant batches whose padding holds
garbage (999, or NaN for floats) that must never reach a valid entry. Pipeline tests run
each step on the three loaders and compare every batch with numpy applied to each example
of a raw copy: the same stored feature loaded a second time under ``<name>_raw``, without
the step, cut to its length (a ``length`` secondary). Stored values say where they came from:
independent Example record r holds g[i, j] = 100*r + 10*i + j and k[j] = r + j - 1; the
sequence data are seqdata.py's (continuous frame p of file f holds 1000*f + p, discrete
step j of record r of file f holds 10000*f + 100*r + j, rid = 100*f + r, pair = [f, r]).
"""
from __future__ import annotations

import json
import re
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

import batchloaders
from batchloaders import ConfigError
from batchloaders.transform.builtin_types import load as load_builtin_types
from batchloaders.transform.registry import STEPS, CheckContext
from batchloaders.core.model import TensorInfo
from conftest import collect, example, feature, loader_config, sequence_example, write_manifest, write_records
from seqdata import sequence_config, write_continuous, write_discrete

G = 999  # garbage in the padding of a unit batch
NAN = float("nan")
PAD = -30000  # pads transformed tensors in pipelines: no stored value or result equals it


# ================================================================ unit tables: the build on one batch

def apply(name, args, dtype, shape, values, lengths=None):
    """(values, new lengths or None, output TensorInfo) of step ``name`` on one batch, after infer accepts it."""
    load_builtin_types()
    kind, info = STEPS.get(name), TensorInfo(dtype, tuple(shape))
    problems = []
    info_out = kind.infer(args, info, CheckContext("independent", {}, {}, lambda at, msg: problems.append(msg)))
    assert problems == [] and info_out is not None
    given = None if lengths is None else tf.constant(lengths, tf.int64)
    out, new_lengths = kind.build(args, tf.constant(values, tf.as_dtype(dtype)), given, info, info_out)
    assert out.dtype == tf.as_dtype(info_out.dtype)
    assert out.shape[1:].is_compatible_with(info_out.shape)  # infer and build agree on the shape
    assert (new_lengths is None) == (info_out.shape[:1] != (None,))
    return out.numpy(), None if new_lengths is None else new_lengths.numpy().tolist(), info_out


def check_rows(out, new_lengths, info_out, want, want_lengths, close=False):
    """``want``: the whole batch (fixed first axis) or each example's valid part (variable first axis)."""
    compare = (lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)) if close else \
        np.testing.assert_array_equal
    dtype = np.dtype(tf.as_dtype(info_out.dtype).as_numpy_dtype)
    assert out.dtype == dtype
    if want_lengths is None:
        assert new_lengths is None
        compare(out, np.asarray(want, dtype))
        return
    assert new_lengths == want_lengths
    for i, rows in enumerate(want):
        compare(out[i, :new_lengths[i]], np.asarray(rows, dtype).reshape((want_lengths[i],) + info_out.shape[1:]))


# ---------------------------------------------------------------- cast

# (input dtype, input shape, batch, lengths, args, output: batch or valid parts, new lengths)
CAST = [
    ("float32", [4], [[1.7, -1.7, 0.0, 2.5]], None, {"dtype": "int32"}, [[1, -1, 0, 2]], None),  # toward zero
    ("float32", [3], [[0.0, -0.5, 3.0]], None, {"dtype": "bool"}, [[False, True, True]], None),  # not zero: true
    ("bool", [2], [[True, False], [False, False]], None, {"dtype": "float32"}, [[1.0, 0.0], [0.0, 0.0]], None),
    ("int64", [2], [[2049, -3]], None, {"dtype": "float16"}, [[2048, -3]], None),  # float16 rounds past 2048
    ("int32", [2], [[255, 7]], None, {"dtype": "uint8"}, [[255, 7]], None),
    ("float64", [], [0.1, np.inf, -np.inf], None, {"dtype": "float32"}, [np.float32(0.1), np.inf, -np.inf], None),
    ("float64", [], [0.1, 1e300, -1e300], None, {"dtype": "float32", "out_of_range": "saturate"},
     [np.float32(0.1), np.finfo(np.float32).max, np.finfo(np.float32).min], None),
    ("float32", [3], [[NAN, 3e9, -3e9]], None, {"dtype": "int32", "out_of_range": "saturate"},
     [[0, 2**31 - 128, -2**31]], None),  # clamped in float32, whose largest value under 2**31 is 2**31 - 128
    ("int64", [None], [[200, G], [7, 255]], [1, 2], {"dtype": "uint8"}, [[200], [7, 255]], [1, 2]),  # padding unchecked
    ("string", [], [b"a", b""], None, {"dtype": "string"}, [b"a", b""], None),
    ("int64", [None, 2], [[[1, -2], [3, 4], [G, G]], [[5, 6], [G, G], [G, G]], [[G, G]] * 3], [2, 1, 0],
     {"dtype": "float64"}, [[[1, -2], [3, 4]], [[5, 6]], []], [2, 1, 0]),
]


@pytest.mark.parametrize("dtype, shape, values, lengths, args, want, want_lengths", CAST)
def test_cast_values(dtype, shape, values, lengths, args, want, want_lengths):
    out, new_lengths, info = apply("cast", args, dtype, shape, values, lengths)
    assert info == TensorInfo(args["dtype"], tuple(shape))
    check_rows(out, new_lengths, info, want, want_lengths)


# (input dtype, batch, lengths, output dtype, the value the error names): tf.cast would change these silently
CAST_OUT_OF_RANGE = [
    ("float32", [[1.0, NAN]], None, "int32", "nan"),
    ("float32", [[1.0, 3e9]], None, "int32", "3e+09"),
    ("int64", [[2**40 + 1, -2**40]], None, "int32", "1099511627777"),
    ("int64", [[1, -1]], None, "uint8", "-1"),
    ("float64", [[1.0, 1e300]], None, "float32", "1e+300"),
    ("int64", [[7, G], [1, 70000]], [1, 2], "float16", "70000"),  # a valid entry past the padding's
]


@pytest.mark.parametrize("dtype, values, lengths, to, found", CAST_OUT_OF_RANGE)
def test_cast_refuses_a_value_the_dtype_cannot_hold(dtype, values, lengths, to, found):
    load_builtin_types()
    kind = STEPS.get("cast")
    info = TensorInfo(dtype, (None,) if lengths is not None else (2,))
    given = None if lengths is None else tf.constant(lengths, tf.int64)
    run = tf.function(lambda: kind.build({"dtype": to}, tf.constant(values, tf.as_dtype(dtype)), given, info)[0])
    with pytest.raises(tf.errors.InvalidArgumentError) as caught:  # in a graph, as in the pipeline
        run()
    assert (f"<a processing step>: the cast to {to} found the value {found}, which {to} cannot hold (out_of_range: "
            "saturate clamps)") in caught.value.message


# ---------------------------------------------------------------- reshape

def grid(r):
    """Fixed unit example r: 100*r + 10*i + j on a [2, 3] grid."""
    return 100 * r + 10 * np.arange(2)[:, None] + np.arange(3)[None, :]


STEPS4 = [2, 0, 1]  # lengths of the variable unit batch: step s of example r holds 100*r + 10*s + c, c < 4


def steps4(r):
    return 100 * r + 10 * np.arange(STEPS4[r])[:, None] + np.arange(4)[None, :]


def garbage_padded(rows, width=None):
    """Valid parts padded with G to a common width, as a batch reaches a step."""
    width = max(len(r) for r in rows) + 1 if width is None else width
    first = np.asarray(next(r for r in rows if len(r)))
    tail = first.shape[1:]
    out = np.full((len(rows), width) + tail, G, first.dtype)
    for i, r in enumerate(rows):
        out[i, :len(r)] = np.reshape(r, (len(r),) + tail)
    return out.tolist()


VAR4 = garbage_padded([steps4(r) for r in range(3)])

RESHAPE = [
    ("float32", [2, 3], [grid(0), grid(1)], None, [3, 2], [grid(0).reshape(3, 2), grid(1).reshape(3, 2)], None),
    ("float32", [2, 3], [grid(2)], None, [-1], [grid(2).ravel()], None),
    ("int64", [2, 3], [grid(1)], None, [1, -1, 2], [grid(1).reshape(1, 3, 2)], None),
    ("int64", [2, 3], [grid(1)], None, [3, 1, 2, 1], [grid(1).reshape(3, 1, 2, 1)], None),
    ("int32", [1], [[7], [8]], None, [], [7, 8], None),  # one entry to a scalar
    ("int32", [], [7, 8], None, [1, -1], [[[7]], [[8]]], None),
    ("int64", [None, 4], VAR4, STEPS4, [-1, 2], [steps4(r).reshape(-1, 2) for r in range(3)], [4, 0, 2]),
    ("int64", [None, 4], VAR4, STEPS4, [-1, 2, 2], [steps4(r).reshape(-1, 2, 2) for r in range(3)], [2, 0, 1]),
    ("int64", [None, 4], VAR4, STEPS4, [-1], [steps4(r).ravel() for r in range(3)], [8, 0, 4]),
    ("int64", [None, 4], VAR4, STEPS4, [-1, 1, 4], [steps4(r).reshape(-1, 1, 4) for r in range(3)], [2, 0, 1]),
    ("int64", [None], [[1, 2, G], [3, G, G]], [2, 1], [-1], [[1, 2], [3]], [2, 1]),
]


@pytest.mark.parametrize("dtype, shape, values, lengths, new, want, want_lengths", RESHAPE)
def test_reshape_values(dtype, shape, values, lengths, new, want, want_lengths):
    out, new_lengths, info = apply("reshape", {"shape": new}, dtype, shape, np.asarray(values).tolist(), lengths)
    check_rows(out, new_lengths, info, want, want_lengths)


def test_reshape_infers_the_minus_one_and_keeps_a_variable_axis():
    _, _, fixed = apply("reshape", {"shape": [-1, 3, 1]}, "int32", [2, 3], [grid(0)])
    assert fixed == TensorInfo("int32", (2, 3, 1))
    _, _, variable = apply("reshape", {"shape": [-1, 2, 2]}, "int64", [None, 4], VAR4, STEPS4)
    assert variable == TensorInfo("int64", (None, 2, 2))


# ---------------------------------------------------------------- one_hot

ONE_HOT = [
    # Indices outside [0, depth), negative or too large, give rows of off_value only.
    ("int64", [4], [[0, 2, 3, -1]], None, {"depth": 3},
     [[[1, 0, 0], [0, 0, 1], [0, 0, 0], [0, 0, 0]]], None),
    ("uint8", [2], [[1, 255]], None, {"depth": 2, "on_value": 5, "off_value": -1, "dtype": "int32"},
     [[[-1, 5], [-1, -1]]], None),
    ("uint64", [2], [[2**64 - 1, 1]], None, {"depth": 2}, [[[0, 0], [0, 1]]], None),  # no wrap to a valid index
    ("uint32", [2], [[2**32 - 1, 0]], None, {"depth": 2}, [[[0, 0], [1, 0]]], None),
    ("uint64", [2], [[2**32 + 1, 0]], None, {"depth": 2}, [[[0, 0], [1, 0]]], None),  # no truncation to 32 bits
    ("int64", [2], [[2**32 + 1, -2**32]], None, {"depth": 2}, [[[0, 0], [0, 0]]], None),
    ("int16", [], [3, 0], None, {"depth": 4, "dtype": "bool"}, [[False, False, False, True],
                                                               [True, False, False, False]], None),
    ("int8", [2], [[0, -128]], None, {"depth": 1, "dtype": "float64"}, [[[1], [0]]], None),
    ("int32", [None], [[1, 0, G], [2, G, G]], [2, 1], {"depth": 3, "on_value": 0.5, "off_value": 0.25,
                                                       "dtype": "float16"},
     [[[0.25, 0.5, 0.25], [0.5, 0.25, 0.25]], [[0.25, 0.25, 0.5]]], [2, 1]),
]


@pytest.mark.parametrize("dtype, shape, values, lengths, args, want, want_lengths", ONE_HOT)
def test_one_hot_values(dtype, shape, values, lengths, args, want, want_lengths):
    out, new_lengths, info = apply("one_hot", args, dtype, shape, values, lengths)
    assert info == TensorInfo(args.get("dtype", "float32"), tuple(shape) + (args["depth"],))
    check_rows(out, new_lengths, info, want, want_lengths)


# ---------------------------------------------------------------- normalize

def moments(x, axis, epsilon=1e-5):
    """Reference: (x - mean) / sqrt(var + epsilon) of one example over ``axis``, in float64."""
    x = np.asarray(x, np.float64)
    axis = tuple(axis) if isinstance(axis, list) else axis
    return (x - x.mean(axis, keepdims=True)) / np.sqrt(x.var(axis, keepdims=True) + epsilon)


X32 = [[1.0, 10.0], [2.0, 20.0], [3.0, 60.0]]
VAR2 = [[[1, 10], [3, 20], [4, 60]], [], [[5, 7]], [[-2, 1], [2, 3]]]  # valid parts, one of length 0
VAR2_BATCH = garbage_padded(VAR2, 4)
VAR2_BATCH[3][2] = [NAN, NAN]  # NaN padding must not reach a mean either
VAR3 = [[[1, 2, 6], [0, 0, 3]], [[4, 4, 4]]]

NORMALIZE = [
    ("float32", [2, 3], [[[1, 2, 3], [4, 5, 6]]], None, {"mean": 2, "std": 4},
     [[[-0.25, 0, 0.25], [0.5, 0.75, 1]]], None),
    ("float32", [2, 3], [[[1, 2, 3], [4, 5, 6]]], None, {"mean": [1, 2, 3], "std": [1, 2, 4]},
     [[[0, 0, 0], [3, 1.5, 0.75]]], None),
    ("float64", [None, 2], [[[1, 10], [3, 20], [G, NAN]], [[5, 30], [NAN, NAN], [G, G]]], [2, 1],
     {"mean": [1, 10], "std": [2, 5]}, [[[0, 0], [1, 2]], [[2, 4]]], [2, 1]),
    ("float32", [3, 2], [X32], None, {"axis": 0}, [moments(X32, 0)], None),
    ("float32", [3, 2], [X32], None, {"axis": -1}, [moments(X32, -1)], None),
    ("float64", [3, 2], [X32], None, {"axis": [0, 1], "epsilon": 0.5}, [moments(X32, [0, 1], 0.5)], None),
    ("float32", [None, 2], VAR2_BATCH, [3, 0, 1, 2], {"axis": 0},
     [moments(r, 0) if r else [] for r in VAR2], [3, 0, 1, 2]),
    ("float32", [None, 2], VAR2_BATCH, [3, 0, 1, 2], {"axis": [-2, 1], "epsilon": 2},
     [moments(r, [0, 1], 2) if r else [] for r in VAR2], [3, 0, 1, 2]),
    ("float64", [None, 3], garbage_padded(VAR3), [2, 1], {"axis": 1}, [moments(r, 1) for r in VAR3], [2, 1]),
    ("float32", [None], [[1, 3, 8, NAN], [-4, NAN, NAN, NAN]], [3, 1], {"axis": 0},
     [moments([1, 3, 8], 0), [0]], [3, 1]),  # one step: no deviation, so 0
]


@pytest.mark.parametrize("dtype, shape, values, lengths, args, want, want_lengths", NORMALIZE)
def test_normalize_values(dtype, shape, values, lengths, args, want, want_lengths):
    out, new_lengths, info = apply("normalize", args, dtype, shape, values, lengths)
    assert info == TensorInfo(dtype, tuple(shape))
    check_rows(out, new_lengths, info, want, want_lengths, close=True)


@pytest.mark.parametrize("dtype, x, mean", [
    ("float16", [2048, 2052, 2050], 2049),  # 2049 is no float16: it would round to 2048
    ("bfloat16", [256, 260, 258], 257),     # 257 is no bfloat16: it would round to 256
])
def test_normalize_half_precision_is_computed_in_float32(dtype, x, mean):
    out, _, info = apply("normalize", {"mean": mean, "std": 0.5}, dtype, [3], [x])
    assert info.dtype == dtype
    np.testing.assert_array_equal(out.astype(np.float32), [[-2, 6, 2]])
    out, _, _ = apply("normalize", {"axis": 0, "epsilon": 1e-3}, dtype, [3], [[1.0, 3.0, 2.0]])
    want = (np.array([-1, 1, 0]) / np.sqrt(2 / 3 + 1e-3)).astype(np.float32)
    np.testing.assert_allclose(out.astype(np.float32)[0], want, rtol=1e-2)


# ---------------------------------------------------------------- clip

CLIP = [
    ("float32", [4], [[-2, 0.5, 3, NAN]], None, {"min": 0, "max": 1}, [[0, 0.5, 1, NAN]], None),
    ("int64", [3], [[-5, 0, 7]], None, {"min": -1}, [[-1, 0, 7]], None),
    ("uint8", [2], [[0, 255]], None, {"max": 200}, [[0, 200]], None),
    ("uint64", [2], [[2**64 - 1, 5]], None, {"min": 6, "max": 2**64 - 2}, [[2**64 - 2, 6]], None),
    ("float16", [2], [[-1, 0.25]], None, {"min": -0.5}, [[-0.5, 0.25]], None),
    ("float64", [], [1e300, -1e300], None, {"min": -1e299, "max": 1e299}, [1e299, -1e299], None),
    ("int32", [None], [[1, 5, G], [-4, G, G]], [2, 1], {"min": 3, "max": 3}, [[3, 3], [3]], [2, 1]),
]


@pytest.mark.parametrize("dtype, shape, values, lengths, args, want, want_lengths", CLIP)
def test_clip_values(dtype, shape, values, lengths, args, want, want_lengths):
    out, new_lengths, info = apply("clip", args, dtype, shape, values, lengths)
    assert info == TensorInfo(dtype, tuple(shape))
    check_rows(out, new_lengths, info, want, want_lengths)


# ================================================================ errors through the config checker

@pytest.fixture(scope="module")
def check_data(tmp_path_factory):
    """SequenceExamples: context f float32 [2, 3], i int64 [3], s string []; lists v float32 [?, 4], t int64 [?],
    u float32 [?]."""
    d = tmp_path_factory.mktemp("check")
    write_manifest(d, [feature("f", "float32", [2, 3], "float", False), feature("i", "int64", [3], "int", False),
                       feature("s", "string", [], "string", False), feature("v", "float32", [4], "float", True),
                       feature("t", "int64", [], "int", True), feature("u", "float32", [], "float", True)],
                   allow_var_len=True)
    write_records(d / "a.tfrecords", [sequence_example(
        {"f": ("float", range(6)), "i": ("int", [0, 1, 2]), "s": ("bytes", ["w"])},
        {"v": ("float", [[0, 1, 2, 3]]), "t": ("int", [[1]]), "u": ("float", [[0.5]])})])
    return d


def step_config(data, tensor, step, args):
    item = {"tensor": tensor, "type": step} if args is None else {"tensor": tensor, "type": step, "args": args}
    return loader_config(data, [(tensor, tensor)], inputs=[tensor], padding=True, processing_steps=[item])


# (tensor, step, args, where under $.args.processing_steps[0], fragments of the message)
ERRORS = [
    ("i", "cast", {"dtype": "string"}, ".args.dtype", ["found a cast from int64 to string"]),
    ("s", "cast", {"dtype": "float32"}, ".args.dtype", ["found a cast from string to float32"]),
    ("i", "cast", {"dtype": "float"}, ".args.dtype", ["unknown dtype 'float'", "float32"]),
    ("i", "cast", {}, ".args", ["missing required key 'dtype'"]),
    ("f", "reshape", {"shape": [4, 2]}, ".args.shape",
     ["found shape [4, 2] (8 entries) for a tensor of shape [2, 3] (6 entries)", "expected a shape of 6 entries"]),
    ("f", "reshape", {"shape": [4, -1]}, ".args.shape", ["found shape [4, -1]", "shape [2, 3] (6 entries)",
                                                         "expected sizes whose product divides 6"]),
    ("f", "reshape", {"shape": [0, 6]}, ".args.shape", ["found size 0 on axis 0 of [0, 6]", "expected sizes >= 1"]),
    ("f", "reshape", {"shape": [-1, 3, -1]}, ".args.shape", ["found -1 on axes 0 and 2", "at most one -1"]),
    ("f", "reshape", {"shape": [-2, 3]}, ".args.shape[0]", ["expected an integer >= -1, found -2"]),
    ("v", "reshape", {"shape": [-1, 8]}, ".args.shape",
     ["found shape [-1, 8] for a tensor of shape [?, 4]", "product divides 4",
      "steps of a variable-length axis cannot be merged", "frame_stack"]),
    ("v", "reshape", {"shape": [-1, 3]}, ".args.shape", ["product divides 4", "cannot be merged"]),
    ("v", "reshape", {"shape": [2, -1]}, ".args.shape", ["expected -1 on axis 0", "cannot be merged"]),
    ("v", "reshape", {"shape": [4]}, ".args.shape", ["found shape [4] for a tensor of shape [?, 4]"]),
    ("f", "one_hot", {"depth": 3}, ".tensor", ["found dtype float32 (shape [2, 3])", "expected an integer dtype"]),
    ("i", "one_hot", {"depth": 0}, ".args.depth", ["expected an integer >= 1, found 0"]),
    ("i", "one_hot", {"on_value": 1}, ".args", ["missing required key 'depth'"]),
    ("i", "one_hot", None, "", ["one_hot steps need args with depth"]),
    ("i", "one_hot", {"depth": 2, "on_value": 1.5, "dtype": "int32"}, ".args.on_value",
     ["found 1.5: expected an integer", "'int32'"]),
    ("i", "one_hot", {"depth": 2, "on_value": 1, "dtype": "bool"}, ".args.on_value", ["expected true or false"]),
    ("i", "one_hot", {"depth": 2, "off_value": 300, "dtype": "uint8"}, ".args.off_value",
     ["found 300: expected a value from 0 to 255"]),
    ("i", "one_hot", {"depth": 2, "dtype": "string"}, ".args.dtype", ["unknown output dtype 'string'"]),
    ("i", "normalize", {"axis": 0}, ".tensor", ["found dtype int64 (shape [3])", "expected a float dtype"]),
    ("f", "normalize", {"mean": 1}, ".args", ["found mean without std: expected both mean and std"]),
    ("f", "normalize", {"mean": 1, "std": 2, "axis": 0}, ".args",
     ["found mean and std together with axis", "expected either mean and std"]),
    ("f", "normalize", {}, ".args", ["found no arguments: expected either mean and std"]),
    ("f", "normalize", {"epsilon": 0.1}, ".args", ["found epsilon alone"]),
    ("f", "normalize", {"mean": 0, "std": 0}, ".args.std", ["found std 0", "expected numbers > 0"]),
    ("f", "normalize", {"mean": 0, "std": [1, -1, 1]}, ".args.std", ["found std -1"]),
    ("f", "normalize", {"mean": 0, "std": 1e-50}, ".args.std", ["found std 1e-50, which is 0 in float32"]),
    ("f", "normalize", {"mean": [1, 2], "std": 1}, ".args.mean",
     ["found a list of 2 numbers for a tensor of shape [2, 3] (its last axis has size 3)",
      "expected a number or a list of 3 numbers"]),
    ("u", "normalize", {"mean": [1], "std": 1}, ".args.mean",
     ["tensor of shape [?] (its last axis varies in length): expected a single number"]),
    ("f", "normalize", {"axis": 2}, ".args.axis",
     ["found axis 2 for a tensor of rank 2 (shape [2, 3])", "expected -2 <= axis < 2"]),
    ("v", "normalize", {"axis": [-3]}, ".args.axis", ["found axis -3 for a tensor of rank 2 (shape [?, 4])"]),
    ("f", "normalize", {"axis": [1, -1]}, ".args.axis", ["found axes [1, -1]", "expected each axis once"]),
    ("f", "normalize", {"axis": 0, "epsilon": 0}, ".args.epsilon", ["found epsilon 0", "expected a finite number > 0"]),
    ("f", "normalize", {"axis": 0, "epsilon": 1e-50}, ".args.epsilon", ["found epsilon 1e-50", "float32"]),
    ("f", "normalize", {"axis": 0.5}, ".args.axis", ["expected integer or array, found number 0.5"]),
    ("s", "clip", {"min": 0}, ".tensor", ["found dtype string (shape [])", "expected a numeric dtype"]),
    ("f", "clip", {}, ".args", ["found neither min nor max: expected min, max or both"]),
    ("f", "clip", None, ".args", ["found neither min nor max"]),
    ("f", "clip", {"min": 2, "max": 1}, ".args.max", ["found min 2 > max 1: expected min <= max"]),
    ("i", "clip", {"min": 0.5}, ".args.min", ["found 0.5: expected an integer (without a decimal point)"]),
    ("i", "clip", {"max": 2**63}, ".args.max", [f"found {2**63}: expected a value from"]),
    ("f", "clip", {"min": 1e39}, ".args.min", ["found 1e+39: expected a value from"]),
    ("f", "clip", {"min": "a"}, ".args.min", ["expected number, found string 'a'"]),
    ("f", "clip", {"low": 1}, ".args.low", ["unknown key 'low'"]),
]


@pytest.mark.parametrize("tensor, step, args, where, fragments", ERRORS)
def test_bad_args_are_located_config_errors(check_data, tensor, step, args, where, fragments):
    path = "$.args.processing_steps[0]" + where
    with pytest.raises(ConfigError, match=re.escape(path + ": ")) as info:
        batchloaders.load_config(step_config(check_data, tensor, step, args))
    # One line holds the path and every fragment: the message is about this very key.
    lines = [line for line in str(info.value).splitlines() if f"{path}: " in line]
    assert any(all(f in line for f in fragments) for line in lines), str(info.value)


def test_validating_the_five_steps_does_not_import_tensorflow(check_data, tmp_path):
    steps = [{"tensor": "f", "type": "normalize", "args": {"axis": [0, 1]}},
             {"tensor": "f", "type": "reshape", "args": {"shape": [-1]}},
             {"tensor": "f", "type": "clip", "args": {"min": -1, "max": 1}},
             {"tensor": "v", "type": "reshape", "args": {"shape": [-1, 2]}},
             {"tensor": "i", "type": "cast", "args": {"dtype": "int32"}},
             {"tensor": "i", "type": "one_hot", "args": {"depth": 3}}]
    config = loader_config(check_data, [("f", "f"), ("i", "i"), ("v", "v")], inputs=["f", "i", "v"], padding=True,
                           processing_steps=steps)
    path = tmp_path / "config.yaml"
    path.write_text(json.dumps(config, indent=2))  # JSON is YAML
    code = ("import batchloaders, sys\n"
            f"c = batchloaders.load_config({str(path)!r})\n"
            "print(sorted((n, i.dtype, i.shape) for n, i in c.tensors.items()))\n"
            "assert 'tensorflow' not in sys.modules, 'validate imported tensorflow'\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == ("[('f', 'float32', (6,)), ('i', 'float32', (3, 3)), "
                                   "('v', 'float32', (None, 2))]")


# ================================================================ the three loaders, against numpy per example

def reference(step, args, x):
    """What ``step`` makes of one example ``x`` (its valid part), in numpy."""
    if step == "cast":
        return x.astype(args["dtype"])
    if step == "reshape":
        return x.reshape(args["shape"])
    if step == "one_hot":
        dtype = args.get("dtype", "float32")
        return np.where(x[..., None] == np.arange(args["depth"]), args.get("on_value", 1),
                        args.get("off_value", 0)).astype(dtype)
    if step == "normalize":
        if "mean" in args:
            y = (x.astype(np.float64) - np.asarray(args["mean"])) / np.asarray(args["std"])
        elif x.size == 0:
            y = x
        else:
            y = moments(x, args["axis"], args.get("epsilon", 1e-5))
        return y.astype(x.dtype)
    if step == "clip":
        return np.clip(x, args.get("min"), args.get("max")).astype(x.dtype)
    raise AssertionError(step)


EXAMPLE_RECORDS = 5
FILES = [[(2, 1), (3, 2), (0, 1), (1, 3), (4, 0), (2, 2), (1, 0)], [(1, 1), (2, 2), (3, 3), (1, 0)]]
# The tensors of each loader whose first axis varies in length.
VARYING = {"example": set(), "sequence": {"frames", "words"}, "continuous": {"x", "y"},
           "discrete": {"frames", "words", "rid", "pair"}}


@pytest.fixture(scope="module")
def datasets(tmp_path_factory):
    root = tmp_path_factory.mktemp("loaders")
    write_manifest(root / "example", [feature("g", "float32", [2, 3], "float"), feature("k", "int64", [3], "int")])
    write_records(root / "example" / "a.tfrecords", [
        example(g=("float", (100 * r + 10 * np.arange(2)[:, None] + np.arange(3)).ravel().tolist()),
                k=("int", [r - 1, r, r + 1])) for r in range(EXAMPLE_RECORDS)])
    write_discrete(root / "sequence", FILES)
    write_continuous(root / "continuous", [4, 3])
    write_discrete(root / "discrete", FILES)
    return root


def pipeline_config(root, loader, step, items):
    """Each (tensor, args) of ``items`` gets ``step``; ``<tensor>_raw`` is the same stored feature untouched."""
    tensors = [t for t, _ in items]
    primary = [(t, t) for t in tensors] + [(t, f"{t}_raw") for t in tensors]
    varying = [t for t in tensors if t in VARYING[loader]]
    lengths = [{"to_name": f"n_{t}", "type": "length", "args": {"tensor": t}} for t in varying]
    lengths += [{"to_name": f"n_{t}_raw", "type": "length", "args": {"tensor": f"{t}_raw"}} for t in varying]
    padding = [{"tensor": t, "value": PAD} for t in varying] + [{"tensor": f"{t}_raw"} for t in varying]
    args = dict(secondary_features=lengths, padding=padding or False, target_batch_size=3,
                processing_steps=[{"tensor": t, "type": step, "args": a} for t, a in items])
    names = [to for _, to in primary] + [s["to_name"] for s in lengths]
    if loader in ("example", "sequence"):
        return loader_config(root / loader, primary, inputs=names, **args)
    lo, hi = (2, 5) if loader == "continuous" else (1, 2)
    return sequence_config(root / loader, f"{loader}_sequence", primary, inputs=names, lo=lo, hi=hi, seed=4, **args)


def padded(rows, pad):
    width = max([len(r) for r in rows] + [0])
    out = np.full((len(rows), width) + rows[0].shape[1:], pad, rows[0].dtype)
    for i, r in enumerate(rows):
        out[i, :len(r)] = r
    return out


# step -> loader -> [(tensor, args)]
PIPELINES = {
    "cast": {
        "example": [("g", {"dtype": "int16"}), ("k", {"dtype": "bool"})],
        "sequence": [("words", {"dtype": "float16"}), ("pair", {"dtype": "int8"}), ("frames", {"dtype": "int32"})],
        "continuous": [("x", {"dtype": "int32"}), ("y", {"dtype": "float16"})],
        "discrete": [("words", {"dtype": "float16"}), ("frames", {"dtype": "int16"}), ("rid", {"dtype": "float64"})],
    },
    "reshape": {
        "example": [("g", {"shape": [3, -1]}), ("k", {"shape": [3, 1]})],
        "sequence": [("frames", {"shape": [-1]}), ("pair", {"shape": [1, 2]}), ("words", {"shape": [-1, 1]})],
        "continuous": [("x", {"shape": [-1]}), ("y", {"shape": [-1, 1, 1]})],
        "discrete": [("frames", {"shape": [-1, 1, 1]}), ("pair", {"shape": [-1]}), ("rid", {"shape": [-1, 1]})],
    },
    "one_hot": {
        "example": [("k", {"depth": 4, "on_value": 2, "off_value": -1, "dtype": "int32"})],
        "sequence": [("words", {"depth": 103}), ("rid", {"depth": 102, "dtype": "bool"})],
        "continuous": [("y", {"depth": 1003})],
        "discrete": [("words", {"depth": 203}), ("rid", {"depth": 101, "dtype": "float64"})],
    },
    "normalize": {
        "example": [("g", {"axis": [0, 1], "epsilon": 0.01})],
        "sequence": [("frames", {"axis": 0}), ("pair", {"mean": [1, 2], "std": [0.5, 4]})],
        "continuous": [("x", {"axis": 0})],
        "discrete": [("frames", {"axis": [0, 1]}), ("pair", {"mean": 1.5, "std": 2})],
    },
    "clip": {
        "example": [("g", {"min": 105, "max": 310}), ("k", {"min": 0})],
        "sequence": [("frames", {"min": -150, "max": 10000}), ("words", {"max": 200})],
        "continuous": [("x", {"min": -1010, "max": 15}), ("y", {"min": 1005})],
        "discrete": [("frames", {"min": -10150, "max": 205}), ("words", {"min": 10101}), ("rid", {"max": 102})],
    },
}


@pytest.mark.parametrize("loader", ["example", "sequence", "continuous", "discrete"])
@pytest.mark.parametrize("step", list(PIPELINES))
def test_step_on_every_loader_equals_numpy_per_example(datasets, step, loader):
    items = PIPELINES[step][loader]
    batches = collect(batchloaders.build_input_fn(pipeline_config(datasets, loader, step, items))())
    examples = sum(len(b[f"{items[0][0]}_raw"]) for b in batches)
    if loader == "example":
        assert examples == EXAMPLE_RECORDS
    elif loader == "sequence":
        assert examples == sum(len(records) for records in FILES)
    else:
        assert examples >= 5  # windows
    seen_lengths = set()
    for batch in batches:
        for tensor, args in items:
            raw = batch[f"{tensor}_raw"]
            if tensor in VARYING[loader]:
                parts = [row[:n] for row, n in zip(raw, batch[f"n_{tensor}_raw"])]
                seen_lengths.update(len(p) for p in parts)
                want = [reference(step, args, p) for p in parts]
                np.testing.assert_array_equal(batch[f"n_{tensor}"], [len(w) for w in want])
                want = padded(want, PAD)
            else:
                want = np.stack([reference(step, args, row) for row in raw])
            got = batch[tensor]
            assert got.dtype == want.dtype and got.shape == want.shape, (tensor, got.dtype, got.shape, want.shape)
            if step == "normalize":
                np.testing.assert_allclose(got, want, rtol=2e-6, atol=2e-6)
            else:
                np.testing.assert_array_equal(got, want)
    if VARYING[loader] & {t for t, _ in items}:
        assert len(seen_lengths) > 1  # examples of different lengths shared batches


# Values at the very edge of what the new dtype holds pass through exactly (the check must not be off by one).
CAST_AT_THE_EDGE = [
    ("int64", [[2**31 - 1, -2**31]], "int32", [[2**31 - 1, -2**31]]),
    ("int64", [[0, 255]], "uint8", [[0, 255]]),
    ("float32", [[65504.0, -65504.0]], "float16", [[65504.0, -65504.0]]),
    ("int64", [[65504, -65504]], "float16", [[65504.0, -65504.0]]),
    ("uint64", [[2**63 - 1, 0]], "int64", [[2**63 - 1, 0]]),
    ("float64", [[-2.0**63, 1.0]], "int64", [[-2**63, 1]]),
]


@pytest.mark.parametrize("dtype, values, to, want", CAST_AT_THE_EDGE)
def test_cast_passes_values_at_the_edge_of_the_dtype(dtype, values, to, want):
    out, _, info = apply("cast", {"dtype": to}, dtype, [2], values)
    check_rows(out, None, info, want, None)
