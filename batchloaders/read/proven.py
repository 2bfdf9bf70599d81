"""Read data files whose manifest proves their end: no per-block accounting.

The end-of-file accounting (read/integrity.py) exists to catch a file that
TensorFlow's reader ends early without an error: cut at a record boundary or
inside a record header. A file that is the size the manifest's ``size_bytes``
lists was not cut: the manifest's writer reads a file whole and refuses a
damaged one. So under ``on_corrupt: fail``, when the manifest lists every
file's size (local, uncompressed files), each file's size is checked twice,
when it opens and again when its last record has been read, and its records
are read in plain blocks, with no scan step per block. Each check is a
``DataError`` naming the file, the size listed and the size found. Between
the two:

* a file cut at a record boundary or inside a header while the run reads it
  is a size that differs at its end: every record read before the cut has
  been delivered (the records after it are not there to deliver);
* a damaged frame or checksum, or a file that ends inside a record's payload,
  is TensorFlow's reader error, which names no file: ``runtime/translate.py``
  places it by reading the pipeline's files again; the block holding the
  damage (a block holds up to 1,024 records, fewer when they are large) is
  not delivered;
* a file rewritten at the same size is not seen, nor a number of records
  other than the manifest's ``num_records`` in a file of the listed size (the
  independent loader's batch count sees more or fewer records; ``batchloaders
  verify`` compares each file's SHA-256).

``on_corrupt: skip_file`` must count what it skips, and sizes not listed prove
nothing: both keep the accounting. A global shuffle reads records by offset
(read/offset_reader.py), not in blocks: the choice does not apply to it.
"""
from __future__ import annotations

import tensorflow as tf

from batchloaders.config.datasets import url_scheme
from batchloaders.core.model import LoaderConfig
from batchloaders.read import global_order, naming
from batchloaders.transform.graphs import as_written
from batchloaders.transform.inline_map import inline_map

# Tries of the size probe's reader before it gives up (a file that cannot be opened is retried).
_PROBE_TRIES = 3
# Stands for the file's size in the message of a size that differs from the manifest's (see size_checked).
SIZE_NOW = "<size now>"
# When each check runs, as its message says it.
OPENED = "when it is opened"
ENDED = "when its last record has been read"
_WHY = {OPENED: "it was cut, appended to or replaced after the manifest was written",
        ENDED: "it was cut, appended to or replaced while the run read it"}


def listed_sizes(config: LoaderConfig) -> tuple[int, ...] | None:
    """Each file's manifest ``size_bytes``, when the manifest proves every file's end.

    Args:
        config: the checked config (one source's, for a mixture).

    Returns:
        The sizes in the order of ``config.dataset.files``; None when the accounting is needed:
        ``on_corrupt`` other than ``fail``, a compressed dataset, a remote file, a size not listed.
    """
    manifest = config.dataset.manifest
    if config.reading.on_corrupt != "fail" or manifest.compression is not None:
        return None
    sizes = []
    for path in config.dataset.files:
        entry = manifest.entry(path)
        if url_scheme(path) is not None or entry is None or entry.size_bytes is None:
            return None
        sizes.append(entry.size_bytes)
    return tuple(sizes)


def reads_proven(config: LoaderConfig) -> bool:
    """Whether the pipelines of ``config`` read its files on this path (rather than with the accounting).

    Args:
        config: the checked config (one source's, for a mixture).

    Returns:
        True when the files' sizes prove their ends and the records are read in blocks (no global shuffle).
    """
    return listed_sizes(config) is not None and not global_order.enabled(config)


def _bytes_before(filename: tf.Tensor, footer: tf.Tensor) -> tf.Tensor:
    """How many bytes the file holds before its last ``footer`` ones, up to 2 (0 when it is shorter, or
    cannot be opened). Reads at most its first 2 bytes (a header would be read through, not sought past); no
    function is traced (this runs as each file opens)."""
    probe = tf.data.FixedLengthRecordDataset(filename, record_bytes=1, footer_bytes=footer, buffer_size=1)
    # Numbered before ignore_errors, so that a file that cannot be opened uses up the tries.
    found = tf.data.Dataset.zip((tf.data.Dataset.range(_PROBE_TRIES), probe.take(2))).ignore_errors()
    sentinel = tf.data.Dataset.from_tensors((tf.constant(-1, tf.int64), tf.constant("")))
    numbers, _ = found.concatenate(sentinel).batch(_PROBE_TRIES + 1).get_single_element()
    return tf.size(numbers, out_type=tf.int64) - 1


def size_checked(filename: tf.Tensor, listed: tf.Tensor, manifest_path: str, when: str = OPENED) -> tf.Tensor:
    """``filename``, after failing when the file is not ``listed`` bytes now.

    No op gives a file's size (reading it whole to measure it could take more memory than there is): the
    probe reads the file's first bytes with all but the listed size's last byte as its footer, so it finds
    exactly one byte when the file is the listed size.

    Args:
        filename: the data file's path (a scalar string tensor).
        listed: the size the manifest lists for it (a scalar int64 tensor).
        manifest_path: the manifest's path, for the message.
        when: :data:`OPENED` or :data:`ENDED`, for the message.

    Returns:
        ``filename``, once the check has passed. When it fails, the assertion's message begins with the
        path and says the size listed; ``runtime/translate.py`` puts the size found in place of
        :data:`SIZE_NOW`.
    """
    expected = tf.cast(listed > 0, tf.int64)  # bytes before the last listed - 1: the first one, and no more
    found = _bytes_before(filename, tf.maximum(listed - 1, 0))
    message = tf.strings.join([
        filename, f": {naming.MARKER} at byte ", tf.strings.as_string(listed), ": the manifest ", manifest_path,
        " lists ", tf.strings.as_string(listed), f" bytes for this file (size_bytes), but it is {SIZE_NOW} bytes "
        f"{when}: {_WHY[when]} (`batchloaders verify` says what changed, `batchloaders manifest DIR` records "
        "it anew)"])
    checked = tf.debugging.Assert(tf.equal(found, expected), [message], summarize=1)
    with tf.control_dependencies([checked]):
        return tf.identity(filename)


def _end_checked(filename: tf.Tensor, listed: tf.Tensor, manifest_path: str) -> tf.data.Dataset:
    """No block: asked for after the file's last block, it checks the file's size again (a file cut at a record
    boundary or inside a header while the run read it ends early without an error from TensorFlow's reader)."""
    empty = tf.data.Dataset.from_tensors({"serialized": tf.zeros([0], tf.string), "first": tf.constant(0, tf.int64)})

    def checked(block):
        with tf.control_dependencies([size_checked(filename, listed, manifest_path, ENDED)]):
            return tf.nest.map_structure(tf.identity, block)

    # Run in the thread that reaches the file's end: run through a plain map's executor, which hands the
    # probe's ops to the inter-op pool the pipeline's own threads use, the check stalled whole epochs.
    return (inline_map(empty, checked) or empty.map(as_written(checked))).filter(as_written(lambda _: False))


def proven_blocks(config: LoaderConfig, listed: tuple[int, ...], filename: tf.Tensor, index: tf.Tensor,
                  block: int, then=None) -> tf.data.Dataset:
    """The records of one data file in blocks, its size checked when it opens and when its records end.

    The blocks (and so every batch) are those of ``integrity.checked_blocks``.

    Args:
        config: the checked config (one source's, for a mixture).
        listed: :func:`listed_sizes` of ``config``.
        filename: the data file's path (a scalar string tensor).
        index: its position in ``config.dataset.files`` (a scalar int64 tensor).
        block: records per block.
        then: if given, turns each block into what the dataset yields (never called on the end's check).

    Returns:
        Blocks ``{"serialized": [k], "first": index of the block's first record}``: every block but the last
        holds ``block`` records; or what ``then`` makes of each.
    """
    size = tf.gather(tf.constant(listed, tf.int64), index)
    manifest_path = config.dataset.manifest.path
    opened = size_checked(filename, size, manifest_path)
    records = tf.data.TFRecordDataset(opened, buffer_size=config.reading.num_read_buffer_bytes)
    blocks = tf.data.Dataset.zip({"serialized": records.batch(block),
                                  "first": tf.data.Dataset.range(0, 2**62, block)})
    # Before ``then``: the check yields nothing, so ``then`` never sees it.
    blocks = blocks.concatenate(_end_checked(filename, size, manifest_path))
    return blocks if then is None else blocks.map(as_written(then))
