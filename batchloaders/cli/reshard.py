"""``batchloaders reshard SRC DEST --shards N``: rewrite a dataset into N shards balanced by record count.

The work is :mod:`batchloaders.prepare.reshard`'s; this prints what was written::

    $ batchloaders reshard data/raw data/global --shards 4
    wrote 4 shards in data/global: 60,000 records, 47,520,000 bytes, indexed
    wrote data/global/__manifest__.json

Exit status: 0 when the dataset was written, 1 otherwise (then DEST holds no manifest).
"""
from __future__ import annotations

import argparse
import json
import sys
from typing import TextIO

from batchloaders.prepare.beam import Runner
from batchloaders.prepare.paths import read_bytes
from batchloaders.prepare.reshard import Options, reshard
from batchloaders.read.records import count, shown


def options_from(args: argparse.Namespace) -> Options:
    """The layout the command line asks for."""
    return Options(args.shards, None if args.compression == "none" else args.compression, args.index,
                   args.overwrite, args.leave_out_unlisted)


def run(source: str, destination: str, options: Options, runner: Runner | None = None, *,
        out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Rewrite SRC into ``options.shards`` balanced shards in DEST and print what was written.

    Args:
        source: a dataset directory whose manifest lists its files, or a loader config.
        destination: the output directory.
        options: the number of shards, compression, index and overwrite.
        runner: the Beam runner that writes the shards, one element per shard; None: this process does.
        out: where the summary goes. Default: stdout.
        err: where a runner's line goes. Default: stderr.

    Returns:
        0 when the dataset was written.

    Raises:
        BatchLoaderError: what :func:`batchloaders.prepare.reshard.reshard` raises (the command prints it).
    """
    out, err = out or sys.stdout, err or sys.stderr
    written = reshard(source, destination, options, runner, err)
    entries = json.loads(read_bytes(written[-1]))["files"]
    indexed = any("index" in entry for entry in entries)
    print(f"wrote {count(len(entries), 'shard')} in {shown(destination)}: "
          f"{count(sum(e['num_records'] for e in entries), 'record')}, "
          f"{count(sum(e['size_bytes'] for e in entries), 'byte')}" + (", indexed" if indexed else ""), file=out)
    print(f"wrote {shown(written[-1])}", file=out)
    return 0
