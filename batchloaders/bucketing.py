"""Length bucketing on blocks of examples: one tf.data call per block, not per example.

tf.data's ``bucket_by_sequence_length`` groups one example at a time (a function call per
example, ~60 microseconds each on a 2-core machine: slower than the rest of the pipeline
for speech-sized examples). Here the loader's batches arrive as blocks of examples, already
transformed, and a ``Dataset.scan`` keeps the examples that do not yet fill a batch of their
bucket: each block's lengths are merged with theirs, sorted by bucket (stable, so arrival order
is kept within a bucket), and every full batch is planned, in the order the batches filled up;
the rest waits for the next block (only the waiting examples are copied there). A parallel map
then makes the planned batches from the block and the examples that waited (see :func:`regroup`).
When
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

from batchloaders.secondary.const import default_value
from batchloaders.config.model import LoaderConfig
from batchloaders.graphs import as_written, masked

FLUSH = "flush"


def _empty(spec):
    """No examples of ``spec`` (its first axis is the examples axis, whatever its static size)."""
    shape = [0] + [0 if d is None else d for d in spec.shape[1:]]
    return tf.fill(shape, tf.constant(default_value(spec.dtype.name), spec.dtype))


def _widen(parts, varies: bool):
    """``parts`` with one width (the widest one's) on a first example axis that varies; tf.pad hands back
    its input untouched when there is nothing to pad."""
    if not varies:
        return parts
    width = tf.reduce_max(tf.stack([tf.shape(t)[1] for t in parts]))
    return [tf.pad(t, [[0, 0], [0, width - tf.shape(t)[1]]] + [[0, 0]] * (t.shape.rank - 2)) for t in parts]


def _from_both(old, new, index, waiting, varies: bool):
    """Rows ``index`` (into the waiting examples ``old`` then the block's ``new``), in that order."""
    is_old = index < waiting
    picked = _widen([tf.gather(old, masked(index, is_old)), tf.gather(new, masked(index, ~is_old) - waiting)], varies)
    at = tf.range(tf.size(index))
    return tf.dynamic_stitch([masked(at, is_old), masked(at, ~is_old)], picked)


def _prefixes(values, rows, widths):
    """Each of ``rows`` of ``values`` [examples, width, ...] cut to its width in ``widths``, end to end:
    [sum of widths, ...], one copy per row (a ragged gather of the block cut at each row's start and end)."""
    shape = tf.shape(values, out_type=tf.int64)
    take = tf.scatter_nd(rows[:, None], widths, shape[:1])
    first = tf.range(shape[0]) * shape[1]
    cuts = tf.concat([[0], tf.reshape(tf.stack([first, first + take], 1), [-1]), [shape[0] * shape[1]]], 0)
    steps = tf.reshape(values, tf.concat([[-1], shape[2:]], 0))
    return tf.gather(tf.RaggedTensor.from_row_splits(steps, cuts, validate=False), 2 * rows + 1).flat_values


def regroup(ds: tf.data.Dataset, config: LoaderConfig, flush_at_end: bool, then=None) -> tf.data.Dataset:
    """Blocks {"values", "lengths"} of examples -> batches {"values", "lengths", "bucket"} made per bucket,
    each tensor with lengths cut to the batch's longest; ``then``, if given, turns each batch into what is
    yielded instead, in the call that cuts it from its block.

    A ``Dataset.scan`` decides the batches (on lengths) and keeps the examples left waiting; it moves
    no other data. A parallel map then makes the block's batches: those of the block's examples alone
    (most of them) with one copy of each row's steps up to the batch's longest, straight from the parsed
    block; those that also take waiting examples from both. Every batch is then a slice of one of the two.
    """
    spec = config.bucketing
    boundaries = tf.constant(spec.boundaries, tf.int64)
    sizes = tf.constant(spec.batch_sizes, tf.int64)
    buckets = len(spec.batch_sizes)
    element = ds.element_spec
    varies = {name: name in element["lengths"] for name in element["values"]}

    def step(pending, block):
        waiting = tf.shape(next(iter(pending["values"].values())), out_type=tf.int64)[0]
        lengths = {n: tf.concat([pending["lengths"][n], tf.cast(block["lengths"][n], tf.int64)], 0)
                   for n in pending["lengths"]}
        if spec.by in lengths:
            length = lengths[spec.by]
        else:  # a fixed first axis: every example is as long as it
            by = tf.shape(block["values"][spec.by], out_type=tf.int64)
            length = tf.fill([waiting + by[0]], by[1])
        checks = []
        if spec.max_tokens is not None:
            longest = tf.reduce_max(tf.concat([length, [0]], 0))
            checks.append(tf.debugging.Assert(longest <= spec.max_tokens, [tf.strings.format(
                f"{config.source}: {spec.json_path}.max_tokens: found an example whose {spec.by} has {{}} steps, "
                f"longer than the budget of {spec.max_tokens} tokens: expected max_tokens at least the longest "
                "example", longest)]))
        with tf.control_dependencies(checks):
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
        emit = tf.cast(tf.gather(per_batch, filled).flat_values, tf.int64)
        rows, batch_bucket = tf.gather(rows, filled), tf.gather(batch_bucket, filled)
        # The waiting examples move (in bucket order, the order the next step sorts them in); the block
        # is handed on whole, as are the examples that waited until now.
        keep = tf.cast(keep, tf.int64)
        kept = {n: _from_both(pending["values"][n], v, keep, waiting, varies[n]) for n, v in block["values"].items()}
        for n in lengths:  # the waiting examples need no more width than their longest
            kept[n] = kept[n][:, :tf.reduce_max(tf.concat([tf.gather(lengths[n], keep), [0]], 0))]
        out = {"old": pending["values"], "new": block["values"], "waiting": waiting, "emit": emit, "rows": rows,
               "bucket": batch_bucket, "lengths": {n: tf.gather(l, emit) for n, l in lengths.items()}}
        return {"values": kept, "lengths": {n: tf.gather(l, keep) for n, l in lengths.items()}}, out

    def assemble(out):
        """The block's batches, values end to end: "own" those of block examples alone, "mixed" the others;
        per batch whether it is mixed, where it starts in its part (rows, and steps per tensor), its width."""
        rows, emit, waiting = out["rows"], out["emit"], out["waiting"]
        batch = tf.repeat(tf.range(tf.size(rows, out_type=tf.int64)), rows)  # of each emitted example
        mixed = tf.math.unsorted_segment_max(tf.cast(emit < waiting, tf.int64), batch, tf.size(rows)) > 0
        in_mixed = tf.gather(mixed, batch)
        own, shared = masked(emit, ~in_mixed) - waiting, masked(emit, in_mixed)
        none = tf.zeros_like(rows)
        own_rows, shared_rows = tf.where(mixed, none, rows), tf.where(mixed, rows, none)
        result = {"mixed": mixed, "rows": rows, "bucket": out["bucket"], "lengths": out["lengths"],
                  "start": tf.cumsum(rows, exclusive=True),
                  "first": tf.where(mixed, tf.cumsum(shared_rows, exclusive=True), tf.cumsum(own_rows, exclusive=True)),
                  "own": {}, "shared": {}, "width": {}, "steps_first": {}}
        for n, new in out["new"].items():
            both = _from_both(out["old"][n], new, shared, waiting, varies[n])
            if not varies[n]:
                result["own"][n], result["shared"][n] = tf.gather(new, own), both
                continue
            width = tf.math.unsorted_segment_max(out["lengths"][n], batch, tf.size(rows))
            width = tf.maximum(width, 0)  # (an empty segment's maximum is the lowest int64)
            row_width = tf.gather(width, batch)
            result["own"][n] = _prefixes(new, own, masked(row_width, ~in_mixed))
            result["shared"][n] = _prefixes(both, tf.range(tf.size(shared, out_type=tf.int64)),
                                            masked(row_width, in_mixed))
            steps = rows * width
            result["width"][n] = width
            result["steps_first"][n] = tf.where(mixed, tf.cumsum(tf.where(mixed, steps, none), exclusive=True),
                                                tf.cumsum(tf.where(mixed, none, steps), exclusive=True))
        return result

    def batches(out):
        # One element per batch: its slices of the block's parts (from_tensor_slices of ragged parts would
        # trip a TensorFlow type-inference warning on every run).
        def one(mixed, start, first, rows, bucket, width, steps_first):
            values = {}
            parts = tf.cond(mixed, lambda: out["shared"], lambda: out["own"])  # (one If for every tensor)
            for n, part in parts.items():
                if not varies[n]:
                    values[n] = part[first:first + rows]
                    continue
                cut = part[steps_first[n]:steps_first[n] + rows * width[n]]
                values[n] = tf.reshape(cut, tf.concat([[rows, width[n]], tf.shape(part, out_type=tf.int64)[1:]], 0))
            batch = {"values": values, "lengths": {n: l[start:start + rows] for n, l in out["lengths"].items()},
                     "bucket": bucket}
            return then(batch) if then is not None else batch
        return tf.data.Dataset.from_tensor_slices(
            (out["mixed"], out["start"], out["first"], out["rows"], out["bucket"], out["width"],
             out["steps_first"])).map(as_written(one))

    initial = {"values": {n: _empty(s) for n, s in element["values"].items()},
               "lengths": {n: tf.zeros([0], tf.int64) for n in element["lengths"]}}
    # Two blocks assembled at once keep up with the one scan; more would only hold more blocks in memory.
    # In order whatever sloppy_interleave says: batches come out in the order they filled up.
    return ds.scan(initial, as_written(step)).map(as_written(assemble), num_parallel_calls=2,
                                                   deterministic=True).flat_map(as_written(batches))


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
