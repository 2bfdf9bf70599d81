"""Random reads of data files served from local copies in a cache directory (``args.dataset.args.cache``).

:class:`CachedFiles` is a byte source over a config's data files: ``read`` takes a file's number and byte
ranges and answers with positional reads (``os.pread``) of the file's local, uncompressed copy; ``index``
gives the copy's record offsets. A file is copied on its first read, or ahead of it by ``prefetch`` in a
background thread; each copy is checked against the manifest on the way (cache_copy.py) and each entry a
process did not write itself is checked against its recorded SHA-256 on first use, and copied again (with a
warning) when it differs.

The cache's files never take more than ``max_bytes`` plus the one file being copied: a copy holds the
directory's lock (so one copy runs at a time, among all processes sharing the directory), evicts entries
before it when the copy's size is known beforehand and after it in any case. What goes first: the entries
used least recently (by any process) that the prefetch plan does not name, then the entries the plan needs
last. A prefetch never evicts an entry the plan needs before the one it fetches; it stops where the next file
would not fit. An entry another process evicted stays readable through a descriptor open on it; the reader
notices the copy is gone (no links left) at its next read, closes it and copies the file again.
"""
from __future__ import annotations

import collections
import dataclasses
import os
import threading
import time
import warnings
import weakref
from typing import Sequence

from batchloaders.errors import BatchLoaderError, ConfigError, DataError, Problem
from batchloaders.read.cache_copy import CACHE_PATH, Source, check_entry, source_mtime, write_entry
from batchloaders.read.cache_dir import CacheDir, Entry, entry_name
from batchloaders.read.cache_fill import Cancelled
from batchloaders.read.framing import count
from batchloaders.read.positional import ReadsEachFile, kept_open
from batchloaders.read.record_index import RecordIndex
from batchloaders.core.model import CacheSpec, Manifest, file_key

KEPT_OPEN = 128  # copies a cache keeps open between reads (fewer when the process may open few files)
PREFETCH_IDLE = 2.0  # seconds without a new plan after which the prefetch thread ends
TOUCH_EVERY_NS = 500_000_000  # the most often one instance writes one copy's time of use


@dataclasses.dataclass
class _Handle:
    """An open copy: readers using it now, and whether to close it when the last one is done."""

    fd: int
    users: int = 0
    doomed: bool = False


class CachedFiles(ReadsEachFile):
    """Data files read through local copies in a cache directory.

    Args:
        paths: the data files, local paths or URLs; a file's number is its place here.
        manifest: the dataset's manifest (its compression, and each file's size, SHA-256 and record count).
        spec: the cache's directory and the most bytes its files may take.
        config_file: the config file errors about the cache name.

    Raises:
        ConfigError: the cache directory cannot be created or written.
    """

    def __init__(self, paths: Sequence[str], manifest: Manifest, spec: CacheSpec, config_file: str = "<config>"):
        self.paths = tuple(paths)
        self.spec = spec
        self._sources = [Source(p, manifest.entry(p), manifest.compression, config_file) for p in self.paths]
        self._names = [entry_name(p) for p in self.paths]
        try:
            self._dir = CacheDir(spec.dir)
            with self._dir.locked():  # (a max_bytes lowered since the copies were made holds from now on)
                self._dir.evict(0, sorted(self._dir.entries(), key=lambda e: e.used), spec.max_bytes)
        except OSError as error:
            raise ConfigError(Problem(config_file, f"{CACHE_PATH}.dir", (
                f"the cache directory {spec.dir} cannot be created or written ({error.strerror or error}): name "
                "a directory this process may write"))) from None
        self._mu = threading.Lock()  # guards the handles and what this instance has checked
        self._handles: collections.OrderedDict[int, _Handle] = collections.OrderedDict()
        self._checked: dict[int, tuple] = {}  # file -> the copy checked on first use (device, inode, SHA-256)
        self._indexes: dict[int, RecordIndex] = {}
        self._keep = kept_open(KEPT_OPEN)
        self._used: dict[int, int] = {}  # file -> when this instance last used its copy (time.time_ns())
        self._marked: dict[int, int] = {}  # file -> the use last written to the entry's time
        self._stop = threading.Event()
        self._plan: list[int] = []
        self._plan_version = 0
        self._wake = threading.Condition()
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------------------------------ byte source

    def read(self, file: int, offsets: Sequence[int], sizes: Sequence[int]) -> list[bytes]:
        """The bytes of data file ``file``'s local copy at each of ``offsets``, ``sizes`` long (shorter where the
        copy ends), copying the file into the cache first when it is not there.

        Args:
            file: the data file's number.
            offsets: where each part begins in the uncompressed copy.
            sizes: each part's length.

        Returns:
            The parts, in the order asked.

        Raises:
            DataError: the file had to be copied, and its source cannot be read or differs from the manifest.
            ConfigError: the file had to be copied, and it is larger than max_bytes or the cache cannot be written.
        """
        handle = self._acquire(file)
        try:
            return [_pread(handle.fd, int(size), int(offset)) for offset, size in zip(offsets, sizes)]
        finally:
            self._release(handle)

    def size(self, file: int) -> int:
        """The size of data file ``file``'s local copy (uncompressed), copying it first when needed.

        Args:
            file: the data file's number.

        Returns:
            The copy's size in bytes.

        Raises:
            DataError: as for :meth:`read`.
            ConfigError: as for :meth:`read`.
        """
        handle = self._acquire(file)
        try:
            return os.fstat(handle.fd).st_size
        finally:
            self._release(handle)

    def index(self, file: int) -> RecordIndex:
        """The record offsets of data file ``file``'s local copy, copying it first when needed.

        Args:
            file: the data file's number.

        Returns:
            The copy's record index (found while copying, kept beside the copy).

        Raises:
            DataError: as for :meth:`read`.
            ConfigError: as for :meth:`read`.
        """
        self._release(self._acquire(file))
        return self._indexes[file]

    def prefetch(self, files: Sequence[int]) -> None:
        """Copy ``files`` into the cache ahead of their reads, in this order, in a background thread, as far as
        max_bytes allows without evicting a file this list needs sooner; replaces the previous list. Name the
        file being read first, so that it is not evicted for one needed later. A copy that fails here is left
        for the read that needs the file, which raises its error.

        Args:
            files: data file numbers, in the order they will be read.
        """
        with self._wake:
            self._plan = [int(f) for f in files]
            self._plan_version += 1
            if self._thread is None:
                if self._stop.is_set():  # closed before: prefetching starts again (the instance may be shared)
                    self._stop = threading.Event()
                # The thread holds the cache weakly: a cache no one uses any more is collected, and its thread ends.
                self._thread = threading.Thread(target=_prefetch_loop, args=(weakref.ref(self), self._stop),
                                                name="shard-cache-prefetch", daemon=True)
                self._thread.start()
            self._wake.notify_all()

    def close(self) -> None:
        """Stop prefetching (a prefetch's copy in progress is abandoned, its temporary removed) and close the
        copies; a later read opens (or copies) what it needs, and a later prefetch starts again."""
        self._stop.set()
        with self._wake:
            self._wake.notify_all()
        with self._wake:
            thread = self._thread
        if thread is not None:
            thread.join()
        with self._mu:
            for handle in self._handles.values():
                self._doom(handle)
            self._handles.clear()

    def reopen(self) -> None:
        """Close the copies this instance holds open (each closed once no read uses it), so that the next read of
        each file checks its copy against the source again (a checked copy is not hashed again)."""
        with self._mu:
            for handle in self._handles.values():
                self._doom(handle)
            self._handles.clear()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # ------------------------------------------------------------------------------------------ handles

    def _acquire(self, file: int) -> _Handle:
        while True:
            with self._mu:
                handle = self._handles.get(file)
                if handle is not None and os.fstat(handle.fd).st_nlink == 0:  # evicted: let its space go
                    self._doom(self._handles.pop(file))
                elif handle is not None:
                    handle.users += 1
                    self._handles.move_to_end(file)
                    self._touch(file)
                    return handle
            fd = self._open_checked(file)
            with self._mu:
                if file in self._handles:
                    self._doom(self._handles.pop(file))
                self._handles[file] = _Handle(fd)
                idle = [f for f, h in self._handles.items() if h.users == 0 and f != file]
                for f in idle[:max(0, len(self._handles) - self._keep)]:
                    self._doom(self._handles.pop(f))

    def _touch(self, file: int) -> None:
        """Note that ``file``'s copy is used now. The mark other processes see (the entry's time) is written at
        most once per TOUCH_EVERY seconds, and before this instance evicts (:meth:`_flush_touches`): a batch's
        read asks for each of its files, and a mark costs a system call. (Caller holds _mu.)"""
        now = time.time_ns()
        self._used[file] = now
        if now - self._marked.get(file, 0) >= TOUCH_EVERY_NS:
            self._marked[file] = now
            self._dir.touch(self._names[file], now)

    def _flush_touches(self) -> None:
        """Write every use not marked yet, so that an eviction orders the entries by their true last use."""
        with self._mu:
            pending = {f: t for f, t in self._used.items() if t > self._marked.get(f, 0)}
            self._marked.update(pending)
        for file, when in pending.items():
            self._dir.touch(self._names[file], when)

    def _release(self, handle: _Handle) -> None:
        with self._mu:
            handle.users -= 1
            if handle.doomed and handle.users == 0:
                os.close(handle.fd)

    def _doom(self, handle: _Handle) -> None:
        """Close ``handle`` now if no one reads it, else when its last reader is done (caller holds _mu)."""
        if not handle.doomed:
            handle.doomed = True
            if handle.users == 0:
                os.close(handle.fd)

    def _evicted(self, names: list[str]) -> None:
        gone = set(names)
        with self._mu:
            for file in [f for f in self._handles if self._names[f] in gone]:
                self._doom(self._handles.pop(file))

    # ------------------------------------------------------------------------------------------ entries

    def _open_checked(self, file: int) -> int:
        """A descriptor of ``file``'s copy, complete, current and checked; the file copied when it is not."""
        found = self._try_open(file)
        if isinstance(found, int):
            return found
        with self._dir.locked():
            found = self._try_open(file)  # another process may have copied it, or the check met a replacement
            if isinstance(found, int):
                return found
            if found:
                warnings.warn(f"{self.paths[file]}: its copy in the cache {self.spec.dir} is damaged ({found}): "
                              "copying it again", RuntimeWarning, stacklevel=4)
            self._dir.remove(self._names[file])
            self._copy(file, None)
            found = self._try_open(file)
        if isinstance(found, int):
            return found
        raise DataError(Problem(self.paths[file], "the whole file", f"its copy in the cache {self.spec.dir} "
                                                                    f"fails its check just after copying: {found}"))

    def _try_open(self, file: int) -> int | str:
        """A descriptor of ``file``'s copy, or what is wrong with the entry ("" when it is missing or stale)."""
        name = self._names[file]
        meta = self._dir.meta(name)
        if meta is None or not self._current(file, meta):
            return ""
        try:
            fd = os.open(self._dir.part(name, ".data"), os.O_RDONLY)
        except FileNotFoundError:
            return ""
        stat = os.fstat(fd)
        key = (stat.st_dev, stat.st_ino, stat.st_mtime_ns, meta.get("sha256"))
        if self._checked.get(file) != key:
            index, problem = check_entry(self._dir, name, fd, meta)
            if problem is not None:
                os.close(fd)
                return problem
            with self._mu:
                self._checked[file], self._indexes[file] = key, index
        self._dir.touch(name)
        return fd

    def _current(self, file: int, meta: dict) -> bool:
        """Whether entry ``meta`` is a copy of this data file as it is now: made from the file the manifest
        describes (its record count, and its size and SHA-256 where the manifest records them), and from the
        source as it is now (its modification time as the copy recorded it: a source rewritten since, even to
        the manifest's size, is copied again, and the copy then checked against the manifest). A source that
        cannot be looked up keeps its copy."""
        source = self._sources[file]
        if meta.get("source") != file_key(source.path):
            return False
        entry = source.entry
        if entry is not None and (meta.get("num_records") != entry.num_records
                                  or entry.size_bytes not in (None, meta.get("source_size"))
                                  or entry.sha256 not in (None, meta.get("source_sha256"))):
            return False
        mtime = source_mtime(source.path)
        return mtime is None or mtime == meta.get("source_mtime")

    # ------------------------------------------------------------------------------------------ copying

    def _copy(self, file: int, due: int | None) -> bool:
        """Copy ``file`` into the cache, evicting around it (the directory's lock held). ``due``: its place in
        the prefetch plan, or None when a read needs it now. False when a prefetch finds no room for it."""
        name, source, limit = self._names[file], self._sources[file], self.spec.max_bytes
        self._flush_touches()
        known = _stored_size(source)
        if known is not None and known > limit:
            raise self._too_large(file, known)
        if known is not None:
            order = self._eviction_order(file, due)
            if due is not None and sum(e.nbytes for e in self._dir.entries()) - sum(e.nbytes for e in order) \
                    + known > limit:
                return False
            self._evicted(self._dir.evict(known, order, limit)[0])
        # Only a prefetch stops when the cache is closed: a read's copy goes on (another user may share the cache).
        written = write_entry(self._dir, name, source, self._stop if due is not None else None)
        self._dir.commit(name, written.temps, written.meta)
        stat = os.stat(self._dir.part(name, ".data"))  # this process wrote and hashed it: no check on first use
        with self._mu:
            self._checked[file] = (stat.st_dev, stat.st_ino, stat.st_mtime_ns, written.meta["sha256"])
            self._indexes[file] = written.index
        self._flush_touches()
        removed, total = self._dir.evict(0, self._eviction_order(file, due), limit)
        self._evicted(removed)
        if total > limit:  # only this copy, or only copies the plan needs sooner, are left
            self._dir.remove(name)
            if due is None:  # everything else was evicted: this copy alone is larger
                raise self._too_large(file, total)
            return False
        return True

    def _eviction_order(self, file: int, due: int | None) -> list[Entry]:
        """The entries a copy of ``file`` may evict, first first: those the plan does not name, least recently
        used first, then those the plan needs last; a prefetch (``due`` set) keeps those needed before it."""
        with self._wake:
            plan = {self._names[f]: at for at, f in reversed(list(enumerate(self._plan)))}
        own = self._names[file]
        unplanned = sorted((e for e in self._dir.entries() if e.name not in plan and e.name != own),
                           key=lambda e: e.used)
        planned = sorted((e for e in self._dir.entries() if e.name in plan and e.name != own),
                         key=lambda e: -plan[e.name])
        if due is not None:
            planned = [e for e in planned if plan[e.name] > due]
        return unplanned + planned

    def _too_large(self, file: int, nbytes: int) -> ConfigError:
        return ConfigError(Problem(self._sources[file].config_file, f"{CACHE_PATH}.max_bytes", (
            f"data file {self.paths[file]} takes {count(nbytes, 'byte')} in the cache, more than max_bytes "
            f"({self.spec.max_bytes:,}): raise max_bytes to at least {nbytes:,}")))

    # ------------------------------------------------------------------------------------------ prefetching

    def _prefetch_step(self, seen: int) -> int | None:
        """Wait for a new plan, then fetch along it; the plan's version, or None when the thread ends: the cache
        was closed, or no new plan came for PREFETCH_IDLE seconds (the next :meth:`prefetch` starts a thread
        again; TensorFlow keeps a dataset's Python functions, and so this cache, alive after the dataset is gone,
        and an idle thread per pipeline built would pile up)."""
        with self._wake:
            if self._plan_version == seen and not self._stop.is_set():
                self._wake.wait(timeout=PREFETCH_IDLE)
            if self._stop.is_set() or self._plan_version == seen:
                self._thread = None
                return None
            plan, seen = list(self._plan), self._plan_version
        for due, file in enumerate(plan):
            if self._stop.is_set() or self._plan_version != seen or not self._prefetch_one(file, due):
                break
        return seen

    def __del__(self):
        self._stop.set()

    def _prefetch_one(self, file: int, due: int) -> bool:
        """Copy ``file`` unless its entry is there; False when prefetching should stop here."""
        name = self._names[file]
        meta = self._dir.meta(name)
        if meta is not None and self._current(file, meta):
            return True
        try:
            with self._dir.locked(self._stop):
                meta = self._dir.meta(name)
                if meta is not None and self._current(file, meta):
                    return True
                self._dir.remove(name)
                return self._copy(file, due)
        except (BatchLoaderError, Cancelled, OSError):
            return False  # the read that needs the file copies it again and raises what is wrong


_SHARED: dict[tuple, CachedFiles] = {}
_SHARED_LOCK = threading.Lock()


def shared(paths: Sequence[str], manifest: Manifest, spec: CacheSpec, config_file: str = "<config>") -> CachedFiles:
    """The process's CachedFiles of these files, manifest entries and cache, made on first use: every pipeline
    built over the same data shares its open copies, checks and read-ahead. (TensorFlow keeps a dataset's
    Python functions alive after the dataset is gone; a cache per pipeline built would keep its descriptors.)

    Args:
        paths: the data files.
        manifest: the dataset's manifest.
        spec: the cache.
        config_file: the config file errors name.

    Returns:
        A CachedFiles, shared.

    Raises:
        ConfigError: the cache directory cannot be created or written.
    """
    entries = tuple((e.num_records, e.size_bytes, e.sha256) if (e := manifest.entry(p)) else None for p in paths)
    key = (spec, tuple(paths), manifest.compression, entries)
    with _SHARED_LOCK:
        found = _SHARED.get(key)
        if found is None:
            return _SHARED.setdefault(key, CachedFiles(paths, manifest, spec, config_file))
    found.reopen()  # a new pipeline checks each copy against its source again
    return found


def _prefetch_loop(cache_ref: "weakref.ref[CachedFiles]", stop: threading.Event) -> None:
    """The prefetch thread: steps of its cache while the cache is alive and not closed."""
    seen = 0
    while not stop.is_set():
        cache = cache_ref()
        if cache is None:
            return
        seen = cache._prefetch_step(seen)
        del cache
        if seen is None:
            return


def _stored_size(source: Source) -> int | None:
    """What the copy takes when it is known before copying: an uncompressed file's size as the manifest records
    it, with its index and entry."""
    if source.compression is None and source.entry is not None and source.entry.size_bytes is not None:
        return CacheSpec.copy_bytes(source.entry.size_bytes, source.entry.num_records)
    return None


def _pread(fd: int, size: int, offset: int) -> bytes:
    """``size`` bytes at ``offset``, fewer where the file ends."""
    data = os.pread(fd, size, offset)
    while len(data) < size:
        more = os.pread(fd, size - len(data), offset + len(data))
        if not more:
            break
        data += more
    return data
