"""One data file copied into a local file: streamed, decompressed on the way, hashed and indexed in one pass.

:func:`fill` reads the source through Python's ``open`` (a local path) or TensorFlow's file systems (a URL), a
chunk at a time, so no file is ever whole in memory. It hashes and counts the source's bytes as stored (what a
manifest's ``size_bytes`` and ``sha256`` describe), inflates GZIP or ZLIB streams (one after another, as
TensorFlow's reader does), writes the uncompressed TFRecord bytes to the descriptor it is given, hashes them,
and walks their frames to find each record's offset (each length's checksum checked, as ``scan_offsets`` does).
It returns what it found; the caller compares it with the manifest and decides what to keep.
"""
from __future__ import annotations

import array
import dataclasses
import hashlib
import os
import threading
import zlib

import google_crc32c

from batchloaders.read.framing import FRAME_BYTES, HEADER_BYTES, STREAM, count
from batchloaders.read.records import open_binary

CHUNK = 1 << 20  # bytes read, inflated and written at a time
_MASK_DELTA = 0xA282EAD8
_WBITS = {"gzip": 31, "zlib": 15}


class FillProblem(ValueError):
    """The source's bytes are not a TFRecord file of the compression given; the message says where."""


class Cancelled(Exception):
    """The copy was stopped (its cache closed) before it ended."""


class WriteFailed(Exception):
    """The copy could not be written (its OSError is the cause: a full disk, an unwritable directory)."""

    def __init__(self, error: OSError):
        super().__init__(str(error))
        self.error = error


@dataclasses.dataclass(frozen=True)
class Filled:
    """What one copy found: the source as stored, and the uncompressed copy written."""

    source_size: int
    source_sha256: str
    size: int  # the copy's bytes
    sha256: str  # the copy's SHA-256
    offsets: array.array  # where each record's frame begins in the copy


def _masked(crc: int) -> int:
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


class FrameWalker:
    """Fed an uncompressed TFRecord stream's bytes in order, notes where each record's frame begins."""

    def __init__(self):
        self.offsets = array.array("q")
        self.at = 0  # bytes fed so far
        self.next = 0  # where the next frame begins
        self.head = b""  # the part of the next frame's header fed so far, when it straddles two chunks

    def feed(self, chunk: bytes) -> None:
        """Walk the frames that begin in ``chunk``.

        Args:
            chunk: the stream's next bytes.

        Raises:
            FillProblem: a record's length checksum is wrong.
        """
        end = self.at + len(chunk)
        while self.next + len(self.head) < end:
            start = self.next + len(self.head) - self.at
            self.head += chunk[start:start + HEADER_BYTES - len(self.head)]
            if len(self.head) < HEADER_BYTES:
                break
            if int.from_bytes(self.head[8:12], "little") != _masked(google_crc32c.value(self.head[:8])):
                raise FillProblem(f"record {len(self.offsets)} at byte {self.next:,} of the uncompressed data: its "
                                  "length's checksum is wrong: the file is damaged there, or is not a TFRecord file "
                                  "of the manifest's compression")
            self.offsets.append(self.next)
            self.next += int.from_bytes(self.head[:8], "little") + FRAME_BYTES
            self.head = b""
        self.at = end

    def finish(self) -> None:
        """Check that the stream ended where its last record does.

        Raises:
            FillProblem: the stream ends inside a record.
        """
        if self.head or self.next != self.at:
            raise FillProblem(f"record {len(self.offsets) - (not self.head)} ends at byte {self.next:,} of the "
                              f"uncompressed data, but the data is {count(self.at, 'byte')}: the file was cut "
                              "inside this record")


class Inflater:
    """Inflates a GZIP or ZLIB file's bytes fed in order; several streams one after another are read in turn."""

    def __init__(self, compression: str):
        self.compression = compression
        self.stream = zlib.decompressobj(_WBITS[compression])

    def feed(self, data: bytes):
        """Yield the uncompressed bytes of ``data``, at most CHUNK at a time.

        Args:
            data: the file's next bytes.

        Yields:
            Uncompressed bytes.

        Raises:
            FillProblem: the stream is damaged.
        """
        while True:
            if self.stream.eof:
                data = self.stream.unused_data
                if not data:
                    return
                self.stream = zlib.decompressobj(_WBITS[self.compression])
            try:
                out = self.stream.decompress(data, CHUNK)
            except zlib.error as error:
                raise FillProblem(f"the {STREAM[self.compression]} stream is damaged ({error})") from None
            if out:
                yield out
            if not self.stream.eof:
                data = self.stream.unconsumed_tail
                if not data and not out:  # all taken in, and nothing more held back
                    return

    def finish(self) -> None:
        """Check that the last stream ended.

        Raises:
            FillProblem: the file ends inside a stream.
        """
        if not self.stream.eof:
            raise FillProblem(f"the {STREAM[self.compression]} stream ends before its end marker and trailer: the "
                              "file was cut, or was never finished")


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    try:
        while view:
            view = view[os.write(fd, view):]
    except OSError as error:
        raise WriteFailed(error) from error


def fill(source: str, fd: int, compression: str | None, stop: threading.Event | None = None) -> Filled:
    """Copy data file ``source`` into the open file ``fd``, uncompressed, and fsync it.

    Args:
        source: the data file: a local path or a URL TensorFlow's file systems open.
        fd: a descriptor open for writing, at offset 0.
        compression: the dataset's compression: None, "gzip" or "zlib".
        stop: when set, the copy stops at its next chunk.

    Returns:
        The source's size and SHA-256 as stored, the copy's size and SHA-256, and its record offsets.

    Raises:
        FillProblem: the bytes are not a whole TFRecord file of that compression.
        Cancelled: ``stop`` was set.
        WriteFailed: the copy cannot be written.
        OSError: the source cannot be read (tf.errors.OpError for a URL).
    """
    source_hash, copy_hash, walker = hashlib.sha256(), hashlib.sha256(), FrameWalker()
    inflater = Inflater(compression) if compression else None
    source_size = 0
    with open_binary(source) as f:
        while True:
            if stop is not None and stop.is_set():
                raise Cancelled(source)
            chunk = f.read(CHUNK)
            if not chunk:
                break
            source_hash.update(chunk)
            source_size += len(chunk)
            for out in (inflater.feed(chunk) if inflater else (chunk,)):
                copy_hash.update(out)
                walker.feed(out)
                _write_all(fd, out)
    if inflater:
        inflater.finish()
    walker.finish()
    try:
        os.fsync(fd)
    except OSError as error:
        raise WriteFailed(error) from error
    return Filled(source_size, source_hash.hexdigest(), walker.at, copy_hash.hexdigest(), walker.offsets)
