"""Window cutting shared by the two sequence loaders.

Both loaders see a file as a stream of *units* (frames for continuous_sequence,
whole records for discrete_sequence) arriving in blocks. ``stream`` walks one
file's blocks with a scan (transform/local_scan.py): it appends each block to the unconsumed
tail of the previous one, cuts every window that now fits and keeps only what
a later window can still use, so a file is never held in memory whole. Where
making the windows is cheap and copies no more than the block (the loader says),
the same scan step makes them, in the file's own thread: no function call per block
after it. Otherwise (a gather per feature, overlapping windows) they are made in a
parallel map after the interleave, a few blocks at a time.

Short files: a file that ends before its first window fits (shorter than the
drawn length, or than the random offset plus it) gives that one window
clipped to the file's length and moved back to fit, so every file of at least
min_window units gives a window in every epoch, whatever the draws; a file
shorter than min_window gives none.

Randomness: every opening of a file (every epoch) gets its own seed, a stateless
function of the run's seed, the epoch and the file's index (determinism.py);
window lengths and the start offset are stateless draws from that seed and the
block number, so a config seed makes the whole stream reproducible, also after
a restore, and a null seed makes every run different.
"""
from __future__ import annotations

import dataclasses
from typing import Callable

import tensorflow as tf

from batchloaders.read import determinism
from batchloaders.read import sharding, sources
from batchloaders.transform.local_scan import local_scan
from batchloaders.transform.graphs import as_written, growing
from batchloaders.core.model import LoaderConfig

AUTOTUNE = tf.data.AUTOTUNE


def draw_lengths(count, seed, lo: int, hi: int) -> tf.Tensor:
    """``count`` window lengths drawn uniformly from lo..hi inclusive (int64)."""
    if lo == hi:
        return tf.fill([count], tf.constant(lo, tf.int64))
    return tf.random.stateless_uniform([count], seed=seed, minval=tf.constant(lo, tf.int64),
                                       maxval=tf.constant(hi + 1, tf.int64), dtype=tf.int64)


@dataclasses.dataclass(frozen=True)
class Cutting:
    """How the windows of a file are cut.

    Attributes:
        lo: the shortest window length drawn (min_window).
        hi: the longest window length drawn (max_window).
        stride: windows start ``stride`` units apart; None: each starts where the last ended.
        max_offset: above 1, a random 0..max_offset-1 units are skipped before the first window.
    """

    lo: int
    hi: int
    stride: int | None = None
    max_offset: int = 0


def cut(start, length, end, seed, cutting: Cutting):
    """Every window that fits before unit ``end``, in order, from a window at ``start`` of ``length``.

    Windows follow each other (``cutting.stride`` None) or start ``stride`` apart. The first window that does
    not fit stops the cut even if a later, shorter one would fit, so windows always come out in order.

    Args:
        start: the next window's start (int64 scalar).
        length: the next window's length, already drawn (int64 scalar).
        end: the units available so far (int64 scalar).
        seed: the stateless seed of the lengths drawn after ``length``.
        cutting: the window lengths and stride (its ``max_offset`` is not used here).

    Returns:
        (starts, lengths) of the windows that fit, then the start and (already drawn) length of the next window.
    """
    lo, hi, stride = cutting.lo, cutting.hi, cutting.stride
    step = stride or lo
    room = tf.maximum(end - start, 0)
    # Candidate i starts at least start + i*step, so candidate room//step + 1 never fits:
    # there is always a first non-fitting window to carry over.
    count = room // step + 2
    lengths = tf.concat([[length], draw_lengths(count - 1, seed, lo, hi)], 0)
    if stride is None:
        starts = start + tf.cumsum(lengths, exclusive=True)
    else:
        starts = start + tf.range(count, dtype=tf.int64) * stride
    fits = tf.cast(starts + lengths <= end, tf.int64)
    n = tf.reduce_sum(tf.math.cumprod(fits))
    return starts[:n], lengths[:n], starts[n], lengths[n]


def _units(buffer: dict) -> tf.Tensor:
    return tf.shape(next(iter(buffer.values())), out_type=tf.int64)[0]


# Set (a Python True) in what ``stream``'s ``then`` gets when the element's buffer holds its windows and nothing
# else, back to back from the buffer's first unit (windows of one length, each where the last ended): the windows
# are then a reshape of the buffer, with no copy of their own. Absent otherwise.
WHOLE = "whole"


def whole(element: dict) -> bool:
    """Whether ``element`` (what ``stream``'s ``then`` gets) holds only its windows, back to back (:data:`WHOLE`)."""
    return bool(element.get(WHOLE, False))


def marked(block: dict) -> dict:
    """A block as :func:`stream` takes it: made in the reader's own function call
    (integrity.checked_blocks ``then``), the marking costs no map stage per block."""
    return {"data": block, "end": tf.constant(False)}


def stream(blocks: tf.data.Dataset, seed: tf.Tensor, cutting: Cutting, *, file=None,
           then: Callable[[dict], dict] | None = None) -> tf.data.Dataset:
    """Cut the windows of one file (``cutting``: the window lengths lo..hi, stride and max_offset).

    ``blocks`` yields dicts of tensors sharing their first (unit) axis, each wrapped by
    :func:`marked`; ``file``, if given, is added to every output element. Each
    output element holds the buffer the windows were cut from, the windows'
    ``starts`` (relative to the buffer) and ``lens``, and bookkeeping for
    :func:`guard_empty_passes`. A last element with ``end`` true follows the
    file's final block. ``then``, if given, turns each output element into what the element carries
    under ``"made"`` instead of the buffer, starts and lengths (in the same scan step: no function call
    of its own per element). ``max_offset`` > 1 skips a random 0..max_offset-1 units
    before the first window. A file that ends before its first window fits
    gives, in that last element, one window of length min(first length, units)
    starting at min(offset, units - length), unless it is shorter than ``lo``.
    """
    lo, hi, max_offset = cutting.lo, cutting.hi, cutting.max_offset
    empty = {k: tf.zeros([0] + s.shape[1:].as_list(), s.dtype) for k, s in blocks.element_spec["data"].items()}
    elements = blocks.concatenate(tf.data.Dataset.from_tensors({"data": empty, "end": True}))

    def emitted(out):
        if file is not None:
            out["file"] = file
        if then is None:
            out.pop(WHOLE, None)  # (a Python flag for ``then``, not a tensor of the element)
            return out
        return {"made": then(out), **{k: out[k] for k in ("end", "windows", "units", "cut", "file") if k in out}}

    if back_to_back(cutting):
        return local_scan(elements, ({k: growing(v) for k, v in empty.items()},) + (tf.constant(0, tf.int64),) * 2,
                          _back_to_back(lo, emitted))

    def key(index):
        return tf.stack([seed, tf.cast(index, tf.int64)])

    offset = tf.constant(0, tf.int64)
    if max_offset > 1:
        offset = tf.random.stateless_uniform([], seed=key(-2), minval=tf.constant(0, tf.int64),
                                             maxval=tf.constant(max_offset, tf.int64), dtype=tf.int64)
    first_length = draw_lengths(1, key(-1), lo, hi)[0]
    zero = tf.constant(0, tf.int64)
    initial = ({k: growing(v) for k, v in empty.items()}, zero, offset, first_length, zero, zero)

    def step(state, element):
        carry, position, start, length, index, total = state
        buffer = {k: tf.concat([carry[k], element["data"][k]], 0) for k in carry}
        end = position + _units(buffer)
        starts, lengths, start, length = cut(start, length, end, key(index), cutting)
        total += tf.size(starts, out_type=tf.int64)
        # A file ending before its first window fits still gives that window, clipped to the file
        # and moved back to fit, so whether a file gives a window never depends on the draws.
        # Nothing was dropped yet (position is 0), so the whole file is in the buffer.
        clipped = tf.minimum(first_length, end)
        short = tf.cast(element["end"] & (total == 0) & (end >= lo), tf.int64)
        starts = tf.concat([starts, tf.fill([short], tf.minimum(offset, end - clipped))], 0)
        lengths = tf.concat([lengths, tf.fill([short], clipped)], 0)
        total += short
        # Keep every unit until the first window is cut (at most offset + first window) for that case.
        drop = tf.where(total > 0, tf.clip_by_value(start - position, 0, end - position), 0)
        carry = {k: v[drop:] for k, v in buffer.items()}
        out = {"buffer": buffer, "starts": starts - position, "lens": lengths, "end": element["end"],
               "windows": total, "units": end, "cut": tf.size(lengths, out_type=tf.int64)}
        return (carry, position + drop, start, length, index + 1, total), emitted(out)

    return local_scan(elements, initial, step)  # instantiated with every file: local_scan.py


def back_to_back(cutting: Cutting) -> bool:
    """Whether ``cutting`` gives windows of one length, each starting where the last ended, from a file's first
    unit (no stride, no random offset): :func:`stream` cuts them with a step of their own."""
    return cutting.lo == cutting.hi and cutting.stride is None and cutting.max_offset <= 1


def _back_to_back(size: int, emitted: Callable[[dict], dict]):
    """The scan step of :func:`stream` for windows of one length, each starting where the last ended, from the
    file's first unit: what the general step cuts then, without its draws and cases (a file of at least
    ``size`` units has given a window before it ends, so none is clipped). A smaller step, traced at every
    ``input_fn()``, instantiated at every file and run at every block.

    Its buffer holds the element's windows and nothing else (:data:`WHOLE`): one concatenation of the carried
    units and the block's units the windows take, so making the windows needs no copy of its own; the units
    left over (fewer than a window) are carried to the next block."""
    def step(state, element):
        carry, position, total = state
        block = element["data"]
        held = _units(carry)  # fewer than size: any whole window was cut before
        units = held + _units(block)
        count = units // size
        took = count * size
        from_carry = tf.minimum(took, held)
        from_block = took - from_carry
        buffer = {k: tf.concat([carry[k][:from_carry], block[k][:from_block]], 0) for k in carry}
        out = {"buffer": buffer, "starts": tf.range(count, dtype=tf.int64) * size,
               "lens": tf.fill([count], tf.constant(size, tf.int64)), "end": element["end"], "windows": total + count,
               "units": position + units, "cut": count, WHOLE: True}
        rest = {k: tf.concat([carry[k][from_carry:], block[k][from_block:]], 0) for k in carry}
        return (rest, position + took, total + count), emitted(out)
    return step


def _no_window(config: LoaderConfig, share: sharding.Shard, unit: str) -> str:
    """What :func:`guard_empty_passes` says when a whole pass over ``share``'s files gave no window."""
    lo, hi = config.window.min_window, config.window.max_window
    by_file = share.rule == sharding.FILE  # the pass is over this pipeline's own files
    return (f"{config.source}: $.args.min_window: "
            + (f"input pipeline {share.pipeline} of {share.pipelines} reads its own files: " if by_file else "")
            + f"a full pass over the {len(share.files)} data file(s) gave no "
            f"window: every file is shorter than min_window = {lo} {unit} (windows take min_window..max_window = "
            f"{lo}..{hi} {unit}; a file shorter than the length drawn for it gives one window clipped to its "
            f"length); expected a smaller min_window or longer files"
            + (", or fewer input pipelines" if by_file else ""))


# Elements (blocks of windows) the guard's thread keeps ready: a few blocks' memory.
GUARD_AHEAD = 2


def guard_empty_passes(windows: tf.data.Dataset, shard: list[int], all_files: list[str],
                       message: str) -> tf.data.Dataset:
    """Fail instead of hanging when a full pass over the files gives no window.

    A file is marked when it ends without a window; any window clears every
    mark. When every file of this input pipeline is marked, no window came out
    of a whole pass (with epochs null the dataset would otherwise spin forever
    and ``fit`` would hang), so an InvalidArgumentError carrying ``message``
    and the longest file length is raised. Yields what the elements made (``stream``'s ``then``).
    """
    expected = [False] * len(all_files)
    for i in shard:  # positions in all_files this input pipeline reads
        expected[i] = True
    expected = tf.constant(expected)
    initial = (tf.zeros([len(all_files)], tf.bool), tf.constant(0, tf.int64))

    def step(state, element):
        marked, longest = state
        produced = element["cut"] > 0
        marked = tf.logical_and(marked, tf.logical_not(produced))
        longest = tf.where(produced, tf.constant(0, tf.int64), longest)
        ended_empty = tf.logical_and(element["end"], element["windows"] == 0)
        hit = tf.logical_and(tf.one_hot(element["file"], len(all_files), on_value=True, off_value=False),
                             ended_empty)
        marked = tf.logical_or(marked, hit)
        longest = tf.maximum(longest, tf.where(element["end"], element["units"], 0))
        failed = tf.reduce_all(tf.logical_or(marked, tf.logical_not(expected)))

        def fail():  # (the message is formatted only then: a join per element cost ~4% of a window stream)
            check = tf.debugging.Assert(False, [tf.strings.join(
                [message, " (longest file: ", tf.strings.as_string(longest), ")"])], summarize=1)
            with tf.control_dependencies([check]):
                return tf.identity(marked)
        marked = tf.cond(failed, fail, lambda: marked)
        return (marked, longest), element["made"]

    return local_scan(windows, initial, step)


@dataclasses.dataclass(frozen=True)
class WindowMaker:
    """What a sequence loader brings to :func:`window_batches`.

    ``file_blocks(filename, index)`` yields a file's blocks (dicts of tensors sharing
    their first axis), each wrapped by :func:`marked`; ``make_windows(element)`` turns one cut
    element (possibly of no window) into a dict of tensors with a leading window axis (``{"values", "lengths",
    "extras"}``, or what the loader parses later), which are batched with padding. It runs on this
    pipeline's share of the element's windows: in the file's scan step with ``make_in_scan`` (for makes that
    are cheap and copy no more than the block: every open file holds one made element read ahead), else in
    a parallel map after the interleave. ``max_offset``: the random units skipped before a file's first
    window, at most (when shuffled); ``unit``: what a window counts, in messages ("steps", "records").
    ``one_shape``: made windows all have one shape whatever their length (as windows of one length do), so
    unshuffled ones are cut into batches by ``rebatch``.
    """

    file_blocks: Callable[[tf.Tensor, tf.Tensor], tf.data.Dataset]
    make_windows: Callable[[dict], dict]
    max_offset: int
    unit: str
    make_in_scan: bool = False
    one_shape: bool = False


def window_batches(config: LoaderConfig, share: sharding.Shard, batch_size: int,
                   maker: WindowMaker) -> tf.data.Dataset:
    """The dataset of window batches both sequence loaders return.

    Each open file's blocks are read, checked (and parsed, where the loader parses them in
    ``maker.file_blocks``) and cut in a thread of the file's own, up to ``sources.READ_AHEAD_FILES``
    open files: the work of several files overlaps without a map stage of its own per block.

    Args:
        config: the sequence loader's config.
        share: this input pipeline's share of the files or windows.
        batch_size: windows per batch.
        maker: how the loader reads a file's blocks and makes windows of a cut (:class:`WindowMaker`).

    Returns:
        The batches of windows, padded.
    """
    file_blocks, make_windows, unit = maker.file_blocks, maker.make_windows, maker.unit
    make_in_scan, max_offset = maker.make_in_scan, maker.max_offset
    lo, hi = config.window.min_window, config.window.max_window
    stride = config.window.stride  # (None unless the kind concatenates records)
    all_files = list(config.dataset.files)
    shard = list(share.files)

    ahead = sources.reads_ahead(config)
    same = maker.one_shape or lo == hi

    def open_file(element):
        # Every file of every epoch has its own seed for its window lengths and offset (determinism.py).
        seed = determinism.seed(config.seed, determinism.WINDOWS, element["index"])

        def made(cut):  # in the file's own scan step: this pipeline's windows (made, with make_in_scan)
            mine = sharding.keep_windows(cut, share)
            if share.rule == sharding.RECORD:  # some windows left out: the buffer holds more than the windows kept
                mine = {**mine, WHOLE: False}
            if make_in_scan:
                return make_windows(mine)
            return {k: v for k, v in mine.items() if k != WHOLE}  # (made later, from the element's tensors)
        cutting = Cutting(lo, hi, stride, max_offset if config.shuffling.shuffle else 0)
        cuts = stream(file_blocks(element["file"], element["index"]), seed, cutting, file=element["index"],
                      then=made)
        return cuts.prefetch(max(1, config.reading.num_interleave_out_buffer_elements)) if ahead else cuts

    def epoch():
        # One epoch of files, cut and shuffled; the epochs are repeated after the window shuffle so they never mix.
        cuts = sources.interleave(config, sources.file_names(config, share, repeat=False), open_file,
                                  buffered=ahead, read_ahead=ahead)
        # The guard asks whether the data gives any window at all, not this pipeline's share.
        windows = guard_empty_passes(cuts, shard, all_files, _no_window(config, share, unit))
        # The guard's step is a function call per element: in a thread of its own, a few elements ahead, it is
        # off the path every batch waits on (docs/decisions/performance.md).
        windows = windows.prefetch(GUARD_AHEAD)
        if not make_in_scan:
            windows = windows.filter(as_written(lambda element: tf.size(element["lens"]) > 0))
            windows = windows.map(as_written(make_windows),
                                  num_parallel_calls=config.reading.num_parallel_parses or AUTOTUNE,
                                  deterministic=not config.reading.sloppy_interleave)
        elif share.rule == sharding.RECORD:
            # A share of no window must give a pass of no element, which sharding.endless reports (the
            # guard above asks about the data, not the share); unsharded, empty elements cost nothing.
            windows = windows.filter(as_written(lambda made: tf.shape(tf.nest.flatten(made)[0])[0] > 0))
        if not config.shuffling.shuffle and same:
            return windows
        windows = windows.unbatch()
        if config.shuffling.shuffle:
            windows = windows.shuffle(config.shuffling.num_shuffle_buffer_elements,
                                      seed=determinism.seed(config.seed, determinism.EXAMPLES),
                                      reshuffle_each_iteration=determinism.reshuffles())
        return windows

    drop = config.drop_remainder or config.epochs is None
    windows = sources.repeat_epochs(config, epoch, share)
    if not config.shuffling.shuffle and same:
        # Windows of one shape come in blocks of one shape: rebatch cuts the same batches from them
        # without handing over every window on its own (unbatch, then padded_batch).
        return windows.rebatch(batch_size, drop_remainder=drop)
    return windows.padded_batch(batch_size, drop_remainder=drop)
