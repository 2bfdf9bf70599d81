"""``build_input_fn``: config -> checked LoaderConfig -> a function returning a tf.data.Dataset."""
from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Callable, Mapping

import tensorflow as tf

from batchloaders.read import block_sizes
from batchloaders.regroup import chunking, segmenting
from batchloaders.read import determinism
from batchloaders.runtime import keras_align
from batchloaders.read import sharding
from batchloaders.errors import ConfigError, Problem
from batchloaders.loaders import base
from batchloaders.config.accounting import expected_batches, records_per_epoch
from batchloaders.config.config import load_config
from batchloaders.config.limits import INT32_MAX, MAX_BATCH_SIZE
from batchloaders.config.model import LoaderConfig


def _loader(kind: str):
    if kind == "independent":
        from batchloaders.loaders import independent as module
    elif kind == "continuous_sequence":
        from batchloaders.loaders import continuous_sequence as module
    else:
        from batchloaders.loaders import discrete_sequence as module
    return module


def _packer(kind: str, names: list[str]):
    if kind == "single":
        return lambda tensors: tensors[names[0]]
    if kind == "list":
        return lambda tensors: tuple(tensors[n] for n in names)  # tf.data would stack a list
    return lambda tensors: tensors


def build_input_fn(config: str | os.PathLike | Mapping | LoaderConfig, *, model=None) -> Callable[..., tf.data.Dataset]:
    """Check ``config`` now and return ``input_fn`` building its dataset.

    >>> input_fn = build_input_fn("configs/chars_independent.yaml")
    >>> model.fit(input_fn(), epochs=3, shuffle=False)  # the loader shuffles; Keras would warn

    ``model``: a Keras model whose input and output names replace the config's
    ``model`` block; batches are then packed the way the model takes them (dicts
    for dict inputs/outputs, tuples for lists, a bare tensor for a single one).
    The model is compared with the config first (names or positions, input
    shapes and dtype kinds: see keras_align.py); a mismatch is a ConfigError.
    With segmenting, a functional or Sequential model gets the segment counters
    it has an Input for and no other; a subclassed model, or no model, all.
    All config problems raise ConfigError / ManifestError here, before any
    TensorFlow graph is built.
    """
    pack_inputs = pack_targets = _packer("dict", [])
    description = keras_align.describe_model(model) if model is not None else None
    if description is None:
        loader_config = load_config(config) if not isinstance(config, LoaderConfig) else config
    elif isinstance(config, LoaderConfig):  # checked already: its names are compared with the model's
        loader_config, found = config, keras_align.problems(description, config)
        if found:
            raise ConfigError(found)
    else:
        loader_config = keras_align.load_for_model(config, description)  # checked against the model too
    if description is not None:
        # Match the model's own structure so that model.fit(input_fn()) just works.
        (in_kind, inputs), (out_kind, targets) = keras_align.packing(description, loader_config)
        pack_inputs, pack_targets = _packer(in_kind, inputs), _packer(out_kind, targets)
    counters = keras_align.carried_counters(description, loader_config)  # the features' segment counters
    loader = _loader(loader_config.type)
    from batchloaders.read.sources import check_remote_files

    check_remote_files(loader_config)
    from batchloaders.read.integrity import Reader
    from batchloaders.runtime.located import LocatedDataset, Locator, register

    locator = Locator(loader_config)
    register(locator)

    reader = Reader(loader_config)  # file sizes and counts are read once, here
    local = loader_config.service is None  # under the service, counters would count on the workers (service.py)
    counter = chunking.ChunkCounter() if loader_config.chunking is not None and local else None
    segment_counter = segmenting.SegmentCounter() if loader_config.segmenting is not None and local else None

    def input_fn(input_context=None, *, params: Mapping[str, Any] | None = None, mode=None,
                 config=None, skip_batches: int = 0) -> tf.data.Dataset:
        """The dataset of (features, targets) batches; ``mode`` and ``config`` are accepted and unused.

        ``skip_batches``: leave out the first ``skip_batches`` batches (ResumableIterator's replay). Where
        the manifest's counts fix an epoch's examples (see accounting.records_per_epoch), the epochs before
        are not read at all and the examples consumed of the epoch it starts in are skipped before
        batching; elsewhere the batches are made and dropped."""
        if isinstance(input_context, Mapping):  # Estimator-style input_fn(params)
            params, input_context = input_context, None
        if input_context is not None and not isinstance(input_context, tf.distribute.InputContext):
            raise ConfigError(Problem("<input_fn>", "$", f"found a {type(input_context).__name__} as the first "
                                      "argument: expected a params dict or a tf.distribute.InputContext"))
        if params is not None and not isinstance(params, Mapping):
            raise ConfigError(Problem("<params>", "$", f"found a {type(params).__name__}: expected a dict"))
        from_params = "batch_size" in (params or {})
        batch_size = (params or {}).get("batch_size", loader_config.target_batch_size)
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or not 1 <= batch_size <= MAX_BATCH_SIZE:
            raise ConfigError(Problem("<params>", "$.batch_size", f"found {batch_size!r}: expected an integer from 1 "
                                      f"to {MAX_BATCH_SIZE:,} (the bound target_batch_size has)"))
        if isinstance(skip_batches, bool) or not isinstance(skip_batches, int) or skip_batches < 0:
            raise ConfigError(Problem("<input_fn>", "$.skip_batches", f"found {skip_batches!r}: expected an integer "
                                      ">= 0"))
        if (params or {}).get("service_address") is not None and loader_config.service is None:
            raise ConfigError(Problem("<params>", "$.service_address", (
                f"found {params['service_address']!r}, but {loader_config.source} has no service block "
                "($.args.service): the pipeline would run here, not on the service; expected a service block, "
                "or no service_address")))
        # The run's seed: params' when given, else the config's (determinism.seed_of). Record sharding draws
        # every pipeline's windows from it (sharding.plan), so the whole call is built with it.
        seed = determinism.seed_of(loader_config.seed, params)
        call_config = loader_config if seed == loader_config.seed else dataclasses.replace(loader_config, seed=seed)
        # Under tf.distribute each input pipeline feeds its replicas a per-replica batch.
        batch_size = sharding.per_replica_batch_size(call_config, batch_size, input_context, from_params=from_params)
        shard = sharding.plan(call_config, input_context)  # the loaders plan the same share
        if input_context is not None:
            sharding.log_rule(call_config, shard)
            sharding.check_share(call_config, shard)
        reader.refresh()
        zero_tails = base.zero_tails(loader, call_config)
        finish = (base.finisher(call_config, None, pack_inputs, pack_targets, zero_tails=zero_tails)
                  if base.example_wise(call_config) else None)
        # Bucketing makes the batches: the loader's are blocks of examples, none dropped, large enough
        # that the examples waiting in the buckets are copied once per many examples, not per batch.
        source_config, block = call_config, batch_size
        if call_config.bucketing is not None or call_config.packing is not None:
            source_config = dataclasses.replace(call_config, drop_remainder=False)
            block = block_sizes.regroup(call_config, batch_size)
        elif call_config.chunking is not None or call_config.segmenting is not None:
            # Chunks (segments) are made from blocks of one epoch of examples; compile_dataset (segmenting.py)
            # repeats the epochs.
            source_config = dataclasses.replace(call_config, drop_remainder=False, epochs=1)
            block = chunking.BLOCK if call_config.chunking is not None else segmenting.BLOCK

        def source():
            return base.source(loader, source_config, input_context, block, reader, finish)

        def build():
            return base.compile_dataset(sharding.per_replica_buckets(call_config, input_context), source, batch_size,
                                        pack_inputs, pack_targets, zero_tails=zero_tails, chunk_counter=counter,
                                        segment_counter=segment_counter, finished=False, counters=counters,
                                        share=sharding.share_note(call_config, shard))
        # Under a tf.data service each worker runs this pipeline on its part of the data: no fixed count.
        cardinality = (expected_batches(call_config, shard.files, batch_size, share=shard.records_of)
                       if call_config.service is None else None)
        # Built per iterator, every draw from the seed (params' or the config's), epoch and purpose
        # (determinism.py): the same batches from every call and iterator for a seed, and after a restore.
        # Under a tf.data service, flat: the service's sharding follows the pipeline back to its file names.
        # Flat too when nothing is drawn: every epoch and iterator is the same without rebuilding.
        flat = not local or not determinism.draws(call_config)
        start = _start(call_config, shard, batch_size, skip_batches) if skip_batches and local else None
        if start is not None and cardinality is not None:
            cardinality -= skip_batches
        if from_params and cardinality == 0 and call_config.drop_remainder:
            raise ConfigError(Problem("<params>", "$.batch_size", (
                f"found {batch_size:,} (per input pipeline), more examples than the run holds by the manifest's "
                "counts, with drop_remainder true: no batch would come out; expected a smaller batch_size, or "
                "drop_remainder false")))
        dataset = base.finish_pipeline(call_config, determinism.per_iterator(build, seed, flat=flat, start=start),
                                       cardinality)
        if skip_batches and start is None:
            dataset = _skip(dataset, skip_batches)
        fetcher = None
        if call_config.service is not None:
            from batchloaders.runtime import service

            # The finished pipeline (prefetch and options included) is what the workers run.
            dataset = service.distribute(dataset, call_config, params)
            fetcher = service.bounded_wait(call_config, params)
        from batchloaders.runtime.resume import identity

        # The seed too: a restore into another seed would go on with other draws (ResumableIterator builds
        # the pipeline from the seed it saved, so its own checkpoints match).
        return LocatedDataset(dataset, locator, json.dumps(identity(call_config, batch_size, input_context,
                                                                    with_seed=True), sort_keys=True), fetcher)

    input_fn.config = loader_config  # type: ignore[attr-defined]

    def skipped():
        """What ``on_corrupt: skip_file`` skipped so far (a SkipReport); None under ``on_corrupt: fail`` or
        with a ``service`` block (the workers skip and count)."""
        return reader.skipped.report() if reader.skipped is not None and local else None

    input_fn.skipped = skipped  # type: ignore[attr-defined]

    def chunk_report():
        """What chunking did so far (a chunking.ChunkReport: sequences, chunks, dropped last pieces); None
        without chunking or with a ``service`` block."""
        return counter.report() if counter is not None else None

    input_fn.chunk_report = chunk_report  # type: ignore[attr-defined]

    def segment_report():
        """What segmenting did so far (a segmenting.SegmentReport: sequences, segments, zero-length sequences
        skipped); None without segmenting or with a ``service`` block."""
        return segment_counter.report() if segment_counter is not None else None

    input_fn.segment_report = segment_report  # type: ignore[attr-defined]
    return input_fn


def _skip(dataset: tf.data.Dataset, count: int) -> tf.data.Dataset:
    """``dataset`` without its first ``count`` elements, for any count: tf.data's skip wraps counts of 2**31
    and more around (``skip(2**31)`` skips nothing), so larger counts are skipped in parts."""
    while count > INT32_MAX:
        dataset, count = dataset.skip(INT32_MAX), count - INT32_MAX
    return dataset.skip(count)


def _start(config, shard, batch_size: int, skip_batches: int) -> tuple[int, int] | None:
    """(epoch, examples of it consumed) after ``skip_batches`` full batches, when the manifest's counts
    fix an epoch's examples and batches hold whole examples; else None (the batches are skipped)."""
    if config.segmenting is not None:
        return None  # segments, not examples, fill its batches
    per_epoch = records_per_epoch(config, shard.files, share=shard.records_of)
    consumed = skip_batches * batch_size
    if not per_epoch or (config.epochs is not None and consumed >= config.epochs * per_epoch):
        return None
    return consumed // per_epoch, consumed % per_epoch
