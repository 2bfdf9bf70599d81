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
from batchloaders.read import file_readers, global_order
from batchloaders.transform.local_map import local_map

# When each check runs, as its message says it, and what may have happened to the file before.
OPENED = "when it is opened"
ENDED = "when its last record has been read"
CHECKED = "when it was checked"  # (an empty file's two checks read the same count: which one is not told)
WHY = {OPENED: "it was cut, appended to or replaced after the manifest was written",
       ENDED: "it was cut, appended to or replaced while the run read it",
       CHECKED: "it was cut, appended to or replaced after the manifest was written"}
# Bytes each probe reads at the file's start (at most the listed size): its count tells the two checks apart in
# TensorFlow's message, "expected to contain N elements" (runtime/translate.py).
PROBE_BYTES = {OPENED: 1, ENDED: 2}


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


def size_probe(filename: tf.Tensor, listed: tf.Tensor, when: str = OPENED) -> tf.data.Dataset:
    """No block: asked for its first element, it fails unless the file is now ``listed`` bytes.

    No op gives a file's size (reading it whole to measure it could take more memory than there is), and a
    check traced as a function costs its instantiation at every file. So the probe is built of datasets
    only: ``FixedLengthRecordDataset`` reads the file's first bytes one at a time, all but the listed size's
    first :data:`PROBE_BYTES` being its footer, and finds exactly that many bytes when the file is the listed
    size (fewer when shorter, more when longer); ``assert_cardinality`` fails on any other count. A file
    that cannot be opened is the reader's own error, naming it.

    Args:
        filename: the data file's path (a scalar string tensor).
        listed: the size the manifest lists for it (a scalar int64 tensor).
        when: :data:`OPENED` or :data:`ENDED`: how many bytes the probe reads, so that the message tells the
            two checks apart.

    Returns:
        An empty dataset of blocks (``{"serialized": [0], "first"}``), to concatenate before or after the
        file's own. Its error, "Input dataset was expected to contain N elements but contained only M" (or
        "at least M"), names no file: ``runtime/translate.py`` finds the file whose size differs.
    """
    expected = tf.minimum(listed, PROBE_BYTES[when])
    found = file_readers.fixed_length(filename, 1, footer_bytes=listed - expected, buffer_size=1)
    checked = found.apply(tf.data.experimental.assert_cardinality(expected)).skip(expected)
    # The check yields nothing; "first" holds one element so that zip asks ``checked`` for its end whichever
    # component it asks first.
    return tf.data.Dataset.zip({"serialized": checked.batch(1), "first": tf.data.Dataset.range(1)})


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
    records = file_readers.records(filename, buffer_size=config.reading.num_read_buffer_bytes)
    blocks = tf.data.Dataset.zip({"serialized": records.batch(block),
                                  "first": tf.data.Dataset.range(0, 2**62, block)})
    # Before ``then``: the checks yield nothing, so ``then`` never sees them. The first runs before the
    # records' reader opens the file (it opens at the first block asked for).
    blocks = size_probe(filename, size, OPENED).concatenate(blocks).concatenate(size_probe(filename, size, ENDED))
    # (Its function is instantiated with every file: on the single-device runtime, local_map.py.)
    return blocks if then is None else local_map(blocks, then)
