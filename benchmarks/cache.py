"""The shard cache (batchloaders/read/shard_cache.py): records read at their offsets through it, cold and warm.

    python benchmarks/cache.py                              # both record sizes, every source, 3 rounds
    python benchmarks/cache.py --sizes 300 --sources ram-gzip --rounds 1

Data: per record size (300 B and 3 KB, lengths varying by up to 1/8 around it) 8 files of random bytes,
about 30 MB uncompressed in all, written once into ``benchmarks/data/cache/`` (gitignored), uncompressed and
GZIP; ``ram`` sources are those files copied into TensorFlow's in-memory file system (the stand-in for a
bucket). Each round reads one epoch in the order of a permutation of all records, 1,024 records a batch (each
batch's records grouped by file, one ``read`` call per file), and checks every record's payload:

* ``cold``: a new, empty cache directory: every file is copied (decompressed, hashed, indexed) on its first read;
* ``warm``: a new ``CachedFiles`` on the filled directory: each copy is checked (SHA-256) on its first read;
* ``hot``: the same instance's second epoch: positional reads only.

The table gives records/s of the median round.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid

import numpy as np
import tensorflow as tf

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from batchloaders.core.model import CacheSpec, DataFile, Manifest, file_key  # noqa: E402
from batchloaders.read.shard_cache import CachedFiles  # noqa: E402

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "cache")
TOTAL_BYTES, FILES, BATCH, SEED = 30 << 20, 8, 1024, 7
SOURCES = ("local", "local-gzip", "ram", "ram-gzip")


def write_data(size: int) -> tuple[dict, list[list[bytes]]]:
    """{"plain": paths, "gzip": paths} of ``size``-byte records, and each file's records."""
    rng = np.random.default_rng(size)
    n = TOTAL_BYTES // size // FILES
    records = [[rng.bytes(int(size + rng.integers(-size // 8, size // 8 + 1))) for _ in range(n)]
               for _ in range(FILES)]
    paths = {}
    for kind, option in (("plain", ""), ("gzip", "GZIP")):
        directory = os.path.join(DATA, f"bytes{size}", kind)
        os.makedirs(directory, exist_ok=True)
        paths[kind] = [os.path.join(directory, f"part-{i}.tfrecord") for i in range(FILES)]
        for path, recs in zip(paths[kind], records):
            if not os.path.exists(path):
                with tf.io.TFRecordWriter(path + ".tmp", tf.io.TFRecordOptions(compression_type=option)) as w:
                    for r in recs:
                        w.write(r)
                os.replace(path + ".tmp", path)
    return paths, records


def sources(paths: dict, source: str) -> tuple[list[str], str | None]:
    compression = "gzip" if source.endswith("gzip") else None
    local = paths["gzip" if compression else "plain"]
    if not source.startswith("ram"):
        return local, compression
    base = f"ram://{uuid.uuid4().hex}"
    out = []
    for path in local:
        out.append(f"{base}/{os.path.basename(path)}")
        tf.io.gfile.copy(path, out[-1])
    return out, compression


def manifest(paths: list[str], compression, counts) -> Manifest:
    files = {file_key(p): DataFile(os.path.basename(p), n) for p, n in zip(paths, counts)}
    return Manifest("<manifest>", compression, False, {}, files)


def epoch(cache: CachedFiles, order: np.ndarray, starts: np.ndarray, records) -> float:
    """Seconds to read every record in ``order`` (global ids), each checked against its payload."""
    began = time.perf_counter()
    for at in range(0, len(order), BATCH):
        ids = order[at:at + BATCH]
        files = np.searchsorted(starts, ids, side="right") - 1
        for f in np.unique(files):
            rows = ids[files == f] - starts[f]
            ix = cache.index(int(f))
            frames = cache.read(int(f), ix.offsets[rows].tolist(), (ix.lengths[rows] + 16).tolist())
            for row, frame in zip(rows.tolist(), frames):
                if frame[12:-4] != records[f][row]:
                    raise SystemExit(f"file {f} record {row}: wrong bytes")
    return time.perf_counter() - began


def measure(size: int, source: str, rounds: int) -> dict[str, float]:
    paths, records = write_data(size)
    counts = [len(r) for r in records]
    starts = np.concatenate([[0], np.cumsum(counts)])
    order = np.random.default_rng(SEED).permutation(int(starts[-1]))
    src, compression = sources(paths, source)
    man = manifest(src, compression, counts)
    times = {"cold": [], "warm": [], "hot": []}
    for _ in range(rounds):
        d = tempfile.mkdtemp(prefix="bench-cache-")
        try:
            with CachedFiles(src, man, CacheSpec(d, 1 << 40)) as cache:
                times["cold"].append(epoch(cache, order, starts, records))
            with CachedFiles(src, man, CacheSpec(d, 1 << 40)) as cache:
                times["warm"].append(epoch(cache, order, starts, records))
                times["hot"].append(epoch(cache, order, starts, records))
        finally:
            shutil.rmtree(d)
    return {k: len(order) / statistics.median(v) for k, v in times.items()}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[300, 3072])
    parser.add_argument("--sources", nargs="+", default=list(SOURCES), choices=SOURCES)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    print(f"{'record':>7} {'source':>11} {'cold rec/s':>11} {'warm rec/s':>11} {'hot rec/s':>11}")
    for size in args.sizes:
        for source in args.sources:
            got = measure(size, source, args.rounds)
            print(f"{size:>7} {source:>11} {got['cold']:>11,.0f} {got['warm']:>11,.0f} {got['hot']:>11,.0f}",
                  flush=True)


if __name__ == "__main__":
    main()
