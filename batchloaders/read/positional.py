"""Byte ranges of a dataset's data files, read at their offsets: what every random reader (a global shuffle,
``read_record``, a restore by position) reads records through.

A :class:`ByteSource` reads ranges of data file ``file`` (its place in the dataset's files). Two exist, chosen by
the dataset arg ``random_access`` (:data:`SOURCES`; ``auto``: :class:`LocalFiles` when every file is local,
else :class:`FileSystemFiles`):

- :class:`LocalFiles`: ``os.pread`` on descriptors kept open (a read lets go of the interpreter lock while it
  waits); for local files only.
- :class:`FileSystemFiles`: TensorFlow's file systems (``gs://``, ``s3://``, ``hdfs://`` where TensorFlow's
  plugins provide them, ``ram://``, local paths), up to ``reads_in_flight`` reads at once on a thread pool (a
  read lets go of the interpreter lock), and the ranges of one call that lie close together (at most
  ``GAP_BYTES`` apart, one read at most ``MOST_BYTES``) fetched in one read (:func:`plan`).

Each read of :class:`FileSystemFiles` opens a stream whose buffer is exactly the bytes the read needs:
``tf.io.gfile.GFile`` buffers 512 KiB, so a 300-byte record read through it fetches 512 KiB; a stream sized
to the read fetches the range asked and one byte before it (TensorFlow checks that a seek lands inside the
file by reading the byte before its target). Opening a stream per read costs a few microseconds locally.
"""
from __future__ import annotations

import concurrent.futures
import dataclasses
import os
import resource
import threading
from typing import Protocol, Sequence

from batchloaders.errors import BatchLoaderError, ConfigError, Problem
from batchloaders.core.model import RandomAccess, url_scheme

# TensorFlow is imported where a FileSystemFiles reads: ``describe`` names the sources without loading it.

KEPT_OPEN = 128  # files a LocalFiles keeps open between calls; the others are opened for each call that reads them
GAP_BYTES = 64 * 1024  # ranges at most this far apart are fetched in one read (a bucket's latency costs more)
MOST_BYTES = 4 * 2**20  # the most bytes one coalesced read fetches
AT = "$.args.dataset.args.random_access"


class ByteSource(Protocol):
    """Byte ranges of a dataset's data files, each file named by its place in the dataset's files."""

    def read(self, file: int, offsets: Sequence[int], sizes: Sequence[int]) -> list[bytes]:
        """The bytes of each range; a part comes back shorter when the file ends before the range does.
        OSError (or tf.errors.OpError) when the file cannot be read."""

    def read_many(self, requests: Sequence[Request]) -> list[list[bytes] | Exception]:
        """:meth:`read` of each ``(file, offsets, sizes)``, at once where the source can: each request's parts, or
        the OSError (or tf.errors.OpError) its file raised."""

    def size(self, file: int) -> int:
        """The file's size now; OSError (or tf.errors.OpError) when it cannot be read."""

    def close(self) -> None:
        """Let go of what the source holds open (a later read opens it again)."""


Request = tuple  # (file, offsets, sizes) of one ByteSource.read


class ReadsEachFile:
    """A ByteSource's ``read_many`` as one ``read`` per request, one after another."""

    def read_many(self, requests: Sequence[Request]) -> list[list[bytes] | Exception]:
        """See :class:`ByteSource`."""
        out: list[list[bytes] | Exception] = []
        for file, offsets, sizes in requests:
            try:
                out.append(self.read(file, offsets, sizes))
            except (OSError, BatchLoaderError) as error:  # (a cache's copy that failed: DataError, ConfigError)
                out.append(error)
        return out


def kept_open(limit: int = KEPT_OPEN) -> int:
    """How many files a LocalFiles keeps open: ``limit``, or an eighth of this process's limit if that is less.

    Args:
        limit: the most it keeps open whatever the process's limit.

    Returns:
        At least 1.
    """
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return limit if soft == resource.RLIM_INFINITY else max(1, min(limit, soft // 8))


class LocalFiles(ReadsEachFile):
    """``os.pread`` on local files. The first ``keep`` files read stay open; past them a file is opened for
    each call, so a dataset of many files never holds more descriptors than that (and no descriptor is closed
    while another call reads it)."""

    name = "local"

    def __init__(self, paths: Sequence[str], keep: int | None = None):
        self.paths = tuple(paths)
        self.keep = kept_open() if keep is None else keep
        self.fds: dict[int, int] = {}  # the files kept open, by their place in ``paths``
        self._lock = threading.Lock()

    def _open(self, file: int) -> tuple[int, bool]:
        """(a descriptor of data file ``file``, whether the caller closes it after its call)."""
        found = self.fds.get(file)
        if found is not None:
            return found, False
        fd = os.open(self.paths[file], os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        with self._lock:
            if file not in self.fds and len(self.fds) < self.keep:
                self.fds[file] = fd
                return fd, False
        return fd, True

    def read(self, file: int, offsets: Sequence[int], sizes: Sequence[int]) -> list[bytes]:
        """See :class:`ByteSource`."""
        fd, closing = self._open(file)
        try:
            return [os.pread(fd, size, offset) for offset, size in zip(offsets, sizes)]
        finally:
            if closing:
                os.close(fd)

    def size(self, file: int) -> int:
        """See :class:`ByteSource`."""
        return os.stat(self.paths[file]).st_size

    def close(self) -> None:
        """See :class:`ByteSource`."""
        with self._lock:
            fds, self.fds = self.fds, {}
        for fd in fds.values():
            os.close(fd)

    def __del__(self):
        try:
            self.close()
        except Exception:  # (at exit os may be gone already)
            pass


@dataclasses.dataclass(frozen=True)
class Read:
    """One read of a coalesced plan: ``size`` bytes from ``start``, holding the ranges numbered ``parts``."""

    start: int
    size: int
    parts: tuple[int, ...]


def plan(offsets: Sequence[int], sizes: Sequence[int], gap: int = GAP_BYTES, most: int = MOST_BYTES) -> list[Read]:
    """The reads that fetch the ranges ``(offsets[i], sizes[i])``: ranges taken in order of their offsets, each
    joined to the read before it when it begins at most ``gap`` bytes after that read ends (overlapping ranges
    too) and the read would stay within ``most`` bytes; a range larger than ``most`` is a read of its own.

    Args:
        offsets: where each range begins.
        sizes: each range's length in bytes.
        gap: the most bytes between two ranges fetched in one read (bytes read and thrown away).
        most: the most bytes one read fetches when it holds several ranges.

    Returns:
        The reads in order of their offsets; every range is in exactly one read's ``parts``.
    """
    reads: list[Read] = []
    start = end = 0
    parts: list[int] = []
    for i in sorted(range(len(offsets)), key=lambda k: (offsets[k], sizes[k])):
        offset, stop = int(offsets[i]), int(offsets[i]) + int(sizes[i])
        if parts and offset - end <= gap and max(end, stop) - start <= most:
            end = max(end, stop)
            parts.append(i)
            continue
        if parts:
            reads.append(Read(start, end - start, tuple(parts)))
        start, end, parts = offset, stop, [i]
    if parts:
        reads.append(Read(start, end - start, tuple(parts)))
    return reads


class FileSystemFiles:
    """Reads through TensorFlow's file systems, ``reads_in_flight`` at a time, neighbouring ranges coalesced.
    ``reads`` counts the reads issued (what coalescing saves)."""

    name = "filesystem"

    def __init__(self, paths: Sequence[str], reads_in_flight: int = 16):
        self.paths = tuple(paths)
        self.reads_in_flight = max(1, int(reads_in_flight))
        self.reads = 0
        self._lock = threading.Lock()

    def _fetch(self, jobs: Sequence[tuple[int, Read]]) -> list[bytes | Exception]:
        """The bytes of each ``(file, read)`` (fewer where the file ends), or what reading its file raised, one
        read after another, each through a stream whose buffer is the read's size."""
        import tensorflow as tf  # (not a package module) deferred: describe names the sources without TensorFlow
        from tensorflow.python.lib.io import _pywrap_file_io  # the stream GFile wraps, its buffer sized here

        with self._lock:
            self.reads += len(jobs)
        out: list[bytes | Exception] = []
        for file, read in jobs:
            try:
                stream = _pywrap_file_io.BufferedInputStream(self.paths[file], max(1, read.size))
                try:
                    stream.seek(read.start)
                except tf.errors.OutOfRangeError:  # the file ends before the read's start
                    out.append(b"")
                    continue
                out.append(stream.read(read.size))
            except (OSError, tf.errors.OpError) as error:
                out.append(error)
        return out

    def _executor(self) -> concurrent.futures.ThreadPoolExecutor:
        return shared_pool(self.reads_in_flight)

    def read(self, file: int, offsets: Sequence[int], sizes: Sequence[int]) -> list[bytes]:
        """See :class:`ByteSource`."""
        (parts,) = self.read_many([(file, offsets, sizes)])
        if isinstance(parts, Exception):
            raise parts
        return parts

    def read_many(self, requests: Sequence[Request]) -> list[list[bytes] | Exception]:
        """See :class:`ByteSource`. Every request's reads are dealt to ``reads_in_flight`` threads, each doing its
        share one read after another (a task per thread, not per read: a task costs more than a local read)."""
        plans = [plan(offsets, sizes) for _, offsets, sizes in requests]
        jobs = [(k, read) for k, reads in enumerate(plans) for read in reads]
        files = [(requests[k][0], read) for k, read in jobs]
        step = self.reads_in_flight
        if len(jobs) <= 1:
            blobs = self._fetch(files)
        else:
            blobs = [None] * len(jobs)
            shares = [files[i::step] for i in range(min(step, len(jobs)))]
            for i, got in enumerate(self._executor().map(self._fetch, shares)):
                blobs[i::step] = got
        out: list[list[bytes] | Exception] = [[b""] * len(request[1]) for request in requests]
        for (k, read), blob in zip(jobs, blobs):
            if isinstance(out[k], Exception):
                continue
            if isinstance(blob, Exception):
                out[k] = blob
                continue
            offsets, sizes = requests[k][1], requests[k][2]
            for i in read.parts:
                at = int(offsets[i]) - read.start
                out[k][i] = blob[at:at + int(sizes[i])]
        return out

    def size(self, file: int) -> int:
        """See :class:`ByteSource`."""
        import tensorflow as tf  # (not a package module) deferred: describe names the sources without TensorFlow

        return tf.io.gfile.stat(self.paths[file]).length

    def close(self) -> None:
        """See :class:`ByteSource` (the reading threads are the process's, shared: :func:`shared_pool`)."""


_POOLS: dict[int, concurrent.futures.ThreadPoolExecutor] = {}
_POOLS_LOCK = threading.Lock()


def shared_pool(threads: int) -> concurrent.futures.ThreadPoolExecutor:
    """The process's pool of ``threads`` reading threads, made on first use. Shared by every FileSystemFiles
    with that many reads in flight: TensorFlow keeps a dataset's Python functions (and so their sources) alive
    after the dataset is gone, so a pool per source would leave its threads behind with each pipeline built.

    Args:
        threads: reads in flight.

    Returns:
        The pool.
    """
    with _POOLS_LOCK:
        if threads not in _POOLS:
            _POOLS[threads] = concurrent.futures.ThreadPoolExecutor(threads, f"batchloaders-read-{threads}")
        return _POOLS[threads]


SOURCES = {"local": "positional reads of local files (os.pread)",
           "filesystem": "TensorFlow file system reads, {n} in flight, neighbours coalesced",
           "cache": ("positional reads of local copies in the shard cache {dir} (at most {max_bytes:,} bytes; "
                     "GZIP and ZLIB decompressed, each file's offsets found as it is copied), the files the epoch "
                     "reads next fetched ahead")}


def chosen(access: RandomAccess, paths: Sequence[str]) -> str:
    """The source ``access.random_access`` names for ``paths``: ``auto`` is ``local`` when every path is local,
    else ``filesystem``.

    Args:
        access: the dataset's random-access args.
        paths: the data files.

    Returns:
        A key of :data:`SOURCES` (``cache`` when the dataset has a cache: its copies are local files).
    """
    if access.cache is not None:
        return "cache"
    if access.random_access != "auto":
        return access.random_access
    return "local" if all(url_scheme(path) is None for path in paths) else "filesystem"


def refused(access: RandomAccess, paths: Sequence[str]) -> str | None:
    """What is wrong with reading ``paths`` as ``access`` says (``local`` on a URL), or None."""
    urls = [path for path in paths if url_scheme(path) is not None]
    if access.random_access != "local" or not urls:
        return None
    more = f" and {len(urls) - 1:,} more" if len(urls) > 1 else ""
    return (f"found local, but {urls[0]}{more} is not on the local file system: os.pread reads local files only; "
            "expected filesystem or auto (TensorFlow's file systems read it)")


def describe(access: RandomAccess, paths: Sequence[str]) -> str:
    """How records are read at their offsets, for ``batchloaders describe``.

    Args:
        access: the dataset's random-access args.
        paths: the data files.

    Returns:
        E.g. 'positional reads of local files (os.pread)'.
    """
    cache = access.cache
    return SOURCES[chosen(access, paths)].format(n=access.reads_in_flight, dir=cache.dir if cache else "",
                                                 max_bytes=cache.max_bytes if cache else 0)


def open_source(access: RandomAccess, paths: Sequence[str], source: str = "", keep: int | None = None) -> ByteSource:
    """The byte source ``access`` names for ``paths``.

    Args:
        access: the dataset's random-access args.
        paths: the data files, in the dataset's order.
        source: the config's path, which a refusal names.
        keep: the most files a LocalFiles keeps open (default: :func:`kept_open`).

    Returns:
        A LocalFiles or a FileSystemFiles.

    Raises:
        ConfigError: at $.args.dataset.args.random_access for ``local`` on a URL.
    """
    problem = refused(access, paths)
    if problem is not None:
        raise ConfigError(Problem(source, AT, problem))
    if chosen(dataclasses.replace(access, cache=None), paths) == "local":  # (read_record reads sources, not copies)
        return LocalFiles(paths, keep)
    return FileSystemFiles(paths, access.reads_in_flight)
