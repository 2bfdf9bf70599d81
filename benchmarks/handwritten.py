"""Hand-written tf.data pipelines that must yield exactly our batches.

Every function takes the sorted data files and the batch size and returns
one epoch of ``(features, targets)`` dicts, as our configs do (run.py names
the config each one is measured against). run.py hashes every tensor of
every batch of a whole epoch and requires the same digest as ours, so these
must reproduce our order, padding and dtypes exactly.

How our configs order their output (unshuffled, ``num_parallel_reads: 4``):
4 files are open at once and alternate *block by block*, the next file taking
the place of one that ends (``interleave(cycle_length=4, block_length=1)`` over
per-file streams of blocks). For the independent loader an element is a block
of records (up to 1024; ``blocks_of``); for the sequence loaders it is the
windows cut from one block of records, plus one empty element at the end of
each file, which takes its turn too. The block size is not a config key (ours
picks it from the data: up to 1024 records of at most about 8 MiB; 64 records
for continuous_sequence with feature lists), so run.py asks ours for it
(``our_block``) and passes it in. There is no other way to get our order.

Variants (run.py lists which it tries per case; the fastest identical one is
"the strongest"):
  * reading: parallel interleave (``num_parallel_calls``) or sequential, with
    or without one block read ahead per file;
  * blocks cut into batches (``rebatch``), or records interleaved with
    ``block_length`` and batched;
  * batch then parse (one vectorized parse per batch) or parse whole blocks
    of a file inside the interleave, then rebatch;
  * ``untuned``: tf.data's default rewrites and autotuning off, as ours;
  * the block's parse in an inline map (run in the reading thread, as ours
    does where blocks are parsed where read);
  * specialised ("zip", sequences): every file holds the same number of
    records, so a round is one element of each of 4 files. Valid for this
    data only.
The naive pipelines parse record by record (the tutorial way).
"""
from __future__ import annotations

import tensorflow as tf

AUTOTUNE = tf.data.AUTOTUNE
READS = 4  # files open at once, as in our configs (num_parallel_reads)
PARSES = 2  # parallel map calls (num_parallel_parses; 2 cores)
PREFETCH = 4  # batches (num_prefetch)
READ_BUFFER = 1 << 20  # bytes (num_read_buffer_bytes)
BLOCK = 1024  # records per block when parsing whole blocks / zipping


# --- parsing: one batch of serialized records -> (features, targets) ----------------------------

LABEL = tf.io.FixedLenFeature([], tf.int64)
FLOATS = {"x": tf.io.FixedLenFeature([64], tf.float32), "label": LABEL}
RAW_FLOATS = {"x": tf.io.FixedLenFeature([], tf.string), "label": LABEL}
IMAGES = {"image": tf.io.FixedLenFeature([], tf.string), "label": LABEL}
SPEECH = {"frames": tf.io.FixedLenSequenceFeature([40], tf.float32),
          "labels": tf.io.FixedLenSequenceFeature([], tf.int64)}


def parse_floats(serialized):
    p = tf.io.parse_example(serialized, FLOATS)
    return {"x": p["x"]}, {"label": p["label"]}


def parse_raw_floats(serialized):
    p = tf.io.parse_example(serialized, RAW_FLOATS)
    return {"x": tf.reshape(tf.io.decode_raw(p["x"], tf.float32, little_endian=True), [-1, 64])}, \
        {"label": p["label"]}


def parse_images(serialized):
    p = tf.io.parse_example(serialized, IMAGES)
    return {"image": tf.reshape(tf.io.decode_raw(p["image"], tf.uint8), [-1, 32, 32, 3])}, {"label": p["label"]}


def parse_speech(serialized):
    """Frames and labels, padded with 0 to the longest record of the batch."""
    _, lists, _ = tf.io.parse_sequence_example(serialized, sequence_features=SPEECH)
    return {"frames": lists["frames"]}, {"labels": lists["labels"]}


def parse_speech_slices(serialized):
    """The speech_slices config by hand: frames[:-1] (pad 0), n = its length (the length feature measures
    its tensor as the steps leave it: README), next = labels[1:] (pad -1)."""
    _, lists, lengths = tf.io.parse_sequence_example(serialized, sequence_features=SPEECH)
    n = lengths["frames"] - 1
    width = tf.reduce_max(n)
    valid = tf.sequence_mask(n, width)
    frames = tf.where(valid[:, :, None], lists["frames"][:, :width], 0.0)
    following = tf.where(valid, lists["labels"][:, 1:width + 1], tf.constant(-1, tf.int64))
    return {"frames": frames, "n": tf.cast(n, tf.int32)}, {"next": following}


def one(parse):
    """A batch parser applied to one record (for record-by-record pipelines)."""
    return lambda serialized: tf.nest.map_structure(lambda t: t[0], parse(serialized[None]))


def untuned(make):
    """``make`` with tf.data's default graph rewrites and autotuning off, as ours runs when every
    parallelism and buffer is given as a number (both cost time here; see batchloaders.read.sources.options)."""
    def made(*args):
        options = tf.data.Options()
        options.experimental_optimization.apply_default_optimizations = False
        options.autotune.enabled = False
        return make(*args).with_options(options)
    return made


# --- independent: 4 files alternating block by block -------------------------------------------

def _reader(filename):
    return tf.data.TFRecordDataset(filename, buffer_size=READ_BUFFER)


def blocks_of(block: int, ahead: bool = False):
    """Per file: its records in blocks of ``block`` (the last one shorter); ``ahead``: one block read
    ahead in a thread of the file's own."""
    def per_file(filename):
        blocks = _reader(filename).batch(block)
        return blocks.prefetch(1) if ahead else blocks
    return per_file


def interleaved_blocks(files, block: int, parallel: bool = False, ahead: bool = False) -> tf.data.Dataset:
    """Blocks of serialized records, 4 files alternating block by block."""
    return tf.data.Dataset.from_tensor_slices(files).interleave(
        blocks_of(block, ahead), cycle_length=READS, block_length=1,
        num_parallel_calls=READS if parallel else None)


def blocks_then_parse(parse, parallel: bool = False, ahead: bool = False):
    """Interleave blocks, cut them into batches (rebatch), parse each batch with one call."""
    def make(files, batch_size, block):
        return (interleaved_blocks(files, block, parallel, ahead).rebatch(batch_size)
                .map(parse, num_parallel_calls=PARSES).prefetch(PREFETCH))
    return make


def records_then_parse(parse):
    """The same order record by record: ``interleave(block_length=block)``, batch, parse."""
    def make(files, batch_size, block):
        return (tf.data.Dataset.from_tensor_slices(files)
                .interleave(_reader, cycle_length=READS, block_length=block).batch(batch_size)
                .map(parse, num_parallel_calls=PARSES).prefetch(PREFETCH))
    return make


def parse_blocks(parse):
    """Each file's blocks parsed inside the interleave (fixed-size features only), then rebatched."""
    def make(files, batch_size, block):
        def per_file(filename):
            return _reader(filename).batch(block).map(parse)
        return (tf.data.Dataset.from_tensor_slices(files)
                .interleave(per_file, cycle_length=READS, block_length=1, num_parallel_calls=READS)
                .rebatch(batch_size).prefetch(PREFETCH))
    return make


def parse_blocks_inline(parse):
    """As :func:`parse_blocks`, each block's parse run in its file's own thread rather than handed to
    TensorFlow's inter-op pool: ``tf.raw_ops.MapDataset`` with ``use_inter_op_parallelism`` false (what
    ``batchloaders.transform.inline_map`` builds; ``Dataset.map`` cannot ask for it). A hand-writer who knows the trick."""
    from batchloaders.transform.inline_map import inline_map

    def make(files, batch_size, block):
        def per_file(filename):
            return inline_map(_reader(filename).batch(block), parse)
        return (tf.data.Dataset.from_tensor_slices(files)
                .interleave(per_file, cycle_length=READS, block_length=1, num_parallel_calls=READS)
                .rebatch(batch_size).prefetch(PREFETCH))
    return make


def record_by_record(parse, padded: bool = False):
    """Naive: parse each record, then batch (padded_batch for feature lists)."""
    def make(files, batch_size, block):
        ds = (tf.data.Dataset.from_tensor_slices(files)
              .interleave(_reader, cycle_length=READS, block_length=block, num_parallel_calls=READS)
              .map(one(parse), num_parallel_calls=AUTOTUNE))
        ds = ds.padded_batch(batch_size) if padded else ds.batch(batch_size)
        return ds.prefetch(AUTOTUNE)
    return make


# --- sequence windows: 4 files alternating block by block ---------------------------------------

def frames_of_block(serialized):
    """A block of speech records parsed and concatenated along time: {frames [n, 40], labels [n]}."""
    _, lists, lengths = tf.io.parse_sequence_example(serialized, sequence_features=SPEECH)
    mask = tf.sequence_mask(lengths["frames"], tf.shape(lists["labels"])[1])
    return {"frames": tf.boolean_mask(lists["frames"], mask), "labels": tf.boolean_mask(lists["labels"], mask)}


def cut(units: dict, size: int, per_block: int, parse_block=None):
    """Per file: blocks of ``per_block`` records, each turned into ``units`` (parse_block, or the
    serialized records); cut into back-to-back windows of ``size`` units with the unused tail carried
    into the next block; one element of windows per block, then an empty one (as ours)."""
    def windows_of(filename):
        blocks = _reader(filename).batch(per_block)
        if parse_block is not None:
            blocks = blocks.map(parse_block, num_parallel_calls=PARSES)
        else:
            blocks = blocks.map(lambda s: {"serialized": s})
        empty = {k: tf.zeros([0] + shape, dtype) for k, (dtype, shape) in units.items()}

        def step(carry, block):
            buffer = {k: tf.concat([carry[k], block[k]], 0) for k in carry}
            n = tf.shape(buffer[next(iter(units))])[0] // size
            windows = {k: tf.reshape(v[:n * size], [n, size] + units[k][1]) for k, v in buffer.items()}
            return {k: v[n * size:] for k, v in buffer.items()}, windows

        end = {k: tf.zeros([0, size] + shape, dtype) for k, (dtype, shape) in units.items()}
        return blocks.scan(empty, step).concatenate(tf.data.Dataset.from_tensors(end))
    return windows_of


def sequence_windows(windows_of, files, batch_size, parallel: bool = True, zip_files: bool = False):
    """Batches of windows in our order: elements of 4 files alternating (see the module doc)."""
    if zip_files:  # equal-length files give equal numbers of blocks: a round is a concatenation
        groups = tf.data.Dataset.from_tensor_slices([files[i:i + READS] for i in range(0, len(files), READS)])

        def group(names):
            streams = tuple(windows_of(names[j]).prefetch(2) for j in range(READS))
            return tf.data.Dataset.zip(streams).map(
                lambda *w: {k: tf.concat([x[k] for x in w], 0) for k in w[0]})
        elements = groups.flat_map(group)
    else:
        elements = tf.data.Dataset.from_tensor_slices(files).interleave(
            windows_of, cycle_length=READS, block_length=1, num_parallel_calls=READS if parallel else None)
    return elements.rebatch(batch_size)


def continuous(size: int = 75, parallel: bool = True, zip_files: bool = False):
    """continuous_sequence windows of ``size`` frames: blocks are parsed, then cut into windows.
    ``per_block``: our block size (see the module doc)."""
    units = {"frames": (tf.float32, [40]), "labels": (tf.int64, [])}

    def make(files, batch_size, per_block):
        windows_of = cut(units, size, per_block, frames_of_block)
        return (sequence_windows(windows_of, files, batch_size, parallel, zip_files)
                .map(lambda w: ({"frames": w["frames"]}, {"labels": w["labels"]})).prefetch(PREFETCH))
    return make


def assemble_speech(serialized):
    """[B, k] serialized records -> windows: each window's records concatenated along time, padded with 0."""
    k = tf.shape(serialized)[1]
    _, lists, lengths = tf.io.parse_sequence_example(tf.reshape(serialized, [-1]), sequence_features=SPEECH)
    per_window = tf.reduce_sum(tf.reshape(lengths["frames"], [-1, k]), axis=1)
    out = {}
    for name in ("frames", "labels"):
        records = tf.RaggedTensor.from_tensor(lists[name], lengths=lengths[name])
        out[name] = tf.RaggedTensor.from_row_lengths(records.flat_values, per_window).to_tensor()
    return {"frames": out["frames"]}, {"labels": out["labels"]}


def discrete(k: int = 3, parallel: bool = True, zip_files: bool = False):
    """discrete_sequence windows of ``k`` records: windows of serialized records are planned per
    block, batched, and each batch parsed with one call. ``per_block``: our block size."""
    units = {"serialized": (tf.string, [])}

    def make(files, batch_size, per_block):
        windows_of = cut(units, k, per_block)
        return (sequence_windows(windows_of, files, batch_size, parallel, zip_files)
                .map(lambda w: assemble_speech(w["serialized"]), num_parallel_calls=PARSES).prefetch(PREFETCH))
    return make


# --- naive sequence pipelines: record by record; windows alternate one by one (not our order) ----

def _parse_one_speech(serialized):
    _, lists = tf.io.parse_single_sequence_example(serialized, sequence_features=SPEECH)
    return lists


def naive_continuous(size: int = 75):
    def make(files, batch_size):
        def windows_of(filename):
            frames = _reader(filename).map(_parse_one_speech, num_parallel_calls=AUTOTUNE).unbatch()
            return frames.batch(size, drop_remainder=True)
        return (tf.data.Dataset.from_tensor_slices(files)
                .interleave(windows_of, cycle_length=READS, block_length=1, num_parallel_calls=READS)
                .batch(batch_size).map(lambda w: ({"frames": w["frames"]}, {"labels": w["labels"]}))
                .prefetch(AUTOTUNE))
    return make


def naive_discrete(k: int = 3):
    def make(files, batch_size):
        def windows_of(filename):
            records = _reader(filename).map(_parse_one_speech, num_parallel_calls=AUTOTUNE)
            return records.ragged_batch(k, drop_remainder=True).map(
                lambda w: {n: w[n].flat_values for n in ("frames", "labels")})
        return (tf.data.Dataset.from_tensor_slices(files)
                .interleave(windows_of, cycle_length=READS, block_length=1, num_parallel_calls=READS)
                .padded_batch(batch_size).map(lambda w: ({"frames": w["frames"]}, {"labels": w["labels"]}))
                .prefetch(AUTOTUNE))
    return make
