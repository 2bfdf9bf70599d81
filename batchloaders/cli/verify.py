"""``batchloaders verify CONFIG|DIR``: re-read every data file whole and report what does not add up.

A DIR means the dataset directory's ``__manifest__.json`` and its data files;
a CONFIG means its dataset's manifest and data files (the config's plugins
are not imported: reading the data needs none of their types). Each file is read
whole (progress on stderr) and checked for:

* damaged frames or checksums, found by TensorFlow's reader: the record and
  the byte where it begins (the lengths plus 16 bytes of framing of the records before);
* what that reader passes over without an error: bytes after the last whole
  record of an uncompressed file (a file cut inside a record header, or bytes
  appended), a GZIP or ZLIB stream that is cut, lacks its trailer or is
  followed by other bytes;
* its record count, size and SHA-256 against the manifest's ``files`` entry
  when there is one (a file cut at a record boundary, or emptied);
* every record against the manifest's features, as ``check-data`` checks them;
* when the manifest has ``files``: data files it does not list, and listed
  files that are missing;
* every record index the manifest records (``batchloaders index``): present, its size and
  SHA-256 as recorded, written for the data file as it is, and its offsets equal to where
  the frames found while reading begin.

::

    $ batchloaders verify data/mnist
    data/mnist/part-1.tfrecords: the manifest lists 30,000 records for this file, but it holds 29,500 (...)
    OK data/mnist/part-0.tfrecords (30,000 records)
    1 of 2 files have problems

An empty file is fine unless the manifest's count says otherwise. Exit
status: 0 when every file adds up, 1 otherwise.
"""
from __future__ import annotations

import functools
import sys
from typing import Sequence, TextIO

import numpy as np
import tensorflow as tf

from batchloaders.config.datasets import DEFAULT_PATTERN, pattern_matcher
from batchloaders.config.manifest import MANIFEST_NAME
from batchloaders.core.model import DataFile, Manifest
from batchloaders.cli.check_data import load_dataset, summary, unlisted
from batchloaders.cli.progress import Progress, counted
from batchloaders.prepare import paths
from batchloaders.prepare.beam import Runner, map_elements
from batchloaders.read import naming
from batchloaders.read.record_index import check_index, index_path
from batchloaders.read.records import Scan, count, scan_file, shown, tf_message

HASH_SHOWN = 12  # hex digits of a SHA-256 a message shows


def target_files(target: str) -> tuple[Manifest, list[str], list[str]]:
    """The manifest and data files a DIR or CONFIG argument names, and the paths under DIR that cannot be read.

    Raises BatchLoaderError when the manifest or config is invalid.
    """
    if paths.isdir(target):
        manifest = paths.load_manifest(paths.join(target, MANIFEST_NAME))
        files, unreadable = paths.walk(target, pattern_matcher(DEFAULT_PATTERN))
        return manifest, files, [f"{shown(target)}: {problem}" for problem in unreadable]
    dataset = load_dataset(target)  # its plugins are not imported: reading the data needs none of their types
    return dataset.manifest, list(dataset.files), []


def run(target: str, out: TextIO | None = None, err: TextIO | None = None, *, runner: Runner | None = None) -> int:
    """Re-read every data file of a dataset directory or a config's dataset whole (``batchloaders verify``).

    Args:
        target: a dataset directory or a config file.
        out: where a line per problem (or OK per file) and a summary go. Default: stdout.
        err: where progress goes. Default: stderr.
        runner: the Beam runner that reads the files, one element per file; None: this process reads them.

    Returns:
        The exit status: 0 when every file adds up, 1 otherwise.

    Raises:
        ConfigError: the config is invalid.
        ManifestError: the manifest is invalid.
    """
    manifest, files, unreadable = target_files(target)
    return verify_files(files, manifest, out or sys.stdout, err or sys.stderr, unreadable, runner)


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


def index_problems(path: str, scan: Scan, manifest: Manifest) -> list[str]:
    """Where the record index the manifest records for ``path`` is stale, or disagrees with the frames found."""
    index, problem = check_index(path, manifest)
    name = f"its index {shown(index_path(path))}"
    if problem is not None:
        return [f"{name}: {problem} (write it again with `batchloaders index`)"]
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
            f"{int(found[at]):,} in the file (write it again with `batchloaders index`)"]


def verify_files(files: Sequence[str], manifest: Manifest, out: TextIO, err: TextIO,
                 unreadable: Sequence[str] = (), runner: Runner | None = None) -> int:
    """Read every file whole, print a line per problem (or OK) and a summary; return the exit status.

    ``unreadable``: lines for paths that look like data files but cannot be read, each counted as a file.
    ``runner``: the Beam runner that reads the files, one element per file (the lines are printed here, in the
    files' order); None: this process reads them.
    """
    progress = Progress("verify", len(files), err)
    where = shown(manifest.path)
    bad = 0
    try:
        if runner is None:
            results = (counted(progress, file_problems, path, manifest) for path in files)
        else:
            progress.print(f"verify: reading {count(len(files), 'file')} on {runner.name}", err)
            results = map_elements(functools.partial(file_problems, manifest=manifest),
                                   [paths.absolute(path) for path in files], runner, label="verify")
        for path, (problems, records) in zip(files, results):
            for line in problems:
                progress.print(f"{shown(path)}: {line}", out)
            if not problems:
                progress.print(f"OK {shown(path)} ({count(records, 'record')})", out)
            bad += bool(problems)
        read = {paths.key(p) for p in files}
        missing = [(p, e) for p, e in manifest.files.items() if p not in read and not paths.found(p)]
        for path, entry in missing:
            line = f" (line {entry.line})" if entry.line else ""
            progress.print(f"{shown(path)}: missing: the manifest {where} lists it{line} with "
                           f"{count(entry.num_records, 'record')}", out)
    finally:
        progress.close()
    for line in unreadable:
        print(line, file=out)
    bad += len(missing) + len(unreadable)
    print(summary(bad, len(files) + len(missing) + len(unreadable)), file=out)
    return 1 if bad else 0


def file_problems(path: str, manifest: Manifest, progress: Progress | None = None) -> tuple[list[str], int]:
    """One data file read whole and checked: what ``batchloaders verify`` does for each file, here or as one
    Beam element.

    Args:
        path: the data file.
        manifest: the dataset's manifest.
        progress: a Progress to count on, None for none.

    Returns:
        ``(problems, records read)``; the problems without the file's path in front, none when it adds up.
    """
    entry = manifest.entry(path)
    indexed = entry is not None and entry.index is not None
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
    if indexed and scan is not None:
        problems += index_problems(path, scan, manifest)
    problems += unlisted(path, manifest)
    return problems, scan.records if scan is not None else 0
