"""Records of local, indexed TFRecord files read at their offsets, a batch of record ids at a time.

The ids are global (files in the config's order, each file's records in order). One call takes a
vector of ids and gives their payloads in that order: a NumPy function slices each record out of a
read-only memory map of its file and joins the slices; TensorFlow then cuts the joined bytes into
records with one vectorized ``substr``. Per record that costs a slice in Python instead of a
``TFRecordDataset`` op per record (about 100 microseconds each: docs/decisions/record-index.md).

Each record's frame header is checked against the index (its length field and that field's
checksum are where the index says, with the length the index implies): a data file changed after
its index was written fails there, naming the file and the record. Payload checksums are not
recomputed on this path (``batchloaders verify`` and sequential reading check them).

Local files only: a memory map needs a file of this machine's file system. A file cut while the run reads
it is a DataError when the cut comes before a call's size check or before the file's map is opened; a cut
that lands while a call is copying from an open map can still end the process (SIGBUS): the check before
each call narrows that window and cannot close it.
"""
from __future__ import annotations

import mmap
import os
import threading

import numpy as np
import tensorflow as tf

from batchloaders.read.framing import HEADER_BYTES, masked_crc32c
from batchloaders.read.record_index import load_index
from batchloaders.spec.model import LoaderConfig


class OffsetReader:
    """The indexes of a config's data files, loaded and checked once (ManifestError when one is missing or
    stale: record_index.load_index), and the maps of the files, opened on first use."""

    def __init__(self, config: LoaderConfig):
        manifest = config.dataset.manifest
        self.paths = tuple(config.dataset.files)
        indexes = [load_index(path, manifest) for path in self.paths]
        self.counts = np.array([ix.num_records for ix in indexes], np.int64)
        self.starts = np.concatenate([[0], np.cumsum(self.counts)]).astype(np.int64)
        self.offsets = np.concatenate([ix.offsets for ix in indexes] or [np.zeros(0, np.int64)]).astype(np.int64)
        self.lengths = np.concatenate([ix.lengths for ix in indexes] or [np.zeros(0, np.int64)]).astype(np.int64)
        self.sizes = [ix.data_size for ix in indexes]
        self._maps: dict[int, np.ndarray] = {}
        self._lock = threading.Lock()

    @property
    def num_records(self) -> int:
        return int(self.starts[-1])

    def _map(self, file: int) -> np.ndarray:
        found = self._maps.get(file)
        if found is None:
            with self._lock:
                found = self._maps.get(file)
                if found is None:
                    with open(self.paths[file], "rb") as f:
                        size = os.fstat(f.fileno()).st_size
                        found = (np.frombuffer(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ), np.uint8)
                                 if size else np.zeros(0, np.uint8))
                    self._maps[file] = found
        return found

    def locate(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Global ids -> (file, record in file)."""
        files = np.searchsorted(self.starts, ids, side="right") - 1
        return files, ids - self.starts[files]

    def frames(self, ids: np.ndarray) -> tuple[bytes, np.ndarray, bytes]:
        """(the records' frames without their trailing checksums, joined; their payload lengths; a problem
        'path: record N: text' or b'')."""
        ids = np.asarray(ids, np.int64).reshape(-1)
        files, records = self.locate(ids)
        offsets, lengths = self.offsets[ids], self.lengths[ids]
        parts = []
        try:
            # A file cut while the run reads it: reading its map past the new end would kill the process (SIGBUS).
            for file in np.unique(files).tolist():
                cut = self._cut(file)
                if cut:
                    return b"", lengths, self._problem(file, records[int(np.flatnonzero(files == file)[0])], cut)
            for file, offset, length in zip(files.tolist(), offsets.tolist(), lengths.tolist()):
                parts.append(self._map(file)[offset:offset + HEADER_BYTES + length])
        except OSError as error:
            bad = len(parts)
            return b"", lengths, self._problem(files[bad], records[bad], f"the file cannot be read "
                                                                         f"({error.strerror or error})")
        joined = np.concatenate(parts) if parts else np.zeros(0, np.uint8)
        heads = np.cumsum(np.concatenate([[0], lengths[:-1] + HEADER_BYTES])) if len(ids) else np.zeros(0, np.int64)
        sizes = np.array([len(p) for p in parts], np.int64)
        bad = np.flatnonzero(sizes != lengths + HEADER_BYTES)
        if not bad.size and len(ids):
            fields = joined[heads[:, None] + np.arange(8)].copy().view("<u8").reshape(-1)
            bad = np.flatnonzero(fields.astype(np.int64) != lengths)
        if not bad.size and len(ids):  # the length field's checksum, for the first record of each call
            head = joined[:HEADER_BYTES].tobytes()
            if int.from_bytes(head[8:12], "little") != masked_crc32c(head[:8]):
                bad = np.array([0])
        if bad.size:
            k = int(bad[0])
            # A file cut between the size check and its first mapping reads short: say so, not "changed".
            return b"", lengths, self._problem(files[k], records[k], self._cut(int(files[k])) or (
                f"at byte {int(offsets[k]):,}, where its index says it begins, there is no record frame of "
                f"{int(lengths[k]):,} bytes: the data file changed after its index was written (write the index "
                "again with `batchloaders index`, or run `batchloaders verify`)"))
        return joined.tobytes(), lengths, b""

    def _cut(self, file: int) -> str:
        """What to say of a file now shorter than its index was written for ('' when it is not)."""
        try:
            size = os.stat(self.paths[file]).st_size
        except OSError:  # gone: opening its map says so
            return ""
        if size >= self.sizes[file]:
            return ""
        return (f"the data file is {size:,} bytes, shorter than the {self.sizes[file]:,} its index was written "
                "for: it was cut while the run read it")

    def _problem(self, file, record, text: str) -> bytes:
        return f"{self.paths[int(file)]}: record {int(record)}: {text}".encode()

    def read(self, ids: tf.Tensor) -> dict:
        """``{"serialized", "file", "record"}`` of the records ``ids`` (an int64 vector), in that order."""
        joined, lengths, problem = tf.numpy_function(self.frames, [ids], (tf.string, tf.int64, tf.string),
                                                     stateful=False)
        lengths = tf.reshape(lengths, [-1])
        check = tf.debugging.Assert(tf.equal(problem, b""), [problem], summarize=1)
        with tf.control_dependencies([check]):
            starts = tf.cumsum(lengths + HEADER_BYTES, exclusive=True) + HEADER_BYTES
        serialized = tf.strings.substr(tf.reshape(joined, []), starts, lengths)
        starts_of_files = tf.constant(self.starts[:-1] if len(self.paths) else np.zeros(1, np.int64))
        file = tf.searchsorted(starts_of_files, ids, side="right", out_type=tf.int64) - 1
        return {"serialized": tf.reshape(serialized, tf.shape(ids)), "file": file,
                "record": ids - tf.gather(starts_of_files, file)}

