"""The end-of-file check's conditionals stay calls of their branch functions (read/integrity.py: _kept_whole).

Lowered, as TensorFlow does by default inside a function, their branches (reading a damaged block again,
reporting the file's end) were instantiated with every file's scan step, a third of a pipeline's first
batch; kept whole, a branch is instantiated when it first runs. What the branches do is tested with damaged
files in test_corruption.py and test_damage_fuzz.py.
"""
from __future__ import annotations

import pytest
import tensorflow as tf

from batchloaders.read.integrity import _end_step, _EndCheck, _kept_whole


def _step_graph(check: _EndCheck):
    """The graph of the end-of-file step as the scan's step traces it."""
    scalars = [tf.TensorSpec([], tf.int64)] * 2 + [tf.TensorSpec([], tf.bool)] * 2
    if check.exact:
        element = (tf.TensorSpec([None], tf.int64), (tf.TensorSpec([None], tf.int64),
                                                     (tf.TensorSpec([None], tf.string), tf.TensorSpec([None], tf.bool))))
    else:
        element = (tf.TensorSpec([], tf.int64), tf.TensorSpec([None], tf.string))
    step = _end_step(check, None)
    traced = tf.function(lambda state, element, filename, facts: step(state, element, filename, facts),
                         autograph=False)
    return traced.get_concrete_function(tuple(scalars), element, tf.TensorSpec([], tf.string),
                                        tf.TensorSpec([4], tf.int64)).graph


@pytest.mark.parametrize("exact, compression, tf_compression", [(False, None, ""), (True, "gzip", "GZIP")],
                         ids=["plain files", "compressed files"])
@pytest.mark.parametrize("on_corrupt", ["fail", "skip_file"])
def test_the_steps_conditionals_are_not_lowered(exact, compression, tf_compression, on_corrupt):
    check = _EndCheck(exact, compression, tf_compression, 1 << 20, 64, on_corrupt, "m/__manifest__.json")
    graph = _step_graph(check)
    conditionals = [op for op in graph.get_operations() if op.type in ("If", "StatelessIf")]
    assert len(conditionals) == 1
    # (TensorFlow lowers a conditional when the function is instantiated, unless this attribute says not to.)
    assert conditionals[0].get_attr("_lower_using_switch_merge") is False


def _branch_whose_kernel_refuses_to_be_built(x):
    # Graph building takes a one-element key; the kernel, built when its function is instantiated, wants two.
    hashed = tf.raw_ops.StringToHashBucketStrong(input=tf.strings.as_string(x), num_buckets=3, key=[1])
    return tf.cast(hashed, tf.int64)


@pytest.mark.parametrize("kept_whole", [True, False])
def test_tensorflow_instantiates_a_kept_whole_branch_only_when_it_runs(kept_whole):
    """What the attribute buys, run by TensorFlow itself: a branch that never runs is not instantiated with the
    scan's step when the conditional is kept whole; lowered (TensorFlow's default), it is, and here fails."""
    def step(state, x):
        out = tf.cond(x < 0, lambda: _branch_whose_kernel_refuses_to_be_built(x), lambda: tf.zeros([], tf.int64))
        if kept_whole:
            _kept_whole(out)
        return state, out

    scanned = tf.data.Dataset.range(3).scan(tf.constant(0, tf.int64), step)
    if kept_whole:
        assert [int(v) for v in scanned] == [0, 0, 0]
    else:
        with pytest.raises(tf.errors.InvalidArgumentError, match="Key must have 2 elements"):
            list(scanned)
