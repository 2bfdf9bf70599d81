"""Segmenting: sequences cut into segments of ``num_unroll`` steps and batched in lanes (truncated BPTT).

A batch has ``B`` rows, the *lanes*. Lane j carries consecutive segments of one sequence in
consecutive batches; when that sequence ends, the lane takes the next waiting sequence in input
order (after shuffling). Sequences are given to lanes in input order, each to the lane that is
free soonest (the lowest-numbered lane among those free at once), which is exactly "at every
batch, the free lanes, lowest first, take the waiting sequences in order": no lane idles while a
sequence waits. Sequence i of ``c_i`` segments, given lane l at batch s, fills lane l of batches
s .. s + c_i - 1. Epochs follow one another in the same lanes.

Everything runs inside tf.data, deterministically:

- :func:`segment_block` (a parallel map, one call per block of examples) cuts every sequence of
  a block into segment rows ``[num_unroll, ...]`` (steps past a sequence's end take the tensor's
  padding value, 0 unless set), copies the context tensors to each row and gives each row its
  counters (key, sequence, sequence_count, length, total_length, is_first, is_last).
- :func:`schedule` (one ``Dataset.scan``, one call per block) gives each sequence of the block its
  lane and first batch, adds the block's rows to the rows waiting, and emits every batch that all
  lanes have reached: ``[batches, B, ...]``. Rows of batches not yet complete wait in the scan
  state (as the reference's queue did), so memory holds the rows between the slowest lane and
  the fastest.
- At the end of the data (finite ``epochs``) the waiting rows are emitted too: a lane whose work is
  done gets a *padding segment* (length 0, zero data, key "", every counter 0 and both flags
  false) or, with ``allow_small_batch``, is left out of the batch (the ``slot`` counter says which
  lane each row is).

A zero-length sequence gives no segment (it is skipped). With a ``key`` tensor, a key that repeats
within an epoch stops the run with an error naming it (the keys of one epoch are kept, as 64-bit
fingerprints, in the scan state; an epoch-end marker resets them).
"""
from __future__ import annotations

import dataclasses
from typing import Callable

import tensorflow as tf

from batchloaders.loaders.base import decoded
from batchloaders.regroup import blocks, chunking
from batchloaders.transform.batching import Batch, finalize
from batchloaders.read import determinism
from batchloaders.read import origins
from batchloaders.transform.graphs import as_written, masked
from batchloaders.core.values import default_value
from batchloaders.core.model import LoaderConfig

EPOCH_END, LAST = "epoch_end", "last"
TALLY = "tally"  # [sequences, segments, skipped] of a block, for SegmentCounter


def names(config: LoaderConfig) -> tuple[str, ...]:
    """The tensors segmenting needs of each transformed example."""
    spec = config.segmenting
    return spec.tensors + spec.context + ((spec.key,) if spec.key is not None else ())


def _key_strings(key: tf.Tensor) -> tf.Tensor:
    """[N] strings from a key tensor [N] or [N, k] (windows: the first record's or step's), string or integer."""
    if key.shape.rank > 1:
        key = tf.concat([key, tf.zeros_like(key[:, :1])], 1)[:, 0]  # (a zero-width block has no example)
    return key if key.dtype == tf.string else tf.strings.as_string(key)


def _fail(message) -> tf.Tensor:
    with tf.control_dependencies([tf.debugging.Assert(False, [message], summarize=1)]):
        return tf.constant(False)


def _checks(config: LoaderConfig, steps: dict, keys) -> list:
    """Every segmented tensor as long as the first; with pad false, lengths that are multiples of num_unroll."""
    spec = config.segmenting
    ref = spec.tensors[0]
    out = []
    if len(spec.tensors) > 1:
        differs = tf.reduce_any(tf.stack([tf.not_equal(steps[n], steps[ref]) for n in spec.tensors], 1), axis=1)

        def unequal():
            bad = tf.argmax(tf.cast(differs, tf.int32), output_type=tf.int32)
            detail = tf.strings.reduce_join([tf.strings.join([f"{n} ", tf.strings.as_string(steps[n][bad])])
                                             for n in spec.tensors], separator=", ")
            return _fail(tf.strings.join([
                f"{config.source}: {spec.json_path}: the sequence with key ", keys[bad], " has segmented tensors of "
                "different lengths (", detail, " steps): expected one length (the tensors of a sequence are cut "
                "into the same segments)"]))
        out.append(tf.cond(tf.reduce_any(differs), unequal, lambda: tf.constant(True)))
    if not spec.pad:
        ragged = tf.not_equal(steps[ref] % spec.num_unroll, 0)

        def uneven():
            bad = tf.argmax(tf.cast(ragged, tf.int32), output_type=tf.int32)
            return _fail(tf.strings.join([
                f"{config.source}: {spec.json_path}.pad: the sequence with key ", keys[bad], " has ",
                tf.strings.as_string(steps[ref][bad]), f" steps, not a multiple of num_unroll {spec.num_unroll}: "
                "expected pad true, or every length a multiple of num_unroll"]))
        out.append(tf.cond(tf.reduce_any(ragged), uneven, lambda: tf.constant(True)))
    return out


def segment_block(values: dict, lengths: dict, extras: dict, config: LoaderConfig) -> dict:
    """A block of examples -> ``{"rows", "meta", "example", "counts", "keys", "tally"}``: each segment's tensors
    (``rows``: segmented ``[S, num_unroll, ...]``, context ``[S, ...]``), its counters (``meta``), the example it
    comes from, each example's number of segments (0: skipped) and key, and the block's counts."""
    spec = config.segmenting
    unroll = spec.num_unroll
    keys = extras[origins.SEQUENCE_KEY] if spec.key is None else _key_strings(values[spec.key])
    steps = {name: chunking.length_of(values, lengths, name) for name in spec.tensors}
    with tf.control_dependencies(_checks(config, steps, keys)):
        total = tf.identity(steps[spec.tensors[0]])
    count = (total + unroll - 1) // unroll
    example = tf.repeat(tf.range(tf.size(count, out_type=tf.int64)), count)
    index = tf.range(tf.size(example, out_type=tf.int64)) - tf.repeat(tf.cumsum(count, exclusive=True), count)
    n = tf.gather(total, example)
    at = index[:, None] * unroll + tf.range(unroll, dtype=tf.int64)[None, :]  # the step each segment step shows
    real = at < n[:, None]
    rows = {}
    for name in spec.tensors:
        v = values[name]
        last = tf.maximum(tf.shape(v, out_type=tf.int64)[1] - 1, 0)
        picked = tf.gather_nd(v, tf.stack([tf.broadcast_to(example[:, None], tf.shape(at, out_type=tf.int64)),
                                           tf.clip_by_value(at, 0, last)], -1))
        pad_spec = config.pad_specs.get(name)
        pad = pad_spec.value if pad_spec is not None and pad_spec.value is not None else default_value(v.dtype.name)
        mask = tf.reshape(real, tf.concat([tf.shape(real), tf.ones([v.shape.rank - 2], tf.int32)], 0))
        rows[name] = tf.where(mask, picked, tf.constant(pad, v.dtype))
    for name in spec.context:
        rows[name] = tf.gather(values[name], example)
    per_example = tf.gather(count, example)
    meta = {"key": tf.gather(keys, example), "sequence": tf.cast(index, tf.int32),
            "sequence_count": tf.cast(per_example, tf.int32),
            "length": tf.cast(tf.minimum(n - index * unroll, unroll), tf.int32), "total_length": tf.cast(n, tf.int32),
            "is_first": tf.equal(index, 0), "is_last": tf.equal(index, per_example - 1)}
    tally = tf.stack([tf.reduce_sum(tf.cast(count > 0, tf.int64)), tf.size(example, out_type=tf.int64),
                      tf.reduce_sum(tf.cast(count == 0, tf.int64))])
    return {"rows": rows, "meta": meta, "example": example, "counts": count, "keys": keys,
            EPOCH_END: tf.constant(False), LAST: tf.constant(False), TALLY: tally}


def _empty(spec: tf.TensorSpec) -> tf.Tensor:
    """No rows of ``spec`` (its first axis is the rows axis, whatever its static size)."""
    if spec.shape.rank == 0:
        return tf.constant(default_value(spec.dtype.name), spec.dtype)
    shape = [0] + [0 if d is None else d for d in spec.shape[1:]]
    return tf.fill(shape, tf.constant(default_value(spec.dtype.name), spec.dtype))


def marker(spec, flag: str) -> tf.data.Dataset:
    """One element of ``spec`` with no sequence, marking the end of an epoch (EPOCH_END) or of the data (LAST)."""
    element = tf.nest.map_structure(_empty, spec)
    element[flag] = tf.constant(True)
    return tf.data.Dataset.from_tensors(element)


def _assign(counts, free):
    """Lane and first batch of each sequence, in order, each to the lane free soonest (lowest index on a
    tie); and the lanes' free batches after them. A sequence of 0 segments changes nothing."""
    n = tf.size(counts)

    def body(i, free, lanes, starts):
        lane = tf.argmin(free, output_type=tf.int64)
        start = free[lane]
        free = tf.tensor_scatter_nd_add(free, [[lane]], counts[i:i + 1])
        return i + 1, free, lanes.write(i, lane), starts.write(i, start)

    _, free, lanes, starts = tf.while_loop(
        lambda i, *_: i < n, body,
        (tf.constant(0), free, tf.TensorArray(tf.int64, size=n), tf.TensorArray(tf.int64, size=n)),
        parallel_iterations=1)
    return lanes.stack(), starts.stack(), free


def _repeated_keys(config: LoaderConfig, seen, keys, counts) -> tuple[list, tf.Tensor]:
    """(checks, seen): an assertion that no key of the block's sequences (skipped ones aside) is in ``seen`` or
    twice in the block, naming the first that is; ``seen`` (sorted fingerprints) with the block's added."""
    spec = config.segmenting
    keys = masked(keys, counts > 0)
    prints = tf.strings.to_hash_bucket_fast(keys, 2**63 - 1)
    at = tf.searchsorted(seen, prints, side="left")
    padded = tf.concat([seen, [-1]], 0)
    before = tf.gather(padded, tf.minimum(at, tf.size(seen, out_type=at.dtype))) == prints
    m = tf.size(prints)
    earlier = tf.reduce_any((prints[:, None] == prints[None, :]) & (tf.range(m)[None, :] < tf.range(m)[:, None]), 1)
    repeated = before | earlier

    def fail():
        bad = tf.argmax(tf.cast(repeated, tf.int32), output_type=tf.int32)
        return _fail(tf.strings.join([
            f"{config.source}: {spec.json_path}.key: the key ", keys[bad], " repeats within an epoch: expected a "
            "unique key per sequence (is a sequence read twice, or do two sequences share a key?)"]))
    check = tf.cond(tf.reduce_any(repeated), fail, lambda: tf.constant(True))
    return [check], tf.sort(tf.concat([seen, prints], 0))


def schedule(ds: tf.data.Dataset, config: LoaderConfig, lanes: int, share: str = "") -> tf.data.Dataset:
    """Elements of :func:`segment_block` (with epoch-end and last markers) -> batches
    ``{"values", "meta", "slot", "present"}`` of ``lanes`` rows, in order (see the module's docstring).
    ``share``: what to add to the empty-epoch error when this is one input pipeline's share (sharding.share_note)."""
    spec = config.segmenting
    element = ds.element_spec
    keyed = spec.key is not None
    endless = config.epochs is None

    def step(state, block):
        lane, start, free = _assign(block["counts"], state["free"])
        checks, seen = [], state["seen"]
        if keyed:
            checks, seen = _repeated_keys(config, seen, block["keys"], block["counts"])
        sequences = state["sequences"] + tf.reduce_sum(tf.cast(block["counts"] > 0, tf.int64))
        if endless:  # an epoch with no sequence would loop forever without a batch
            checks.append(tf.debugging.Assert(~block[EPOCH_END] | (sequences > 0), [
                f"{config.source}: {spec.json_path}: an epoch gave no sequence of at least one step (every one "
                f"was empty): expected data, since epochs is null and the lanes would wait forever{share}"]))
        with tf.control_dependencies(checks):
            seen = tf.cond(block[EPOCH_END], lambda: tf.zeros([0], tf.int64), lambda: tf.identity(seen))
        sequences = tf.where(block[EPOCH_END], tf.constant(0, tf.int64), sequences)
        rows = {n: tf.concat([state["rows"][n], v], 0) for n, v in block["rows"].items()}
        meta = {n: tf.concat([state["meta"][n], v], 0) for n, v in block["meta"].items()}
        time = tf.concat([state["time"], tf.gather(start, block["example"]) + tf.cast(block["meta"]["sequence"],
                                                                                     tf.int64)], 0)
        slot = tf.concat([state["lane"], tf.gather(lane, block["example"])], 0)
        done = state["done"]
        # Batches every lane has reached; at the end of the data, every batch any lane has.
        ready = tf.where(block[LAST], tf.reduce_max(free), tf.reduce_min(free))
        batches = ready - done
        waiting = tf.size(time, out_type=tf.int64)
        out = tf.where(time < ready)[:, 0]
        grid = tf.tensor_scatter_nd_update(tf.fill([batches * lanes], waiting),
                                           ((tf.gather(time, out) - done) * lanes + tf.gather(slot, out))[:, None], out)
        shape = tf.stack([batches, lanes])

        def emit(v):  # a zero row at index ``waiting`` for lanes with nothing (at the end only)
            v = tf.concat([v, tf.zeros(tf.concat([[1], tf.shape(v)[1:]], 0), v.dtype)], 0)
            return tf.reshape(tf.gather(v, grid), tf.concat([shape, tf.shape(v, out_type=tf.int64)[1:]], 0))

        emitted = {"values": {n: emit(v) for n, v in rows.items()}, "meta": {n: emit(v) for n, v in meta.items()},
                   "slot": tf.broadcast_to(tf.range(lanes, dtype=tf.int32)[None, :], shape),
                   "present": tf.reshape(grid < waiting, shape)}
        keep = tf.where(time >= ready)[:, 0]
        new = {"free": free, "done": ready, "seen": seen, "sequences": sequences,
               "rows": {n: tf.gather(v, keep) for n, v in rows.items()},
               "meta": {n: tf.gather(v, keep) for n, v in meta.items()},
               "time": tf.gather(time, keep), "lane": tf.gather(slot, keep)}
        return new, emitted

    initial = {"free": tf.zeros([lanes], tf.int64), "done": tf.constant(0, tf.int64),
               "seen": tf.zeros([0], tf.int64), "sequences": tf.constant(0, tf.int64),
               "rows": {n: _empty(s) for n, s in element["rows"].items()},
               "meta": {n: _empty(s) for n, s in element["meta"].items()},
               "time": tf.zeros([0], tf.int64), "lane": tf.zeros([0], tf.int64)}
    return ds.scan(initial, as_written(step)).unbatch()


def stream(blocks: Callable[[], tf.data.Dataset], config: LoaderConfig, lanes: int, counter=None,
           share: str = "") -> tf.data.Dataset:
    """Elements of :func:`segment_block` (``blocks()``: one epoch's, called once per epoch) -> every epoch's
    batches, in lanes; ``counter`` (a :class:`SegmentCounter`) counts the blocks' sequences, segments and
    skipped sequences; ``share``: see :func:`schedule`."""
    def epoch():
        ds = blocks()
        if counter is not None:
            ds = ds.map(as_written(counter.add))  # one thread: the counts add up race-free
        else:
            ds = ds.map(as_written(lambda element: {k: v for k, v in element.items() if k != TALLY}))
        return ds.concatenate(marker(ds.element_spec, EPOCH_END))
    ds = determinism.repeat_epochs(config.epochs, epoch)
    if config.epochs is not None:
        ds = ds.concatenate(marker(ds.element_spec, LAST))
    return schedule(ds, config, lanes, share)


def finish(element: dict, config: LoaderConfig) -> tuple[dict, dict]:
    """One batch of :func:`schedule` -> (tensors by name, counters by name); with ``allow_small_batch`` the
    rows of lanes with no work left are dropped."""
    spec = config.segmenting
    values, meta, slot = dict(element["values"]), dict(element["meta"]), element["slot"]
    if spec.allow_small_batch:
        present = element["present"]
        values = {n: masked(v, present) for n, v in values.items()}
        meta = {n: masked(v, present) for n, v in meta.items()}
        slot = masked(slot, present)
    counters = {spec.names[n]: v for n, v in meta.items()}
    counters[spec.names["slot"]] = slot
    return values, counters


@dataclasses.dataclass(frozen=True)
class SegmentReport:
    """What segmenting did so far: sequences cut, segments made, zero-length sequences skipped."""

    sequences: int
    segments: int
    skipped: int

    def __str__(self) -> str:
        return (f"{self.sequences:,} sequence(s) cut into {self.segments:,} segment(s); {self.skipped:,} "
                "zero-length sequence(s) skipped")


class SegmentCounter(chunking.ChunkCounter):
    """Counts of :func:`segment_block`, added up while the dataset runs (one per ``build_input_fn``), as
    chunking's counter does: blocks are counted when cut (segments still waiting for their batch included),
    over every epoch and every dataset ``input_fn`` made. The counts live in a lookup table, outside the
    iterator: a checkpoint of the iterator does not hold them (the pipeline tells tf.data to ignore that state)."""

    KEYS = ("sequences", "segments", "skipped")

    def add(self, element: dict) -> dict:
        keys = tf.constant(self.KEYS)
        with tf.control_dependencies([self.table.insert(keys, self.table.lookup(keys) + element[TALLY])]):
            return tf.nest.map_structure(tf.identity, {k: v for k, v in element.items() if k != TALLY})

    def report(self) -> SegmentReport:
        names, counts = self.table.export()
        found = dict(zip((k.decode() for k in names.numpy()), counts.numpy()))
        return SegmentReport(*(int(found.get(k, 0)) for k in self.KEYS))



def apply(build) -> tf.data.Dataset:
    """The stage's pipeline (stages/segmenting.py): each epoch's blocks transformed and cut into segments,
    given lanes, then finished batch by batch."""
    config = build.config
    parallel = blocks.parallel(config)

    def epoch_of_segments():
        elements, decode = build.source()
        return elements.map(as_written(_segments(config, decode, build.zero_tails)), **parallel)
    ds = stream(epoch_of_segments, config, build.batch_size, build.report, build.share)
    static = None if config.segmenting.allow_small_batch else build.batch_size
    return ds.map(as_written(_finished(build, static)), **parallel)


def _segments(config: LoaderConfig, decode, zero_tails: frozenset):
    """Loader element (a block of examples, one epoch) -> its segments."""
    wanted = names(config)

    def run(element):
        batch = decoded(element, config, decode, zero_tails)
        return segment_block({n: batch.values[n] for n in wanted}, batch.lengths, batch.extras, config)
    return run


def _finished(build, static_batch: int | None):
    """A batch of segments -> the model's (features, targets); the carried counters (the features are then a
    dict: keras_align.carried_counters) join the features besides those the model names."""
    config, carried = build.config, build.counters

    def run(element):
        values, counters = finish(element, config)
        out = build.model_batch(finalize(Batch({**values, **counters}, {}), config, static_batch))
        if not carried:
            return out
        features, rest = (out, ()) if not config.targets else (out[0], out[1:])
        features = {**features, **{n: tf.ensure_shape(counters[n], [static_batch]) for n in carried}}
        return features if not config.targets else (features, *rest)
    return run


def shown_counts(config: LoaderConfig, shown: list[dict], names: list[str]) -> list[dict]:
    """Real and padded elements per segmented tensor of ``names`` in the batches ``shown`` (each its tensors by
    name): a row's real steps are its ``length`` counter (exactly what segmenting cut, not a guess from values;
    0 in a padding segment)."""
    spec = config.segmenting
    counts = []
    for tensors in shown:
        steps = tensors[spec.names["length"]].numpy()  # preview's dataset is built without a model: all counters
        slots = max(1, steps.size * spec.num_unroll)
        sizes = {name: int(tf.size(tensors[name])) for name in names}
        # Every step of a segmented tensor has one shape (segmenting's scan keeps rows of one shape).
        counts.append({"padded": sizes,  # each step holds size / (rows x num_unroll) elements
                       "real": {name: int(steps.sum()) * (size // slots) for name, size in sizes.items()}})
    return counts
