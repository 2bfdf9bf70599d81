"""What every loader's elements go through before a regroup stage takes them.

A loader (loaders/registry.py: Loader) supplies ``batches(config, shard, batch_size, reader)``: a dataset
of ``{"values": ..., "lengths": ..., "extras": ...}`` dicts, each a block of examples (and ``source``,
which may defer work into one map stage). Here they are decoded, given their secondary features and
processing steps in order, and, for plain batching, padded and split into the model's inputs
and targets (:func:`finisher`).
"""
from __future__ import annotations

from batchloaders.transform import building, builtin_types
from batchloaders.transform.batching import Batch, finalize
from batchloaders.core.model import LoaderConfig
from batchloaders.config.order import run_order


def transform(batch: Batch, config: LoaderConfig) -> Batch:
    """Secondary features then processing steps, in config order, on a whole batch (transform.building.built).

    A secondary feature that measures a tensor (``length``) is built after that tensor's
    steps (see :mod:`batchloaders.config.order`).
    """
    builtin_types.load()
    for item in run_order(config):
        building.built(batch, config.source, item)
    return batch


def _same(tensors):
    return tensors


def zero_tails(loader, config: LoaderConfig) -> frozenset:
    """The tensors ``loader`` gives zero-padded to the batch's longest example (Loader.zero_tails)."""
    return loader.zero_tails(config)


def source(loader, config: LoaderConfig, shard, batch_size: int, reader, finish=None):
    """(dataset, decode): a loader's elements and the function turning one into a batch dict (Loader.source).

    ``finish`` (see :func:`finisher`) is offered to the loader: one that runs it on blocks of examples itself
    returns ``decode`` None (its elements are finished).
    """
    return loader.source(config, shard, batch_size, reader, finish=finish)


def example_wise(config: LoaderConfig) -> bool:
    """Whether the model tensors of a block of examples can be made before it is cut into batches (when its
    regroup stage cuts batches from examples as they come: Stage.example_wise).

    True without secondary features and processing steps: what is left (decoding, padding
    fixed-size tensors to fixed shapes, splitting inputs from targets) acts on each example alone.
    Padding to the batch's longest is then a no-op as long as the loader's tensors have fixed sizes.
    """
    # Ragged, sparse and user batchers make a whole batch at once: they are not cut from blocks.
    plain = all(spec.batching in ("padded", "dense") for spec in config.pad_specs.values())
    return not config.secondary_features and not config.processing_steps and plain


def finisher(config: LoaderConfig, static_batch: int | None, pack_inputs=_same, pack_targets=_same, decode=_same,
             zero_tails: frozenset = frozenset()):
    """The function turning one loader element into the model's (features, targets)."""
    def to_model(element):
        batch = decoded(element, config, decode, zero_tails)
        tensors = finalize(batch, config, static_batch)
        features = pack_inputs({n: tensors[n] for n in config.inputs})
        if not config.targets:
            return features
        return features, pack_targets({n: tensors[n] for n in config.targets})
    return to_model


def decoded(element, config: LoaderConfig, decode, zero_tails: frozenset) -> Batch:
    """A loader element decoded into a Batch, with the secondary features and steps run on it."""
    element = decode(element)
    return transform(Batch(dict(element["values"]), dict(element["lengths"]), dict(element.get("extras", {})),
                           set(zero_tails)), config)
