"""What the stages' padding measurements share (bench and preview ask a stage for its own, regroup/stage.py):
the loader's elements as a stage asks for them, and a batch's real elements counted from its lengths."""
from __future__ import annotations

import dataclasses

import tensorflow as tf

from batchloaders.loaders import base, registry as loaders
from batchloaders.read import sharding
from batchloaders.read.integrity import Reader
from batchloaders.regroup import stage as stages
from batchloaders.core.model import LoaderConfig
from batchloaders.transform.batching import Batch, finalize

AUTOTUNE = tf.data.AUTOTUNE


def stage_source(config: LoaderConfig, batch_size: int):
    """(elements, decode) of the loader as the config's regroup stage asks for them (its SourcePlan).

    Args:
        config: the checked config.
        batch_size: the batch size the stage makes batches of.

    Returns:
        The loader's elements and the function that decodes them (see loaders.base.source).
    """
    wanted = stages.of(config).source_plan(config, batch_size)
    source_config = dataclasses.replace(config, drop_remainder=wanted.drop_remainder,
                                        **({"epochs": 1} if wanted.one_epoch else {}))
    return base.source(loaders.of(config), source_config, sharding.plan(config, None), wanted.block, Reader(config))


def real_elements(batch: Batch, name: str) -> tf.Tensor:
    """Elements of ``name`` over the batch before padding (int64 scalar).

    Before ``finalize`` only the variable first axis holds padding (up to the
    batch maximum), so the real elements are the valid steps times the size
    of one step; a tensor without lengths is all real.
    """
    values = batch.values[name]
    if name not in batch.lengths:
        return tf.size(values, out_type=tf.int64)
    step = tf.reduce_prod(tf.shape(values, out_type=tf.int64)[2:])
    return tf.reduce_sum(tf.cast(batch.lengths[name], tf.int64)) * step


def padding(batch: Batch, config: LoaderConfig, names) -> dict:
    """{"real": ..., "padded": ...}: the elements of each tensor of ``names`` before and after padding."""
    real = {name: real_elements(batch, name) for name in names}
    tensors = finalize(batch, config, None)
    return {"real": real, "padded": {name: tf.size(tensors[name], out_type=tf.int64) for name in names}}
