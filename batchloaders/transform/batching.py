"""The batch representation that every loader produces, and per-tensor padding.

A batch is a dict of dense tensors [B, ...] plus, for tensors whose first
example axis varies in length, a [B] vector of valid lengths. Secondary
features and processing steps run on whole batches; ``finalize`` then fills
the invalid tail with the padding value and pads to the configured shapes,
which is exactly what padding each example and batching would give.
"""
from __future__ import annotations

import dataclasses
import math

import tensorflow as tf

from batchloaders.transform import policies
from batchloaders.core.values import default_value
from batchloaders.core.model import LoaderConfig


@dataclasses.dataclass
class Batch:
    values: dict  # to_name -> [B, ...]
    lengths: dict  # to_name -> [B] int64, only for tensors with a variable first axis
    extras: dict = dataclasses.field(default_factory=dict)  # loader specific (e.g. record lengths per window)
    # Tensors already cut to the batch's longest example with the dtype's default value after each
    # example's length (what parsing feature lists gives): padding them with that value changes nothing.
    zero_tails: set = dataclasses.field(default_factory=set)

    @property
    def size(self) -> tf.Tensor:
        return tf.shape(next(iter(self.values.values())))[0]


def finalize(batch: Batch, config: LoaderConfig, static_batch: int | None) -> dict:
    """Pad (when configured) and give every output tensor its static shape."""
    out = {}
    for name in config.outputs:
        values, lengths, info = batch.values[name], batch.lengths.get(name), config.tensors[name]
        spec = config.pad_specs.get(name)
        policy = spec.batching if spec is not None else "padded"
        if not config.padding or policy == "dense":
            out[name] = _static(values, (static_batch,) + info.shape)
            continue
        if policy != "padded":  # ragged, sparse or a registered batcher (policies.py)
            out[name] = policies.batch(spec, _static(values, (static_batch,) + info.shape), lengths, config.source)
            continue
        pad_value = spec.value if spec is not None and spec.value is not None else default_value(info.dtype)
        pad_value = tf.constant(pad_value, values.dtype)
        if lengths is not None and not (name in batch.zero_tails and spec_is_default(spec, info.dtype)):
            # Trim to the longest valid example (or the width bucketing chose), then overwrite every invalid step.
            width = batch.extras.get("widths", {}).get(name)
            if width is None:
                width = tf.cast(tf.reduce_max(tf.concat([lengths, [0]], 0)), tf.int32)
            values = values[:, :width]
            mask = tf.sequence_mask(lengths, width)
            mask = tf.reshape(mask, tf.concat([tf.shape(mask), tf.ones([values.shape.rank - 2], tf.int32)], 0))
            values = tf.where(mask, values, pad_value)
        target = spec.shape if spec is not None and spec.shape is not None else (-1,) * info.rank
        paddings, static = [[0, 0]], [static_batch]
        checks = []
        for axis, want in enumerate(target, start=1):
            have = tf.shape(values)[axis]
            if want == -1:
                paddings.append([0, 0])
                static.append(info.shape[axis - 1])
                continue
            checks.append(tf.debugging.assert_less_equal(
                have, want, message=f"{config.source}: {spec.json_path}.shape: tensor {name!r} is longer than "
                                    f"the padding shape {list(target)} on axis {axis - 1}"))
            paddings.append([0, want - have])
            static.append(want)
        if checks:
            with tf.control_dependencies(checks):
                values = tf.pad(values, paddings, constant_values=pad_value)
            values.set_shape(static)  # the assertions above guarantee it
        out[name] = _static(values, static)
    return out


def spec_is_default(spec, dtype: str) -> bool:
    """Whether a tensor pads with its dtype's default value (0, "" or false), bit for bit: -0.0
    equals 0 but is not what zero-filled tails hold."""
    if spec is None or spec.value is None:
        return True
    value = spec.value
    if isinstance(value, float) and math.copysign(1.0, value) < 0:
        return False
    return value == default_value(dtype)


def _static(values: tf.Tensor, shape) -> tf.Tensor:
    """Give ``values`` its static shape; check at run time only what tracing cannot prove."""
    shape = tf.TensorShape(shape)
    if values.shape.is_compatible_with(shape) and values.shape.merge_with(shape) == values.shape:
        return values  # already at least as precise: nothing to add or check
    return tf.ensure_shape(values, shape)
