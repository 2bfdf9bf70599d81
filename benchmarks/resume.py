"""Checkpoint size and restore time against the position in the epoch, ``resume: state`` vs ``replay``.

    python benchmarks/resume.py                      # 8 files x 25,000 small records, shuffle buffer 10,000
    python benchmarks/resume.py --buffer 100000 --positions 0 0.5 0.99
    python benchmarks/resume.py --epochs 3 --positions 0.5 1.5 2.5 [--no-counts]

The independent loader, shuffled, batches of 256. For each position the run saves a
``tf.train.Checkpoint(iterator=batchloaders.ResumableIterator(input_fn))`` there, then restores it
into a fresh ResumableIterator and times the restore up to the first batch. Not a test: the figures go
into README.md (Scaling out).
"""
from __future__ import annotations

import argparse
import gc
import os
import pathlib
import tempfile
import time

import numpy as np
import tensorflow as tf

import batchloaders

FILES, RECORDS = 8, 25_000


def write(directory: pathlib.Path, counts: bool = True) -> None:
    """Record r of file f: id = f * RECORDS + r, x = 8 floats (~70 bytes a record); the manifest lists each
    file's num_records unless ``counts`` is False (a replay then makes and drops every batch consumed)."""
    import json

    directory.mkdir(parents=True, exist_ok=True)
    files = []
    for f in range(FILES):
        path = directory / f"part-{f}.tfrecords"
        with tf.io.TFRecordWriter(str(path)) as out:
            for r in range(RECORDS):
                i = f * RECORDS + r
                out.write(tf.train.Example(features=tf.train.Features(feature={
                    "id": tf.train.Feature(int64_list=tf.train.Int64List(value=[i])),
                    "x": tf.train.Feature(float_list=tf.train.FloatList(value=np.full(8, i, np.float32)))
                })).SerializeToString())
        files.append({"name": path.name, "num_records": RECORDS})
    manifest = {"compression": None, "allow_var_len": False, "features": [
        {"name": "id", "dtype": "int64", "shape": [], "deserialize_type": "int"},
        {"name": "x", "dtype": "float32", "shape": [8], "deserialize_type": "float"}]}
    if counts:
        manifest["files"] = files
    (directory / "__manifest__.json").write_text(json.dumps(manifest))


def config(directory: pathlib.Path, buffer: int, mode: str, epochs: int = 1) -> dict:
    return {"type": "independent", "model": {"inputs": ["id", "x"], "targets": []}, "args": {
        "dataset": {"type": "dir", "args": {"data_dir": str(directory)}}, "target_batch_size": 256,
        "drop_remainder": False, "epochs": epochs, "num_read_buffer_bytes": 262144, "num_prefetch": 0,
        "shuffle": True, "num_shuffle_buffer_elements": buffer, "num_filenames_shuffle_buffer": FILES,
        "num_mix_files": 4, "seed": 1, "resume": mode,
        "primary_features": [{"from_name": "id", "to_name": "id"}, {"from_name": "x", "to_name": "x"}]}}


def measure(directory: pathlib.Path, buffer: int, mode: str, at: int, out: pathlib.Path,
            epochs: int = 1) -> tuple[int, float, float]:
    """(checkpoint bytes, save seconds, restore-to-first-batch seconds) of a save after ``at`` batches."""
    input_fn = batchloaders.build_input_fn(config(directory, buffer, mode, epochs))
    batches = batchloaders.ResumableIterator(input_fn)
    for _ in range(at):
        next(batches)
    start = time.perf_counter()
    path = tf.train.Checkpoint(iterator=batches).save(str(out / f"{mode}-{at}"))
    saved = time.perf_counter() - start
    size = sum(os.path.getsize(out / name) for name in os.listdir(out) if name.startswith(f"{mode}-{at}-"))
    del batches  # as in a fresh process: the saving run's pipeline is gone before the restore
    gc.collect()
    start = time.perf_counter()
    restored = batchloaders.ResumableIterator(input_fn)
    tf.train.Checkpoint(iterator=restored).restore(path)
    next(restored)
    return size, saved, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--buffer", type=int, default=10_000, help="shuffle buffer (examples)")
    parser.add_argument("--positions", type=float, nargs="+", default=[0.0, 0.25, 0.5, 0.75, 0.99],
                        help="epochs (fractions of one) into the run at which to save: 2.5 is mid third epoch")
    parser.add_argument("--epochs", type=int, default=1, help="epochs in the run")
    parser.add_argument("--no-counts", action="store_true", help="a manifest without the files' num_records")
    args = parser.parse_args()
    if max(args.positions) >= args.epochs:
        parser.error(f"positions must be below --epochs {args.epochs}")
    with tempfile.TemporaryDirectory() as tmp:
        data = pathlib.Path(tmp) / "data"
        write(data, counts=not args.no_counts)
        total = -(-FILES * RECORDS // 256)
        print(f"independent, shuffled, {FILES * RECORDS:,} records of ~70 B, batches of 256 ({total} an epoch), "
              f"shuffle buffer {args.buffer:,}, {args.epochs} epoch(s), "
              f"{'no ' if args.no_counts else ''}record counts in the manifest")
        print("| position | state: checkpoint | state: restore | replay: checkpoint | replay: restore |")
        print("| ---: | ---: | ---: | ---: | ---: |")
        for fraction in args.positions:
            at = int(fraction * total)
            row = [f"{fraction:.0%} (batch {at})" if args.epochs == 1 else f"epoch {fraction:g} (batch {at})"]
            for mode in ("state", "replay"):
                out = pathlib.Path(tmp) / f"ckpt-{mode}-{at}"
                out.mkdir()
                size, _, restore = measure(data, args.buffer, mode, at, out, args.epochs)
                row += [f"{size / 1e6:.1f} MB" if size >= 1e5 else f"{size:,} B", f"{restore:.2f} s"]
            print("| " + " | ".join(row) + " |", flush=True)


if __name__ == "__main__":
    main()
