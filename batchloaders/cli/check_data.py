"""``batchloaders check-data CONFIG``: the first records of every data file against the manifest, in seconds.

Reads the first ``--records`` records (default 8) of each data file of the
config's dataset and checks each against every feature the manifest declares
(not only those the config reads): the feature is there, in the list type
its deserialize_type stores (int64_list, float_list, bytes_list), with the
number of values the manifest's shape gives (byte strings of the right size
for raw), as a context feature or a feature list as var_len says, in
Examples or SequenceExamples as allow_var_len says. Before any record, the
file's first bytes must be TFRecord, compressed as the manifest says. A data file
the manifest's ``files`` does not list (added after it was written) is a problem. An
empty file is fine here; ``batchloaders verify`` reads files whole. A problem
is one line (wrapped here)::

    $ batchloaders check-data configs/mnist.yaml
    data/part-0.tfrecords: record 0: feature 'x': the manifest says float (float_list) of shape [4]
        (4 values), found an int64_list of 3 values (also in 7 more records: 1-7)
    OK data/part-1.tfrecords (8 records checked)
    1 of 2 files have problems

Exit status: 0 when every file agrees with the manifest, 1 otherwise.
"""
from __future__ import annotations

import os
import sys
from typing import Sequence, TextIO

import tensorflow as tf

from batchloaders.config.accounting import missing_files
from batchloaders.core.model import Manifest
from batchloaders.prepare.dataset import load_dataset, unlisted
from batchloaders.read.records import (ReadError, RecordProblems, check_record, compression_name, count,
                                        read_problem, read_records, shown, sniff, tf_message)

DEFAULT_RECORDS = 8


def summary(bad: int, total: int) -> str:
    if total == 1:
        return f"{bad} of 1 file has problems"
    return f"{bad} of {total} files have problems"


def check_file(path: str, manifest: Manifest, records: int = DEFAULT_RECORDS) -> tuple[int, list[str]]:
    """(records checked, problems) of the first ``records`` records of one data file."""
    found = sniff(path, os.path.dirname(manifest.path))
    if found.kind == "empty":
        return 0, []
    if found.kind == "other":
        return 0, [f"not a TFRecord file: {found.detail}"]
    if found.compression != manifest.compression:
        return 0, [f"the file is {found.describe()}, but the manifest says compression "
                   f"{compression_name(manifest.compression)}"]
    problems = RecordProblems()
    checked, failed = 0, []
    try:
        for index, _, serialized in read_records(path, manifest.compression, limit=records):
            checked = index + 1
            problems.add(index, check_record(serialized, manifest))
    except ReadError as error:
        failed.append(read_problem(error, manifest.compression))
    return checked, problems.lines() + failed


def check_files(files: Sequence[str], manifest: Manifest, records: int = DEFAULT_RECORDS,
                out: TextIO | None = None, missing: Sequence[tuple] = ()) -> int:
    """Check each file, print a line per problem (or OK) and a summary; return the exit status. ``missing``:
    the files the manifest lists that are not there (accounting.missing_files), each a file with a problem."""
    out = out or sys.stdout
    bad = 0
    for path in files:
        try:
            checked, problems = check_file(path, manifest, records)
        except OSError as error:
            checked, problems = 0, [f"cannot be read ({error.strerror or error})"]
        except tf.errors.OpError as error:  # a remote file TensorFlow's file systems cannot open
            checked, problems = 0, [f"cannot be read ({tf_message(error)})"]
        problems += unlisted(path, manifest)
        for line in problems:
            print(f"{shown(path)}: {line}", file=out)
        if not problems:
            print(f"OK {shown(path)} ({count(checked, 'record')} checked)", file=out)
        bad += bool(problems)
    for _, path, entry in missing:
        line = f" (line {entry.line})" if entry.line else ""
        print(f"{shown(path)}: missing: the manifest {shown(manifest.path)} lists it{line} with "
              f"{count(entry.num_records, 'record')}", file=out)
    bad += len(missing)
    print(summary(bad, len(files) + len(missing)), file=out)
    return 1 if bad else 0


def run(config: str, records: int = DEFAULT_RECORDS, out: TextIO | None = None, *, trust_plugins: bool = True) -> int:
    """Check the first records of every data file of a loader config; raise BatchLoaderError if it is invalid.
    ``trust_plugins``: as :func:`batchloaders.load_config` takes it (the data check itself needs no plugin)."""
    dataset = load_dataset(config, trust_plugins=trust_plugins)
    return check_files(dataset.files, dataset.manifest, records, out, missing_files(dataset))
