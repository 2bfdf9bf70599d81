"""Datasets kept for ``input_fn()`` calls that would build the same pipeline again.

Building a pipeline traces every function of it in Python (docs/decisions/performance.md, "Start-up"),
and Keras, a strategy or a training loop may call ``input_fn()`` more than once. A tf.data.Dataset is
immutable and every iterator of it starts from the beginning, so a call whose arguments, files and
graph are those of an earlier call gets the earlier call's dataset: the same batches, without the
tracing. Not kept:

- a run without a seed whose pipeline draws (shuffles, random windows): each call draws a new seed,
  and an iterator of an earlier call's dataset would repeat that call's draws;
- a pipeline a tf.data service runs (its client is made per call, with the call's address);
- anything built in a graph or inside a tf.function, or with arguments that cannot be compared.

The files' sizes are part of the key: they are written into the pipeline when it is built
(read/integrity.py), so a file that changed size makes a call build anew.
"""
from __future__ import annotations

import json
from collections import OrderedDict
from typing import Any, Hashable, Mapping

import tensorflow as tf
from tensorflow.python.eager import context as _eager

from batchloaders.read import determinism

KEPT = 8  # datasets kept per input_fn, the least recently asked for dropped first


def key(config, params: Mapping[str, Any] | None, input_context, skip_batches: int, table) -> Hashable | None:
    """What decides a call's pipeline, or None when its dataset is not to be kept (see above)."""
    if config.service is not None or not tf.executing_eagerly() or tf.inside_function():
        return None
    if config.seed is None and determinism.draws(config):
        return None
    try:
        shown = json.dumps(params, sort_keys=True) if params is not None else None
    except (TypeError, ValueError):  # values JSON cannot show (arrays, objects): not compared
        return None
    where = None if input_context is None else (
        input_context.num_input_pipelines, input_context.input_pipeline_id, input_context.num_replicas_in_sync)
    return shown, where, skip_batches, table, _eager.context().device_name


class Kept:
    """The datasets of the last :data:`KEPT` calls that can be kept."""

    def __init__(self):
        self._datasets: OrderedDict = OrderedDict()

    def get(self, call_key):
        if call_key is None or call_key not in self._datasets:
            return None
        self._datasets.move_to_end(call_key)
        return self._datasets[call_key]

    def put(self, call_key, dataset) -> None:
        if call_key is None:
            return
        self._datasets[call_key] = dataset
        while len(self._datasets) > KEPT:
            self._datasets.popitem(last=False)
