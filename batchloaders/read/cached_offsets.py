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
from batchloaders.read import determinism, global_order
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

    Args:
        config: the checked config (its seed and ``shuffle_window_files``).
        cache: the cache to fetch into.
        num_files: the dataset's data files.
    """

    def __init__(self, config: LoaderConfig, cache: CachedFiles, num_files: int):
        self.config, self.cache, self.num_files = config, cache, num_files
        self.window = config.shuffling.window_files or max(num_files, 1)
        self.enabled = config.seed is not None and num_files > 0
        start = determinism.started_at() or (0, 0)
        self.epoch, self.at = int(start[0]), -1  # the epoch followed, and its window being read
        self._orders: dict[int, list[int]] = {}
        self._lock = threading.Lock()

    def _order(self, epoch: int) -> list[int]:
        if epoch not in self._orders:
            self._orders = {e: o for e, o in self._orders.items() if e >= epoch - 1}
            self._orders[epoch] = global_order.epoch_file_order(self.config, self.num_files, epoch)
        return self._orders[epoch]

    def saw(self, files: Sequence[int]) -> None:
        """Note the files a read touched; when the reads moved on to a later window (or the next epoch), ask the
        cache for the files from that window on, and the next epoch's first window after them.

        Args:
            files: the data file numbers one read touched.
        """
        if not self.enabled or not len(files):
            return
        with self._lock:
            place = {f: i for i, f in enumerate(self._order(self.epoch))}
            window = max(place[int(f)] for f in files) // self.window
            if window < self.at:  # back to an early window: the next epoch began
                self.epoch += 1
                place = {f: i for i, f in enumerate(self._order(self.epoch))}
                window = max(place[int(f)] for f in files) // self.window
            elif window == self.at:
                return
            self.at = window
            order = self._order(self.epoch)
            plan = order[window * self.window:] + self._order(self.epoch + 1)[:self.window]
        self.cache.prefetch(list(dict.fromkeys(plan)))
