"""describe's batch shapes line: the distinct shapes a config's batches take when they are finitely many (what a
jitted JAX step compiles for), checked against the shapes the pipeline really gives."""
from __future__ import annotations

import json

import pytest

from batchloaders import build_input_fn, load_config
from batchloaders.cli.describe import batch_shapes, batch_shapes_line, plan
from conftest import example, feature, loader_config, sequence_example, write_manifest, write_records


@pytest.fixture(scope="module")
def fixed(tmp_path_factory):
    """2 files x 12 records of a fixed-length x [2]."""
    d = tmp_path_factory.mktemp("fixed")
    for f in range(2):
        write_records(d / f"part-{f}.tfrecords", [example(id=("int", [r]), x=("float", [r, r])) for r in range(12)])
    path = write_manifest(d, [feature("id", "int64", [], "int"), feature("x", "float32", [2], "float")])
    manifest = json.loads(open(path).read())
    manifest["files"] = [{"name": f"part-{f}.tfrecords", "num_records": 12} for f in range(2)]  # so describe counts
    with open(path, "w") as out:
        json.dump(manifest, out)
    return d


@pytest.fixture(scope="module")
def varying(tmp_path_factory):
    """12 records whose x has 1 to 6 steps (lengths 1, 2, ..., 6, 1, 2, ...)."""
    d = tmp_path_factory.mktemp("varying")
    write_manifest(d, [feature("x", "float32", [2], "float", var_len=True),
                       feature("id", "int64", [], "int", var_len=False)], allow_var_len=True)
    write_records(d / "a.tfrecords", [sequence_example({"id": ("int", [r])}, {"x": ("float", [[r, r]] * (1 + r % 6))})
                                      for r in range(12)])
    return d


def seen(cfg) -> set:
    """The distinct shapes of the pipeline's batches, as batch_shapes gives them."""
    return {tuple((name, tuple(t.shape)) for name, t in {**features, **targets}.items())
            for features, targets in build_input_fn(cfg)()}


def fixed_config(fixed, **args):
    return loader_config(fixed, [("x", "x"), ("id", "id")], inputs=["x"], targets=["id"], **args)


def test_one_shape_when_the_remainder_is_dropped(fixed):
    cfg = fixed_config(fixed, target_batch_size=5, drop_remainder=True)
    config = load_config(cfg)
    assert batch_shapes_line(config) == "batch shapes: 1 (drop_remainder true): x [5, 2], id [5]"
    assert batch_shapes(config)[0] == [(("x", (5, 2)), ("id", (5,)))]
    assert set(batch_shapes(config)[0]) == seen(cfg)
    assert plan(config)["batch_shapes"] == {"count": 1, "why": "drop_remainder true",
                                           "shapes": [{"x": [5, 2], "id": [5]}]}


def test_the_last_smaller_batch_is_a_second_shape(fixed):
    cfg = fixed_config(fixed, target_batch_size=5, epochs=2)  # 48 examples: 9 batches of 5, one of 3
    config = load_config(cfg)
    assert batch_shapes_line(config) == ("batch shapes: 2 (48 examples in the run; the last batch holds the 3 "
                                         "examples left (drop_remainder false)): x [5, 2], id [5]; x [3, 2], id [3]")
    assert set(batch_shapes(config)[0]) == seen(cfg)


def varying_config(varying, padding, **args):
    return loader_config(varying, [("x", "x"), ("id", "id")], inputs=["x"], targets=["id"], target_batch_size=3,
                         padding=padding, drop_remainder=True, **args)


def test_padding_to_the_batch_maximum_varies_and_a_fixed_shape_does_not(varying):
    config = load_config(varying_config(varying, True))
    assert batch_shapes(config) == (None, "x axis 1 is padded to each batch's longest")
    assert batch_shapes_line(config).startswith("batch shapes: vary per batch (x axis 1 is padded to each batch's "
                                                "longest): a jitted step (JAX, XLA) compiles once per new shape")
    assert len(seen(varying_config(varying, True))) > 1  # it does vary
    cfg = varying_config(varying, [{"tensor": "x", "shape": [8, 2]}])
    assert batch_shapes(load_config(cfg))[0] == [(("x", (3, 8, 2)), ("id", (3,)))] and len(seen(cfg)) == 1


def test_bucketing_gives_one_shape_per_bucket_with_pad_to_boundary_and_a_fixed_last_length(varying):
    bucketing = {"by": "x", "boundaries": [3, 5], "batch_sizes": [2, 2, 1], "pad_to_boundary": ["x"]}
    cfg = varying_config(varying, [{"tensor": "x", "shape": [-1, 2]}], bucketing=bucketing)
    assert batch_shapes(load_config(cfg)) == (None, "x axis 1 is padded to each batch's longest in the last bucket")
    cfg = varying_config(varying, [{"tensor": "x", "shape": [6, 2]}], bucketing=bucketing)
    shapes, why = batch_shapes(load_config(cfg))
    assert why == "one per bucket (3 buckets)"
    assert shapes == [(("x", (2, 6, 2)), ("id", (2,))), (("x", (2, 6, 2)), ("id", (2,))),
                      (("x", (1, 6, 2)), ("id", (1,)))]
    assert seen(cfg) == set(shapes)
    cfg["args"]["drop_remainder"] = False
    assert batch_shapes(load_config(cfg)) == (None, "bucketing with drop_remainder false: each bucket's last batch "
                                                    "holds what is left")


def test_a_registered_batchers_shapes_are_unknown_and_ragged_ones_vary(varying, doubled_batcher):
    config = load_config(varying_config(varying, [{"tensor": "x", "batching": doubled_batcher}]))
    assert batch_shapes(config) == (None, "x is made by the registered batcher doubled: only running it tells "
                                          "its shape")
    config = load_config(varying_config(varying, [{"tensor": "x", "batching": "ragged"}]))
    assert batch_shapes(config) == (None, "x is batched ragged: its shape is each batch's")
