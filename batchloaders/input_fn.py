"""``build_input_fn``: config -> checked LoaderConfig -> an ``InputFn`` returning a tf.data.Dataset.

The compile template: the loader reads blocks of examples (loaders/), the config's one regroup stage
makes them into the model's batches (regroup/stage.py), and the finished pipeline gets its cardinality,
prefetch and options here. Everything one ``input_fn()`` call decides (seed, batch size, shard) is worked
out once, in :class:`CallPlan`, and handed down.
"""
from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Mapping

import tensorflow as tf

from batchloaders.config.config import load_config
from batchloaders.core.limits import MAX_BATCH_SIZE
from batchloaders.core.model import LoaderConfig
from batchloaders.errors import ConfigError, Problem
from batchloaders.loaders import base, registry as loaders, sources as example_sources
from batchloaders.read import determinism, global_order, sharding, sources
from batchloaders.read.integrity import Reader
from batchloaders.read.sharding import Shard
from batchloaders.regroup import stage as stages
from batchloaders.regroup.chunking import ChunkReport
from batchloaders.regroup.segmenting import SegmentReport
from batchloaders.runtime import keras_align, reuse
from batchloaders.runtime.located import LocatedDataset, Locator, locate_model_errors, register
from batchloaders.runtime.resume import identity


def _packer(kind: str, names: list[str]):
    if kind == "single":
        return lambda tensors: tensors[names[0]]
    if kind == "list":
        return lambda tensors: tuple(tensors[n] for n in names)  # tf.data would stack a list
    return lambda tensors: tensors


def _same(tensors):
    return tensors


def build_input_fn(config: str | os.PathLike | Mapping | LoaderConfig, *, model=None) -> "InputFn":
    """Check ``config`` now and return ``input_fn`` building its dataset.

    >>> input_fn = build_input_fn("configs/chars_independent.yaml")
    >>> model.fit(input_fn(), epochs=3, shuffle=False)  # the loader shuffles; Keras would warn

    ``model``: a Keras model whose input and output names replace the config's
    ``model`` block; batches are then packed the way the model takes them (dicts
    for dict inputs/outputs, tuples for lists, a bare tensor for a single one).
    The model is compared with the config first (names or positions, input
    shapes and dtype kinds: see keras_align.py); a mismatch is a ConfigError.
    That model's own ``fit``, ``evaluate`` and ``predict`` then raise data errors
    as located DataErrors (runtime/located.py), as ``data_errors()`` would.
    With segmenting, a functional or Sequential model gets the segment counters
    it has an Input for and no other; a subclassed model, or no model, all.
    All config problems raise ConfigError / ManifestError here, before any
    TensorFlow graph is built.
    """
    description = keras_align.describe_model(model) if model is not None else None
    if description is None:
        return InputFn(load_config(config) if not isinstance(config, LoaderConfig) else config)
    if isinstance(config, LoaderConfig):  # checked already: its names are compared with the model's
        found = keras_align.problems(description, config)
        if found:
            raise ConfigError(found)
        loader_config = config
    else:
        loader_config = keras_align.load_for_model(config, description)  # checked against the model too
    description = keras_align.with_outputs(model, description, loader_config)  # a subclassed model's outputs
    # Match the model's own structure so that model.fit(input_fn()) just works.
    (in_kind, inputs), (out_kind, targets) = keras_align.packing(description, loader_config)
    input_fn = InputFn(loader_config, pack_inputs=_packer(in_kind, inputs), pack_targets=_packer(out_kind, targets),
                       counters=keras_align.carried_counters(description, loader_config))
    locate_model_errors(model)  # the model's fit runs the pipeline inside a tf.function, out of our iterator's reach
    return input_fn


@dataclasses.dataclass(frozen=True)
class CallPlan:
    """What one ``input_fn()`` call works out once: its config (with the call's seed), the batch each input
    pipeline makes, its share of the data, the batches it skips, and what the source's counts make of them:
    where the pipeline starts and how many batches it gives."""

    config: LoaderConfig
    batch_size: int
    from_params: bool
    input_context: Any
    shard: Shard
    shards: tuple[Shard, ...]  # each mixture source's (sharding.plan_sources), none without sources
    skip_batches: int
    params: Mapping[str, Any] | None = None  # as given (Estimator-style ones moved here from input_context)
    start_position: int | None = None  # shuffle_scope global: the position of the run's order to start at
    start: tuple[int, int] | None = None  # (epoch, examples of it consumed) the pipeline starts at; None: the run's
    # beginning, or a start no count fixes (its batches are made and dropped)
    batches: int | None = None  # the pipeline's batches from its start when the manifests' counts fix them


class InputFn:
    """``input_fn(input_context=None, *, params=None, mode=None, config=None, skip_batches=0)`` -> the dataset of
    (features, targets) batches. Built once per config by :func:`build_input_fn`: the files' sizes and counts
    are read then; each call builds its pipeline, or gets the one an earlier call with the same arguments,
    files and graph built (runtime/reuse.py).

    ``config``: the checked LoaderConfig. ``skipped()``, ``chunk_report()``, ``segment_report()``: what the
    pipelines built so far have skipped, chunked and segmented.

    Args:
        config: the checked config.
        pack_inputs: turns the dict of a batch's model inputs into what the model takes (a dict by default).
        pack_targets: likewise for the targets.
        counters: the segment counters the features carry besides the model's inputs; None: all of them.
    """

    def __init__(self, config: LoaderConfig, *, pack_inputs=_same, pack_targets=_same, counters=None):
        self.config = config
        self._pack = (pack_inputs, pack_targets)
        self.loader = loaders.of(config)
        self.stage = stages.of(config)
        # The features' segment counters: all of them without a model (keras_align.carried_counters).
        self._counters = self.stage.carried(config) if counters is None else counters
        sources.check_remote_files(config)
        self._locator = Locator(config)
        register(self._locator)
        self._reader = Reader(config)  # file sizes and counts are read once, here
        # A mixture reads every source's files on their own (loaders/mixture.py).
        self._mixed = [Reader(config.of_source(s)) for s in config.sources]
        self._locators = [self._locator]  # one per source: an error of any of them is located
        for spec in config.sources[1:]:
            sources.check_remote_files(config.of_source(spec))
            self._locators.append(Locator(config.of_source(spec)))
            register(self._locators[-1])
        self._local = config.service is None  # under the service, counters would count on the workers
        # Plain, mixed or in a global order: chosen once, asked for blocks, cardinality and start alike.
        self._source = example_sources.pick(config, self.loader, [self._reader, *self._mixed], self._local)
        self._report = self.stage.counter(config) if self._local else None
        self._kept = reuse.Kept()  # a call building what an earlier one built gets its dataset (reuse.py)

    def __call__(self, input_context=None, *, params: Mapping[str, Any] | None = None, mode=None,
                 config=None, skip_batches: int = 0, start_position: int | None = None) -> tf.data.Dataset:
        """The dataset of (features, targets) batches; ``mode`` and ``config`` are accepted and unused.

        ``skip_batches``: leave out the first ``skip_batches`` batches (ResumableIterator's replay). Where
        the manifest's counts fix an epoch's examples (see accounting.records_per_epoch), the epochs before
        are not read at all and the examples consumed of the epoch it starts in are skipped before
        batching; elsewhere the batches are made and dropped. A skip past the run's end gives nothing
        (unread where the counts fix the run's batches).

        ``start_position`` (``shuffle_scope: global`` only): start at this position of the run's order (epoch
        ``position // n``, ``n`` the dataset's records), read at once: what ResumableIterator restores, also into
        another number of input pipelines (global_order.py). Instead of ``skip_batches``."""
        call = self._plan(input_context, params, skip_batches, start_position)
        for reader in [self._reader, *self._mixed]:
            reader.refresh()
        kept_as = reuse.key(call.config, call.params, call.input_context, (skip_batches, start_position),
                            (self._reader.table, *(r.table for r in self._mixed)))
        dataset = self._kept.get(kept_as)
        if dataset is None:
            dataset = self._build(call)
            self._kept.put(kept_as, dataset)
        return dataset

    def _build(self, call: CallPlan) -> tf.data.Dataset:
        """The call's pipeline, built: the source's batches (their start, count, prefetch and options), then
        the tf.data service when configured, in a dataset that locates its data errors."""
        dataset = self._source.pipeline(call, lambda blocks: self._batches(call, blocks))
        fetcher = None
        if call.config.service is not None:
            from batchloaders.runtime import service  # deferred: the tf.data service's client, for service configs

            # The finished pipeline (prefetch and options included) is what the workers run.
            dataset = service.distribute(dataset, call.config, call.params)
            fetcher = service.bounded_wait(call.config, call.params)
        # The seed too: a restore into another seed would go on with other draws (ResumableIterator builds
        # the pipeline from the seed it saved, so its own checkpoints match).
        fingerprint = identity(call.config, call.batch_size, call.input_context, with_seed=True)
        return LocatedDataset(dataset, tuple(self._locators), json.dumps(fingerprint, sort_keys=True), fetcher)

    def _plan(self, input_context, params, skip_batches: int, start_position: int | None = None) -> CallPlan:
        """The call's arguments checked, and what they decide: down to where its pipeline starts and the batches
        it gives (the source's start and cardinality, from the manifests' counts)."""
        if isinstance(input_context, Mapping):  # Estimator-style input_fn(params)
            params, input_context = input_context, None
        _check_arguments(input_context, params, skip_batches, self.config)
        _check_start_position(start_position, skip_batches, self.config)
        from_params = "batch_size" in (params or {})
        batch_size = (params or {}).get("batch_size", self.config.target_batch_size)
        # The run's seed: params' when given, else the config's (determinism.seed_of). Record sharding draws
        # every pipeline's windows from it (sharding.plan), so the whole call is built with it.
        seed = determinism.seed_of(self.config.seed, params)
        config = self.config if seed == self.config.seed else dataclasses.replace(self.config, seed=seed)
        # Under tf.distribute each input pipeline feeds its replicas a per-replica batch.
        batch_size = sharding.per_replica_batch_size(config, batch_size, input_context, from_params=from_params)
        shard = sharding.plan(config, input_context)  # handed down: nobody plans it again
        if input_context is not None:
            sharding.log_rule(config, shard)
            sharding.check_share(config, shard)
        shards = sharding.plan_sources(config, input_context)  # each mixture source's share, planned once too
        call = CallPlan(config, batch_size, from_params, input_context, shard, shards, skip_batches, params,
                        start_position)
        start = self._source.start(call, self.stage)
        return dataclasses.replace(call, start=start, batches=self._source.cardinality(call, self.stage, start))

    def run_length(self, input_context=None, *, params: Mapping[str, Any] | None = None) -> int | None:
        """The batches ``input_fn(input_context, params=params)`` gives from the run's start.

        Args:
            input_context: as for a call: the input pipeline whose batches are counted.
            params: as for a call (its batch_size and seed).

        Returns:
            The count when the manifest's counts fix it; None for an endless run, or one whose batches are
            counted only as they are made.

        Raises:
            ConfigError: for arguments a call cannot take.
        """
        call = self._plan(input_context, params, 0)
        return None if call.config.epochs is None else call.batches

    def run_positions(self) -> int | None:
        """The positions of a global shuffle's run: its epochs times an epoch's examples (records or windows).

        Returns:
            The count; None for an endless run, or without ``shuffle_scope: global``.
        """
        return self._source.run_positions(self.config)

    def _batches(self, call: CallPlan, blocks) -> tf.data.Dataset:
        """The model's batches: the source's ``blocks(config, block, finish)`` of examples, made into batches by
        the stage."""
        config = call.config
        zero_tails = base.zero_tails(self.loader, config)
        wanted = self.stage.source_plan(config, call.batch_size)
        changes = {} if wanted.drop_remainder == config.drop_remainder else {"drop_remainder": wanted.drop_remainder}
        if wanted.one_epoch:
            changes["epochs"] = 1
        source_config = dataclasses.replace(config, **changes) if changes else config
        finish = None
        if self.stage.example_wise and base.example_wise(config):
            finish = base.finisher(config, None, *self._pack, zero_tails=zero_tails)

        def source():
            return blocks(source_config, wanted.block, finish)
        build = stages.Build(self.stage.per_replica(config, sharding.replicas_in_sync(call.input_context)), call.batch_size, source,
                             *self._pack, zero_tails=zero_tails, counters=self._counters,
                             share=sharding.share_note(config, call.shard), report=self._report)
        return self.stage.apply(build)

    def skipped(self):
        """What ``on_corrupt: skip_file`` skipped so far.

        Returns:
            A SkipReport; None under ``on_corrupt: fail`` or with a ``service`` block (the workers skip and count).
        """
        return self._reader.skipped.report() if self._reader.skipped is not None and self._local else None

    def report(self):
        """What the regroup stage did so far.

        Returns:
            A ChunkReport or SegmentReport; None when the stage keeps no count, or under a ``service`` block.
        """
        return self.stage.report(self._report)

    def chunk_report(self):
        """What chunking did so far.

        Returns:
            A chunking.ChunkReport (sequences, chunks, dropped last pieces); None without chunking or with a
            ``service`` block.
        """
        return self.stage.report(self._report, ChunkReport)

    def segment_report(self):
        """What segmenting did so far.

        Returns:
            A segmenting.SegmentReport (sequences, segments, zero-length sequences skipped); None without
            segmenting or with a ``service`` block.
        """
        return self.stage.report(self._report, SegmentReport)


def _check_arguments(input_context, params, skip_batches, config: LoaderConfig) -> None:
    """ConfigError for arguments of an ``input_fn()`` call that it cannot take."""
    if input_context is not None and not isinstance(input_context, tf.distribute.InputContext):
        raise ConfigError(Problem("<input_fn>", "$", f"found a {type(input_context).__name__} as the first "
                                  "argument: expected a params dict or a tf.distribute.InputContext"))
    if params is not None and not isinstance(params, Mapping):
        raise ConfigError(Problem("<params>", "$", f"found a {type(params).__name__}: expected a dict"))
    batch_size = (params or {}).get("batch_size", config.target_batch_size)
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or not 1 <= batch_size <= MAX_BATCH_SIZE:
        raise ConfigError(Problem("<params>", "$.batch_size", f"found {batch_size!r}: expected an integer from 1 "
                                  f"to {MAX_BATCH_SIZE:,} (the bound target_batch_size has)"))
    if isinstance(skip_batches, bool) or not isinstance(skip_batches, int) or skip_batches < 0:
        raise ConfigError(Problem("<input_fn>", "$.skip_batches", f"found {skip_batches!r}: expected an integer "
                                  ">= 0"))
    if (params or {}).get("service_address") is not None and config.service is None:
        raise ConfigError(Problem("<params>", "$.service_address", (
            f"found {params['service_address']!r}, but {config.source} has no service block "
            "($.args.service): the pipeline would run here, not on the service; expected a service block, "
            "or no service_address")))


def _check_start_position(start_position, skip_batches: int, config: LoaderConfig) -> None:
    if start_position is None:
        return
    if isinstance(start_position, bool) or not isinstance(start_position, int) or start_position < 0:
        raise ConfigError(Problem("<input_fn>", "$.start_position", f"found {start_position!r}: expected an integer "
                                                                    ">= 0"))
    if not global_order.enabled(config):
        raise ConfigError(Problem("<input_fn>", "$.start_position", (
            f"found {start_position}, but {config.source} does not shuffle globally: a position of the run's order "
            "exists only with shuffle true and shuffle_scope global; expected skip_batches")))
    if skip_batches:
        raise ConfigError(Problem("<input_fn>", "$.start_position", (
            f"found {start_position} and skip_batches {skip_batches}: expected one of them")))
