"""The checks of ``batchloaders verify``: each data file read whole and checked against what its manifest says.

:func:`file_problems` is one file's work (here or as one Apache Beam element), :func:`checked` every file's,
in order; :func:`missing` the files the manifest lists that are not there. What each problem means is
described in :mod:`batchloaders.cli.verify`.
"""
from __future__ import annotations

import functools
from typing import Iterable, Sequence

import numpy as np
import tensorflow as tf

from batchloaders.core.model import DataFile, Manifest
from batchloaders.prepare import paths
from batchloaders.prepare.beam import Runner, map_elements
from batchloaders.prepare.dataset import unlisted
from batchloaders.prepare.report import Counter, Silent, counted
from batchloaders.read import naming
from batchloaders.read.record_index import check_index, index_location
from batchloaders.read.records import Scan, count, scan_file, shown, tf_message

HASH_SHOWN = 12  # hex digits of a SHA-256 a message shows


def checked(files: Sequence[str], manifest: Manifest, runner: Runner | None = None,
            progress: Counter | None = None, index_dir: str | None = None) -> Iterable[tuple[list[str], int]]:
    """Every data file read whole and checked, in the files' order (each as it is done, without a runner).

    Args:
        files: the data files.
        manifest: the dataset's manifest.
        runner: the Beam runner that reads the files, one element per file; None: this process reads them.
        progress: a Counter to count on (without a runner), None for none.
        index_dir: check each file's index there too (``batchloaders index --index-dir``); None: only those the
            manifest records.

    Returns:
        ``(problems, records read)`` of each file, as :func:`file_problems` returns them.
    """
    if runner is None:
        counter = progress if progress is not None else Silent()
        check = functools.partial(file_problems, index_dir=index_dir)
        return (counted(counter, check, path, manifest) for path in files)
    return map_elements(functools.partial(file_problems, manifest=manifest, index_dir=index_dir),
                        [paths.absolute(path) for path in files], runner, label="verify")


def missing(files: Sequence[str], manifest: Manifest) -> list[tuple[str, DataFile]]:
    """The files the manifest lists that were not read and are not there.

    Args:
        files: the data files read.
        manifest: the dataset's manifest.

    Returns:
        ``(path, entry)`` of each.
    """
    read = {paths.key(p) for p in files}
    return [(p, e) for p, e in manifest.files.items() if p not in read and not paths.found(p)]


def entry_problems(scan: Scan, entry: DataFile) -> list[str]:
    """Where a file read whole disagrees with its ``files`` entry."""
    problems = []
    line = f" (line {entry.line})" if entry.line else ""
    if scan.complete and scan.records != entry.num_records:
        why = ("the file was cut at a record boundary or emptied, or changed after the manifest was written"
               if scan.records < entry.num_records else "records were added after the manifest was written")
        problems.append(f"the manifest lists {count(entry.num_records, 'record')} for this file{line}, but it holds "
                        f"{scan.records:,} ({why})")
    if not scan.sha256:
        return problems  # not read (not TFRecord, or compressed otherwise): its size and bytes tell nothing more
    if entry.size_bytes is not None and scan.size != entry.size_bytes:
        problems.append(f"the file is {count(scan.size, 'byte')}, but the manifest records "
                        f"{count(entry.size_bytes, 'byte')}{line}")
    elif entry.sha256 is not None and scan.sha256 != entry.sha256:
        problems.append(f"its SHA-256 is {scan.sha256[:HASH_SHOWN]}..., but the manifest records "
                        f"{entry.sha256[:HASH_SHOWN]}...{line}: its bytes changed after the manifest was written")
    return problems


def index_problems(path: str, scan: Scan, manifest: Manifest, index_dir: str | None = None) -> list[str]:
    """Where the record index of ``path`` is stale, or disagrees with the frames found: the one the manifest
    records, or with ``index_dir`` the one its index manifest records."""
    index, problem = check_index(path, manifest, index_dir)
    name = f"its index {shown(index_location(path, manifest, index_dir))}"
    again = "`batchloaders index`" if index_dir is None else f"`batchloaders index --index-dir {shown(index_dir)}`"
    if problem is not None:
        return [f"{name}: {problem} (write it again with {again})"]
    if not scan.complete or scan.offsets is None:
        return []  # the file's own problems say why its records cannot be counted on
    found = np.frombuffer(scan.offsets, np.int64)
    if len(found) == index.num_records and np.array_equal(found, index.offsets):
        return []
    shared = min(len(found), index.num_records)
    at = int(np.argmax(found[:shared] != index.offsets[:shared])) if shared else 0
    if shared and found[at] == index.offsets[at]:
        return [f"{name}: it holds {count(index.num_records, 'record')}, but the file holds {len(found):,}"]
    return [f"{naming.record_name(name, at)} begins at byte {int(index.offsets[at]):,} in the index, but at byte "
            f"{int(found[at]):,} in the file (write it again with {again})"]


def file_problems(path: str, manifest: Manifest, progress: Counter | None = None, index_dir: str | None = None
                  ) -> tuple[list[str], int]:
    """One data file read whole and checked: what ``batchloaders verify`` does for each file, here or as one
    Beam element.

    Args:
        path: the data file.
        manifest: the dataset's manifest.
        progress: a Counter to count on, None for none.
        index_dir: check the file's index there too; None: only the one the manifest records.

    Returns:
        ``(problems, records read)``; the problems without the file's path in front, none when it adds up.
    """
    entry = manifest.entry(path)
    beside = entry is not None and entry.index is not None
    indexed = beside or index_dir is not None
    scan = None
    try:
        scan = scan_file(path, manifest.compression, manifest=manifest, progress=progress, offsets=indexed)
        problems = list(scan.problems)
    except OSError as error:
        problems = [f"cannot be read ({error.strerror or error})"]
    except tf.errors.OpError as error:  # a remote file TensorFlow's file systems cannot open
        problems = [f"cannot be read ({tf_message(error)})"]
    if entry is not None and scan is not None:
        problems += entry_problems(scan, entry)
    if beside and scan is not None:
        problems += index_problems(path, scan, manifest)
    if index_dir is not None and scan is not None:
        problems += index_problems(path, scan, manifest, index_dir)
    problems += unlisted(path, manifest)
    return problems, scan.records if scan is not None else 0
