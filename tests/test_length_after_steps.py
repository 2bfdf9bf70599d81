"""``length`` measures its tensor as the processing steps leave it.

Records: SequenceExamples, record r holds r + 2 steps of tokens = 10*r + j. A ``[:-1]`` slice
keeps r + 1 of them, a ``[::2]`` slice ceil((r + 2) / 2): the length feature must say so.
"""
from __future__ import annotations

import numpy as np
import pytest

from batchloaders import ConfigError, build_input_fn, load_config
from conftest import collect, feature, loader_config, sequence_example, write_manifest, write_records


@pytest.fixture
def tokens(tmp_path):
    d = tmp_path / "tokens"
    write_manifest(d, [feature("tokens", "int64", [], "int", var_len=True),
                       feature("rid", "int64", [], "int", var_len=False)], allow_var_len=True)
    write_records(d / "t.tfrecords", [sequence_example({"rid": ("int", [r])},
                                                       {"tokens": ("int", [[10 * r + j] for j in range(r + 2)])})
                                      for r in range(5)])
    return d


def config(data, steps, length_steps=()):
    return loader_config(data, [("tokens", "tokens"), ("rid", "rid")], inputs=["tokens", "n"], targets=["rid"],
                         target_batch_size=5, padding=True,
                         secondary_features=[{"to_name": "n", "type": "length", "args": {"tensor": "tokens"}}],
                         processing_steps=list(steps) + list(length_steps))


@pytest.mark.parametrize("spec, keep", [("[:-1]", lambda n: n - 1), ("[::2]", lambda n: (n + 1) // 2),
                                        ("[1:]", lambda n: n - 1), ("[:]", lambda n: n)])
def test_length_counts_the_steps_a_slice_leaves(tokens, spec, keep):
    (batch,) = collect(build_input_fn(config(tokens, [{"tensor": "tokens", "type": "slice",
                                                       "args": {"slice": spec}}]))())
    features, targets = batch
    for rid, n, row in zip(targets["rid"], features["n"], features["tokens"]):
        expected = eval(f"np.arange({rid + 2}){spec}") + 10 * rid  # numpy's own slicing of the example
        assert n == keep(rid + 2) == len(expected)
        np.testing.assert_array_equal(row[:n], expected)
        assert not row[n:].any()


def test_a_step_on_the_length_itself_sees_the_measured_value(tokens):
    steps = [{"tensor": "tokens", "type": "slice", "args": {"slice": "[:-1]"}}]
    (batch,) = collect(build_input_fn(config(tokens, steps, [{"tensor": "n", "type": "cast",
                                                             "args": {"dtype": "float32"}}]))())
    features, targets = batch
    assert features["n"].dtype == np.float32
    np.testing.assert_array_equal(features["n"], targets["rid"] + 1.0)


def test_a_step_on_the_tensor_after_a_step_on_its_length_is_an_error(tokens):
    steps = [{"tensor": "n", "type": "cast", "args": {"dtype": "float32"}},
             {"tensor": "tokens", "type": "slice", "args": {"slice": "[:-1]"}}]
    with pytest.raises(ConfigError) as caught:
        load_config(config(tokens, steps))
    (problem,) = caught.value.problems
    assert problem.path == "$.args.processing_steps[1].tensor"
    assert ("this step changes tensor 'tokens' after a step on 'n' ($.args.processing_steps[0]), which measures "
            "'tokens' once its steps have run") in problem.message
