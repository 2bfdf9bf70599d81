"""Records of indexed, uncompressed TFRecord files read at their offsets, a batch of record ids at a time.

The ids are global (files in the config's order, each file's records in order). One call takes a
vector of ids and gives their payloads in that order: a NumPy function reads each record's whole frame
through the dataset's byte source (read/positional.py: ``os.pread`` on local files, or TensorFlow's file
systems with many reads in flight and neighbouring frames fetched in one read), checks it, and joins the
frames; TensorFlow then cuts the payloads out of the joined bytes with one vectorized
``substr``. Per record that costs a read call in Python instead of a ``TFRecordDataset`` op per record
(about 100 microseconds each: docs/decisions/record-index.md).

Every record is checked as a sequential read checks it: its length field holds the length the index
gives, and both checksums (the length's and the payload's, CRC-32C) match. A damaged record, a data file
changed after its index was written, or a file cut while the run reads it (the read comes back short)
fails the call with a problem naming the file and the record. A rewrite that keeps every record's length
and framing valid escapes these checks; ``batchloaders verify`` compares each file's SHA-256 with the
manifest's and catches it.
"""
from __future__ import annotations

import errno
import warnings

import google_crc32c
import numpy as np
import tensorflow as tf

from batchloaders.errors import BatchLoaderError
from batchloaders.read import exit_gate, naming, positional, shard_cache
from batchloaders.read.cached_offsets import CachedOffsets, ReadAhead, manifest_counts, working_set_warning
from batchloaders.read.framing import FRAME_BYTES, HEADER_BYTES
from batchloaders.read.record_index import load_index
from batchloaders.read.records import tf_message
from batchloaders.core.model import LoaderConfig

_MASK_DELTA = 0xA282EAD8
_U32 = np.uint64(0xFFFFFFFF)
EXITING = "the program is exiting: the record was not read"
KEPT_OPEN = positional.KEPT_OPEN  # local files a reader keeps open between calls (read when a reader is built)


def kept_open() -> int:
    """How many local files a reader keeps open: KEPT_OPEN, or an eighth of this process's limit if that is less."""
    return positional.kept_open(KEPT_OPEN)


def masked(crcs) -> np.ndarray:
    """TFRecord's masked form of CRC-32C values (each below 2**32), as uint64."""
    crcs = np.asarray(crcs, np.uint64)
    return (((crcs >> np.uint64(15)) | (crcs << np.uint64(17))) + np.uint64(_MASK_DELTA)) & _U32


def _op_error(error: tf.errors.OpError) -> str:
    """A TensorFlow file system's error in a few words (its NotFoundError on ram:// has no message)."""
    if isinstance(error, tf.errors.NotFoundError):
        return "it is not there"
    return tf_message(error)


def _words(data: np.ndarray, at: np.ndarray, width: int) -> np.ndarray:
    """The little-endian unsigned integers of ``width`` bytes at each of ``at`` in ``data``, as uint64."""
    picked = data[at[:, None] + np.arange(width)].copy()
    return picked.view(f"<u{width}").reshape(-1).astype(np.uint64)


class OffsetReader:
    """The indexes of a config's data files, loaded and checked once (ManifestError when one is missing or
    stale: record_index.load_index), and the byte source that reads the files (ConfigError when the dataset's
    ``random_access`` cannot read them)."""

    def __init__(self, config: LoaderConfig):
        self.paths = tuple(config.dataset.files)
        self.cached = self.ahead = None
        if config.dataset.access.cache is not None:
            self._use_cache(config)
        else:
            self._use_indexes(config)
        if google_crc32c.implementation != "c":  # (installed without its compiled part: 1,000 times slower)
            warnings.warn("google-crc32c runs without its C extension here: the global shuffle checks each record's "
                          "checksum in pure Python, about 1 ms per 3 KB record; reinstall it with a wheel for this "
                          "platform (pip install --force-reinstall google-crc32c)", RuntimeWarning, stacklevel=2)

    def _use_indexes(self, config: LoaderConfig) -> None:
        """Offsets from each file's record index, loaded and checked now; the files read where they are."""
        manifest = config.dataset.manifest
        indexes = [load_index(path, manifest, config.dataset.access.index_dir) for path in self.paths]
        self.counts = np.array([ix.num_records for ix in indexes], np.int64)
        self.starts = np.concatenate([[0], np.cumsum(self.counts)]).astype(np.int64)
        self.offsets = np.concatenate([ix.offsets for ix in indexes] or [np.zeros(0, np.int64)]).astype(np.int64)
        self.lengths = np.concatenate([ix.lengths for ix in indexes] or [np.zeros(0, np.int64)]).astype(np.int64)
        self.sizes = [ix.data_size for ix in indexes]
        self.source = positional.open_source(config.dataset.access, self.paths, config.source, kept_open())

    def _use_cache(self, config: LoaderConfig) -> None:
        """The files read through their local copies in the cache; counts from the manifest, each file's offsets
        from its copy, loaded on its first read (read/cached_offsets.py)."""
        self.source = shard_cache.shared(self.paths, config.dataset.manifest, config.dataset.access.cache,
                                         config.source)
        self.cached = CachedOffsets(self.source, manifest_counts(config))
        self.counts, self.starts = self.cached.counts, self.cached.starts
        self.offsets, self.lengths, self.sizes = self.cached.offsets, self.cached.lengths, self.cached.sizes
        self.ahead = ReadAhead(config, self.source, len(self.paths))
        said = working_set_warning(config)
        if said is not None:
            warnings.warn(said, RuntimeWarning, stacklevel=2)

    @property
    def num_records(self) -> int:
        return int(self.starts[-1])

    @property
    def _fds(self) -> dict[int, int]:
        """The descriptors a local source keeps open, by file (none for another source)."""
        return getattr(self.source, "fds", {})

    def close(self) -> None:
        """Close the files opened so far (a later read opens them again)."""
        self.source.close()

    def locate(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Global ids -> (file, record in file)."""
        files = np.searchsorted(self.starts, ids, side="right") - 1
        return files, ids - self.starts[files]

    def frames(self, ids: np.ndarray, epoch: int = -1) -> tuple[bytes, np.ndarray, bytes]:
        """(the records' whole frames, joined; their payload lengths; a problem 'path: record N: text' or b'').
        ``epoch``: the (latest) epoch the ids are read for, -1 when not known."""
        ids = np.asarray(ids, np.int64).reshape(-1)
        if self.cached is not None:
            problem = self._load(ids, int(epoch))
            if problem:
                return b"", np.zeros(len(ids), np.int64), problem
        lengths = self.lengths[ids]
        with exit_gate.passing() as allowed:
            if not allowed:
                files, records = self.locate(ids[:1])
                return b"", lengths, self._problem(files[0], records[0], EXITING) if len(ids) else EXITING.encode()
            joined, problem = self._read(ids, lengths)
        return joined, lengths, problem

    def _load(self, ids: np.ndarray, epoch: int) -> bytes:
        """Through a cache: the offsets of the files ``ids`` touch loaded (their copies made), the files after
        them asked for; b'' or the problem of the first file that could not be copied, at its first record here."""
        files, records = self.locate(ids)
        touched = list(dict.fromkeys(files.tolist()))
        self.ahead.saw(touched, epoch)
        for file in touched:
            try:
                self.cached.load([file])
            except BatchLoaderError as error:  # (a DataError or ConfigError naming the file and what to do)
                first = error.problems[0]
                said = f"{first.path}: {first.message}" if first.path.startswith("$") else first.message
                return self._problem(file, records[files.tolist().index(file)], said)
        return b""

    def _parts(self, files: np.ndarray, offsets: np.ndarray, sizes: np.ndarray) -> tuple[list[bytes], int, str]:
        """(each frame's bytes in the order asked, -1, '') or ([], the place of the first frame of the first file
        that could not be read, what went wrong). The source reads every file's frames at once."""
        places = [np.flatnonzero(files == file) for file in dict.fromkeys(files.tolist())]
        got = self.source.read_many([(int(files[at[0]]), offsets[at].tolist(), sizes[at].tolist()) for at in places])
        parts: list[bytes] = [b""] * len(files)
        for at, frames in zip(places, got):
            if isinstance(frames, OSError):
                return [], int(at[0]), self._os_error(frames)
            if isinstance(frames, BatchLoaderError):
                return [], int(at[0]), frames.problems[0].message
            if isinstance(frames, Exception):
                return [], int(at[0]), f"the file cannot be read ({_op_error(frames)})"
            for k, part in zip(at.tolist(), frames):
                parts[k] = part
        return parts, -1, ""

    def _read(self, ids: np.ndarray, lengths: np.ndarray) -> tuple[bytes, bytes]:
        files, records = self.locate(ids)
        offsets, sizes = self.offsets[ids], lengths + FRAME_BYTES
        parts, failed, said = self._parts(files, offsets, sizes)
        if failed >= 0:
            return b"", self._problem(files[failed], records[failed], said)
        short = np.flatnonzero(np.fromiter(map(len, parts), np.int64, len(parts)) != sizes)
        if short.size:  # the file ends before the record does
            k, file = int(short[0]), int(files[short[0]])
            said = self._cut(file) or self._changed(int(offsets[k]), int(sizes[k]))
            return b"", self._problem(file, records[k], said)
        joined = b"".join(parts)
        bad, what = self._check(parts, joined, lengths)
        if bad is None:
            return joined, b""
        file, offset = int(files[bad]), int(offsets[bad])
        text = self._changed(offset, int(sizes[bad])) if what == "frame" else (
            f"at byte {offset:,}, its payload's checksum does not match its {int(lengths[bad]):,} bytes: the "
            "record is damaged (run `batchloaders verify` to check every file against the manifest)")
        return b"", self._problem(file, records[bad], text)

    def _os_error(self, error: OSError) -> str:
        """What to say of a file that cannot be opened or read, or, out of descriptors, what the process lacks."""
        if error.errno in (errno.EMFILE, errno.ENFILE):
            return (f"the file cannot be opened: this process has too many files open ({error.strerror}); the reader "
                    f"keeps at most {getattr(self.source, 'keep', 0)} of them open: raise the limit (ulimit -n) or "
                    "close other files")
        return f"the file cannot be read ({error.strerror or error})"

    @staticmethod
    def _check(parts: list[bytes], joined: bytes, lengths: np.ndarray) -> tuple[int | None, str]:
        """(the first record whose frame or payload fails its check, 'frame' or 'payload'), or (None, '')."""
        if not parts:
            return None, ""
        data = np.frombuffer(joined, np.uint8)
        heads = np.cumsum(np.concatenate([[0], lengths[:-1] + FRAME_BYTES])).astype(np.int64)
        length_ok = _words(data, heads, 8) == lengths.astype(np.uint64)
        header_ok = _words(data, heads + 8, 4) == masked([google_crc32c.value(p[:8]) for p in parts])
        frame_ok = length_ok & header_ok
        if not frame_ok.all():
            return int(np.flatnonzero(~frame_ok)[0]), "frame"
        payload_ok = _words(data, heads + HEADER_BYTES + lengths, 4) == masked(
            [google_crc32c.value(p[HEADER_BYTES:-4]) for p in parts])
        if not payload_ok.all():
            return int(np.flatnonzero(~payload_ok)[0]), "payload"
        return None, ""

    @staticmethod
    def _changed(offset: int, size: int) -> str:
        return (f"at byte {offset:,}, where its index says it begins, there is no record frame of {size:,} bytes: "
                "the data file changed after its index was written (write the index again with `batchloaders "
                "index`, or run `batchloaders verify`)")

    def _cut(self, file: int) -> str:
        """What to say of a file now shorter than its index was written for ('' when it is not)."""
        try:
            size = self.source.size(file)
        except (OSError, tf.errors.OpError):
            return ""
        if size >= self.sizes[file]:
            return ""
        return (f"the data file is {size:,} bytes, shorter than the {self.sizes[file]:,} its index was written "
                "for: it was cut while the run read it")

    def _problem(self, file, record, text: str) -> bytes:
        return f"{naming.record_name(self.paths[int(file)], int(record))}: {text}".encode()

    def read(self, ids: tf.Tensor, epochs: tf.Tensor | None = None) -> dict:
        """``{"serialized", "file", "record"}`` of the records ``ids`` (an int64 vector), in that order.
        ``epochs``: the epochs of the units the ids belong to (global_order.ids), which a cache's read-ahead
        follows."""
        if self.ahead is None or epochs is None:
            joined, lengths, problem = tf.numpy_function(self.frames, [ids], (tf.string, tf.int64, tf.string),
                                                         stateful=False)
        else:
            epoch = tf.reduce_max(tf.concat([tf.reshape(epochs, [-1]), [-1]], 0))
            joined, lengths, problem = tf.numpy_function(self.frames, [ids, epoch], (tf.string, tf.int64, tf.string),
                                                         stateful=False)
        lengths = tf.reshape(lengths, [-1])
        check = tf.debugging.Assert(tf.equal(problem, b""), [problem], summarize=1)
        with tf.control_dependencies([check]):
            starts = tf.cumsum(lengths + FRAME_BYTES, exclusive=True) + HEADER_BYTES
        serialized = tf.strings.substr(tf.reshape(joined, []), starts, lengths)
        starts_of_files = tf.constant(self.starts[:-1] if len(self.paths) else np.zeros(1, np.int64))
        file = tf.searchsorted(starts_of_files, ids, side="right", out_type=tf.int64) - 1
        return {"serialized": tf.reshape(serialized, tf.shape(ids)), "file": file,
                "record": ids - tf.gather(starts_of_files, file)}
