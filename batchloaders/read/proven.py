"""Read data files whose manifest proves their end: no per-block accounting.

The end-of-file accounting (read/integrity.py) exists to catch a file that
TensorFlow's reader ends early without an error: cut at a record boundary or
inside a record header. A file that is, when it opens, the size the manifest's
``size_bytes`` lists was not cut: the manifest's writer reads a file whole and
refuses a damaged one. So under ``on_corrupt: fail``, when the manifest lists
every file's size (local, uncompressed files), each file's size is checked when
it opens, and its records are read in plain blocks, with no scan step per
block. What is left to TensorFlow's reader:

* a damaged frame or checksum, or a file that ends inside a record's payload:
  its error (which names no file) is placed by ``runtime/translate.py``, which
  reads the pipeline's files again;
* a file cut or rewritten after it opened: inside a payload, as above; at a
  record boundary or inside a header, nothing here sees it
  (docs/damaged-data.md says what does).

``on_corrupt: skip_file`` must count what it skips, and sizes not listed prove
nothing: both keep the accounting.
"""
from __future__ import annotations

import tensorflow as tf

from batchloaders.config.datasets import url_scheme
from batchloaders.core.model import LoaderConfig
from batchloaders.read import naming
from batchloaders.transform.graphs import as_written

# Tries of the size probe's reader before it gives up (a file that cannot be opened is retried).
_PROBE_TRIES = 3
# Stands for the file's size in the message of a size that differs from the manifest's (see size_checked).
SIZE_NOW = "<size now>"


def listed_sizes(config: LoaderConfig) -> tuple[int, ...] | None:
    """Each file's ``size_bytes`` when the manifest proves every file's end; None when the accounting is
    needed: ``on_corrupt`` other than ``fail``, a compressed dataset, a remote file, a size not listed."""
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


def size_checked(filename: tf.Tensor, listed: tf.Tensor, manifest_path: str) -> tf.Tensor:
    """``filename``, after failing when the file is not ``listed`` bytes now: the error begins with the
    path and says the size listed; ``runtime/translate.py`` puts the size found in place of :data:`SIZE_NOW`
    (no op gives a file's size: reading it whole to measure it could take more memory than there is)."""
    expected = tf.cast(listed > 0, tf.int64)  # bytes before the last listed - 1: the first one, and no more
    found = _bytes_before(filename, tf.maximum(listed - 1, 0))
    message = tf.strings.join([
        filename, f": {naming.MARKER} at byte ", tf.strings.as_string(listed), ": the manifest ", manifest_path,
        " lists ", tf.strings.as_string(listed), f" bytes for this file (size_bytes), but it is {SIZE_NOW} bytes "
        "when it is opened: it was cut, appended to or replaced after the manifest was written (`batchloaders "
        "verify` says what changed, `batchloaders manifest DIR` records it anew)"])
    checked = tf.debugging.Assert(tf.equal(found, expected), [message], summarize=1)
    with tf.control_dependencies([checked]):
        return tf.identity(filename)


def proven_blocks(config: LoaderConfig, listed: tuple[int, ...], filename: tf.Tensor, index: tf.Tensor,
                  block: int, then=None) -> tf.data.Dataset:
    """The records of one data file in blocks ``{"serialized": [k], "first": index of the block's first
    record}`` (every block but the last holds ``block`` records), after the file's size is checked
    against ``listed[index]``; ``then``, if given, turns each block into what the dataset yields. The
    blocks (and so every batch) are those of ``integrity.checked_blocks``."""
    size = tf.gather(tf.constant(listed, tf.int64), index)
    filename = size_checked(filename, size, config.dataset.manifest.path)
    records = tf.data.TFRecordDataset(filename, buffer_size=config.reading.num_read_buffer_bytes)
    blocks = tf.data.Dataset.zip({"serialized": records.batch(block),
                                  "first": tf.data.Dataset.range(0, 2**62, block)})
    return blocks if then is None else blocks.map(as_written(then))
