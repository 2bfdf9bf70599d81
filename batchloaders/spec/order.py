"""The order secondary features and processing steps run in, shared by the compiler and ``describe``.

Secondary features are built first, in config order, then the steps run in config order;
a feature whose type measures a tensor (``length``) is built after that tensor's steps:
just before the first step on the feature itself, or after the last step.
"""
from __future__ import annotations

from batchloaders.registry import SECONDARY
from batchloaders.spec.model import LoaderConfig, SecondaryFeature, Step


def run_order(config: LoaderConfig) -> list[SecondaryFeature | Step]:
    out: list[SecondaryFeature | Step] = []
    deferred: dict[str, SecondaryFeature] = {}
    for feature in config.secondary_features:
        kind = SECONDARY.get(feature.type)
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
