"""Packing: several short examples concatenated into rows of a fixed length, best fit, per block.

A block of examples (the loader's, already transformed) is placed longest first: each goes to
the open row with the least room that still holds it (best fit), or opens a new row. The
placement is a ``tf.while_loop`` over the block's distinct lengths (equal lengths are placed
together, exactly as one at a time) inside the block's one tf.data call; the values then move
into the rows with one gather per tensor (of whole pieces, in row order: one copy per piece, not
per step) and one padding of the rows to ``length``. Every row carries
``segment_ids`` (1, 2, ... for the examples in the order they were placed, 0 on padding) and
``positions`` (0, 1, ... restarting in each segment), so a model can keep attention within
an example. With ``allow_split`` an example longer than a row is first cut into pieces of at
most ``length`` steps, each packed as its own segment; without it such an example stops the
run with an error naming its length. Rows are then batched ``target_batch_size`` at a time.
Rows are filled within one block (at least 1,024 examples): the last rows of a block may be
emptier than a stream-wide packer would leave them.
"""
from __future__ import annotations

import tensorflow as tf

from batchloaders.spec.values import default_value
from batchloaders.regroup import blocks
from batchloaders.transform.batching import Batch, finalize
from batchloaders.transform.graphs import as_written
from batchloaders.spec.model import LoaderConfig


def _pieces(lengths, capacity: int, split: bool):
    """(source example, start step, length) of every piece to place; without split, one per example."""
    if not split:
        n = tf.size(lengths, out_type=tf.int64)
        return tf.range(n), tf.zeros([n], tf.int64), lengths
    count = tf.maximum((lengths + capacity - 1) // capacity, 1)  # an empty example is one empty piece
    source = tf.repeat(tf.range(tf.size(lengths, out_type=tf.int64)), count)
    first = tf.repeat(tf.cumsum(count, exclusive=True), count)
    index = tf.range(tf.size(source, out_type=tf.int64)) - first
    start = index * capacity
    return source, start, tf.minimum(tf.gather(lengths, source) - start, capacity)


def _best_fit(sizes, capacity: int):
    """Row and offset of each size, placed best fit in the given (decreasing) order; and the number of rows.

    Rows not yet opened are rows with the whole ``capacity`` as room, after the open ones: an open row
    that holds a positive size has less room, so the tightest fit (least room that holds the size,
    then the lowest row) is an open row when one can take it, else the next new row. Items of one
    size are placed together, which is exactly what placing them one at a time gives: the tightest
    row stays the tightest fit until it is full, so the rows that can take the size fill in order of
    their room, ``room // size`` items each. The loop runs once per distinct positive size (at most
    ``capacity``), not once per item, on the open rows and as many new ones as the size's items could
    need. Size 0 fits anywhere: those items all go to the tightest open row (a new one when none is
    open) after the loop. Each item's offset is the sizes placed in its row before it.
    """
    n = tf.size(sizes)
    sizes = tf.cast(sizes, tf.int64)
    # The loop pays for every node at every step (docs/decisions/performance.md), hence int32 and few ops.
    values, _, counts = tf.unique_with_counts(tf.cast(sizes, tf.int32))  # in order of appearance: decreasing
    groups = tf.reduce_sum(tf.cast(values > 0, tf.int32))  # zero, if present, is the last value
    big = tf.constant(capacity + 1, tf.int32)
    # One spare row past the n an item could open, so that the argmin below never sees an empty vector.
    room = tf.fill([n + 1], tf.constant(capacity, tf.int32))

    def body(g, opened, room, rows):
        size, count = tf.gather(values, g), tf.gather(counts, g)
        live = room[:opened + count]
        fit = live // size  # rooms are >= 0: 0 where the size does not fit
        # The fitting rows, least room first, the lower row first among equals (top_k's order for ties).
        by_room = tf.math.top_k(-tf.where(fit > 0, live, big), k=opened + count).indices
        take = tf.gather(fit, by_room)
        end = tf.cumsum(take)
        row = tf.gather(by_room, tf.searchsorted(end, tf.range(count), side="right"))
        got = tf.clip_by_value(count - end + take, 0, take)  # items each row (in by_room order) takes
        room = tf.tensor_scatter_nd_sub(room, by_room[:, None], got * size)
        # The last item has the highest row when the size opened new rows.
        return g + 1, tf.maximum(opened, row[-1] + 1), room, rows.write(g, row)

    _, opened, room, rows = tf.while_loop(
        lambda g, *_: g < groups, body,
        (tf.constant(0), tf.constant(0), room, tf.TensorArray(tf.int32, size=groups, infer_shape=False,
                                                                element_shape=tf.TensorShape([None]))),
        parallel_iterations=1)
    rows = rows.concat()
    # Size 0: the tightest open row, or the first new row when none is open.
    tightest = tf.argmin(tf.where(tf.range(n + 1) < opened, room, big), output_type=tf.int32)
    rows = tf.concat([rows, tf.fill([n - tf.size(rows)], tightest)], 0)
    # Offsets: an exclusive running sum of the sizes within each row, in placement order.
    placed = tf.argsort(rows, stable=True)
    in_order = tf.cumsum(tf.gather(sizes, placed), exclusive=True)
    row_start = tf.math.unsorted_segment_min(in_order, tf.gather(rows, placed), n + 1)
    offsets = tf.scatter_nd(placed[:, None], in_order - tf.gather(row_start, tf.gather(rows, placed)), [n])
    count = tf.reduce_max(tf.concat([rows + 1, [0]], 0))
    return rows, offsets, tf.cast(count, tf.int64)


def pack_block(values: dict, lengths: dict, config: LoaderConfig) -> dict:
    """One block of examples -> {name: [rows, length, ...]} with the segment_ids and positions tensors."""
    spec = config.packing
    capacity = spec.length

    def length_of(name):  # a fixed first axis has no lengths: every example is that long
        if name in lengths:
            return tf.cast(lengths[name], tf.int64)
        return tf.fill(tf.shape(values[name], out_type=tf.int64)[:1], tf.shape(values[name], out_type=tf.int64)[1])

    length = length_of(spec.tensors[0])
    checks = [tf.debugging.Assert(tf.reduce_all(tf.equal(length_of(n), length)), [tf.strings.format(
        f"{config.source}: {spec.json_path}.tensors: tensors {', '.join(spec.tensors)} are packed together and need "
        "the same length per example: found one whose lengths differ", [])]) for n in spec.tensors[1:]]
    if not spec.allow_split:
        longest = tf.reduce_max(tf.concat([length, [0]], 0))
        checks.append(tf.debugging.Assert(longest <= capacity, [tf.strings.format(
            f"{config.source}: {spec.json_path}.length: found an example of {{}} steps, longer than a row of "
            f"{capacity}: expected length at least the longest example, or allow_split true", longest)]))
    with tf.control_dependencies(checks):  # (identity: no placement before the checks, whatever _pieces makes)
        source, start, sizes = _pieces(tf.identity(length), capacity, spec.allow_split)  # in block order
    order = tf.argsort(sizes, direction="DESCENDING", stable=True)  # longest first: best fit decreasing
    rows, offsets, count = _best_fit(tf.gather(sizes, order), capacity)
    # In placement order within each row, the pieces lie end to end from the row's start (each is
    # placed where the row's fill ends), so a row is its pieces concatenated, then padded.
    placed = tf.argsort(rows, stable=True)
    row_sorted = tf.gather(rows, placed)
    piece = tf.gather(order, placed)  # each piece's place in block order, in row order
    size = tf.gather(sizes, piece)
    # Segment numbers 1, 2, ... in that order (0 stays padding).
    segment_in_row = tf.range(tf.size(rows)) - tf.gather(
        tf.math.unsorted_segment_min(tf.range(tf.size(rows)), row_sorted, tf.size(rows)), row_sorted)
    row_lengths = tf.math.unsorted_segment_sum(size, row_sorted, tf.cast(count, tf.int32))
    shape = [count, capacity]

    def rows_of(flat, pad):
        return tf.RaggedTensor.from_row_lengths(flat, row_lengths, validate=False).to_tensor(
            tf.constant(pad, flat.dtype), shape=shape + flat.shape[1:].as_list())

    steps = tf.RaggedTensor.from_row_lengths(tf.range(tf.reduce_sum(size)), size, validate=False)
    step = steps.flat_values - tf.repeat(tf.cumsum(size, exclusive=True), size)  # within its piece
    out = {}
    for name in spec.tensors:
        v = values[name]
        # The block seen as [examples x steps, ...], cut at every piece's first and last step: pieces
        # are its odd parts (in block order, they do not overlap), gathered in row order with one
        # copy per piece (a gather step by step cost more CPU on speech frames: docs/decisions/performance.md).
        flat = tf.reshape(v, tf.concat([[-1], tf.shape(v)[2:]], 0))
        first = source * tf.shape(v, out_type=tf.int64)[1] + start
        cuts = tf.concat([[0], tf.reshape(tf.stack([first, first + sizes], 1), [-1]),
                          tf.shape(flat, out_type=tf.int64)[:1]], 0)
        parts = tf.RaggedTensor.from_row_splits(flat, cuts, validate=False)
        picked = tf.gather(parts, 2 * piece + 1).flat_values
        pad_spec = config.pad_specs.get(name)
        pad = pad_spec.value if pad_spec is not None and pad_spec.value is not None else default_value(v.dtype.name)
        out[name] = rows_of(picked, pad)
    out[spec.segment_ids] = rows_of(tf.repeat(segment_in_row + 1, size), 0)
    out[spec.positions] = rows_of(tf.cast(step, tf.int32), 0)
    return out


def transformed_block(config: LoaderConfig, decode, zero_tails: frozenset):
    """Loader element -> the packed tensors of its block of examples, transformed, before packing."""
    return blocks.transformed(config, decode, zero_tails, names=config.packing.tensors, where="$.args.packing")


def apply(build) -> tf.data.Dataset:
    """The stage's pipeline (stages/packing.py): transform blocks, pack each into rows, batch the rows."""
    config = build.config
    ds, decode = build.source()
    transform = transformed_block(config, decode, build.zero_tails)

    def rows(element):
        block = transform(element)
        packed = pack_block(block["values"], block["lengths"], config)
        # Rows are whole (every tensor [rows, length, ...]): what finishing does to a batch of them it
        # does row by row, so it is done once per block here, not in a call per batch.
        return build.model_batch(finalize(Batch(dict(packed), {}), config, None))
    static = config.drop_remainder or config.epochs is None
    # An endless stream of rows has no remainder: dropping it only gives the batches their static size.
    return ds.map(as_written(rows), **blocks.parallel(config)).rebatch(build.batch_size, drop_remainder=static)
