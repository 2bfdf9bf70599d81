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

Under ``on_corrupt: fail``, when the manifest lists every file's
``size_bytes`` (local, uncompressed files), none of the above runs: each
file's size is checked when it opens and when its last record has been read,
and its records are read in plain blocks (read/proven.py, which says what
that path sees and what it leaves to TensorFlow's reader).
"""
from __future__ import annotations

import dataclasses
import os
import sys

import tensorflow as tf
from tensorflow.core.framework import attr_value_pb2

from batchloaders.errors import DataError, Problem
from batchloaders.read.framing import FRAME_BYTES, HEAD_BYTES, compressed_otherwise
from batchloaders.transform.graphs import as_written
from batchloaders.transform.local_scan import local_scan
from batchloaders.read import file_readers, naming
from batchloaders.read.naming import BlockNames
from batchloaders.read import global_order
from batchloaders.read.offset_reader import OffsetReader
from batchloaders.read.proven import listed_sizes, proven_blocks
from batchloaders.config.datasets import url_scheme
from batchloaders.core.model import LoaderConfig

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


def _check_compression(path: str, manifest) -> None:
    """Raise DataError when a local file is TFRecord compressed otherwise than its manifest says: the manifest
    disagreeing with the data is never a damaged file that ``on_corrupt: skip_file`` may skip."""
    try:
        with open(path, "rb") as f:
            found = compressed_otherwise(f.read(HEAD_BYTES), manifest.compression)
    except OSError:
        return  # gone or unreadable: reading it says so
    if found is not None:
        says = "null (not compressed)" if manifest.compression is None else repr(manifest.compression)
        raise DataError(Problem(path, "compression", (
            f"the file is {found}, but the manifest {manifest.path} says compression {says}: fix the manifest's "
            "compression or rewrite the file (a file that disagrees with its manifest is never skipped)")))


def file_table(config: LoaderConfig) -> FileTable:
    """Sizes and counts of every data file, read now (local files: one stat; GZIP ones 4 bytes more)."""
    manifest = config.dataset.manifest
    sizes, expected, counts = [], [], []
    for path in config.dataset.files:
        entry = manifest.entry(path)
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


def _reason(check: _EndCheck, state, facts):
    """Whether a file's end does not add up, and why in words (a bool and a string tensor).

    ``state`` is the scan state (consumed, count, damaged, ended); ``facts`` the file's size, expected bytes,
    expected records and retry bound.

    The first applicable reason wins. Few graph nodes on purpose: every node is
    paid again in tracing and in instantiating the function at each ``input_fn()``
    (docs/decisions/performance.md), and this runs once per file.
    """
    consumed, count, damaged, ended = state
    size, expected_bytes, expected_count, _ = tf.unstack(facts)
    unread, manifest_path = tf.logical_not(ended), check.manifest_path
    stream = {"gzip": "GZIP", "zlib": "ZLIB"}.get(check.compression)
    if stream:
        broken = (f"a record or the {stream} stream is damaged there (is the file {stream}-compressed, as the "
                  "manifest says?)")
    else:
        broken = ("a record frame or checksum is damaged there, or the file ends inside a record (is it a "
                  "TFRecord file, and uncompressed, as the manifest says?)")
    conditions = [unread, damaged]
    texts = [tf.constant("the file could not be read to its end: it cannot be opened (deleted, moved or made "
                         "unreadable after the pipeline was built?)"), tf.constant(broken)]
    if stream == "GZIP":
        conditions.append(tf.not_equal(consumed % 2**32, expected_bytes) & (expected_bytes >= 0))
        texts.append(tf.strings.format(
            "the GZIP trailer records {} bytes of records (modulo 2**32), but the stream gave {}: the file is cut or "
            "lacks its trailer (several GZIP streams concatenated into one file also look like this)",
            (expected_bytes, consumed)))
    elif not stream:
        conditions.append(tf.not_equal(consumed, expected_bytes) & (expected_bytes >= 0))
        texts.append(tf.strings.join([tf.strings.format("the file is {} bytes, but its records end at byte {}: ",
                                                        (size, consumed)),
                                      tf.where(consumed < size, "the rest is not a whole record (the file was cut "
                                               "inside a record header, or has bytes appended)",
                                               "the file changed while it was read")]))
    conditions.append(tf.not_equal(count, expected_count) & (expected_count >= 0))
    texts.append(tf.strings.join([
        "the manifest ", manifest_path, tf.strings.format(" lists {} records for this file, but {} were read ",
                                                          (expected_count, count)),
        tf.where(count < expected_count, "(the file was cut at a record boundary, or changed after the manifest was "
                 "written)", "(records were added after the manifest was written)")]))
    flags = tf.stack(conditions)
    first = tf.argmax(tf.cast(flags, tf.int32), output_type=tf.int32)  # the first true one (0 when none is)
    return tf.reduce_any(flags), tf.gather(tf.stack(texts), first)


class Reader:
    """Reads a config's data files with their ends checked; one per ``build_input_fn``.

    Holds what is known of the files (:class:`FileTable`) and, under
    ``on_corrupt: skip_file``, the :class:`SkipCounter` every dataset built from it adds to.
    """

    def __init__(self, config: LoaderConfig):
        self.config = config
        for path in config.dataset.files:  # once, when build_input_fn reads the files: the first KiB of each
            if url_scheme(path) is None:
                _check_compression(path, config.dataset.manifest)
        self.table = file_table(config)
        self.skipped = SkipCounter(self.table) if config.reading.on_corrupt == "skip_file" else None
        # Every file's size_bytes under on_corrupt: fail: each file's size is checked as it opens, instead of
        # accounting for its end (read/proven.py); None: the accounting.
        self.listed = listed_sizes(config)
        # A global shuffle reads by offset: its indexes are loaded and checked here, once (ManifestError if stale).
        self.by_offset = OffsetReader(config) if global_order.enabled(config) else None

    def refresh(self) -> None:
        """Read the files' sizes again: each dataset built checks the files as they are when it is built."""
        self.table = file_table(self.config)
        if self.skipped is not None:
            self.skipped.table = self.table

    def blocks(self, filename: tf.Tensor, index: tf.Tensor, block: int, then=None,
               by_record: bool = False) -> tf.data.Dataset:
        return checked_blocks(self, filename, index, block, then=then, by_record=by_record)

    def record_names(self, file_index: tf.Tensor, record: tf.Tensor) -> naming.RecordNames:
        """Each record's name (naming.record_names), so that parse errors and checks say which record of which
        file."""
        return naming.record_names(self.table.names, file_index, record)

    def block_names(self, file_index: tf.Tensor, first: tf.Tensor, count: tf.Tensor) -> BlockNames:
        """The ``count`` records of a block of one file, F its first, named as a block (naming.py): parse
        errors still name the record (runtime/translate.py), at no string built per record."""
        return BlockNames(tf.gather(tf.constant(self.table.names), file_index), first, count,
                          self.token(file_index))

    def token(self, file_index: tf.Tensor) -> tf.Tensor:
        """The token (naming.token) of the data file ``file_index`` counts in: what names its records."""
        return tf.gather(tf.constant(naming.tokens(tuple(self.table.names))), file_index)


# What the end-of-file scan walks: data blocks numbered 0, 1, ... and two marker blocks after them.
RECOVER, CHECK = -1, -2


def _bounded(records: tf.data.Dataset, limit: tf.Tensor) -> tf.data.Dataset:
    """``(n, record)``: ``records`` numbered, with errors ignored, at most ``limit`` elements or errors in all.

    Zip asks the range first, so each error swallowed still uses one number:
    a file that cannot be opened (TensorFlow's reader then retries it without
    end) stops after ``limit`` tries, and the end check reports it. The numbers
    stay in the element (no map drops them: one traced function less).
    """
    return tf.data.Dataset.zip((tf.data.Dataset.range(limit), records)).ignore_errors()


def _fast_blocks(records: tf.data.Dataset, block: int, limit: tf.Tensor) -> tf.data.Dataset:
    """``(n, serialized [k])``: blocks numbered 0, 1, ... with ignore_errors after batching, then the RECOVER and
    CHECK marker blocks (empty).

    An error drops the block it happens in; at the RECOVER marker those records
    are read again (see ``checked_blocks``) when the file's bytes do not add up.
    Costs nothing per record beyond ``batch``.
    """
    markers = tf.data.Dataset.from_tensor_slices((tf.constant([RECOVER, CHECK], tf.int64), tf.zeros([2, 0], tf.string)))
    return _bounded(records.batch(block), limit // block + 2).concatenate(markers)


def _recover(records: tf.data.Dataset, block: int, take):
    """``(serialized, swallowed, ended)`` of the first ``take`` (at most ``block``) of ``records`` read with errors
    ignored: the good records up to the first error, whether an error stopped them, whether the read got to
    the end (else the file cannot be opened). Records and an end flag are numbered before ``ignore_errors``: TensorFlow's reader
    moves on after an error, so an error swallowed shows as a gap at the flag. No function is traced here."""
    flagged = tf.data.Dataset.zip((records.take(take), tf.data.Dataset.from_tensors(False).repeat())).concatenate(
        tf.data.Dataset.from_tensors((tf.constant(""), True)))
    # A sentinel numbered -1 comes last, so that the batch is never empty (a file that cannot be opened
    # uses up every number with errors).
    sentinel = tf.data.Dataset.from_tensors((tf.constant(-1, tf.int64), (tf.constant(""), False)))
    numbers, (serialized, flags) = _bounded(flagged, tf.constant(block + 2, tf.int64)).concatenate(sentinel).batch(
        block + 3).get_single_element()
    read = tf.size(numbers) - 1  # without the sentinel
    ended = tf.reduce_any(flags)  # the end flag, when read, is the last before the sentinel
    kept = read - tf.cast(ended, tf.int32)
    swallowed = ended & tf.not_equal(tf.reduce_max(numbers), tf.cast(read, tf.int64) - 1)
    return serialized[:kept], swallowed, ended


def _exact_blocks(records: tf.data.Dataset, block: int, limit: tf.Tensor) -> tf.data.Dataset:
    """Like :func:`_fast_blocks` for files whose size cannot be checked (ZLIB, unknown sizes).

    Records and an end flag are numbered before and after ``ignore_errors``:
    TensorFlow's reader moves on to the next file after an error, so a
    swallowed error shows as a gap between the two numbers at the flag. This works
    record by record, not block by block, which is why it is not the default path.
    Elements ``(after [k], (before [k], (serialized [k], flags [k])))``, cut by the scan
    step (no map stage), then a CHECK marker block.
    """
    flagged = tf.data.Dataset.zip((records, tf.data.Dataset.from_tensors(False).repeat())).concatenate(
        tf.data.Dataset.from_tensors((tf.constant(""), True)))
    numbered = tf.data.Dataset.zip((tf.data.Dataset.range(2**62), _bounded(flagged, limit + 2))).batch(block)
    marker = tf.constant([CHECK], tf.int64)
    return numbered.concatenate(tf.data.Dataset.from_tensors(
        (marker, (marker, (tf.zeros([0], tf.string), tf.zeros([0], tf.bool))))))


def _opened(filename: tf.Tensor) -> tf.data.Dataset:
    """One element, after the file was opened and (if it has any) one byte read, outside ignore_errors.

    TensorFlow's reader retries a file it cannot open without moving on, so
    under ``ignore_errors`` a file deleted or unreadable after the build would
    spin forever. Here it fails at once with TensorFlow's error, which begins
    with the path (runtime/translate.py turns it into a DataError).
    """
    probe = file_readers.fixed_length(filename, 1, buffer_size=1).take(1)
    return tf.data.Dataset.from_tensors(filename).map(
        as_written(lambda f: probe.reduce(tf.constant(0, tf.int64), as_written(lambda n, _: n + 1))))


def exact_path(table: FileTable) -> bool:
    """Whether the files need the exact (slower) path: some file's size cannot be checked."""
    return any(e == UNKNOWN for e in table.expected_bytes)


@dataclasses.dataclass(frozen=True)
class _EndCheck:
    """What the end-of-file step depends on besides its tensors."""

    exact: bool
    compression: str | None  # "gzip", "zlib" or None: how sizes are checked
    tf_compression: str  # TFRecordDataset's compression_type, to read a file again
    read_buffer: int
    block: int
    on_corrupt: str
    manifest_path: str


def _advance(consumed, count, serialized):
    """The end-of-file scan's byte and record counts after the block ``serialized``."""
    size = tf.size(serialized, out_type=tf.int64)
    return consumed + tf.reduce_sum(tf.cast(tf.strings.length(serialized), tf.int64)) + FRAME_BYTES * size, \
        count + size


def _within_count(filename, count, facts, serialized, manifest_path: str):
    """``serialized``, after failing (under either policy) when the file holds more records than the
    manifest lists: the manifest disagrees with the data, which is never skipped nor counted negatively."""
    listed = facts[2]
    message = tf.strings.join(naming.record_name_parts(filename, listed) + [
        ": the manifest ", manifest_path, " lists ", tf.strings.as_string(listed), " records for this file, but it "
        "holds more (records were added after the manifest was written: `batchloaders manifest DIR` writes it again)"])
    over = tf.debugging.Assert(tf.logical_not((count > listed) & (listed >= 0)), [message], summarize=1)
    with tf.control_dependencies([over]):
        return tf.identity(serialized)


def _kept_whole(output: tf.Tensor) -> None:
    """The conditional that gave ``output`` stays a call of its branch functions, instead of being lowered into
    the step's graph when the step is instantiated: each file's scan instantiates the step when the file opens,
    and the lowered branches (the recovery's dataset read, the end-of-file report) were a third of a pipeline's
    first batch (docs/decisions/performance.md); a branch is now instantiated when it runs, at a file's end.
    TensorFlow lowers every tf.cond inside a function by default, and has no public switch for this."""
    op = output.op
    while op.type == "Identity":
        op = op.inputs[0].op
    if op.type in ("If", "StatelessIf"):
        op._set_attr("_lower_using_switch_merge", attr_value_pb2.AttrValue(b=False))  # noqa: SLF001


def _end_report(check: _EndCheck, skipped: SkipCounter | None, filename, facts, state, at_check):
    """At the CHECK marker (``at_check``), check the file's end; fail, or warn and count, when it does not add
    up. ``state`` is the scan state (consumed, count, damaged, ended); ``facts`` the file's size, expected
    bytes, expected records and retry bound. Returns a bool tensor to depend on."""
    consumed, count, _, _ = state
    problem, reason = _reason(check, state, facts)
    problem = problem & at_check
    message = tf.strings.join([
        filename, tf.strings.format(f": {naming.MARKER} at byte {{}}", consumed),
        tf.where(count > 0, tf.strings.format(", after record {} (the last good one; records count from 0)",
                                              count - 1), ", before the first record"),
        ": ", reason])
    if check.on_corrupt == "fail":
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


def _exact_step(check: _EndCheck, skipped: SkipCounter | None):
    """The end-of-file step over :func:`_exact_blocks`' elements: records numbered before and after
    ``ignore_errors``, the end flag read last; the CHECK marker runs the report."""
    def step(state, element, filename, facts):
        consumed, count, damaged, ended = state
        after, (before, (serialized, flags)) = element
        reached = tf.reduce_any(flags)  # the end flag, read last
        serialized = serialized[:tf.size(serialized) - tf.cast(reached, tf.int32)]
        consumed, count = _advance(consumed, count, serialized)
        damaged = damaged | (reached & tf.not_equal(before[-1], after[-1]))
        ended = ended | reached
        checked = tf.cond(tf.equal(after[0], CHECK),
                          lambda: _end_report(check, skipped, filename, facts, (consumed, count, damaged, ended),
                                              tf.constant(True)),
                          lambda: tf.constant(False))
        _kept_whole(checked)
        with tf.control_dependencies([checked]):
            serialized = tf.identity(serialized)
        return (consumed, count, damaged, ended), _within_count(filename, count, facts, serialized,
                                                                check.manifest_path), state[1]
    return step


def _fast_step(check: _EndCheck, skipped: SkipCounter | None):
    """The end-of-file step over :func:`_fast_blocks`' elements. One conditional: blocks only count, the two
    markers at the file's end do the rest."""
    def at_marker(state, n, filename, facts):
        # The fast path drops the block an error happens in; the file's bytes then fall short, and the
        # good records of that block (fewer than ``block``) are read again up to the damage.
        consumed, count, damaged, ended = state
        short = tf.equal(n, RECOVER) & tf.not_equal(consumed % 2**32 if check.compression == "gzip" else consumed,
                                                     facts[1])
        records = file_readers.records(filename, check.tf_compression, check.read_buffer)
        again, swallowed, to_end = _recover(records.skip(count), check.block,
                                            tf.where(short, tf.constant(check.block, tf.int64), 0))
        reached = tf.where(short, to_end, tf.equal(n, RECOVER))
        state = (*_advance(consumed, count, again), damaged | swallowed, ended | reached)
        checked = _end_report(check, skipped, filename, facts, state, tf.equal(n, CHECK))
        with tf.control_dependencies([checked]):
            return state, tf.identity(again)

    def step(state, element, filename, facts):
        consumed, count, damaged, ended = state
        n, serialized = element
        state, serialized = tf.cond(n < 0, lambda: at_marker(state, n, filename, facts),
                                    lambda: ((*_advance(consumed, count, serialized), damaged, ended), serialized))
        _kept_whole(serialized)
        return state, _within_count(filename, state[1], facts, serialized, check.manifest_path), count
    return step


def _end_step(check: _EndCheck, skipped: SkipCounter | None):
    """The end-of-file check's share of the scan step: ``(state, element, filename, facts) -> (state,
    serialized, first)``; ``facts`` are the file's size, expected bytes, expected records and retry bound."""
    return (_exact_step if check.exact else _fast_step)(check, skipped)


def checked_blocks(reader: Reader, filename: tf.Tensor, index: tf.Tensor, block: int, *, then=None,
                   by_record: bool = False) -> tf.data.Dataset:
    """The records of one data file in blocks ``{"serialized": [k], "first": index of the block's first record}``.

    Every block but the last holds at most ``block`` records; empty blocks are
    left out. The file's end is checked when the iterator asks for the block
    after the last, so every good record is delivered before an error.
    ``index`` is the file's position in ``config.dataset.files``. ``then``, if
    given, turns each block into what the dataset yields instead, in the same
    function call (each tf.data function call has a fixed cost, a real share of a
    block's work: docs/decisions/performance.md). ``by_record``: every output of ``then`` holds the block's
    records along its first axis, so an empty block is one with none there.

    Built for few graph nodes: each is paid again at every ``input_fn()``
    (tracing, then instantiating the function when the iterator starts). ``reader``: the config, the files'
    table and the skip counter (under ``on_corrupt: skip_file``).

    When the reader's manifest lists every file's size under ``on_corrupt: fail`` (``reader.listed``), the
    blocks are read/proven.py's instead: the same blocks, the file's size checked when it opens and when its
    records end, no accounting; a damaged frame there fails the block it is in, so the records of that block
    before the damage are not delivered.
    """
    config, table, skipped = reader.config, reader.table, reader.skipped
    if reader.listed is not None:
        return proven_blocks(config, reader.listed, filename, index, block, then)
    compression = table.compression
    exact = exact_path(table)
    tf_compression = config.dataset.manifest.tf_compression

    def open_records():
        return file_readers.records(filename, tf_compression, config.reading.num_read_buffer_bytes)

    # At most this many records fit the file (deflate expands at most 1032-fold); unknown size: no bound.
    expansion = 1 if compression is None else 1032
    limits = [size * expansion // FRAME_BYTES + 1 if size >= 0 else 2**62 for size in table.sizes]
    facts = tf.gather(tf.constant(list(zip(table.sizes, table.expected_bytes, table.counts, limits)), tf.int64,
                                  shape=[len(limits), 4]), index)
    if exact:  # no small bound on retries here (sizes unknown or compressed): open the file first
        blocks = _opened(filename).flat_map(as_written(lambda _: _exact_blocks(open_records(), block, facts[3])))
    else:
        blocks = _fast_blocks(open_records(), block, facts[3])
    # Traced into the scan's step, not called as a function of its own: the step is instantiated on the
    # single-device runtime (local_scan.py), where a nested call would be instantiated on the multi-device one.
    end_step = _end_step(_EndCheck(exact, compression, tf_compression, config.reading.num_read_buffer_bytes, block,
                                   config.reading.on_corrupt, config.dataset.manifest.path), skipped)

    def step(state, element):
        state, serialized, first = end_step(state, element, filename, facts)
        out = {"serialized": serialized, "first": first}
        if then is not None:
            out = then(out)
        # Empty blocks (the markers, mostly) are dropped, so that the loaders' block sequence (and every
        # window and hash) stays as it was before these checks: every output gets a leading axis of 1,
        # or of 0 for an empty block, which unbatch below drops at no function call per block; outputs
        # by record go through a filter instead, which costs a call but no copy.
        if by_record:
            return state, out
        keep = tf.cast(tf.size(serialized) > 0, tf.int32)
        return state, tf.nest.map_structure(lambda t: tf.expand_dims(t, 0)[:keep], out)

    zero = tf.constant(0, tf.int64)
    # Asking for the block after the last runs the check.
    scanned = local_scan(blocks, (zero, zero, tf.constant(False), tf.constant(False)), step)
    if by_record:
        # unbatch copies every element it gives out, here a whole parsed block (docs/decisions/performance.md).
        return scanned.filter(as_written(lambda *out: tf.shape(tf.nest.flatten(out)[0])[0] > 0))
    return scanned.unbatch()
