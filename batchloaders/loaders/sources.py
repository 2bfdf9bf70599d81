"""Where an ``InputFn``'s examples come from, chosen once when it is built (:func:`pick`).

* :class:`PlainSource`: the config's loader reading its own files;
* :class:`GlobalOrderSource`: the same under ``shuffle_scope: global``, where a position of the run's
  order says where a call starts and what is left of the run;
* :class:`MixtureSource`: several sources mixed into one stream (``args.sources``, loaders/mixture.py).

Each works out, as a call is planned, the place the call starts at (:meth:`PlainSource.start`) and the run's
batches when the manifests' counts fix them (:meth:`PlainSource.cardinality`); then gives the call its pipeline
of batches (:meth:`PlainSource.pipeline`): the regroup stage's batches of the source's blocks
(:meth:`PlainSource.blocks`), built per iterator from that start, and the batches before a start no count
fixes dropped. A call is described by input_fn.CallPlan: its config, batch size, shards, input context,
skip_batches and start_position, then its start and batches.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

import tensorflow as tf

from batchloaders.config.accounting import examples_in_run, records_per_epoch
from batchloaders.errors import ConfigError, Problem
from batchloaders.loaders import base, finish, mixture
from batchloaders.loaders.registry import Loader
from batchloaders.read import determinism, global_order
from batchloaders.core.limits import INT64_MAX
from batchloaders.core.model import LoaderConfig


@dataclasses.dataclass(frozen=True)
class PlainSource:
    """The config's loader reading its own files."""

    loader: Loader
    reader: Any  # the config's read.integrity.Reader: its files' sizes and counts, read once
    local: bool  # False under a tf.data service (a call's skipped batches are then made and dropped)

    def pipeline(self, call, make: Callable) -> tf.data.Dataset:
        """The call's batches, with their cardinality, the last prefetch and the pipeline's options.

        Built per iterator, every draw from the seed (params' or the config's), epoch and purpose
        (determinism.py): the same batches from every call and iterator for a seed, and after a restore. Under
        a tf.data service, flat: the service's sharding follows the pipeline back to its file names. Flat too
        when nothing is drawn: every epoch and iterator is the same without rebuilding.

        Args:
            call: the input_fn.CallPlan, its start and batches worked out (:meth:`start`, :meth:`cardinality`).
            make: ``make(blocks)`` -> the stage's batches of ``blocks(config, block, finish)`` (:meth:`blocks`
                for this call).

        Returns:
            The dataset of batches from the call's start; where no start is known, its first
            ``skip_batches`` batches dropped.

        Raises:
            ConfigError: for an endless run and a skip_batches past int64 (finish.skip).
        """
        flat = not self.local or not determinism.draws(call.config)
        dataset = determinism.per_iterator(lambda: make(lambda *asked: self.blocks(call, *asked)), call.config.seed,
                                           flat=flat, start=call.start)
        dataset = finish.finished(call.config, dataset, call.batches)
        return finish.skip(dataset, call.skip_batches) if call.skip_batches and call.start is None else dataset

    def blocks(self, call, config: LoaderConfig, block: int, finish=None):
        """(elements, decode) for the stage: the loader's blocks of ``block`` examples (Loader.source).

        Args:
            call: the input_fn.CallPlan.
            config: the config to read (the call's, as the stage's source_plan changes it).
            block: examples per block.
            finish: loaders/base.finisher's function, or None.

        Returns:
            (a tf.data.Dataset, the function decoding one element, or None when they come finished).
        """
        return base.source(self.loader, config, call.shard, block, self.reader, finish)

    def start(self, call, stage) -> tuple[int, int] | None:
        """(epoch, examples of it consumed) a call starts at after ``skip_batches`` full batches, when the
        manifest's counts fix an epoch's examples and ``stage`` cuts batches from examples as they come; else
        None (from the beginning, or the batches are made and dropped; always so under a tf.data service)."""
        if not call.skip_batches or not self.local or not stage.example_wise:
            return None  # (segments, buckets, rows or chunks fill a stage's batches, not examples in order)
        config = call.config
        per_epoch = records_per_epoch(config, call.shard.files, share=call.shard.records_of)
        consumed = call.skip_batches * call.batch_size
        if not per_epoch or (config.epochs is not None and consumed >= config.epochs * per_epoch):
            return None  # (no counts, or past the run's end: the batches are skipped, and give nothing there)
        return numbered_epoch(call, (consumed // per_epoch, consumed % per_epoch))

    def cardinality(self, call, stage, start) -> int | None:
        """The call's batches when the manifests' counts fix them; never under a tf.data service, where each
        worker runs the pipeline on its part of the data.

        Args:
            call: the input_fn.CallPlan.
            stage: the config's regroup stage.
            start: :meth:`start`'s, or None from the run's beginning.

        Returns:
            The count, or None.

        Raises:
            ConfigError: for a params batch_size larger than the run, with drop_remainder true.
        """
        if call.config.service is not None:
            return None
        return self._counted(call, stage, start)

    def _counted(self, call, stage, start) -> int | None:
        examples = examples_in_run(call.config, call.shard.files, share=call.shard.records_of)
        cardinality = stage.batches(call.config, examples, call.batch_size)
        if start is not None and cardinality is not None:
            cardinality -= call.skip_batches
        return _checked(call, cardinality)

    def run_positions(self, config: LoaderConfig) -> int | None:
        """The positions of a global shuffle's run; None here (no global order)."""
        return None


class GlobalOrderSource(PlainSource):
    """The loader's examples in a global shuffle's order: each epoch one permutation of its units (records or
    windows, Loader.global_units), a call starting at any position of the run (read/global_order.py)."""

    def units(self, config: LoaderConfig) -> int:
        """Examples of each epoch: the loader counts them from the indexed files' record counts."""
        return self.loader.global_units(config, self.reader.by_offset.counts)

    def start(self, call, stage) -> tuple[int, int] | None:
        """(epoch, position in it) a call starts at: ``start_position``, or after ``skip_batches`` full batches of
        every input pipeline (the positions they consumed are the first ones); None from the beginning, or when
        ``stage`` does not cut its batches from the positions in order (they are then made and dropped).

        Raises:
            ConfigError: for a start_position with a stage that fills its batches otherwise.
        """
        records = self.units(call.config)  # (the indexes' counts, read when the InputFn was built)
        if call.start_position is not None and not stage.example_wise:
            raise ConfigError(Problem("<input_fn>", "$.start_position", (
                f"found {call.start_position}, but the {stage.name} stage fills its batches from examples as they "
                "come, so a position of the order does not fix its batches; expected skip_batches")))
        position = call.start_position
        if position is None and call.skip_batches and stage.example_wise:
            position = call.skip_batches * call.batch_size * call.shard.pipelines
        if not position:
            return None
        if call.config.epochs is not None:
            position = min(position, call.config.epochs * records)  # past the run's end: at its end, nothing left
        return numbered_epoch(call, global_order.start_of(records, position))

    def _counted(self, call, stage, start) -> int | None:
        units = self.units(call.config)
        position = 0 if start is None else start[0] * units + start[1]
        examples = global_order.examples(units, call.config.epochs, position, call.shard.pipeline,
                                         call.shard.pipelines)
        return _checked(call, stage.batches(call.config, examples, call.batch_size))  # (counted from the start)

    def run_positions(self, config: LoaderConfig) -> int | None:
        """Its epochs times an epoch's units; None for an endless run."""
        return None if config.epochs is None else config.epochs * self.units(config)


@dataclasses.dataclass(frozen=True)
class MixtureSource(PlainSource):
    """Several sources mixed into one stream (loaders/mixture.py), each read with its own files' reader."""

    readers: tuple  # each source's read.integrity.Reader, in config.sources order (``reader`` is None)

    def blocks(self, call, config: LoaderConfig, block: int, finish=None):
        return mixture.source(self.loader, mixture.plan(config, call.shards), block, self.readers, finish)

    def _counted(self, call, stage, start) -> int | None:
        """The mixed run's batches when every source's count is known (mixture.batches)."""
        return mixture.batches(mixture.plan(call.config, call.shards), stage, call.batch_size)


def pick(config: LoaderConfig, loader: Loader, readers: list, local: bool) -> PlainSource:
    """The source of ``config``'s examples.

    Args:
        config: the checked config.
        loader: its registered Loader.
        readers: the config's read.integrity.Reader, then each mixture source's.
        local: False under a tf.data service (a call's skipped batches are then made and dropped).

    Returns:
        A MixtureSource for a config with sources, a GlobalOrderSource under ``shuffle_scope: global``, else
        a PlainSource.
    """
    if config.sources:
        return MixtureSource(loader, None, local, tuple(readers[1:]))
    if global_order.enabled(config):
        return GlobalOrderSource(loader, readers[0], local)
    return PlainSource(loader, readers[0], local)


def _checked(call, cardinality: int | None) -> int | None:
    if call.from_params and cardinality == 0 and call.config.drop_remainder:
        raise ConfigError(Problem("<params>", "$.batch_size", (
            f"found {call.batch_size:,} (per input pipeline), more examples than the run holds by the manifest's "
            "counts, with drop_remainder true: no batch would come out; expected a smaller batch_size, or "
            "drop_remainder false")))
    return cardinality


def numbered_epoch(call, start: tuple[int, int]) -> tuple[int, int]:
    """``start`` (epoch, position in it), or a ConfigError when an endless run would start in an epoch past
    2**63-1: each epoch's draws are seeded with its number as an int64."""
    if start[0] <= INT64_MAX:
        return start
    key, found = (("start_position", call.start_position) if call.start_position is not None
                  else ("skip_batches", call.skip_batches))
    raise ConfigError(Problem("<input_fn>", f"$.{key}", (
        f"found {found}: it starts this endless run in epoch {start[0]:,}, past the last one it numbers "
        f"({INT64_MAX:,}: each epoch's draws are seeded with its number as an int64); expected a start in an "
        "earlier epoch")))

