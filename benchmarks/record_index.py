"""What a record index costs: its size, the time to build it, and reading one record with and without it.

    python benchmarks/record_index.py [--records 100000] [--files 4] [--bytes 3000]

Writes ``--records`` Examples (an int64 id and a ``--bytes`` payload) into ``--files`` files in a
temporary directory, runs ``batchloaders manifest`` on them, then ``batchloaders index`` (three times,
the fastest kept), and prints one line per figure of docs/record-index.md's "What it costs" table. The
files are in the page cache throughout (just written): a cold disk reads whole pages, so the index of
files of a few KB records then takes about as long as reading them.
"""
from __future__ import annotations

import argparse
import io
import json
import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # the repository, when the package is not installed
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402

import batchloaders  # noqa: E402
from batchloaders.cli import write_index, write_manifest  # noqa: E402
from batchloaders.runtime.record_access import read_frame  # noqa: E402
from batchloaders.read import record_index  # noqa: E402
from batchloaders.read.records import read_records  # noqa: E402


def write(directory: str, files: int, per_file: int, payload_bytes: int) -> list[str]:
    payload = bytes(range(256)) * (payload_bytes // 256 + 1)
    paths = []
    for f in range(files):
        paths.append(os.path.join(directory, f"part-{f}.tfrecords"))
        with tf.io.TFRecordWriter(paths[-1]) as w:
            for r in range(per_file):
                w.write(tf.train.Example(features=tf.train.Features(feature={
                    "id": tf.train.Feature(int64_list=tf.train.Int64List(value=[f * per_file + r])),
                    "blob": tf.train.Feature(bytes_list=tf.train.BytesList(value=[payload[:payload_bytes]]))
                })).SerializeToString())
    with open(os.path.join(directory, "__manifest__.json"), "w") as m:
        json.dump({"compression": None, "allow_var_len": False, "features": [
            {"name": "id", "dtype": "int64", "shape": [], "deserialize_type": "int"},
            {"name": "blob", "dtype": "string", "shape": [], "deserialize_type": "string"}]}, m)
    return paths


def seconds(call) -> float:
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--files", type=int, default=4)
    parser.add_argument("--bytes", type=int, default=3000)
    args = parser.parse_args()
    per_file = args.records // args.files
    with tempfile.TemporaryDirectory() as d:
        paths = write(d, args.files, per_file, args.bytes)
        data = sum(os.path.getsize(p) for p in paths)
        print(f"data: {args.files * per_file:,} records, {data:,} bytes in {args.files} files")
        quiet = dict(out=io.StringIO(), err=io.StringIO())
        print(f"batchloaders manifest: {seconds(lambda: write_manifest.run(d, **quiet)):.2f} s")
        built = min(seconds(lambda: write_index.run(d, **quiet)) for _ in range(3))
        print(f"batchloaders index: {built:.2f} s, {args.files * per_file / built:,.0f} records/s")
        size = sum(os.path.getsize(record_index.index_path(p)) for p in paths)
        print(f"index size: {size:,} bytes, {100 * size / data:.2f}% of the data")
        manifest = batchloaders.load_manifest(os.path.join(d, "__manifest__.json"))
        loaded = seconds(lambda: [record_index.load_index(p, manifest) for p in paths])
        print(f"load_index of {args.files} files: {loaded * 1e3:.1f} ms")
        last, index = paths[-1], record_index.load_index(paths[-1], manifest)
        picks = range(0, per_file, max(1, per_file // 100))
        each = seconds(lambda: [read_frame(last, n, int(index.offsets[n]), int(index.lengths[n]))
                                for n in picks]) / len(picks)
        print(f"one record at its offset: {each * 1e3:.2f} ms")
        upto = int(per_file * 0.96)
        print(f"read from the start up to record {upto:,}: "
              f"{seconds(lambda: sum(1 for _ in read_records(last, None, limit=upto))) * 1e3:.0f} ms")


if __name__ == "__main__":
    main()
