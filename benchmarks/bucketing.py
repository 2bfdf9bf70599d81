"""Padding efficiency and throughput of length bucketing against the plain padded batch, on speech.

    python benchmarks/bucketing.py                 # about 2 minutes on 2 cores
    python benchmarks/bucketing.py --rounds 10     # the README table

Data: benchmarks/data/speech (bench_data.py): SequenceExamples of 20..200 frames of 40
float32, lognormal lengths (median 97) clipped at 200, so a padded batch of 32 is padded
to near its longest example. Three configs read the same files the same way (4 files at
a time, parse 2, prefetch 4, shuffled windows of files), each with the frames, the
per-frame labels and the frame count `n`:

* plain: batches of 32 padded to the batch maximum;
* buckets: 18 buckets 10 frames wide (30, 40, ..., 200), 32 examples each;
* tokens: the same boundaries with a budget of 32 x 110 frames per batch (short utterances
  in larger batches, long ones in smaller);
* packed: rows of 400 frames holding several utterances (best fit), 8 rows per batch, with
  segment ids and positions instead of the frame count;
* packed16: the same with 16 rows per batch, 6,400 slots: about the plain batch's 32 x 190
  padded frames, so the model's batch takes the same memory.

Rounds alternate the pipelines in one process (fresh dataset and iterator each round). Each
round takes the first batch (start-up, timed apart), then ``--warmup`` examples untimed (the
prefetch and parallel-map buffers fill during start-up; timing them would flatter whichever
pipeline buffers the most: bucketing and packing hold several blocks of up to 4,096 examples, so
the default is six blocks' worth), then times batches until ``--examples`` examples. Padding
efficiency = real frames (sum of n) / padded frames (batch x width), over the timed batches.
Prints one table of medians, with each round's examples/s against the same round's plain
pipeline (the run-to-run noise of a shared VM is larger than some of the differences). Frames/s
is shown too: over a whole round every config gets the same mix of lengths, but a short run of
batches of short examples would flatter examples/s.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

import bench_data  # noqa: E402

from batchloaders import build_input_fn  # noqa: E402

BOUNDARIES = list(range(30, 201, 10))


def config(bucketing=None, packing=None) -> dict:
    args = {"dataset": {"type": "dir", "args": {"data_dir": os.path.join(bench_data.ROOT, "speech")}},
            "target_batch_size": 32, "drop_remainder": False, "epochs": None, "num_parallel_reads": 4,
            "num_parallel_parses": 2, "num_read_buffer_bytes": 2**20, "num_prefetch": 4, "shuffle": True,
            "num_shuffle_buffer_elements": 512, "num_filenames_shuffle_buffer": 16, "num_mix_files": 4, "seed": 1,
            "primary_features": [{"from_name": "frames", "to_name": "frames"},
                                 {"from_name": "labels", "to_name": "labels"}],
            "secondary_features": [{"to_name": "n", "type": "length", "args": {"tensor": "frames"}}],
            "padding": True}
    inputs = ["frames", "n"]
    if bucketing:
        args["bucketing"] = {"by": "frames", **bucketing}
    if packing:  # rows of several utterances: the frame count per utterance has no place in a row
        args["packing"] = {"tensors": ["frames", "labels"], **packing}
        args["secondary_features"] = []
        inputs = ["frames", "segment_ids", "positions"]
    return {"type": "independent", "model": {"inputs": inputs, "targets": ["labels"]}, "args": args}


CONFIGS = {
    "plain": config(),
    "buckets": config({"boundaries": BOUNDARIES, "batch_sizes": [32] * (len(BOUNDARIES) + 1)}),
    "tokens": config({"boundaries": BOUNDARIES, "max_tokens": 32 * 110}),
    "packed": {**config(packing={"length": 400}), "args": {**config(packing={"length": 400})["args"],
                                                          "target_batch_size": 8}},
    "packed16": {**config(packing={"length": 400}), "args": {**config(packing={"length": 400})["args"],
                                                            "target_batch_size": 16}},
}


def _examples(features) -> int:
    if "segment_ids" in features:  # packed rows: examples are segments
        return int(features["segment_ids"].numpy().max(axis=1).sum())
    return int(features["frames"].shape[0])


def run_once(name: str, want: int, warmup: int) -> dict:
    start = time.perf_counter()
    iterator = iter(build_input_fn(CONFIGS[name])())
    features, _ = next(iterator)
    first = time.perf_counter() - start
    taken = 0
    while taken < warmup:
        taken += _examples(next(iterator)[0])
    real = padded = examples = batches = 0
    begin = time.perf_counter()
    while examples < want:
        features, _ = next(iterator)
        batches += 1
        # (Counted in numpy: eager TensorFlow ops cost tens of microseconds each, which would charge
        # configs with smaller batches for the benchmark's own bookkeeping.)
        if "segment_ids" in features:  # packed rows: real frames are those in a segment; examples are segments
            seg = features["segment_ids"].numpy()
            real += int(np.count_nonzero(seg))
            examples += int(seg.max(axis=1).sum())
        else:
            real += int(features["n"].numpy().sum())
            examples += int(features["frames"].shape[0])
        padded += int(features["frames"].shape[0] * features["frames"].shape[1])
    seconds = time.perf_counter() - begin
    return {"first": first, "frames/s": real / seconds, "examples/s": examples / seconds,
            "efficiency": real / padded, "batch": examples / batches}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--examples", type=int, default=100000, help="examples timed per round and config")
    parser.add_argument("--warmup", type=int, default=25000, help="examples after the first batch, not timed")
    args = parser.parse_args(argv)
    bench_data.generate(log=lambda *a: None)
    results = {name: [] for name in CONFIGS}
    for r in range(args.rounds):
        names = list(CONFIGS)
        for name in names[r % len(names):] + names[:r % len(names)]:  # rotate who goes first
            results[name].append(run_once(name, args.examples, args.warmup))
    median = {name: {k: statistics.median(run[k] for run in runs) for k in runs[0]} for name, runs in results.items()}
    base = median["plain"]["frames/s"]
    print(f"speech, {args.rounds} rounds x {args.examples:,} examples after {args.warmup:,} untimed, medians; "
          f"{os.cpu_count()} CPUs")
    print("| config | padding efficiency | frames/s | vs plain | examples/s | examples/s vs plain, each round | "
          "mean examples per batch | build + first batch ms |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for name, m in median.items():
        # Each round against the same round's plain pipeline (rounds run alternated, so they share the VM's mood).
        ratios = [run["examples/s"] / plain["examples/s"] for run, plain in zip(results[name], results["plain"])]
        print(f"| {name} | {m['efficiency']:.3f} | {m['frames/s'] / 1e6:.2f}M | {m['frames/s'] / base:.2f}x | "
              f"{m['examples/s']:,.0f} | {min(ratios):.2f}-{max(ratios):.2f}x (median {statistics.median(ratios):.2f}x) | "
              f"{m['batch']:.1f} | {m['first'] * 1000:.0f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
