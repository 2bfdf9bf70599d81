"""``batchloaders index DIR|CONFIG``: write the record index of every data file and record it in the manifest.

A DIR means ``DIR/__manifest__.json`` and the data files it lists (when it lists
none: those a ``dir`` dataset finds there by default; when there is no manifest, it is written
first, as ``batchloaders manifest DIR`` writes it); a CONFIG means its dataset's files and manifest
(the config's plugins are not imported). For
each data file the frames are walked (each length's checksum checked, progress on
stderr) and ``<data file>.index`` is written beside it (format:
:mod:`batchloaders.read.record_index`). Each file's ``files`` entry in the manifest
gets ``"index": {"name", "size_bytes", "sha256"}``; a file the manifest does not
list yet is read whole and gets its full entry first, as ``batchloaders manifest``
writes it. Nothing is written when a file is damaged, compressed, or disagrees with
its entry. Indexes and the manifest are written to temporary files, then renamed;
the temporary files of a run that was killed (indexes beside the data files, the
manifest beside it) are removed by the next run, which says so::

    $ batchloaders index data/mnist
    indexed data/mnist/part-0.tfrecords: 30,000 records, index 240,024 bytes
    indexed data/mnist/part-1.tfrecords: 30,000 records, index 240,024 bytes
    wrote 2 indexes (480,048 bytes, 8 per record) and data/mnist/__manifest__.json

Exit status: 0 when the indexes and the manifest were written, 1 otherwise.
"""
from __future__ import annotations

import sys
import time
from typing import Sequence, TextIO

import tensorflow as tf

from batchloaders.errors import BatchLoaderError
from batchloaders.config.manifest import INDEX_TEMP, MANIFEST_NAME
from batchloaders.cli.check_data import load_dataset
from batchloaders.cli.progress import Progress, counted
from batchloaders.cli.write_manifest import (EXIT_INVALID, EXIT_OK, Refused, _entries, _existing,
                                             data_files, refuse_problems, write_valid)
from batchloaders.cli.write_manifest import write as write_manifest
from batchloaders.prepare import paths
from batchloaders.prepare.beam import Runner, map_elements
from batchloaders.read.record_index import FrameError, encode, index_path, scan_offsets, sha256_of
from batchloaders.read.records import count, shown, tf_message

TEMP_PREFIX = ".__index__."  # config.manifest.INDEX_TEMP matches the names mkstemp makes of it


def run(target: str, out: TextIO | None = None, err: TextIO | None = None, *, runner: Runner | None = None) -> int:
    """Index every data file of a dataset directory or a config's dataset (``batchloaders index``).

    Problems are printed, not raised.

    Args:
        target: a dataset directory (its manifest is written first when there is none) or a config file.
        out: where a line per file and a summary go. Default: stdout.
        err: where problems and progress go. Default: stderr.
        runner: the Beam runner that walks the files, one element per file; None: this process does.

    Returns:
        The exit status: 0 when the indexes and the manifest were written, 1 otherwise.
    """
    out, err = out or sys.stdout, err or sys.stderr
    try:
        lines = write(target, err, runner)
    except (Refused, BatchLoaderError) as error:
        for line in str(error).splitlines():
            print(f"batchloaders index: error: {line}", file=err)
        return EXIT_INVALID
    for line in lines:
        print(line, file=out)
    return EXIT_OK


def _target(target: str, err: TextIO, runner: Runner | None = None) -> tuple[str, list[str]]:
    """The manifest path and the data files a DIR or CONFIG names (a DIR's manifest written first when there is
    none); Refused for data that cannot be indexed."""
    if paths.isdir(target):
        manifest_path = paths.join(target, MANIFEST_NAME)
        if not paths.exists(manifest_path):
            print(f"batchloaders index: no {MANIFEST_NAME} in {shown(target)}: writing it first, as `batchloaders "
                  f"manifest {shown(target)}` does", file=err)
            for line in write_manifest(target, err, runner=runner):
                print(f"batchloaders index: {line}", file=err)
        manifest = paths.load_manifest(manifest_path)
        # The files the manifest lists (it may have been written with --pattern), else those found by default.
        files = list(manifest.files) if manifest.files else data_files(target)
    else:
        dataset = load_dataset(target)  # its plugins are not imported: reading the data needs none of their types
        manifest, files = dataset.manifest, list(dataset.files)
    if manifest.compression is not None:
        raise Refused(f"{shown(manifest.path)} says compression {manifest.compression!r}: a compressed file cannot "
                      "be read at a byte offset, so it cannot be indexed; rewrite the data files uncompressed "
                      "(compression null) to index them")
    base = paths.dirname(manifest.path)
    outside = [path for path in files if not paths.within(path, base)]
    if outside:
        raise Refused("\n".join(f"{shown(path)}: not a file under the manifest's directory {shown(base)}: only "
                                "those can be indexed (the manifest records each index by its path there)"
                                for path in outside))
    return manifest.path, files


def write(target: str, err: TextIO, runner: Runner | None = None) -> list[str]:
    """Write the indexes and the manifest; return the summary lines. ``runner``: the Beam runner that reads
    the files (one element per file), None for this process."""
    return written(target, err, runner)[0]


def written(target: str, err: TextIO, runner: Runner | None = None) -> tuple[list[str], list[str]]:
    """:func:`write`'s summary lines, and the paths it wrote: the indexes, then the manifest."""
    started = time.time()
    manifest_path, files = _target(target, err, runner)
    base = paths.dirname(manifest_path)
    data = _existing(manifest_path)
    entries = list(data.get("files") or [])
    listed = {paths.key(paths.join(base, e["name"])): e for e in entries}
    unlisted = [path for path in files if paths.key(path) not in listed]
    if unlisted:  # their full entries first, read whole as `batchloaders manifest` reads them
        added = _entries(base, unlisted, None, err, runner)
        entries += added
        listed.update((paths.key(paths.join(base, e["name"])), e) for e in added)
    indexes = _indexes(files, listed, err, runner)
    for directory in sorted({paths.dirname(path) for path in files}):
        for name in paths.remove_leftovers(directory, started, INDEX_TEMP):
            print(f"batchloaders index: removed {name}, the temporary index of a run stopped while writing", file=err)
    for name in paths.remove_leftovers(base, started):
        print(f"batchloaders index: removed {name}, the temporary manifest of a run stopped while writing", file=err)
    lines = []
    for path, blob, records in indexes:
        paths.put(index_path(path), blob, TEMP_PREFIX)
        entry = listed[paths.key(path)]
        entry["index"] = {"name": entry["name"] + ".index", "size_bytes": len(blob), "sha256": sha256_of(blob)}
        lines.append(f"indexed {shown(path)}: {count(records, 'record')}, index {count(len(blob), 'byte')}")
    data["files"] = entries
    write_valid(manifest_path, data, base, "the manifest was not updated")
    total = sum(len(blob) for _, blob, _ in indexes)
    added = f", with entries for {count(len(unlisted), 'file')} it did not list" if unlisted else ""
    lines.append(f"wrote {len(indexes):,} index{'es' * (len(indexes) != 1)} ({count(total, 'byte')}, 8 per record) and "
                 f"{shown(manifest_path)}{added}")
    return lines, [index_path(path) for path, _, _ in indexes] + [manifest_path]


def _indexes(files: Sequence[str], listed: dict, err: TextIO, runner: Runner | None = None
             ) -> list[tuple[str, bytes, int]]:
    """Each data file, its index's bytes and its record count (one Beam element per file on ``runner``); Refused
    naming every file that is damaged or disagrees with its ``files`` entry (then no index is written)."""
    listed_as = [_listed_as(listed[paths.key(path)]) for path in files]
    if runner is None:
        progress = Progress("index", len(files), err)
        try:
            results = [counted(progress, file_index, path, entry) for path, entry in zip(files, listed_as)]
        finally:
            progress.close()
    else:
        print(f"batchloaders index: indexing {count(len(files), 'file')} on {runner.name}", file=err)
        results = map_elements(_file_index_of, [(paths.absolute(path), entry) for path, entry in zip(files, listed_as)],
                               runner, label="index")
    refuse_problems(files, [found for _, _, found in results], "no index written")
    return [(path, blob, records) for path, (blob, records, _) in zip(files, results)]


def _listed_as(entry: dict) -> tuple[int, int | None]:
    """What a ``files`` entry says of its file: (num_records, size_bytes or None)."""
    return entry["num_records"], entry.get("size_bytes")


def _file_index_of(item: tuple[str, tuple[int, int | None]]) -> tuple[bytes | None, int, list[str]]:
    return file_index(*item)


def file_index(path: str, listed: tuple[int, int | None], progress: Progress | None = None
               ) -> tuple[bytes | None, int, list[str]]:
    """One data file's record index: what ``batchloaders index`` does for each file, here or as one Beam element.

    Args:
        path: the data file (uncompressed TFRecord).
        listed: what its ``files`` entry says: (num_records, size_bytes or None when it records none).
        progress: a Progress to count on, None for none.

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
