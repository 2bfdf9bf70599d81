"""``batchloaders verify CONFIG|DIR``: re-read every data file whole and report what does not add up.

A DIR means the dataset directory's ``__manifest__.json`` and its data files;
a CONFIG means its dataset's manifest and data files (the config's plugins
are not imported: reading the data needs none of their types). Each file is read
whole (progress on stderr) and checked (the checks are :mod:`batchloaders.prepare.verify`'s) for:

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
  the frames found while reading begin; with ``--index-dir PATH``, the index of every data file
  in PATH (``batchloaders index --index-dir PATH``) too, against its index manifest in the same way.

::

    $ batchloaders verify data/mnist
    data/mnist/part-1.tfrecords: the manifest lists 30,000 records for this file, but it holds 29,500 (...)
    OK data/mnist/part-0.tfrecords (30,000 records)
    1 of 2 files have problems

An empty file is fine unless the manifest's count says otherwise. Exit
status: 0 when every file adds up, 1 otherwise.
"""
from __future__ import annotations

import dataclasses
import sys
from typing import Sequence, TextIO

from batchloaders.errors import Problem
from batchloaders.core.model import Manifest
from batchloaders.cli.check_data import summary
from batchloaders.cli.progress import Progress
from batchloaders.prepare.beam import Runner
from batchloaders.prepare.dataset import target_files
from batchloaders.prepare.verify import checked, missing
from batchloaders.read.records import count, shown


def run(target: str, out: TextIO | None = None, err: TextIO | None = None, *, runner: Runner | None = None,
        index_dir: str | None = None) -> int:
    """Re-read every data file of a dataset directory or a config's dataset whole (``batchloaders verify``).

    Args:
        target: a dataset directory or a config file.
        out: where a line per problem (or OK per file) and a summary go. Default: stdout.
        err: where progress goes. Default: stderr.
        runner: the Beam runner that reads the files, one element per file; None: this process reads them.
        index_dir: check every data file's index there too (``batchloaders index --index-dir``); None: only the
            indexes the manifest records.

    Returns:
        The exit status: 0 when every file adds up, 1 otherwise.

    Raises:
        ConfigError: the config is invalid.
        ManifestError: the manifest is invalid.
    """
    manifest, files, unreadable = target_files(target)
    return verify_files(files, manifest, out or sys.stdout, err or sys.stderr, unreadable,
                        Reading(runner, index_dir))


@dataclasses.dataclass(frozen=True)
class Reading:
    """How verify reads: ``runner``, the Beam runner that reads the files, one element per file (the lines are
    printed here, in the files' order; None: this process reads them); ``index_dir``, where indexes written
    apart from the data are checked too (None: none)."""

    runner: Runner | None = None
    index_dir: str | None = None


def verify_files(files: Sequence[str], manifest: Manifest, out: TextIO, err: TextIO,
                 unreadable: Sequence[Problem] = (), reading: Reading = Reading()) -> int:
    """Read every file whole, print a line per problem (or OK) and a summary; return the exit status.

    ``unreadable``: paths that look like data files but cannot be read, each counted as a file.
    ``reading``: how the files are read (:class:`Reading`).
    """
    runner = reading.runner
    progress = Progress("verify", len(files), err)
    where = shown(manifest.path)
    bad = 0
    try:
        if runner is not None:
            progress.print(f"verify: reading {count(len(files), 'file')} on {runner.name}", err)
        for path, (problems, records) in zip(files, checked(files, manifest, runner, progress, reading.index_dir)):
            for line in problems:
                progress.print(f"{shown(path)}: {line}", out)
            if not problems:
                progress.print(f"OK {shown(path)} ({count(records, 'record')})", out)
            bad += bool(problems)
        gone = missing(files, manifest)
        for path, entry in gone:
            line = f" (line {entry.line})" if entry.line else ""
            progress.print(f"{shown(path)}: missing: the manifest {where} lists it{line} with "
                           f"{count(entry.num_records, 'record')}", out)
    finally:
        progress.close()
    for problem in unreadable:
        print(f"{problem.file}: {problem.message}", file=out)
    bad += len(gone) + len(unreadable)
    print(summary(bad, len(files) + len(gone) + len(unreadable)), file=out)
    return 1 if bad else 0
