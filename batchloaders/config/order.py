"""The order secondary features and processing steps run in, shared by the compiler and ``describe``.

Secondary features are built first, in config order, then the steps run in config order;
a feature whose type measures a tensor (``length``) is built after that tensor's steps:
just before the first step on the feature itself, or after the last step.

With ``chunking``, the examples are cut into chunks after all of that; the features that
describe a chunk are built on the chunks instead (:func:`after_chunking`): the chunk metadata
types (``chunk_index``, ``chunk_count``, ``source_key``) and a ``length`` of a chunked tensor
(which then measures the chunk, context included).
"""
from __future__ import annotations

from batchloaders.transform.registry import SECONDARY
from batchloaders.core.model import LoaderConfig, SecondaryFeature, Step
from batchloaders.config.stage_rules import of_spec


def on_chunks(feature: SecondaryFeature, chunked) -> bool:
    """Whether ``feature`` is built on the chunks, given the names of the chunked tensors."""
    kind = SECONDARY.get(feature.type)
    if kind is None:
        return False
    return kind.after_chunking or (kind.measures is not None and feature.args.get(kind.measures) in chunked)


def after_chunking(config: LoaderConfig) -> list[SecondaryFeature]:
    """The features built on the chunks, in config order (none without chunking)."""
    stage = of_spec(config.regroup)
    if stage is None or not stage.makes_examples:
        return []
    chunked = tuple(stage.chunk_widths(config.regroup))
    return [f for f in config.secondary_features if on_chunks(f, chunked)]


def run_order(config: LoaderConfig) -> list[SecondaryFeature | Step]:
    out: list[SecondaryFeature | Step] = []
    deferred: dict[str, SecondaryFeature] = {}
    later = {f.to_name for f in after_chunking(config)}
    for feature in config.secondary_features:
        kind = SECONDARY.get(feature.type)
        if feature.to_name in later:
            continue
        if kind is not None and kind.measures:
            deferred[feature.to_name] = feature
        else:
            out.append(feature)
    for step in config.processing_steps:
        if step.tensor in deferred:
            out.append(deferred.pop(step.tensor))
        out.append(step)
    out.extend(deferred.values())
    return out
