"""The record index of an uncompressed TFRecord file: where each record's frame begins.

The index of data file ``F`` is the sidecar ``F.index``, or, with an ``index_dir``, ``index_dir/N.index`` where
``N`` is F's name in the dataset manifest, recorded in ``index_dir/__index_manifest__.json``
(:mod:`batchloaders.config.index_manifest`). Its bytes (little-endian)::

    bytes 0-7      magic: b"BLRIDX", a zero byte, the format version (1)
    bytes 8-15     uint64: the number of records N
    bytes 16-23    uint64: the size of the data file it indexes, in bytes
    then N uint64: the byte offset where record i's frame begins (0 for the first)

Record i's payload is ``next offset - offset - 16`` bytes long (the data file's size
stands for the offset after the last): its length field, the length's checksum and
the payload's checksum take 16 bytes. The header's size and count let a stale index be
told from its data file without reading the data file.

This module owns the format: :func:`scan_offsets` finds the frames of a data file,
:func:`encode` and :func:`decode` turn offsets into bytes and back (NumPy),
:func:`tf_offsets` reads an index inside a tf.data pipeline (no Python runs there), and
:func:`load_index` loads the index a manifest (or an index manifest) records for a data file, raising a
:class:`ManifestError` when it is missing or does not match the data file or the manifest.
"""
from __future__ import annotations

import dataclasses
import hashlib
import os

import numpy as np
import tensorflow as tf

from batchloaders.errors import ManifestError, Problem
from batchloaders.config.datasets import url_scheme, within
from batchloaders.config.index_manifest import IndexedFile, data_name, index_manifest_path, join, load_index_manifest
from batchloaders.config.manifest import INDEX_SUFFIX
from batchloaders.read.framing import FRAME_BYTES, HEADER_BYTES, count, is_record_header
from batchloaders.read.records import open_binary, tf_message
from batchloaders.core.model import DataFile, IndexFile, Manifest

VERSION = 1
MAGIC = b"BLRIDX\x00" + bytes([VERSION])
INDEX_HEADER_BYTES = 24  # magic (8), record count (8), data file size (8)
OFFSET_BYTES = 8
HASH_SHOWN = 12  # hex digits of a SHA-256 a message shows
_OFFSETS = np.dtype("<u8")


def index_path(data_path: str) -> str:
    """Where the index of ``data_path`` sits: beside it, its name with '.index' appended."""
    return data_path + INDEX_SUFFIX


class FrameError(ValueError):
    """The frames of a data file do not add up; the message says at which record and byte."""


@dataclasses.dataclass(frozen=True)
class RecordIndex:
    """The offsets of one data file's records, and the size of the data file they were found in."""

    offsets: np.ndarray  # int64 [N]
    data_size: int

    @property
    def num_records(self) -> int:
        return len(self.offsets)

    @property
    def lengths(self) -> np.ndarray:
        """int64 [N]: each record's payload length."""
        ends = np.append(self.offsets[1:], np.int64(self.data_size))
        return ends - self.offsets - FRAME_BYTES


def scan_offsets(path: str, progress=None) -> RecordIndex:
    """Walk the frames of an uncompressed TFRecord file, checking each length's checksum (payloads are
    not read: ``batchloaders verify`` checks them). FrameError where a header is damaged or the file
    ends inside a record; OSError (tf.errors.OpError for a URL) when it cannot be read."""
    offsets = []
    with open_binary(path) as f:
        size = os.fstat(f.fileno()).st_size if url_scheme(path) is None else f.size()
        at = 0
        while at < size:
            f.seek(at)
            head = f.read(HEADER_BYTES)
            if len(head) < HEADER_BYTES:
                raise FrameError(f"record {len(offsets)} at byte {at:,}: the file ends inside its header "
                                 f"({count(len(head), 'byte')} of {HEADER_BYTES}): the file was cut, or has bytes "
                                 "appended")
            if not is_record_header(head):
                raise FrameError(f"record {len(offsets)} at byte {at:,}: its length's checksum is wrong: the file is "
                                 "damaged there, or is not an uncompressed TFRecord file")
            end = at + int.from_bytes(head[:8], "little") + FRAME_BYTES
            if end > size:
                raise FrameError(f"record {len(offsets)} at byte {at:,}: its header says it ends at byte {end:,}, "
                                 f"but the file is {count(size, 'byte')}: the file was cut inside this record")
            offsets.append(at)
            at = end
            if progress is not None and len(offsets) % 4096 == 0:
                progress.advance(records=4096)
    if progress is not None:
        progress.advance(records=len(offsets) % 4096, nbytes=size)
    return RecordIndex(np.asarray(offsets, np.int64), size)


def encode(index: RecordIndex) -> bytes:
    """The bytes of an index file."""
    header = MAGIC + index.num_records.to_bytes(8, "little") + index.data_size.to_bytes(8, "little")
    return header + index.offsets.astype(_OFFSETS).tobytes()


def decode(blob: bytes) -> RecordIndex:
    """An index file's bytes read back; ValueError saying what is wrong when they are not an index of this format."""
    if len(blob) < INDEX_HEADER_BYTES or blob[:6] != MAGIC[:6]:
        # Its bytes are not quoted: the file may be anything a link or a hand edit put there.
        raise ValueError(f"it is not a record index: it does not begin with {MAGIC!r}, as a record index does")
    if blob[:8] != MAGIC:
        raise ValueError(f"it is a record index of format version {blob[7]}: this version reads version {VERSION} "
                         "(write it again with `batchloaders index`)")
    n = int.from_bytes(blob[8:16], "little")
    if len(blob) != INDEX_HEADER_BYTES + OFFSET_BYTES * n:
        raise ValueError(f"its header says {count(n, 'record')}, which takes "
                         f"{INDEX_HEADER_BYTES + OFFSET_BYTES * n:,} bytes, but it is {count(len(blob), 'byte')}")
    offsets = np.frombuffer(blob, _OFFSETS, n, INDEX_HEADER_BYTES).astype(np.int64)
    return RecordIndex(offsets, int.from_bytes(blob[16:24], "little"))


def tf_offsets(path) -> tf.Tensor:
    """int64 [N]: the record offsets of the index file ``path`` (a string or a scalar string tensor), read
    with TensorFlow ops only, so that it runs inside a tf.data pipeline. Fails (InvalidArgumentError) on a
    file that is not an index of this format or whose size disagrees with its header."""
    blob = tf.io.read_file(path)
    header = tf.io.decode_raw(tf.strings.substr(blob, 8, 16), tf.int64, little_endian=True)
    size = tf.cast(tf.strings.length(blob), tf.int64)
    checks = [
        tf.debugging.Assert(tf.equal(tf.strings.substr(blob, 0, 8), MAGIC), [
            tf.strings.join([path, f": not a record index of format version {VERSION}"])]),
        tf.debugging.Assert(tf.equal(size, INDEX_HEADER_BYTES + OFFSET_BYTES * header[0]), [
            tf.strings.join([path, ": the record index's size disagrees with its record count"])]),
    ]
    with tf.control_dependencies(checks):
        body = tf.strings.substr(blob, INDEX_HEADER_BYTES, -1)
    # decode_raw has no uint64; offsets stay far below 2**63.
    return tf.reshape(tf.io.decode_raw(body, tf.int64, little_endian=True), [-1])


def sha256_of(blob: bytes) -> str:
    return hashlib.sha256(blob).hexdigest()


def index_location(data_path: str, manifest: Manifest, index_dir: str | None = None) -> str:
    """Where the index of ``data_path`` is: beside it, or with an ``index_dir`` there, under its name in the
    manifest (:mod:`batchloaders.config.index_manifest`)."""
    if index_dir is None:
        return index_path(data_path)
    name = data_name(data_path, manifest.path) or os.path.basename(data_path)
    return join(index_dir, name + INDEX_SUFFIX)


def load_index(data_path: str, manifest: Manifest, index_dir: str | None = None) -> RecordIndex:
    """The index recorded for ``data_path``, checked against what records it and against the data file.

    Args:
        data_path: the data file.
        manifest: the dataset's manifest.
        index_dir: where the indexes were written apart from the data (``batchloaders index DIR --index-dir``),
            recorded in its index manifest; None: beside each data file, recorded in the dataset's manifest.

    Returns:
        The index.

    Raises:
        ManifestError: naming the data file and the index file, what differs and the command that writes the
            index again: no index is recorded for the data file, the index is missing, its size or SHA-256
            differs from the record of it, it was written for a data file of another size (or, apart, another
            SHA-256 than the manifest's), or it holds another record count than the manifest lists.
    """
    index, problem = check_index(data_path, manifest, index_dir)
    if problem is None:
        return index
    where = index_location(data_path, manifest, index_dir)
    dataset_dir = os.path.dirname(manifest.path) or "."
    if index_dir is None:
        entry = manifest.entry(data_path)
        raise ManifestError(Problem(manifest.path, "$.files", (
            f"data file {data_path}, index {where}: {problem}: write the index again with "
            f"`batchloaders index {dataset_dir}`"), entry.line if entry else None))
    recorded = _recorded(data_path, manifest, index_dir)
    raise ManifestError(Problem(index_manifest_path(index_dir), recorded.json_path() if recorded else "$.files", (
        f"data file {data_path}, index {where}: {problem}: write the index again with "
        f"`batchloaders index {dataset_dir} --index-dir {index_dir}`")))


def check_index(data_path: str, manifest: Manifest, index_dir: str | None = None
                ) -> tuple[RecordIndex | None, str | None]:
    """The index of ``data_path`` and None, or None and what is wrong with it (see :func:`load_index`)."""
    if index_dir is not None:
        return _check_apart(data_path, manifest, index_dir)
    entry = manifest.entry(data_path)
    if entry is None:
        return None, "the manifest lists no entry for this data file"
    if entry.index is None:
        return None, "the manifest records no index for this data file"
    blob, problem = _index_bytes(data_path, manifest)
    if problem is not None:
        return None, problem
    index, problem = _decoded(blob, entry.index, "the manifest")
    if problem is not None:
        return None, problem
    size, problem = _data_size(data_path)
    if problem is None and size != index.data_size:
        problem = _changed(size, index.data_size)
    if problem is None and index.num_records != entry.num_records:
        problem = (f"the index holds {count(index.num_records, 'record')}, but the manifest lists "
                   f"{count(entry.num_records, 'record')} for the data file")
    return (None, problem) if problem is not None else (index, None)


def _check_apart(data_path: str, manifest: Manifest, index_dir: str) -> tuple[RecordIndex | None, str | None]:
    """:func:`check_index` of an index in ``index_dir``, recorded in its index manifest."""
    if data_name(data_path, manifest.path) is None:
        return None, (f"the data file is not under the manifest's directory {os.path.dirname(manifest.path)}: "
                      "only those are indexed, by their name there")
    try:
        recorded = _recorded(data_path, manifest, index_dir, strict=True)
    except ManifestError as error:
        return None, "; ".join(f"{p.path}: {p.message}" for p in error.problems)
    if recorded is None:
        return None, f"the index manifest {index_manifest_path(index_dir)} lists no index for this data file"
    blob, problem = _apart_bytes(join(index_dir, recorded.index.name), index_dir)
    if problem is not None:
        return None, problem
    index, problem = _decoded(blob, recorded.index, "the index manifest")
    if problem is not None:
        return None, problem
    size, problem = _data_size(data_path)
    if problem is not None:
        return None, problem
    problem = next(filter(None, (
        _changed(size, recorded.size_bytes) if size != recorded.size_bytes else None,
        _changed(size, index.data_size) if size != index.data_size else None,
        _rewritten(manifest.entry(data_path), recorded),
        None if index.num_records == recorded.num_records else (
            f"the index holds {count(index.num_records, 'record')}, but the index manifest lists "
            f"{count(recorded.num_records, 'record')}"))), None)
    return (None, problem) if problem is not None else (index, None)


def _recorded(data_path: str, manifest: Manifest, index_dir: str, strict: bool = False) -> IndexedFile | None:
    """The index manifest's entry of ``data_path`` (None when it has none or, unless ``strict``, cannot be read)."""
    try:
        return load_index_manifest(index_dir).files.get(data_name(data_path, manifest.path) or "")
    except ManifestError:
        if strict:
            raise
        return None


def _rewritten(entry: DataFile | None, recorded: IndexedFile) -> str | None:
    """What the dataset manifest says of a data file that differs from what it was when it was indexed."""
    if entry is None:
        return None
    if entry.sha256 is not None and entry.sha256 != recorded.sha256:
        return (f"the manifest records SHA-256 {entry.sha256[:HASH_SHOWN]}... for the data file, but the index was "
                f"written for one of SHA-256 {recorded.sha256[:HASH_SHOWN]}...: the data file changed after the "
                "index was written")
    if entry.num_records != recorded.num_records:
        return (f"the manifest lists {count(entry.num_records, 'record')} for the data file, but the index was "
                f"written for {count(recorded.num_records, 'record')}")
    return None


def _decoded(blob: bytes, recorded: IndexFile, whose: str) -> tuple[RecordIndex | None, str | None]:
    """The index file's bytes checked against ``whose`` record of their size and SHA-256, then decoded."""
    if len(blob) != recorded.size_bytes:
        return None, (f"the index file is {count(len(blob), 'byte')}, but {whose} records "
                      f"{count(recorded.size_bytes, 'byte')}")
    digest = sha256_of(blob)
    if digest != recorded.sha256:
        return None, (f"the index file's SHA-256 is {digest[:HASH_SHOWN]}..., but {whose} records "
                      f"{recorded.sha256[:HASH_SHOWN]}...: it changed after {whose} was written")
    try:
        return decode(blob), None
    except ValueError as error:
        return None, str(error)


def _data_size(data_path: str) -> tuple[int | None, str | None]:
    try:
        return (os.stat(data_path).st_size if url_scheme(data_path) is None
                else tf.io.gfile.stat(data_path).length), None
    except OSError as error:
        return None, f"the data file cannot be read ({error.strerror or error})"
    except tf.errors.OpError as error:
        return None, f"the data file cannot be read ({tf_message(error)})"


def _changed(size: int, written_for: int) -> str:
    return (f"the data file is {count(size, 'byte')}, but the index was written for a data file of "
            f"{count(written_for, 'byte')}: the data file changed after the index was written")


def _apart_bytes(path: str, index_dir: str) -> tuple[bytes | None, str | None]:
    """The bytes of the index file ``path`` in ``index_dir`` and None, or None and why they cannot be read."""
    if url_scheme(path) is None:
        real, base = os.path.realpath(path), os.path.realpath(index_dir)
        if not within(real, base):  # a link out of the index_dir: not an index `batchloaders index` wrote
            return None, (f"the index file is a symlink to {real}, outside the index_dir {base}: expected the "
                          "index file `batchloaders index --index-dir` writes there")
    return _file_bytes(path)


def _file_bytes(path: str) -> tuple[bytes | None, str | None]:
    try:
        with open_binary(path) as f:
            return f.read(), None
    except (FileNotFoundError, tf.errors.NotFoundError):
        return None, "the index file is missing"
    except OSError as error:
        return None, f"the index file cannot be read ({error.strerror or error})"
    except tf.errors.OpError as error:
        return None, f"the index file cannot be read ({tf_message(error)})"


def _index_bytes(data_path: str, manifest: Manifest) -> tuple[bytes | None, str | None]:
    """The bytes of the index file beside ``data_path`` and None, or None and why they cannot be read."""
    if url_scheme(data_path) is not None:  # a URL (gs://, ram://) has no symlinks
        return _file_bytes(index_path(data_path))
    real, base = os.path.realpath(index_path(data_path)), os.path.dirname(os.path.abspath(manifest.path))
    if not within(real, base):  # a link out of the dataset: what it leads to is not the dataset's to read
        return None, (f"the index file is a symlink to {real}, outside the dataset directory {base}: expected the "
                      "index file `batchloaders index` writes beside its data file")
    return _file_bytes(real)
