"""A map stage whose function TensorFlow instantiates on its single-device function runtime.

A data file's blocks are turned into what a loader reads (parsed frames, numbered records) by a map
built when the file opens, so its function is instantiated again with every file. ``Dataset.map`` has
it instantiated on the multi-device runtime, which optimizes the function's graph each time (Grappler,
graph partitioning, the oneDNN layout pass): for a parse function that is most of what opening a file
costs. :func:`local_map` has it instantiated on the single-device runtime instead, as
:func:`~batchloaders.transform.local_scan.local_scan` does a scan's step (that module says how the
runtime is chosen, and what a function there must respect); where the function or its data break
those rules it is ``Dataset.map`` as usual.
"""
from __future__ import annotations

from typing import Callable

import tensorflow as tf

from batchloaders.transform.graphs import as_written
from batchloaders.transform.local_scan import marked_safely


def local_map(dataset: tf.data.Dataset, fn: Callable, num_parallel_calls: int | None = None,
              deterministic: bool | None = None) -> tf.data.Dataset:
    """``dataset.map(fn, ...)``, ``fn`` instantiated on the single-device runtime when it and its data allow.

    Args:
        dataset: the elements to map.
        fn: takes an element as one argument (a tuple is not unpacked, unlike ``Dataset.map``) and returns a
            nested structure of tensors; traced without AutoGraph, once (twice where it is left to
            ``Dataset.map`` after tracing: an int32 result or captured tensor).
        num_parallel_calls: as ``Dataset.map``'s (``tf.data.AUTOTUNE`` too); None: one call at a time.
        deterministic: as ``Dataset.map``'s, for parallel calls (None: the dataset's options decide).

    Returns:
        The mapped dataset: the same elements ``Dataset.map`` gives. Elements or results with anything but
        dense tensors, or an int32 among them or among what ``fn`` captures, are left to ``Dataset.map``.
    """
    def plain():
        if num_parallel_calls is None:
            return dataset.map(as_written(fn))
        return dataset.map(as_written(fn), num_parallel_calls=num_parallel_calls, deterministic=deterministic)

    in_spec = dataset.element_spec
    if not marked_safely(in_spec):
        return plain()
    out_specs = []

    # (_tf_data_function: as Dataset.map marks its function, so that Grappler leaves it out when it optimizes
    # the function the map is built in.)
    @tf.function(autograph=False, experimental_attributes={"experimental_ints_on_device": True,
                                                           "_tf_data_function": True})
    def flat(*components):
        out = fn(tf.nest.pack_sequence_as(in_spec, list(components)))
        dense = all(isinstance(t, tf.Tensor) for t in tf.nest.flatten(out))
        out_specs.append(tf.nest.map_structure(lambda t: tf.TensorSpec(t.shape, t.dtype), out) if dense else None)
        return tf.nest.flatten(out, expand_composites=True)

    concrete = flat.get_concrete_function(*tf.nest.flatten(in_spec))
    out_spec = out_specs[-1]
    if (out_spec is None or not marked_safely(out_spec)
            or any(t.dtype == tf.int32 for t in concrete.captured_inputs)):
        return plain()
    components = tf.nest.flatten(out_spec)
    common = dict(input_dataset=tf.data.experimental.to_variant(dataset), other_arguments=concrete.captured_inputs,
                  f=concrete, output_types=[s.dtype for s in components],
                  output_shapes=[s.shape for s in components], preserve_cardinality=True)
    if num_parallel_calls is None:
        variant = tf.raw_ops.MapDataset(**common)
    else:
        variant = tf.raw_ops.ParallelMapDatasetV2(
            num_parallel_calls=tf.constant(num_parallel_calls, tf.int64),
            deterministic={None: "default", True: "true", False: "false"}[deterministic], **common)
    return tf.data.experimental.from_variant(variant, out_spec)
