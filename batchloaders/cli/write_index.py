"""``batchloaders index DIR|CONFIG``: write the record index of every data file and record it in the manifest.

The work is :mod:`batchloaders.prepare.index`'s; this prints what was written.

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

With ``--index-dir PATH`` (a local directory or a URL, created if missing) the indexes are written
to ``PATH/<data file's name in the manifest>.index`` and recorded, each with its data file's size,
SHA-256 and record count, in ``PATH/__index_manifest__.json`` (:mod:`batchloaders.config.index_manifest`),
and nothing is written in the dataset's directory, which may be read-only (it must hold its manifest
already); a config reads them with ``args.dataset.args.index_dir``. A CONFIG whose dataset names an
``index_dir`` is indexed there without the option.

Exit status: 0 when the indexes and the manifest were written, 1 otherwise.
"""
from __future__ import annotations

import sys
from typing import TextIO

from batchloaders.errors import BatchLoaderError
from batchloaders.cli.progress import Printed
from batchloaders.cli.write_manifest import EXIT_INVALID, EXIT_OK, error_lines
from batchloaders.prepare.beam import Runner
from batchloaders.prepare.index import write_index


def run(target: str, out: TextIO | None = None, err: TextIO | None = None, *, runner: Runner | None = None,
        index_dir: str | None = None) -> int:
    """Index every data file of a dataset directory or a config's dataset (``batchloaders index``).

    Problems are printed, not raised.

    Args:
        target: a dataset directory (its manifest is written first when there is none) or a config file.
        out: where a line per file and a summary go. Default: stdout.
        err: where problems and progress go. Default: stderr.
        runner: the Beam runner that walks the files, one element per file; None: this process does.
        index_dir: write the indexes and their index manifest there, nothing in the dataset's directory; None:
            beside each data file (or a CONFIG's own index_dir).

    Returns:
        The exit status: 0 when the indexes and the manifest were written, 1 otherwise.
    """
    out, err = out or sys.stdout, err or sys.stderr
    try:
        written = write_index(target, runner, Printed(err), index_dir=index_dir)
    except BatchLoaderError as error:
        for line in error_lines(error):
            print(f"batchloaders index: error: {line}", file=err)
        return EXIT_INVALID
    for line in written.lines():
        print(line, file=out)
    return EXIT_OK
