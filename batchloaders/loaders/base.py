"""The compile template every loader shares.

A loader supplies ``batches(config, input_context, batch_size, reader)``: a dataset of
``{"values": ..., "lengths": ..., "extras": ...}`` dicts, each one batch. The
template then builds secondary features, runs processing steps in order,
pads, splits model inputs from targets and prefetches.
"""
from __future__ import annotations

import tensorflow as tf

from batchloaders.regroup import bucketing, chunking, packing, segmenting
from batchloaders.transform import building, builtin_types
from batchloaders.read import determinism
from batchloaders.read import sources
from batchloaders.transform.batching import Batch, finalize
from batchloaders.transform.extend import check_batch, checked, named
from batchloaders.transform.graphs import as_written
from batchloaders.transform.registry import BUILTIN, SECONDARY, STEPS
from batchloaders.config.model import LoaderConfig, SecondaryFeature
from batchloaders.config.order import after_chunking, run_order

AUTOTUNE = tf.data.AUTOTUNE


def transform(batch: Batch, config: LoaderConfig) -> Batch:
    """Secondary features then processing steps, in config order, on a whole batch.

    A secondary feature that measures a tensor (``length``) is built after that tensor's
    steps (see :mod:`batchloaders.config.order`).
    """
    builtin_types.load()
    for item in run_order(config):
        if isinstance(item, SecondaryFeature):
            _secondary(batch, config, item, SECONDARY.get(item.type))
            continue
        kind = STEPS.get(item.type)
        what = named("step", item.type, kind)
        with checked(config.source, item.json_path, what, kind.scope == BUILTIN), building.item(config.source,
                                                                                             item.json_path):
            values, lengths = kind.build(item.args, batch.values[item.tensor], batch.lengths.get(item.tensor),
                                         item.input_info, item.output_info)
            check_batch(values, lengths, item.output_info, what)
        batch.values[item.tensor] = values
        batch.zero_tails.discard(item.tensor)
        if lengths is None:
            batch.lengths.pop(item.tensor, None)
        else:
            batch.lengths[item.tensor] = lengths
    return batch


def _secondary(batch: Batch, config: LoaderConfig, feature, kind) -> None:
    what = named("secondary feature", feature.type, kind)
    with checked(config.source, feature.json_path, what, kind.scope == BUILTIN):
        values, lengths = kind.build(feature.args, batch, feature.info)
        check_batch(values, lengths, feature.info, what)
    batch.zero_tails.discard(feature.to_name)
    batch.values[feature.to_name] = values
    if lengths is not None:
        batch.lengths[feature.to_name] = lengths


def _same(tensors):
    return tensors


def zero_tails(loader, config: LoaderConfig) -> frozenset:
    """The tensors ``loader`` gives zero-padded to the batch's longest example (none unless it says)."""
    return loader.zero_tails(config) if hasattr(loader, "zero_tails") else frozenset()


def source(loader, config: LoaderConfig, input_context, batch_size: int, reader, finish=None):
    """(dataset, decode): a loader's elements and the function turning one into a batch dict.

    A loader that can defer work into the compiler's single map stage (the
    independent loader defers parsing) defines ``source``; others give batches.
    ``finish`` (see :func:`finisher`) is offered to loaders whose ``source`` takes it: a loader
    that runs it on blocks of examples itself returns ``decode`` None (its elements are finished).
    """
    if hasattr(loader, "source"):
        return loader.source(config, input_context, batch_size, reader, finish=finish)
    return loader.batches(config, input_context, batch_size, reader), _same


def example_wise(config: LoaderConfig) -> bool:
    """Whether the model tensors of a block of examples can be made before it is cut into batches.

    True without secondary features and processing steps: what is left (decoding, padding
    fixed-size tensors to fixed shapes, splitting inputs from targets) acts on each example alone.
    Padding to the batch's longest is then a no-op as long as the loader's tensors have fixed sizes.
    """
    # Ragged, sparse and user batchers make a whole batch at once: they are not cut from blocks.
    plain = all(spec.batching in ("padded", "dense") for spec in config.pad_specs.values())
    return (not config.secondary_features and not config.processing_steps and plain
            and config.bucketing is None and config.packing is None  # they regroup transformed blocks
            and config.chunking is None and config.segmenting is None)


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


def blocks(config: LoaderConfig, decode, zero_tails: frozenset, flush: bool):
    """Loader element -> the model tensors of its block of examples, before padding (for bucketing and
    packing: the tensors packing fills rows with)."""
    names = config.packing.tensors if config.packing is not None else config.outputs
    where = "$.args.packing" if config.packing is not None else "$.args.bucketing"

    def run(element):
        batch = decoded(element, config, decode, zero_tails)
        values = {n: batch.values[n] for n in names}
        checks = bucketing.over_budget(config, batch.values, batch.lengths, batch.extras)
        if checks:  # an example over max_tokens stops the run, naming its file and record
            with tf.control_dependencies(checks):
                values = {n: tf.identity(v) for n, v in values.items()}
        lengths = {n: tf.cast(batch.lengths[n], tf.int64) for n in names if n in batch.lengths}
        # Regrouping cuts each example's steps by its length: a registered step or secondary feature whose
        # lengths run past its values would otherwise fail deep in TensorFlow, naming nothing.
        for n, l in lengths.items():
            longest, width = tf.reduce_max(tf.concat([l, [0]], 0)), tf.shape(values[n], out_type=tf.int64)[1]
            with tf.control_dependencies([tf.debugging.Assert(longest <= width, [tf.strings.format(
                    f"{config.source}: {where}: tensor {n!r} has an example of {{}} steps whose values hold "
                    f"{{}}: expected every length within its values (a processing step or secondary feature "
                    "made lengths longer than what it gave)", [longest, width])])]):
                values[n] = tf.identity(values[n])
        out = {"values": values, "lengths": lengths}
        return {**out, bucketing.FLUSH: tf.constant(False)} if flush else out
    return run


def _bucket_batches(config: LoaderConfig, pack_inputs, pack_targets, zero_tails: frozenset):
    """One bucket's batch -> the model's (features, targets).

    Regrouping keeps every row's tail as the block had it and pads with zeros, so the tensors the
    loader zero-fills and no secondary feature or step rewrites stay zero-filled."""
    touched = {f.to_name for f in config.secondary_features} | {s.tensor for s in config.processing_steps}
    still_zero = set(zero_tails) - touched

    def run(element):
        values, lengths, widths = bucketing.to_batch(element, config)
        tensors = finalize(Batch(values, lengths, {"widths": widths}, set(still_zero)), config, None)
        features = pack_inputs({n: tensors[n] for n in config.inputs})
        return features if not config.targets else (features, pack_targets({n: tensors[n] for n in config.targets}))
    return run


def _chunks(config: LoaderConfig, decode, zero_tails: frozenset):
    """Loader element (a block of examples, one epoch) -> its chunks (chunking.py), with their block's counts."""
    names = config.chunking.names + config.chunking.copied

    def run(element):
        batch = decoded(element, config, decode, zero_tails)
        return chunking.chunk_block({n: batch.values[n] for n in names}, batch.lengths, batch.extras, config)
    return run


def _chunk_batches(config: LoaderConfig, static_batch: int | None, pack_inputs, pack_targets):
    """A batch of chunks -> the model's (features, targets): the features built on chunks, then padding."""
    later = after_chunking(config)

    def run(element):
        # (Chunks are zero after their length but as wide as the widest possible chunk, not the batch's
        # widest, so they are no zero_tails: finalize trims them to the batch's longest.)
        batch = Batch(dict(element["values"]), dict(element["lengths"]), {"chunk": dict(element["extras"])})
        for feature in later:
            _secondary(batch, config, feature, SECONDARY.get(feature.type))
        tensors = finalize(batch, config, static_batch)
        features = pack_inputs({n: tensors[n] for n in config.inputs})
        return features if not config.targets else (features, pack_targets({n: tensors[n] for n in config.targets}))
    return run


def _segments(config: LoaderConfig, decode, zero_tails: frozenset):
    """Loader element (a block of examples, one epoch) -> its segments (segmenting.py)."""
    names = segmenting.names(config)

    def run(element):
        batch = decoded(element, config, decode, zero_tails)
        return segmenting.segment_block({n: batch.values[n] for n in names}, batch.lengths, batch.extras, config)
    return run


def _segment_batches(config: LoaderConfig, static_batch: int | None, pack_inputs, pack_targets,
                     carried: tuple[str, ...]):
    """A batch of segments -> the model's (features, targets); the ``carried`` counters (the features are then
    a dict: keras_align.carried_counters) join the features besides those the model names."""
    def run(element):
        values, counters = segmenting.finish(element, config)
        tensors = finalize(Batch({**values, **counters}, {}), config, static_batch)
        features = pack_inputs({n: tensors[n] for n in config.inputs})
        if carried:
            features = {**features, **{n: tf.ensure_shape(counters[n], [static_batch]) for n in carried}}
        return features if not config.targets else (features, pack_targets({n: tensors[n] for n in config.targets}))
    return run


def compile_dataset(config: LoaderConfig, source, batch_size: int,
                    pack_inputs=_same, pack_targets=_same, cardinality: int | None = None,
                    zero_tails: frozenset = frozenset(), chunk_counter=None, segment_counter=None,
                    finished: bool = True, counters: tuple[str, ...] = (), share: str = "") -> tf.data.Dataset:
    """The model's batches; ``source()``: the loader's (batches, decode) (see :func:`source`);
    ``cardinality``: the number of batches, when the manifest's counts fix it;
    ``zero_tails``: tensors the loader gives padded with zeros to the batch's longest (see Batch);
    ``decode`` None: ``batches`` are already the model's (the loader ran :func:`finisher` on blocks).
    With chunking, ``batches`` are blocks of one epoch of examples (the epochs are repeated here, after
    the chunk shuffle, so that epochs never mix: ``source()`` is called once per epoch, for its draws)
    and ``chunk_counter`` (a chunking.ChunkCounter) counts them.
    With segmenting, likewise (segmenting.py repeats the epochs), ``segment_counter`` counting the sequences;
    ``counters``: the segment counters the features carry besides the model's inputs (decided by
    keras_align.carried_counters: all of them without a model).
    ``share``: what the guards against an empty pass add when it is one input pipeline's share (sharding.share_note).
    ``finished`` False leaves out what :func:`finish_pipeline` adds (the caller adds it around a wrapper)."""
    static_batch = batch_size if (config.drop_remainder or config.epochs is None) else None
    per_epoch = config.chunking is not None or config.segmenting is not None
    ds, decode = (None, None) if per_epoch else source()
    if config.bucketing is not None:
        # Transform blocks, regroup their examples by bucket (bucketing.py), then pad each batch.
        flush = config.epochs is not None and not config.drop_remainder
        parallel = dict(num_parallel_calls=config.num_parallel_parses or AUTOTUNE,
                        deterministic=not config.sloppy_interleave)
        ds = ds.map(as_written(blocks(config, decode, zero_tails, flush)), **parallel)
        if flush:
            ds = ds.concatenate(tf.data.Dataset.from_tensors(bucketing.last_block(ds.element_spec)))
        ds = bucketing.regroup(ds, config, flush, then=_bucket_batches(config, pack_inputs, pack_targets, zero_tails))
        cardinality = None  # how many batches the buckets make is known only at the end
    elif config.packing is not None:
        # Transform blocks and pack each into rows (packing.py), then batch rows and finish them.
        parallel = dict(num_parallel_calls=config.num_parallel_parses or AUTOTUNE,
                        deterministic=not config.sloppy_interleave)
        transform_block = blocks(config, decode, zero_tails, False)

        def rows(element):
            block = transform_block(element)
            rows = packing.pack_block(block["values"], block["lengths"], config)
            # Rows are whole (every tensor [rows, length, ...]): what finishing does to a batch of them it
            # does row by row, so it is done once per block here, not in a call per batch.
            tensors = finalize(Batch(dict(rows), {}), config, None)
            features = pack_inputs({n: tensors[n] for n in config.inputs})
            return features if not config.targets else (features, pack_targets({n: tensors[n] for n in config.targets}))
        # An endless stream of rows has no remainder: dropping it only gives the batches their static size.
        ds = ds.map(as_written(rows), **parallel).rebatch(batch_size, drop_remainder=static_batch is not None)
        cardinality = None  # how many rows the examples fill is known only once packed
    elif config.chunking is not None:
        # Transform blocks and cut their examples into chunks (chunking.py); shuffle and batch the chunks.
        parallel = dict(num_parallel_calls=config.num_parallel_parses or AUTOTUNE,
                        deterministic=not config.sloppy_interleave)

        def epoch_of_chunks():
            elements, decode_ = source()
            ds = elements.map(as_written(_chunks(config, decode_, zero_tails)), **parallel)
            if chunk_counter is not None:
                ds = ds.map(as_written(chunk_counter.add))  # one thread: the counts add up race-free
            else:
                ds = ds.map(as_written(lambda element: {k: v for k, v in element.items() if k != "counts"}))
            if config.epochs is None:
                ds = chunking.guard_empty_pass(ds, config, share)
            if config.chunking.shuffle_buffer is not None:
                ds = ds.unbatch().shuffle(config.chunking.shuffle_buffer,
                                          seed=determinism.seed(config.seed, determinism.CHUNKS))
            return ds
        drop = config.drop_remainder or config.epochs is None
        ds = determinism.repeat_epochs(config.epochs, epoch_of_chunks)
        if config.chunking.shuffle_buffer is not None:
            ds = ds.batch(batch_size, drop_remainder=drop)
        else:
            ds = ds.rebatch(batch_size, drop_remainder=drop)
        ds = ds.map(as_written(_chunk_batches(config, static_batch, pack_inputs, pack_targets)), **parallel)
        cardinality = None  # how many chunks the examples give is known only once cut
    elif config.segmenting is not None:
        # Transform blocks and cut their sequences into segments, then give them lanes (segmenting.py).
        parallel = dict(num_parallel_calls=config.num_parallel_parses or AUTOTUNE,
                        deterministic=not config.sloppy_interleave)

        def epoch_of_segments():
            elements, decode_ = source()
            return elements.map(as_written(_segments(config, decode_, zero_tails)), **parallel)
        ds = segmenting.stream(epoch_of_segments, config, batch_size, segment_counter, share)
        static = None if config.segmenting.allow_small_batch else batch_size
        ds = ds.map(as_written(_segment_batches(config, static, pack_inputs, pack_targets, counters)), **parallel)
        cardinality = None  # how many batches the lanes take is known only once scheduled
    elif decode is not None:
        ds = ds.map(as_written(finisher(config, static_batch, pack_inputs, pack_targets, decode, zero_tails)),
                    num_parallel_calls=config.num_parallel_parses or AUTOTUNE,
                    deterministic=not config.sloppy_interleave)
    return finish_pipeline(config, ds, cardinality) if finished else ds


def finish_pipeline(config: LoaderConfig, ds: tf.data.Dataset, cardinality: int | None) -> tf.data.Dataset:
    """The known cardinality, the last prefetch and the pipeline's options (see :func:`compile_dataset`)."""
    if any(block is not None for block in (config.bucketing, config.packing, config.chunking, config.segmenting)):
        cardinality = None  # how many batches these regroup the examples into is known only at the end
    if config.epochs is None:
        # Interleaving hides the repeat from tf.data's cardinality; tell Keras the truth.
        ds = ds.apply(tf.data.experimental.assert_cardinality(tf.data.INFINITE_CARDINALITY))
    elif cardinality is not None:
        # Keras then knows the steps per epoch. The end-of-file checks fail first if a count is off.
        ds = ds.apply(tf.data.experimental.assert_cardinality(cardinality))
    if config.num_prefetch is None:
        ds = ds.prefetch(AUTOTUNE)
    elif config.num_prefetch > 0:
        ds = ds.prefetch(config.num_prefetch)
    return ds.with_options(sources.options(config))
