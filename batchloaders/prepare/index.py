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
import hashlib
import time
from typing import Sequence

import tensorflow as tf

from batchloaders.errors import BatchLoaderError, ManifestError, Problem
from batchloaders.config.index_manifest import (INDEX_MANIFEST_NAME, IndexedFile, data_name, index_manifest_path,
                                                index_manifest_text, join, load_index_manifest)
from batchloaders.config.manifest import INDEX_SUFFIX, INDEX_TEMP, MANIFEST_NAME
from batchloaders.core.model import DataFile, IndexFile, Manifest
from batchloaders.prepare import paths
from batchloaders.prepare.beam import Runner, map_elements
from batchloaders.prepare.dataset import load_dataset
from batchloaders.prepare.manifest import (NOTHING, data_files, entries_of, existing_manifest, write_manifest,
                                           write_valid)
from batchloaders.prepare.refused import refuse_problems
from batchloaders.prepare.report import Counter, Reporter, counted
from batchloaders.read.record_index import FrameError, encode, index_path, scan_offsets, sha256_of
from batchloaders.read.records import count, open_binary, shown, tf_message

TEMP_PREFIX = ".__index__."  # config.manifest.INDEX_TEMP matches the names mkstemp makes of it
MANIFEST_TEMP_PREFIX = ".__manifest__."  # files.TEMP_NAME matches these: an index manifest's leftovers go too


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
    index: str | None = None  # the index file, when not beside the data file (an index_dir)


@dataclasses.dataclass(frozen=True)
class IndexWritten:
    """What :func:`write_index` wrote.

    Attributes:
        indexes: each data file indexed, in the files' order.
        manifest_path: the manifest that records them (with an index_dir, its index manifest).
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
        return [indexed.index or index_path(indexed.path) for indexed in self.indexes] + [self.manifest_path]

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


def write_index(target: str, runner: Runner | None = None, reporter: Reporter = NOTHING,
                index_dir: str | None = None) -> IndexWritten:
    """Write the record index of every data file of a dataset and record it in the manifest, or, with an
    ``index_dir``, write the indexes and their index manifest there and nothing in the dataset's directory.

    Args:
        target: a dataset directory (its manifest written first when there is none, unless ``index_dir``) or a
            config (whose own ``index_dir`` is used when ``index_dir`` is None).
        runner: the Beam runner that walks the files, one element per file; None: this process does.
        reporter: where notes (a manifest written first, leftovers removed) and progress go; by default nowhere.
        index_dir: where to write the indexes and ``__index_manifest__.json`` (local or a URL), created if
            missing; None: beside each data file, recorded in the dataset's manifest.

    Returns:
        What was written.

    Raises:
        DataError: a data file is damaged, or disagrees with its manifest entry (DamagedFiles; nothing is
            written).
        ManifestError: compressed files, files outside the manifest's directory, a manifest that is invalid, or
            with ``index_dir`` a DIR without a manifest.
        ConfigError: an invalid config.
        IndexDirError: ``index_dir`` cannot be written.
    """
    started = time.time()
    manifest, files, configured = _target(target, runner, reporter, writes_manifest=index_dir is None)
    if index_dir is not None or configured is not None:
        return _write_apart(manifest, files, index_dir or configured, Work(runner, reporter, started))
    manifest_path = manifest.path
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


@dataclasses.dataclass(frozen=True)
class Work:
    """How a run of :func:`write_index` works: on which runner, reporting where, started when."""

    runner: Runner | None
    reporter: Reporter
    started: float


class IndexDirError(BatchLoaderError):
    """The index_dir could not be written: the located error names it and what failed."""


def _write_apart(manifest: Manifest, files: Sequence[str], index_dir: str, work: Work) -> IndexWritten:
    """Index ``files`` into ``index_dir`` and record them in its index manifest, writing nothing beside the
    data: the data files' sizes and SHA-256 come from the manifest when it records them, else from reading
    them whole while indexing."""
    listed = [manifest.entry(path) for path in files]
    found = _apart_indexes(files, listed, work)
    names = [data_name(path, manifest.path) for path in files]
    entries = []
    for name, entry, (blob, records, _, size, digest) in zip(names, listed, found):
        entries.append(IndexedFile(name, records, size, digest or entry.sha256,
                                   IndexFile(name + INDEX_SUFFIX, len(blob), sha256_of(blob))))
    kept = [e for e in _existing_entries(index_dir, work.reporter) if e.name not in set(names)]
    _written_to(index_dir, f"write {INDEX_MANIFEST_NAME} and the indexes", _put_apart, index_dir,
                [(entry, blob) for entry, (blob, *_) in zip(entries, found)], kept + entries, work)
    return IndexWritten(tuple(Indexed(path, e.num_records, e.index.size_bytes, join(index_dir, e.index.name))
                              for path, e in zip(files, entries)), index_manifest_path(index_dir))


def _apart_indexes(files: Sequence[str], listed: Sequence[DataFile | None], work: Work) -> list[tuple]:
    """``(index bytes, records, problems, data size, data SHA-256 or None)`` of each file (its SHA-256 read only
    when its entry records none); DamagedFiles when any has problems (then nothing is written)."""
    items = [(paths.absolute(path), None if e is None else (e.num_records, e.size_bytes),
              e is None or e.sha256 is None or e.size_bytes is None) for path, e in zip(files, listed)]
    if work.runner is None:
        progress = work.reporter.progress("index", len(files))
        try:
            results = [counted(progress, apart_index, *item) for item in items]
        finally:
            progress.close()
    else:
        work.reporter.note("index", f"indexing {count(len(files), 'file')} on {work.runner.name}")
        results = map_elements(_apart_index_of, items, work.runner, label="index")
    refuse_problems(files, [found[2] for found in results], "no index written")
    return results


def _apart_index_of(item: tuple) -> tuple:
    return apart_index(*item)


def apart_index(path: str, listed: tuple[int, int | None] | None, digest: bool, progress: Counter | None = None
                ) -> tuple[bytes | None, int, list[str], int | None, str | None]:
    """One data file's record index for an index_dir, here or as one Beam element: :func:`file_index`, with
    the data file's size and (when ``digest``) its SHA-256.

    Args:
        path: the data file (uncompressed TFRecord).
        listed: what its ``files`` entry says, as for :func:`file_index`; None when the manifest does not list it.
        digest: read the file whole for its SHA-256 (its entry records none).
        progress: a Counter to count on, None for none.

    Returns:
        ``(index bytes, record count, problems, data file size, SHA-256 or None)``.
    """
    blob, records, problems = file_index(path, listed, progress)
    if problems:
        return None, records, problems, None, None
    size = int.from_bytes(blob[16:24], "little")  # the data size the index header records
    if not digest:
        return blob, records, [], size, None
    sha, nbytes = hashlib.sha256(), 0
    try:
        with open_binary(path) as f:
            while chunk := f.read(1 << 20):
                sha.update(chunk)
                nbytes += len(chunk)
    except (OSError, tf.errors.OpError) as error:
        return None, records, [f"cannot be read ({_said(error)})"], None, None
    if nbytes != size:
        return None, records, [f"it was {count(size, 'byte')} while indexed, then {count(nbytes, 'byte')}: it "
                               "changed while being indexed"], None, None
    return blob, records, [], size, sha.hexdigest()


def _existing_entries(index_dir: str, reporter: Reporter) -> list[IndexedFile]:
    """The entries an index manifest already in ``index_dir`` holds (kept for files not indexed again)."""
    if not paths.exists(index_manifest_path(index_dir)):
        return []
    try:
        return list(load_index_manifest(index_dir).files.values())
    except ManifestError as error:
        reporter.note("index", f"replacing {shown(index_manifest_path(index_dir))}, which cannot be read as an index "
                               f"manifest ({error.problems[0].path}: {error.problems[0].message})")
        return []


def _put_apart(index_dir: str, indexes: list[tuple[IndexedFile, bytes]], entries: list[IndexedFile],
               work: Work) -> None:
    """Write each index, then the index manifest, in ``index_dir`` (each under a temporary name, then renamed);
    the temporary files of a killed run removed first."""
    directories = sorted({paths.dirname(join(index_dir, entry.index.name)) for entry, _ in indexes} | {index_dir})
    for directory in directories:
        paths.tf_io().gfile.makedirs(directory)
        for name in paths.remove_leftovers(directory, work.started, INDEX_TEMP):
            work.reporter.note("index", f"removed {name}, the temporary index of a run stopped while writing")
    for name in paths.remove_leftovers(index_dir, work.started):
        work.reporter.note("index", f"removed {name}, the temporary index manifest of a run stopped while writing")
    for entry, blob in indexes:
        paths.put(join(index_dir, entry.index.name), blob, TEMP_PREFIX)
    paths.put(index_manifest_path(index_dir), index_manifest_text(entries), MANIFEST_TEMP_PREFIX)


def _written_to(index_dir: str, what: str, function, *args) -> None:
    """``function(*args)``, its OSError or TensorFlow error said as an IndexDirError on ``index_dir``."""
    try:
        function(*args)
    except (OSError, tf.errors.OpError) as error:
        raise IndexDirError(Problem(shown(index_dir), "$", f"could not {what}: {_said(error)}")) from None


def _said(error: Exception) -> str:
    return tf_message(error) if isinstance(error, tf.errors.OpError) else (error.strerror or str(error))


def _target(target: str, runner: Runner | None, reporter: Reporter, writes_manifest: bool = True
            ) -> tuple[Manifest, list[str], str | None]:
    """The manifest, the data files a DIR or CONFIG names and the config's index_dir (a DIR's manifest written
    first when there is none and ``writes_manifest``); ManifestError for data that cannot be indexed."""
    configured = None
    if paths.isdir(target):
        manifest_path = paths.join(target, MANIFEST_NAME)
        if not paths.exists(manifest_path) and not writes_manifest:
            raise ManifestError(Problem(shown(manifest_path), "$", (
                f"file not found: with --index-dir nothing is written in {shown(target)}, so its manifest must be "
                f"there first: write it with `batchloaders manifest {shown(target)}` where the directory is "
                "writable (or copy one there)")))
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
        manifest, files, configured = dataset.manifest, list(dataset.files), dataset.access.index_dir
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
    return manifest, files, configured


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


def file_index(path: str, listed: tuple[int, int | None] | None, progress: Counter | None = None
               ) -> tuple[bytes | None, int, list[str]]:
    """One data file's record index: what ``batchloaders index`` does for each file, here or as one Beam element.

    Args:
        path: the data file (uncompressed TFRecord).
        listed: what its ``files`` entry says: (num_records, size_bytes or None when it records none); None when
            the manifest does not list it (nothing to check it against).
        progress: a Counter to count on, None for none.

    Returns:
        ``(index bytes, record count, problems)``; the bytes None when there are problems, which are said
        without the file's path in front.
    """
    num_records, size_bytes = listed or (None, None)
    try:
        index = scan_offsets(path, progress)
    except OSError as error:
        return None, 0, [f"cannot be read ({error.strerror or error})"]
    except tf.errors.OpError as error:  # a URL TensorFlow's file systems cannot read
        return None, 0, [f"cannot be read ({tf_message(error)})"]
    except FrameError as error:
        return None, 0, [str(error)]
    if listed is not None and (index.num_records != num_records
                               or (size_bytes is not None and size_bytes != index.data_size)):
        return None, index.num_records, [
            f"it holds {count(index.num_records, 'record')} in {count(index.data_size, 'byte')}, but the manifest "
            f"lists {count(num_records, 'record')}" + (f" in {count(size_bytes, 'byte')}" if size_bytes is not None
                                                       else "")
            + ": the file changed after the manifest was written (run `batchloaders manifest`)"]
    return encode(index), index.num_records, []
