"""The bookkeeping of a shard cache directory: its entries, its lock, eviction and stale temporaries.

Each data file copied is one entry of three files named after the data file's path (a hash of it, then its
base name)::

    <name>.data    the uncompressed copy
    <name>.index   its record index (record_index.encode's format)
    <name>.meta    JSON: the copy's size and SHA-256, the index's SHA-256, the source's size, SHA-256 and
                   modification time as copied, and the record count

The ``.meta`` file is renamed into place last and removed first, so an entry without it is incomplete and is
never used; its modification time is the entry's last use (touched on each use, so that processes sharing the
directory share one recency). Files being written carry the prefix ``.tmp-``. One process at a time holds
``cache.lock`` (``fcntl.flock``) to copy, remove or evict entries; so at most one copy is in progress, and any
temporary found by the holder was left by a copy that was killed.
"""
from __future__ import annotations

import contextlib
import dataclasses
import errno
import fcntl
import hashlib
import json
import os
import re
import threading
import time

from batchloaders.core.model import file_key
from batchloaders.read.cache_fill import Cancelled

LOCK = "cache.lock"
TEMP = ".tmp-"
PARTS = (".meta", ".data", ".index")  # in the order an entry is removed
META_VERSION = 1
POLL_SECONDS = 0.05  # how often a wait for the lock that may be cancelled looks again


@dataclasses.dataclass(frozen=True)
class Entry:
    """One complete entry: its name, the bytes its three files take, and when it was last used."""

    name: str
    nbytes: int
    used: float


def entry_name(path: str) -> str:
    """The entry name of data file ``path``: a hash of its normalized path (distinct files never share one),
    then its base name (to tell entries apart when listing the directory)."""
    key = file_key(path)
    base = re.sub(r"[^A-Za-z0-9._-]", "_", key.rstrip("/").rsplit("/", 1)[-1])[:60]
    return f"{hashlib.sha256(key.encode()).hexdigest()[:20]}-{base}"


class CacheDir:
    """A cache directory: paths of entries, the lock, reading entries, removing and evicting them.

    Args:
        root: the directory (created when missing).

    Raises:
        OSError: it cannot be created, or its lock file cannot be opened.
    """

    def __init__(self, root: str):
        self.root = root
        os.makedirs(root, exist_ok=True)
        self._lock_fd = -1
        self._threads = threading.RLock()  # flock alone does not order this process's threads sharing one fd
        self._depth = 0

    def part(self, name: str, suffix: str) -> str:
        """The path of one of entry ``name``'s files."""
        return os.path.join(self.root, name + suffix)

    def temp(self, name: str, suffix: str) -> str:
        """A temporary path for one of entry ``name``'s files, unique to this process and thread."""
        return os.path.join(self.root, f"{TEMP}{os.getpid()}-{threading.get_ident()}-{name}{suffix}")

    @contextlib.contextmanager
    def locked(self, stop: threading.Event | None = None):
        """Hold the directory's lock (re-entrant within a thread); temporaries of killed copies are removed
        on taking it.

        Args:
            stop: when given, waiting for the lock ends with Cancelled once it is set.

        Raises:
            Cancelled: ``stop`` was set while waiting.
        """
        while not self._threads.acquire(timeout=POLL_SECONDS):
            if stop is not None and stop.is_set():
                raise Cancelled(self.root)
        try:
            if self._depth == 0:
                self._take(stop)
            self._depth += 1
            try:
                yield
            finally:
                self._depth -= 1
                if self._depth == 0:
                    os.close(self._lock_fd)  # closing the descriptor lets go of the lock
                    self._lock_fd = -1
        finally:
            self._threads.release()

    def _take(self, stop: threading.Event | None) -> None:
        fd = os.open(os.path.join(self.root, LOCK), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            if stop is None:
                fcntl.flock(fd, fcntl.LOCK_EX)
            else:
                while not _try_flock(fd):
                    if stop.wait(POLL_SECONDS):
                        raise Cancelled(self.root)
            self._lock_fd = fd
            self.remove_stale()
        except BaseException:
            self._lock_fd = -1
            os.close(fd)
            raise

    def remove_stale(self) -> None:
        """Remove temporaries (their copier was killed: only the lock's holder writes any) and parts of
        entries that have no ``.meta`` (a removal or a commit that was killed)."""
        names = os.listdir(self.root)
        complete = {n[:-len(".meta")] for n in names if n.endswith(".meta") and not n.startswith(TEMP)}
        for n in names:
            stale = n.startswith(TEMP) or (n.endswith((".data", ".index")) and n.rsplit(".", 1)[0] not in complete)
            if stale:
                _unlink(os.path.join(self.root, n))

    def meta(self, name: str) -> dict | None:
        """Entry ``name``'s ``.meta``, or None when the entry is not complete (or its meta is unreadable)."""
        try:
            with open(self.part(name, ".meta"), "rb") as f:
                meta = json.loads(f.read())
        except (OSError, ValueError):
            return None
        return meta if isinstance(meta, dict) and meta.get("version") == META_VERSION else None

    def touch(self, name: str, when: int | None = None) -> None:
        """Mark entry ``name`` used at ``when`` (time.time_ns(); default now), to the nanosecond: a file system's
        own timestamps may be as coarse as a scheduler tick, which would tie uses in a row."""
        now = time.time_ns() if when is None else when
        with contextlib.suppress(OSError):
            os.utime(self.part(name, ".meta"), ns=(now, now))

    def commit(self, name: str, temps: dict[str, str], meta: dict) -> None:
        """Rename the temporaries written (suffix -> path) into place, then write the ``.meta`` last."""
        for suffix, path in temps.items():
            os.replace(path, self.part(name, suffix))
        path = self.temp(name, ".meta")
        with open(path, "w") as f:
            json.dump(dict(meta, version=META_VERSION), f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(path, self.part(name, ".meta"))
        _fsync_dir(self.root)
        self.touch(name)

    def remove(self, name: str) -> None:
        """Remove entry ``name`` (its ``.meta`` first, so no one takes the rest for a complete entry)."""
        for suffix in PARTS:
            _unlink(self.part(name, suffix))

    def entries(self) -> list[Entry]:
        """The complete entries, with the bytes their files take and their last use."""
        out = []
        for n in os.listdir(self.root):
            if n.startswith(TEMP) or not n.endswith(".meta"):
                continue
            name = n[:-len(".meta")]
            try:
                stats = [os.stat(self.part(name, s)) for s in PARTS]
            except FileNotFoundError:
                continue
            out.append(Entry(name, sum(s.st_size for s in stats), stats[0].st_mtime))
        return out

    def evict(self, need: int, order: list[Entry], max_bytes: int) -> tuple[list[str], int]:
        """Remove entries of ``order``, first first, until the complete entries take at most ``max_bytes -
        need`` bytes.

        Args:
            need: bytes to leave free.
            order: the entries that may be removed, in the order to remove them.
            max_bytes: the cache's limit.

        Returns:
            The names removed (the caller closes its descriptors of them), and the bytes the complete entries
            take after.
        """
        total = sum(e.nbytes for e in self.entries())
        removed = []
        for entry in order:
            if total + need <= max_bytes:
                break
            self.remove(entry.name)
            total -= entry.nbytes
            removed.append(entry.name)
        return removed, total


def _try_flock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _unlink(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError as error:  # some file systems cannot sync a directory
        if error.errno not in (errno.EINVAL, errno.EBADF):
            raise
    finally:
        os.close(fd)
