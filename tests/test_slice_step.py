"""The ``slice`` step: negative steps and bounded integers, checked against numpy on real pipelines.

Every value says where it came from: on a fixed tensor g[i, j] of record r is 1000*r + 10*i + j;
in a variable-length feature list step s of record r holds tokens = 100*r + s and
frames = [100*r + s, -(100*r + s)]. The expected batch is numpy's slicing of each example's
valid part, padded with PAD (a value no record holds), so equality also checks every
example's new length.
"""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from batchloaders import ConfigError, build_input_fn
from conftest import collect, example, feature, loader_config, sequence_example, write_manifest, write_records

BIG = 2**31 - 1  # the largest magnitude a slice integer may have
PAD = -7
GRID = np.arange(4)[:, None] * 10 + np.arange(3)[None, :]  # [4, 3]
PYTHON_OPS = {"PyFunc", "PyFuncStateless", "EagerPyFunc", "GeneratorDataset"}


def numpy_slice(spec: str):
    """'[5:1:-2, 0]' -> the same key as a Python tuple, built independently of the parser under test."""
    def part(text):
        text = text.strip()
        if ":" not in text:
            return int(text)
        return slice(*[int(t) if t.strip() else None for t in text.split(":")])

    return tuple(part(p) for p in spec.strip()[1:-1].split(","))


def python_ops(dataset):
    graph = tf.compat.v1.GraphDef.FromString(dataset._as_serialized_graph().numpy())
    nodes = list(graph.node) + [n for f in graph.library.function for n in f.node_def]
    return [n.op for n in nodes if n.op in PYTHON_OPS]


# ---------------------------------------------------------------- fixed axes

@pytest.fixture
def grid_data(tmp_path):
    d = tmp_path / "grid"
    write_manifest(d, [feature("g", "int64", [4, 3], "int")])
    write_records(d / "g.tfrecords", [example(g=("int", (GRID + 1000 * r).ravel().tolist())) for r in range(3)])
    return d


def grid_config(data, spec, **args):
    return loader_config(data, [("g", "g")], inputs=["g"], target_batch_size=2,
                         processing_steps=[{"tensor": "g", "type": "slice", "args": {"slice": spec}}], **args)


@pytest.mark.parametrize("spec", [
    "[::-1]",             # whole axis reversed
    "[5:1:-2]",           # start beyond the length clamps to the last step
    "[:, ::-1]",          # second axis reversed
    "[-1::-3]",           # negative start
    "[::-2, 1:]",         # negative step then a positive slice
    "[1:3, ::-1]",        # positive slice then a negative step
    "[-1:-5:-1, -1::-2]",  # negative start and stop on both axes
    "[10:-10:-1]",        # start and stop far beyond both ends
    "[0:3:-1]",           # a negative step that cannot move: empty
    "[2, ::-1]",          # an integer index removes an axis
    "[::-1, -1]",         # a negative step and a negative index
    f"[{BIG}:-{BIG}:-{BIG}, ::-{BIG}]",  # the extreme integers are accepted
])
def test_negative_steps_on_fixed_axes_equal_numpy(grid_data, spec):
    key = numpy_slice(spec)
    (b1, b2) = collect(build_input_fn(grid_config(grid_data, spec))())
    want = [GRID[key] + 1000 * r for r in range(3)]
    np.testing.assert_array_equal(b1["g"], np.stack(want[:2]))
    np.testing.assert_array_equal(b2["g"], np.stack(want[2:]))
    # Static shape inference agrees with numpy, including empty axes.
    assert build_input_fn(grid_config(grid_data, spec))().element_spec["g"].shape.as_list() == \
        [None] + list(want[0].shape)


# ---------------------------------------------------------------- a variable-length first axis

LENGTHS = [3, 0, 1, 6, 4, 2]  # batches of 3: [3, 0, 1] and [6, 4, 2]


@pytest.fixture
def var_len_data(tmp_path):
    d = tmp_path / "seq"
    write_manifest(d, [feature("tokens", "int64", [], "int", var_len=True),
                       feature("frames", "float32", [2], "float", var_len=True)], allow_var_len=True)
    write_records(d / "s.tfrecords", [
        sequence_example({}, {"tokens": ("int", [[100 * r + s] for s in range(n)]),
                              "frames": ("float", [[100 * r + s, -(100 * r + s)] for s in range(n)])})
        for r, n in enumerate(LENGTHS)])
    return d


def valid(name, r):
    """Record r's valid part of ``name``, as written."""
    steps = 100 * r + np.arange(LENGTHS[r])
    return steps if name == "tokens" else np.stack([steps, -steps], 1).reshape(-1, 2).astype(np.float32)


def padded(rows, tail_shape):
    width = max(len(r) for r in rows)
    out = np.full((len(rows), width) + tail_shape, PAD, rows[0].dtype)
    for i, r in enumerate(rows):
        out[i, :len(r)] = r
    return out


def var_len_config(data, name, spec):
    return loader_config(data, [(name, name)], inputs=[name], target_batch_size=3,
                         padding=[{"tensor": name, "value": PAD}],
                         processing_steps=[{"tensor": name, "type": "slice", "args": {"slice": spec}}])


@pytest.mark.parametrize("name, spec", [
    ("tokens", "[::-1]"),
    ("tokens", "[5:1:-2]"),        # start beyond some lengths, inside others
    ("tokens", "[-1::-3]"),
    ("tokens", "[::-2]"),
    ("tokens", "[3::-1]"),
    ("tokens", "[10::-1]"),        # start beyond every length
    ("tokens", "[:-10:-1]"),       # stop before the first step: down to step 0
    ("tokens", "[-10::-1]"),       # start before the first step: empty
    ("tokens", "[-2:0:-1]"),       # negative start, stop excludes step 0
    ("tokens", "[2:-2:-1]"),       # empty or not depending on the length
    ("tokens", "[1:10:-1]"),       # stop after start: empty everywhere
    ("tokens", "[99:-99:-2]"),
    ("tokens", f"[{BIG}:-{BIG}:-1]"),
    ("tokens", f"[::-{BIG}]"),     # one step per non-empty example
    ("tokens", "[1::2]"),          # positive steps still agree
    ("tokens", "[-3::2]"),
    ("frames", "[::-1, 0]"),       # a negative step then an index on a fixed axis
    ("frames", "[-1::-2, ::-1]"),  # negative steps on the variable and the fixed axis
    ("frames", "[1:, ::-1]"),      # a positive slice then a negative step on the fixed axis
])
def test_negative_steps_on_a_var_len_axis_equal_slicing_each_example(var_len_data, name, spec):
    key = numpy_slice(spec)
    ds = build_input_fn(var_len_config(var_len_data, name, spec))()
    assert ds.element_spec[name].shape[1] is None  # the sliced axis stays variable
    batches = collect(ds)
    assert len(batches) == 2
    for b, records in zip(batches, (range(0, 3), range(3, 6))):
        rows = [valid(name, r)[key] for r in records]
        want = padded(rows, rows[0].shape[1:])
        assert b[name].shape == want.shape
        np.testing.assert_array_equal(b[name], want)


@pytest.mark.parametrize("spec", ["[0, ::-1]", "[-1, ::-1]", "[-2, -1::-2]"])
def test_an_index_on_a_var_len_axis_with_negative_steps_after_it(tmp_path, spec):
    lengths = [3, 2, 5, 4]  # an index needs every example to be long enough
    write_manifest(tmp_path, [feature("frames", "float32", [2], "float", var_len=True)], allow_var_len=True)
    write_records(tmp_path / "s.tfrecords", [
        sequence_example({}, {"frames": ("float", [[100 * r + s, -(100 * r + s)] for s in range(n)])})
        for r, n in enumerate(lengths)])
    key = numpy_slice(spec)
    cfg = loader_config(tmp_path, [("frames", "frames")], inputs=["frames"], target_batch_size=4, padding=True,
                        processing_steps=[{"tensor": "frames", "type": "slice", "args": {"slice": spec}}])
    (b,) = collect(build_input_fn(cfg)())
    want = [np.stack([100 * r + np.arange(n), -(100 * r + np.arange(n))], 1).astype(np.float32)[key]
            for r, n in enumerate(lengths)]
    np.testing.assert_array_equal(b["frames"], np.stack(want))


def test_negative_step_pipeline_has_no_python_ops(var_len_data):
    ds = build_input_fn(var_len_config(var_len_data, "frames", "[-1::-2, ::-1]"))()
    assert python_ops(ds) == []


# ---------------------------------------------------------------- errors

PATH = "$.args.processing_steps[0].args.slice"


@pytest.mark.parametrize("spec, fragments", [
    ("[::0]", ["found step 0 in '[::0]'", "slice step cannot be zero"]),
    ("[1:2:0]", ["found step 0 in '[1:2:0]'", "slice step cannot be zero"]),
    ("[:, -0:1:-0]", ["found step 0", "slice step cannot be zero"]),
    ("[99999999999999999999:]", ["found the integer 99999999999999999999",
                                 "expected integers from -2147483647 to 2147483647"]),
    (f"[{BIG + 1}]", [f"found the integer {BIG + 1}", "expected integers from -2147483647 to 2147483647"]),
    (f"[-{BIG + 1}:]", [f"found the integer -{BIG + 1}", "expected integers"]),
    (f"[::-{2**63}]", [f"found the integer -{2**63}", "expected integers"]),
    ("[:, 1:" + "9" * 5000 + "]", ["found the integer 9999", "(5000 characters)",
                                   "expected integers from -2147483647 to 2147483647"]),
])
def test_bad_slices_are_config_errors_at_the_slice_path(grid_data, spec, fragments):
    with pytest.raises(ConfigError) as info:
        build_input_fn(grid_config(grid_data, spec))
    text = str(info.value)
    assert PATH in text
    for fragment in fragments:
        assert fragment in text
    assert len(text) < 1000  # a huge number is abbreviated, not echoed


def test_leading_zeros_are_not_counted_as_magnitude(grid_data):
    (b1, _) = collect(build_input_fn(grid_config(grid_data, "[000000000000000000003::-1]"))())
    np.testing.assert_array_equal(b1["g"], np.stack([GRID[3::-1] + 1000 * r for r in range(2)]))
