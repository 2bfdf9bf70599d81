"""The record offsets of data files read through a shard cache (``args.dataset.args.cache``), and the files
the cache fetches ahead.

With a cache, a data file's record offsets come from its local copy (read/shard_cache.py: found while the
file is copied, GZIP and ZLIB files decompressed first), so no record index is needed and compressed files
can be read at random. The record counts, which fix an epoch's order, come from the manifest when the
pipeline is built; a file's offsets are loaded the first time a read needs one of its records, when the
file is copied anyway (:class:`CachedOffsets`).

:class:`ReadAhead` follows the reads through the epoch's order of files (read/global_order.py
``epoch_file_order``: windows of ``shuffle_window_files`` files) and asks the cache to fetch the files of
the current window and those after it, so that a window's files are mostly copied before their first read.
It only changes when files are copied, never what is read: a config without a seed (whose order is drawn
per ``input_fn()`` call) or a seed given per call reads without it, each file copied on its first read.
"""
from __future__ import annotations

import threading
from typing import Sequence

import numpy as np

from batchloaders.errors import ConfigError, Problem
from batchloaders.read import global_order
from batchloaders.read.shard_cache import CachedFiles
from batchloaders.core.model import LoaderConfig

CACHE_AT = "$.args.dataset.args.cache"


def manifest_counts(config: LoaderConfig) -> np.ndarray:
    """int64 [files]: each data file's record count, as the manifest lists it.

    Args:
        config: a config whose dataset reads through a cache.

    Returns:
        The counts, in the dataset's order of files.

    Raises:
        ConfigError: at the cache's JSON path, when the manifest lists no entry for a data file (its records
            could not be placed in an epoch's order before the file is copied).
    """
    manifest = config.dataset.manifest
    missing = [path for path in config.dataset.files if manifest.entry(path) is None]
    if missing:
        raise ConfigError(Problem(config.source, CACHE_AT, (
            f"the manifest {manifest.path} lists no entry for {len(missing)} data file(s) (the first: {missing[0]}): "
            "a cache places each file's records in an epoch's order from the manifest's record counts; expected "
            "every data file listed (`batchloaders manifest` writes the entries)")))
    return np.array([manifest.entry(path).num_records for path in config.dataset.files], np.int64)


def working_set_warning(config: LoaderConfig) -> str | None:
    """What to say when the cache cannot hold the files an epoch reads at once (every file, or a window of
    ``shuffle_window_files`` and the next one fetched ahead), from the manifest's sizes of uncompressed files:
    such a cache copies files in and out for every batch. None when it can, or when the sizes are not known.

    Args:
        config: a config whose dataset reads through a cache.

    Returns:
        The warning's text, or None.
    """
    manifest, cache = config.dataset.manifest, config.dataset.access.cache
    entries = [manifest.entry(path) for path in config.dataset.files]
    if manifest.compression is not None or any(e is None or e.size_bytes is None for e in entries):
        return None
    sizes = sorted((cache.copy_bytes(e.size_bytes, e.num_records) for e in entries), reverse=True)
    window = config.shuffling.window_files
    at_once = len(sizes) if window is None or window >= len(sizes) else 2 * window
    needs = sum(sizes[:at_once])
    if needs <= cache.max_bytes:
        return None
    what = ("all of the dataset's files (a global shuffle reads every file all epoch long)" if at_once == len(sizes)
            else f"{at_once} files (a window of shuffle_window_files {window} and the next, fetched ahead)")
    return (f"{config.source}: $.args.dataset.args.cache.max_bytes: {cache.max_bytes:,} bytes cannot hold {what}: "
            f"up to {needs:,} bytes: the cache will copy files in and out as the epoch reads them; raise max_bytes "
            "to that, or set a smaller shuffle_window_files")


class CachedOffsets:
    """Record offsets and payload lengths of every data file, filled in file by file from the cache's copies.

    Args:
        cache: the cache the files are read through.
        counts: each file's record count (the manifest's).
    """

    def __init__(self, cache: CachedFiles, counts: np.ndarray):
        self.cache = cache
        self.counts = counts
        self.starts = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        self.offsets = np.zeros(int(self.starts[-1]), np.int64)
        self.lengths = np.zeros(int(self.starts[-1]), np.int64)
        self.sizes = [0] * len(counts)  # each copy's size, once loaded
        self._loaded = np.zeros(len(counts), bool)
        self._lock = threading.Lock()

    def load(self, files: Sequence[int]) -> None:
        """Fill in the offsets of ``files`` not loaded yet (copying them into the cache when they are not there).

        Args:
            files: data file numbers.

        Raises:
            DataError, ConfigError: as the cache raises them for a file it cannot copy.
        """
        for file in files:
            if self._loaded[file]:
                continue
            index = self.cache.index(int(file))
            begin, end = self.starts[file], self.starts[file + 1]
            with self._lock:  # (readers run in parallel; filling twice writes the same values)
                self.offsets[begin:end] = index.offsets
                self.lengths[begin:end] = index.lengths
                self.sizes[file] = index.data_size
                self._loaded[file] = True


class ReadAhead:
    """Asks the cache to fetch the files the epoch reads next (see the module's text).

    Each read says its epoch (global_order.ids carries it with the ids); the window is the one of the epoch's
    order of files that holds the read's files. A read of another (epoch, window) than the one followed moves
    the plan there, unless it is the window just before it: parallel reads finish out of order, and a read
    of the previous window still in flight is no reason to fetch that window again. A new pass over the data
    (another iterator) starts at its own first window and moves the plan back there.

    Args:
        config: the checked config (its seed and ``shuffle_window_files``).
        cache: the cache to fetch into.
        num_files: the dataset's data files.
    """

    def __init__(self, config: LoaderConfig, cache: CachedFiles, num_files: int):
        self.config, self.cache, self.num_files = config, cache, num_files
        self.window = config.shuffling.window_files or max(num_files, 1)
        self.windows = -(-num_files // self.window)
        self.enabled = config.seed is not None and num_files > 0
        self.at: tuple[int, int] | None = None  # the (epoch, window) the plan was made for
        self._orders: dict[int, tuple[list[int], dict[int, int]]] = {}
        self._lock = threading.Lock()

    def _order(self, epoch: int) -> tuple[list[int], dict[int, int]]:
        """The epoch's order of files and each file's place in it (the last few epochs kept)."""
        if epoch not in self._orders:
            if len(self._orders) > 4:
                self._orders.pop(min(self._orders))
            order = global_order.epoch_file_order(self.config, self.num_files, epoch)
            self._orders[epoch] = (order, {f: i for i, f in enumerate(order)})
        return self._orders[epoch]

    def _before(self, epoch: int, window: int) -> tuple[int, int]:
        return (epoch, window - 1) if window > 0 else (epoch - 1, self.windows - 1)

    def saw(self, files: Sequence[int], epoch: int) -> None:
        """Note the files a read of epoch ``epoch`` touched (-1: not known), and move the plan when the reads
        moved to another window.

        Args:
            files: the data file numbers one read touched.
            epoch: the latest epoch of the read's units.
        """
        if not self.enabled or not len(files) or epoch < 0:
            return
        with self._lock:
            order, place = self._order(epoch)
            now = (epoch, max(place[int(f)] for f in files) // self.window)
            if self.at is not None and (now == self.at or self._before(*self.at) == now):
                return
            self.at = now
            plan = order[now[1] * self.window:] + self._order(epoch + 1)[0][:self.window]
        self.cache.prefetch(list(dict.fromkeys(plan)))
