"""Packing: several short examples concatenated into rows of a fixed length, best fit, per block.

A block of examples (the loader's, already transformed) is placed longest first: each goes to
the open row with the least room that still holds it (best fit), or opens a new row. The
placement is a ``tf.while_loop`` over the block's distinct lengths (equal lengths are placed
together, exactly as one at a time) inside the block's one tf.data call; the values then move
into the rows with one scatter per tensor. Every row carries
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

from batchloaders.secondary.const import default_value
from batchloaders.spec.model import LoaderConfig

BLOCK = 1024


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

    Items of one size are placed together, which is exactly what placing them one at a time gives:
    each goes to the open row with the least room that holds it, and that row stays the tightest
    fit until it is full, so the rows that can take the size fill tightest first, as many each as
    fit; the rest open new rows of ``capacity // size`` items each. The loop runs once per distinct
    size (at most ``capacity + 1``), not once per item.
    """
    n = tf.size(sizes)
    sizes = tf.cast(sizes, tf.int64)
    values, _, counts = tf.unique_with_counts(sizes)  # in order of appearance: decreasing
    counts = tf.cast(counts, tf.int64)
    firsts = tf.cumsum(counts, exclusive=True)
    big = tf.constant(capacity + 1, tf.int64)
    index = tf.range(n, dtype=tf.int64)

    def body(g, room, opened, rows, offsets):
        size, count, first = values[g], counts[g], firsts[g]
        is_open = index < opened
        # Size 0 fits anywhere: all of them go to the tightest open row (a new one if none is open).
        tightest = tf.argmin(tf.where(is_open, room, big), output_type=tf.int64)
        fit = tf.where(is_open, tf.where(size > 0, room // tf.maximum(size, 1), tf.where(index == tightest, count, 0)), 0)
        fit = tf.where(is_open & (room >= size), fit, 0)
        by_room = tf.argsort(tf.where(fit > 0, room, big), stable=True)  # tightest first, then lowest index
        take = tf.gather(fit, by_room)
        before = tf.cumsum(take, exclusive=True)
        got = tf.clip_by_value(count - before, 0, take)  # items each of those rows takes
        in_old = tf.minimum(count, tf.reduce_sum(take))
        k = tf.range(count)
        # Items placed in open rows: the j-th row of by_room takes items before[j] .. before[j] + got[j] - 1.
        # (items past in_old go to new rows below; their slot is clamped only to keep gathers in range)
        slot = tf.minimum(tf.searchsorted(before + got, k, side="right", out_type=tf.int64), tf.cast(n, tf.int64) - 1)
        old_row = tf.gather(by_room, slot)
        old_offset = capacity - tf.gather(room, old_row) + size * (k - tf.gather(before, slot))
        per_new = tf.where(size > 0, capacity // tf.maximum(size, 1), count)
        extra = k - in_old
        new_row = opened + extra // tf.maximum(per_new, 1)
        new_offset = size * (extra % tf.maximum(per_new, 1))
        row = tf.where(k < in_old, tf.cast(old_row, tf.int64), new_row)
        offset = tf.where(k < in_old, old_offset, new_offset)
        at = (first + k)[:, None]
        rows = tf.tensor_scatter_nd_update(rows, at, tf.cast(row, tf.int32))
        offsets = tf.tensor_scatter_nd_update(offsets, at, offset)
        room = tf.tensor_scatter_nd_sub(room, row[:, None], tf.fill([count], size))
        opened = tf.maximum(opened, tf.reduce_max(tf.concat([row + 1, [0]], 0)))
        return g + 1, room, opened, rows, offsets

    _, _, opened, rows, offsets = tf.while_loop(
        lambda g, *_: g < tf.size(values), body,
        (tf.constant(0), tf.fill([n], tf.constant(capacity, tf.int64)), tf.constant(0, tf.int64),
         tf.zeros([n], tf.int32), tf.zeros([n], tf.int64)), parallel_iterations=1)
    return rows, offsets, opened


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
    with tf.control_dependencies(checks):
        source, start, size = _pieces(length, capacity, spec.allow_split)
    order = tf.argsort(size, direction="DESCENDING", stable=True)  # longest first: best fit decreasing
    rows, offsets, count = _best_fit(tf.gather(size, order), capacity)
    source, start, size = tf.gather(source, order), tf.gather(start, order), tf.gather(size, order)
    # Segment numbers in placement order within each row: 1, 2, ... (0 stays padding).
    placed = tf.argsort(tf.cast(rows, tf.int64) * tf.cast(tf.size(rows), tf.int64) + tf.range(
        tf.size(rows, out_type=tf.int64)), stable=True)
    row_sorted = tf.gather(rows, placed)
    segment_in_row = tf.range(tf.size(rows)) - tf.gather(
        tf.math.unsorted_segment_min(tf.range(tf.size(rows)), row_sorted, tf.size(rows)), row_sorted)
    segment = tf.scatter_nd(placed[:, None], segment_in_row + 1, tf.shape(rows))
    # Every step of every piece: its row, its column, the example and step it comes from.
    steps = tf.RaggedTensor.from_row_lengths(tf.range(tf.reduce_sum(size)), size)
    step = steps.flat_values - tf.repeat(tf.cumsum(size, exclusive=True), size)
    piece = steps.value_rowids()
    target = tf.stack([tf.cast(tf.gather(rows, piece), tf.int64), tf.gather(offsets, piece) + step], 1)
    shape = tf.stack([tf.cast(count, tf.int64), tf.constant(capacity, tf.int64)])
    out = {}
    for name in spec.tensors:
        v = values[name]
        picked = tf.gather_nd(v, tf.stack([tf.gather(source, piece), tf.gather(start, piece) + step], 1))
        pad_spec = config.pad_specs.get(name)
        pad = pad_spec.value if pad_spec is not None and pad_spec.value is not None else default_value(v.dtype.name)
        full = tf.concat([shape, tf.shape(v, out_type=tf.int64)[2:]], 0)
        base = tf.fill(full, tf.constant(pad, v.dtype))
        out[name] = tf.tensor_scatter_nd_update(base, target, picked)
    out[spec.segment_ids] = tf.tensor_scatter_nd_update(tf.zeros(shape, tf.int32), target,
                                                        tf.gather(segment, piece))
    out[spec.positions] = tf.tensor_scatter_nd_update(tf.zeros(shape, tf.int32), target, tf.cast(step, tf.int32))
    return out
