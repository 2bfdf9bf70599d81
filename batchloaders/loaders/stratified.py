"""``mixing.batches: stratified``: every batch holds a fixed number of examples of each source.

How many of each source a batch holds is config/strata.py's schedule (the weights' shares of the batch, the
rounding carried from batch to batch), a table of one period of batches; with several input pipelines, this
pipeline's part of the schedule of a step's batch over all of them (strata.for_pipeline: summed over the
pipelines, each step's counts are that schedule's row). Each source is read as it would be
alone (loaders/mixture.py: its own files, shard, shuffle, epochs and draws), and its stream is re-cut into
the pieces the schedule gives it, batch after batch (``rebatch`` with the schedule's column, cycled): whole
blocks are copied into pieces, no example is handed over on its own. The pieces of one batch are then joined
in source order (the examples of a source together, in its own order). What the pieces hold (:func:`path`):

* FINISHED, where the plain stage offers to finish blocks (no secondary features or steps: base.example_wise)
  and every source's tensors have one shape per example: each source's blocks are parsed and made into the
  model's tensors where it reads them, as one source's are; the pieces are fixed-size tensors (the cheapest:
  docs/decisions/performance.md);
* RECORDS, sources that parse alike (mixture.parses_alike): the pieces are of serialized records, and each batch is
  parsed once, as one source's are (padded to the batch's longest example as they are);
* DECODED, otherwise: each source's blocks are decoded first; their tensors must then have one shape per example (a
  measured tensor's pieces would be padded to each block's longest, which pieces of other blocks do not share).

The run ends with the first source that cannot fill its share of a batch (``exhausted: stop``; under
``repeat`` every source but the one lasting longest at its weight repeats, so that one ends it). With
drop_remainder false the last batch then holds what that source had left, beside the other sources' shares.
"""
from __future__ import annotations

import dataclasses

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
    table = tf.constant(for_pipeline(tuple(s.weight for s in config.sources), block, shard.pipelines,
                                     shard.pipeline), tf.int64)
    # A source's last, short block is re-cut like the rest: only the joined batches may drop a remainder.
    mix = dataclasses.replace(mix, subs=tuple(dataclasses.replace(s, drop_remainder=False) for s in mix.subs))
    how = path(loader, config, finish)
    if how == FINISHED:
        streams, decode = mixture._finished_streams(loader, mix, block, readers, finish), None
    elif how == RECORDS:
        streams, decode = _records(loader, mix, block, readers)
    else:
        streams, decode = _decoded(loader, mix, block, readers), _same
    pieces = tuple(s.rebatch(table[:, i], drop_remainder=config.drop_remainder) for i, s in enumerate(streams))
    # Finished batches are the model's: whole ones get their batch axis, as one source's have it.
    static = block if decode is None and (config.drop_remainder or config.epochs is None) else None
    return tf.data.Dataset.zip(pieces).map(as_written(lambda *parts: _joined(parts, static))), decode


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


def _joined(pieces: tuple, static: int | None):
    """One batch: its sources' pieces one after another, in source order (its batch axis ``static`` when given)."""
    batch = tf.nest.map_structure(lambda *parts: tf.concat(parts, 0), *pieces)
    if static is None:
        return batch
    return tf.nest.map_structure(lambda t: tf.ensure_shape(t, [static] + t.shape[1:]), batch)


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
