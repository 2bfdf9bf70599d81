"""A scan whose step TensorFlow instantiates on its single-device function runtime.

Every data file is read through a scan of its own (read/integrity.py checks the file's end in it), so
the scan's step function is instantiated again each time a file opens. ``Dataset.scan`` has it
instantiated on the multi-device runtime, which optimizes the function's graph on each instantiation
(Grappler, graph partitioning, the oneDNN layout pass): on this project's 2-core machine that was most
of the time to a pipeline's first batch, and it is paid again with every file of an epoch
(docs/decisions/performance.md). tf.data instantiates a function on the single-device runtime instead,
without those passes, when the function carries the ``experimental_ints_on_device`` attribute
(TensorFlow's captured_function.cc); ``Dataset.scan`` cannot set it, so :func:`local_scan` builds the
scan op through ``tf.raw_ops`` and ``tf.data.experimental.from_variant``, both public, with the
attribute on its own step only.

What that runtime does differently, and what the step must respect:

* a conditional stays an ``If`` kernel, whose branch functions are instantiated (on the same runtime)
  when it first runs;
* a call of another ``tf.function`` inside the step is instantiated on the multi-device runtime at each
  file, which is what this avoids: trace what the step needs into the step itself;
* an int32 result of such a function becomes a ``_DeviceRetval`` node, which tf.data's own graph rewrites
  (when a user turns them back on, or a dataset is reduced inside a function) take for a pipeline's
  output and fail on ("Expected only one fetch node"): a step with an int32 state, output or captured
  input (``_DeviceArg``, untested there) is left to ``Dataset.scan``; so is data with int32 features.
"""
from __future__ import annotations

from typing import Callable

import tensorflow as tf

from batchloaders.transform.graphs import as_written


def marked_safely(specs) -> bool:
    """Dense tensors only, none int32 (see the module's text)."""
    return all(type(s) is tf.TensorSpec and s.dtype != tf.int32 for s in tf.nest.flatten(specs))


def _plain(dataset: tf.data.Dataset, initial_state, step: Callable) -> tf.data.Dataset:
    return dataset.scan(initial_state, as_written(step))


def local_scan(dataset: tf.data.Dataset, initial_state, step: Callable) -> tf.data.Dataset:
    """``dataset.scan(initial_state, step)``, the step instantiated on the single-device runtime; ``step``
    takes ``(state, element)`` (the element is not unpacked) and is traced once, without AutoGraph.

    The step is traced with the state's shapes as ``initial_state`` has them; a step giving it back in
    other ones (a leading axis that grows, unless it starts unknown as ``graphs.growing`` makes it inside
    a traced function) is left to ``Dataset.scan``, which traces it again with the shapes relaxed. So is
    a step with anything but dense tensors in, out or captured, or with an int32 among them.
    """
    in_spec = dataset.element_spec
    state_spec = tf.nest.map_structure(tf.type_spec_from_value, initial_state)
    if not marked_safely(in_spec) or not marked_safely(state_spec):
        return _plain(dataset, initial_state, step)
    traced = []
    states = len(tf.nest.flatten(state_spec))

    # (_tf_data_function: as Dataset.scan marks its step, so that Grappler leaves it out when it optimizes
    # the function around the scan op, at every iterator.)
    @tf.function(autograph=False, experimental_attributes={"experimental_ints_on_device": True,
                                                           "_tf_data_function": True})
    def flat(*components):
        state = tf.nest.pack_sequence_as(state_spec, list(components[:states]))
        new_state, out = step(state, tf.nest.pack_sequence_as(in_spec, list(components[states:])))
        kept = all(isinstance(t, tf.Tensor) and t.dtype == s.dtype and t.shape.is_subtype_of(s.shape)
                   for t, s in zip(tf.nest.flatten(new_state), tf.nest.flatten(state_spec)))
        dense = all(isinstance(t, tf.Tensor) for t in tf.nest.flatten(out))
        traced.append(tf.nest.map_structure(lambda t: tf.TensorSpec(t.shape, t.dtype), out)
                      if dense and kept else None)
        return tf.nest.flatten(new_state) + tf.nest.flatten(out, expand_composites=True)

    concrete = flat.get_concrete_function(*tf.nest.flatten(state_spec), *tf.nest.flatten(in_spec))
    out_spec = traced[-1]
    if (out_spec is None or not marked_safely(out_spec)
            or any(t.dtype == tf.int32 for t in concrete.captured_inputs)):
        return _plain(dataset, initial_state, step)
    components = tf.nest.flatten(out_spec)
    variant = tf.raw_ops.ScanDataset(
        input_dataset=tf.data.experimental.to_variant(dataset), initial_state=tf.nest.flatten(initial_state),
        other_arguments=concrete.captured_inputs, f=concrete, output_types=[s.dtype for s in components],
        output_shapes=[s.shape for s in components], preserve_cardinality=True, use_default_device=True)
    return tf.data.experimental.from_variant(variant, out_spec)
