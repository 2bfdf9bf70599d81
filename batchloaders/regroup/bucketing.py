"""Length bucketing on blocks of examples: one tf.data call per block, not per example.

tf.data's ``bucket_by_sequence_length`` groups one example at a time (a function call per
example: slower than the rest of the pipeline for speech-sized examples;
docs/decisions/performance.md). Here the loader's batches arrive as blocks of examples, already
transformed, and a ``Dataset.scan`` keeps the examples that do not yet fill a batch of their
bucket: each block is merged with them, sorted by bucket (stable, so arrival order is kept
within a bucket), and every full batch is emitted, in the order the batches filled up; the
rest waits for the next block. When
the data ends (finite epochs without drop_remainder) a last, empty block flushes what is
left as smaller batches, bucket by bucket, so every example appears exactly once.

Semantics are tf.data's: bucket i holds lengths of ``by`` in [boundaries[i-1], boundaries[i]),
the last one every length from the last boundary on, with batch size ``batch_sizes[i]``;
``pad_to_boundary`` tensors are padded to boundaries[i] - 1 (the batch maximum in the last
bucket). Repeating epochs feed one stream: a bucket's batch may mix the end of one epoch
with the start of the next, and each epoch still gives every example once.
"""
from __future__ import annotations

import tensorflow as tf

from batchloaders.regroup import blocks, chunking, measure
from batchloaders.read import origins
from batchloaders.transform.batching import Batch, finalize
from batchloaders.core.values import default_value
from batchloaders.config.kinds import kind
from batchloaders.core.model import LoaderConfig
from batchloaders.transform.graphs import as_written, masked

FLUSH = "flush"


def _empty(spec):
    """No examples of ``spec`` (its first axis is the examples axis, whatever its static size)."""
    shape = [0] + [0 if d is None else d for d in spec.shape[1:]]
    return tf.fill(shape, tf.constant(default_value(spec.dtype.name), spec.dtype))


def _widen(old, new, varies: bool):
    """``old`` and ``new`` with one width (the wider one's) on a first example axis that varies; tf.pad hands
    back its input untouched when there is nothing to pad."""
    if not varies:
        return old, new
    width = tf.maximum(tf.shape(old)[1], tf.shape(new)[1])
    return tuple(tf.pad(t, [[0, 0], [0, width - tf.shape(t)[1]]] + [[0, 0]] * (t.shape.rank - 2)) for t in (old, new))


def regroup(ds: tf.data.Dataset, config: LoaderConfig, flush_at_end: bool, then=None) -> tf.data.Dataset:
    """Blocks {"values", "lengths"} of examples -> batches {"values", "lengths", "bucket"} made per bucket;
    ``then``, if given, turns each batch into what is yielded instead, in the call that cuts it from its
    block (one tf.data call per batch instead of two, each with a fixed cost: docs/decisions/performance.md)."""
    spec = config.bucketing
    boundaries = tf.constant(spec.boundaries, tf.int64)
    sizes = tf.constant(spec.batch_sizes, tf.int64)
    buckets = len(spec.batch_sizes)
    element = ds.element_spec
    varies = {name: name in element["lengths"] for name in element["values"]}

    def step(pending, block):
        waiting = tf.shape(next(iter(pending["values"].values())))[0]
        lengths = {n: tf.concat([pending["lengths"][n], tf.cast(block["lengths"][n], tf.int64)], 0)
                   for n in pending["lengths"]}
        widened = {n: _widen(pending["values"][n], block["values"][n], varies[n]) for n in pending["values"]}
        if spec.by in lengths:
            length = lengths[spec.by]
        else:  # a fixed first axis: every example is as long as it
            by = tf.shape(block["values"][spec.by], out_type=tf.int64)
            length = tf.fill([tf.cast(waiting, tf.int64) + by[0]], by[1])
        bucket = tf.reduce_sum(tf.cast(length[:, None] >= boundaries[None, :], tf.int64), 1)
        order = tf.argsort(bucket, stable=True)
        sorted_bucket = tf.gather(bucket, order)
        counts = tf.math.bincount(tf.cast(bucket, tf.int32), minlength=buckets, maxlength=buckets, dtype=tf.int64)
        full = counts // sizes
        if flush_at_end:  # the last block also empties every bucket into smaller batches
            full = tf.where(block[FLUSH], (counts + sizes - 1) // sizes, full)
        take = tf.minimum(full * sizes, counts)
        starts = tf.cumsum(counts, exclusive=True)
        position = tf.range(tf.size(order, out_type=tf.int64)) - tf.gather(starts, sorted_bucket)
        leave = position >= tf.gather(take, sorted_bucket)
        emit, keep = masked(order, ~leave), masked(order, leave)
        # Batches of bucket b: full[b] of them, sizes[b] each but the last (take[b] - (full[b] - 1) * sizes[b]).
        batch_bucket = tf.repeat(tf.range(buckets, dtype=tf.int64), full)
        last = tf.cumsum(full) - 1
        rows = tf.repeat(sizes, full)
        rows = tf.tensor_scatter_nd_update(
            rows, masked(last, full > 0)[:, None],
            masked(take - (full - 1) * sizes, full > 0))
        # Emit batches in the order they filled up (as a stream of examples grouped one at a time
        # would): a block holds many batches of every bucket, and bucket after bucket would feed a
        # model long runs of one length.
        per_batch = tf.RaggedTensor.from_row_lengths(emit, rows)
        filled = tf.argsort(tf.reduce_max(per_batch, axis=1), stable=True)
        emit = tf.gather(per_batch, filled).flat_values
        rows, batch_bucket = tf.gather(rows, filled), tf.gather(batch_bucket, filled)
        # Every waiting and new example moves once, straight to its place: the emitted ones first, in
        # batch order, then the ones left waiting (concatenating, then gathering each part, moved them
        # three times, in this one-thread scan).
        moved = tf.math.invert_permutation(tf.concat([emit, keep], 0))
        emitted = tf.size(emit)
        out, kept = {"values": {}, "rows": rows, "bucket": batch_bucket}, {}
        for n, (old, new) in widened.items():
            both = tf.dynamic_stitch([moved[:waiting], moved[waiting:]], [old, new])
            out["values"][n], kept[n] = both[:emitted], both[emitted:]
        out["lengths"] = {n: tf.gather(l, emit) for n, l in lengths.items()}
        kept_lengths = {n: tf.gather(l, keep) for n, l in lengths.items()}
        for n in kept_lengths:  # the waiting examples need no more width than their longest
            kept[n] = kept[n][:, :tf.reduce_max(tf.concat([kept_lengths[n], [0]], 0))]
        return {"values": kept, "lengths": kept_lengths}, out

    initial = {"values": {n: _empty(s) for n, s in element["values"].items()},
               "lengths": {n: tf.zeros([0], tf.int64) for n in element["lengths"]}}
    ds = ds.scan(initial, as_written(step))

    def batches(out):
        # Slices of the block, one per batch (from_tensor_slices of ragged parts would trip a
        # TensorFlow type-inference warning on every run).
        starts = tf.cumsum(out["rows"], exclusive=True)

        def one(start, rows, bucket):
            batch = {"values": {n: v[start:start + rows] for n, v in out["values"].items()},
                     "lengths": {n: l[start:start + rows] for n, l in out["lengths"].items()}, "bucket": bucket}
            return then(batch) if then is not None else batch
        return tf.data.Dataset.from_tensor_slices((starts, out["rows"], out["bucket"])).map(as_written(one))

    return ds.flat_map(as_written(batches))


def over_budget(config: LoaderConfig, values: dict, lengths: dict, extras: dict) -> list:
    """Checks that no example of a block is longer than max_tokens (when only the data can tell: BucketSpec's
    ``check_longest``), failing at the first one with a message naming its file and record (origins.py), which
    runtime/translate.py makes a DataError; no check otherwise."""
    spec = config.bucketing
    if spec is None or not spec.check_longest:
        return []
    steps = chunking.length_of(values, lengths, spec.by)
    over = steps > spec.max_tokens

    def fail():  # the message is built only when an example is over the budget
        at = tf.argmax(tf.cast(over, tf.int32), output_type=tf.int32)
        message = tf.strings.join([
            origins.located(config, extras, at), f": {config.source}: {spec.json_path}.max_tokens: "
            f"{kind(config.type).example_is} has ", tf.strings.as_string(steps[at]), f" steps in tensor {spec.by!r}, more than "
            f"the budget of {spec.max_tokens} tokens: an example over the budget fits no batch; expected "
            "max_tokens at least the longest example, or shorter examples"])
        with tf.control_dependencies([tf.debugging.Assert(False, [message], summarize=1)]):
            return tf.constant(False)
    return [tf.cond(tf.reduce_any(over), fail, lambda: tf.constant(True))]


def last_block(spec) -> dict:
    """An empty block marked last: it flushes the buckets (see :func:`regroup`)."""
    block = tf.nest.map_structure(_empty, {k: v for k, v in spec.items() if k != FLUSH})
    return {**block, FLUSH: tf.constant(True)}


def to_batch(element, config: LoaderConfig):
    """One bucket's batch as (values, lengths, widths): tensors with lengths cut (or padded) to the width
    they are padded to: the bucket's boundary for pad_to_boundary tensors, else the batch's longest."""
    spec = config.bucketing
    values, lengths, widths = {}, {}, {}
    bucket = element["bucket"]
    boundary = tf.concat([tf.constant(spec.boundaries, tf.int64) - 1, [-1]], 0)[bucket]
    for name, v in element["values"].items():
        if name in element["lengths"]:
            l = element["lengths"][name]
            width = tf.reduce_max(tf.concat([l, [0]], 0))
            if name in spec.pad_to_boundary:
                width = tf.where(boundary >= 0, tf.maximum(boundary, width), width)
            v = v[:, :width]
            v = tf.pad(v, [[0, 0], [0, width - tf.shape(v, out_type=tf.int64)[1]]] + [[0, 0]] * (v.shape.rank - 2))
            lengths[name], widths[name] = l, tf.cast(width, tf.int32)
        values[name] = v
    return values, lengths, widths


def apply(build) -> tf.data.Dataset:
    """The stage's pipeline (stages/bucketing.py): transform blocks, regroup their examples by bucket, then pad
    and finish each batch in the call that cuts it."""
    config = build.config
    flush = flushes(config)
    ds, decode = build.source()
    return regroup(transformed_blocks(ds, config, decode, build.zero_tails), config, flush, then=_finished(build))


def flushes(config: LoaderConfig) -> bool:
    """Whether the buckets are flushed at the end of the data (finite epochs, remainders kept)."""
    return config.epochs is not None and not config.drop_remainder


def transformed_blocks(ds: tf.data.Dataset, config: LoaderConfig, decode, zero_tails: frozenset) -> tf.data.Dataset:
    """The loader's elements as blocks of transformed examples, marked for :func:`regroup` (and the last,
    empty block that flushes the buckets when :func:`flushes`)."""
    flush = flushes(config)
    transform = blocks.transformed(config, decode, zero_tails, names=config.outputs, where="$.args.bucketing",
                                   checks=lambda batch: over_budget(config, batch.values, batch.lengths, batch.extras))

    def block(element):
        out = transform(element)
        return {**out, FLUSH: tf.constant(False)} if flush else out
    ds = ds.map(as_written(block), **blocks.parallel(config))
    if flush:
        ds = ds.concatenate(tf.data.Dataset.from_tensors(last_block(ds.element_spec)))
    return ds


def _finished(build):
    """One bucket's batch -> the model's (features, targets).

    Regrouping keeps every row's tail as the block had it and pads with zeros, so the tensors the
    loader zero-fills and no secondary feature or step rewrites stay zero-filled."""
    config = build.config
    touched = {f.to_name for f in config.secondary_features} | {s.tensor for s in config.processing_steps}
    still_zero = set(build.zero_tails) - touched

    def run(element):
        values, lengths, widths = to_batch(element, config)
        return build.model_batch(finalize(Batch(values, lengths, {"widths": widths}, set(still_zero)), config, None))
    return run


def padding_dataset(config: LoaderConfig, batch_size: int, names) -> tf.data.Dataset:
    """Real and padded elements per tensor of ``names`` of the batches bucketing makes (the loader's own batches
    are only blocks then: their padding says nothing of the batches the model gets)."""
    elements, decode = measure.stage_source(config, batch_size)
    blocks_made = transformed_blocks(elements, config, decode, frozenset())

    def counts(element):
        values, lengths, widths = to_batch(element, config)
        batch = Batch(values, lengths, {"widths": widths})
        return {"examples": tf.shape(next(iter(values.values())), out_type=tf.int64)[0],
                **measure.padding(batch, config, names)}

    return regroup(blocks_made, config, flushes(config)).map(as_written(counts), num_parallel_calls=tf.data.AUTOTUNE)
