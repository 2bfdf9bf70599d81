"""``mixing.batches: stratified``: every batch holds a fixed number of examples of each source.

How many of each source a batch holds is config/strata.py's schedule (the weights' shares of the batch, the
rounding carried from batch to batch), a table of one period of batches; with several input pipelines, this
pipeline's part of the schedule of a step's batch over all of them (strata.for_pipeline: summed over the
pipelines, each step's counts are that schedule's row). Each source is read as it would be
alone (loaders/mixture.py: its own files, shard, shuffle, epochs and draws), and its stream is re-cut into
what a group of batches takes of it (``rebatch``; block_sizes.stratified_group says how many batches): whole
blocks are copied into pieces, no example is handed over on its own. Each group's pieces are split into its
batches' shares and joined in one call, batch after batch and, within a batch, in source order (the examples
of a source together, in its own order); the joined examples are then cut into batches (``rebatch``). What
the pieces hold (:func:`path`):

* FINISHED, where the plain stage offers to finish blocks (no secondary features or steps: base.example_wise)
  and every source's tensors have one shape per example: each source's blocks are parsed and made into the
  model's tensors where it reads them, as one source's are; the pieces are fixed-size tensors (the cheapest:
  docs/decisions/performance.md);
* RECORDS, sources that parse alike (mixture.parses_alike): the pieces are of serialized records, and each batch is
  parsed once, as one source's are (padded to the batch's longest example as they are);
* DECODED, otherwise: each source's blocks are decoded first; their tensors must then have one shape per example (a
  measured tensor's pieces would be padded to each block's longest, which pieces of other blocks do not share).

The run ends with the first source that cannot fill its share of a batch (``exhausted: stop``; under
``repeat`` every source but the one lasting longest at its weight repeats, so that one ends it); a source
spent still fills the batches that take none of it. With drop_remainder false the last batch then holds what
that source had left, beside the other sources' shares (unless another source with a share in it has none).
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import tensorflow as tf

from batchloaders.config.strata import for_pipeline
from batchloaders.errors import ConfigError, Problem
from batchloaders.loaders import mixture
from batchloaders.read import block_sizes, determinism, origins
from batchloaders.transform.graphs import as_written

FINISHED, RECORDS, DECODED = "finished", "records", "decoded"


def source(loader, mix, block: int, readers, finish=None) -> tuple[tf.data.Dataset, object]:
    """The batches of a stratified mix, for the plain stage (mixture.source's interface).

    Args:
        loader: the config's registered Loader, which reads every source.
        mix: the call's mixture.MixturePlan.
        block: examples per batch (the plain stage's batch size).
        readers: each source's integrity.Reader.
        finish: base.finisher's function (examples made into the model's tensors on blocks of them), or None.

    Returns:
        (the batches, each its sources' pieces joined; the function decoding one, None when they come finished).

    Raises:
        ConfigError: for sources that do not parse alike and give a tensor whose shape varies per example.
    """
    config = mix.config
    shard = mix.shards[0]  # (every source's share is of the same input pipeline)
    rows = for_pipeline(tuple(s.weight for s in config.sources), block, shard.pipelines, shard.pipeline)
    # A source's last, short block is re-cut like the rest: only the joined batches may drop a remainder.
    mix = dataclasses.replace(mix, subs=tuple(dataclasses.replace(s, drop_remainder=False) for s in mix.subs))
    how = path(loader, config, finish)
    if how == FINISHED:
        streams, decode = mixture._finished_streams(loader, mix, block, readers, finish), None
    elif how == RECORDS:
        streams, decode = _records(loader, mix, block, readers)
    else:
        streams, decode = _decoded(loader, mix, block, readers), _same
    batch_bytes = block * max(_example_bytes(s, sub) for s, sub in zip(streams, mix.subs))
    groups = _grouped(streams, rows, block_sizes.stratified_group(len(rows), batch_bytes),
                      keep_short=not config.drop_remainder)
    # An endless run has no short batch to keep: its batches get their batch axis, as one source's have it.
    return groups.rebatch(block, drop_remainder=config.drop_remainder or config.epochs is None), decode


def path(loader, config, finish) -> str:
    """How a config's batches are made (see the module's text).

    Args:
        loader: the config's registered Loader, which reads every source.
        config: the mixed config.
        finish: the function the plain stage offers to finish blocks with, or None.

    Returns:
        FINISHED where ``finish`` is offered and every source's tensors have one shape per example, else
        RECORDS for sources that parse alike, else DECODED.
    """
    if finish is not None and all(_fixed(config.of_source(s)) for s in config.sources):
        return FINISHED
    return RECORDS if mixture.parses_alike(loader, config) else DECODED


def _fixed(sub) -> bool:
    """Whether every selected feature has one shape per example (no feature lists, no varying lengths)."""
    return not sub.dataset.manifest.allow_var_len and not any(f.var_len for f in sub.selected.values())


def _example_bytes(stream: tf.data.Dataset, sub) -> int:
    """An example's estimated size in a stream's elements: its tensors' where their shapes are known, a
    record's (block_sizes.record_bytes) for each string or tensor of varying shape."""
    total = 0
    for spec in tf.nest.flatten(stream.element_spec):
        shape = spec.shape[1:]
        if spec.dtype == tf.string or not shape.is_fully_defined():
            total += block_sizes.record_bytes(sub)
        else:
            total += shape.num_elements() * spec.dtype.size
    return max(total, 1)


def _grouped(streams: list, rows: tuple, group: int, keep_short: bool) -> tf.data.Dataset:
    """The examples of the joined batches, ``group`` batches' worth an element, in batch order.

    Each source's stream is cut into what a group of batches takes of it (``rebatch``, the group's column
    sums; then one empty piece, so that a source spent exactly at a group's end still gives the rows that
    take none of it), and each group's pieces are split into the batches' shares and joined in batch,
    then source order (:func:`_takes` says how much of each piece goes to each batch). The first batch a
    source cannot fill ends the run: kept short where ``keep_short``, the groups after it are empty.
    """
    table = np.asarray(rows, np.int64)
    period = len(table)
    # Group k takes the schedule's rows k * group, k * group + 1, ... (cycled): the groups repeat after `kinds`.
    kinds = period // math.gcd(period, group)
    table = table[(np.arange(kinds)[:, None] * group + np.arange(group)[None, :]) % period]  # [kinds, group, sources]
    sizes = table.sum(1)
    pieces = tuple(stream.rebatch(sizes[:, i], drop_remainder=False).concatenate(_nothing(stream))
                   for i, stream in enumerate(streams))
    counts = tf.constant(table)

    def step(state, parts):
        k, ended = state
        lengths = tf.stack([tf.shape(tf.nest.flatten(p)[0], out_type=tf.int64)[0] for p in parts])
        take, short = _takes(counts[k % len(table)], lengths, keep_short)
        take = tf.where(ended, tf.zeros_like(take), take)
        return (k + 1, ended | short), _joined(parts, take, lengths)
    return tf.data.Dataset.zip(pieces).scan((tf.constant(0, tf.int64), tf.constant(False)), as_written(step))


def _nothing(stream: tf.data.Dataset) -> tf.data.Dataset:
    """One element of no examples, of the stream's structure (dense tensors whose shapes are known past the
    first axis, as every path's are: :func:`_joined` concatenates it with the others' pieces)."""
    empty = tf.nest.map_structure(lambda s: tf.zeros([0] + [d or 0 for d in s.shape[1:].as_list()], s.dtype),
                                  stream.element_spec)
    return tf.data.Dataset.from_tensors(empty)


def _takes(counts, lengths, keep_short: bool):
    """(examples each batch of a group takes of each source's piece, whether a batch could not be filled).

    ``counts`` [batches, sources] are the schedule's, ``lengths`` [sources] the pieces'. Batches are whole
    up to the first that some piece cannot fill; that one, where ``keep_short``, takes what the pieces have
    left, unless a source that has a share in it has nothing left; the rest take nothing.
    """
    starts = tf.cumsum(counts, axis=0, exclusive=True)
    fits = tf.reduce_all(starts + counts <= lengths, axis=1)
    whole = tf.reduce_sum(tf.math.cumprod(tf.cast(fits, tf.int64)))
    batch = tf.range(tf.shape(counts, out_type=tf.int64)[0])[:, None]
    take = tf.where(batch < whole, counts, tf.zeros_like(counts))
    if keep_short:
        left = tf.maximum(lengths - starts, 0)
        can = tf.reduce_all((counts == 0) | (left > 0), axis=1, keepdims=True)
        take = tf.where((batch == whole) & can, tf.minimum(counts, left), take)
    return take, whole < tf.shape(counts, out_type=tf.int64)[0]


def _joined(pieces: tuple, take, lengths):
    """A group's batches one after another, each its sources' shares in source order (``take``, as
    :func:`_takes` gives it); what a piece holds beyond them is left out."""
    batches, sources = take.shape
    unused = lengths - tf.reduce_sum(take, axis=0)
    sizes = [tf.concat([take[:, i], unused[i:i + 1]], 0) for i in range(sources)]

    def leaf(*parts):
        cut = [tf.split(part, sizes[i], num=batches + 1) for i, part in enumerate(parts)]
        return tf.concat([cut[i][b] for b in range(batches) for i in range(sources)], 0)
    return tf.nest.map_structure(leaf, *pieces)


def _records(loader, mix, block: int, readers):
    """(each source's stream of blocks of numbered serialized records, the function parsing a joined batch);
    a record's number is its file's place among every source's files and its own place in the file, as
    mixture's records are numbered."""
    config = mix.config
    streams, files_before, owners = [], 0, []
    for spec, sub, shard, reader in zip(config.sources, mix.subs, mix.shards, readers):
        with determinism.for_source(spec.index):
            blocks, _ = loader.records(sub, shard, max(block, block_sizes.independent(sub)), reader)

        def numbered(b, offset=files_before):
            return {"serialized": b["serialized"],
                    "where": (b["file"] + offset) * 2**mixture.RECORD_BITS + b["record"]}
        streams.append(blocks.map(as_written(numbered)))
        files_before += len(spec.dataset.files)
        owners.extend([spec.index] * len(spec.dataset.files))
    return streams, mixture._record_parser(config, origins.data_files(config), tuple(owners))


def _decoded(loader, mix, block: int, readers) -> list:
    """Each source's blocks decoded, with its index and name; ConfigError when a tensor's shape varies."""
    config = mix.config
    streams, files_before = [], 0
    for spec, elements, decode in mixture._each_source(loader, mix, block, readers):
        decoded = elements.map(as_written(lambda e, decode=decode, i=spec.index, n=spec.name, f=files_before:
                                          mixture._labelled(decode(e), i, n, f)),
                               num_parallel_calls=config.reading.num_parallel_parses or tf.data.AUTOTUNE,
                               deterministic=True)
        files_before += len(spec.dataset.files)
        varying = sorted(name for name, value in decoded.element_spec["values"].items()
                         if not value.shape[1:].is_fully_defined())
        if varying:
            raise ConfigError(Problem(config.source, "$.args.mixing.batches", (
                f"found stratified, with sources whose records are not stored alike (another stored name, dtype, "
                f"shape or encoding) and tensor(s) {', '.join(map(repr, varying))} of varying shape: each "
                "source's examples would be padded apart; expected sources that store their features alike, "
                "tensors of one shape per example, or batches mixed or per_source")))
        streams.append(decoded)
    return streams


def _same(element):
    return element
