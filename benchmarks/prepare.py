"""Preparing a dataset on one machine against the Apache Beam DirectRunner with 2 worker processes.

    python benchmarks/prepare.py [--files 16] [--mb 64] [--record-bytes 1024] [--dir DIR]

Writes ``--files`` uncompressed TFRecord files of about ``--mb`` MB each (Examples of an int64 id and a
``--record-bytes`` payload) once, then times ``manifest``, ``index``, ``verify`` and ``reshard`` (into as many
shards as files) without a runner and with ``DirectRunner`` in ``multi_processing`` mode with 2 workers,
and prints a Markdown table: seconds, MB/s, and the runner's overhead per file and per GB against the
one-machine command (negative: the runner was faster). The files stay in the page cache between runs (just
written), so these are CPU figures, not disk ones. The runner's workers must import this package: run
from the repository's root, or with the package installed.
"""
from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, REPO)  # the repository, when the package is not installed
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# The runner's worker processes import the package too: from the same place as this process.
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [REPO, os.environ.get("PYTHONPATH")]))

import tensorflow as tf  # noqa: E402

import batchloaders  # noqa: E402
from batchloaders.cli import verify, write_index, write_manifest  # noqa: E402
from batchloaders.prepare.beam import runner_from  # noqa: E402
from batchloaders.prepare.reshard import Options, reshard  # noqa: E402

MB = 1e6
RUNNER = runner_from("DirectRunner", ["direct_running_mode=multi_processing", "direct_num_workers=2"])


def write(directory: str, files: int, mb: int, record_bytes: int) -> int:
    """The data files and a manifest declaring their features; returns the bytes written."""
    os.makedirs(directory, exist_ok=True)
    payload = bytes(range(256)) * (record_bytes // 256 + 1)
    per_file = int(mb * MB) // (record_bytes + 30)
    for f in range(files):
        with tf.io.TFRecordWriter(os.path.join(directory, f"part-{f:02d}.tfrecords")) as w:
            for r in range(per_file):
                w.write(tf.train.Example(features=tf.train.Features(feature={
                    "id": tf.train.Feature(int64_list=tf.train.Int64List(value=[f * per_file + r])),
                    "blob": tf.train.Feature(bytes_list=tf.train.BytesList(value=[payload[:record_bytes]]))
                })).SerializeToString())
    with open(os.path.join(directory, "__manifest__.json"), "w") as m:
        json.dump({"compression": None, "allow_var_len": False, "features": [
            {"name": "id", "dtype": "int64", "shape": [], "deserialize_type": "int"},
            {"name": "blob", "dtype": "string", "shape": [], "deserialize_type": "string"}]}, m)
    return sum(os.path.getsize(os.path.join(directory, n)) for n in os.listdir(directory) if n.endswith(".tfrecords"))


def timed(call) -> float:
    start = time.perf_counter()
    status = call()
    assert status in (0, None) or isinstance(status, list), status
    return time.perf_counter() - start


def commands(directory: str, scratch: str, files: int):
    """(name, call(runner)) of each command timed."""
    quiet = io.StringIO
    return [
        ("manifest", lambda runner: write_manifest.run_with(directory, write_manifest.Choices(runner=runner), quiet(),
                                                            quiet())),
        ("index", lambda runner: write_index.run(directory, quiet(), quiet(), runner=runner)),
        ("verify", lambda runner: verify.run(directory, quiet(), quiet(), runner=runner)),
        ("reshard", lambda runner: reshard(directory, scratch, Options(files, overwrite=True), runner)),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=16)
    parser.add_argument("--mb", type=int, default=64)
    parser.add_argument("--record-bytes", type=int, default=1024)
    parser.add_argument("--dir", help="where the data goes (default: a temporary directory, removed after)")
    args = parser.parse_args()
    root = args.dir or tempfile.mkdtemp(prefix="batchloaders-prepare-")
    data, scratch = os.path.join(root, "data"), os.path.join(root, "resharded")
    try:
        size = write(data, args.files, args.mb, args.record_bytes)
        gb = size / 1e9
        print(f"{args.files} files, {size / MB:,.0f} MB, {args.record_bytes}-byte payloads; "
              f"{os.cpu_count()} cores; batchloaders {batchloaders.__version__}")
        print()
        print("| command | one machine s | MB/s | DirectRunner, 2 workers s | MB/s | runner overhead per file s | "
              "per GB s |")
        print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
        for name, call in commands(data, scratch, args.files):
            alone = timed(lambda: call(None))
            beam = timed(lambda: call(RUNNER))
            print(f"| {name} | {alone:.1f} | {size / MB / alone:,.0f} | {beam:.1f} | {size / MB / beam:,.0f} | "
                  f"{(beam - alone) / args.files:+.2f} | {(beam - alone) / gb:+.1f} |", flush=True)
    finally:
        if not args.dir:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
