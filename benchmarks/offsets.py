"""Reading TFRecord records by byte offset in tf.data, side by side with reading the files in order.

    python benchmarks/offsets.py                       # both record sizes, every technique, 3 rounds
    python benchmarks/offsets.py --sizes 3072 --cases sequential take1 runs64 --rounds 1

Data: 100,000 records of random bytes over 16 uncompressed files per record size (3 KB and 300 B,
lengths varying by up to 1/8 around it), written once into ``benchmarks/data/offsets/`` (gitignored)
and read once before timing, so the page cache holds them. Every technique but the sequential ones
reads the records in the order of one epoch's permutation (batchloaders/read/permutation.py):

* ``sequential``: ``TFRecordDataset`` over the files in turn, 1 MiB buffer (the yardstick);
  ``sequential2``: the files through a deterministic interleave of 2 (one file per core);
* ``take1``: per record a ``TFRecordDatasetV2`` op at its offset, ``take(1)``, buffer of its frame's
  bytes, 2 at once in a deterministic interleave (batchloaders/read/by_offset.py);
  ``take1_buffer256k``: the same with a 256 KiB buffer;
* ``runs8``, ``runs64`` (any ``runsR``): the same per block of R consecutive records of a file, the
  blocks in permuted order;
* ``fixed1``: per record ``FixedLengthRecordDataset`` with ``header_bytes`` = offset + 12 and
  ``footer_bytes`` the rest of the file, so its body is one record (no checksum is checked); the op
  reads its header bytes through instead of seeking, so it is timed on the first 2,000 records only;
* ``substr``: every file read whole into memory first (``tf.io.read_file``, joined; timed apart), then the
  records cut out 1,024 at a time with one vectorized ``tf.strings.substr`` (no checksum).

Each technique's records are checked first (untimed): the same payloads as the sequential read
(sorted 64-bit fingerprints equal), and the per-record techniques in exactly the same order.
Rounds are timed epochs; the table gives the median round.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np
import tensorflow as tf

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from batchloaders.read import by_offset, permutation  # noqa: E402

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "offsets")
RECORDS, FILES, SEED, BATCH = 100_000, 16, 7, 1024
BUFFER = 1 << 20


def write_data(size: int) -> dict:
    """The dataset of ``size``-byte records: its files, lengths and frame offsets (written once)."""
    directory = os.path.join(DATA, f"bytes{size}")
    layout_path = os.path.join(directory, "layout.json")
    if os.path.exists(layout_path):
        with open(layout_path) as f:
            return json.load(f)
    os.makedirs(directory, exist_ok=True)
    rng = np.random.default_rng(size)
    files, lengths, offsets = [], [], []
    for i in range(FILES):
        path = os.path.join(directory, f"part-{i:02d}.tfrecord")
        at = 0
        with tf.io.TFRecordWriter(path) as w:
            for length in rng.integers(size - size // 16, size + size // 16 + 1, RECORDS // FILES):
                w.write(rng.bytes(int(length)))
                offsets.append(at)
                lengths.append(int(length))
                at += int(length) + by_offset.FRAME_BYTES
        files.append(path)
    layout = {"files": files, "counts": [RECORDS // FILES] * FILES, "offsets": offsets, "lengths": lengths}
    with open(layout_path, "w") as f:
        json.dump(layout, f)
    return layout


class Tables:
    """The layout as tensors, and the permuted places to read (records or runs)."""

    def __init__(self, layout: dict):
        self.files = layout["files"]
        self.counts = tf.constant(layout["counts"], tf.int64)
        self.offsets = tf.constant(layout["offsets"], tf.int64)
        self.lengths = tf.constant(layout["lengths"], tf.int64)
        self.firsts = tf.concat([[0], tf.cumsum(self.counts)[:-1]], 0)
        self.n = len(layout["offsets"])
        lasts = tf.cumsum(self.counts) - 1
        self.sizes = tf.gather(self.offsets, lasts) + tf.gather(self.lengths, lasts) + by_offset.FRAME_BYTES

    def places(self) -> tf.data.Dataset:
        """(file, offset, length) per record, in the permutation's order."""
        def locate(p):
            ids = permutation.record_at(p, self.n, SEED, 0)
            file, _ = permutation.file_and_record(ids, self.counts)
            return file, tf.gather(self.offsets, ids), tf.gather(self.lengths, ids)
        return permutation.positions(self.n).batch(BATCH).map(locate).unbatch()

    def runs(self, run: int) -> tf.data.Dataset:
        """(file, offset, span, count) per block of ``run`` records, blocks in permuted order."""
        blocks = int(tf.reduce_sum(permutation.block_counts(self.counts, run)))

        def locate(p):
            file, first, count = permutation.block_run(permutation.record_at(p, blocks, SEED, 0),
                                                       self.counts, run)
            at = tf.gather(self.firsts, file) + first
            last = at + count - 1
            span = tf.gather(self.offsets, last) + tf.gather(self.lengths, last) + 16 - tf.gather(self.offsets, at)
            return file, tf.gather(self.offsets, at), span, count
        return permutation.positions(blocks).batch(BATCH).map(locate).unbatch()


def fixed_length(tables: Tables, count: int) -> tf.data.Dataset:
    paths = tf.constant(tables.files)

    def open_record(file, offset, length):  # the footer makes the body one record long, as the op requires
        footer = tf.gather(tables.sizes, file) - offset - 12 - length
        return tf.data.FixedLengthRecordDataset(tf.gather(paths, file), length, header_bytes=offset + 12,
                                                footer_bytes=footer, buffer_size=length)
    return tables.places().take(count).interleave(open_record, cycle_length=2, num_parallel_calls=2,
                                                  deterministic=True)


def in_memory(tables: Tables, contents: tf.Tensor) -> tf.data.Dataset:
    """``contents``: all files joined into one string (a gather of whole files per record would copy them)."""
    bases = tf.concat([[0], tf.cumsum(tables.sizes)[:-1]], 0)

    def cut(file, offset, length):
        return tf.strings.substr(contents, tf.gather(bases, file) + offset + 12, length)
    return tables.places().batch(BATCH).map(cut).unbatch()


def take1_buffered(tables: Tables) -> tf.data.Dataset:
    paths = tf.constant(tables.files)

    def open_record(file, offset, length):
        variant = tf.raw_ops.TFRecordDatasetV2(filenames=tf.reshape(tf.gather(paths, file), [1]),
                                               compression_type="", buffer_size=tf.constant(256 << 10, tf.int64),
                                               byte_offsets=tf.reshape(offset, [1]))
        return tf.data.experimental.from_variant(variant, by_offset.RECORD).take(1)
    return tables.places().interleave(open_record, cycle_length=2, num_parallel_calls=2, deterministic=True)


SAMPLE = 2_000  # records a technique slower than 1,000 records/s reads (its rate is taken on them)


def cases(tables: Tables, contents, names: list[str]) -> dict:
    """name -> (make the dataset, records it reads, or None for all)."""
    files = tables.files
    table = {
        "sequential": (lambda: tf.data.TFRecordDataset(files, buffer_size=BUFFER), None),
        "sequential2": (lambda: tf.data.Dataset.from_tensor_slices(files).interleave(
            lambda f: tf.data.TFRecordDataset(f, buffer_size=BUFFER), cycle_length=2, num_parallel_calls=2,
            deterministic=True), None),
        "take1": (lambda: by_offset.read_records(tables.places(), files), None),
        "take1_buffer256k": (lambda: take1_buffered(tables), None),
        "fixed1": (lambda: fixed_length(tables, SAMPLE), SAMPLE),
        "substr": (lambda: in_memory(tables, contents()), None),
    }
    for name in names:  # runsR: blocks of R records
        if name.startswith("runs"):
            run = int(name[4:])
            table[name] = (lambda run=run: by_offset.read_runs(tables.runs(run), files, max_count=run), None)
    return table


def fingerprints(ds: tf.data.Dataset) -> np.ndarray:
    batches = ds.batch(8192).map(lambda b: tf.strings.to_hash_bucket_fast(b, 1 << 62))
    return np.concatenate([b.numpy() for b in batches])


def timed(make) -> float:
    ds = make().batch(BATCH)
    start = time.perf_counter()
    for _ in ds:
        pass
    return time.perf_counter() - start


def run_size(size: int, names: list[str], rounds: int, verify: bool):
    """One row per technique, as each is measured."""
    layout = write_data(size)
    tables = Tables(layout)
    loaded = {}

    def contents():  # the files in memory, read once, the time kept apart
        if "t" not in loaded:
            start = time.perf_counter()
            loaded["t"] = tf.strings.reduce_join([tf.io.read_file(f) for f in tables.files])
            loaded["seconds"] = time.perf_counter() - start
        return loaded["t"]

    table = cases(tables, contents, names)
    payload = sum(layout["lengths"])
    timed(table["sequential"][0])  # the page cache holds the files from here on
    reference = np.sort(fingerprints(table["sequential"][0]())) if verify else None
    order = fingerprints(in_memory(tables, contents())) if verify else None
    for name in names:
        make, count = table[name]
        check = ""
        if verify:
            got = fingerprints(make())
            if count:  # a prefix of the permutation's order
                same = np.array_equal(got, order[:count])
            else:
                same = np.array_equal(np.sort(got), reference)
                same = same and (name.startswith(("sequential", "runs")) or np.array_equal(got, order))
            check = "same" if same else "DIFFERENT"
        seconds = statistics.median(timed(make) for _ in range(rounds))
        yield {"size": size, "case": name, "records_per_s": (count or tables.n) / seconds,
               "mb_per_s": payload * (count or tables.n) / tables.n / seconds / 1e6, "check": check,
               "load_s": loaded.get("seconds") if name == "substr" else None}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[3072, 300])
    parser.add_argument("--cases", nargs="+", default=["sequential", "sequential2", "take1", "take1_buffer256k",
                                                        "runs8", "runs16", "runs32", "runs64", "runs256", "fixed1",
                                                        "substr"])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--no-verify", dest="verify", action="store_false")
    args = parser.parse_args(argv)
    print(f"load average {os.getloadavg()[0]:.2f}; {RECORDS:,} records over {FILES} files; median of "
          f"{args.rounds} rounds")
    print("| record | technique | records/s | MB/s | x sequential | payloads |")
    print("| --- | --- | ---: | ---: | ---: | --- |")
    failed = False
    for size in args.sizes:
        base = None
        for r in run_size(size, args.cases, args.rounds, args.verify):
            base = r["records_per_s"] if r["case"] == "sequential" else base
            ratio = f"{r['records_per_s'] / base:.2f}" if base else "-"
            note = f" (+ {r['load_s']:.2f} s to load)" if r["load_s"] else ""
            print(f"| {size:,} B | {r['case']}{note} | {r['records_per_s']:,.0f} | {r['mb_per_s']:,.0f} | "
                  f"{ratio} | {r['check'] or '-'} |", flush=True)
            failed |= r["check"] == "DIFFERENT"
    return int(failed)


if __name__ == "__main__":
    sys.exit(main())
