"""Writing one shard cache entry and checking one on its first use.

:func:`write_entry` copies a data file into temporaries of the cache directory (cache_fill.fill), checks what
it found against the manifest (the source's size and SHA-256 as stored, the record count) and writes the
record index beside the copy; it keeps nothing when anything is wrong. :func:`check_entry` reads an entry a
copier wrote back and says whether the copy and its index are still what its ``.meta`` records.
"""
from __future__ import annotations

import dataclasses
import errno
import hashlib
import os
import shutil
import threading

import numpy as np
import tensorflow as tf

from batchloaders.errors import ConfigError, DataError, Problem
from batchloaders.read.cache_dir import CacheDir
from batchloaders.read.cache_fill import CHUNK, FillProblem, WriteFailed, fill
from batchloaders.read.framing import count
from batchloaders.read.record_index import HASH_SHOWN, RecordIndex, decode, encode
from batchloaders.read.records import tf_message
from batchloaders.core.model import DataFile, file_key

CACHE_PATH = "$.args.dataset.args.cache"
FULL = (errno.ENOSPC, errno.EDQUOT)


@dataclasses.dataclass(frozen=True)
class Source:
    """A data file to copy: its path, its manifest entry (None when the manifest lists none), the dataset's
    compression, and the config file errors about the cache name."""

    path: str
    entry: DataFile | None
    compression: str | None
    config_file: str = "<config>"


@dataclasses.dataclass(frozen=True)
class Written:
    """An entry written under temporary names: suffix -> path, its ``.meta`` and its record index."""

    temps: dict
    meta: dict
    index: RecordIndex


def write_entry(cache: CacheDir, name: str, source: Source, stop: threading.Event | None = None) -> Written:
    """Copy ``source`` into temporaries of entry ``name``, checked against its manifest entry.

    Args:
        cache: the cache directory (its lock held).
        name: the entry's name.
        source: what to copy.
        stop: when set, the copy stops (cache_fill.Cancelled).

    Returns:
        The temporaries, the ``.meta`` to commit with them, and the copy's record index.

    Raises:
        DataError: the source cannot be read, is not a whole TFRecord file of the dataset's compression, or
            differs from its manifest entry.
        ConfigError: the cache directory cannot be written, or its disk is full.
    """
    temps = {".data": cache.temp(name, ".data"), ".index": cache.temp(name, ".index")}
    try:
        filled = _fill(temps[".data"], source, stop)
        problem = _against_manifest(filled, source.entry)
        if problem is not None:
            raise DataError(Problem(source.path, "the whole file", problem))
        index = RecordIndex(np.frombuffer(filled.offsets, np.int64).copy(), filled.size)
        blob = encode(index)
        _write_file(temps[".index"], blob)
    except WriteFailed as failed:
        _remove(temps)
        raise _unwritable(cache, source, failed.error) from None
    except BaseException:
        _remove(temps)
        raise
    meta = {"source": file_key(source.path), "size": filled.size, "sha256": filled.sha256,
            "index_sha256": hashlib.sha256(blob).hexdigest(), "num_records": index.num_records,
            "source_size": filled.source_size, "source_sha256": filled.source_sha256,
            "source_mtime": source_mtime(source.path)}
    return Written(temps, meta, index)


def _fill(temp: str, source: Source, stop: threading.Event | None):
    try:
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    except OSError as error:
        raise WriteFailed(error) from error
    try:
        return fill(source.path, fd, source.compression, stop)
    except FillProblem as problem:
        raise DataError(Problem(source.path, "the whole file", f"{problem} (found while copying it into the "
                                                               "cache)")) from None
    except tf.errors.OpError as error:
        raise DataError(Problem(source.path, "the whole file", f"the file cannot be read ({tf_message(error)})")) \
            from None
    except OSError as error:
        raise DataError(Problem(source.path, "the whole file", f"the file cannot be read "
                                                               f"({error.strerror or error})")) from None
    finally:
        os.close(fd)


def _against_manifest(filled, entry: DataFile | None) -> str | None:
    """What in the copy disagrees with the manifest's entry, or None."""
    if entry is None:
        return None
    if entry.size_bytes is not None and filled.source_size != entry.size_bytes:
        return (f"the file is {count(filled.source_size, 'byte')} as stored, but the manifest records "
                f"{count(entry.size_bytes, 'byte')}: it changed after the manifest was written")
    if entry.sha256 is not None and filled.source_sha256 != entry.sha256:
        return (f"its SHA-256 is {filled.source_sha256[:HASH_SHOWN]}..., but the manifest records "
                f"{entry.sha256[:HASH_SHOWN]}...: it changed after the manifest was written")
    found = len(filled.offsets)
    if found != entry.num_records:
        return (f"it holds {count(found, 'record')}, but the manifest lists {count(entry.num_records, 'record')}: "
                "it changed after the manifest was written")
    return None


def _unwritable(cache: CacheDir, source: Source, error: OSError) -> ConfigError:
    if error.errno in FULL:
        free = shutil.disk_usage(cache.root).free
        return ConfigError(Problem(source.config_file, f"{CACHE_PATH}.max_bytes", (
            f"the disk holding the cache directory {cache.root} is full ({count(free, 'byte')} free) while copying "
            f"data file {source.path}: free space on that disk, or lower max_bytes below what it can hold")))
    return ConfigError(Problem(source.config_file, f"{CACHE_PATH}.dir", (
        f"the cache directory {cache.root} cannot be written ({error.strerror or error}) while copying data file "
        f"{source.path}: name a directory this process may write")))


def _write_file(path: str, blob: bytes) -> None:
    try:
        with open(path, "wb") as f:
            f.write(blob)
            f.flush()
            os.fsync(f.fileno())
    except OSError as error:
        raise WriteFailed(error) from error


def _remove(temps: dict) -> None:
    for path in temps.values():
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass


def source_mtime(path: str) -> int | None:
    """The source's modification time in nanoseconds, or None when it cannot be looked up."""
    try:
        return int(tf.io.gfile.stat(path).mtime_nsec)
    except (tf.errors.OpError, OSError):
        return None


def check_entry(cache: CacheDir, name: str, fd: int, meta: dict) -> tuple[RecordIndex | None, str | None]:
    """Check an entry against its ``.meta``: the copy open as ``fd``, and its index file.

    Args:
        cache: the cache directory.
        name: the entry's name.
        fd: the copy, open for reading.
        meta: the entry's ``.meta``.

    Returns:
        The copy's record index and None, or None and what is wrong.
    """
    size = os.fstat(fd).st_size
    if size != meta.get("size"):
        return None, f"the copy is {count(size, 'byte')}, but its record in the cache says {meta.get('size'):,}"
    digest, at = hashlib.sha256(), 0
    while at < size:
        chunk = os.pread(fd, min(CHUNK, size - at), at)
        if not chunk:
            break
        digest.update(chunk)
        at += len(chunk)
    if digest.hexdigest() != meta.get("sha256"):
        return None, "the copy's SHA-256 differs from the one recorded when it was copied"
    try:
        with open(cache.part(name, ".index"), "rb") as f:
            blob = f.read()
        if hashlib.sha256(blob).hexdigest() != meta.get("index_sha256"):
            return None, "its record index's SHA-256 differs from the one recorded when it was written"
        index = decode(blob)
    except OSError as error:
        return None, f"its record index cannot be read ({error.strerror or error})"
    except ValueError as error:
        return None, f"its record index is damaged ({error})"
    if index.data_size != size:
        return None, "its record index was written for another copy"
    return index, None
