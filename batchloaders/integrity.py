"""Read data files so that no damage goes unnoticed.

TensorFlow's TFRecord reader loses data silently in several ways: a file cut
inside a record header or at a record boundary ends early without an error,
and a GZIP stream without its trailer (or cut where a record ends) does too.
When it does raise (a bad frame or checksum, a broken compressed stream), the
error names neither the file nor the record.

Each file is therefore read on its own, in blocks, with its end accounted for:

* An end marker is appended after the file's records and both the records and
  the marker are numbered before ``ignore_errors`` and again after it. TF's
  reader moves to the next file after an error, so an error swallowed there
  shows as a gap between the two numbers at the marker, and the reading stops
  at the damage, with every earlier record delivered.
* At the end of the file the bytes accounted for (record lengths plus 16 bytes
  of framing each) must equal the file's size (uncompressed files), or the
  size the GZIP trailer records (modulo 2**32); and the number of records
  must equal the manifest's ``num_records`` for the file when it lists one.

Only what is known is checked: sizes of local files are read when the
pipeline is built, a remote file's size is not, and ZLIB streams record no size.

A damaged file then fails the pipeline with an error that begins with the
file's path, the byte offset and the last good record (``on_corrupt: fail``),
or is logged and counted and reading goes on with the next file
(``on_corrupt: skip_file``, see :class:`SkipCounter`).
"""
from __future__ import annotations

import dataclasses
import os
import sys

import tensorflow as tf

from batchloaders.errors import MARKER
from batchloaders.graphs import as_written
from batchloaders.config.datasets import url_scheme
from batchloaders.config.model import LoaderConfig

FRAME_BYTES = 16  # length (8), its masked CRC (4), the payload's masked CRC (4)
UNKNOWN = -1


@dataclasses.dataclass(frozen=True)
class FileTable:
    """What is known of every data file before reading it, by index in ``config.dataset.files``."""

    names: tuple[str, ...]
    sizes: tuple[int, ...]  # bytes as stored, UNKNOWN if not known
    expected_bytes: tuple[int, ...]  # record bytes the file must account for, UNKNOWN if not checkable
    counts: tuple[int, ...]  # records the manifest lists, UNKNOWN if it does not
    compression: str | None


def _gzip_size(path: str) -> int:
    """The uncompressed size a GZIP file's trailer records (modulo 2**32), or UNKNOWN."""
    try:
        with open(path, "rb") as f:
            head = f.read(2)
            if head != b"\x1f\x8b":
                return UNKNOWN  # not GZIP at all: reading it fails and says so
            f.seek(-4, os.SEEK_END)
            return int.from_bytes(f.read(4), "little")
    except OSError:
        return UNKNOWN


def file_table(config: LoaderConfig) -> FileTable:
    """Sizes and counts of every data file, read now (local files: one stat, one 4-byte read for GZIP)."""
    manifest = config.dataset.manifest
    sizes, expected, counts = [], [], []
    for path in config.dataset.files:
        entry = manifest.entry(path) if url_scheme(path) is None else None
        counts.append(entry.num_records if entry is not None else UNKNOWN)
        size = UNKNOWN
        if url_scheme(path) is None:
            try:
                size = os.stat(path).st_size
            except OSError:
                size = UNKNOWN  # gone since listing: reading it says so
        sizes.append(size)
        if size == UNKNOWN or manifest.compression == "zlib":
            expected.append(UNKNOWN)
        elif manifest.compression == "gzip":
            expected.append(_gzip_size(path) if size >= 18 else UNKNOWN)  # 18: header + trailer
        else:
            expected.append(size)
    return FileTable(tuple(config.dataset.files), tuple(sizes), tuple(expected), tuple(counts),
                     manifest.compression)


class SkipCounter:
    """What ``on_corrupt: skip_file`` skipped: per damaged file, the records read before the damage, and how often.

    Tables are filled while the dataset runs; :meth:`report` reads them (after an epoch, or any time).
    """

    def __init__(self, table: FileTable):
        self.table = table
        with tf.init_scope():
            self.records = tf.lookup.experimental.MutableHashTable(tf.string, tf.int64, default_value=0)
            self.skips = tf.lookup.experimental.MutableHashTable(tf.string, tf.int64, default_value=0)

    def add(self, filename, records):
        # A file listed twice, or skipped again in a later epoch, adds up.
        return [self.records.insert(filename, self.records.lookup(filename) + records),
                self.skips.insert(filename, self.skips.lookup(filename) + 1)]

    def report(self) -> "SkipReport":
        read, skips = ({k.decode(): int(v) for k, v in zip(*(t.numpy() for t in table.export()))}
                       for table in (self.records, self.skips))
        index = {name: i for i, name in enumerate(self.table.names)}
        lost = {}
        for name, n in read.items():
            expected = self.table.counts[index[name]] if name in index else UNKNOWN
            lost[name] = skips[name] * expected - n if expected != UNKNOWN else None
        return SkipReport(files=dict(sorted(read.items())), records_lost=dict(sorted(lost.items())))


@dataclasses.dataclass(frozen=True)
class SkipReport:
    """Files ``skip_file`` skipped the rest of, with the records read from each before the damage.

    ``records_lost[f]`` is how many of its records were not read, when the manifest lists the file's count.
    """

    files: dict[str, int]
    records_lost: dict[str, int | None]

    @property
    def skipped_files(self) -> int:
        return len(self.files)

    @property
    def skipped_records(self) -> int | None:
        """Records not read from the skipped files, or None when a skipped file's count is unknown."""
        lost = list(self.records_lost.values())
        return None if any(n is None for n in lost) else sum(lost)

    def __str__(self) -> str:
        if not self.files:
            return "no file skipped"
        known = self.skipped_records
        lines = [f"{self.skipped_files} file(s) skipped"
                 + (f", {known} record(s) not read" if known is not None else "")]
        for name, n in self.files.items():
            lost = self.records_lost[name]
            lines.append(f"  {name}: {n} record(s) read before the damage"
                         + (f", {lost} not read" if lost is not None else ""))
        return "\n".join(lines)


def _reason(unread, damaged, consumed, count, size, expected_bytes, expected_count, compression, manifest_path):
    """Why a file's end does not add up, in words (a string tensor); the first applicable reason wins."""
    s = tf.strings.as_string
    stream = {"gzip": "GZIP", "zlib": "ZLIB"}.get(compression)
    if stream:
        broken = (f"a record or the {stream} stream is damaged there (is the file {stream}-compressed, as the "
                  "manifest says?)")
    else:
        broken = ("a record frame or checksum is damaged there, or the file ends inside a record (is it a "
                  "TFRecord file, and uncompressed, as the manifest says?)")
    reasons = [(unread, tf.constant("the file could not be read to its end: it cannot be opened (deleted, moved or "
                                     "made unreadable after the pipeline was built?)")),
               (damaged, tf.constant(broken))]
    if stream == "GZIP":
        reasons.append((tf.not_equal(consumed % 2**32, expected_bytes) & (expected_bytes >= 0), tf.strings.join([
            "the GZIP trailer records ", s(expected_bytes), " bytes of records (modulo 2**32), but the stream gave ",
            s(consumed), ": the file is cut or lacks its trailer (several GZIP streams concatenated into one "
            "file also look like this)"])))
    elif not stream:
        reasons.append((tf.not_equal(consumed, expected_bytes) & (expected_bytes >= 0), tf.strings.join([
            "the file is ", s(size), " bytes, but its records end at byte ", s(consumed), ": ",
            tf.where(consumed < size, "the rest is not a whole record (the file was cut inside a record header, "
                                      "or has bytes appended)", "the file changed while it was read")])))
    reasons.append((tf.not_equal(count, expected_count) & (expected_count >= 0), tf.strings.join([
        "the manifest ", manifest_path, " lists ", s(expected_count), " records for this file, but ", s(count),
        " were read ", tf.where(count < expected_count, "(the file was cut at a record boundary, or changed after the "
                                "manifest was written)", "(records were added after the manifest was written)")])))
    out = tf.constant("")
    for condition, text in reversed(reasons):
        out = tf.where(condition, text, out)
    problem = tf.reduce_any(tf.stack([c for c, _ in reasons]))
    return problem, out


class Reader:
    """Reads a config's data files with their ends checked; one per ``build_input_fn``.

    Holds what is known of the files (:class:`FileTable`) and, under
    ``on_corrupt: skip_file``, the :class:`SkipCounter` every dataset built from it adds to.
    """

    def __init__(self, config: LoaderConfig):
        self.config = config
        self.table = file_table(config)
        self.skipped = SkipCounter(self.table) if config.on_corrupt == "skip_file" else None

    def refresh(self) -> None:
        """Read the files' sizes again: each dataset built checks the files as they are when it is built."""
        self.table = file_table(self.config)
        if self.skipped is not None:
            self.skipped.table = self.table

    def blocks(self, filename: tf.Tensor, index: tf.Tensor, block: int, then=None) -> tf.data.Dataset:
        return checked_blocks(self.config, self.table, filename, index, block, self.skipped, then)

    def record_names(self, file_index: tf.Tensor, record: tf.Tensor) -> tf.Tensor:
        """'path: record N' for each record, so that parse errors say which record of which file."""
        names = tf.gather(tf.constant(self.table.names), file_index)
        return tf.strings.join([names, ": record ", tf.strings.as_string(record)])

    def block_names(self, file_index: tf.Tensor, first: tf.Tensor, count: tf.Tensor, block: int) -> tf.Tensor:
        """'path: record F+j' for the ``count`` (at most ``block``) records of a block of one file, F its first.

        Names the same records as :meth:`record_names` (errors.data_error_from adds F and j up) for
        about half its cost: one join against constant offsets instead of a number formatted per record.
        """
        return names_in_block(tf.gather(tf.constant(self.table.names), file_index), first, count, block)


def names_in_block(path: tf.Tensor, first: tf.Tensor, count: tf.Tensor, block: int) -> tf.Tensor:
    """'path: record F+j' for j < ``count`` (at most ``block``): see :meth:`Reader.block_names`."""
    offsets = tf.constant([str(j) for j in range(block)])
    prefix = tf.strings.join([path, ": record ", tf.strings.as_string(first), "+"])
    return tf.strings.join([prefix, offsets[:count]])


DATA, RECOVER, CHECK = 0, 1, 2  # kinds of block the end-of-file scan walks


def _bounded(records: tf.data.Dataset, limit: tf.Tensor) -> tf.data.Dataset:
    """``records`` with errors ignored, at most ``limit`` elements or errors in all.

    Zip asks the range first, so each error swallowed still uses one number:
    a file that cannot be opened (TensorFlow's reader then retries it without
    end) stops after ``limit`` tries, and the end check reports it.
    """
    return tf.data.Dataset.zip((tf.data.Dataset.range(limit), records)).ignore_errors().map(as_written(lambda _, r: r))


def _fast_blocks(records: tf.data.Dataset, block: int, limit: tf.Tensor) -> tf.data.Dataset:
    """(serialized [k], kind, swallowed, ended): blocks with ignore_errors after batching, then two marker blocks.

    An error drops the block it happens in; the RECOVER marker block re-reads
    those records (see ``checked_blocks``) when the file's bytes do not add up.
    Costs nothing per record beyond ``batch``.
    """
    blocks = tf.data.Dataset.zip((_bounded(records.batch(block), limit // block + 2),
                                  tf.data.Dataset.from_tensors(DATA).repeat(),
                                  tf.data.Dataset.from_tensors(False).repeat(),
                                  tf.data.Dataset.from_tensors(False).repeat()))
    markers = tf.data.Dataset.from_tensor_slices((tf.zeros([2, 0], tf.string), [RECOVER, CHECK], [False, False],
                                                  [False, False]))
    return blocks.concatenate(markers)


def _exact_blocks(records: tf.data.Dataset, block: int, limit: tf.Tensor) -> tf.data.Dataset:
    """Like :func:`_fast_blocks` for files whose size cannot be checked (ZLIB, unknown sizes).

    Records and an end marker are numbered before and after ``ignore_errors``:
    TensorFlow's reader moves on to the next file after an error, so a
    swallowed error shows as a gap between the two numbers at the marker. About
    5 microseconds per record, which is why it is not the default path.
    """
    flagged = tf.data.Dataset.zip((records, tf.data.Dataset.from_tensors(False).repeat())).concatenate(
        tf.data.Dataset.from_tensors((tf.constant(""), True)))
    numbered = tf.data.Dataset.zip((tf.data.Dataset.range(limit + 2), flagged)).ignore_errors()
    numbered = tf.data.Dataset.zip((tf.data.Dataset.range(2**62), numbered)).batch(block)

    def split(after, numbered_):
        before, (serialized, end) = numbered_
        ended = tf.reduce_any(end)
        kept = tf.size(serialized) - tf.cast(ended, tf.int32)
        swallowed = ended & tf.reduce_any(tf.not_equal(before[-1:], after[-1:]))
        return serialized[:kept], DATA, swallowed, ended

    markers = tf.data.Dataset.from_tensors((tf.zeros([0], tf.string), CHECK, False, False))
    return numbered.map(as_written(split)).concatenate(markers)


def _opened(filename: tf.Tensor) -> tf.data.Dataset:
    """One element, after the file was opened and (if it has any) one byte read, outside ignore_errors.

    TensorFlow's reader retries a file it cannot open without moving on, so
    under ``ignore_errors`` a file deleted or unreadable after the build would
    spin forever. Here it fails at once with TensorFlow's error, which begins
    with the path (``errors.data_error_from`` turns it into a DataError).
    """
    probe = tf.data.FixedLengthRecordDataset(filename, record_bytes=1, buffer_size=1).take(1)
    return tf.data.Dataset.from_tensors(filename).map(
        as_written(lambda f: probe.reduce(tf.constant(0, tf.int64), as_written(lambda n, _: n + 1))))


def exact_path(table: FileTable) -> bool:
    """Whether the files need the exact (slower) path: some file's size cannot be checked."""
    return any(e == UNKNOWN for e in table.expected_bytes)


def checked_blocks(config: LoaderConfig, table: FileTable, filename: tf.Tensor, index: tf.Tensor, block: int,
                   skipped: SkipCounter | None = None, then=None) -> tf.data.Dataset:
    """The records of one data file in blocks ``{"serialized": [k], "first": index of the block's first record}``.

    Every block but the last holds at most ``block`` records; empty blocks are
    left out. The file's end is checked when the iterator asks for the block
    after the last, so every good record is delivered before an error.
    ``index`` is the file's position in ``config.dataset.files``. ``then``, if
    given, turns each block into what the dataset yields instead, in the same
    function call (each tf.data function call costs 60-170 microseconds here,
    a block of 1024 small records about 500).
    """
    compression = table.compression

    def open_records():
        return tf.data.TFRecordDataset(filename, compression_type=config.dataset.manifest.tf_compression,
                                       buffer_size=config.num_read_buffer_bytes)

    exact = exact_path(table)
    sizes, expected_bytes, counts = (tf.constant(t, tf.int64) for t in
                                     (table.sizes, table.expected_bytes, table.counts))
    # At most this many records fit the file (deflate expands at most 1032-fold); unknown size: no bound.
    expansion = 1 if compression is None else 1032
    limit = tf.where(sizes[index] >= 0, sizes[index] * expansion // FRAME_BYTES + 1, 2**62)
    if exact:  # no small bound on retries here (sizes unknown or compressed): open the file first
        blocks = _opened(filename).flat_map(as_written(lambda _: _exact_blocks(open_records(), block, limit)))
    else:
        blocks = _fast_blocks(open_records(), block, limit)
    manifest_path = config.dataset.manifest.path
    on_corrupt = config.on_corrupt

    def report(consumed, count, damaged, ended):
        """Check the file's end; fail, or warn and count, when it does not add up. Returns a bool tensor."""
        problem, reason = _reason(tf.logical_not(ended), damaged, consumed, count, sizes[index], expected_bytes[index], counts[index],
                                  compression, manifest_path)
        message = tf.strings.join([
            filename, ": ", MARKER, " at byte ", tf.strings.as_string(consumed),
            tf.where(count > 0, tf.strings.join([", after record ", tf.strings.as_string(count - 1),
                                                 " (the last good one; records count from 0)"]),
                     ", before the first record"),
            ": ", reason])
        if on_corrupt == "fail":
            with tf.control_dependencies([tf.debugging.Assert(tf.logical_not(problem), [message], summarize=1)]):
                return tf.identity(problem)

        def skip():
            ops = [tf.print(tf.strings.join(["WARNING ", message, "; skipped the rest of the file (",
                                             tf.strings.as_string(count), " records read from it)"]),
                            output_stream=sys.stderr)]
            if skipped is not None:
                ops += skipped.add(filename, count)
            with tf.control_dependencies(ops):
                return tf.constant(True)
        return tf.cond(problem, skip, lambda: tf.constant(False))

    def recover(count):
        """The good records after the last whole block (fewer than ``block``), read again up to the damage,
        whether an error stopped them (else the file's tail is no whole record), and whether the read
        got to the end (else the file cannot be opened)."""
        again = _exact_blocks(open_records().skip(count).take(block), block, tf.constant(block, tf.int64))
        return again.reduce((tf.zeros([0], tf.string), tf.constant(False), tf.constant(False)),
                            as_written(lambda out, b: (tf.concat([out[0], b[0]], 0), out[1] | b[2], out[2] | b[3])))

    def bytes_of(serialized):
        return tf.reduce_sum(tf.cast(tf.strings.length(serialized), tf.int64)) + FRAME_BYTES * tf.size(
            serialized, out_type=tf.int64)

    def step(state, element):
        consumed, count, damaged, ended = state
        serialized, kind, swallowed, reached = element
        if not exact:
            # The fast path drops the block an error happens in; the file's bytes then fall short.
            short = tf.equal(kind, RECOVER) & tf.not_equal(
                consumed % 2**32 if compression == "gzip" else consumed, expected_bytes[index])
            serialized, swallowed, reached = tf.cond(short, lambda: recover(count),
                                                     lambda: (serialized, swallowed, tf.equal(kind, RECOVER)))
        ended = ended | reached
        first = count
        consumed += bytes_of(serialized)
        count += tf.size(serialized, out_type=tf.int64)
        damaged = damaged | swallowed
        checked = tf.cond(tf.equal(kind, CHECK), lambda: report(consumed, count, damaged, ended),
                          lambda: tf.constant(False))
        with tf.control_dependencies([checked]):
            serialized = tf.identity(serialized)
        out = {"serialized": serialized, "first": first}
        if then is not None:
            out = then(out)
        # Every output gets a leading axis of 1, or of 0 for an empty block, which unbatch below then
        # drops: the loaders' block sequence (and every window and hash) stays as it was before these
        # checks, at no function call per block (a filter would cost one).
        keep = tf.cast(tf.size(serialized) > 0, tf.int32)
        return (consumed, count, damaged, ended), tf.nest.map_structure(lambda t: tf.expand_dims(t, 0)[:keep], out)

    zero = tf.constant(0, tf.int64)
    # Asking for the block after the last runs the check.
    return blocks.scan((zero, zero, tf.constant(False), tf.constant(False)), as_written(step)).unbatch()
