"""Chunking: each example's sequences cut into chunks of ``size`` steps, with zero context at the borders.

For a tensor of ``n`` steps chunked with ``size``, ``step`` and ``context: [left, right]``, chunk k
has a *core* of ``min(size, n - k*step)`` steps starting at step ``k*step``, and the chunk is the
core with ``left`` steps before it and ``right`` after it, taken from the sequence padded with
``left`` zeros in front and ``right`` zeros behind: ``padded[k*step : k*step + left + core + right]``.
A convolution with "valid" padding and a window of ``left + 1 + right`` steps over the chunk gives
exactly one output per core step.

Cores start at 0, step, 2*step, ... and the last one is the first that reaches the end of the
sequence (or, when ``step > size``, the last that starts before it): ``K = min(ceil(n / step),
ceil(max(n - size, 0) / step) + 1)`` chunks, none for an empty sequence. Only the last core can be
shorter than ``size``; when it is shorter than ``min_size`` it is dropped (and counted, see
:class:`ChunkCounter`). The reference tensor (one at the block's own size and step) fixes K; every
other chunked tensor, at its own size and step, must give the same K, else the run stops with an
error naming the example's lengths. Tensors that are not chunked are copied to every chunk.

:func:`chunk_block` works on a block of examples at once, in one tf.data call per block: chunk
rows are found with ``repeat`` and every chunk's steps with one ``gather_nd`` per tensor.
"""
from __future__ import annotations

import dataclasses

import tensorflow as tf

from batchloaders.core.model import LoaderConfig
from batchloaders.config.order import after_chunking
from batchloaders.loaders.base import decoded
from batchloaders.read import determinism
from batchloaders.regroup import blocks, measure
from batchloaders.transform import building
from batchloaders.transform.batching import Batch, finalize
from batchloaders.transform.graphs import as_written



def chunk_counts(n, size: int, step: int):
    """Chunks a sequence of ``n`` steps gives (before ``min_size`` drops its last piece), elementwise (int64)."""
    n = tf.cast(n, tf.int64)
    reach = (tf.maximum(n - size, 0) + step - 1) // step + 1  # up to the first core reaching the end
    start = (n + step - 1) // step  # cores must start before the end
    return tf.where(n > 0, tf.minimum(reach, start), tf.zeros_like(n))


def length_of(values, lengths, name):
    """Each example's steps of tensor ``name``: its lengths, or the first axis when that is fixed (int64)."""
    if name in lengths:
        return tf.cast(lengths[name], tf.int64)
    shape = tf.shape(values[name], out_type=tf.int64)
    return tf.fill(shape[:1], shape[1])


def _same_counts(config: LoaderConfig, counts: dict, steps: dict) -> list:
    """Assert every chunked tensor gives the reference's number of chunks; the message names the first
    example that does not, with its lengths."""
    spec = config.chunking
    ref = spec.reference
    names = [t.name for t in spec.tensors]
    if len(names) < 2:
        return []
    differs = tf.reduce_any(tf.stack([tf.not_equal(counts[n], counts[ref]) for n in names], 1), axis=1)

    def fail():
        bad = tf.argmax(tf.cast(differs, tf.int32), output_type=tf.int32)
        detail = tf.strings.reduce_join([tf.strings.join([
            f"{t.name} ", tf.strings.as_string(steps[t.name][bad]), f" steps (size {t.size}, step {t.step}: ",
            tf.strings.as_string(counts[t.name][bad]), " chunks)"]) for t in spec.tensors], separator=", ")
        message = tf.strings.join([
            f"{config.source}: {spec.json_path}.tensors: an example whose chunked tensors give different numbers "
            "of chunks: ", detail, f"; expected the same number for every tensor ({ref} fixes it): lengths in "
            "the ratio of the sizes and steps (ceil(n / 4) labels for n frames at a quarter of the rate, as the "
            "subsample step gives)"])
        with tf.control_dependencies([tf.debugging.Assert(False, [message], summarize=1)]):
            return tf.constant(False)

    return [tf.cond(tf.reduce_any(differs), fail, lambda: tf.constant(True))]


def chunk_block(values: dict, lengths: dict, extras: dict, config: LoaderConfig) -> dict:
    """A block of examples -> its chunks: ``{"values", "lengths", "extras", "counts"}``, every tensor with a
    leading chunk axis; a chunked tensor is ``[chunks, left + size + right, ...]`` with zeros after each
    chunk's length, ``extras`` holds each chunk's ``index``, ``count`` (and ``source_key``), ``counts`` is
    [examples, chunks, dropped pieces] of the block."""
    spec = config.chunking
    steps = {t.name: length_of(values, lengths, t.name) for t in spec.tensors}
    counts = {t.name: chunk_counts(steps[t.name], t.size, t.step) for t in spec.tensors}
    with tf.control_dependencies(_same_counts(config, counts, steps)):
        total = tf.identity(counts[spec.reference])
    last_core = steps[spec.reference] - (total - 1) * spec.step
    dropped = (total > 0) & (last_core < spec.min_size)
    emitted = total - tf.cast(dropped, tf.int64)
    examples = tf.size(emitted, out_type=tf.int64)
    example = tf.repeat(tf.range(examples), emitted)
    index = tf.range(tf.size(example, out_type=tf.int64)) - tf.repeat(tf.cumsum(emitted, exclusive=True), emitted)
    out_values, out_lengths = {}, {}
    for t in spec.tensors:
        v = values[t.name]
        n = tf.gather(steps[t.name], example)
        start = index * t.step
        core = tf.minimum(tf.cast(t.size, tf.int64), n - start)
        j = tf.range(t.width, dtype=tf.int64)[None, :]
        at = start[:, None] + j - t.left  # the step of the sequence each chunk step shows
        size = t.left + core + t.right
        real = (j < size[:, None]) & (at >= 0) & (at < n[:, None])  # else context padding or past the chunk
        last = tf.maximum(tf.shape(v, out_type=tf.int64)[1] - 1, 0)
        rows = tf.broadcast_to(example[:, None], tf.shape(at, out_type=tf.int64))
        picked = tf.gather_nd(v, tf.stack([rows, tf.clip_by_value(at, 0, last)], -1))
        mask = tf.reshape(real, tf.concat([tf.shape(real), tf.ones([v.shape.rank - 2], tf.int32)], 0))
        out_values[t.name] = tf.where(mask, picked, tf.zeros_like(picked))
        out_lengths[t.name] = size
    for name in spec.copied:  # whole, with its own length when it has one (a window's per-record features)
        out_values[name] = tf.gather(values[name], example)
        if name in lengths:
            out_lengths[name] = tf.gather(lengths[name], example)
    meta = {"index": index, "count": tf.gather(emitted, example)}
    if spec.source_key:
        meta["source_key"] = tf.gather(extras["source_key"], example)
    counted = tf.stack([examples, tf.reduce_sum(emitted), tf.reduce_sum(tf.cast(dropped, tf.int64))])
    return {"values": out_values, "lengths": out_lengths, "extras": meta, "counts": counted}


def guard_empty_pass(chunks: tf.data.Dataset, config: LoaderConfig, share: str = "") -> tf.data.Dataset:
    """``chunks`` (one pass over the data, blocks of chunks) failing at its end when it gave no chunk.

    With ``epochs: null`` the pass is repeated forever; a pass without a chunk (every sequence empty,
    or its only piece shorter than min_size) would make the batching spin without end. ``share``: what
    to add when the pass is over one input pipeline's share (sharding.share_note)."""
    spec = config.chunking
    message = (f"{config.source}: {spec.json_path}: a whole pass over the data gave no chunk (every sequence is "
               f"empty, or its only piece is shorter than min_size {spec.min_size}), and epochs null would repeat "
               f"that forever: expected sequences of at least min_size steps{share}")
    empty = tf.nest.map_structure(lambda s: tf.zeros([0] + [d or 0 for d in s.shape[1:]], s.dtype),
                                  chunks.element_spec)
    flagged = tf.data.Dataset.zip((chunks, tf.data.Dataset.from_tensors(False).repeat())).concatenate(
        tf.data.Dataset.from_tensors((empty, True)))

    def step(count, pair):
        element, last = pair
        count += tf.shape(tf.nest.flatten(element)[0], out_type=tf.int64)[0]
        with tf.control_dependencies([tf.debugging.Assert(tf.logical_not(last & tf.equal(count, 0)), [message])]):
            return count, (element, tf.identity(last))

    return flagged.scan(tf.constant(0, tf.int64), as_written(step)).filter(
        as_written(lambda _, last: tf.logical_not(last))).map(as_written(lambda element, _: element))


@dataclasses.dataclass(frozen=True)
class ChunkReport:
    """What chunking did so far: examples (sequences) cut, chunks made, last pieces dropped (shorter than min_size)."""

    sequences: int
    chunks: int
    dropped: int

    def __str__(self) -> str:
        return (f"{self.sequences:,} sequence(s) cut into {self.chunks:,} chunk(s); {self.dropped:,} last piece(s) "
                "shorter than min_size dropped")


class ChunkCounter:
    """Counts of :func:`chunk_block`, added up while the dataset runs (one per ``build_input_fn``).

    Blocks are counted as they are chunked, so chunks waiting in the shuffle buffer or prefetched
    are counted already; the counts add up over epochs and over every dataset ``input_fn`` made.
    """

    KEYS = ("sequences", "chunks", "dropped")

    def __init__(self):
        with tf.init_scope():
            self.table = tf.lookup.experimental.MutableHashTable(tf.string, tf.int64, default_value=0)

    def add(self, element: dict) -> dict:
        """Add a block's counts (run sequentially: a lookup then an insert) and drop them from the element."""
        keys = tf.constant(self.KEYS)
        with tf.control_dependencies([self.table.insert(keys, self.table.lookup(keys) + element["counts"])]):
            return tf.nest.map_structure(tf.identity, {k: v for k, v in element.items() if k != "counts"})

    def report(self) -> ChunkReport:
        keys, values = (t.numpy() for t in self.table.export())
        found = dict(zip((k.decode() for k in keys), values))
        return ChunkReport(*(int(found.get(k, 0)) for k in self.KEYS))


def apply(build) -> tf.data.Dataset:
    """The stage's pipeline (stages/chunking.py): each epoch's blocks transformed and cut into chunks, shuffled
    within the epoch when asked, then batched and finished. The epochs are repeated here, after the chunk
    shuffle, so that epochs never mix: ``build.source()`` is called once per epoch, for its draws."""
    config = build.config
    spec, parallel = config.chunking, blocks.parallel(config)

    def epoch_of_chunks():
        elements, decode = build.source()
        ds = elements.map(as_written(chunks_of(config, decode, build.zero_tails)), **parallel)
        if build.report is not None:
            ds = ds.map(as_written(build.report.add))  # one thread: the counts add up race-free
        else:
            ds = ds.map(as_written(uncounted))
        if config.epochs is None:
            ds = guard_empty_pass(ds, config, build.share)
        if spec.shuffle_buffer is not None:
            ds = ds.unbatch().shuffle(spec.shuffle_buffer, seed=determinism.seed(config.seed, determinism.CHUNKS))
        return ds
    drop = config.drop_remainder or config.epochs is None
    ds = determinism.repeat_epochs(config.epochs, epoch_of_chunks)
    if spec.shuffle_buffer is not None:
        ds = ds.batch(build.batch_size, drop_remainder=drop)
    else:
        ds = ds.rebatch(build.batch_size, drop_remainder=drop)
    static = build.batch_size if drop else None
    return ds.map(as_written(_finished(build, static)), **parallel)


def uncounted(element: dict) -> dict:
    """A block's chunks without their counts (when no ChunkCounter takes them)."""
    return {k: v for k, v in element.items() if k != "counts"}


def chunks_of(config: LoaderConfig, decode, zero_tails: frozenset):
    """Loader element (a block of examples, one epoch) -> its chunks, with their block's counts."""
    names = config.chunking.names + config.chunking.copied

    def run(element):
        batch = decoded(element, config, decode, zero_tails)
        return chunk_block({n: batch.values[n] for n in names}, batch.lengths, batch.extras, config)
    return run


def _finished(build, static_batch: int | None):
    """A batch of chunks -> the model's (features, targets): the features built on chunks, then padding."""
    config = build.config
    later = after_chunking(config)

    def run(element):
        # (Chunks are zero after their length but as wide as the widest possible chunk, not the batch's
        # widest, so they are no zero_tails: finalize trims them to the batch's longest.)
        return build.model_batch(finalize(chunk_batch(element, config, later), config, static_batch))
    return run


def chunk_batch(element, config: LoaderConfig, later=None) -> Batch:
    """A batch of chunks as a Batch, with the secondary features built on chunks (``later``: after_chunking's)."""
    batch = Batch(dict(element["values"]), dict(element["lengths"]), {"chunk": dict(element["extras"])})
    for feature in (after_chunking(config) if later is None else later):
        building.built(batch, config.source, feature)
    return batch


def padding_dataset(config: LoaderConfig, batch_size: int, names) -> tf.data.Dataset:
    """Real and padded elements per tensor of ``names`` of batches of chunks (made as the timed pipeline makes
    them, in order: the chunk shuffle moves chunks between batches, not elements between real and padding)."""
    elements, decode = measure.stage_source(config, batch_size)
    chunks = elements.map(as_written(chunks_of(config, decode, frozenset())), num_parallel_calls=tf.data.AUTOTUNE)
    chunks = chunks.map(as_written(uncounted))

    def counts(element):
        batch = chunk_batch(element, config)
        return {"chunks": tf.cast(batch.size, tf.int64), **measure.padding(batch, config, names)}

    return chunks.repeat(config.epochs).rebatch(batch_size).map(as_written(counts),
                                                                num_parallel_calls=tf.data.AUTOTUNE)
