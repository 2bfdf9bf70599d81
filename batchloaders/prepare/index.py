"""Writing the record index of every data file of a dataset and recording it in its manifest
(``batchloaders index``, ``batchloaders.write_index``).

Each data file's frames are walked (here, or as one Apache Beam element per file) and ``<data file>.index`` is
written beside it (format: :mod:`batchloaders.read.record_index`); its ``files`` entry gets ``"index": {"name",
"size_bytes", "sha256"}``. A file the manifest does not list yet is read whole and gets its full entry first.
Nothing is written when a file is damaged, compressed, or disagrees with its entry. Indexes and the manifest are
written to temporary files, then renamed; the temporary files of a killed run are removed by the next run.
"""
from __future__ import annotations

import dataclasses
import time
from typing import Sequence

import tensorflow as tf

from batchloaders.errors import ManifestError, Problem
from batchloaders.config.manifest import INDEX_TEMP, MANIFEST_NAME
from batchloaders.prepare import paths
from batchloaders.prepare.beam import Runner, map_elements
from batchloaders.prepare.dataset import load_dataset
from batchloaders.prepare.manifest import (NOTHING, data_files, entries_of, existing_manifest, write_manifest,
                                           write_valid)
from batchloaders.prepare.refused import refuse_problems
from batchloaders.prepare.report import Counter, Reporter, counted
from batchloaders.read.record_index import FrameError, encode, index_path, scan_offsets, sha256_of
from batchloaders.read.records import count, shown, tf_message

TEMP_PREFIX = ".__index__."  # config.manifest.INDEX_TEMP matches the names mkstemp makes of it


@dataclasses.dataclass(frozen=True)
class Indexed:
    """One data file indexed.

    Attributes:
        path: the data file (its index is ``path + ".index"``).
        records: its records.
        size_bytes: the index's bytes.
    """

    path: str
    records: int
    size_bytes: int


@dataclasses.dataclass(frozen=True)
class IndexWritten:
    """What :func:`write_index` wrote.

    Attributes:
        indexes: each data file indexed, in the files' order.
        manifest_path: the manifest that records them.
        added: the files the manifest did not list, given their full entries.
    """

    indexes: tuple[Indexed, ...]
    manifest_path: str
    added: int = 0

    def paths(self) -> list[str]:
        """The files written: the indexes, then the manifest.

        Returns:
            Their paths.
        """
        return [index_path(indexed.path) for indexed in self.indexes] + [self.manifest_path]

    def lines(self) -> list[str]:
        """The summary the command prints: a line per index, then the total.

        Returns:
            The lines, without line ends.
        """
        lines = [f"indexed {shown(i.path)}: {count(i.records, 'record')}, index {count(i.size_bytes, 'byte')}"
                 for i in self.indexes]
        total, written = sum(i.size_bytes for i in self.indexes), len(self.indexes)
        added = f", with entries for {count(self.added, 'file')} it did not list" if self.added else ""
        lines.append(f"wrote {written:,} index{'es' * (written != 1)} ({count(total, 'byte')}, 8 per record) and "
                     f"{shown(self.manifest_path)}{added}")
        return lines


def write_index(target: str, runner: Runner | None = None, reporter: Reporter = NOTHING) -> IndexWritten:
    """Write the record index of every data file of a dataset and record it in the manifest.

    Args:
        target: a dataset directory (its manifest written first when there is none) or a config.
        runner: the Beam runner that walks the files, one element per file; None: this process does.
        reporter: where notes (a manifest written first, leftovers removed) and progress go; by default nowhere.

    Returns:
        What was written.

    Raises:
        DataError: a data file is damaged, or disagrees with its manifest entry (DamagedFiles; nothing is
            written).
        ManifestError: compressed files, files outside the manifest's directory, or a manifest that is invalid.
        ConfigError: an invalid config.
    """
    started = time.time()
    manifest_path, files = _target(target, runner, reporter)
    base = paths.dirname(manifest_path)
    data = existing_manifest(manifest_path)
    entries = list(data.get("files") or [])
    listed = {paths.key(paths.join(base, e["name"])): e for e in entries}
    unlisted = [path for path in files if paths.key(path) not in listed]
    if unlisted:  # their full entries first, read whole as `write_manifest` reads them
        added = entries_of(base, unlisted, None, runner, reporter)
        entries += added
        listed.update((paths.key(paths.join(base, e["name"])), e) for e in added)
    indexes = _indexes(files, listed, runner, reporter)
    for directory in sorted({paths.dirname(path) for path in files}):
        for name in paths.remove_leftovers(directory, started, INDEX_TEMP):
            reporter.note("index", f"removed {name}, the temporary index of a run stopped while writing")
    for name in paths.remove_leftovers(base, started):
        reporter.note("index", f"removed {name}, the temporary manifest of a run stopped while writing")
    for path, blob, _ in indexes:
        paths.put(index_path(path), blob, TEMP_PREFIX)
        entry = listed[paths.key(path)]
        entry["index"] = {"name": entry["name"] + ".index", "size_bytes": len(blob), "sha256": sha256_of(blob)}
    data["files"] = entries
    write_valid(manifest_path, data, base, "the manifest was not updated")
    return IndexWritten(tuple(Indexed(path, records, len(blob)) for path, blob, records in indexes),
                        manifest_path, len(unlisted))


def _target(target: str, runner: Runner | None, reporter: Reporter) -> tuple[str, list[str]]:
    """The manifest path and the data files a DIR or CONFIG names (a DIR's manifest written first when there is
    none); ManifestError for data that cannot be indexed."""
    if paths.isdir(target):
        manifest_path = paths.join(target, MANIFEST_NAME)
        if not paths.exists(manifest_path):
            reporter.note("index", f"no {MANIFEST_NAME} in {shown(target)}: writing it first, as `batchloaders "
                                   f"manifest {shown(target)}` does")
            for line in write_manifest(target, runner=runner, reporter=reporter).lines():
                reporter.note("index", line)
        manifest = paths.load_manifest(manifest_path)
        # The files the manifest lists (it may have been written with a pattern), else those found by default.
        files = list(manifest.files) if manifest.files else data_files(target)
    else:
        dataset = load_dataset(target)  # its plugins are not imported: reading the data needs none of their types
        manifest, files = dataset.manifest, list(dataset.files)
    if manifest.compression is not None:
        raise ManifestError(Problem(
            shown(manifest.path), "manifest", f"{shown(manifest.path)} says compression {manifest.compression!r}: "
            "a compressed file cannot be read at a byte offset, so it cannot be indexed; rewrite the data files "
            "uncompressed (compression null) to index them: `batchloaders reshard SRC DEST --shards N` does, and "
            "indexes them"))
    base = paths.dirname(manifest.path)
    outside = [path for path in files if not paths.within(path, base)]
    if outside:
        raise ManifestError([Problem(shown(path), "file", f"not a file under the manifest's directory {shown(base)}: "
                                     "only those can be indexed (the manifest records each index by its path there)")
                             for path in outside])
    return manifest.path, files


def _indexes(files: Sequence[str], listed: dict, runner: Runner | None, reporter: Reporter
             ) -> list[tuple[str, bytes, int]]:
    """Each data file, its index's bytes and its record count (one Beam element per file on ``runner``);
    DamagedFiles naming every file that is damaged or disagrees with its ``files`` entry (then no index is
    written)."""
    listed_as = [_listed_as(listed[paths.key(path)]) for path in files]
    if runner is None:
        progress = reporter.progress("index", len(files))
        try:
            results = [counted(progress, file_index, path, entry) for path, entry in zip(files, listed_as)]
        finally:
            progress.close()
    else:
        reporter.note("index", f"indexing {count(len(files), 'file')} on {runner.name}")
        results = map_elements(_file_index_of, [(paths.absolute(path), entry) for path, entry in zip(files, listed_as)],
                               runner, label="index")
    refuse_problems(files, [found for _, _, found in results], "no index written")
    return [(path, blob, records) for path, (blob, records, _) in zip(files, results)]


def _listed_as(entry: dict) -> tuple[int, int | None]:
    """What a ``files`` entry says of its file: (num_records, size_bytes or None)."""
    return entry["num_records"], entry.get("size_bytes")


def _file_index_of(item: tuple[str, tuple[int, int | None]]) -> tuple[bytes | None, int, list[str]]:
    return file_index(*item)


def file_index(path: str, listed: tuple[int, int | None], progress: Counter | None = None
               ) -> tuple[bytes | None, int, list[str]]:
    """One data file's record index: what ``batchloaders index`` does for each file, here or as one Beam element.

    Args:
        path: the data file (uncompressed TFRecord).
        listed: what its ``files`` entry says: (num_records, size_bytes or None when it records none).
        progress: a Counter to count on, None for none.

    Returns:
        ``(index bytes, record count, problems)``; the bytes None when there are problems, which are said
        without the file's path in front.
    """
    num_records, size_bytes = listed
    try:
        index = scan_offsets(path, progress)
    except OSError as error:
        return None, 0, [f"cannot be read ({error.strerror or error})"]
    except tf.errors.OpError as error:  # a URL TensorFlow's file systems cannot read
        return None, 0, [f"cannot be read ({tf_message(error)})"]
    except FrameError as error:
        return None, 0, [str(error)]
    if index.num_records != num_records or (size_bytes is not None and size_bytes != index.data_size):
        return None, index.num_records, [
            f"it holds {count(index.num_records, 'record')} in {count(index.data_size, 'byte')}, but the manifest "
            f"lists {count(num_records, 'record')}" + (f" in {count(size_bytes, 'byte')}" if size_bytes is not None
                                                       else "")
            + ": the file changed after the manifest was written (run `batchloaders manifest`)"]
    return encode(index), index.num_records, []
