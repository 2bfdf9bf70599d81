"""What reading by offset through TensorFlow's file systems costs: ``shuffle_scope: global`` on local files read
with ``os.pread`` (``random_access: local``), the same files read through TensorFlow's file systems
(``random_access: filesystem``) and the same files on ``ram://`` (TensorFlow's in-memory file system, the stand-in
for a bucket: no network latency, so this measures the per-read overhead of the path, not a bucket), with 16
reads in flight (the default) and with 1 (``ram-1``: without latency to hide, threads only contend for the
interpreter lock); and ``ram://`` through a local shard cache (``args.dataset.args.cache``): ``cache-cold``
(the cache emptied before each epoch, so every file is copied during it), ``cache-warm`` (every file already
copied) and ``gzip-cache-cold`` (the same records GZIP-compressed on ``ram://``, decompressed into an emptied
cache during each epoch).

    python benchmarks/remote_access.py                          # 50,000 records of 3 KB and of 300 B, 3 rounds
    python benchmarks/remote_access.py --records 20000 --sizes 64 --rounds 1     # a quick run

Data: benchmarks/global_shuffle.py's (written and indexed once under ``--data``), copied to ``ram://`` in this
process (files, manifest and indexes) for the ``ram`` setting. The loader and its settings are global_shuffle.py's
``global`` setting (independent, batches of 256, seed 1), ``reads_in_flight`` 16 for the file-system paths.

One ``input_fn`` per setting (built once, not timed); one untimed epoch each, checked (every record once, not
in file order, and the same batches on every path), then ``--rounds`` epochs per setting alternating (the order
rotating each round); the median round's records/s. One markdown table on stdout; every round in
``benchmarks/out/remote_access.json``. No figure is asserted; the exit status is 1 only when a check fails.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # the repository, when the package is not installed
sys.path.insert(0, HERE)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import batchloaders  # noqa: E402
import global_shuffle as gs  # noqa: E402

OUT = os.path.join(HERE, "out", "remote_access.json")
# ram-1: ram with reads_in_flight 1; cache-*: ram:// through a local shard cache, emptied before each epoch (cold)
# or filled (warm); gzip-cache-cold: the same records GZIP-compressed on ram://, decompressed into the cache.
SETTINGS = ("local", "filesystem-local", "ram", "ram-1", "cache-cold", "cache-warm", "gzip-cache-cold")
COLD = ("cache-cold", "gzip-cache-cold")


def to_ram(directory: str) -> str:
    """The files of ``directory`` (data, indexes, manifest) copied to a new ram:// directory."""
    url = f"ram://remote-access-bench-{uuid.uuid4().hex[:8]}"
    tf.io.gfile.makedirs(url)
    for name in sorted(os.listdir(directory)):
        if name.endswith((".tfrecords", ".index", ".json")) and name != "written.json":
            tf.io.gfile.copy(os.path.join(directory, name), f"{url}/{name}")
    return url


def to_ram_gzip(directory: str) -> str:
    """The records of ``directory`` GZIP-compressed in a new ram:// directory, with a manifest listing them."""
    url = f"ram://remote-access-bench-gz-{uuid.uuid4().hex[:8]}"
    tf.io.gfile.makedirs(url)
    options = tf.io.TFRecordOptions(compression_type="GZIP")
    for name in sorted(os.listdir(directory)):
        if name.endswith(".tfrecords"):
            with tf.io.TFRecordWriter(f"{url}/{name}.gz", options) as writer:
                for record in tf.data.TFRecordDataset(os.path.join(directory, name)).as_numpy_iterator():
                    writer.write(record)
    with open(os.path.join(directory, "__manifest__.json")) as f:
        manifest = {k: v for k, v in json.load(f).items() if k != "files"}
    with tf.io.gfile.GFile(f"{url}/__manifest__.json", "w") as f:
        f.write(json.dumps(dict(manifest, compression="gzip")))
    batchloaders.write_manifest(url)
    return url


def cache_dir(setting: str) -> str:
    return os.path.join(HERE, "out", f"remote-access-{setting.replace('-cold', '').replace('-warm', '')}")


def empty(directory: str) -> None:
    """Every copy in a cache directory removed (its lock file kept: a cache in use holds it)."""
    if os.path.isdir(directory):
        for name in os.listdir(directory):
            if name != "cache.lock":
                os.unlink(os.path.join(directory, name))


def config(directory: str, url: str, setting: str, gz: str = "") -> dict:
    root = gz if setting.startswith("gzip") else url if setting.startswith(("ram", "cache")) else directory
    cfg = gs.config(root, "global")
    if setting.startswith(("cache", "gzip")):
        cfg["args"]["dataset"]["args"]["cache"] = {"dir": cache_dir(setting), "max_bytes": 1 << 40}
    if setting == "filesystem-local":
        cfg["args"]["dataset"]["args"]["random_access"] = "filesystem"
    if setting == "ram-1":
        cfg["args"]["dataset"]["args"]["reads_in_flight"] = 1
    return cfg


def run_size(directory: str, records: int, rounds: int, problems: list) -> dict:
    """setting -> seconds of each timed round, on one record size."""
    url, gz = to_ram(directory), to_ram_gzip(directory)
    for s in SETTINGS:
        empty(cache_dir(s))
    fns = {s: batchloaders.build_input_fn(config(directory, url, s, gz)) for s in SETTINGS}
    reference = None
    for s in SETTINGS:
        if s in COLD:
            empty(cache_dir(s))
        seconds, _, batches = gs.epoch(fns[s], keep=True)
        print(f"  {s}: untimed epoch {seconds:.2f} s", file=sys.stderr, flush=True)
        if problem := gs.check_epoch(s, batches, records):
            problems.append(problem)
        got = np.concatenate(batches)
        if reference is not None and not np.array_equal(got, reference):
            problems.append(f"{s}: another order than {SETTINGS[0]}'s")
        reference = got if reference is None else reference
    times = {s: [] for s in SETTINGS}
    for r in range(rounds):
        for s in SETTINGS[r % len(SETTINGS):] + SETTINGS[:r % len(SETTINGS)]:
            if s in COLD:
                empty(cache_dir(s))
            seconds, examples, _ = gs.epoch(fns[s])
            if examples != records:
                problems.append(f"{s}: round {r}: {examples:,} examples, expected {records:,}")
            times[s].append(seconds)
    tf.io.gfile.rmtree(url)
    tf.io.gfile.rmtree(gz)
    for s in SETTINGS:
        empty(cache_dir(s))
    return times


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=gs.DATA, help="where the datasets are written (once)")
    parser.add_argument("--records", type=int, default=50_000, help="records per dataset")
    parser.add_argument("--sizes", type=int, nargs="+", default=[750, 64],
                        help="float32 values of x per record (750: about 3 KB a record, 64: about 300 B)")
    parser.add_argument("--rounds", type=int, default=3, help="timed epochs per setting")
    args = parser.parse_args(argv)
    results = {"load_start": os.getloadavg(), "records": args.records, "rounds": args.rounds,
               "tensorflow": tf.__version__, "sizes": []}
    print(f"load average {gs.load()} (1, 5, 15 min); {args.records:,} records over {gs.FILES} files per size; "
          f"{os.cpu_count()} CPUs; TensorFlow {tf.__version__}", flush=True)
    problems: list[str] = []
    rows = []
    for floats in args.sizes:
        directory, size = gs.write_data(args.data, args.records, floats)
        per_record = size / args.records
        label = f"{per_record / 1000:.1f} KB" if per_record >= 1000 else f"{per_record:.0f} B"
        print(f"{label} ({floats} floats): {size:,} bytes; load average {gs.load()}", flush=True)
        started = time.perf_counter()
        times = run_size(directory, args.records, args.rounds, problems)
        rates = {s: args.records / statistics.median(times[s]) for s in SETTINGS}
        for s in SETTINGS:
            rows.append(f"| {label} | {s} | {rates[s]:,.0f} | {rates[s] / rates['local']:.2f} |")
        results["sizes"].append({"floats": floats, "bytes": size, "times": times, "records_per_s": rates,
                                 "seconds": time.perf_counter() - started, "load": os.getloadavg()})
    print("\n| record | path | records/s | of local |\n|---|---|---:|---:|")
    print("\n".join(rows))
    print(f"\nload average {gs.load()}")
    results["problems"] = problems
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as f:
        json.dump(results, f, indent=2)
    for problem in problems:
        print(f"CHECK FAILED: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
