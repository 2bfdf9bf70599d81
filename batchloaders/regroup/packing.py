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

With ``groups`` (an encoder-decoder's ``inputs`` and ``targets``, of different lengths per example)
each group has rows of its own length and its own segment ids and positions, and an example goes
whole into the row where every group's tensors fit: the k-th example of a row is segment k in every
group. That placement loops once per example (largest share of a row first, best fit by the room
left over all groups); there is no splitting.
"""
from __future__ import annotations

from typing import NamedTuple

import tensorflow as tf

from batchloaders.core.values import default_value
from batchloaders.regroup import blocks, measure
from batchloaders.transform.batching import Batch, finalize
from batchloaders.transform.graphs import as_written
from batchloaders.core.model import LoaderConfig, PackGroup


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


class _Placed(NamedTuple):
    """Where the pieces of a block went: ``source`` example and ``start`` step of each piece (block order);
    ``piece``, the pieces in row order (each row's in the order they were placed); ``row``, the row of each
    of those; ``count``, the rows."""

    source: tf.Tensor
    start: tf.Tensor
    piece: tf.Tensor
    row: tf.Tensor
    count: tf.Tensor


def _length_checks(values: dict, lengths: dict, config: LoaderConfig, group: PackGroup):
    """The group's length per example, and the checks that its tensors agree (and fit a row, without split)."""
    spec = config.packing

    def length_of(name):  # a fixed first axis has no lengths: every example is that long
        if name in lengths:
            return tf.cast(lengths[name], tf.int64)
        return tf.fill(tf.shape(values[name], out_type=tf.int64)[:1], tf.shape(values[name], out_type=tf.int64)[1])

    where = spec.json_path if not spec.groups else f"{spec.json_path}.groups[{spec.groups.index(group)}]"
    length = length_of(group.tensors[0])
    checks = [tf.debugging.Assert(tf.reduce_all(tf.equal(length_of(n), length)), [tf.strings.format(
        f"{config.source}: {where}.tensors: tensors {', '.join(group.tensors)} are packed together and need "
        "the same length per example: found one whose lengths differ" + (
            "" if spec.groups else " (packing groups give tensors of other lengths rows of their own)"), [])])
        for n in group.tensors[1:]]
    if not spec.allow_split:
        longest = tf.reduce_max(tf.concat([length, [0]], 0))
        checks.append(tf.debugging.Assert(longest <= group.length, [tf.strings.format(
            f"{config.source}: {where}.length: found an example of {{}} steps"
            + (f" in {group.tensors[0]}" if spec.groups else "") + f", longer than a row of {group.length}: "
            "expected length at least the longest example"
            + ("" if spec.groups else ", or allow_split true"), longest)]))
    return length, checks


def _fill(values: dict, config: LoaderConfig, group: PackGroup, sizes, placed: _Placed) -> dict:
    """The group's tensors as [rows, length, ...], with its segment ids and positions."""
    capacity = group.length
    rows, count = placed.row, placed.count
    size = tf.gather(sizes, placed.piece)
    # Segment numbers 1, 2, ... in placement order (0 stays padding).
    segment_in_row = tf.range(tf.size(rows)) - tf.gather(
        tf.math.unsorted_segment_min(tf.range(tf.size(rows)), rows, tf.size(rows)), rows)
    row_lengths = tf.math.unsorted_segment_sum(size, rows, tf.cast(count, tf.int32))
    shape = [count, capacity]

    def rows_of(flat, pad):
        return tf.RaggedTensor.from_row_lengths(flat, row_lengths, validate=False).to_tensor(
            tf.constant(pad, flat.dtype), shape=shape + flat.shape[1:].as_list())

    steps = tf.RaggedTensor.from_row_lengths(tf.range(tf.reduce_sum(size)), size, validate=False)
    step = steps.flat_values - tf.repeat(tf.cumsum(size, exclusive=True), size)  # within its piece
    out = {}
    for name in group.tensors:
        v = values[name]
        # The block seen as [examples x steps, ...], cut at every piece's first and last step: pieces
        # are its odd parts (in block order, they do not overlap), gathered in row order with one
        # copy per piece (a gather step by step cost more CPU on speech frames: docs/decisions/performance.md).
        flat = tf.reshape(v, tf.concat([[-1], tf.shape(v)[2:]], 0))
        first = placed.source * tf.shape(v, out_type=tf.int64)[1] + placed.start
        cuts = tf.concat([[0], tf.reshape(tf.stack([first, first + sizes], 1), [-1]),
                          tf.shape(flat, out_type=tf.int64)[:1]], 0)
        parts = tf.RaggedTensor.from_row_splits(flat, cuts, validate=False)
        picked = tf.gather(parts, 2 * placed.piece + 1).flat_values
        pad_spec = config.pad_specs.get(name)
        pad = pad_spec.value if pad_spec is not None and pad_spec.value is not None else default_value(v.dtype.name)
        out[name] = rows_of(picked, pad)
    out[group.segment_ids] = rows_of(tf.repeat(segment_in_row + 1, size), 0)
    out[group.positions] = rows_of(tf.cast(step, tf.int32), 0)
    return out


def _in_rows(order, rows, count, source, start) -> _Placed:
    """The placement (``rows`` of the pieces ``order`` lists, in placement order) in row order."""
    placed = tf.argsort(rows, stable=True)  # within a row, placement order
    return _Placed(source, start, tf.gather(order, placed), tf.gather(rows, placed), count)


def pack_block(values: dict, lengths: dict, config: LoaderConfig) -> dict:
    """One block of examples -> {name: [rows, length, ...]} with the segment_ids and positions tensors."""
    spec = config.packing
    if spec.groups:
        return _pack_groups(values, lengths, config)
    group = spec.packed_groups[0]
    length, checks = _length_checks(values, lengths, config, group)
    with tf.control_dependencies(checks):  # (identity: no placement before the checks, whatever _pieces makes)
        source, start, sizes = _pieces(tf.identity(length), spec.length, spec.allow_split)  # in block order
    order = tf.argsort(sizes, direction="DESCENDING", stable=True)  # longest first: best fit decreasing
    rows, _, count = _best_fit(tf.gather(sizes, order), spec.length)
    # In placement order within each row, the pieces lie end to end from the row's start (each is
    # placed where the row's fill ends), so a row is its pieces concatenated, then padded.
    return _fill(values, config, group, sizes, _in_rows(order, rows, count, source, start))


def _joint_fit(sizes, capacities: list[int]):
    """Row of each example (sizes [examples, groups], in placement order) placed best fit where every group
    fits; and the number of rows. Best: the least room left, counted in shares of each group's row.

    One loop step per example (the one-group path's grouping by size has no many-group form); the open
    rows and the first new one are the candidates, and a new row holds any example (each fits its rows).
    """
    n = tf.shape(sizes)[0]
    capacity = tf.constant(capacities, tf.int32)
    share = 1.0 / tf.constant(capacities, tf.float64)
    room = tf.tile(capacity[None], [n + 1, 1])

    def body(i, opened, room, rows):
        size = sizes[i]
        live = room[:opened + 1]
        fits = tf.reduce_all(live >= size, axis=1)
        left = tf.where(fits, tf.reduce_sum(tf.cast(live - size, tf.float64) * share, axis=1), 2.0 * len(capacities))
        candidates = tf.range(opened + 1)
        # The least room left; the lowest row among equals (argmin leaves ties unspecified).
        row = tf.reduce_min(tf.where(tf.equal(left, tf.reduce_min(left)), candidates, opened + 1))
        room = tf.tensor_scatter_nd_sub(room, [[row]], size[None])
        return i + 1, tf.maximum(opened, row + 1), room, rows.write(i, row)

    _, opened, _, rows = tf.while_loop(
        lambda i, *_: i < n, body, (tf.constant(0), tf.constant(0), room, tf.TensorArray(tf.int32, size=n)),
        parallel_iterations=1)
    return rows.stack(), tf.cast(opened, tf.int64)


def _pack_groups(values: dict, lengths: dict, config: LoaderConfig) -> dict:
    """Packing with groups: every example goes whole into one row, where each group's tensors fit the
    group's row length; each group is then filled as one-group packing fills its tensors."""
    groups = config.packing.groups
    measured = [_length_checks(values, lengths, config, g) for g in groups]
    with tf.control_dependencies([c for _, checks in measured for c in checks]):
        sizes = [tf.identity(length) for length, _ in measured]
    table = tf.cast(tf.stack(sizes, 1), tf.int32)  # [examples, groups]
    # Largest first, by the share of a row each example takes over all groups (block order among equals).
    shares = tf.reduce_sum(tf.cast(table, tf.float64) / tf.constant([g.length for g in groups], tf.float64), 1)
    order = tf.argsort(shares, direction="DESCENDING", stable=True)
    rows, count = _joint_fit(tf.gather(table, order), [g.length for g in groups])
    n = tf.size(sizes[0], out_type=tf.int64)
    placed = _in_rows(order, rows, count, tf.range(n), tf.zeros([n], tf.int64))
    out = {}
    for group, size in zip(groups, sizes):
        out.update(_fill(values, config, group, size, placed))
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


def padding_dataset(config: LoaderConfig, batch_size: int) -> tf.data.Dataset:
    """Real and padded elements of each packed tensor, per block of rows packed as the timed pipeline packs
    them: a row's real steps are those its segment_ids mark (not 0)."""
    spec = config.packing
    elements, decode = measure.stage_source(config, batch_size)
    transform_block = transformed_block(config, decode, frozenset())

    def counts(element):
        block = transform_block(element)
        rows = pack_block(block["values"], block["lengths"], config)
        real_steps = {g.segment_ids: tf.math.count_nonzero(rows[g.segment_ids], dtype=tf.int64)
                      for g in spec.packed_groups}
        step = {name: tf.reduce_prod(tf.shape(rows[name], out_type=tf.int64)[2:]) for name in spec.tensors}
        return {"rows": tf.shape(rows[spec.segment_ids], out_type=tf.int64)[0],
                "real": {name: real_steps[spec.group_of(name).segment_ids] * step[name] for name in spec.tensors},
                "padded": {name: tf.size(rows[name], out_type=tf.int64) for name in spec.tensors}}

    return elements.map(as_written(counts), num_parallel_calls=tf.data.AUTOTUNE)


def packed_counts(config: LoaderConfig, batch_size: int, batches: int) -> dict:
    """Real and padded elements of the packed tensors over the blocks that fill the first ``batches`` batches."""
    totals = {"rows": 0, "real": {n: 0 for n in config.packing.tensors},
              "padded": {n: 0 for n in config.packing.tensors}}
    for block in padding_dataset(config, batch_size).as_numpy_iterator():
        totals["rows"] += int(block["rows"])
        for name in config.packing.tensors:
            totals["real"][name] += int(block["real"][name])
            totals["padded"][name] += int(block["padded"][name])
        if totals["rows"] >= batches * batch_size:
            break
    return totals


def shown_counts(config: LoaderConfig, shown: list[dict], names: list[str]) -> list[dict] | None:
    """Real and padded elements per packed tensor of ``names`` in the batches ``shown`` (each its tensors by
    name): padding is where segment_ids is 0 (exactly, not a guess from values); None when the model does not
    take segment_ids."""
    spec = config.packing
    if any(g.segment_ids not in config.outputs for g in spec.packed_groups):
        return None
    counts = []
    for tensors in shown:
        sizes = {name: int(tf.size(tensors[name])) for name in names}
        real = {}
        for name, size in sizes.items():
            segments = tensors[spec.group_of(name).segment_ids].numpy()
            # each packed step holds size / (rows x length) elements
            real[name] = size - int((segments == 0).sum()) * (size // segments.size)
        counts.append({"padded": sizes, "real": real})
    return counts
