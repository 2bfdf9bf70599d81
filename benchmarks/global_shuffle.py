"""What ``shuffle_scope: global`` costs: throughput against sequential reading and the shuffle buffer, restore time.

    python benchmarks/global_shuffle.py                          # 100,000 records of 3 KB and of 300 B, 3 rounds
    python benchmarks/global_shuffle.py --records 20000 --sizes 64 --rounds 1 --repeats 3   # a quick run

Data: ``--records`` Examples over 16 uncompressed files per record size, written once under ``--data``
(default ``benchmarks/data/global_shuffle/``, gitignored): ``x``, ``--sizes`` float32 values (750: about
3 KB a record; 64: about 300 B), and ``label``, the record's global id (int64). The manifest is written as
tests/conftest.py's ``write_manifest`` writes it, then ``python -m batchloaders index DIR`` lists the files and
writes their record indexes. The files are read once before timing, so the page cache holds them.

The independent loader, batches of 256, ``num_parallel_reads: 4``, ``num_parallel_parses: 2``,
``num_prefetch: 4``, a 1 MiB read buffer, one epoch, seed 1, in three settings: ``sequential`` (shuffle
false), ``buffer`` (shuffle true, ``shuffle_scope: buffer``, a buffer of 10,000 examples, 16 file names
shuffled, 4 files mixed) and ``global`` (shuffle true, ``shuffle_scope: global``).

1. Throughput: one ``input_fn`` per setting (built once, not timed); one untimed epoch each (functions traced,
   and checked: every record once, for the shuffled settings not in file order), then ``--rounds`` whole epochs
   per setting, alternating in one process (the order rotating each round), nothing done per batch; the
   median round's examples/s.
2. Restore (``resume: replay``): the time from ``input_fn(start_position=P)`` (global) or
   ``input_fn(skip_batches=K)`` (buffer) to the first batch, P = K x 256, K at 1% and 90% of the epoch's
   batches, and K = 0 (a start, nothing restored: the bar the restores add to); each repeat on a fresh
   ``build_input_fn`` (not timed: a restoring process builds it anyway), so that no call gets a pipeline an
   earlier one built; median of ``--repeats``. The first batch is checked against batch K of the untimed epoch.
3. The state: ``len(json.dumps(ResumableIterator(input_fn).get_state()))`` after 10 batches.

One markdown table per part on stdout; everything (every round and repeat, the load averages) in
``benchmarks/out/global_shuffle.json``. The load average (1, 5, 15 min) is printed at the start, per record
size and at the end: on shared cores absolute figures move a lot, ratios from the same run less. No figure is
asserted; the exit status is 1 only when a check fails.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)  # the repository, when the package is not installed
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import batchloaders  # noqa: E402

DATA = os.path.join(HERE, "data", "global_shuffle")
OUT = os.path.join(HERE, "out", "global_shuffle.json")
FILES, BATCH, SETTINGS = 16, 256, ("sequential", "buffer", "global")
FRACTIONS = (0.0, 0.01, 0.9)  # 0: no restore, the start-up to compare with


def load() -> str:
    return " ".join(f"{v:.2f}" for v in os.getloadavg())


def write_data(root: str, records: int, floats: int) -> tuple[str, int]:
    """The dataset of ``records`` Examples of ``floats`` float32 values (written and indexed once): its directory
    and its bytes."""
    directory = os.path.join(root, f"x{floats}-n{records}")
    done = os.path.join(directory, "written.json")
    if not os.path.exists(done):
        os.makedirs(directory, exist_ok=True)
        rng = np.random.default_rng(floats)
        per_file = -(-records // FILES)
        for f in range(FILES):
            ids = range(f * per_file, min(records, (f + 1) * per_file))
            with tf.io.TFRecordWriter(os.path.join(directory, f"part-{f:02d}.tfrecords")) as w:
                for i in ids:
                    w.write(tf.train.Example(features=tf.train.Features(feature={
                        "x": tf.train.Feature(float_list=tf.train.FloatList(
                            value=rng.standard_normal(floats, np.float32))),
                        "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[i]))})).SerializeToString())
        with open(os.path.join(directory, "__manifest__.json"), "w") as m:  # as tests/conftest.py write_manifest
            json.dump({"compression": None, "allow_var_len": False, "features": [
                {"name": "x", "dtype": "float32", "shape": [floats], "deserialize_type": "float"},
                {"name": "label", "dtype": "int64", "shape": [], "deserialize_type": "int"}]}, m)
        subprocess.run([sys.executable, "-m", "batchloaders", "index", directory], check=True, cwd=ROOT,
                       env={**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")},
                       stdout=subprocess.DEVNULL)
        with open(done, "w") as f:
            json.dump({"records": records, "floats": floats}, f)
    size = sum(os.path.getsize(os.path.join(directory, n)) for n in os.listdir(directory) if n.endswith(".tfrecords"))
    return directory, size


def config(directory: str, setting: str, resume: str | None = None) -> dict:
    args = {"dataset": {"type": "dir", "args": {"data_dir": directory}}, "target_batch_size": BATCH,
            "drop_remainder": False, "epochs": 1, "seed": 1, "num_parallel_reads": 4, "num_parallel_parses": 2,
            "num_prefetch": 4, "num_read_buffer_bytes": 1 << 20, "shuffle": setting != "sequential",
            "primary_features": [{"from_name": "x", "to_name": "x"}, {"from_name": "label", "to_name": "label"}]}
    if setting == "buffer":
        args.update(shuffle_scope="buffer", num_shuffle_buffer_elements=10_000, num_filenames_shuffle_buffer=16,
                    num_mix_files=4)
    elif setting == "global":
        args["shuffle_scope"] = "global"
    if resume:
        args["resume"] = resume
    return {"type": "independent", "model": {"inputs": ["x"], "targets": ["label"]}, "args": args}


def labels_of(batch) -> np.ndarray:
    return batch[1]["label"].numpy() if isinstance(batch[1], dict) else batch[1].numpy()


def epoch(input_fn, keep: bool = False):
    """(seconds, examples, the batches' labels when ``keep``) of one whole epoch from a fresh ``input_fn()``."""
    start = time.perf_counter()
    examples, kept = 0, []
    for batch in input_fn():
        labels = labels_of(batch)
        examples += labels.shape[0]
        if keep:
            kept.append(labels)
    return time.perf_counter() - start, examples, kept


def check_epoch(setting: str, batches: list, records: int) -> str:
    """'' when the epoch holds every record once (and, shuffled, not in file order), else what is wrong."""
    got = np.concatenate(batches) if batches else np.zeros(0, np.int64)
    if not np.array_equal(np.sort(got), np.arange(records)):
        return f"{setting}: {got.size:,} labels, not every record once"
    if setting != "sequential" and np.array_equal(got, np.arange(records)):
        return f"{setting}: the epoch is in file order"
    return ""


def throughput(directory: str, records: int, rounds: int, problems: list) -> tuple[dict, dict]:
    """setting -> seconds of each round; setting -> the untimed epoch's batches (labels)."""
    fns = {s: batchloaders.build_input_fn(config(directory, s)) for s in SETTINGS}
    reference = {}
    for s in SETTINGS:
        seconds, _, reference[s] = epoch(fns[s], keep=True)
        print(f"  {s}: untimed epoch {seconds:.2f} s", file=sys.stderr, flush=True)
        if problem := check_epoch(s, reference[s], records):
            problems.append(problem)
    times = {s: [] for s in SETTINGS}
    for r in range(rounds):
        for s in SETTINGS[r % 3:] + SETTINGS[:r % 3]:
            seconds, examples, _ = epoch(fns[s])
            if examples != records:
                problems.append(f"{s}: round {r}: {examples:,} examples, expected {records:,}")
            times[s].append(seconds)
    return times, reference


def restore(directory: str, setting: str, at: int, reference: list, repeats: int, problems: list) -> list[float]:
    """Seconds from the restoring ``input_fn`` call to its first batch, per repeat (a fresh input_fn each)."""
    out = []
    for _ in range(repeats):
        input_fn = batchloaders.build_input_fn(config(directory, setting, resume="replay"))
        start = time.perf_counter()
        dataset = (input_fn(start_position=at * BATCH) if setting == "global" else input_fn(skip_batches=at))
        first = next(iter(dataset))
        out.append(time.perf_counter() - start)
        if not np.array_equal(labels_of(first), reference[at]):
            problems.append(f"{setting}: the first batch restored at batch {at} is not batch {at} of the epoch")
        del dataset, first, input_fn
    return out


def state_bytes(directory: str, setting: str) -> tuple[int, dict]:
    batches = batchloaders.ResumableIterator(batchloaders.build_input_fn(config(directory, setting, resume="replay")))
    for _ in range(10):
        next(batches)
    state = batches.get_state()
    return len(json.dumps(state)), state


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=DATA, help="where the datasets are written (once)")
    parser.add_argument("--records", type=int, default=100_000, help="records per dataset")
    parser.add_argument("--sizes", type=int, nargs="+", default=[750, 64],
                        help="float32 values of x per record (750: about 3 KB a record, 64: about 300 B)")
    parser.add_argument("--rounds", type=int, default=3, help="timed epochs per setting")
    parser.add_argument("--repeats", type=int, default=5, help="restores timed per setting and position")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    results = {"load_start": os.getloadavg(), "records": args.records, "files": FILES, "batch": BATCH,
               "rounds": args.rounds, "repeats": args.repeats, "tensorflow": tf.__version__, "sizes": []}
    print(f"load average {load()} (1, 5, 15 min); {args.records:,} records over {FILES} files per size; "
          f"{os.cpu_count()} CPUs; TensorFlow {tf.__version__}", flush=True)
    problems: list[str] = []
    tables = ([], [], [])
    for floats in args.sizes:
        directory, size = write_data(args.data, args.records, floats)
        per_record = size / args.records
        label = f"{per_record / 1000:.1f} KB" if per_record >= 1000 else f"{per_record:.0f} B"
        print(f"{label} ({floats} floats): {size:,} bytes in {directory}; load average {load()}", flush=True)
        times, reference = throughput(directory, args.records, args.rounds, problems)
        rates = {s: args.records / statistics.median(times[s]) for s in SETTINGS}
        for s in SETTINGS:
            tables[0].append(f"| {label} | {s} | {rates[s]:,.0f} | {rates[s] * per_record / 1e6:,.0f} | "
                             f"{rates[s] / rates['sequential']:.2f} |")
        total = len(reference["global"])
        restores = {}
        for fraction in FRACTIONS:
            at = int(fraction * total)
            for s in ("global", "buffer"):
                restores[f"{s}@{fraction}"] = restore(directory, s, at, reference[s], args.repeats, problems)
            where = f"{fraction:.0%} (batch {at:,} of {total:,})" if at else "start (K = 0)"
            tables[1].append(f"| {label} | {where} | "
                             f"{statistics.median(restores[f'global@{fraction}']) * 1e3:,.0f} ms | "
                             f"{statistics.median(restores[f'buffer@{fraction}']) * 1e3:,.0f} ms |")
        states = {s: state_bytes(directory, s) for s in ("global", "buffer")}
        tables[2].append(f"| {label} | {states['global'][0]} B | {states['buffer'][0]} B | "
                         f"`{json.dumps(states['global'][1])}` |")
        results["sizes"].append({"floats": floats, "bytes_per_record": per_record, "data_bytes": size,
                                 "load": os.getloadavg(), "round_seconds": times, "examples_per_s": rates,
                                 "restore_seconds": restores, "batches_per_epoch": total,
                                 "state": {s: {"bytes": n, "state": st} for s, (n, st) in states.items()}})
    results.update(load_end=os.getloadavg(), seconds=time.perf_counter() - started, problems=problems)
    print(f"\nthroughput, median of {args.rounds} epochs (x sequential: the same run's sequential reading)\n")
    print("| record | setting | examples/s | MB/s | x sequential |")
    print("| --- | --- | ---: | ---: | ---: |")
    print("\n".join(tables[0]))
    print(f"\nrestore (resume: replay) to the first batch, median of {args.repeats}\n")
    print("| record | position | global: `start_position` | buffer: `skip_batches` |")
    print("| --- | --- | ---: | ---: |")
    print("\n".join(tables[1]))
    print("\nget_state() after 10 batches, as JSON\n")
    print("| record | global | buffer | global's state |")
    print("| --- | ---: | ---: | --- |")
    print("\n".join(tables[2]))
    print(f"\nload average at the end {load()}; {results['seconds']:.0f} s")
    for p in problems:
        print(f"PROBLEM: {p}")
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as f:
        json.dump(results, f, indent=1)
    return int(bool(problems))


if __name__ == "__main__":
    sys.exit(main())
