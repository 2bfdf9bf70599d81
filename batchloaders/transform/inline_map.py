"""A map stage whose function runs in the calling thread.

``Dataset.map`` runs its function with TensorFlow's default executor, which
schedules the function's nodes on the inter-op thread pool while the calling
thread waits. For a small function that hand-over costs far more than the
work, and running it in the calling thread costs next to nothing
(``python benchmarks/calls.py``; docs/decisions/performance.md). tf.data's map
op can run its function in the calling thread (its ``use_inter_op_parallelism`` attribute, which ``Dataset.map`` does not
expose); :func:`inline_map` builds that op through ``tf.raw_ops`` and
``tf.data.experimental.from_variant``, both public. The single-threaded
executor it selects cannot run control flow, so a function holding any
(``tf.cond``, ``tf.while_loop``, ``tf.case``, also in the functions it calls)
is not accepted: :func:`inline_map` returns None and the caller keeps its
ordinary stage. The function carries the attribute
``Dataset.map`` gives its own (``_tf_data_function``): without it, creating
the iterator is markedly slower (docs/decisions/performance.md). Built as each
file opens, it is instantiated on the single-device runtime where its data allow
(local_scan.py says why and when).
"""
from __future__ import annotations

from typing import Callable

import tensorflow as tf

from batchloaders.transform.local_scan import marked_safely

_CONTROL_FLOW = frozenset({"If", "StatelessIf", "While", "StatelessWhile", "Case", "StatelessCase",
                           "Switch", "_SwitchN", "Merge", "Enter", "Exit", "NextIteration", "LoopCond",
                           "RefSwitch", "RefMerge", "RefEnter", "RefExit", "RefNextIteration"})


def _has_control_flow(graph_def) -> bool:
    nodes = list(graph_def.node)
    for function in graph_def.library.function:
        nodes.extend(function.node_def)
    return any(node.op in _CONTROL_FLOW for node in nodes)


def inline_map(dataset: tf.data.Dataset, fn: Callable) -> tf.data.Dataset | None:
    """``dataset.map(fn)`` with ``fn`` run in the thread that asks for the element; None when ``fn`` holds
    control flow, or takes or gives anything but dense tensors (the caller then maps as usual). ``fn`` takes
    the element as one argument (a tuple is not unpacked, unlike ``Dataset.map``) and returns a nested
    structure of tensors; it is traced without AutoGraph, once (twice when an int32 result or captured tensor
    keeps it off the single-device runtime: local_scan.py).

    (No parallel form: tf.data's parallel map with this attribute still hands each call to the inter-op
    pool, to run calls side by side, and measured no cheaper: docs/decisions/performance.md.)"""
    in_spec = dataset.element_spec
    if not all(type(s) is tf.TensorSpec for s in tf.nest.flatten(in_spec)):
        return None
    out_specs = []

    def traced(attributes: dict):
        @tf.function(autograph=False, experimental_attributes={"_tf_data_function": True, **attributes})
        def flat(*components):
            out = fn(tf.nest.pack_sequence_as(in_spec, list(components)))
            dense = all(isinstance(t, tf.Tensor) for t in tf.nest.flatten(out))
            out_specs.append(tf.nest.map_structure(lambda t: tf.TensorSpec(t.shape, t.dtype), out) if dense else None)
            return tf.nest.flatten(out, expand_composites=True)
        return flat.get_concrete_function(*tf.nest.flatten(in_spec))

    # Built with each file: instantiated on the single-device runtime where local_scan.py's rules allow.
    local = marked_safely(in_spec)
    concrete = traced({"experimental_ints_on_device": True} if local else {})
    out_spec = out_specs[-1]
    if out_spec is None or _has_control_flow(concrete.graph.as_graph_def()):
        return None
    if local and (not marked_safely(out_spec) or any(t.dtype == tf.int32 for t in concrete.captured_inputs)):
        concrete = traced({})
    components = tf.nest.flatten(out_spec)
    variant = tf.raw_ops.MapDataset(
        input_dataset=tf.data.experimental.to_variant(dataset), other_arguments=concrete.captured_inputs,
        f=concrete, output_types=[s.dtype for s in components], output_shapes=[s.shape for s in components],
        use_inter_op_parallelism=False, preserve_cardinality=True)
    return tf.data.experimental.from_variant(variant, out_spec)
