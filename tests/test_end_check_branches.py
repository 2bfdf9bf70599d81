"""The end-of-file check's conditionals stay calls of their branch functions (read/integrity.py: _kept_whole).

Lowered, as TensorFlow does by default inside a function, their branches (reading a damaged block again,
reporting the file's end) were instantiated with every file's scan step, a third of a pipeline's first
batch; kept whole, a branch is instantiated when it first runs. What the branches do is tested with damaged
files in test_corruption.py and test_damage_fuzz.py.
"""
from __future__ import annotations

import pytest

from batchloaders.read.integrity import _end_step, _EndCheck


@pytest.mark.parametrize("exact, compression, tf_compression", [(False, None, ""), (True, "gzip", "GZIP")],
                         ids=["plain files", "compressed files"])
@pytest.mark.parametrize("on_corrupt", ["fail", "skip_file"])
def test_the_steps_conditionals_are_not_lowered(exact, compression, tf_compression, on_corrupt):
    check = _EndCheck(exact, compression, tf_compression, 1 << 20, 64, on_corrupt, "m/__manifest__.json")
    graph = _end_step(check, None).get_concrete_function().graph
    conditionals = [op for op in graph.get_operations() if op.type in ("If", "StatelessIf")]
    assert len(conditionals) == 1
    # (TensorFlow lowers a conditional when the function is instantiated, unless this attribute says not to.)
    assert conditionals[0].get_attr("_lower_using_switch_merge") is False
