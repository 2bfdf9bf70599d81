"""Functions handed to tf.data are traced as written, without AutoGraph.

None of them branches or loops on a tensor in Python (they say ``tf.cond`` and
``tf.where`` where they mean it), so converting them only costs time: about
30 ms of every ``input_fn()`` call for the independent loader's 12 functions.
"""
from __future__ import annotations

import tensorflow as tf

as_written = tf.autograph.experimental.do_not_convert
